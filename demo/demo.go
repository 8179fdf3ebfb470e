package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/link"
	"github.com/seed83556561/mirrord/verify"
)

// Defaults of Config.
const (
	DefaultDuration         = 20 * time.Second
	DefaultRate             = 10000 // records per second over all producers
	DefaultLogLevel         = "warn"
	DefaultProgressInterval = time.Second
	DefaultCatchUpTimeout   = 2 * time.Minute
)

// ErrInvalidConfig says the Config is unusable; the error lists every problem.
var ErrInvalidConfig = errors.New("invalid demo config")

// Config configures one demo run.
type Config struct {
	// Duration is how long the load runs (default DefaultDuration).
	Duration time.Duration
	// Records stops the load after this many records (committed and
	// aborted); 0: no limit within Duration.
	Records int64
	// Rate is the load's target in records per second over all
	// producers (default DefaultRate).
	Rate float64
	// Listen is the agent's HTTP address (default config.DefaultListen).
	// If it cannot be bound, the demo says so and takes a free port on
	// 127.0.0.1.
	Listen string
	// LogLevel of the agent's logs (default DefaultLogLevel, so that the
	// progress lines stay readable).
	LogLevel string
	// Interactive rewrites the progress line in place (a terminal);
	// otherwise each tick prints a line.
	Interactive bool
	// ProgressInterval is the time between progress lines (default
	// DefaultProgressInterval).
	ProgressInterval time.Duration
	// CatchUpTimeout bounds the wait for the destination after the load
	// stopped; verification runs anyway and reports what is missing
	// (default DefaultCatchUpTimeout).
	CatchUpTimeout time.Duration
}

func (c *Config) defaults() {
	if c.Duration == 0 {
		c.Duration = DefaultDuration
	}
	if c.Rate == 0 {
		c.Rate = DefaultRate
	}
	if c.Listen == "" {
		c.Listen = config.DefaultListen
	}
	if c.LogLevel == "" {
		c.LogLevel = DefaultLogLevel
	}
	if c.ProgressInterval == 0 {
		c.ProgressInterval = DefaultProgressInterval
	}
	if c.CatchUpTimeout == 0 {
		c.CatchUpTimeout = DefaultCatchUpTimeout
	}
}

func (c *Config) validate() error {
	var errs []error
	if c.Duration < 0 {
		errs = append(errs, fmt.Errorf("duration %s is negative", c.Duration))
	}
	if c.Records < 0 {
		errs = append(errs, fmt.Errorf("records %d is negative", c.Records))
	}
	if c.Rate < 0 {
		errs = append(errs, fmt.Errorf("rate %g is negative", c.Rate))
	}
	if c.ProgressInterval < 0 {
		errs = append(errs, fmt.Errorf("progress interval %s is negative", c.ProgressInterval))
	}
	if c.CatchUpTimeout < 0 {
		errs = append(errs, fmt.Errorf("catch-up timeout %s is negative", c.CatchUpTimeout))
	}
	// The listener and the log level go into the agent's configuration:
	// check them by its rules.
	probe := config.Default()
	probe.Agent.Listen, probe.Agent.LogLevel = c.Listen, c.LogLevel
	if err := probe.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(errs...))
	}
	return nil
}

// Deps are the demo's collaborators.
type Deps struct {
	// Out receives the progress lines and the figures (required).
	Out io.Writer
	// LogOutput receives the agent's logs (nil: discarded).
	LogOutput io.Writer
	// Clusters, if set, are used instead of starting two; the caller
	// closes them. They must not hold the demo's topics yet.
	Clusters *Clusters
	// OnProduced, if set, is called from the producers' goroutines with
	// every chunk of records once it is committed (acknowledged, or its
	// transaction committed) or aborted.
	OnProduced func(committed bool, recs []*kgo.Record)
}

