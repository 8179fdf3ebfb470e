package appender

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/seed83556561/mirrord/internal/kafka/leaders"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/transform"
)

// TestNew guards construction: every problem reported at once, and a
// client whose acks are not all-ISR refused (kgo would send our raw Produce
// requests with its acks).
func TestNew(t *testing.T) {
	c := kafkatest.NewCluster(t, kafkatest.DestClusterID)
	good := kafkatest.Client(t, c)
	leaderAck := kafkatest.Client(t, c, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	noAck := kafkatest.Client(t, c, kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite())
	leaders := leaders.New(good, 0)
	yes := func() (time.Time, bool) { return time.Now().Add(time.Minute), true }
	cases := []struct {
		name string
		cfg  Config
		deps Deps
		want []string // substrings of the error; none: New succeeds
	}{
		{"defaults", Config{Link: "l"}, Deps{Client: good, Leaders: leaders, Lease: yes}, nil},
		{"leader acks", Config{}, Deps{Client: leaderAck, Leaders: leaders, Lease: yes}, []string{"LeaderAck", "AllISRAcks"}},
		{"no acks", Config{}, Deps{Client: noAck, Leaders: leaders, Lease: yes}, []string{"NoAck", "AllISRAcks"}},
		{"missing deps", Config{}, Deps{}, []string{"Deps.Client is nil", "Deps.Leaders is nil", "Deps.Lease is nil"}},
		{"bad config, all at once", Config{
			RequestTimeout:       -time.Second,
			MaxRequestBytes:      10,
			MaxRequestBatches:    -2,
			MaxInflightPerBroker: -1,
			RetryBackoff:         time.Minute,
		}, Deps{Client: good, Leaders: leaders, Lease: yes},
			[]string{"RequestTimeout", "MaxRequestBytes: 10", "MaxRequestBatches: -2", "MaxInflightPerBroker: -1", "RetryBackoff: 1m0s"}},
		{"request larger than the client may write", Config{MaxRequestBytes: 200 << 20}, Deps{Client: good, Leaders: leaders, Lease: yes},
			[]string{"BrokerMaxWriteBytes"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, err := New(c.cfg, c.deps)
			if len(c.want) == 0 {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				if a.cfg.RequestTimeout != DefaultRequestTimeout || a.cfg.MaxRequestBytes != DefaultMaxRequestBytes ||
					a.cfg.MaxInflightPerBroker != DefaultMaxInflightPerBroker || a.cfg.RetryBackoff != DefaultRetryBackoff {
					t.Fatalf("defaults not applied: %+v", a.cfg)
				}
				return
			}
			if err == nil {
				t.Fatalf("New succeeded, want an error with %q", c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestSubmitRefusesUnreadyBatches guards the header checks of Submit: a
// batch a broker would refuse, or would treat as idempotent, is never sent.
func TestSubmitRefusesUnreadyBatches(t *testing.T) {
	h := newHarness(t, harnessOpts{noRun: true})
	p := tp.Partition{Topic: "t", Partition: 0}
	good := makeBatch(t, true, 1000, recsFor(p, 0, 2))
	mod := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	cases := []struct {
		name  string
		p     tp.Partition
		batch []byte
		want  string
	}{
		{"not rewritten: source producer ID", p, mod(func(b []byte) []byte { binary.BigEndian.PutUint64(b[43:], srcPID); return b }), "producer ID 5 is not negative"},
		{"base offset kept", p, mod(func(b []byte) []byte { binary.BigEndian.PutUint64(b[0:], 77); return b }), "base offset is 77"},
		{"transactional bit kept", p, mod(func(b []byte) []byte { b[22] |= transform.AttrTransactional; return b }), "transactional bit"},
		{"control batch", p, mod(func(b []byte) []byte { b[22] |= transform.AttrControl; return b }), "control batch"},
		{"two batches", p, append(append([]byte(nil), good...), good...), "exactly one batch"},
		{"truncated", p, good[:40], "truncated"},
		{"legacy magic", p, mod(func(b []byte) []byte { b[16] = 1; return b }), "magic 1"},
		{"no topic", tp.Partition{}, good, "no destination topic"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := h.a.Submit(Request{Partition: c.p, Batch: c.batch})
			if !errors.Is(err, ErrInvalidBatch) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Submit: %v, want ErrInvalidBatch with %q", err, c.want)
			}
		})
	}
	if err := h.a.Submit(Request{Partition: p, Batch: good}); err != nil {
		t.Fatalf("Submit of a rewritten batch: %v", err)
	}
}

// TestSubmitBusyClosed guards Submit's refusals: a second batch for a
// partition (which could reorder or duplicate) until its result is
// delivered, and anything after Run returned; and Run's single use.
func TestSubmitBusyClosed(t *testing.T) {
	h := newHarness(t, harnessOpts{noRun: true})
	ps := h.createTopic("busy", 3, nil)
	b := makeBatch(t, false, 1000, recsFor(ps[0], 0, 1))
	h.submit(ps[0], b, 1)
	if err := h.a.Submit(Request{Partition: ps[0], Batch: b}); !errors.Is(err, ErrBusy) {
		t.Fatalf("second Submit for %s: %v, want ErrBusy", ps[0], err)
	}
	h.submit(ps[1], b, 2)
	h.submit(ps[2], b, 3)

	h.run()
	for range 3 {
		if r := h.result(); r.Err != nil {
			t.Fatalf("result %s: %v", r.Partition, r.Err)
		}
	}
	// A delivered result frees its partition, taken or not.
	h.submit(ps[0], b, 4)
	h.submit(ps[2], b, 5)
	for range 2 {
		if r := h.result(); r.Err != nil {
			t.Fatalf("result %s: %v", r.Partition, r.Err)
		}
	}

	h.stop()
	if rest := h.drain(); len(rest) != 0 {
		t.Fatalf("results after Run returned: %v", rest)
	}
	if err := h.a.Submit(Request{Partition: ps[1], Batch: b}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Submit after Run returned: %v, want ErrClosed", err)
	}
	if err := h.a.Run(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Run: %v, want ErrClosed", err)
	}
	h.checkLog(ps[0], []wire{{recsFor(ps[0], 0, 1), -1}, {recsFor(ps[0], 0, 1), -1}})
	h.checkLog(ps[1], []wire{{recsFor(ps[0], 0, 1), -1}})
	h.checkLog(ps[2], []wire{{recsFor(ps[0], 0, 1), -1}, {recsFor(ps[0], 0, 1), -1}})
}

// TestAppendManyPartitions guards the request rules and ordering: every
// batch (of every codec) appended once, in order, with its negative
// producer ID; a request
// never holds two batches of one partition, requests hold several
// partitions of several topics, and a partition is never in a second
// request while the first is unanswered, even while one request is held
// back and the other brokers carry on.
func TestAppendManyPartitions(t *testing.T) {
	h := newHarness(t, harnessOpts{brokers: 3, noRun: true})
	ps := append(h.createTopic("many", 12, nil), h.createTopic("many2", 6, nil)...)
	const rounds = 5
	const perBatch = 3

	// Hold back the first Produce request until the partitions of the
	// other brokers are done.
	release := make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	held := make(chan int32, 1)
	var holding atomic.Bool
	h.c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		if !holding.CompareAndSwap(false, true) {
			return nil, nil, false
		}
		held <- h.c.CurrentNode()
		h.c.SleepControl(func() { <-release })
		return nil, nil, false // then the cluster appends it
	})

	leaderOf := make(map[tp.Key]int32)
	for _, p := range ps {
		leaderOf[p.Key()] = h.c.LeaderFor(p.Topic, p.Partition)
	}
	sent := make(map[tp.Key][]wire)
	next := make(map[tp.Key]int)
	submitNext := func(p tp.Partition) {
		j := next[p.Key()]
		recs := recsFor(p, j, perBatch)
		h.submit(p, makeBatchCodec(t, int8(j%5), j%2 == 0, int64(1000+j), recs), uint64(j))
		sent[p.Key()] = append(sent[p.Key()], wire{recs: recs, baseOffset: -1})
		next[p.Key()] = j + 1
	}
	for _, p := range ps { // before Run: the first requests gather them
		submitNext(p)
	}
	h.run()

	var heldNode int32
	select {
	case heldNode = <-held:
	case <-time.After(deadline):
		t.Fatal("no produce request arrived")
	}
	var heldParts, otherParts []tp.Partition
	for _, p := range ps {
		if leaderOf[p.Key()] == heldNode {
			heldParts = append(heldParts, p)
		} else {
			otherParts = append(otherParts, p)
		}
	}
	if len(otherParts) == 0 {
		t.Fatalf("kfake put every partition on broker %d; the test needs several leaders", heldNode)
	}

	receive := func() {
		r := h.result()
		h.obs.resultFor(r.Partition)
		k := r.Partition.Key()
		if r.Err != nil {
			t.Fatalf("%s batch %d: %v", r.Partition, r.Tag, r.Err)
		}
		if int(r.Tag) != next[k]-1 {
			t.Fatalf("%s: result for batch %d, the batch in the appender is %d", r.Partition, r.Tag, next[k]-1)
		}
		sent[k][r.Tag].baseOffset = r.BaseOffset
		if next[k] < rounds {
			submitNext(r.Partition)
		}
	}
	// While the request to heldNode is held, the other brokers' partitions
	// run all their rounds; the held ones stay in the appender.
	for range len(otherParts) * rounds {
		receive()
	}
	for _, p := range heldParts {
		if next[p.Key()] != 1 {
			t.Fatalf("%s on held broker %d got past its first batch", p, heldNode)
		}
		if err := h.a.Submit(Request{Partition: p, Batch: makeBatch(t, false, 1, recsFor(p, 99, 1))}); !errors.Is(err, ErrBusy) {
			t.Fatalf("Submit for %s while its request is held: %v, want ErrBusy", p, err)
		}
	}
	releaseOnce.Do(func() { close(release) })
	for range len(heldParts) * rounds {
		receive()
	}

	// The requests: one batch per partition, several partitions and
	// topics per request, the held one carrying all of heldNode's.
	reqs := h.obs.seen()
	multiPart, multiTopic := false, false
	for i, r := range reqs {
		topics := make(map[string]bool)
		partsSeen := make(map[tp.Key]bool)
		for _, sp := range r.parts {
			if sp.batches != 1 {
				t.Fatalf("request %d to broker %d carries %d batches for %s[%d]", i, r.node, sp.batches, sp.topic, sp.part)
			}
			k := tp.Key{Topic: sp.topic, Partition: sp.part}
			if partsSeen[k] {
				t.Fatalf("request %d carries %s[%d] twice", i, sp.topic, sp.part)
			}
			partsSeen[k] = true
			topics[sp.topic] = true
		}
		multiPart = multiPart || len(r.parts) > 1
		multiTopic = multiTopic || len(topics) > 1
	}
	if !multiPart || !multiTopic {
		t.Fatalf("no request carried several partitions (%v) or several topics (%v)", multiPart, multiTopic)
	}
	if got := h.counter("produce_requests_total"); int(got) != len(reqs) {
		t.Fatalf("produce_requests_total %v, the cluster saw %d", got, len(reqs))
	}

	// A partition arrives again only after the test received its result.
	h.obs.mu.Lock()
	events := append([]event(nil), h.obs.events...)
	h.obs.mu.Unlock()
	inFlight := make(map[tp.Key]bool)
	arrivals := make(map[tp.Key]int)
	for _, e := range events {
		switch {
		case !e.result && inFlight[e.p]:
			t.Fatalf("%s[%d] arrived in a second request while the first was unanswered", e.p.Topic, e.p.Partition)
		case e.result && !inFlight[e.p]:
			t.Fatalf("result for %s[%d] without a request", e.p.Topic, e.p.Partition)
		}
		inFlight[e.p] = !e.result
		if !e.result {
			arrivals[e.p]++
		}
	}
	for _, p := range ps {
		if arrivals[p.Key()] != rounds {
			t.Fatalf("%s arrived in %d requests, want %d", p, arrivals[p.Key()], rounds)
		}
		h.checkLog(p, sent[p.Key()])
	}
}

// TestProduceVersions guards the mapping of answers to batches: Produce
// v13 names topics by ID only, older versions by name only; a Request with
// no topic ID takes the one the metadata reports.
func TestProduceVersions(t *testing.T) {
	cases := []struct {
		name    string
		opts    []kgo.Opt
		byName  bool
		version func(int16) bool
	}{
		{"v13 by topic ID", nil, false, func(v int16) bool { return v == 13 }},
		{"v11 by name", []kgo.Opt{kgo.MaxVersions(kversion.V3_9_0())}, true, func(v int16) bool { return v >= 3 && v < 13 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, harnessOpts{clientOpts: c.opts})
			a := h.createTopic("alpha", 2, nil)
			b := h.createTopic("beta", 2, nil)
			noID := []tp.Partition{{Topic: "beta", Partition: 0}, {Topic: "beta", Partition: 1}}
			sent := make(map[tp.Key][]wire)
			for j := range 3 {
				for _, p := range append(append([]tp.Partition(nil), a...), noID...) {
					h.submit(p, makeBatch(t, false, int64(j), recsFor(p, j, 2)), uint64(j))
				}
				for range 4 {
					r := h.result()
					if r.Err != nil {
						t.Fatalf("%s: %v", r.Partition, r.Err)
					}
					sent[r.Partition.Key()] = append(sent[r.Partition.Key()], wire{recsFor(r.Partition, j, 2), r.BaseOffset})
				}
			}
			for _, r := range h.obs.seen() {
				if !c.version(r.version) {
					t.Fatalf("request went out as Produce v%d", r.version)
				}
				for _, sp := range r.parts {
					if sp.byName != c.byName {
						t.Fatalf("v%d request named %s by name: %v, want %v", r.version, sp.topic, sp.byName, c.byName)
					}
				}
			}
			for _, p := range append(a, b...) {
				h.checkLog(p, sent[p.Key()])
			}
		})
	}
}

// afterAppend makes the cluster answer the next Produce request with code
// for every partition after it has appended the request's batches, as
// Apache Kafka's DelayedProduce does when the leader loses leadership
// (NOT_LEADER_OR_FOLLOWER) while it waits for the ISR. kfake has no
// replication to wait on, so the control holds the request and, meanwhile,
// appends the same batches through another connection.
func afterAppend(t *testing.T, c *kfake.Cluster, code int16) {
	helper := kafkatest.Client(t, c)
	var helping, done atomic.Bool
	c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		if helping.Load() || !done.CompareAndSwap(false, true) {
			return nil, nil, false
		}
		req := kreq.(*kmsg.ProduceRequest)
		node := c.CurrentNode()
		c.SleepControl(func() {
			helping.Store(true)
			defer helping.Store(false)
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			dup := *req
			kresp, err := helper.Broker(int(node)).Request(ctx, &dup)
			if err != nil {
				t.Errorf("helper append: %v", err)
				return
			}
			for _, rt := range kresp.(*kmsg.ProduceResponse).Topics {
				for _, rp := range rt.Partitions {
					if rp.ErrorCode != 0 {
						t.Errorf("helper append: %v", kerr.ErrorForCode(rp.ErrorCode))
					}
				}
			}
		})
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
}

// TestUnknownOutcome guards against duplicates: an answer that leaves the
// append possible is ErrUnknownOutcome and the appender does not send the
// batch again. Where the broker did append (REQUEST_TIMED_OUT: kfake, like
// Kafka, appends a timed-out acks=all produce; NOT_LEADER_OR_FOLLOWER after
// the append, as DelayedProduce answers), the test then does what a blind
// retry would do and shows the batch twice in the log: the destination does
// not deduplicate batches with a negative producer ID. Where kfake refused
// before the append (its NOT_LEADER_OR_FOLLOWER fault), the batch is
// missing, which is why the caller reconciles instead of assuming either.
func TestUnknownOutcome(t *testing.T) {
	cases := []struct {
		name     string
		inject   func(h *harness, p tp.Partition)
		appended bool
		code     *kerr.Error
	}{
		{"request timed out, appended", func(h *harness, p tp.Partition) {
			h.c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: p.Topic, Partitions: []int32{p.Partition}, Err: kerr.RequestTimedOut})
		}, true, kerr.RequestTimedOut},
		{"not enough replicas after append, appended", func(h *harness, p tp.Partition) {
			h.c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: p.Topic, Partitions: []int32{p.Partition}, Err: kerr.NotEnoughReplicasAfterAppend})
		}, true, kerr.NotEnoughReplicasAfterAppend},
		{"not leader after append (DelayedProduce)", func(h *harness, p tp.Partition) {
			afterAppend(h.t, h.c, kerr.NotLeaderForPartition.Code)
		}, true, kerr.NotLeaderForPartition},
		{"not leader before append", func(h *harness, p tp.Partition) {
			h.c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: p.Topic, Partitions: []int32{p.Partition}, Err: kerr.NotLeaderForPartition})
		}, false, kerr.NotLeaderForPartition},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, harnessOpts{})
			ps := h.createTopic("uncertain", 2, nil)
			p := ps[1]
			first := makeBatch(t, false, 1000, recsFor(p, 0, 3))
			if r := h.append1(p, first); r.Err != nil {
				t.Fatalf("first batch: %v", r.Err)
			}
			c.inject(h, p)
			batch := makeBatch(t, true, 2000, recsFor(p, 1, 4))
			r := h.append1(p, batch)
			if !errors.Is(r.Err, ErrUnknownOutcome) || !errors.Is(r.Err, c.code) || !strings.Contains(r.Err.Error(), p.String()) {
				t.Fatalf("result: %v, want ErrUnknownOutcome with %v naming %s", r.Err, c.code, p)
			}
			if got := h.counter("append_errors_total", KindUnknownOutcome); got != 1 {
				t.Fatalf("unknown_outcome count %v, want 1", got)
			}
			want := []wire{{recsFor(p, 0, 3), 0}}
			fromAppender := 2
			if c.appended {
				want = append(want, wire{recsFor(p, 1, 4), 3})
				if c.name == "not leader after append (DelayedProduce)" {
					fromAppender = 3 // the helper's copy went through the cluster too
				}
			}
			if n, _ := h.obs.carrying(p); n != fromAppender {
				t.Fatalf("%d requests carried %s, want %d: the appender sent the batch again", n, p, fromAppender)
			}
			h.checkLog(p, want)
			if !c.appended {
				return
			}

			// What a blind retry would have done: the broker appends it
			// again, a duplicate.
			if r := h.append1(p, batch); r.Err != nil {
				t.Fatalf("resubmitted batch: %v", r.Err)
			}
			h.checkLog(p, append(want, wire{recsFor(p, 1, 4), 7}))
		})
	}
}

