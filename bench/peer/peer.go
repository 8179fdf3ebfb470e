// Package peer is the benchmark's record-level mirror, built the way
// MirrorMaker-style tools work, so that mirrord has a fair yardstick: it
// consumes every source partition READ_COMMITTED with kgo, which
// decompresses each batch into records, and produces each record to the
// same partition of the destination topic with an idempotent acks=all kgo
// producer that batches (linger, about 1 MiB batches) and compresses again
// with the source topic's codec.
//
// Like MirrorMaker's tasks.max, the partitions are spread over Tasks tasks;
// each task has its own consumer and its own producer per codec, so that
// decompression and compression run on several cores. Offsets are not
// committed anywhere: the benchmark starts every run from the beginning
// into fresh topics, and doing less only favours the peer.
//
// Goroutines: Run starts one goroutine per task (an errgroup it waits for);
// kgo's own goroutines end when Run closes the task's clients. Nothing
// outlives Run.
package peer

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"
)

// Defaults of Config.
const (
	DefaultLinger                 = 5 * time.Millisecond
	DefaultBatchMaxBytes          = int32(1 << 20)
	DefaultMaxBufferedBytes       = int64(64 << 20)
	DefaultFetchMaxPartitionBytes = int32(1 << 20)
	DefaultShutdownTimeout        = 15 * time.Second
)

// Route is one source topic and where its records go.
type Route struct {
	Source      string
	Destination string
	Codec       kgo.CompressionCodec // of the destination batches: the source topic's codec
}

// Config configures the mirror.
type Config struct {
	Routes []Route
	// Tasks is how many consumer-producer pairs share the partitions.
	// Default: GOMAXPROCS.
	Tasks int
	// Linger and BatchMaxBytes shape the producers' batches.
	Linger        time.Duration
	BatchMaxBytes int32
	// MaxBufferedBytes bounds the records all producers hold, split
	// evenly over the tasks; a full buffer stops consumption.
	MaxBufferedBytes int64
	// FetchMaxPartitionBytes is the consumers' per-partition fetch size.
	FetchMaxPartitionBytes int32
	// ShutdownTimeout bounds the final flush.
	ShutdownTimeout time.Duration
}

