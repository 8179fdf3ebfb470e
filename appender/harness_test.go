package appender

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/internal/kafka/leaders"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/internal/testkit/batchtest"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/transform"
)

// deadline bounds every wait in these tests; it only keeps a broken test
// from hanging and is never what a test asserts.
const deadline = 60 * time.Second

// srcPID is the source producer ID of every test batch; mappedPID is what
// the transform maps it to for the source cluster, the negative producer ID
// the destination must show.
const srcPID = 5

var mappedPID = func() int64 {
	r, _ := transform.RegionOf(kafkatest.SourceClusterID)
	return transform.MapPID(srcPID, r)
}()

// rec is one record of a test batch.
type rec struct {
	key, value string
	header     string // value of header "h"
}

// makeBatch builds an uncompressed source batch; see makeBatchCodec.
func makeBatch(t testing.TB, txn bool, firstTS int64, recs []rec) []byte {
	t.Helper()
	return makeBatchCodec(t, 0, txn, firstTS, recs)
}

// makeBatchCodec builds a source batch as an idempotent (or transactional)
// producer would have written it at a source offset, compressed with codec
// (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd), checks it, and rewrites it for
// the destination with transform.Rewrite.
func makeBatchCodec(t testing.TB, codec int8, txn bool, firstTS int64, recs []rec) []byte {
	t.Helper()
	spec := batchtest.Spec{
		BaseOffset:     4242, // where it sat in the source
		PID:            srcPID,
		Epoch:          3,
		BaseSequence:   100,
		Transactional:  txn,
		Codec:          codec,
		FirstTimestamp: firstTS,
	}
	for i, r := range recs {
		spec.Records = append(spec.Records, batchtest.Record{
			Key:            []byte(r.key),
			Value:          []byte(r.value),
			Headers:        []kmsg.Header{{Key: "h", Value: []byte(r.header)}},
			TimestampDelta: int64(i),
			OffsetDelta:    -1,
		})
	}
	b := batchtest.Build(spec)
	if err := transform.Validate(b); err != nil {
		t.Fatalf("test batch: %v", err)
	}
	transform.Rewrite(b, mappedPID)
	if err := transform.Validate(b); err != nil {
		t.Fatalf("rewritten test batch: %v", err)
	}
	return b
}

// recsFor returns n distinct records for batch j of partition p.
func recsFor(p tp.Partition, j, n int) []rec {
	out := make([]rec, n)
	for i := range out {
		out[i] = rec{
			key:    fmt.Sprintf("k-%s-%d-%d", p, j, i),
			value:  fmt.Sprintf("v-%s-%d-%d", p, j, i),
			header: fmt.Sprintf("h-%d-%d", j, i),
		}
	}
	return out
}

// wire is one batch as it went out: its records and where it landed.
type wire struct {
	recs       []rec
	baseOffset int64
}

// harness is a destination kfake cluster, an appender on it, and an
// observer of every Produce request the cluster receives.
type harness struct {
	t       *testing.T
	c       *kfake.Cluster
	cl      *kgo.Client
	adm     *kadm.Client
	leaders *leaders.Cache
	reg     *prometheus.Registry
	a       *Appender
	obs     *observer
	may     atomic.Bool  // the lease is valid
	until   atomic.Int64 // when it ends (Unix ns); 0: a minute from now, always
	logs    *syncBuffer
	pending []Result // taken from Results and not yet returned by result

	cancel  context.CancelFunc
	runDone chan error
}

type harnessOpts struct {
	brokers    int
	cfg        Config
	clientOpts []kgo.Opt
	leaderAge  time.Duration // leaders.Cache maxAge; 0: its default
	noRun      bool
}

func newHarness(t *testing.T, o harnessOpts) *harness {
	t.Helper()
	if o.brokers == 0 {
		o.brokers = 1
	}
	if o.cfg.Link == "" {
		o.cfg.Link = "test"
	}
	if o.cfg.RetryBackoff == 0 {
		o.cfg.RetryBackoff = time.Millisecond
	}
	h := &harness{t: t, logs: &syncBuffer{}}
	h.c = kafkatest.NewCluster(t, kafkatest.DestClusterID, kfake.NumBrokers(o.brokers))
	h.obs = observe(h.c)
	h.cl = kafkatest.Client(t, h.c, o.clientOpts...)
	h.adm = kadm.NewClient(h.cl)
	h.leaders = leaders.New(h.cl, o.leaderAge)
	h.reg = prometheus.NewRegistry()
	h.may.Store(true)
	logger := hclog.New(&hclog.LoggerOptions{Output: h.logs, Level: hclog.Debug})
	a, err := New(o.cfg, Deps{
		Client:  h.cl,
		Leaders: h.leaders,
		Logger:  logger,
		Metrics: NewMetrics(h.reg),
		Lease:   h.lease,
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.a = a
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("appender logs:\n%s", h.logs.String())
		}
	})
	if !o.noRun {
		h.run()
	}
	return h
}