// TestRetriedInternally guards the retries: answers that prove nothing was
// appended are retried inside the appender (after a leader refresh where
// the leader may be wrong), and the batch is appended exactly once.
func TestRetriedInternally(t *testing.T) {
	cases := []struct {
		name string
		code *kerr.Error
	}{
		{"not enough replicas", kerr.NotEnoughReplicas},
		{"unknown topic or partition", kerr.UnknownTopicOrPartition},
		{"leader not available", kerr.LeaderNotAvailable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, harnessOpts{})
			ps := h.createTopic("retry", 3, nil)
			p := ps[2]
			f := h.c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: p.Topic, Partitions: []int32{p.Partition}, Err: c.code, Count: 3})
			r := h.append1(p, makeBatch(t, false, 1000, recsFor(p, 0, 5)))
			if r.Err != nil || r.BaseOffset != 0 {
				t.Fatalf("result: offset %d, %v; want appended at 0", r.BaseOffset, r.Err)
			}
			if f.Hits() != 3 {
				t.Fatalf("fault answered %d requests, want 3", f.Hits())
			}
			if n, _ := h.obs.carrying(p); n != 4 {
				t.Fatalf("%d requests carried %s, want 4 (3 refused, 1 appended)", n, p)
			}
			if got := h.counter("append_errors_total", KindRetriable); got != 3 {
				t.Fatalf("retriable count %v, want 3", got)
			}
			if n := h.logs.countLines("[WARN]", p.String(), c.code.Message); n != 1 {
				t.Fatalf("%d WARN lines for %s with %s, want 1 (rate limited):\n%s", n, p, c.code.Message, h.logs)
			}
			h.checkLog(p, []wire{{recsFor(p, 0, 5), 0}})
		})
	}
}