// Result is what a run measured.
type Result struct {
	Counts   Counts        // the load at the source
	Mirrored Figures       // the link's metrics after it stopped
	Load     time.Duration // from the first record to the load's stop
	Elapsed  time.Duration // from the first record until the destination caught up
	Report   verify.Report // the comparison of every topic with its mirror
	// Verified: the destination holds exactly the committed source
	// records, as many as the load committed, in every partition.
	Verified bool
}

// Demo is one run of the demo.
type Demo struct {
	cfg  Config
	deps Deps

	stopOnce sync.Once
	stopCh   chan struct{}
}

// New checks cfg and deps. It does no I/O and starts no goroutine.
func New(cfg Config, deps Deps) (*Demo, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if deps.Out == nil {
		return nil, fmt.Errorf("%w: Deps.Out is nil", ErrInvalidConfig)
	}
	if deps.LogOutput == nil {
		deps.LogOutput = io.Discard
	}
	return &Demo{cfg: cfg, deps: deps, stopCh: make(chan struct{})}, nil
}

// Stop ends the load early (an operator's Ctrl-C); the run still waits for
// the destination and verifies. Safe to call at any time, more than once.
func (d *Demo) Stop() { d.stopOnce.Do(func() { close(d.stopCh) }) }

// Run runs the demo: clusters, topics, the agent with one link, the load
// with progress lines, the catch-up, verification and the figures, all
// written to Deps.Out. ctx ending aborts it. The error says the demo could
// not run to its end (or the load failed); a destination that differs from
// the source is Result.Verified false, with the first difference printed.
func (d *Demo) Run(ctx context.Context) (res Result, err error) {
	out := d.deps.Out
	cls := d.deps.Clusters
	if cls == nil {
		if cls, err = StartClusters(); err != nil {
			return res, err
		}
		defer cls.Close()
	}
	for _, c := range []*Cluster{cls.Source, cls.Destination} {
		fmt.Fprintf(out, "%-11s cluster %s (region %#08x), %d brokers: %s\n",
			c.Name, c.ID, uint32(c.Region()), len(c.ListenAddrs()), joinAddrs(c.ListenAddrs()))
	}
	if err := createTopics(ctx, cls.Source); err != nil {
		return res, err
	}
	fmt.Fprintf(out, "source topics: %s\n", topicList())

	listen := d.cfg.Listen
	if ln, err := net.Listen("tcp", listen); err != nil {
		fmt.Fprintf(out, "cannot listen on %s (%v); using a free port on 127.0.0.1 instead\n", listen, err)
		listen = "127.0.0.1:0"
	} else {
		_ = ln.Close() // only a probe that the address is free
	}
	cfg, err := agentConfig(cls, listen, d.cfg.LogLevel)
	if err != nil {
		return res, err
	}
	reg := prometheus.NewRegistry()
	ag, err := newAgent(cfg, d.deps.LogOutput, reg)
	if err != nil {
		return res, err
	}

	// The agent and the load run in g; every return below waits for them.
	agentCtx, stopAgent := context.WithCancel(ctx)
	var (
		g        errgroup.Group
		agentErr error // read only after agentDone is closed
	)
	agentDone := make(chan struct{})
	g.Go(func() error {
		defer close(agentDone)
		agentErr = ag.Run(agentCtx)
		return nil
	})
	// agentStopped is the error of an agent that stopped on its own.
	agentStopped := func() error {
		if agentErr != nil {
			return fmt.Errorf("agent stopped: %w", agentErr)
		}
		return errors.New("agent stopped")
	}
	ld := newLoad(cls.Source.ListenAddrs(), d.cfg.Rate, d.cfg.Records, d.deps.OnProduced)
	defer func() {
		ld.stop()
		stopAgent()
		_ = g.Wait()
	}()
	select {
	case <-ag.Ready():
	case <-agentDone:
		return res, agentStopped()
	case <-ctx.Done():
		return res, ctx.Err()
	}
	addr := ag.Addr().String()
	l := ag.Links()[0]
	fmt.Fprintf(out, "link %q: every topic of %s mirrored into %s (state topic %s)\n",
		cfg.Links[0].Name, cfg.Links[0].Source, cfg.Links[0].Destination, cfg.Links[0].StateTopic)
	fmt.Fprintf(out, "agent listening on %s:\n  status page  http://%s/\n  curl http://%s/v1/links\n  curl http://%s/metrics\n", addr, addr, addr, addr)
	fmt.Fprintf(out, "load: %d producers (%s) at about %.0f records/s for %s", len(Producers), producerList(), d.cfg.Rate, d.cfg.Duration)
	if d.cfg.Records > 0 {
		fmt.Fprintf(out, " or %d records", d.cfg.Records)
	}
	fmt.Fprintln(out, "; Ctrl-C stops it early")

	// Load, with progress lines.
	start := time.Now()
	prog := &progress{w: out, interactive: d.cfg.Interactive, lastAt: start}
	sampleNow := func(phase string) sample {
		st := l.Status()
		fig, _ := figures(reg) // a gather error leaves zeros for one line
		return sample{elapsed: time.Since(start), phase: phase, counts: ld.counts(), mirrored: fig.Records, lag: st.Lag, state: st.State.String()}
	}
	loadErrCh := make(chan error, 1)
	g.Go(func() error {
		loadErrCh <- ld.run(ctx)
		return nil
	})
	tick := time.NewTicker(d.cfg.ProgressInterval)
	defer tick.Stop()
	timer := time.NewTimer(d.cfg.Duration)
	defer timer.Stop()
	var loadErr error
	stopReason := "the load reached --records"
	interrupt := d.stopCh // nil once handled: a closed channel is always ready
	stopping := false
load:
	for {
		select {
		case loadErr = <-loadErrCh:
			break load
		case <-timer.C:
			if !stopping {
				stopReason = "the load ran for --duration"
			}
			stopping = true
			ld.stop()
		case <-interrupt:
			interrupt = nil
			if !stopping {
				stopReason = "interrupted"
			}
			stopping = true
			ld.stop()
		case <-ctx.Done():
			prog.end()
			return res, ctx.Err()
		case <-agentDone:
			prog.end()
			return res, agentStopped()
		case now := <-tick.C:
			prog.line(now, sampleNow("load"))
		}
	}
	res.Load = time.Since(start)
	prog.end()
	res.Counts = ld.counts()
	if loadErr != nil {
		stopReason = "a producer failed"
	}
	fmt.Fprintf(out, "load stopped after %.1fs (%s): %d records committed, %d aborted (%d transactions committed, %d aborted)\n",
		res.Load.Seconds(), stopReason, res.Counts.Committed, res.Counts.Aborted, res.Counts.CommittedTxns, res.Counts.AbortedTxns)

	// Catch-up: every source partition mirrored up to its end offset.
	ends, err := endOffsets(ctx, cls.Source)
	if err != nil {
		return res, errors.Join(err, loadErr)
	}
	catchUp := time.NewTimer(d.cfg.CatchUpTimeout)
	defer catchUp.Stop()
	caught := caughtUp(l.Status(), ends)
wait:
	for !caught {
		select {
		case <-catchUp.C:
			break wait
		case <-ctx.Done():
			prog.end()
			return res, errors.Join(ctx.Err(), loadErr)
		case <-agentDone:
			prog.end()
			return res, errors.Join(agentStopped(), loadErr)
		case now := <-tick.C:
			st := l.Status()
			if caught = caughtUp(st, ends); !caught {
				prog.line(now, sampleNow("catch-up"))
			}
		}
	}
	res.Elapsed = time.Since(start)
	prog.end()
	if caught {
		fmt.Fprintf(out, "destination caught up %.1fs after the load stopped\n", (res.Elapsed - res.Load).Seconds())
	} else {
		fmt.Fprintf(out, "destination has not caught up within %s (link %s, last error: %s); verifying anyway\n",
			d.cfg.CatchUpTimeout, l.Status().State, orNone(l.Status().LastError))
	}

	// Stop the agent (drain, final checkpoint), then read its figures.
	stopAgent()
	<-agentDone
	if agentErr != nil {
		return res, errors.Join(fmt.Errorf("agent stop: %w", agentErr), loadErr)
	}
	if res.Mirrored, err = figures(reg); err != nil {
		return res, errors.Join(err, loadErr)
	}

	rep, err := verifyAll(ctx, cls, cfg)
	if err != nil {
		return res, errors.Join(err, loadErr)
	}
	res.Report = rep
	d.report(&res)
	return res, loadErr
}

