package appender_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/appender"
	"github.com/seed83556561/mirrord/internal/kafka/leaders"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/internal/testkit/batchtest"
	"github.com/seed83556561/mirrord/internal/testkit/faultproxy"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/internal/testkit/logtest"
	"github.com/seed83556561/mirrord/internal/testkit/mirrortest"
	"github.com/seed83556561/mirrord/transform"
)

func TestMain(m *testing.M) { os.Exit(mirrortest.Main(m)) }

// txnEnv is a destination cluster, a topic and the clients a transactional
// session of the test uses (through a fault proxy when the test needs one).
type txnEnv struct {
	c     *mirrortest.Cluster
	topic string
	parts []tp.Partition
	ver   appender.TxnVersion
	// timeout is the sessions' transaction timeout (0: 30s).
	timeout time.Duration
	// metrics, when set, receive the sessions' metrics (link "test").
	metrics *appender.Metrics
}

func newTxnEnv(t *testing.T, b mirrortest.Backend, base string, partitions int32) *txnEnv {
	t.Helper()
	c := mirrortest.NewCluster(t, b, "dst", kafkatest.DestClusterID)
	topic := mirrortest.NamesFor(t, b).Of(base)
	c.CreateTopic(t, topic, partitions, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := appender.TxnVersionOf(ctx, c.Client)
	if err != nil {
		t.Fatal(err)
	}
	e := &txnEnv{c: c, topic: topic, ver: v}
	for p := range partitions {
		e.parts = append(e.parts, tp.Partition{Topic: topic, Partition: p})
	}
	return e
}

// session is one transactional producer of the test and what it appends with.
type session struct {
	txn *appender.Txn
	ls  *leaders.Cache
}

func (e *txnEnv) open(t *testing.T, txid string, opts ...kgo.Opt) *session {
	t.Helper()
	cl := e.c.NewClient(t, append(append(opts, appender.TxnClientOpts(e.ver)...), kgo.RetryTimeout(20*time.Second))...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	timeout := e.timeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	txn, err := appender.OpenTxn(ctx, cl, appender.TxnConfig{TransactionalID: txid, Version: e.ver, Timeout: timeout,
		Metrics: e.metrics, Link: "test"}, logtest.Logger(t.Output()))
	if err != nil {
		t.Fatal(err)
	}
	return &session{txn: txn, ls: leaders.New(cl, 0)}
}

// srcBatch is a source batch and the records it holds.
type srcBatch struct {
	raw  []byte
	recs []got // partition unset
}

// baseTime is the first timestamp of the test batches: recent, so that a
// real broker's time retention (7 days by default) keeps them.
var baseTime = time.Now().Add(-time.Hour).UnixMilli()

// sourceBatch is a source batch of n records as the given kind of
// producer wrote it, with keys that say which test step wrote them.
func sourceBatch(kind string, step, n int, codec int8) srcBatch {
	s := batchtest.Spec{BaseOffset: int64(1000 * step), PID: -1, Epoch: -1, BaseSequence: -1, Codec: codec, FirstTimestamp: baseTime + int64(step)*1000}
	switch kind {
	case "idempotent":
		s.PID, s.Epoch, s.BaseSequence = 4242, 3, int32(100*step)
	case "transactional":
		s.PID, s.Epoch, s.BaseSequence, s.Transactional = 777, 9, int32(10*step), true
	}
	for i := range n {
		s.Records = append(s.Records, batchtest.Record{
			Key:            fmt.Appendf(nil, "%s-%d-%d", kind, step, i),
			Value:          fmt.Appendf(nil, "value %d of step %d, codec %d", i, step, codec),
			Headers:        []kmsg.Header{{Key: "step", Value: fmt.Appendf(nil, "%d", step)}},
			TimestampDelta: int64(i),
			OffsetDelta:    -1,
		})
	}
	out := srcBatch{raw: batchtest.Build(s)}
	for _, r := range s.Records {
		out.recs = append(out.recs, got{key: string(r.Key), val: string(r.Value), ts: s.FirstTimestamp + r.TimestampDelta})
	}
	return out
}

// got is one record read back, as the test compares it.
type got struct {
	partition int32
	key, val  string
	ts        int64
}

// readBack reads every record of topic from the start with the isolation
// level given, until the partitions' end offsets (markers included) were
// passed or nothing more came for 3 s.
func readBack(t *testing.T, c *mirrortest.Cluster, topic string, committed bool) []got {
	t.Helper()
	iso := kgo.ReadUncommitted()
	if committed {
		iso = kgo.ReadCommitted()
	}
	cl := c.NewClient(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(iso), kgo.FetchMaxWait(200*time.Millisecond))
	var out []got
	idle := time.Now()
	for time.Since(idle) < 3*time.Second {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		if fs.NumRecords() > 0 {
			idle = time.Now()
		}
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, got{r.Partition, string(r.Key), string(r.Value), r.Timestamp.UnixMilli()})
		})
	}
	return out
}