// TestLeaderMove guards routing: after a leader move the next batch goes
// to the new leader, at once when the leader cache has been refreshed (and
// the appender asks it: no leader reused from a recent lookup), and after
// one NOT_LEADER_OR_FOLLOWER (an unknown outcome, here refused by kfake
// before the append) when the cache was stale or the appender reused the
// leader its last lookup found.
func TestLeaderMove(t *testing.T) {
	cases := []struct {
		name      string
		leaderAge time.Duration
		reuse     bool
		stale     bool
	}{
		{"stale cache", 0, false, true},
		{"fresh cache", time.Nanosecond, false, false},
		{"fresh cache, leader reused", time.Nanosecond, true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, harnessOpts{brokers: 3, leaderAge: c.leaderAge, noRun: true})
			if !c.reuse {
				h.a.leaderReuse = 0
			}
			h.run()
			p := h.createTopic("moving", 1, nil)[0]
			old := h.c.LeaderFor(p.Topic, p.Partition)
			if r := h.append1(p, makeBatch(t, false, 1, recsFor(p, 0, 2))); r.Err != nil {
				t.Fatalf("first batch: %v", r.Err)
			}
			moved := (old + 1) % 3
			if err := h.c.MoveTopicPartition(p.Topic, p.Partition, moved); err != nil {
				t.Fatal(err)
			}
			second := makeBatch(t, false, 2, recsFor(p, 1, 2))
			r := h.append1(p, second)
			if c.stale {
				if !errors.Is(r.Err, ErrUnknownOutcome) || !errors.Is(r.Err, kerr.NotLeaderForPartition) {
					t.Fatalf("batch to the old leader: %v, want ErrUnknownOutcome (NOT_LEADER_OR_FOLLOWER)", r.Err)
				}
				h.checkLog(p, []wire{{recsFor(p, 0, 2), 0}}) // reconciliation finds it missing
				r = h.append1(p, second)
			}
			if r.Err != nil || r.BaseOffset != 2 {
				t.Fatalf("batch after the move: offset %d, %v", r.BaseOffset, r.Err)
			}
			_, nodes := h.obs.carrying(p)
			if nodes[0] != old || nodes[len(nodes)-1] != moved {
				t.Fatalf("requests went to brokers %v; want the first to %d and the last to %d", nodes, old, moved)
			}
			h.checkLog(p, []wire{{recsFor(p, 0, 2), 0}, {recsFor(p, 1, 2), 2}})
		})
	}
}