// report prints the figures and the verdict, and sets res.Verified.
func (d *Demo) report(res *Result) {
	out := d.deps.Out
	m := res.Mirrored
	secs := res.Elapsed.Seconds()
	mbps := 0.0
	if secs > 0 {
		mbps = float64(m.Bytes) / 1e6 / secs
	}
	fmt.Fprintf(out, "source:      %d records committed, %d aborted\n", res.Counts.Committed, res.Counts.Aborted)
	fmt.Fprintf(out, "mirrored:    %d records in %d batches, %d bytes\n", m.Records, m.Batches, m.Bytes)
	fmt.Fprintf(out, "re-encoded:  %d batches\n", m.Reencoded)
	fmt.Fprintf(out, "collisions:  %d resolved, %d unresolvable\n", m.Collisions, m.Unresolvable)
	fmt.Fprintf(out, "producers:   %d duplicate batches skipped, %d sequence gaps; %d barriers emitted\n", m.Duplicates, m.Gaps, m.Barriers)
	fmt.Fprintf(out, "duration:    %.1fs (load %.1fs), %.2f MB/s mirrored\n", secs, res.Load.Seconds(), mbps)

	rep := res.Report
	switch {
	case rep.First != nil:
		fmt.Fprintf(out, "NOT verified: first difference: %v\n", rep.First)
	case rep.Behind > 0:
		fmt.Fprintf(out, "NOT verified: the destination is %d records behind the source%s\n", rep.Behind, firstBehind(rep))
	case len(rep.Partitions) != TotalPartitions():
		fmt.Fprintf(out, "NOT verified: compared %d partitions, the source topics have %d\n", len(rep.Partitions), TotalPartitions())
	case rep.Records != res.Counts.Committed:
		fmt.Fprintf(out, "NOT verified: source and destination agree on %d records, but the load committed %d\n", rep.Records, res.Counts.Committed)
	default:
		res.Verified = true
		fmt.Fprintf(out, "verified: destination holds exactly the committed source records (%d partitions, %d records)\n",
			len(rep.Partitions), rep.Records)
	}
}

