package harness

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/bench/check"
	"github.com/seed83556561/mirrord/bench/load"
)

// Sides of the benchmark.
const (
	Mirrord = "mirrord"
	Peer    = "peer"
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
	Size       int64    // source bytes of values over all codec topics; default 1 GiB
	Runs       int      // per side and codec; default 3
	Codecs     []string // default load.Codecs
	Partitions int32    // per topic; default load.DefaultPartitions
	Sides      []string // Mirrord and Peer by default, in that order within a round
	Brokers    int      // per cluster; default 1

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
		c.Sides = []string{Mirrord, Peer}
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
	for _, side := range c.Sides {
		if side != Mirrord && side != Peer {
			errs = append(errs, fmt.Errorf("side %q: want %s or %s", side, Mirrord, Peer))
		}
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
}

// CPU is the mirror process's user and system time.
func (s Sample) CPU() time.Duration { return s.User + s.Sys }

// MBps is source megabytes (10^6) per second of wall time.
func (s Sample) MBps() float64 { return float64(s.SourceBytes) / 1e6 / s.Wall.Seconds() }

// CPUPerGB is CPU seconds per source gigabyte (10^9).
func (s Sample) CPUPerGB() float64 { return s.CPU().Seconds() / (float64(s.SourceBytes) / 1e9) }

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
			defer os.RemoveAll(cfg.WorkDir)
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
	if slices.Contains(cfg.Sides, Mirrord) {
		if err := hasRun(ctx, bins.Mirrord); err != nil {
			return nil, err
		}
	}

	src, err := StartCluster(ctx, bins.KfakeServer, "source", newClusterID(), cfg.Brokers, filepath.Join(cfg.WorkDir, "source"), filepath.Join(cfg.WorkDir, "logs", "source.log"))
	if err != nil {
		return nil, err
	}
	defer stopCluster(src, &err)
	dst, err := StartCluster(ctx, bins.KfakeServer, "destination", newClusterID(), cfg.Brokers, filepath.Join(cfg.WorkDir, "destination"), filepath.Join(cfg.WorkDir, "logs", "destination.log"))
	if err != nil {
		return nil, err
	}
	defer stopCluster(dst, &err)
	say("source cluster %s on %s, destination cluster %s on %s", src.ID, strings.Join(src.Addrs, ","), dst.ID, strings.Join(dst.Addrs, ","))

	b := &bench{cfg: cfg, bins: bins, src: src, dst: dst, say: say, rep: rep}
	if b.dstCl, err = dst.PollClient(); err != nil {
		return nil, err
	}
	defer b.dstCl.Close()

	if err = b.load(ctx); err != nil {
		return nil, err
	}
	id := 0
	for run := 1; run <= cfg.Runs; run++ {
		for _, top := range rep.Topics {
			for _, side := range cfg.Sides {
				id++
				var s Sample
				if s, err = b.run(ctx, side, top, run, id); err != nil {
					return nil, err
				}
				rep.Samples = append(rep.Samples, s)
				say("%-7s %-4s run %d: %6.2fs  %7.1f MB/s  %6.2f CPU s/GB  peak RSS %4d MiB",
					side, top.Codec, run, s.Wall.Seconds(), s.MBps(), s.CPUPerGB(), s.MaxRSS>>20)
			}
		}
	}
	rep.LoadAfter = loadAvg()
	if err = src.Stop(); err != nil {
		return nil, err
	}
	if err = dst.Stop(); err != nil {
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
}

// load fills the source and records each topic's size and end offsets.
func (b *bench) load(ctx context.Context) error {
	b.say("loading %d MiB of values into %d topics of %d partitions (%v)", b.cfg.Size>>20, len(b.cfg.Codecs), b.cfg.Partitions, b.cfg.Codecs)
	start := time.Now()
	topics, err := LoadSource(ctx, b.src, b.cfg.Codecs, b.cfg.Size, b.cfg.Partitions)
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
	per := size / int64(len(codecs))
	topics, err := load.Run(ctx, load.Config{Codecs: codecs, BytesPerTopic: per, Partitions: partitions}, src.Opts())
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
				return nil, fmt.Errorf("bench: source end offset of %s[%d]: %v", t.Name, p, o.Err)
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

// run mirrors one topic with one side into fresh destination topics named
// after id, and measures it.
func (b *bench) run(ctx context.Context, side string, top SourceTopic, run, id int) (Sample, error) {
	dstTopic := fmt.Sprintf("%s.r%d", top.Name, id)
	stateTopic := fmt.Sprintf("__mirror_state.r%d", id)
	logPath := filepath.Join(b.cfg.WorkDir, "logs", fmt.Sprintf("r%d-%s-%s.log", id, side, top.Codec))
	var (
		bin  string
		args []string
	)
	switch side {
	case Mirrord:
		hcl := MirrordConfig(MirrordLink{
			Name:             fmt.Sprintf("bench-r%d", id),
			Source:           b.src.Addrs,
			Dest:             b.dst.Addrs,
			Topics:           []string{top.Name},
			Rename:           fmt.Sprintf("{topic}.r%d", id),
			StateTopic:       stateTopic,
			MaxBufferedBytes: b.cfg.MaxBufferedBytes,
			LogLevel:         b.cfg.LogLevel,
		})
		path := filepath.Join(b.cfg.WorkDir, fmt.Sprintf("r%d-mirrord.hcl", id))
		if err := os.WriteFile(path, []byte(hcl), 0o644); err != nil {
			return Sample{}, fmt.Errorf("bench: write %s: %w", path, err)
		}
		bin, args = b.bins.Mirrord, []string{"run", "--config", path}
	case Peer:
		bin, args = b.bins.PeerMirror, []string{
			"-source", strings.Join(b.src.Addrs, ","),
			"-destination", strings.Join(b.dst.Addrs, ","),
			"-route", top.Name + "=" + dstTopic + "=" + top.Codec,
			"-tasks", fmt.Sprint(b.cfg.PeerTasks),
			"-max-buffered-bytes", fmt.Sprint(b.cfg.MaxBufferedBytes),
			"-log-level", b.cfg.LogLevel,
		}
	}

	rctx, cancel := context.WithTimeout(ctx, b.cfg.RunTimeout)
	defer cancel()
	t0 := time.Now()
	srcCPU, dstCPU, allCPU := b.src.CPU(), b.dst.CPU(), machineCPU()
	p, err := start(side, bin, args, logPath, nil, true)
	if err != nil {
		return Sample{}, err
	}
	werr := WaitMirrored(rctx, b.dstCl, top, dstTopic, p.done)
	if werr != nil && p.exited() {
		werr = fmt.Errorf("%w: %v", werr, p.err)
	}
	wall := time.Since(t0)
	srcCPU, dstCPU, allCPU = b.src.CPU()-srcCPU, b.dst.CPU()-dstCPU, machineCPU()-allCPU
	ps, serr := p.stop(b.cfg.StopTimeout)
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
	if b.cfg.Verify {
		n, err := check.Topic(ctx, b.src.Opts(), b.dst.Opts(), top.Name, dstTopic)
		if err != nil {
			return s, fmt.Errorf("bench: %s run %d: %w", side, run, err)
		}
		if n != top.Records {
			return s, fmt.Errorf("bench: %s run %d: compared %d records of %s, want %d", side, run, n, dstTopic, top.Records)
		}
		b.say("%s run %d: %s holds the %d records of %s", side, run, dstTopic, n, top.Name)
	}
	// Free the destination's disk and memory for the next runs.
	del := []string{dstTopic}
	if side == Mirrord {
		del = append(del, stateTopic)
	}
	resps, err := kadm.NewClient(b.dstCl).DeleteTopics(ctx, del...)
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		return s, fmt.Errorf("bench: delete destination topics %v: %w", del, err)
	}
	return s, nil
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