// TestRefused guards the final errors: refusals that prove nothing was
// appended and that a retry cannot cure are reported once, with a message
// that says what to do, and never sent again.
func TestRefused(t *testing.T) {
	small := "1000"
	cases := []struct {
		name   string
		config map[string]*string
		inject func(h *harness, p tp.Partition)
		batch  func(t *testing.T, p tp.Partition) []byte
		is     error
		kind   string
		want   []string
	}{
		{"message too large", map[string]*string{"max.message.bytes": &small}, nil,
			func(t *testing.T, p tp.Partition) []byte {
				return makeBatch(t, false, 1, []rec{{key: "k", value: strings.Repeat("x", 3000)}})
			}, ErrTooLarge, KindTooLarge, []string{`max.message.bytes of destination topic "refused"`, "MESSAGE_TOO_LARGE"}},
		{"flipped byte", nil, nil,
			func(t *testing.T, p tp.Partition) []byte {
				b := makeBatch(t, false, 1, recsFor(p, 0, 3))
				b[len(b)-3] ^= 0x40 // inside the last record's value
				return b
			}, ErrCorrupt, KindCorrupt, []string{"CORRUPT_MESSAGE", "refetch"}},
		{"topic authorization failed", nil,
			func(h *harness, p tp.Partition) {
				h.c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: p.Topic, Err: kerr.TopicAuthorizationFailed})
			},
			func(t *testing.T, p tp.Partition) []byte { return makeBatch(t, false, 1, recsFor(p, 0, 3)) },
			ErrFatal, KindFatal, []string{"TOPIC_AUTHORIZATION_FAILED"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, harnessOpts{})
			p := h.createTopic("refused", 1, c.config)[0]
			if c.inject != nil {
				c.inject(h, p)
			}
			r := h.append1(p, c.batch(t, p))
			if !errors.Is(r.Err, c.is) {
				t.Fatalf("result: %v, want %v", r.Err, c.is)
			}
			for _, w := range append(c.want, p.String()) {
				if !strings.Contains(r.Err.Error(), w) {
					t.Errorf("error %q lacks %q", r.Err, w)
				}
			}
			if n, _ := h.obs.carrying(p); n != 1 {
				t.Fatalf("%d requests carried %s, want 1", n, p)
			}
			if got := h.counter("append_errors_total", c.kind); got != 1 {
				t.Fatalf("%s count %v, want 1", c.kind, got)
			}
			h.checkLog(p, nil)
		})
	}
}