// wantOf lists a source batch's records as readBack returns them.
func wantOf(partition int32, batches ...srcBatch) []got {
	var out []got
	for _, b := range batches {
		for _, r := range b.recs {
			r.partition = partition
			out = append(out, r)
		}
	}
	return out
}

func byPartition(gs []got) map[int32][]got {
	m := map[int32][]got{}
	for _, g := range gs {
		m[g.partition] = append(m[g.partition], g)
	}
	return m
}

func checkRecords(t *testing.T, what string, got, want []got) {
	t.Helper()
	gp, wp := byPartition(got), byPartition(want)
	for p := range max(len(gp), len(wp)) {
		g, w := gp[int32(p)], wp[int32(p)]
		for i := range max(len(g), len(w)) {
			switch {
			case i >= len(g):
				t.Fatalf("%s: partition %d: record %d missing: want %+v (got %d records)", what, p, i, w[i], len(g))
			case i >= len(w):
				t.Fatalf("%s: partition %d: record %d not expected: %+v (want %d records)", what, p, i, g[i], len(w))
			case g[i] != w[i]:
				t.Fatalf("%s: partition %d: record %d is %+v, want %+v", what, p, i, g[i], w[i])
			}
		}
	}
}

func appendAll(t *testing.T, s *session, p tp.Partition, batches ...srcBatch) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := s.txn.Add(ctx, []tp.Key{p.Key()}); err != nil {
		t.Fatal(err)
	}
	for _, b := range batches {
		if _, err := s.txn.Append(ctx, appender.TxnAppendConfig{}, s.ls, p, clone(b.raw)); err != nil {
			t.Fatalf("append to %s: %v", p, err)
		}
	}
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }

func end(t *testing.T, s *session, commit bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := s.txn.End(ctx, commit); err != nil {
		t.Fatalf("end transaction (commit %v): %v", commit, err)
	}
}

