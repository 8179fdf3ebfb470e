// Command peermirror runs the benchmark's record-level mirror (package
// bench/peer) in its own process, so that its CPU time and peak RSS can be
// read from its rusage:
//
//	peermirror -source HOST:PORT -destination HOST:PORT -route bench.lz4=bench.lz4.r2=lz4
//
// It runs until SIGTERM or SIGINT and exits 0 after a clean stop, 1 when the
// mirror fails.
//
// Goroutines: main runs the mirror (bench/peer, which owns and waits for
// its own goroutines) until a signal cancels its context.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/bench/load"
	"github.com/seed83556561/mirrord/bench/peer"
)

// routes collects -route flags.
type routes []peer.Route

func (r *routes) String() string { return fmt.Sprint(*r) }

func (r *routes) Set(s string) error {
	parts := strings.Split(s, "=")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
		return fmt.Errorf("route %q: want SOURCE_TOPIC=DESTINATION_TOPIC=CODEC", s)
	}
	codec, err := load.Codec(parts[2])
	if err != nil {
		return fmt.Errorf("route %q: %w", s, err)
	}
	*r = append(*r, peer.Route{Source: parts[0], Destination: parts[1], Codec: codec})
	return nil
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("peermirror", flag.ContinueOnError)
	var (
		rs       routes
		source   = fs.String("source", "", "source bootstrap servers, comma-separated (required)")
		dest     = fs.String("destination", "", "destination bootstrap servers, comma-separated (required)")
		tasks    = fs.Int("tasks", 0, "consumer-producer pairs (0: GOMAXPROCS)")
		buffered = fs.Int64("max-buffered-bytes", peer.DefaultMaxBufferedBytes, "bytes of records the producers may hold")
		linger   = fs.Duration("linger", peer.DefaultLinger, "producer linger")
		level    = fs.String("log-level", "info", "trace, debug, info, warn or error")
	)
	fs.Var(&rs, "route", "SOURCE_TOPIC=DESTINATION_TOPIC=CODEC (lz4, zstd or none); repeatable, at least one")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *source == "" || *dest == "" || len(rs) == 0 {
		fmt.Fprintln(os.Stderr, "peermirror: -source, -destination and at least one -route are required")
		return 2
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "peermirror", Level: hclog.LevelFromString(*level), Output: os.Stderr})
	m, err := peer.New(peer.Config{Routes: rs, Tasks: *tasks, MaxBufferedBytes: *buffered, Linger: *linger}, peer.Deps{
		SourceOpts:      []kgo.Opt{kgo.SeedBrokers(strings.Split(*source, ",")...), kgo.ClientID("peermirror")},
		DestinationOpts: []kgo.Opt{kgo.SeedBrokers(strings.Split(*dest, ",")...), kgo.ClientID("peermirror")},
		Logger:          log,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "peermirror: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := m.Run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "peermirror: %v\n", err)
		return 1
	}
	log.Info("stopped", "records", m.Records())
	return 0
}