// TestTopicRecreated guards against appending into a recreated topic: a
// batch for one topic ID never goes to a topic of the same name with
// another ID, whether the Request names the ID or an earlier attempt
// learnt it from the metadata.
func TestTopicRecreated(t *testing.T) {
	t.Run("request names the old ID", func(t *testing.T) {
		h := newHarness(t, harnessOpts{})
		p := h.createTopic("again", 1, nil)[0]
		stale := p
		stale.ID[0] ^= 0xff
		r := h.append1(stale, makeBatch(t, false, 1, recsFor(p, 0, 1)))
		if !errors.Is(r.Err, ErrFatal) || !strings.Contains(r.Err.Error(), "recreated") {
			t.Fatalf("result: %v, want ErrFatal about a recreated topic", r.Err)
		}
		if n, _ := h.obs.carrying(p); n != 0 {
			t.Fatalf("%d requests carried %s, want none", n, p)
		}
		h.checkLog(p, nil)
	})
	t.Run("recreated between attempts", func(t *testing.T) {
		h := newHarness(t, harnessOpts{})
		first := h.createTopic("again", 1, nil)[0]
		// The first attempt is answered UNKNOWN_TOPIC_OR_PARTITION after
		// the topic was deleted and created again under a new ID.
		var recreated tp.Partition
		var once atomic.Bool
		h.c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
			if !once.CompareAndSwap(false, true) {
				return nil, nil, false
			}
			h.c.SleepControl(func() {
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				defer cancel()
				if _, err := h.adm.DeleteTopics(ctx, "again"); err != nil {
					t.Errorf("delete topic: %v", err)
				}
				recreated = h.createTopic("again", 1, nil)[0]
			})
			req := kreq.(*kmsg.ProduceRequest)
			resp := req.ResponseKind().(*kmsg.ProduceResponse)
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = req.Topics[0].Topic, req.Topics[0].TopicID
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			st.Partitions = append(st.Partitions, sp)
			resp.Topics = append(resp.Topics, st)
			return resp, nil, true
		})
		noID := tp.Partition{Topic: "again", Partition: 0}
		r := h.append1(noID, makeBatch(t, false, 1, recsFor(noID, 0, 1)))
		if !errors.Is(r.Err, ErrFatal) || !strings.Contains(r.Err.Error(), "recreated") {
			t.Fatalf("result: %v, want ErrFatal about a recreated topic", r.Err)
		}
		if recreated.ID == first.ID {
			t.Fatalf("kfake gave the recreated topic the same ID")
		}
		if n, _ := h.obs.carrying(noID); n != 1 {
			t.Fatalf("%d requests carried %s, want only the first attempt", n, noID)
		}
		h.checkLog(recreated, nil)
	})
}