// Guards transactional delivery's data path: batches of every producer kind
// and codec, stamped with the session's producer, appear to read_committed
// consumers exactly as the source wrote them once their transaction commits,
// and never when it aborts; sequences and (under transaction.version 2) the
// epoch move as the broker expects, across transactions.
func TestTxnCommitAndAbort(t *testing.T) {
	mirrortest.Each(t, func(t *testing.T, b mirrortest.Backend) {
		e := newTxnEnv(t, b, "txn-commit", 2)
		reg := prometheus.NewRegistry()
		e.metrics = appender.NewMetrics(reg)
		wantVersion := appender.TxnV2
		if b.Kafka != "" && b.Kafka < "4" {
			wantVersion = appender.TxnV1
		}
		if e.ver != wantVersion {
			t.Fatalf("%s answers %s, want %s", b, e.ver, wantVersion)
		}
		s := e.open(t, mirrortest.NamesFor(t, b).Of("txn-commit"))
		id0, epoch0 := s.txn.Producer()

		var committed [2][]srcBatch
		step := 0
		kinds := []string{"idempotent", "transactional", "plain"}
		for round, commit := range []bool{true, false, true, false, true} {
			for p := range e.parts {
				var bs []srcBatch
				for i := range 3 {
					step++
					bs = append(bs, sourceBatch(kinds[(round+i)%3], step, 1+step%4, int8(step%5)))
				}
				appendAll(t, s, e.parts[p], bs...)
				if commit {
					committed[p] = append(committed[p], bs...)
				}
			}
			end(t, s, commit)
			id, epoch := s.txn.Producer()
			if id != id0 {
				t.Fatalf("producer ID changed from %d to %d", id0, id)
			}
			wantEpoch := epoch0
			if e.ver == appender.TxnV2 {
				wantEpoch = epoch0 + int16(round) + 1 // KIP-890: every EndTxn bumps it
			}
			if epoch != wantEpoch {
				t.Fatalf("after transaction %d: epoch %d, want %d (%s)", round, epoch, wantEpoch, e.ver)
			}
		}
		want := append(wantOf(0, committed[0]...), wantOf(1, committed[1]...)...)
		checkRecords(t, "read_committed", readBack(t, e.c, e.topic, true), want)

		// The appends show in the appender's metrics, as the preserve
		// mode's do: one latency sample per batch (5 transactions of 3
		// batches to each of 2 partitions), and one request of one batch
		// per attempt: one per batch, plus at most one per retriable
		// failure (the only error kind allowed; a failed leader lookup
		// is one without a request) and per overtaken batch sent again.
		// (A loaded machine can earn a retry: CI's Kafka 4.4.0 answered
		// one of 30 appends with a retriable error; the test had wanted
		// none, a timing assumption.)
		const appends = 5 * 2 * 3
		got := gathered(t, reg)
		byKind := errorsByKind(t, reg)
		retries, overtaken := byKind[appender.KindRetriable], float64(s.txn.Overtaken())
		if got["mirrord_append_errors_total"] != retries {
			t.Fatalf("append errors by kind %v, want retriable ones only", byKind)
		}
		if retries+overtaken > 0 {
			t.Logf("%v retriable failures and %v overtaken batches, sent again", retries, overtaken)
		}
		reqs := got["mirrord_produce_requests_total"]
		if got["mirrord_append_latency_seconds"] != appends || reqs < appends || reqs > appends+retries+overtaken || got["mirrord_produce_request_batches"] != reqs {
			t.Fatalf("metrics %v, want %d appends and from %d to %v requests of one batch each", got, appends, appends, appends+retries+overtaken)
		}
	})
}