func (c *Config) defaults() {
	if c.Tasks == 0 {
		c.Tasks = runtime.GOMAXPROCS(0)
	}
	if c.Linger == 0 {
		c.Linger = DefaultLinger
	}
	if c.BatchMaxBytes == 0 {
		c.BatchMaxBytes = DefaultBatchMaxBytes
	}
	if c.MaxBufferedBytes == 0 {
		c.MaxBufferedBytes = DefaultMaxBufferedBytes
	}
	if c.FetchMaxPartitionBytes == 0 {
		c.FetchMaxPartitionBytes = DefaultFetchMaxPartitionBytes
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
}

func (c *Config) validate() error {
	var errs []error
	if len(c.Routes) == 0 {
		errs = append(errs, errors.New("peer: no routes"))
	}
	seen := map[string]bool{}
	for i, r := range c.Routes {
		if r.Source == "" || r.Destination == "" {
			errs = append(errs, fmt.Errorf("peer: route %d: source and destination topics are required", i))
		}
		if seen[r.Source] {
			errs = append(errs, fmt.Errorf("peer: route %d: source topic %s is routed twice", i, r.Source))
		}
		seen[r.Source] = true
	}
	if c.Tasks < 1 {
		errs = append(errs, fmt.Errorf("peer: tasks is %d, want at least 1", c.Tasks))
	}
	if c.MaxBufferedBytes < int64(c.Tasks)*int64(c.BatchMaxBytes) {
		errs = append(errs, fmt.Errorf("peer: max buffered bytes (%d) is below one batch (%d) per task (%d)", c.MaxBufferedBytes, c.BatchMaxBytes, c.Tasks))
	}
	return errors.Join(errs...)
}

// Deps are the mirror's collaborators.
type Deps struct {
	SourceOpts, DestinationOpts []kgo.Opt // seed brokers and the like
	Logger                      hclog.Logger
}

// Mirror is a record-level mirror.
type Mirror struct {
	cfg     Config
	deps    Deps
	log     hclog.Logger
	records atomic.Int64
}

// New builds a mirror. It does no I/O and starts no goroutine.
func New(cfg Config, deps Deps) (*Mirror, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if deps.Logger == nil {
		deps.Logger = hclog.NewNullLogger()
	}
	return &Mirror{cfg: cfg, deps: deps, log: deps.Logger.Named("peer")}, nil
}

// Records is how many records the destination acknowledged so far.
func (m *Mirror) Records() int64 { return m.records.Load() }

// assignment is one source partition of a task.
type assignment struct {
	route     int
	partition int32
}

// Run creates the destination topics (as many partitions as their source
// topics) and mirrors until ctx ends; it then flushes what the producers
// hold and returns nil. It returns an error when a topic cannot be set up
// or a record cannot be consumed or produced.
func (m *Mirror) Run(ctx context.Context) error {
	parts, err := m.setup(ctx)
	if err != nil {
		return err
	}
	tasks := make([][]assignment, min(m.cfg.Tasks, len(parts)))
	for i, a := range parts {
		tasks[i%len(tasks)] = append(tasks[i%len(tasks)], a)
	}
	g, gctx := errgroup.WithContext(ctx)
	for i, as := range tasks {
		g.Go(func() error { return m.task(gctx, ctx, i, as, len(tasks)) })
	}
	return g.Wait()
}

// setup creates the destination topics and lists the source partitions.
func (m *Mirror) setup(ctx context.Context) ([]assignment, error) {
	src, err := kgo.NewClient(m.deps.SourceOpts...)
	if err != nil {
		return nil, fmt.Errorf("peer: source client: %w", err)
	}
	defer src.Close()
	dst, err := kgo.NewClient(m.deps.DestinationOpts...)
	if err != nil {
		return nil, fmt.Errorf("peer: destination client: %w", err)
	}
	defer dst.Close()
	srcAdm, dstAdm := kadm.NewClient(src), kadm.NewClient(dst)
	names := make([]string, len(m.cfg.Routes))
	for i, r := range m.cfg.Routes {
		names[i] = r.Source
	}
	details, err := srcAdm.ListTopics(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("peer: list source topics: %w", err)
	}
	var parts []assignment
	for i, r := range m.cfg.Routes {
		d, ok := details[r.Source]
		if !ok || d.Err != nil {
			return nil, fmt.Errorf("peer: source topic %s: %v", r.Source, d.Err) //nolint:errorlint // d.Err is nil when the topic is missing: %v prints <nil>, %w would print %!w(<nil>)
		}
		n := int32(len(d.Partitions))
		resp, err := dstAdm.CreateTopic(ctx, n, -1, map[string]*string{"compression.type": new("producer")}, r.Destination)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return nil, fmt.Errorf("peer: create destination topic %s: %w", r.Destination, err)
		}
		if err != nil {
			dd, lerr := dstAdm.ListTopics(ctx, r.Destination)
			if lerr != nil {
				return nil, fmt.Errorf("peer: describe destination topic %s: %w", r.Destination, lerr)
			}
			if got := int32(len(dd[r.Destination].Partitions)); got != n {
				return nil, fmt.Errorf("peer: destination topic %s has %d partitions, source topic %s has %d", r.Destination, got, r.Source, n)
			}
		}
		for p := range n {
			parts = append(parts, assignment{route: i, partition: p})
		}
		m.log.Info("route", "source", r.Source, "destination", r.Destination, "partitions", n, "codec", r.Codec)
	}
	return parts, nil
}