// TestLeaseExpired guards the session lease: when MaySend says no, nothing
// reaches a broker.
func TestLeaseExpired(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	ps := h.createTopic("lease", 2, nil)
	h.may.Store(false)
	for i, p := range ps {
		h.submit(p, makeBatch(t, false, 1, recsFor(p, 0, 2)), uint64(i))
	}
	for range ps {
		r := h.result()
		if !errors.Is(r.Err, ErrLeaseExpired) {
			t.Fatalf("%s: %v, want ErrLeaseExpired", r.Partition, r.Err)
		}
	}
	if n := len(h.obs.seen()); n != 0 {
		t.Fatalf("the cluster received %d produce requests while the lease was expired", n)
	}
	if h.counter("produce_requests_total") != 0 || h.counter("append_errors_total", KindLeaseExpired) != 2 {
		t.Fatalf("metrics: %v requests, %v lease_expired", h.counter("produce_requests_total"), h.counter("append_errors_total", KindLeaseExpired))
	}

	h.may.Store(true)
	if r := h.append1(ps[0], makeBatch(t, false, 1, recsFor(ps[0], 0, 2))); r.Err != nil {
		t.Fatalf("after renewal: %v", r.Err)
	}
	h.checkLog(ps[0], []wire{{recsFor(ps[0], 0, 2), 0}})
	h.checkLog(ps[1], nil)
}