// errorsByKind is mirrord_append_errors_total of reg by its kind label.
func errorsByKind(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, mf := range gather(t, reg) {
		if mf.GetName() != "mirrord_append_errors_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

func gather(t *testing.T, reg *prometheus.Registry) []*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// gathered sums each metric of reg over its labels: a counter's value, a
// histogram's sample count.
func gathered(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, mf := range gather(t, reg) {
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				out[mf.GetName()] += m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				out[mf.GetName()] += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// holdProduce makes the next transactional Produce through px wait until
// release is called; held is closed once it waits.
func holdProduce(t *testing.T, px *faultproxy.Proxy) (held <-chan struct{}, release func()) {
	var armed atomic.Bool
	h, r := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(r) }) }
	t.Cleanup(release)
	px.Intercept(func(f *faultproxy.Frame) faultproxy.Action {
		if f.APIKey != int16(kmsg.Produce) || f.IsResponse() || !armed.Load() {
			return faultproxy.Pass
		}
		req := kmsg.NewPtrProduceRequest()
		req.Version = f.Version
		if req.ReadFrom(f.Request) != nil || req.TransactionID == nil || !armed.CompareAndSwap(true, false) {
			return faultproxy.Pass
		}
		close(h)
		<-r
		return faultproxy.Pass
	})
	armed.Store(true)
	return h, release
}

func proxied(t *testing.T, c *mirrortest.Cluster) *faultproxy.Proxy {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	brokers, err := faultproxy.Brokers(ctx, c.Client)
	if err != nil {
		t.Fatal(err)
	}
	return faultproxy.Start(t, brokers)
}

// Guards the broker's fencing of a zombie session (issue 22, item 3): a
// session's Produce held in the network while a new session of the same
// transactional.id begins (InitProducerId) is refused when it arrives, the
// zombie's commit is refused, and nothing the zombie appended, before or
// after the takeover, is visible to read_committed consumers; the new
// session's data is.
func TestTxnZombieFenced(t *testing.T) {
	mirrortest.Each(t, func(t *testing.T, b mirrortest.Backend) {
		e := newTxnEnv(t, b, "txn-zombie", 2)
		txid := mirrortest.NamesFor(t, b).Of("txn-zombie")
		px := proxied(t, e.c)
		zombie := e.open(t, txid, kgo.SeedBrokers(px.Addrs()...))

		// The zombie commits once (visible), then appends to partition 0
		// in a second transaction (never visible).
		first := sourceBatch("idempotent", 1, 3, 0)
		appendAll(t, zombie, e.parts[0], first)
		end(t, zombie, true)
		lost := sourceBatch("plain", 2, 2, 3)
		appendAll(t, zombie, e.parts[0], lost)

		// Its next append, to partition 1, is held in the network.
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		if err := zombie.txn.Add(ctx, []tp.Key{e.parts[1].Key()}); err != nil {
			t.Fatal(err)
		}
		held, release := holdProduce(t, px)
		late := sourceBatch("transactional", 3, 4, 4)
		type result struct {
			off int64
			err error
		}
		done := make(chan result, 1)
		go func() {
			off, err := zombie.txn.Append(ctx, appender.TxnAppendConfig{}, zombie.ls, e.parts[1], clone(late.raw))
			done <- result{off, err}
		}()
		select {
		case <-held:
		case <-ctx.Done():
			t.Fatal("the zombie's produce never reached the proxy")
		}

		// The takeover: a new session of the same transactional.id.
		next := e.open(t, txid)
		if id, epoch := next.txn.Producer(); id == 0 && epoch == 0 {
			t.Fatal("no producer")
		}
		after := sourceBatch("idempotent", 4, 2, 1)
		appendAll(t, next, e.parts[1], after)
		end(t, next, true)

		release()
		r := <-done
		if !errors.Is(r.err, appender.ErrTxnFenced) {
			t.Fatalf("the zombie's held produce: offset %d, error %v; want ErrTxnFenced", r.off, r.err)
		}
		if err := zombie.txn.End(ctx, true); !errors.Is(err, appender.ErrTxnFenced) {
			t.Fatalf("the zombie's commit: %v, want ErrTxnFenced", err)
		}
		t.Logf("zombie refused: %v", r.err)

		want := append(wantOf(0, first), wantOf(1, after)...)
		checkRecords(t, "read_committed", readBack(t, e.c, e.topic, true), want)
	})
}

// Guards idempotent retries under the session's producer (issue 22, item
// 4): a Produce whose answer is lost (the connection drops after the broker
// appended) is sent again with the same sequence, and the broker answers
// the repeat with the first append's offset instead of appending twice.
func TestTxnRetryAfterLostAnswer(t *testing.T) {
	mirrortest.Each(t, func(t *testing.T, b mirrortest.Backend) {
		e := newTxnEnv(t, b, "txn-retry", 1)
		px := proxied(t, e.c)
		s := e.open(t, mirrortest.NamesFor(t, b).Of("txn-retry"), kgo.SeedBrokers(px.Addrs()...))
		var drops atomic.Int32
		drops.Store(2) // the first two transactional produce answers are lost
		px.Intercept(func(f *faultproxy.Frame) faultproxy.Action {
			if f.APIKey == int16(kmsg.Produce) && f.IsResponse() && drops.Add(-1) >= 0 {
				return faultproxy.DropConnection
			}
			return faultproxy.Pass
		})
		bs := []srcBatch{sourceBatch("idempotent", 1, 3, 0), sourceBatch("plain", 2, 5, 2), sourceBatch("transactional", 3, 1, 4)}
		appendAll(t, s, e.parts[0], bs...)
		end(t, s, true)
		if n := drops.Load(); n >= 0 {
			t.Fatalf("only %d of the 2 answers were dropped", 2-n)
		}
		checkRecords(t, "read_committed", readBack(t, e.c, e.topic, true), wantOf(0, bs...))
	})
}

// Guards what a partition leader answers a Produce while the coordinator
// still completes the previous transaction (transaction.version 2: the
// leader adds the partition to the transaction on the producer's behalf and
// gets CONCURRENT_TRANSACTIONS; seen on Kafka 4.4.0 right after commits in
// the fault suite): the append is sent again, as Kafka's producer retries
// it, and the batch is in the log once. The answers here are replaced after
// the broker appended, so the retries are also duplicates the broker
// recognises by sequence.
func TestTxnRetryConcurrentTransactions(t *testing.T) {
	mirrortest.Each(t, func(t *testing.T, b mirrortest.Backend) {
		e := newTxnEnv(t, b, "txn-concurrent", 1)
		px := proxied(t, e.c)
		s := e.open(t, mirrortest.NamesFor(t, b).Of("txn-concurrent"), kgo.SeedBrokers(px.Addrs()...))
		var left atomic.Int32
		left.Store(2)
		px.Intercept(func(f *faultproxy.Frame) faultproxy.Action {
			if f.APIKey == int16(kmsg.Produce) && f.IsResponse() && f.Writes(e.topic, 0) && left.Add(-1) >= 0 {
				return faultproxy.Replace(faultproxy.ProduceError(f, kerr.ConcurrentTransactions.Code))
			}
			return faultproxy.Pass
		})
		bs := []srcBatch{sourceBatch("idempotent", 1, 3, 3), sourceBatch("plain", 2, 2, 0)}
		appendAll(t, s, e.parts[0], bs...)
		end(t, s, true)
		if n := left.Load(); n >= 0 {
			t.Fatalf("only %d of the 2 answers were replaced", 2-n)
		}
		checkRecords(t, "read_committed", readBack(t, e.c, e.topic, true), wantOf(0, bs...))
	})
}

// Guards the bound on retries (issue 22, item 5: transaction timeouts
// handled and explained): a partition whose every Produce answer is
// retriable (NOT_ENOUGH_REPLICAS here, as a destination below
// min.insync.replicas answers) is retried only while the transaction is
// younger than the transaction timeout, which the coordinator enforces by
// aborting it. Then the append ends with ErrTxnTimedOut (an abort, not a
// fencing by a newer session), and the next session commits with nothing
// of the given-up transaction visible. Before, the append retried until
// its context ended.
func TestTxnRetryEndsAtTransactionTimeout(t *testing.T) {
	mirrortest.Each(t, func(t *testing.T, b mirrortest.Backend) {
		e := newTxnEnv(t, b, "txn-timeout", 2)
		e.timeout = 3 * time.Second
		px := proxied(t, e.c)
		txid := mirrortest.NamesFor(t, b).Of("txn-timeout")
		s := e.open(t, txid, kgo.SeedBrokers(px.Addrs()...))
		var refusing atomic.Bool
		refusing.Store(true)
		px.Intercept(func(f *faultproxy.Frame) faultproxy.Action {
			if refusing.Load() && f.APIKey == int16(kmsg.Produce) && f.IsResponse() && f.Writes(e.topic, 0) {
				return faultproxy.Replace(faultproxy.ProduceError(f, kerr.NotEnoughReplicas.Code))
			}
			return faultproxy.Pass
		})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := s.txn.Add(ctx, []tp.Key{e.parts[0].Key(), e.parts[1].Key()}); err != nil {
			t.Fatal(err)
		}
		lost := sourceBatch("idempotent", 1, 3, 0)
		if _, err := s.txn.Append(ctx, appender.TxnAppendConfig{}, s.ls, e.parts[1], clone(lost.raw)); err != nil {
			t.Fatal(err)
		}
		_, err := s.txn.Append(ctx, appender.TxnAppendConfig{}, s.ls, e.parts[0], clone(sourceBatch("plain", 2, 2, 0).raw))
		switch {
		case err == nil:
			t.Fatal("the append succeeded through refused answers")
		case ctx.Err() != nil:
			t.Fatalf("the append retried until its context ended: %v", err)
		case !errors.Is(err, appender.ErrTxnTimedOut) || !errors.Is(err, appender.ErrTxnAborted) || errors.Is(err, appender.ErrTxnFenced):
			t.Fatalf("append: %v; want ErrTxnTimedOut and ErrTxnAborted, not ErrTxnFenced", err)
		}
		t.Logf("append ended: %v", err)
		if err := s.txn.End(ctx, true); !errors.Is(err, appender.ErrTxnTimedOut) {
			t.Fatalf("commit after the timeout: %v, want ErrTxnTimedOut", err)
		}

		refusing.Store(false)
		next := e.open(t, txid, kgo.SeedBrokers(px.Addrs()...))
		bs := []srcBatch{sourceBatch("transactional", 3, 4, 2)}
		appendAll(t, next, e.parts[0], bs...)
		end(t, next, true)
		checkRecords(t, "read_committed", readBack(t, e.c, e.topic, true), wantOf(0, bs...))
	})
}

// Guards the coalescing of AddPartitionsToTxn under transaction.version 1
// (Kafka 3.x; forced here on every backend): a session appends to many
// partitions at once, one goroutine per partition, and each append adds
// its partition first. Each AddPartitionsToTxn is a write to the
// coordinator's transaction log; before, every partition took a request
// of its own (24 here), now the partitions asked for while a request is in
// flight go together in the next one. The appends commit and read back
// record by record.
func TestTxnAddCoalesced(t *testing.T) {
	mirrortest.Each(t, func(t *testing.T, b mirrortest.Backend) {
		const n = 24
		e := newTxnEnv(t, b, "txn-add", n)
		e.ver = appender.TxnV1
		s := e.open(t, mirrortest.NamesFor(t, b).Of("txn-add"))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		batches := make([]srcBatch, n)
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			batches[i] = sourceBatch("idempotent", i+1, 2, int8(i%5))
		}
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				if err := s.txn.Add(ctx, []tp.Key{e.parts[i].Key()}); err != nil {
					errs[i] = err
					return
				}
				_, errs[i] = s.txn.Append(ctx, appender.TxnAppendConfig{}, s.ls, e.parts[i], clone(batches[i].raw))
			})
		}
		close(start)
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		end(t, s, true)
		reqs := s.txn.AddRequests()
		t.Logf("%d partitions added with %d AddPartitionsToTxn requests", n, reqs)
		if reqs >= n/2 {
			t.Errorf("%d AddPartitionsToTxn requests for %d partitions: not coalesced", reqs, n)
		}
		var want []got
		for i := range n {
			want = append(want, wantOf(int32(i), batches[i])...)
		}
		checkRecords(t, "read_committed", readBack(t, e.c, e.topic, true), want)
	})
}

