// Package load fills the benchmark's source cluster once with realistic
// data: keyed records with 1 KiB values that compress about 2-4x, two
// headers each, spread over several partitions of one topic per codec (lz4,
// zstd and none), written by idempotent kgo producers with about 1 MiB
// batches.
//
// Goroutines: Run starts one producer goroutine per topic (an errgroup it
// waits for); kgo's own goroutines end when Run closes its clients. Nothing
// outlives Run.
package load

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"
)

// Codec names, as they appear in topic names and reports.
const (
	LZ4    = "lz4"
	ZSTD   = "zstd"
	None   = "none"
	GZIP   = "gzip"
	Snappy = "snappy"
)

// Codecs are the codecs of the benchmark by default, in report order;
// AllCodecs every codec a batch can have (-codecs).
var (
	Codecs    = []string{LZ4, ZSTD, None}
	AllCodecs = []string{LZ4, ZSTD, None, GZIP, Snappy}
)

// ErrUnknownCodec is returned for a codec name that is not in Codecs.
var ErrUnknownCodec = errors.New("unknown codec")

// Codec returns kgo's codec for a codec name.
func Codec(name string) (kgo.CompressionCodec, error) {
	switch name {
	case LZ4:
		return kgo.Lz4Compression(), nil
	case ZSTD:
		return kgo.ZstdCompression(), nil
	case None:
		return kgo.NoCompression(), nil
	case GZIP:
		return kgo.GzipCompression(), nil
	case Snappy:
		return kgo.SnappyCompression(), nil
	}
	return kgo.CompressionCodec{}, fmt.Errorf("codec %q: %w (want one of %v)", name, ErrUnknownCodec, AllCodecs)
}

// TopicName is the source topic of a codec.
func TopicName(codec string) string { return "bench." + codec }

// Defaults of Config.
const (
	DefaultValueSize     = 1024
	DefaultPartitions    = 6
	DefaultBatchMaxBytes = 1 << 20
	DefaultLinger        = 10 * time.Millisecond
	DefaultSeed          = 1
)

// Config says what to load.
type Config struct {
	Codecs        []string // one topic per codec; default Codecs
	BytesPerTopic int64    // value bytes per topic, at least one value
	Partitions    int32    // per topic; default 6
	ValueSize     int      // default 1024
	BatchMaxBytes int32    // producer batch limit before compression; default 1 MiB
	// Linger is the producers' linger: default 10ms; a negative value is
	// no linger at all (a batch goes out as soon as the connection is
	// free, so batches stay small).
	Linger time.Duration
	// TopicConfig is added to every topic's configuration
	// (compression.type is always "producer").
	TopicConfig map[string]*string
	Seed        uint64 // of the data; default 1
}

func (c *Config) defaults() {
	if c.Codecs == nil {
		c.Codecs = Codecs
	}
	if c.Partitions == 0 {
		c.Partitions = DefaultPartitions
	}
	if c.ValueSize == 0 {
		c.ValueSize = DefaultValueSize
	}
	if c.BatchMaxBytes == 0 {
		c.BatchMaxBytes = DefaultBatchMaxBytes
	}
	switch {
	case c.Linger == 0:
		c.Linger = DefaultLinger
	case c.Linger < 0:
		c.Linger = 0 // kgo's "no linger"
	}
	if c.Seed == 0 {
		c.Seed = DefaultSeed
	}
}

func (c *Config) validate() error {
	var errs []error
	for _, name := range c.Codecs {
		if _, err := Codec(name); err != nil {
			errs = append(errs, fmt.Errorf("load: %w", err))
		}
	}
	if len(c.Codecs) == 0 {
		errs = append(errs, errors.New("load: no codecs"))
	}
	if c.Partitions < 1 {
		errs = append(errs, fmt.Errorf("load: partitions is %d, want at least 1", c.Partitions))
	}
	if c.ValueSize < minValueSize {
		errs = append(errs, fmt.Errorf("load: value size is %d, want at least %d", c.ValueSize, minValueSize))
	}
	if c.BytesPerTopic < int64(c.ValueSize) {
		errs = append(errs, fmt.Errorf("load: bytes per topic is %d, want at least one value (%d bytes)", c.BytesPerTopic, c.ValueSize))
	}
	if c.BatchMaxBytes < int32(4*c.ValueSize) {
		errs = append(errs, fmt.Errorf("load: batch max bytes is %d, want at least four values (%d)", c.BatchMaxBytes, 4*c.ValueSize))
	}
	return errors.Join(errs...)
}