// TestLeaseTravelsWithTheRequest guards I4 (issue 10, case 7): the lease is
// not only checked before a request is handed to kgo; a request that kgo
// holds up (here the dial of its produce connection, which takes a second)
// past the end of the lease is never written. The partition's leader is
// looked up first, so that the appender finds lease left and hands the
// request to kgo: the slow dial is the produce connection's. Before the
// fix the Produce reached the broker 0.7 s after the lease had ended.
func TestLeaseTravelsWithTheRequest(t *testing.T) {
	var slow atomic.Bool
	dialer := func(ctx context.Context, network, host string) (net.Conn, error) {
		if slow.Load() {
			time.Sleep(time.Second) // a dial that ignores its context, as a stuck SYN would
		}
		var d net.Dialer
		return d.DialContext(ctx, network, host)
	}
	h := newHarness(t, harnessOpts{clientOpts: []kgo.Opt{kgo.Dialer(dialer)}})
	ps := h.createTopic("lease-deadline", 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	for {
		if _, err := h.leaders.Lookup(ctx, ps[0].Key()); err == nil {
			break
		} else if ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	before := len(h.obs.seen())
	slow.Store(true) // the first Produce opens kgo's produce connection
	h.until.Store(time.Now().Add(300 * time.Millisecond).UnixNano())
	h.submit(ps[0], makeBatch(t, false, 1, recsFor(ps[0], 0, 2)), 1)
	r := h.result()
	if r.Err == nil {
		t.Fatalf("append succeeded after the lease ended: %+v", r)
	}
	if errors.Is(r.Err, ErrLeaseExpired) {
		t.Fatalf("the appender refused before sending (%v): the test must reach kgo with lease left", r.Err)
	}
	time.Sleep(1500 * time.Millisecond) // long enough for a delayed write to arrive
	if n := len(h.obs.seen()) - before; n != 0 {
		t.Fatalf("the broker received %d produce requests after the lease ended (result: %v)", n, r.Err)
	}
	h.checkLog(ps[0], nil)
}

// TestUnknownTopicWaits guards the wait for a leader: a batch for a topic
// that does not exist yet stays in the appender, with one WARN that says
// why, and is appended once the topic exists.
func TestUnknownTopicWaits(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	p := tp.Partition{Topic: "later", Partition: 0}
	h.submit(p, makeBatch(t, false, 1, recsFor(p, 0, 2)), 7)
	waitFor(t, "three lookups failed", func() bool { return h.counter("append_errors_total", KindRetriable) >= 3 })
	if n := h.logs.countLines("[WARN]", "later[0]", "unknown topic or partition"); n != 1 {
		t.Fatalf("%d WARN lines naming the partition and the reason, want 1:\n%s", n, h.logs)
	}
	created := h.createTopic("later", 1, nil)[0]
	r := h.result()
	if r.Err != nil || r.Tag != 7 || r.BaseOffset != 0 {
		t.Fatalf("result: %+v", r)
	}
	h.checkLog(created, []wire{{recsFor(p, 0, 2), 0}})
}

// TestCancelInFlight guards shutdown: Run returns after a cancel, the batch
// in flight is reported as an unknown outcome (and indeed lands in the log
// afterwards), the batch not sent as ErrStopped, Results closes, and no
// goroutine of the appender is left.
func TestCancelInFlight(t *testing.T) {
	h := newHarness(t, harnessOpts{cfg: Config{MaxInflightPerBroker: 1}})
	ps := h.createTopic("cancel", 2, nil)

	release := make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	held := make(chan struct{})
	var holding atomic.Bool
	h.c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		if !holding.CompareAndSwap(false, true) {
			return nil, nil, false
		}
		close(held)
		h.c.SleepControl(func() { <-release })
		return nil, nil, false
	})

	h.submit(ps[0], makeBatch(t, false, 1, recsFor(ps[0], 0, 3)), 0)
	select {
	case <-held:
	case <-time.After(deadline):
		t.Fatal("the produce request did not arrive")
	}
	h.submit(ps[1], makeBatch(t, false, 1, recsFor(ps[1], 0, 3)), 1)
	h.stop()

	got := make(map[int32]error)
	for _, r := range h.drain() {
		got[r.Partition.Partition] = r.Err
	}
	if len(got) != 2 || !errors.Is(got[0], ErrUnknownOutcome) || !errors.Is(got[0], context.Canceled) || !errors.Is(got[1], ErrStopped) {
		t.Fatalf("results after cancel: %v; want partition 0 ErrUnknownOutcome (canceled) and partition 1 ErrStopped", got)
	}
	waitFor(t, "appender goroutines gone", func() bool { return appenderGoroutines() == 0 })
	if err := h.a.Submit(Request{Partition: ps[1], Batch: makeBatch(t, false, 1, recsFor(ps[1], 0, 3))}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Submit after Run returned: %v, want ErrClosed", err)
	}

	// The broker goes on with the abandoned request: the outcome was
	// unknown indeed.
	releaseOnce.Do(func() { close(release) })
	waitFor(t, "held batch appended", func() bool {
		ends, err := h.adm.ListEndOffsets(context.Background(), "cancel")
		o, _ := ends.Lookup("cancel", 0)
		return err == nil && o.Offset == 3
	})
	h.checkLog(ps[0], []wire{{recsFor(ps[0], 0, 3), 0}})
	h.checkLog(ps[1], nil)
	if n, _ := h.obs.carrying(ps[1]); n != 0 {
		t.Fatalf("the stopped batch reached the broker in %d requests", n)
	}
}

// TestMaxRequestBytes guards the request size bound: batches of one broker
// are split over requests by MaxRequestBytes, and a batch larger than it
// goes alone.
func TestMaxRequestBytes(t *testing.T) {
	const limit = 4 << 10
	h := newHarness(t, harnessOpts{cfg: Config{MaxRequestBytes: limit}, noRun: true})
	ps := h.createTopic("sized", 8, nil)
	sizes := make(map[int32]int)
	recs := func(i int) int {
		if i == 0 {
			return 150 // larger than limit: goes alone
		}
		return 25
	}
	for i, p := range ps {
		b := makeBatch(t, false, 1, recsFor(p, 0, recs(i)))
		sizes[p.Partition] = len(b)
		h.submit(p, b, uint64(i))
	}
	if sizes[0] <= limit || 3*sizes[1] > limit {
		t.Fatalf("test batch sizes %v do not fit the test: want the first above %d and three others within it", sizes, limit)
	}
	h.run()
	for range ps {
		if r := h.result(); r.Err != nil {
			t.Fatalf("%s: %v", r.Partition, r.Err)
		}
	}
	reqs := h.obs.seen()
	multi := false
	for _, r := range reqs {
		total := requestOverhead + topicOverhead + len("sized")
		for _, sp := range r.parts {
			if sp.bytes != sizes[sp.part] {
				t.Fatalf("partition %d carried %d bytes, its batch has %d", sp.part, sp.bytes, sizes[sp.part])
			}
			total += partitionOverhead + sp.bytes
		}
		if len(r.parts) > 1 && total > limit {
			t.Fatalf("a request of %d partitions is %d bytes, more than MaxRequestBytes %d", len(r.parts), total, limit)
		}
		multi = multi || len(r.parts) > 1
	}
	if !multi || len(reqs) < 3 {
		t.Fatalf("%d requests, several partitions in one: %v; want the 7 small batches in at least 2 requests of several", len(reqs), multi)
	}
	for i, p := range ps {
		h.checkLog(p, []wire{{recsFor(p, 0, recs(i)), 0}})
	}
}

