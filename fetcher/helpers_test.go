package fetcher

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/internal/kafka/leaders"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/transform"
)

const testLink = "l1"

// deadline bounds a test so that a bug hangs nothing; nothing is asserted
// about time.
func deadline(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// source starts a three-broker source cluster with the given topics.
func source(t *testing.T, partitions int32, topics ...string) *kfake.Cluster {
	return kafkatest.NewCluster(t, kafkatest.SourceClusterID, kfake.NumBrokers(3), kfake.SeedTopics(partitions, topics...))
}

// testLogger writes hclog lines to the test log.
type testLogger struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (w *testLogger) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// newFetcher builds a fetcher on its own client of c, with fast backoffs.
func newFetcher(t *testing.T, c *kfake.Cluster, cfg Config) (*Fetcher, *Metrics) {
	t.Helper()
	cl := kafkatest.Client(t, c)
	m := NewMetrics(prometheus.NewRegistry())
	w := &testLogger{t: t}
	t.Cleanup(func() { w.mu.Lock(); w.done = true; w.mu.Unlock() })
	cfg.Link = testLink
	f, err := New(cfg, Deps{
		Client:  cl,
		Leaders: leaders.New(cl, time.Minute),
		Logger:  hclog.New(&hclog.LoggerOptions{Output: w, Level: hclog.Debug}),
		Metrics: m,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.backoffMin, f.backoffMax = 5*time.Millisecond, 100*time.Millisecond
	return f, m
}

// run runs f until the test ends and checks that Run returns nil.
func run(t *testing.T, f *Fetcher) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// rec is a record as a consumer sees it.
type rec struct {
	Offset    int64
	Key       []byte
	Value     []byte
	Headers   []kgo.RecordHeader
	Timestamp int64 // ms
}

func (r rec) String() string { return fmt.Sprintf("%d:%s=%s", r.Offset, r.Key, r.Value) }

func equalRec(a, b rec) bool {
	if a.Offset != b.Offset || !bytes.Equal(a.Key, b.Key) || !bytes.Equal(a.Value, b.Value) ||
		a.Timestamp != b.Timestamp || len(a.Headers) != len(b.Headers) {
		return false
	}
	for i := range a.Headers {
		if a.Headers[i].Key != b.Headers[i].Key || !bytes.Equal(a.Headers[i].Value, b.Headers[i].Value) {
			return false
		}
	}
	return true
}

var decompressor = kgo.DefaultDecompressor()

// decodeBatch decodes the records of a delivered batch (tests may
// decompress; the fetcher never does).
func decodeBatch(t *testing.T, b Batch) []rec {
	t.Helper()
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(b.Raw); err != nil {
		t.Fatalf("batch at %d: %v", b.Header.BaseOffset, err)
	}
	if err := transform.Validate(b.Raw); err != nil {
		t.Fatalf("delivered batch fails validation: %v", err)
	}
	raw, err := decompressor.Decompress(rb.Records, kgo.CompressionCodecType(rb.Attributes&0x07))
	if err != nil {
		t.Fatalf("batch at %d: decompress: %v", b.Header.BaseOffset, err)
	}
	var out []rec
	for range rb.NumRecords {
		l, n := binary.Varint(raw)
		if n <= 0 || int(l) > len(raw)-n {
			t.Fatalf("batch at %d: bad record length", b.Header.BaseOffset)
		}
		var r kmsg.Record
		if err := r.ReadFrom(raw[:n+int(l)]); err != nil {
			t.Fatalf("batch at %d: record: %v", b.Header.BaseOffset, err)
		}
		raw = raw[n+int(l):]
		ts := rb.FirstTimestamp + r.TimestampDelta64
		if rb.Attributes&0x08 != 0 {
			ts = rb.MaxTimestamp
		}
		var hs []kgo.RecordHeader
		for _, h := range r.Headers {
			hs = append(hs, kgo.RecordHeader{Key: h.Key, Value: h.Value})
		}
		out = append(out, rec{Offset: rb.FirstOffset + int64(r.OffsetDelta), Key: r.Key, Value: r.Value, Headers: hs, Timestamp: ts})
	}
	return out
}

// stream is what a test consumer collected for one partition.
type stream struct {
	recs    []rec
	results int
	end     int64 // End of the last result
	aborted int
	skipped int64
	// unjudged: of skipped, what results reported Unjudged.
	unjudged int64
	codecs   map[int8]bool
	maxRaw   int // largest batch
}

// consumer reads Results the way a link does: it ignores (and releases)
// results of other generations, checks that results are contiguous and that
// batches hold records within [Start, End) in order, and releases each
// result after decoding it unless hold is set.
type consumer struct {
	t      *testing.T
	f      *Fetcher
	gens   map[tp.Key]uint64
	gen    uint64 // the last generation given
	s      map[tp.Key]*stream
	order  []tp.Key // partition of every result, in delivery order
	pins   []Pin    // pins of the results held (hold mode)
	held   int64    // bytes of the distinct responses held (hold mode)
	hold   bool
	maxOut int64 // largest held
	// onResult runs after each result of a current generation.
	onResult func(n int, r Result)
}

func newConsumer(t *testing.T, f *Fetcher) *consumer {
	return &consumer{t: t, f: f, gens: make(map[tp.Key]uint64), s: make(map[tp.Key]*stream)}
}

// assign assigns p at offset and expects its results from there.
func (c *consumer) assign(p tp.Partition, offset int64) {
	c.gen++
	c.f.Assign(p, offset, c.gen)
	c.gens[p.Key()] = c.gen
	c.s[p.Key()] = &stream{end: offset, codecs: make(map[int8]bool)}
}

// assignReconciling is assign with Fetcher.AssignReconciling.
func (c *consumer) assignReconciling(p tp.Partition, offset int64) {
	c.gen++
	c.f.AssignReconciling(p, offset, c.gen)
	c.gens[p.Key()] = c.gen
	c.s[p.Key()] = &stream{end: offset, codecs: make(map[int8]bool)}
}

// take handles one result; it reports false for a result it ignored.
func (c *consumer) take(r Result) bool {
	t := c.t
	t.Helper()
	k := r.Partition.Key()
	if g, ok := c.gens[k]; !ok || r.Gen != g {
		c.f.Release(r.Pin)
		return false
	}
	if r.Err != nil {
		t.Fatalf("partition %s failed: %v", r.Partition, r.Err)
	}
	s := c.s[k]
	if r.Start != s.end || r.End <= r.Start {
		t.Fatalf("%s: result [%d, %d) does not continue at %d", r.Partition, r.Start, r.End, s.end)
	}
	bytes := 0
	for _, b := range r.Batches {
		bytes += len(b.Raw)
		s.maxRaw = max(s.maxRaw, len(b.Raw))
		if b.Header.Control() {
			t.Fatalf("%s: control batch at %d delivered", r.Partition, b.Header.BaseOffset)
		}
		s.codecs[b.Header.Compression()] = true
		for _, rc := range decodeBatch(t, b) {
			if rc.Offset < r.Start || rc.Offset >= r.End {
				t.Fatalf("%s: record at %d outside the result [%d, %d)", r.Partition, rc.Offset, r.Start, r.End)
			}
			if n := len(s.recs); n > 0 && rc.Offset <= s.recs[n-1].Offset {
				t.Fatalf("%s: record at %d after %d", r.Partition, rc.Offset, s.recs[n-1].Offset)
			}
			s.recs = append(s.recs, rc)
		}
	}
	if bytes != r.Bytes {
		t.Fatalf("%s: Bytes %d, batches hold %d", r.Partition, r.Bytes, bytes)
	}
	if (len(r.Batches) > 0) != (r.Pin.Bytes() > 0) || r.Pin.Bytes() < int64(bytes) {
		t.Fatalf("%s: %d batches of %d bytes pin a response of %d bytes", r.Partition, len(r.Batches), bytes, r.Pin.Bytes())
	}
	s.end = r.End
	s.results++
	s.aborted += r.AbortedBatches
	s.skipped += r.SkippedRecords
	if r.Unjudged {
		s.unjudged += r.SkippedRecords
	}
	c.order = append(c.order, k)
	if c.hold {
		if r.Pin.Bytes() > 0 && !slices.Contains(c.pins, r.Pin) {
			c.held += r.Pin.Bytes()
		}
		c.pins = append(c.pins, r.Pin)
		c.maxOut = max(c.maxOut, c.held)
	} else {
		c.f.Release(r.Pin)
	}
	if c.onResult != nil {
		c.onResult(len(c.order), r)
	}
	return true
}

// releaseHeld releases every result held and stops holding.
func (c *consumer) releaseHeld() {
	for _, p := range c.pins {
		c.f.Release(p)
	}
	c.pins, c.held, c.hold = nil, 0, false
}

// until consumes until every partition in want reached its End.
func (c *consumer) until(ctx context.Context, want map[tp.Key]int64) {
	t := c.t
	t.Helper()
	done := func() bool {
		for k, end := range want {
			if c.s[k].end < end {
				return false
			}
		}
		return true
	}
	for !done() {
		select {
		case r := <-c.f.Results():
			c.take(r)
		case <-ctx.Done():
			var at []string
			for _, k := range slices.SortedFunc(maps.Keys(want), keyCmp) {
				at = append(at, fmt.Sprintf("%s[%d] at %d of %d", k.Topic, k.Partition, c.s[k].end, want[k]))
			}
			t.Fatalf("consumer stopped: %v", at)
		}
	}
	for k, end := range want {
		if c.s[k].end != end {
			t.Fatalf("%s[%d]: End %d passed the high watermark %d", k.Topic, k.Partition, c.s[k].end, end)
		}
	}
}

func keyCmp(a, b tp.Key) int {
	if c := strings.Compare(a.Topic, b.Topic); c != 0 {
		return c
	}
	return int(a.Partition - b.Partition)
}

// producer is a kgo producer with manual partitioning.
func producer(t *testing.T, c *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	return kafkatest.Client(t, c, append([]kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
}

// produce writes records to topic/partition synchronously, as one batch per
// call where the producer can.
func produce(ctx context.Context, t *testing.T, cl *kgo.Client, topic string, partition int32, values ...string) {
	t.Helper()
	var rs []*kgo.Record
	for i, v := range values {
		rs = append(rs, &kgo.Record{
			Topic: topic, Partition: partition,
			Key:     fmt.Appendf(nil, "k%d", i),
			Value:   []byte(v),
			Headers: []kgo.RecordHeader{{Key: "h", Value: []byte(v[:min(len(v), 8)])}},
		})
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("produce to %s[%d]: %v", topic, partition, err)
	}
}

// endOffsets returns the high watermarks of a topic's partitions, and
// checks that they equal the last stable offsets (no open transaction).
func endOffsets(ctx context.Context, t *testing.T, c *kfake.Cluster, topic string) map[tp.Key]int64 {
	t.Helper()
	adm := kadm.NewClient(kafkatest.Client(t, c))
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[tp.Key]int64)
	ends.Each(func(o kadm.ListedOffset) {
		out[tp.Key{Topic: o.Topic, Partition: o.Partition}] = o.Offset
		if pi := c.PartitionInfo(o.Topic, o.Partition); pi == nil || pi.LastStableOffset != o.Offset {
			t.Fatalf("%s[%d]: a transaction is open (high watermark %d)", o.Topic, o.Partition, o.Offset)
		}
	})
	return out
}

// sentinel is the value of the plain record every test writes last to each
// partition, so that the reference consumer knows when it is done.
const sentinel = "end"

// endAll writes the sentinel to every partition of topic.
func endAll(ctx context.Context, t *testing.T, c *kfake.Cluster, topic string, partitions int32) {
	t.Helper()
	cl := producer(t, c, kgo.DisableIdempotentWrite())
	for p := range partitions {
		produce(ctx, t, cl, topic, p, sentinel)
	}
}

// readCommitted reads every committed record of the topic with a kgo
// READ_COMMITTED consumer, up to the sentinel in every partition of ends:
// the reference that the fetcher's batches are compared with.
func readCommitted(ctx context.Context, t *testing.T, c *kfake.Cluster, topic string, ends map[tp.Key]int64) map[tp.Key][]rec {
	t.Helper()
	offsets := make(map[int32]kgo.Offset)
	for k := range ends {
		offsets[k.Partition] = kgo.NewOffset().At(0)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close() // its fetches must not meet the faults of the test
	out := make(map[tp.Key][]rec)
	done := func() bool {
		for k := range ends {
			rs := out[k]
			if len(rs) == 0 || string(rs[len(rs)-1].Value) != sentinel {
				return false
			}
		}
		return true
	}
	for !done() {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatal("reference consumer did not finish")
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("reference consumer %s[%d]: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			k := tp.Key{Topic: r.Topic, Partition: r.Partition}
			var hs []kgo.RecordHeader
			if len(r.Headers) > 0 {
				hs = r.Headers
			}
			out[k] = append(out[k], rec{Offset: r.Offset, Key: r.Key, Value: r.Value, Headers: hs, Timestamp: r.Timestamp.UnixMilli()})
		})
	}
	return out
}

// rawFetch fetches all of a partition from offset with one READ_COMMITTED
// request sized so that no limit binds.
func rawFetch(ctx context.Context, t *testing.T, c *kfake.Cluster, k tp.Key, offset int64) ([]byte, []abortedTxn) {
	t.Helper()
	resp := rawFetchResp(ctx, t, c, k, offset, 256<<20, 256<<20)
	rp := resp.Topics[0].Partitions[0]
	var aborted []abortedTxn
	for _, a := range rp.AbortedTransactions {
		aborted = append(aborted, abortedTxn{ProducerID: a.ProducerID, FirstOffset: a.FirstOffset})
	}
	return rp.RecordBatches, aborted
}

func rawFetchResp(ctx context.Context, t *testing.T, c *kfake.Cluster, k tp.Key, offset int64, maxBytes, partMaxBytes int32) *kmsg.FetchResponse {
	t.Helper()
	cl := kafkatest.Client(t, c)
	l, err := leaders.New(cl, time.Minute).Lookup(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	req := kmsg.NewPtrFetchRequest()
	req.MaxBytes = maxBytes
	req.IsolationLevel = 1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = k.Topic, l.ID
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch = k.Partition, offset, partMaxBytes, l.Epoch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	kresp, err := cl.Broker(int(l.Broker)).Request(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	resp := kresp.(*kmsg.FetchResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 || resp.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("raw fetch of %s[%d]: unexpected response %+v", k.Topic, k.Partition, resp)
	}
	return resp
}

// compare asserts that the fetcher delivered exactly the reference records.
func compare(t *testing.T, got map[tp.Key]*stream, want map[tp.Key][]rec) {
	t.Helper()
	for _, k := range slices.SortedFunc(maps.Keys(want), keyCmp) {
		g, w := got[k].recs, want[k]
		for i := range max(len(g), len(w)) {
			switch {
			case i >= len(g):
				t.Fatalf("%s[%d]: fetcher is missing record %d (%v) and %d more", k.Topic, k.Partition, i, w[i], len(w)-i-1)
			case i >= len(w):
				t.Fatalf("%s[%d]: fetcher delivered extra record %d (%v)", k.Topic, k.Partition, i, g[i])
			case !equalRec(g[i], w[i]):
				t.Fatalf("%s[%d]: record %d is %+v, the consumer read %+v", k.Topic, k.Partition, i, g[i], w[i])
			}
		}
	}
}