// task mirrors its partitions until ctx ends (or gctx, when another task
// failed), then flushes.
func (m *Mirror) task(gctx, ctx context.Context, id int, as []assignment, ntasks int) error {
	consume := map[string]map[int32]kgo.Offset{}
	for _, a := range as {
		t := m.cfg.Routes[a.route].Source
		if consume[t] == nil {
			consume[t] = map[int32]kgo.Offset{}
		}
		consume[t][a.partition] = kgo.NewOffset().AtStart()
	}
	fetchMax := min(max(int64(len(as))*int64(m.cfg.FetchMaxPartitionBytes), 1<<20), 1<<30)
	cons, err := kgo.NewClient(append(append([]kgo.Opt(nil), m.deps.SourceOpts...),
		kgo.ConsumePartitions(consume),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxPartitionBytes(m.cfg.FetchMaxPartitionBytes),
		// The request limit never binds before the partition limits
		// (DESIGN §11's kfake caveat), up to 1 GiB; kgo refuses a read
		// limit below it, and allocates only what a response holds.
		kgo.FetchMaxBytes(int32(fetchMax)),
		kgo.BrokerMaxReadBytes(int32(max(fetchMax+16<<20, 100<<20))),
	)...)
	if err != nil {
		return fmt.Errorf("peer: task %d consumer: %w", id, err)
	}
	defer cons.Close()

	var failed atomic.Pointer[error]
	promise := func(r *kgo.Record, err error) {
		if err == nil {
			m.records.Add(1)
			return
		}
		if errors.Is(err, context.Canceled) {
			return // stopping: records not yet buffered are dropped
		}
		err = fmt.Errorf("peer: produce to %s[%d]: %w", r.Topic, r.Partition, err)
		failed.CompareAndSwap(nil, &err)
	}
	prods := make([]*kgo.Client, len(m.cfg.Routes)) // by route; routes of one codec share a producer
	byCodec := map[kgo.CompressionCodec]*kgo.Client{}
	for _, a := range as {
		r := m.cfg.Routes[a.route]
		if prods[a.route] != nil {
			continue
		}
		if p := byCodec[r.Codec]; p != nil {
			prods[a.route] = p
			continue
		}
		p, err := kgo.NewClient(append(append([]kgo.Opt(nil), m.deps.DestinationOpts...),
			kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.ProducerBatchCompression(r.Codec),
			kgo.ProducerBatchMaxBytes(m.cfg.BatchMaxBytes),
			kgo.ProducerLinger(m.cfg.Linger),
			kgo.MaxBufferedBytes(int(m.cfg.MaxBufferedBytes/int64(ntasks))),
			kgo.MaxBufferedRecords(1<<30), // bytes bound the buffer, not records
			kgo.RequiredAcks(kgo.AllISRAcks()),
			// A real broker creates a topic of many partitions over a
			// while; the destination topic exists (setup created it).
			kgo.UnknownTopicRetries(-1),
		)...)
		if err != nil {
			return fmt.Errorf("peer: task %d producer for %s: %w", id, r.Destination, err)
		}
		defer p.Close()
		byCodec[r.Codec], prods[a.route] = p, p
	}
	route := map[string]int{}
	for i, r := range m.cfg.Routes {
		route[r.Source] = i
	}

	for gctx.Err() == nil {
		if p := failed.Load(); p != nil {
			return *p
		}
		fs := cons.PollFetches(gctx)
		if gctx.Err() != nil {
			break
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if ferr == nil && !errors.Is(err, context.Canceled) {
				ferr = fmt.Errorf("peer: consume %s[%d]: %w", t, p, err)
			}
		})
		if ferr != nil {
			return ferr
		}
		fs.EachTopic(func(ft kgo.FetchTopic) {
			i := route[ft.Topic]
			r, prod := m.cfg.Routes[i], prods[i]
			ft.EachRecord(func(rec *kgo.Record) {
				prod.Produce(gctx, &kgo.Record{
					Topic:     r.Destination,
					Partition: rec.Partition,
					Key:       rec.Key,
					Value:     rec.Value,
					Headers:   rec.Headers,
					Timestamp: rec.Timestamp,
				}, promise)
			})
		})
	}
	if ctx.Err() == nil {
		// Another task failed: its error is the run's.
		return nil
	}
	fctx, cancel := context.WithTimeout(context.Background(), m.cfg.ShutdownTimeout)
	defer cancel()
	for _, p := range byCodec {
		if err := p.Flush(fctx); err != nil {
			return fmt.Errorf("peer: task %d: flush at shutdown: %w", id, err)
		}
	}
	if p := failed.Load(); p != nil {
		return *p
	}
	return nil
}