// lease is the harness's session lease: while may is set, valid until
// until, or for a minute from now when until is 0.
func (h *harness) lease() (time.Time, bool) {
	if !h.may.Load() {
		return time.Time{}, false
	}
	if u := h.until.Load(); u != 0 {
		return time.Unix(0, u), true
	}
	return time.Now().Add(time.Minute), true
}

// run starts Run; the test's cleanup cancels it and checks that it returns
// nil.
func (h *harness) run() {
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.runDone = make(chan error, 1)
	go func() { h.runDone <- h.a.Run(ctx) }()
	h.t.Cleanup(h.stop)
}

// stop cancels Run and waits for it.
func (h *harness) stop() {
	h.t.Helper()
	if h.runDone == nil {
		return
	}
	h.cancel()
	select {
	case err := <-h.runDone:
		if err != nil {
			h.t.Errorf("Run returned %v, want nil", err)
		}
	case <-time.After(deadline):
		h.t.Fatalf("Run did not return within %v of its cancel", deadline)
	}
	h.runDone = nil
}

// createTopic creates a topic and returns its partitions with their IDs.
func (h *harness) createTopic(name string, partitions int32, configs map[string]*string) []tp.Partition {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	resp, err := h.adm.CreateTopic(ctx, partitions, -1, configs, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		h.t.Fatalf("create topic %s: %v", name, err)
	}
	h.obs.name(resp.ID, name)
	ps := make([]tp.Partition, partitions)
	for i := range ps {
		ps[i] = tp.Partition{Topic: name, ID: resp.ID, Partition: int32(i)}
	}
	return ps
}

// submit submits and fails the test on an error.
func (h *harness) submit(p tp.Partition, batch []byte, tag uint64) {
	h.t.Helper()
	if err := h.a.Submit(Request{Partition: p, Batch: batch, Tag: tag}); err != nil {
		h.t.Fatalf("Submit %s: %v", p, err)
	}
}

// result waits for the next result.
func (h *harness) result() Result {
	h.t.Helper()
	timeout := time.After(deadline)
	for len(h.pending) == 0 {
		h.pending = append(h.pending, h.a.Results().Take()...)
		if len(h.pending) > 0 {
			break
		}
		select {
		case <-h.a.Results().Wake():
		case <-h.a.Stopped():
			h.pending = append(h.pending, h.a.Results().Take()...)
			if len(h.pending) == 0 {
				h.t.Fatalf("Run returned while a result was expected")
			}
		case <-timeout:
			h.t.Fatalf("no result within %v", deadline)
		}
	}
	r := h.pending[0]
	h.pending = h.pending[1:]
	return r
}

// drain returns the results left once Run has returned.
func (h *harness) drain() []Result {
	h.t.Helper()
	select {
	case <-h.a.Stopped():
	case <-time.After(deadline):
		h.t.Fatalf("Run did not stop within %v", deadline)
	}
	out := append(h.pending, h.a.Results().Take()...)
	h.pending = nil
	return out
}

// append1 submits one batch and returns its result.
func (h *harness) append1(p tp.Partition, batch []byte) Result {
	h.t.Helper()
	h.submit(p, batch, 1)
	r := h.result()
	if r.Partition != p || r.Tag != 1 {
		h.t.Fatalf("result for %s tag %d, want %s tag 1", r.Partition, r.Tag, p)
	}
	return r
}

// checkLog asserts that partition p holds exactly the given batches, in
// order, record by record, each with the mapped producer ID, read back by a
// kgo consumer; and that the log ends after them.
func (h *harness) checkLog(p tp.Partition, want []wire) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	ends, err := h.adm.ListEndOffsets(ctx, p.Topic)
	if err != nil {
		h.t.Fatalf("list end offsets of %s: %v", p.Topic, err)
	}
	end, ok := ends.Lookup(p.Topic, p.Partition)
	if !ok || end.Err != nil {
		h.t.Fatalf("end offset of %s: %v %v", p, ok, end.Err)
	}
	total := 0
	for _, w := range want {
		total += len(w.recs)
	}
	if end.Offset != int64(total) {
		h.t.Fatalf("%s ends at offset %d, want %d (%d batches)", p, end.Offset, total, len(want))
	}
	if total == 0 {
		return
	}
	cons := kafkatest.Client(h.t, h.c, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
		p.Topic: {p.Partition: kgo.NewOffset().AtStart()},
	}))
	var got []*kgo.Record
	for len(got) < total {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			h.t.Fatalf("%s: read %d of %d records: %v", p, len(got), total, err)
		}
		fs.EachError(func(t string, part int32, err error) { h.t.Fatalf("fetch %s[%d]: %v", t, part, err) })
		got = append(got, fs.Records()...)
	}
	cons.Close()
	i := 0
	for j, w := range want {
		for k, r := range w.recs {
			g := got[i]
			if string(g.Key) != r.key || string(g.Value) != r.value || len(g.Headers) != 1 ||
				g.Headers[0].Key != "h" || string(g.Headers[0].Value) != r.header {
				h.t.Fatalf("%s offset %d: got key %q value %q headers %v, want %q %q h=%q",
					p, g.Offset, g.Key, g.Value, g.Headers, r.key, r.value, r.header)
			}
			if g.ProducerID != mappedPID || g.ProducerEpoch != 3 {
				h.t.Fatalf("%s offset %d: producer %d epoch %d, want mapped %d epoch 3", p, g.Offset, g.ProducerID, g.ProducerEpoch, mappedPID)
			}
			if k == 0 && w.baseOffset >= 0 && g.Offset != w.baseOffset {
				h.t.Fatalf("%s batch %d: consumer sees it at offset %d, the Result said %d", p, j, g.Offset, w.baseOffset)
			}
			i++
		}
	}
}