// produceSeq is the base sequence of the batch a Produce frame (request or
// response) writes to partition 0 of topic, or -1.
func produceSeq(f *faultproxy.Frame, topic string) int32 {
	if f.APIKey != int16(kmsg.Produce) || !f.Writes(topic, 0) {
		return -1
	}
	req := kmsg.NewPtrProduceRequest()
	req.Version = f.Version
	if req.ReadFrom(f.Request) != nil {
		return -1
	}
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			if h, err := transform.ParseHeader(rp.Records); err == nil && rp.Partition == 0 {
				return h.BaseSequence
			}
		}
	}
	return -1
}

// Guards several appends of a partition in flight (issue 22, item 4): the
// sequences are reserved in order; a batch that reaches the broker before
// the one reserved before it (whose request was lost and waits to be sent
// again) is answered OUT_OF_ORDER_SEQUENCE_NUMBER (or UNKNOWN_PRODUCER_ID),
// waits for it and is sent again at once, as Kafka's idempotent producer
// retries; the log holds both in reservation order. The overtaking is
// tried behind a batch already appended and as a transaction's first
// batches (a new epoch under transaction.version 2). When
// the earlier batch fails for good, the later one fails too, and the
// aborted transaction shows nothing.
func TestTxnOvertakenBatch(t *testing.T) {
	mirrortest.Each(t, func(t *testing.T, b mirrortest.Backend) {
		e := newTxnEnv(t, b, "txn-overtake", 1)
		px := proxied(t, e.c)
		s := e.open(t, mirrortest.NamesFor(t, b).Of("txn-overtake"), kgo.SeedBrokers(px.Addrs()...))
		p := e.parts[0]
		var dropSeq, failSeq atomic.Int32
		dropSeq.Store(-1)
		failSeq.Store(-1)
		dropped := make(chan struct{}, 1)
		px.Intercept(func(f *faultproxy.Frame) faultproxy.Action {
			seq := produceSeq(f, e.topic)
			switch {
			case seq < 0:
			case !f.IsResponse() && dropSeq.CompareAndSwap(seq, -1):
				dropped <- struct{}{}
				return faultproxy.DropConnection // the broker never sees it
			case f.IsResponse() && failSeq.CompareAndSwap(seq, -1):
				return faultproxy.Replace(faultproxy.ProduceError(f, kerr.MessageTooLarge.Code))
			}
			return faultproxy.Pass
		})
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		// The lost request waits this long before it is sent again; the
		// later batch retries sooner if it met the closing connection.
		slow := appender.TxnAppendConfig{RetryBackoff: 2 * time.Second}
		type result struct {
			off int64
			err error
		}
		// overtake appends first and second, reserved in that order, with
		// first's request lost so that second arrives first.
		overtake := func(first, second srcBatch, fail bool) (r1, r2 result) {
			t.Helper()
			if err := s.txn.Add(ctx, []tp.Key{p.Key()}); err != nil {
				t.Fatal(err)
			}
			res1, err := s.txn.Reserve(p.Key(), int32(len(first.recs)))
			if err != nil {
				t.Fatal(err)
			}
			res2, err := s.txn.Reserve(p.Key(), int32(len(second.recs)))
			if err != nil {
				t.Fatal(err)
			}
			dropSeq.Store(res1.Sequence)
			if fail {
				failSeq.Store(res1.Sequence)
			}
			c1, c2 := make(chan result, 1), make(chan result, 1)
			go func() {
				off, err := s.txn.AppendReserved(ctx, slow, s.ls, p, clone(first.raw), res1)
				c1 <- result{off, err}
			}()
			select {
			case <-dropped:
			case <-ctx.Done():
				t.Fatal("the first batch's produce never reached the proxy")
			}
			go func() {
				off, err := s.txn.AppendReserved(ctx, appender.TxnAppendConfig{}, s.ls, p, clone(second.raw), res2)
				c2 <- result{off, err}
			}()
			return <-c1, <-c2
		}

		// Behind a batch appended already.
		a0, a1, a2 := sourceBatch("transactional", 1, 2, 4), sourceBatch("idempotent", 2, 3, 1), sourceBatch("plain", 3, 2, 0)
		appendAll(t, s, p, a0)
		r1, r2 := overtake(a1, a2, false)
		if r1.err != nil || r2.err != nil || r2.off != r1.off+3 {
			t.Fatalf("overtaken behind an appended batch: %+v %v; %+v %v", r1, r1.err, r2, r2.err)
		}
		end(t, s, true)
		// The next transaction's first batches (under transaction.version
		// 2 a new epoch, whose first sequence must be 0).
		b1, b2 := sourceBatch("idempotent", 4, 4, 3), sourceBatch("plain", 5, 1, 2)
		if r1, r2 = overtake(b1, b2, false); r1.err != nil || r2.err != nil || r2.off != r1.off+4 {
			t.Fatalf("overtaken as a transaction's first batches: %+v %v; %+v %v", r1, r1.err, r2, r2.err)
		}
		end(t, s, true)
		if n := s.txn.Overtaken(); n < 2 {
			t.Fatalf("%d batches sent again after overtaking, want 2: the second batch never arrived first", n)
		}
		// The earlier batch fails for good: so does the later one, which
		// waited for it.
		c1, c2 := sourceBatch("idempotent", 6, 2, 0), sourceBatch("idempotent", 7, 2, 0)
		r1, r2 = overtake(c1, c2, true)
		if !errors.Is(r1.err, appender.ErrTooLarge) || !errors.Is(r2.err, appender.ErrTxnAborted) {
			t.Fatalf("after the earlier batch failed: %v; the later one: %v", r1.err, r2.err)
		}
		t.Logf("the later batch: %v", r2.err)
		end(t, s, false)
		checkRecords(t, "read_committed", readBack(t, e.c, e.topic, true), wantOf(0, a0, a1, a2, b1, b2))
	})
}

