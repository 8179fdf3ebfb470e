package harness

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/bench/check"
	"github.com/seed83556561/mirrord/bench/load"
	"github.com/seed83556561/mirrord/internal/testkit/realkafka"
)

// Sides of the benchmark.
const (
	Mirrord = "mirrord"
	// MirrordTxn is mirrord in transactional delivery (delivery =
	// "transactional"): its progress is read from the checkpoints it
	// commits with the data, since the destination's end offsets count
	// its transaction markers too.
	MirrordTxn = "mirrord-txn"
	Peer       = "peer"
	// MM2EOS and MM2 are MirrorMaker 2 in dedicated mode with and without
	// exactly.once.source.support (kafka backend only).
	MM2EOS = "mm2-eos"
	MM2    = "mm2"
)

// rebatched reports whether side produces the records again, in batches of
// its own (check.Topic): the peer and MirrorMaker; mirrord forwards the
// source's batches.
func rebatched(side string) bool { return side != Mirrord && side != MirrordTxn }

// Profiles of the source data (Config.Profile).
const (
	ProfileDefault        = "default"         // 1 MiB producer batches, 10 ms linger, 6 partitions
	ProfileSmallBatches   = "small-batches"   // producer linger 0 and 4 KiB batches: a few records per batch
	ProfileManyPartitions = "many-partitions" // 1,000 partitions per topic
)

// Profile defaults.
const (
	SmallBatchBytes     = int32(4 << 10)
	ManyPartitionsCount = int32(1000)
)

// Defaults of Config.
const (
	DefaultSize             = int64(1 << 30)
	DefaultRuns             = 3
	DefaultMaxBufferedBytes = int64(64 << 20)
	DefaultRunTimeout       = 30 * time.Minute
	DefaultStopTimeout      = time.Minute
	DefaultPollInterval     = 50 * time.Millisecond
)

// Config says what to benchmark.
type Config struct {
	// Backend is BackendKfake (default) or BackendKafka.
	Backend string
	// KafkaVersion is the brokers' version on the kafka backend (default
	// realkafka.Kafka4); MM2Version MirrorMaker's (default MM2Version).
	KafkaVersion, MM2Version string
	// BrokerHeap and MM2Heap are the JVM heaps of each broker and of
	// MirrorMaker (default DefaultBrokerHeap, DefaultMM2Heap).
	BrokerHeap, MM2Heap string
	// MM2Tasks is MirrorMaker's tasks.max (0: the machine's CPUs, like the
	// peer's tasks).
	MM2Tasks int
	// MM2Props are more MirrorMaker properties (MM2Link.Extra), for a
	// tuned MirrorMaker: producer.batch.size, producer.linger.ms, ...
	MM2Props map[string]string
	// MirrordLink are more keys of the mirrord sides' link (the HCL
	// values as written, quotes included): `checkpoint_interval =
	// "500ms"` for a transactional link's shorter latency.
	MirrordLink map[string]string

	Size       int64    // source bytes of values over all codec topics; default 1 GiB
	Runs       int      // per side and codec; default 3
	Codecs     []string // default load.Codecs
	Partitions int32    // per topic; default load.DefaultPartitions (ManyPartitionsCount for that profile)
	// Sides are the mirrors, in this order within a round. Default:
	// Mirrord, Peer on kfake; Mirrord, Peer, MM2EOS, MM2 on kafka.
	Sides   []string
	Brokers int // per kfake cluster; default 1 (the kafka backend runs one broker per cluster)
	// Profile shapes the source data: ProfileDefault, ProfileSmallBatches
	// or ProfileManyPartitions. LoadBatchBytes and LoadLinger, when set,
	// override the profile's producer batch size and linger (negative:
	// none).
	Profile        string
	LoadBatchBytes int32
	LoadLinger     time.Duration
	// LatencyRate (records per second), LatencyDuration and LatencyWarmup
	// shape ProfileLatency's runs (defaults DefaultLatencyRate,
	// DefaultLatencyDuration, DefaultLatencyWarmup).
	LatencyRate                    int
	LatencyDuration, LatencyWarmup time.Duration

	MaxBufferedBytes int64 // mirrord's max_buffered_bytes and the peer's producer buffer; default 64 MiB
	PeerTasks        int   // the peer's consumer-producer pairs; 0: its GOMAXPROCS

	Verify             bool   // compare each destination topic with its source record by record after the run
	TransformBenchtime string // -benchtime of the transform benchmarks; "" skips them

	WorkDir     string // logs, configs, cluster files and binaries; "" a temporary directory
	Keep        bool   // keep WorkDir
	ModuleDir   string // the mirrord module; "" the one holding the working directory
	RunTimeout  time.Duration
	StopTimeout time.Duration
	LogLevel    string // of mirrord and the peer; default "info"

	Progress io.Writer // one line per step; nil discards
}

