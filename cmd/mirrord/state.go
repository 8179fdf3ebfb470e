package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/internal/kafka/dial"
	"github.com/seed83556561/mirrord/statestore"
)

func init() {
	register(command{
		name:    "state dump",
		summary: "print every committed record of a state topic as one JSON line",
		run:     runStateDump,
	})
}

// dumpLine is one record of the dump. Value is null for a tombstone. A
// record this build cannot decode has Error and its raw bytes in hex.
type dumpLine struct {
	Partition   int32  `json:"partition"`
	Offset      int64  `json:"offset"`
	TimestampMs int64  `json:"timestamp_ms"`
	Type        string `json:"type"`
	State       string `json:"state,omitempty"` // the link state's name, for link records
	Key         any    `json:"key,omitempty"`
	Value       any    `json:"value"`
	Error       string `json:"error,omitempty"`
	KeyHex      string `json:"key_hex,omitempty"`
	ValueHex    string `json:"value_hex,omitempty"`
}

func runStateDump(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("state dump", "", stderr)
	bootstrap := fs.String("bootstrap-servers", "", "destination cluster's brokers, comma-separated host:port (plaintext, no SASL; use --config for TLS and SASL)")
	topic := fs.String("topic", statestore.DefaultTopic, "state topic (with --config: the link's state_topic unless set)")
	cfgPath := fs.String("config", "", "mirrord HCL configuration file; the link's destination cluster and state topic are used")
	linkName := fs.String("link", "", "link whose state topic to dump (with --config)")
	timeout := fs.Duration("timeout", time.Minute, "give up after this long")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	usageErr := func(msg string) int {
		fmt.Fprintf(stderr, "mirrord state dump: %s\n", msg)
		fs.Usage()
		return exitUsage
	}
	switch {
	case fs.NArg() > 0:
		return usageErr(fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	case *cfgPath != "" && *bootstrap != "":
		return usageErr("use either --bootstrap-servers or --config, not both")
	case *cfgPath == "" && *bootstrap == "":
		return usageErr("need --bootstrap-servers, or --config and --link")
	case *cfgPath != "" && *linkName == "":
		return usageErr("--config needs --link")
	case *cfgPath == "" && *linkName != "":
		return usageErr("--link needs --config")
	}

	var opts []kgo.Opt
	if *cfgPath != "" {
		cfg, err := config.Load(*cfgPath)
		if err != nil {
			fmt.Fprintf(stderr, "mirrord state dump: %v\n", err)
			return exitError
		}
		l, ok := cfg.Link(*linkName)
		if !ok {
			fmt.Fprintf(stderr, "mirrord state dump: %s has no link %q\n", *cfgPath, *linkName)
			return exitError
		}
		opts, err = dial.Options(cfg.Clusters[l.Destination])
		if err != nil {
			fmt.Fprintf(stderr, "mirrord state dump: link %q destination: %v\n", l.Name, err)
			return exitError
		}
		if !set["topic"] {
			*topic = l.StateTopic
		}
	} else {
		var seeds []string
		for s := range strings.SplitSeq(*bootstrap, ",") {
			if s = strings.TrimSpace(s); s != "" {
				seeds = append(seeds, s)
			}
		}
		opts = []kgo.Opt{kgo.SeedBrokers(seeds...)}
	}

	store, err := statestore.New(statestore.Config{Topic: *topic}, statestore.Deps{
		ClientOpts: opts,
		Logger:     hclog.New(&hclog.LoggerOptions{Name: "mirrord", Output: stderr, Level: hclog.Info}),
	})
	if err != nil {
		fmt.Fprintf(stderr, "mirrord state dump: %v\n", err)
		return exitUsage
	}
	defer store.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	enc := json.NewEncoder(stdout)
	var corrupt int
	err = store.Scan(ctx, func(raw statestore.RawRecord) error {
		line := dumpRecord(raw)
		if line.Type == "corrupt" {
			corrupt++
		}
		return enc.Encode(line)
	})
	if err != nil {
		fmt.Fprintf(stderr, "mirrord state dump: %v\n", err)
		return exitError
	}
	if corrupt > 0 {
		fmt.Fprintf(stderr, "mirrord state dump: %d records of topic %q do not decode (see their \"error\")\n", corrupt, *topic)
		return exitError
	}
	return exitOK
}

// dumpRecord decodes one raw record into its dump line.
func dumpRecord(raw statestore.RawRecord) dumpLine {
	line := dumpLine{Partition: raw.Partition, Offset: raw.Offset, TimestampMs: raw.Timestamp.UnixMilli()}
	rec, err := statestore.Decode(raw.Key, raw.Value)
	if err != nil {
		line.Type = "corrupt"
		if errors.Is(err, statestore.ErrUnknownRecord) {
			line.Type = "unknown"
		}
		line.Error = err.Error()
		line.KeyHex = hex.EncodeToString(raw.Key)
		if raw.Value != nil {
			line.ValueHex = hex.EncodeToString(raw.Value)
		}
		return line
	}
	line.Type = rec.Key.Type().String()
	line.Key = rec.Key
	if rec.Value != nil {
		line.Value = rec.Value
		if lv, ok := rec.Value.(statestore.LinkValue); ok {
			line.State = lv.State.String()
		}
	}
	return line
}