func firstBehind(rep verify.Report) string {
	for _, p := range rep.Partitions {
		if p.Behind > 0 {
			return fmt.Sprintf(" (first: %s[%d], %d records behind)", p.SourceTopic, p.Partition, p.Behind)
		}
	}
	return ""
}

// agentConfig is config.Default() with the embedded clusters' addresses,
// the demo's listener and log level, validated.
func agentConfig(cls *Clusters, listen, logLevel string) (*config.Config, error) {
	cfg := config.Default()
	cfg.Agent.Name = "mirrord-demo"
	cfg.Agent.Listen = listen
	cfg.Agent.LogLevel = logLevel
	cfg.Clusters[cls.Source.Name].BootstrapServers = cls.Source.ListenAddrs()
	cfg.Clusters[cls.Destination.Name].BootstrapServers = cls.Destination.ListenAddrs()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("demo configuration: %w", err)
	}
	return cfg, nil
}

// endOffsets lists the high watermark of every source partition.
func endOffsets(ctx context.Context, c *Cluster) (map[tp.Key]int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		return nil, fmt.Errorf("source cluster client: %w", err)
	}
	defer cl.Close()
	listed, err := kadm.NewClient(cl).ListEndOffsets(ctx, topicNames()...)
	if err != nil {
		return nil, fmt.Errorf("list source end offsets: %w", err)
	}
	ends := make(map[tp.Key]int64)
	var errs []error
	listed.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			errs = append(errs, fmt.Errorf("source %s[%d]: end offset: %w", o.Topic, o.Partition, o.Err))
			return
		}
		ends[tp.Key{Topic: o.Topic, Partition: o.Partition}] = o.Offset
	})
	if len(errs) == 0 && len(ends) != TotalPartitions() {
		errs = append(errs, fmt.Errorf("listed end offsets of %d source partitions, want %d", len(ends), TotalPartitions()))
	}
	return ends, errors.Join(errs...)
}