// Topic is one loaded source topic.
type Topic struct {
	Name         string
	Codec        string
	Partitions   int32
	Records      int64
	PayloadBytes int64 // keys, values and headers, uncompressed
}

// Run creates one topic per codec on the cluster that opts reach and fills
// it. It fails if a topic exists already: the benchmark loads once into a
// fresh cluster.
func Run(ctx context.Context, cfg Config, opts []kgo.Opt) ([]Topic, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	admCl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("load: admin client: %w", err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	topics := make([]Topic, len(cfg.Codecs))
	for i, codec := range cfg.Codecs {
		topics[i] = Topic{Name: TopicName(codec), Codec: codec, Partitions: cfg.Partitions}
		tc := map[string]*string{"compression.type": new("producer")}
		for k, v := range cfg.TopicConfig {
			if k != "compression.type" {
				tc[k] = v
			}
		}
		resp, err := adm.CreateTopic(ctx, cfg.Partitions, 1, tc, topics[i].Name)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			return nil, fmt.Errorf("load: create topic %s: %w", topics[i].Name, err)
		}
	}
	if err := WaitLeaders(ctx, adm, topics); err != nil {
		return nil, err
	}
	records := cfg.BytesPerTopic / int64(cfg.ValueSize)
	g, gctx := errgroup.WithContext(ctx)
	for i := range topics {
		t := &topics[i]
		g.Go(func() error {
			n, payload, err := fill(gctx, cfg, opts, t, records, cfg.Seed+uint64(i))
			t.Records, t.PayloadBytes = n, payload
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return topics, nil
}

// WaitLeaders waits until every partition of the topics has a leader: a
// real broker creates a topic of a thousand partitions over a while, and a
// producer that starts before gives up on the partitions not there yet.
func WaitLeaders(ctx context.Context, adm *kadm.Client, topics []Topic) error {
	names := make([]string, len(topics))
	for i, t := range topics {
		names[i] = t.Name
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		details, err := adm.ListTopics(wctx, names...)
		ready := err == nil
		for _, t := range topics {
			d, ok := details[t.Name]
			if !ready || !ok || d.Err != nil || len(d.Partitions) != int(t.Partitions) {
				ready = false
				break
			}
			for _, p := range d.Partitions {
				if p.Err != nil || p.Leader < 0 {
					ready = false
				}
			}
		}
		if ready {
			return nil
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("load: partitions of %v without a leader: %w (last error: %v)", names, wctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// fill produces records records to t with an idempotent producer.
func fill(ctx context.Context, cfg Config, opts []kgo.Opt, t *Topic, records int64, seed uint64) (int64, int64, error) {
	codec, _ := Codec(t.Codec)
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), opts...),
		kgo.DefaultProduceTopic(t.Name),
		kgo.ProducerBatchCompression(codec),
		kgo.ProducerBatchMaxBytes(cfg.BatchMaxBytes),
		kgo.ProducerLinger(cfg.Linger),
		kgo.MaxBufferedBytes(64<<20),
		kgo.MaxBufferedRecords(1<<20),
		// A broker answers NOT_LEADER_FOR_PARTITION for a while after
		// it created a partition it leads (a 1,000-partition topic's
		// took more than 10 retries once), so retries are many (kgo's
		// backoff grows to a second). Not a delivery timeout: kgo
		// counts it from the record's timestamp, an hour in the past
		// here. Idempotent: a retry does not duplicate.
		kgo.RecordRetries(200),
	)...)
	if err != nil {
		return 0, 0, fmt.Errorf("load: producer for %s: %w", t.Name, err)
	}
	defer cl.Close()
	var (
		failed  atomic.Pointer[error]
		payload int64
	)
	done := func(r *kgo.Record, err error) {
		if err != nil {
			err = fmt.Errorf("load: produce to %s[%d]: %w", r.Topic, r.Partition, err)
			failed.CompareAndSwap(nil, &err)
		}
	}
	gen := NewGenerator(seed, cfg.ValueSize)
	base := time.Now().Add(-time.Hour).UnixMilli()
	for i := range records {
		if p := failed.Load(); p != nil {
			return i, payload, *p
		}
		r := gen.Record(i)
		r.Timestamp = time.UnixMilli(base + i/64)
		payload += RecordPayload(r)
		cl.Produce(ctx, r, done)
	}
	if err := cl.Flush(ctx); err != nil {
		return records, payload, fmt.Errorf("load: flush %s: %w", t.Name, err)
	}
	if p := failed.Load(); p != nil {
		return records, payload, *p
	}
	return records, payload, nil
}

// RecordPayload is a record's key, value and header bytes.
func RecordPayload(r *kgo.Record) int64 {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return int64(n)
}

// minValueSize leaves room for the value's fixed fields.
const minValueSize = 256

// Generator makes the benchmark's records: deterministic for a seed.
//
// A value is a JSON-like document of exactly the configured size: a few
// numeric and enumerated fields, a text of words drawn from a fixed
// vocabulary with a skewed distribution, and a hex-encoded random token.
// lz4 compresses such values about 2-3x and zstd about 3-4x.
type Generator struct {
	rng   *rand.Rand
	vocab [][]byte
	size  int
}

// NewGenerator returns a generator of values of size bytes.
func NewGenerator(seed uint64, size int) *Generator {
	vrng := rand.New(rand.NewPCG(0x6d6972726f7264, 7)) // the same vocabulary for every seed
	vocab := make([][]byte, 2048)
	for i := range vocab {
		w := make([]byte, 3+vrng.IntN(8))
		for j := range w {
			w[j] = byte('a' + vrng.IntN(26))
		}
		vocab[i] = w
	}
	return &Generator{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), vocab: vocab, size: size}
}

var (
	statuses = []string{"created", "paid", "packed", "shipped", "delivered", "returned"}
	regions  = []string{"eu-west-1", "eu-central-1", "us-east-1", "us-west-2", "ap-south-1"}
)

const hexDigits = "0123456789abcdef"

// Record returns the i-th record (without topic and timestamp): a key of
// one of a million users, the value, and two headers.
func (g *Generator) Record(i int64) *kgo.Record {
	user := g.rng.IntN(1_000_000)
	v := make([]byte, 0, g.size)
	v = append(v, `{"order":`...)
	v = strconv.AppendInt(v, i, 10)
	v = append(v, `,"user":"user-`...)
	v = strconv.AppendInt(v, int64(user), 10)
	v = append(v, `","status":"`...)
	v = append(v, statuses[g.rng.IntN(len(statuses))]...)
	v = append(v, `","region":"`...)
	v = append(v, regions[g.rng.IntN(len(regions))]...)
	v = append(v, `","amount":`...)
	v = strconv.AppendInt(v, int64(g.rng.IntN(100_000)), 10)
	v = append(v, `,"token":"`...)
	for range 48 {
		v = append(v, hexDigits[g.rng.IntN(16)])
	}
	v = append(v, `","note":"`...)
	end := g.size - 2 // room for `"}`
	for len(v) < end {
		// Squaring skews the draw toward the first words, as in text.
		f := g.rng.Float64()
		w := g.vocab[int(f*f*float64(len(g.vocab)))]
		if len(v)+len(w)+1 > end {
			for len(v) < end {
				v = append(v, '.')
			}
			break
		}
		v = append(v, w...)
		v = append(v, ' ')
	}
	v = append(v, `"}`...)

	trace := make([]byte, 32)
	for j := range trace {
		trace[j] = hexDigits[g.rng.IntN(16)]
	}
	return &kgo.Record{
		Key:   []byte("user-" + strconv.Itoa(user)),
		Value: v,
		Headers: []kgo.RecordHeader{
			{Key: "trace-id", Value: trace},
			{Key: "content-type", Value: []byte("application/json")},
		},
	}
}