func init() {
	// Every test batch must look like what the pump submits.
	if mappedPID >= 0 {
		panic(fmt.Sprintf("mapped producer ID %d is not negative", mappedPID))
	}
}

// TestRequestBatchesMetric guards the fullness histogram: batches waiting
// together for one broker go in one request, and the histogram counts one
// observation of that many batches per request sent.
func TestRequestBatchesMetric(t *testing.T) {
	h := newHarness(t, harnessOpts{noRun: true})
	ps := h.createTopic("full", 6, nil)
	for i, p := range ps {
		h.submit(p, makeBatch(t, false, 1000, recsFor(p, 0, 2)), uint64(i))
	}
	h.run()
	for range ps {
		if r := h.result(); r.Err != nil {
			t.Fatalf("append %s: %v", r.Partition, r.Err)
		}
	}
	var d dto.Metric
	if err := h.a.deps.Metrics.batches.WithLabelValues(h.a.cfg.Link).(prometheus.Histogram).Write(&d); err != nil {
		t.Fatal(err)
	}
	hist := d.GetHistogram()
	if got, want := float64(hist.GetSampleCount()), h.counter("produce_requests_total"); got != want {
		t.Errorf("histogram counted %v requests, produce_requests_total says %v", got, want)
	}
	if hist.GetSampleSum() != float64(len(ps)) || hist.GetSampleCount() != 1 {
		t.Errorf("histogram: %v batches in %d requests; want the %d batches submitted before Run in one request", hist.GetSampleSum(), hist.GetSampleCount(), len(ps))
	}
}

// TestLeaderReused guards the shortcut past the resolver: a partition's
// next batch, submitted right after its previous one was answered, goes to
// the leader the last lookup found without another Metadata request, in
// order and still one batch per partition in the appender; an answer that
// says the leader moved ends the shortcut, so the batch after it is looked
// up again.
func TestLeaderReused(t *testing.T) {
	h := newHarness(t, harnessOpts{brokers: 3, leaderAge: time.Nanosecond})
	p := h.createTopic("reused", 1, nil)[0]
	var metadata atomic.Int64
	h.c.ControlKey(int16(kmsg.Metadata), func(kmsg.Request) (kmsg.Response, error, bool) {
		h.c.KeepControl()
		metadata.Add(1)
		return nil, nil, false
	})
	var want []wire
	for j := range 5 {
		recs := recsFor(p, j, 2)
		if r := h.append1(p, makeBatch(t, false, int64(j), recs)); r.Err != nil || r.BaseOffset != int64(2*j) {
			t.Fatalf("batch %d: offset %d, %v", j, r.BaseOffset, r.Err)
		}
		want = append(want, wire{recs, int64(2 * j)})
	}
	if n := metadata.Load(); n != 1 {
		t.Errorf("%d Metadata requests for 5 batches submitted one after another; want the first lookup only", n)
	}
	h.checkLog(p, want)

	old := h.c.LeaderFor(p.Topic, p.Partition)
	if err := h.c.MoveTopicPartition(p.Topic, p.Partition, (old+1)%3); err != nil {
		t.Fatal(err)
	}
	batch := makeBatch(t, false, 9, recsFor(p, 5, 2))
	if r := h.append1(p, batch); !errors.Is(r.Err, kerr.NotLeaderForPartition) {
		t.Fatalf("batch to the reused, moved leader: %v; want NOT_LEADER_OR_FOLLOWER", r.Err)
	}
	if r := h.append1(p, batch); r.Err != nil || r.BaseOffset != 10 {
		t.Fatalf("batch after the answer that the leader moved: offset %d, %v; want it looked up and appended at 10", r.BaseOffset, r.Err)
	}
	h.checkLog(p, append(want, wire{recsFor(p, 5, 2), 10}))
}

// TestMaxRequestBatches guards the batch count bound: the batches waiting
// for one broker are cut into requests of at most MaxRequestBatches
// partitions, each partition still in one request only, and every batch
// appended.
func TestMaxRequestBatches(t *testing.T) {
	const per = 3
	h := newHarness(t, harnessOpts{cfg: Config{MaxRequestBatches: per}, noRun: true})
	ps := h.createTopic("counted", 10, nil)
	for i, p := range ps {
		h.submit(p, makeBatch(t, false, 1, recsFor(p, 0, 2)), uint64(i))
	}
	h.run()
	for range ps {
		if r := h.result(); r.Err != nil {
			t.Fatalf("%s: %v", r.Partition, r.Err)
		}
	}
	seen := map[int32]int{}
	full := 0
	for _, r := range h.obs.seen() {
		if len(r.parts) > per {
			t.Fatalf("a request carried %d partitions, more than MaxRequestBatches %d", len(r.parts), per)
		}
		if len(r.parts) == per {
			full++
		}
		for _, sp := range r.parts {
			seen[sp.part]++
		}
	}
	for _, p := range ps {
		if seen[p.Partition] != 1 {
			t.Errorf("partition %d was in %d requests, want 1", p.Partition, seen[p.Partition])
		}
		h.checkLog(p, []wire{{recsFor(p, 0, 2), 0}})
	}
	if full == 0 {
		t.Errorf("no request was cut at %d batches: the test did not exercise the bound", per)
	}
}
