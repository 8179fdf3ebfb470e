package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/seed83556561/mirrord/agent"

	"github.com/seed83556561/mirrord/internal/kafka/dial"
	"github.com/seed83556561/mirrord/link"
)

func init() {
	register(command{
		name:    "offsets translate",
		summary: "translate a source position, or a source group's committed offsets, to the destination positions of a link's mirror (JSON)",
		run:     runOffsetsTranslate,
	})
}

// runOffsetsTranslate translates with the link's configuration alone: it
// reads the link's state topic and both clusters (link.NewOffline), so
// it works whether the agent runs or not. One position prints a
// translate.Result; --group prints a translate.GroupOffsets. Exit 1 when a
// translation failed (for a group: any of its partitions; the JSON names
// each error).
func runOffsetsTranslate(args []string, stdout, stderr io.Writer) int {
	const cmd = "offsets translate"
	fs := newFlagSet(cmd, "", stderr)
	path := fs.String("config", "", "mirrord HCL configuration file (required)")
	linkName := fs.String("link", "", "the link (required)")
	topic := fs.String("topic", "", "source topic of the position")
	partition := fs.Int("partition", -1, "source partition of the position")
	offset := fs.Int64("offset", -1, "the source position: the next offset a consumer would read")
	group := fs.String("group", "", "translate this source consumer group's committed offsets instead (every partition the link mirrors)")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up after this long")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	usageErr := func(msg string) int {
		fmt.Fprintf(stderr, "mirrord %s: %s\n", cmd, msg)
		fs.Usage()
		return exitUsage
	}
	position := set["topic"] || set["partition"] || set["offset"]
	switch {
	case fs.NArg() > 0:
		return usageErr(fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	case *path == "" || *linkName == "":
		return usageErr("need --config FILE and --link NAME")
	case *group != "" && position:
		return usageErr("use either --group or --topic, --partition and --offset, not both")
	case *group == "" && (*topic == "" || *partition < 0 || *offset < 0):
		return usageErr("need --topic, --partition and --offset (0 or more), or --group")
	}
	cfg, ok := loadConfig(cmd, *path, stderr)
	if !ok {
		return exitUsage
	}
	l, ok := cfg.Link(*linkName)
	if !ok {
		names := make([]string, 0, len(cfg.Links))
		for _, l := range cfg.Links {
			names = append(names, l.Name)
		}
		fmt.Fprintf(stderr, "mirrord %s: %s has no link %q; its links are: %s\n", cmd, *path, *linkName, strings.Join(names, ", "))
		return exitUsage
	}
	srcOpts, err := dial.Options(cfg.Clusters[l.Source])
	if err != nil {
		fmt.Fprintf(stderr, "mirrord %s: %v\n", cmd, err)
		return exitError
	}
	dstOpts, err := dial.Options(cfg.Clusters[l.Destination])
	if err != nil {
		fmt.Fprintf(stderr, "mirrord %s: %v\n", cmd, err)
		return exitError
	}
	ctx, stop := signalContext()
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	tr, err := link.NewOffline(ctx, agent.LinkConfig(cfg, l),
		link.Deps{SourceOpts: srcOpts, DestinationOpts: dstOpts})
	if err != nil {
		fmt.Fprintf(stderr, "mirrord %s: %v\n", cmd, err)
		return exitError
	}
	defer tr.Close()
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if *group != "" {
		gt, err := tr.Group(ctx, *group)
		if err != nil {
			fmt.Fprintf(stderr, "mirrord %s: %v\n", cmd, err)
			return exitError
		}
		_ = enc.Encode(gt)
		if n := gt.Failed(); n > 0 {
			fmt.Fprintf(stderr, "mirrord %s: %d of the %d offsets of group %q were not translated (see their \"error\")\n", cmd, n, len(gt.Partitions), *group)
			return exitError
		}
		if len(gt.Partitions) == 0 {
			fmt.Fprintf(stderr, "mirrord %s: group %q has no committed offset on a topic link %s mirrors\n", cmd, *group, l.Name)
		}
		return exitOK
	}
	t, err := tr.Translate(ctx, *topic, int32(*partition), *offset)
	if err != nil {
		fmt.Fprintf(stderr, "mirrord %s: %v\n", cmd, err)
		return exitError
	}
	_ = enc.Encode(t)
	return exitOK
}
