// Command bench measures mirrord against a record-level mirror (the way
// MirrorMaker-style tools work) on the same data, in one run; see
// bench/README.md. From the repository root:
//
//	go run ./bench/cmd/bench                 # 1 GiB, 3 runs per side and codec
//	go run ./bench/cmd/bench -size 256MiB -runs 5
//
// It prints progress to stderr and the report (Markdown tables) to stdout.
//
// Goroutines: main runs the benchmark (bench/harness) on the main goroutine
// until it ends or a signal cancels its context; the harness owns and waits
// for the child processes and their readers.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/seed83556561/mirrord/bench/harness"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// options are the flags that harness.Config does not hold as they are.
type options struct {
	size, buffered, codecs, sides, batch, mm2Props, mdLink *string
	samples                                                *bool
	linger                                                 *time.Duration
	partitions                                             *int
}

// flags defines the command's flags: into cfg where a field holds the
// value as it is, into the returned options where it must be parsed.
func flags(cfg *harness.Config) (*flag.FlagSet, options) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var (
		size     = fs.String("size", "1GiB", "source data over all codec topics: bytes, or a number with KiB, MiB, GiB")
		buffered = fs.String("max-buffered-bytes", "64MiB", "mirrord's max_buffered_bytes, and the peer's producer buffer")
		codecs   = fs.String("codecs", "", "codec topics to load and mirror (default lz4,zstd,none; none for -profile latency; also gzip, snappy)")
		samples  = fs.Bool("samples", true, "also print every run")
		sides    = fs.String("sides", "", "mirrors to run, in this order within each round: mirrord, mirrord-txn, peer, mm2-eos, mm2 (default: mirrord,mirrord-txn,peer on kfake; all five on kafka)")
		linger   = fs.Duration("load-linger", 0, "linger of the producers that load the source (default: the profile's; negative: none)")
		batch    = fs.String("load-batch-bytes", "", "batch size of the producers that load the source (default: the profile's)")
		mdLink   = fs.String("mirrord-link", "", "more keys of mirrord's link, KEY=VALUE,... with VALUE as HCL writes it (checkpoint_interval=\"500ms\")")
		mm2Props = fs.String("mm2-props", "", "more MirrorMaker 2 properties, KEY=VALUE,... (producer.* and consumer.* get the target's and source's alias)")
	)
	fs.StringVar(&cfg.Backend, "backend", harness.BackendKfake, "clusters: kfake (fakes, each in its own process) or kafka (Apache Kafka brokers, one JVM per cluster; MirrorMaker 2 sides)")
	fs.StringVar(&cfg.Profile, "profile", harness.ProfileDefault, "default, small-batches (source batches of linger 0, 4 KiB), many-partitions (1,000 partitions per topic) or latency (p50/p99 end to end at a steady rate)")
	fs.IntVar(&cfg.LatencyRate, "latency-rate", harness.DefaultLatencyRate, "latency profile: records per second")
	fs.DurationVar(&cfg.LatencyDuration, "latency-duration", harness.DefaultLatencyDuration, "latency profile: measured production per run")
	fs.DurationVar(&cfg.LatencyWarmup, "latency-warmup", harness.DefaultLatencyWarmup, "latency profile: time after the first record shows at the destination before the measured part")
	fs.StringVar(&cfg.KafkaVersion, "kafka-version", "", "Kafka version of the kafka backend's brokers (default: realkafka.Kafka4)")
	fs.StringVar(&cfg.MM2Version, "mm2-version", harness.MM2Version, "MirrorMaker 2 version (org.apache.kafka:connect-mirror)")
	fs.StringVar(&cfg.MM2Heap, "mm2-heap", harness.DefaultMM2Heap, "MirrorMaker 2's JVM heap (-Xms and -Xmx)")
	fs.StringVar(&cfg.BrokerHeap, "broker-heap", harness.DefaultBrokerHeap, "each Kafka broker's JVM heap")
	fs.IntVar(&cfg.MM2Tasks, "mm2-tasks", 0, "MirrorMaker 2's tasks.max (0: the machine's CPUs)")
	fs.IntVar(&cfg.Runs, "runs", harness.DefaultRuns, "runs per side and codec")
	partitions := fs.Int("partitions", 0, "partitions per topic (default: 6; 1,000 with -profile many-partitions)")
	fs.IntVar(&cfg.Brokers, "brokers", 1, "brokers per kfake cluster (one process each way)")
	fs.IntVar(&cfg.PeerTasks, "peer-tasks", 0, "the peer's consumer-producer pairs (0: GOMAXPROCS)")
	fs.BoolVar(&cfg.Verify, "verify", false, "compare every destination topic with its source record by record (not timed)")
	fs.StringVar(&cfg.TransformBenchtime, "transform-benchtime", "2s", "-benchtime of the transform benchmarks; empty skips them")
	fs.StringVar(&cfg.WorkDir, "workdir", "", "directory for binaries, logs and cluster files (default: a temporary one)")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the temporary work directory")
	fs.DurationVar(&cfg.RunTimeout, "run-timeout", harness.DefaultRunTimeout, "limit of one mirror run")
	fs.StringVar(&cfg.LogLevel, "log-level", "info", "log level of the mirrors (their logs are in the work directory)")
	return fs, options{size: size, buffered: buffered, codecs: codecs, sides: sides, batch: batch, mm2Props: mm2Props, mdLink: mdLink,
		samples: samples, linger: linger, partitions: partitions}
}