// Documents what a partition leader answers the first batch of a producer
// it holds no state of when the batch's sequence is not 0 (a batch that
// overtook the producer's first): Kafka 3.9.2 appends it
// (ProducerAppendInfo.checkSequence accepts any first sequence of an
// unknown producer), so the producer's real first batch is then refused;
// Kafka 4.4.0 and kfake refuse it. This is why a transactional session
// sends each partition's first batch of a transaction alone (link's
// txnPlan).
func TestTxnNewProducerSequence(t *testing.T) {
	mirrortest.Each(t, func(t *testing.T, b mirrortest.Backend) {
		e := newTxnEnv(t, b, "txn-newseq", 1)
		s := e.open(t, mirrortest.NamesFor(t, b).Of("txn-newseq"))
		p := e.parts[0]
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := s.txn.Add(ctx, []tp.Key{p.Key()}); err != nil {
			t.Fatal(err)
		}
		first, err := s.txn.Reserve(p.Key(), 3)
		if err != nil {
			t.Fatal(err)
		}
		second, err := s.txn.Reserve(p.Key(), 2)
		if err != nil {
			t.Fatal(err)
		}
		s.txn.Abandon(first) // never sent: the second arrives as the producer's first
		_, err = s.txn.AppendReserved(ctx, appender.TxnAppendConfig{}, s.ls, p, clone(sourceBatch("plain", 1, 2, 0).raw), second)
		accepts := b.Kafka != "" && b.Kafka < "4"
		switch {
		case accepts && err != nil:
			t.Fatalf("Kafka %s refused a new producer's first batch at sequence %d: %v (the plan's rule rests on its accepting it)", b.Kafka, second.Sequence, err)
		case !accepts && !errors.Is(err, appender.ErrTxnAborted):
			t.Fatalf("%s: a new producer's first batch at sequence %d: %v, want it refused", b, second.Sequence, err)
		}
		t.Logf("%s: a new producer's first batch at sequence %d: %v", b, second.Sequence, err)
		end(t, s, false)
	})
}