// caughtUp reports whether the link has mirrored every source partition up
// to its end offset (everything below a partition's SourceNextOffset is at
// the destination). Control batches are consumed, so a partition whose log
// ends with a transaction marker reaches its end offset too.
func caughtUp(st link.Status, ends map[tp.Key]int64) bool {
	if st.State != link.Mirroring {
		return false
	}
	next := make(map[tp.Key]int64, len(st.Partitions))
	for _, p := range st.Partitions {
		next[tp.Key{Topic: p.SourceTopic, Partition: p.Partition}] = p.SourceNextOffset
	}
	for k, end := range ends {
		if n, ok := next[k]; !ok || n < end {
			return false
		}
	}
	return true
}

// verifyAll compares every source topic with its mirror, with the link's
// collision salts from the state topic.
func verifyAll(ctx context.Context, cls *Clusters, cfg *config.Config) (verify.Report, error) {
	lk := cfg.Links[0]
	src, err := kgo.NewClient(kgo.SeedBrokers(cls.Source.ListenAddrs()...))
	if err != nil {
		return verify.Report{}, fmt.Errorf("source cluster client: %w", err)
	}
	defer src.Close()
	dstOpts := []kgo.Opt{kgo.SeedBrokers(cls.Destination.ListenAddrs()...)}
	dst, err := kgo.NewClient(dstOpts...)
	if err != nil {
		return verify.Report{}, fmt.Errorf("destination cluster client: %w", err)
	}
	defer dst.Close()
	salt, err := verify.StateSalts(ctx, dst, dstOpts, lk.StateTopic)
	if err != nil {
		return verify.Report{}, fmt.Errorf("read collision salts from %s: %w", lk.StateTopic, err)
	}
	topics := make(map[string]string, len(Topics))
	for _, t := range Topics {
		topics[t.Name] = lk.DestinationTopic(t.Name, lk.Source)
	}
	rep, err := verify.Run(ctx, verify.Config{
		Source: src, Destination: dst, Topics: topics, SourceClusterID: cls.Source.ID, Salt: salt,
	})
	if err != nil {
		return rep, fmt.Errorf("verify: %w", err)
	}
	return rep, nil
}

func topicNames() []string {
	names := make([]string, 0, len(Topics))
	for _, t := range Topics {
		names = append(names, t.Name)
	}
	return names
}

func topicList() string {
	var s strings.Builder
	for i, t := range Topics {
		if i > 0 {
			s.WriteString(", ")
		}
		fmt.Fprintf(&s, "%s (%d %s)", t.Name, t.Partitions, plural(int64(t.Partitions), "partition"))
	}
	return s.String()
}

func producerList() string {
	kinds := map[string][]string{}
	for _, p := range Producers {
		kinds[p.Kind] = append(kinds[p.Kind], p.CodecName)
	}
	s := ""
	for _, k := range []string{Idempotent, Transactional, Plain} {
		if len(kinds[k]) == 0 {
			continue
		}
		if s != "" {
			s += "; "
		}
		s += fmt.Sprintf("%d %s over %v", len(kinds[k]), k, kinds[k])
	}
	return s
}

func joinAddrs(addrs []string) string {
	addrs = slices.Clone(addrs)
	slices.Sort(addrs)
	return strings.Join(addrs, " ")
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func plural(n int64, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