func (c *Config) defaults() {
	if c.Backend == "" {
		c.Backend = BackendKfake
	}
	if c.KafkaVersion == "" {
		c.KafkaVersion = realkafka.Kafka4
	}
	if c.MM2Version == "" {
		c.MM2Version = MM2Version
	}
	if c.MM2Heap == "" {
		c.MM2Heap = DefaultMM2Heap
	}
	if c.MM2Tasks == 0 {
		c.MM2Tasks = runtime.NumCPU()
	}
	if c.Profile == "" {
		c.Profile = ProfileDefault
	}
	switch c.Profile {
	case ProfileSmallBatches:
		if c.LoadBatchBytes == 0 {
			c.LoadBatchBytes = SmallBatchBytes
		}
		if c.LoadLinger == 0 {
			c.LoadLinger = -1
		}
	case ProfileManyPartitions:
		if c.Partitions == 0 {
			c.Partitions = ManyPartitionsCount
		}
	case ProfileLatency:
		if c.Codecs == nil {
			c.Codecs = []string{load.None}
		}
		if c.LatencyRate == 0 {
			c.LatencyRate = DefaultLatencyRate
		}
		if c.LatencyDuration == 0 {
			c.LatencyDuration = DefaultLatencyDuration
		}
		if c.LatencyWarmup == 0 {
			c.LatencyWarmup = DefaultLatencyWarmup
		}
	}
	if c.Size == 0 {
		c.Size = DefaultSize
	}
	if c.Runs == 0 {
		c.Runs = DefaultRuns
	}
	if c.Codecs == nil {
		c.Codecs = load.Codecs
	}
	if c.Partitions == 0 {
		c.Partitions = load.DefaultPartitions
	}
	if c.Sides == nil {
		c.Sides = []string{Mirrord, MirrordTxn, Peer}
		if c.Backend == BackendKafka {
			c.Sides = []string{Mirrord, MirrordTxn, Peer, MM2EOS, MM2}
		}
	}
	if c.MaxBufferedBytes == 0 {
		c.MaxBufferedBytes = DefaultMaxBufferedBytes
	}
	if c.RunTimeout == 0 {
		c.RunTimeout = DefaultRunTimeout
	}
	if c.StopTimeout == 0 {
		c.StopTimeout = DefaultStopTimeout
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
}

func (c *Config) validate() error {
	var errs []error
	if c.Runs < 1 {
		errs = append(errs, fmt.Errorf("runs is %d, want at least 1", c.Runs))
	}
	if len(c.Codecs) == 0 {
		errs = append(errs, errors.New("no codecs"))
	}
	for _, codec := range c.Codecs {
		if _, err := load.Codec(codec); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Size < int64(len(c.Codecs))*load.DefaultValueSize {
		errs = append(errs, fmt.Errorf("size %d is below one value per topic", c.Size))
	}
	if c.MaxBufferedBytes < 1<<20 {
		errs = append(errs, fmt.Errorf("max buffered bytes %d is below mirrord's minimum of 1 MiB", c.MaxBufferedBytes))
	}
	if c.Backend != BackendKfake && c.Backend != BackendKafka {
		errs = append(errs, fmt.Errorf("backend %q: want %s or %s", c.Backend, BackendKfake, BackendKafka))
	}
	for _, side := range c.Sides {
		switch side {
		case Mirrord, MirrordTxn, Peer:
		case MM2, MM2EOS:
			if c.Backend != BackendKafka {
				errs = append(errs, fmt.Errorf("side %q runs against real Kafka only: add -backend %s", side, BackendKafka))
			}
		default:
			errs = append(errs, fmt.Errorf("side %q: want %s, %s, %s, %s or %s", side, Mirrord, MirrordTxn, Peer, MM2EOS, MM2))
		}
	}
	switch c.Profile {
	case ProfileDefault, ProfileSmallBatches, ProfileManyPartitions:
	case ProfileLatency:
		if c.LatencyRate < 1 || c.LatencyDuration <= 0 || c.LatencyWarmup < 0 {
			errs = append(errs, fmt.Errorf("latency profile: rate %d/s, duration %s, warm-up %s: want a positive rate and duration", c.LatencyRate, c.LatencyDuration, c.LatencyWarmup))
		}
	default:
		errs = append(errs, fmt.Errorf("profile %q: want %s, %s, %s or %s", c.Profile, ProfileDefault, ProfileSmallBatches, ProfileManyPartitions, ProfileLatency))
	}
	if c.Backend == BackendKafka && c.Brokers > 1 {
		errs = append(errs, fmt.Errorf("brokers is %d: the kafka backend runs one broker per cluster", c.Brokers))
	}
	if c.MM2Tasks < 0 {
		errs = append(errs, fmt.Errorf("mm2 tasks is %d, want 0 or more", c.MM2Tasks))
	}
	if len(c.Sides) == 0 {
		errs = append(errs, errors.New("no sides"))
	}
	if c.PeerTasks < 0 {
		errs = append(errs, fmt.Errorf("peer tasks is %d, want 0 or more", c.PeerTasks))
	}
	return errors.Join(errs...)
}

// Sample is one run of one mirror.
type Sample struct {
	Side        string
	Codec       string
	Run         int // 1-based, per side and codec
	Wall        time.Duration
	SourceBytes int64 // the source topic's log bytes, as stored (compressed)
	Records     int64
	User, Sys   time.Duration // of the mirror process
	MaxRSS      int64         // peak resident set of the mirror process (VmHWM), bytes

	// SourceBrokerCPU and DestBrokerCPU are the kfake processes' CPU
	// time during the run's wall time: what the mirror cost the
	// brokers, and whether they, not the mirror, bounded its speed.
	SourceBrokerCPU, DestBrokerCPU time.Duration
	// MachineCPU is the CPU time of every process on the machine during
	// the run's wall time: above the mirror's and the brokers', it shows
	// other load competing with the benchmark.
	MachineCPU time.Duration

	// Steady is the part of the run from the first poll that saw mirrored
	// data at the destination to the end; SteadyBytes the source bytes
	// mirrored in it (the share of records still missing at its start,
	// times the topic's bytes), SteadyCPU the mirror process's CPU time in
	// it (/proc/PID/stat). They leave out the mirror's start (a JVM's
	// class loading and JIT, Connect's group join and internal topics,
	// mirrord's PREPARING) and its stop: the rate of a mirror that runs
	// all the time. Steady is 0 when the first poll with data already
	// found everything.
	Steady      time.Duration
	SteadyBytes float64
	SteadyCPU   time.Duration
}

// SteadyMBps is source megabytes per second of the steady part, or 0.
func (s Sample) SteadyMBps() float64 {
	if s.Steady <= 0 {
		return 0
	}
	return s.SteadyBytes / 1e6 / s.Steady.Seconds()
}

// SteadyCPUPerGB is CPU seconds per source gigabyte in the steady part, or 0.
func (s Sample) SteadyCPUPerGB() float64 {
	if s.Steady <= 0 || s.SteadyBytes <= 0 {
		return 0
	}
	return s.SteadyCPU.Seconds() / (s.SteadyBytes / 1e9)
}

// CPU is the mirror process's user and system time.
func (s Sample) CPU() time.Duration { return s.User + s.Sys }

// MBps is source megabytes (10^6) per second of wall time.
func (s Sample) MBps() float64 { return float64(s.SourceBytes) / 1e6 / s.Wall.Seconds() }

// CPUPerGB is CPU seconds per source gigabyte (10^9).
func (s Sample) CPUPerGB() float64 { return s.CPU().Seconds() / (float64(s.SourceBytes) / 1e9) }

// DestBrokerCPUPerGB is the destination broker's CPU seconds during the
// run per GB of the source topic: what the mirror cost the cluster it
// writes to (a broker's cost is per batch, so a mirror that appends many
// small batches costs more).
func (s Sample) DestBrokerCPUPerGB() float64 {
	return s.DestBrokerCPU.Seconds() / (float64(s.SourceBytes) / 1e9)
}

// Busy is how many cores the mirror and the two brokers kept busy on
// average during the run.
func (s Sample) Busy() float64 {
	return (s.CPU() + s.SourceBrokerCPU + s.DestBrokerCPU).Seconds() / s.Wall.Seconds()
}

// MachineBusy is how many cores all processes of the machine kept busy on
// average during the run.
func (s Sample) MachineBusy() float64 { return s.MachineCPU.Seconds() / s.Wall.Seconds() }

// SourceTopic is one loaded topic with its stored size.
type SourceTopic struct {
	load.Topic
	Bytes int64   // log bytes, as stored
	Ends  []int64 // end offset by partition
}

// Report is the outcome of Run.
type Report struct {
	Config    Config
	Started   time.Time
	LoadTime  time.Duration
	Topics    []SourceTopic
	Samples   []Sample
	Latency   []LatencySample // ProfileLatency's runs
	Transform []TransformRatio
	Host      Host
	// LoadBefore and LoadAfter are the machine's load averages (1, 5,
	// 15 minutes) when the benchmark started and after its last run.
	LoadBefore, LoadAfter string
}

// Run runs the benchmark.
func Run(ctx context.Context, cfg Config) (_ *Report, err error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	rep := &Report{Config: cfg, Started: time.Now(), Host: host(), LoadBefore: loadAvg()}
	say := func(format string, args ...any) {
		fmt.Fprintf(cfg.Progress, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}
	if cfg.ModuleDir == "" {
		if cfg.ModuleDir, err = ModuleDir(ctx); err != nil {
			return nil, err
		}
	}
	if cfg.WorkDir == "" {
		if cfg.WorkDir, err = os.MkdirTemp("", "mirrord-bench-"); err != nil {
			return nil, fmt.Errorf("bench: work directory: %w", err)
		}
		if !cfg.Keep {
			defer func(dir string) { _ = os.RemoveAll(dir) }(cfg.WorkDir) // best effort, like any temp directory
		}
	}
	for _, d := range []string{"bin", "logs", "source", "destination"} {
		if err := os.MkdirAll(filepath.Join(cfg.WorkDir, d), 0o755); err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
	}
	say("work directory %s", cfg.WorkDir)

	say("building mirrord, kfakeserver and peermirror")
	bins, err := Build(ctx, cfg.ModuleDir, filepath.Join(cfg.WorkDir, "bin"))
	if err != nil {
		return nil, err
	}
	if slices.Contains(cfg.Sides, Mirrord) || slices.Contains(cfg.Sides, MirrordTxn) {
		if err := hasRun(ctx, bins.Mirrord); err != nil {
			return nil, err
		}
	}
	b := &bench{cfg: cfg, bins: bins, say: say, rep: rep}
	if slices.Contains(cfg.Sides, MM2) || slices.Contains(cfg.Sides, MM2EOS) {
		if b.java, err = realkafka.Java(ctx); err != nil {
			return nil, err
		}
		say("resolving MirrorMaker %s (org.apache.kafka:connect-mirror, once per machine)", cfg.MM2Version)
		if b.mm2Jars, err = realkafka.Resolve(ctx, MM2Spec(cfg.MM2Version)); err != nil {
			return nil, err
		}
	}

	start := func(name string) (*Cluster, error) {
		dir := filepath.Join(cfg.WorkDir, name)
		if cfg.Backend == BackendKafka {
			return StartKafka(ctx, name, newClusterID(), cfg.KafkaVersion, cfg.BrokerHeap, dir)
		}
		return StartCluster(ctx, bins.KfakeServer, name, newClusterID(), cfg.Brokers, dir, filepath.Join(cfg.WorkDir, "logs", name+".log"))
	}
	if cfg.Backend == BackendKafka {
		say("starting two Apache Kafka %s clusters (one broker each, heap %s)", cfg.KafkaVersion, orDefault(cfg.BrokerHeap, DefaultBrokerHeap))
	}
	if b.src, err = start("source"); err != nil {
		return nil, err
	}
	defer stopCluster(b.src, &err)
	if b.dst, err = start("destination"); err != nil {
		return nil, err
	}
	defer stopCluster(b.dst, &err)
	say("source cluster %s on %s, destination cluster %s on %s", b.src.ID, strings.Join(b.src.Addrs, ","), b.dst.ID, strings.Join(b.dst.Addrs, ","))

	if b.dstCl, err = b.dst.PollClient(); err != nil {
		return nil, err
	}
	defer b.dstCl.Close()

	id := 0
	if cfg.Profile == ProfileLatency {
		for run := 1; run <= cfg.Runs; run++ {
			for _, codec := range cfg.Codecs {
				for _, side := range cfg.Sides {
					id++
					var ls LatencySample
					if ls, err = b.latencyRun(ctx, side, codec, run, id); err != nil {
						return nil, err
					}
					rep.Latency = append(rep.Latency, ls)
					say("%-7s %-4s latency run %d: %d records, p50 %s, p99 %s, max %s (source append p50 %s, p99 %s)",
						side, codec, run, ls.Records, ls.P50, ls.P99, ls.Max, ls.SourceP50, ls.SourceP99)
				}
			}
		}
		cfg.TransformBenchtime = ""
	}
	if cfg.Profile != ProfileLatency {
		if err = b.load(ctx); err != nil {
			return nil, err
		}
	}
	for run := 1; run <= cfg.Runs && cfg.Profile != ProfileLatency; run++ {
		for _, top := range rep.Topics {
			for _, side := range cfg.Sides {
				id++
				var s Sample
				if s, err = b.run(ctx, side, top, run, id); err != nil {
					return nil, err
				}
				rep.Samples = append(rep.Samples, s)
				say("%-7s %-4s run %d: %6.2fs  %7.1f MB/s (steady %7.1f)  %6.2f CPU s/GB (steady %6.2f)  peak RSS %4d MiB",
					side, top.Codec, run, s.Wall.Seconds(), s.MBps(), s.SteadyMBps(), s.CPUPerGB(), s.SteadyCPUPerGB(), s.MaxRSS>>20)
			}
		}
	}
	rep.LoadAfter = loadAvg()
	if err = b.src.Stop(); err != nil {
		return nil, err
	}
	if err = b.dst.Stop(); err != nil {
		return nil, err
	}
	if cfg.TransformBenchtime != "" {
		say("go test -bench 'Rewrite|Memmove' -benchtime %s ./transform", cfg.TransformBenchtime)
		if rep.Transform, err = TransformBench(ctx, cfg.ModuleDir, cfg.TransformBenchtime); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// stopCluster stops c when Run returns (Run stops both clusters itself
// before it succeeds; stopping again only reports the same outcome); its
// error becomes Run's if Run had none.
func stopCluster(c *Cluster, runErr *error) {
	if err := c.Stop(); err != nil && *runErr == nil {
		*runErr = err
	}
}

// hasRun checks that the mirrord binary has the run command.
func hasRun(ctx context.Context, bin string) error {
	out, _ := execOutput(ctx, bin, "run", "-h")
	if strings.Contains(out, "unknown command") {
		return fmt.Errorf("bench: %s has no run command (is cmd/mirrord/run.go in this checkout?):\n%s", bin, out)
	}
	return nil
}

// newClusterID is a fresh random UUID in Kafka's 22-character base64url
// form, as a real cluster reports.
func newClusterID() string {
	var u [16]byte
	_, _ = rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	return base64.RawURLEncoding.EncodeToString(u[:])
}

// bench is the state of one Run.
type bench struct {
	cfg      Config
	bins     Binaries
	src, dst *Cluster
	dstCl    *kgo.Client // polls the destination
	say      func(string, ...any)
	rep      *Report
	java     string          // for MirrorMaker
	mm2Jars  *realkafka.Jars // MirrorMaker's classpath
}

// load fills the source and records each topic's size and end offsets.
func (b *bench) load(ctx context.Context) error {
	b.say("loading %d MiB of values into %d topics of %d partitions (%v)", b.cfg.Size>>20, len(b.cfg.Codecs), b.cfg.Partitions, b.cfg.Codecs)
	start := time.Now()
	lc := load.Config{Codecs: b.cfg.Codecs, BytesPerTopic: b.cfg.Size / int64(len(b.cfg.Codecs)), Partitions: b.cfg.Partitions,
		BatchMaxBytes: b.cfg.LoadBatchBytes, Linger: b.cfg.LoadLinger}
	topics, err := LoadSourceWith(ctx, b.src, lc)
	if err != nil {
		return err
	}
	b.rep.LoadTime = time.Since(start)
	b.rep.Topics = topics
	for _, t := range topics {
		b.say("loaded %s: %d records, %d MiB payload, %d MiB stored (%.2fx)", t.Name, t.Records, t.PayloadBytes>>20, t.Bytes>>20, float64(t.PayloadBytes)/float64(t.Bytes))
	}
	b.say("loaded in %s", b.rep.LoadTime.Round(time.Millisecond))
	return nil
}

// LoadSource fills src with size bytes of values spread over one topic per
// codec (see package load) and returns each topic with its stored size and
// end offsets.
func LoadSource(ctx context.Context, src *Cluster, codecs []string, size int64, partitions int32) ([]SourceTopic, error) {
	return LoadSourceWith(ctx, src, load.Config{Codecs: codecs, BytesPerTopic: size / int64(len(codecs)), Partitions: partitions})
}

// LoadSourceWith is LoadSource with the whole load configuration.
func LoadSourceWith(ctx context.Context, src *Cluster, cfg load.Config) ([]SourceTopic, error) {
	topics, err := load.Run(ctx, cfg, src.Opts())
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(src.Opts()...)
	if err != nil {
		return nil, fmt.Errorf("bench: source client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	names := make([]string, len(topics))
	for i, t := range topics {
		names[i] = t.Name
	}
	sizes, err := adm.DescribeAllLogDirs(ctx, kadm.TopicsSet{})
	if err != nil {
		return nil, fmt.Errorf("bench: describe source log dirs: %w", err)
	}
	ends, err := adm.ListEndOffsets(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("bench: source end offsets: %w", err)
	}
	var out []SourceTopic
	for _, t := range topics {
		st := SourceTopic{Topic: t}
		// Every broker reports its replicas (and kfake's brokers each
		// report the whole cluster): a partition's size is the largest
		// any broker reports.
		size := map[int32]int64{}
		for _, dirs := range sizes {
			dirs.EachPartition(func(d kadm.DescribedLogDirPartition) {
				if d.Topic == t.Name {
					size[d.Partition] = max(size[d.Partition], d.Size)
				}
			})
		}
		for _, n := range size {
			st.Bytes += n
		}
		var records int64
		for p := range t.Partitions {
			o, ok := ends.Lookup(t.Name, p)
			if !ok || o.Err != nil {
				return nil, fmt.Errorf("bench: source end offset of %s[%d]: %v", t.Name, p, o.Err) //nolint:errorlint // o.Err is nil when the partition is missing: %v prints <nil>, %w would print %!w(<nil>)
			}
			st.Ends = append(st.Ends, o.Offset)
			records += o.Offset
		}
		if records != t.Records || st.Bytes == 0 {
			return nil, fmt.Errorf("bench: source topic %s holds %d records in %d bytes after loading %d records", t.Name, records, st.Bytes, t.Records)
		}
		out = append(out, st)
	}
	return out, nil
}

// mirrorCmd is how one run starts its mirror and what it leaves behind.
type mirrorCmd struct {
	bin      string
	args     []string
	dstTopic string
	mm2      MM2Link          // MirrorMaker sides only
	cleanOK  func(error) bool // accepts the exit of a clean stop; nil: exit 0 only
	del      []string         // destination topics to delete after the run
	txnState string           // mirrord-txn: the state topic whose checkpoints tell its progress
	delSrc   []string         // source topics to delete after the run
}

// command prepares side's run number id over top: its configuration files
// in the work directory and its command line.
func (b *bench) command(side string, top SourceTopic, id int) (mirrorCmd, error) {
	dstTopic := fmt.Sprintf("%s.r%d", top.Name, id)
	stateTopic := fmt.Sprintf("__mirror_state.r%d", id)
	m := mirrorCmd{dstTopic: dstTopic, del: []string{dstTopic}}
	switch side {
	case Mirrord, MirrordTxn:
		delivery := ""
		if side == MirrordTxn {
			delivery = "transactional"
			m.txnState = stateTopic
		}
		hcl := MirrordConfig(MirrordLink{
			Delivery:         delivery,
			Name:             fmt.Sprintf("bench-r%d", id),
			Source:           b.src.Addrs,
			Dest:             b.dst.Addrs,
			Topics:           []string{top.Name},
			Rename:           fmt.Sprintf("{topic}.r%d", id),
			StateTopic:       stateTopic,
			MaxBufferedBytes: b.cfg.MaxBufferedBytes,
			LogLevel:         b.cfg.LogLevel,
			Extra:            b.cfg.MirrordLink,
		})
		path := filepath.Join(b.cfg.WorkDir, fmt.Sprintf("r%d-mirrord.hcl", id))
		if err := os.WriteFile(path, []byte(hcl), 0o644); err != nil {
			return m, fmt.Errorf("bench: write %s: %w", path, err)
		}
		m.bin, m.args = b.bins.Mirrord, []string{"run", "--config", path}
		m.del = append(m.del, stateTopic)
	case Peer:
		m.bin, m.args = b.bins.PeerMirror, []string{
			"-source", strings.Join(b.src.Addrs, ","),
			"-destination", strings.Join(b.dst.Addrs, ","),
			"-route", top.Name + "=" + dstTopic + "=" + top.Codec,
			"-tasks", fmt.Sprint(b.cfg.PeerTasks),
			"-max-buffered-bytes", fmt.Sprint(b.cfg.MaxBufferedBytes),
			"-log-level", b.cfg.LogLevel,
		}
	case MM2, MM2EOS:
		port, err := freePort()
		if err != nil {
			return m, err
		}
		// IdentityReplicationPolicy: the destination topic has the
		// source topic's name; the run deletes it, and waits until it is
		// gone, before the next run.
		m.dstTopic = top.Name
		m.mm2 = MM2Link{
			SourceAlias: fmt.Sprintf("s%d", id), TargetAlias: fmt.Sprintf("d%d", id),
			Source: b.src.Addrs, Target: b.dst.Addrs,
			Topic: top.Name, Codec: top.Codec, Tasks: b.cfg.MM2Tasks,
			ExactlyOnce: side == MM2EOS, RESTPort: port, Extra: b.cfg.MM2Props,
		}
		props := filepath.Join(b.cfg.WorkDir, fmt.Sprintf("r%d-%s.properties", id, side))
		log4j := filepath.Join(b.cfg.WorkDir, fmt.Sprintf("r%d-%s-log4j2.xml", id, side))
		if err := os.WriteFile(props, []byte(MM2Config(m.mm2)), 0o644); err != nil {
			return m, fmt.Errorf("bench: %w", err)
		}
		if err := os.WriteFile(log4j, []byte(mm2Log4j(b.cfg.LogLevel)), 0o644); err != nil {
			return m, fmt.Errorf("bench: %w", err)
		}
		m.bin, m.args = b.java, MM2Args(b.mm2Jars, b.cfg.MM2Heap, log4j, props)
		m.cleanOK = jvmStopped
		tgt, srcTopics := m.mm2.InternalTopics()
		m.del = append([]string{m.dstTopic}, tgt...)
		m.delSrc = srcTopics
	}
	return m, nil
}

// cleanUp deletes what a run created, to free the clusters' disk and
// memory for the next runs.
func (b *bench) cleanUp(ctx context.Context, m mirrorCmd) error {
	if err := deleteTopics(ctx, b.dstCl, m.del); err != nil {
		return fmt.Errorf("bench: delete destination topics: %w", err)
	}
	if len(m.delSrc) > 0 {
		srcCl, err := b.src.PollClient()
		if err != nil {
			return err
		}
		defer srcCl.Close()
		if err := deleteTopics(ctx, srcCl, m.delSrc); err != nil {
			return fmt.Errorf("bench: delete source topics: %w", err)
		}
	}
	return nil
}

// run mirrors one topic with one side into fresh destination topics named
// after id, and measures it.
func (b *bench) run(ctx context.Context, side string, top SourceTopic, run, id int) (Sample, error) {
	logPath := filepath.Join(b.cfg.WorkDir, "logs", fmt.Sprintf("r%d-%s-%s.log", id, side, top.Codec))
	m, err := b.command(side, top, id)
	if err != nil {
		return Sample{}, err
	}
	dstTopic, mm2 := m.dstTopic, m.mm2
	var offs *connectOffsets
	if side == MM2EOS {
		var err error
		if offs, err = newConnectOffsets(b.dst.Opts(), mm2.OffsetsTopic(), mm2.SourceAlias, top.Name); err != nil {
			return Sample{}, err
		}
		defer offs.close()
	}
	if side == MirrordTxn {
		var err error
		if offs, err = newCheckpointOffsets(b.dst.Opts(), m.txnState, top.Name); err != nil {
			return Sample{}, err
		}
		defer offs.close()
	}

	rctx, cancel := context.WithTimeout(ctx, b.cfg.RunTimeout)
	defer cancel()
	t0 := time.Now()
	srcCPU, dstCPU, allCPU := b.src.CPU(), b.dst.CPU(), machineCPU()
	p, err := start(side, m.bin, m.args, logPath, nil, true)
	if err != nil {
		return Sample{}, err
	}
	w, werr := waitMirrored(rctx, b.dstCl, top, dstTopic, p, offs)
	if werr != nil && p.exited() {
		werr = fmt.Errorf("%w: %v", werr, p.err)
	}
	wall := time.Since(t0)
	srcCPU, dstCPU, allCPU = b.src.CPU()-srcCPU, b.dst.CPU()-dstCPU, machineCPU()-allCPU
	ps, serr := p.stopAccepting(b.cfg.StopTimeout, m.cleanOK)
	if werr != nil {
		return Sample{}, fmt.Errorf("bench: %s run %d of %s into %s: %w; log %s:\n%s", side, run, top.Name, dstTopic, werr, logPath, tail(logPath))
	}
	if serr != nil {
		return Sample{}, fmt.Errorf("bench: %s run %d of %s: %w", side, run, top.Name, serr)
	}
	s := Sample{
		Side: side, Codec: top.Codec, Run: run, Wall: wall,
		SourceBytes: top.Bytes, Records: top.Records,
		User: ps.UserTime(), Sys: ps.SystemTime(), MaxRSS: p.peakRSS(),
		SourceBrokerCPU: srcCPU, DestBrokerCPU: dstCPU, MachineCPU: allCPU,
	}
	if !w.first.IsZero() && w.done.After(w.first) {
		s.Steady = w.done.Sub(w.first)
		s.SteadyBytes = float64(top.Bytes) * (1 - w.firstFrac)
		s.SteadyCPU = w.doneCPU - w.firstCPU
	}
	if b.cfg.Verify {
		n, err := check.Topic(ctx, b.src.Opts(), b.dst.Opts(), top.Name, dstTopic, rebatched(side))
		if err != nil {
			return s, fmt.Errorf("bench: %s run %d: %w", side, run, err)
		}
		if n != top.Records {
			return s, fmt.Errorf("bench: %s run %d: compared %d records of %s, want %d", side, run, n, dstTopic, top.Records)
		}
		b.say("%s run %d: %s holds the %d records of %s", side, run, dstTopic, n, top.Name)
	}
	if err := b.cleanUp(ctx, m); err != nil {
		return s, err
	}
	return s, nil
}

// jvmStopped accepts how a JVM ends after SIGTERM: its shutdown hooks ran
// and it exited with 128+15.
func jvmStopped(err error) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee) && ee.ExitCode() == 143
}

// freePort is a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("bench: pick a port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// deleteTopics deletes topics (those that exist) and waits until the
// cluster no longer lists any of them, so that a later run can create a
// topic of the same name.
func deleteTopics(ctx context.Context, cl *kgo.Client, topics []string) error {
	adm := kadm.NewClient(cl)
	resps, err := adm.DeleteTopics(ctx, topics...)
	if err != nil {
		return err
	}
	for _, r := range resps {
		if r.Err != nil && !errors.Is(r.Err, kerr.UnknownTopicOrPartition) {
			return fmt.Errorf("delete %s: %w", r.Topic, r.Err)
		}
	}
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		listed, err := adm.ListTopics(dctx, topics...)
		if err == nil {
			gone := true
			for _, t := range topics {
				if d, ok := listed[t]; ok && d.Err == nil {
					gone = false
				}
			}
			if gone {
				return nil
			}
		}
		select {
		case <-dctx.Done():
			return fmt.Errorf("topics %v still listed after their deletion: %w", topics, dctx.Err())
		case <-time.After(DefaultPollInterval):
		}
	}
}

// watch is what waitMirrored saw of a run: when the destination first held
// mirrored data, which share of the records it held then, and the mirror's
// CPU time then and at the end.
type watch struct {
	first, done       time.Time
	firstFrac         float64
	firstCPU, doneCPU time.Duration
}

// waitMirrored polls the destination until it holds every record of top,
// or the mirror p exits, or ctx ends. The destination's end offsets tell,
// unless offs is set (a mirror that writes transactionally, whose end
// offsets count transaction markers): then the committed Connect offsets
// tell.
func waitMirrored(ctx context.Context, dst *kgo.Client, top SourceTopic, dstTopic string, p *process, offs *connectOffsets) (watch, error) {
	var w watch
	var want int64
	for _, e := range top.Ends {
		want += e
	}
	adm := kadm.NewClient(dst)
	t := time.NewTicker(DefaultPollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return w, fmt.Errorf("destination not complete: %w", ctx.Err())
		case <-p.done:
			return w, errExited
		case <-t.C:
		}
		var (
			have     int64
			complete bool
			err      error
		)
		if offs != nil {
			pctx, cancel := context.WithTimeout(ctx, DefaultPollInterval/2)
			offs.poll(pctx)
			cancel()
			have, complete = offs.progress(top)
		} else {
			have, complete, err = endProgress(ctx, adm, top, dstTopic)
			if err != nil {
				if errors.Is(err, errDuplicates) {
					return w, err
				}
				continue // the topic may not exist yet
			}
		}
		now := time.Now()
		if w.first.IsZero() && have > 0 {
			w.first, w.firstFrac, w.firstCPU = now, float64(have)/float64(max(want, 1)), cpuTime(p.cmd.Process.Pid)
		}
		if complete {
			w.done, w.doneCPU = now, cpuTime(p.cmd.Process.Pid)
			return w, nil
		}
	}
}

// endProgress compares the destination's end offsets with the source's:
// the records the destination holds (at most the source's per partition),
// and whether it holds all.
func endProgress(ctx context.Context, adm *kadm.Client, top SourceTopic, dstTopic string) (int64, bool, error) {
	ends, err := adm.ListEndOffsets(ctx, dstTopic)
	if err != nil {
		return 0, false, err
	}
	var have int64
	complete := true
	for part, want := range top.Ends {
		o, ok := ends.Lookup(dstTopic, int32(part))
		if !ok || o.Err != nil {
			complete = false
			continue
		}
		if o.Offset > want {
			return 0, false, fmt.Errorf("%s[%d] ends at %d, source %s[%d] at %d: %w", dstTopic, part, o.Offset, top.Name, part, want, errDuplicates)
		}
		have += o.Offset
		if o.Offset < want {
			complete = false
		}
	}
	return have, complete, nil
}

// progress is the records the committed offsets cover, and whether they
// cover every record of top (a source partition's last offset is its end
// minus one: the bench's source holds no transaction markers).
func (o *connectOffsets) progress(top SourceTopic) (int64, bool) {
	var have int64
	complete := true
	for part, end := range top.Ends {
		last, ok := o.last[int32(part)]
		switch {
		case end == 0:
		case !ok:
			complete = false
		default:
			have += min(last+1, end)
			complete = complete && last+1 >= end
		}
	}
	return have, complete
}

// errDuplicates says that a destination partition holds more records than
// its source: a mirror wrote something twice.
var errDuplicates = errors.New("destination holds more records than the source")

// WaitMirrored polls the destination's end offsets until they reach the
// source's for every partition of top, or exited is closed (the mirror
// ended), or ctx ends. dst should be a Cluster.PollClient.
func WaitMirrored(ctx context.Context, dst *kgo.Client, top SourceTopic, dstTopic string, exited <-chan struct{}) error {
	adm := kadm.NewClient(dst)
	t := time.NewTicker(DefaultPollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("destination not complete: %w", ctx.Err())
		case <-exited:
			return errExited
		case <-t.C:
		}
		ends, err := adm.ListEndOffsets(ctx, dstTopic)
		if err != nil {
			continue // the topic may not exist yet
		}
		complete := true
		for part, want := range top.Ends {
			o, ok := ends.Lookup(dstTopic, int32(part))
			if !ok || o.Err != nil {
				complete = false
				break
			}
			if o.Offset > want {
				return fmt.Errorf("%s[%d] ends at %d, source %s[%d] at %d: %w", dstTopic, part, o.Offset, top.Name, part, want, errDuplicates)
			}
			if o.Offset < want {
				complete = false
			}
		}
		if complete {
			return nil
		}
	}
}

// errExited says that the mirror ended before the destination was complete.
var errExited = errors.New("mirror exited before the destination was complete")

// WaitCheckpointed waits until the checkpoints that a transactional link
// committed in stateTopic of the destination (dstOpts) say that every
// partition of top is mirrored, or exited is closed, or ctx ends: the
// destination's end offsets cannot say so, since they count transaction
// markers.
func WaitCheckpointed(ctx context.Context, dstOpts []kgo.Opt, stateTopic string, top SourceTopic, exited <-chan struct{}) error {
	offs, err := newCheckpointOffsets(dstOpts, stateTopic, top.Name)
	if err != nil {
		return err
	}
	defer offs.close()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("destination not complete: %w", ctx.Err())
		case <-exited:
			return errExited
		default:
		}
		pctx, cancel := context.WithTimeout(ctx, DefaultPollInterval)
		offs.poll(pctx)
		cancel()
		if _, complete := offs.progress(top); complete {
			return nil
		}
	}
}