// Guards Split (a run of batches reserved as one and sent one by one after
// all, when their joined batch came out too large): the parts take the
// reservation's sequences in order, in its place between the reservations
// before and after it, and the broker accepts every batch in order; a
// reservation already sent, or counts that do not add up to it, are
// refused.
func TestTxnSplitReservation(t *testing.T) {
	mirrortest.Each(t, func(t *testing.T, b mirrortest.Backend) {
		e := newTxnEnv(t, b, "txn-split", 1)
		s := e.open(t, mirrortest.NamesFor(t, b).Of("txn-split"))
		p := e.parts[0]
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := s.txn.Add(ctx, []tp.Key{p.Key()}); err != nil {
			t.Fatal(err)
		}
		bs := []srcBatch{sourceBatch("idempotent", 1, 2, 3), sourceBatch("plain", 2, 3, 0), sourceBatch("transactional", 3, 2, 4), sourceBatch("plain", 4, 1, 1)}
		first, err := s.txn.Reserve(p.Key(), 2)
		if err != nil {
			t.Fatal(err)
		}
		run, err := s.txn.Reserve(p.Key(), 5)
		if err != nil {
			t.Fatal(err)
		}
		last, err := s.txn.Reserve(p.Key(), 1)
		if err != nil {
			t.Fatal(err)
		}
		// The last batch is sent first, before the split: it waits for
		// the run, then, once the run is split, for its parts (before,
		// it waited for the replaced reservation until the context
		// ended).
		var wg sync.WaitGroup
		var lastErr error
		wg.Go(func() {
			_, lastErr = s.txn.AppendReserved(ctx, appender.TxnAppendConfig{}, s.ls, p, clone(bs[3].raw), last)
		})
		time.Sleep(100 * time.Millisecond) // let it wait (the test holds either way)
		if _, err := s.txn.Split(run, []int32{3, 1}); !errors.Is(err, appender.ErrInvalidBatch) {
			t.Fatalf("a split into 4 of 5 offsets: %v, want ErrInvalidBatch", err)
		}
		parts, err := s.txn.Split(run, []int32{3, 2})
		if err != nil {
			t.Fatal(err)
		}
		if parts[0].Sequence != run.Sequence || parts[1].Sequence != run.Sequence+3 || last.Sequence != run.Sequence+5 {
			t.Fatalf("parts at sequences %d and %d of a reservation at %d, the next at %d", parts[0].Sequence, parts[1].Sequence, run.Sequence, last.Sequence)
		}
		for i, r := range []*appender.Reservation{first, parts[0], parts[1]} {
			if _, err := s.txn.AppendReserved(ctx, appender.TxnAppendConfig{}, s.ls, p, clone(bs[i].raw), r); err != nil {
				t.Fatalf("append %d: %v", i, err)
			}
		}
		wg.Wait()
		if lastErr != nil {
			t.Fatalf("the batch after the parts: %v", lastErr)
		}
		if n := s.txn.Overtaken(); n != 0 {
			t.Errorf("%d batches overtook an earlier one: the batch after the run was sent before the parts", n)
		}
		if _, err := s.txn.Split(first, []int32{1, 1}); !errors.Is(err, appender.ErrInvalidBatch) {
			t.Fatalf("a split of a reservation already appended: %v, want ErrInvalidBatch", err)
		}
		end(t, s, true)
		checkRecords(t, "read_committed", readBack(t, e.c, e.topic, true), wantOf(0, bs...))
	})
}