func run(args []string) int {
	var cfg harness.Config
	fs, o := flags(&cfg)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	size, buffered, codecs, sides, batch, mm2Props, mdLink := o.size, o.buffered, o.codecs, o.sides, o.batch, o.mm2Props, o.mdLink
	samples, linger, partitions := o.samples, o.linger, o.partitions
	var err error
	if cfg.Size, err = parseSize(*size); err != nil {
		fmt.Fprintf(os.Stderr, "bench: -size: %v\n", err)
		return 2
	}
	if cfg.MaxBufferedBytes, err = parseSize(*buffered); err != nil {
		fmt.Fprintf(os.Stderr, "bench: -max-buffered-bytes: %v\n", err)
		return 2
	}
	if *batch != "" {
		n, err := parseSize(*batch)
		if err != nil || n > 1<<30 {
			fmt.Fprintf(os.Stderr, "bench: -load-batch-bytes: %v\n", err)
			return 2
		}
		cfg.LoadBatchBytes = int32(n)
	}
	cfg.LoadLinger = *linger
	if *mm2Props != "" {
		cfg.MM2Props = map[string]string{}
		for kv := range strings.SplitSeq(*mm2Props, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || strings.TrimSpace(k) == "" {
				fmt.Fprintf(os.Stderr, "bench: -mm2-props: %q is not KEY=VALUE\n", kv)
				return 2
			}
			cfg.MM2Props[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	if *mdLink != "" {
		cfg.MirrordLink = map[string]string{}
		for kv := range strings.SplitSeq(*mdLink, ",") {
			k, v, ok := strings.Cut(kv, "=")
			k = strings.TrimSpace(k)
			if !ok || !hclKey.MatchString(k) || strings.TrimSpace(v) == "" {
				fmt.Fprintf(os.Stderr, "bench: -mirrord-link: %q is not KEY=VALUE with a link key (letters, digits, _)\n", kv)
				return 2
			}
			cfg.MirrordLink[k] = strings.TrimSpace(v)
		}
	}
	if *codecs != "" {
		cfg.Codecs = strings.Split(*codecs, ",")
	}
	if *sides != "" {
		cfg.Sides = strings.Split(*sides, ",")
	}
	cfg.Partitions = int32(*partitions)
	cfg.Progress = os.Stderr

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	rep, err := harness.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		return 1
	}
	fmt.Printf("Command: go run ./bench/cmd/bench %s\n\n", strings.Join(args, " "))
	rep.Write(os.Stdout)
	if *samples {
		fmt.Println()
		rep.WriteSamples(os.Stdout)
	}
	return 0
}

// hclKey is what a link key looks like (config.example.hcl).
var hclKey = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

var errSize = errors.New("want bytes or a number with KiB, MiB or GiB")

// parseSize reads "1GiB", "256MiB", "8MiB", "65536".
func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}, {"", 1}}
	for _, u := range units {
		num, ok := strings.CutSuffix(s, u.suffix)
		if !ok {
			continue
		}
		n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("%q: %w", s, errSize)
		}
		return int64(n * float64(u.mult)), nil
	}
	return 0, fmt.Errorf("%q: %w", s, errSize)
}