// counter reads a counter of the harness's registry.
func (h *harness) counter(name string, labels ...string) float64 {
	h.t.Helper()
	m := h.a.deps.Metrics
	var c prometheus.Counter
	switch name {
	case "produce_requests_total":
		c = m.requests.WithLabelValues(h.a.cfg.Link)
	case "append_errors_total":
		c = m.errors.WithLabelValues(h.a.cfg.Link, labels[0])
	default:
		h.t.Fatalf("no counter %s", name)
	}
	var d dto.Metric
	if err := c.Write(&d); err != nil {
		h.t.Fatalf("read %s: %v", name, err)
	}
	return d.GetCounter().GetValue()
}

// observer records every Produce request a cluster receives.
type observer struct {
	c *kfake.Cluster

	mu       sync.Mutex
	requests []seenRequest
	names    map[[16]byte]string
	events   []event // arrivals and, from the test's pump, results
}

// event is a partition arriving at a broker in a Produce request, or the
// test receiving the partition's result.
type event struct {
	p      tp.Key
	result bool
}

type seenRequest struct {
	node    int32
	version int16
	parts   []seenPartition
}

type seenPartition struct {
	topic   string // by name, or by ID through the names the test registered
	byName  bool   // the request carried the topic's name
	part    int32
	batches int // record batches in the partition's records
	bytes   int // size of the partition's records
}

func observe(c *kfake.Cluster) *observer {
	o := &observer{c: c, names: make(map[[16]byte]string)}
	c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.ProduceRequest)
		s := seenRequest{node: c.CurrentNode(), version: req.Version}
		o.mu.Lock()
		for _, rt := range req.Topics {
			name, byName := rt.Topic, rt.Topic != ""
			if !byName {
				name = o.names[rt.TopicID]
			}
			for _, rp := range rt.Partitions {
				batches, trunc, err := transform.Split(rp.Records, nil)
				n := len(batches)
				if trunc != 0 || err != nil {
					n = -1 // not whole batches: the assertion on it fails
				}
				s.parts = append(s.parts, seenPartition{topic: name, byName: byName, part: rp.Partition, batches: n, bytes: len(rp.Records)})
				o.events = append(o.events, event{p: tp.Key{Topic: name, Partition: rp.Partition}})
			}
		}
		o.requests = append(o.requests, s)
		o.mu.Unlock()
		return nil, nil, false // observe only: the cluster handles it
	})
	return o
}

func (o *observer) name(id [16]byte, name string) {
	o.mu.Lock()
	o.names[id] = name
	o.mu.Unlock()
}

// resultFor records that the test received p's result.
func (o *observer) resultFor(p tp.Partition) {
	o.mu.Lock()
	o.events = append(o.events, event{p: p.Key(), result: true})
	o.mu.Unlock()
}

func (o *observer) seen() []seenRequest {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]seenRequest(nil), o.requests...)
}

// carrying returns the requests that carried partition p, and the nodes
// they went to.
func (o *observer) carrying(p tp.Partition) (n int, nodes []int32) {
	for _, r := range o.seen() {
		for _, sp := range r.parts {
			if sp.topic == p.Topic && sp.part == p.Partition {
				n++
				nodes = append(nodes, r.node)
			}
		}
	}
	return n, nodes
}

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// countLines counts log lines holding every one of the substrings.
func (s *syncBuffer) countLines(subs ...string) int {
	n := 0
	for line := range strings.SplitSeq(s.String(), "\n") {
		all := true
		for _, sub := range subs {
			all = all && strings.Contains(line, sub)
		}
		if all {
			n++
		}
	}
	return n
}

// appenderGoroutines counts live goroutines running the appender's code.
func appenderGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "mirrord/appender.(*runner)") || strings.Contains(g, "mirrord/appender.(*Appender)") {
			count++
		}
	}
	return count
}

// waitFor polls cond until it holds; the deadline only prevents a hang.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("%s: still not true after %v", what, deadline)
		}
		time.Sleep(time.Millisecond)
	}
}
