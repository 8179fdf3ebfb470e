package link

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/internal/kafka/leaders"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/internal/testkit/faultproxy"
	"github.com/seed83556561/mirrord/internal/testkit/logtest"
)

// answerFirstProduce makes the destination answer the first Produce of
// the appender (one without a transactional ID) with code for every
// partition, as a broker answers NOT_LEADER_OR_FOLLOWER when leadership
// moved while the request waited for its replicas. The request is handed
// to the test on the returned channel and held inside the broker until
// answer is called, so that the test can first append its batch (the
// broker had appended it) and move the leader.
func answerFirstProduce(t *testing.T, c *cluster, code int16) (reqs <-chan *kmsg.ProduceRequest, answer func()) {
	t.Helper()
	ch := make(chan *kmsg.ProduceRequest, 1)
	ans := make(chan struct{})
	var taken atomic.Bool
	c.Fake.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		pr := req.(*kmsg.ProduceRequest)
		if pr.TransactionID != nil || !taken.CompareAndSwap(false, true) {
			c.Fake.KeepControl()
			return nil, nil, false
		}
		ch <- pr
		c.Fake.SleepControl(func() { <-ans })
		resp := pr.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range pr.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition, sp.ErrorCode, sp.BaseOffset = rp.Partition, code, -1
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	var once sync.Once
	answer = func() { once.Do(func() { close(ans) }) }
	t.Cleanup(answer)
	return ch, answer
}

// An append answered with an error that cannot say whether the broker
// appended it (NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT, ...) is settled
// against the destination's current leader at once, before anything else
// is sent for the partition: a batch that landed counts as appended (not
// sent again), one that did not is sent again; after a leader move the
// new leader is asked. Each way the destination ends exact.
func TestSettleAnswered(t *testing.T) {
	for _, tc := range []struct {
		name    string
		code    int16
		landed  bool // the broker had appended the batch
		moveTo  int32
		settled string
	}{
		{name: "found", code: kerr.NotLeaderForPartition.Code, landed: true, moveTo: -1, settled: "the batch had landed"},
		{name: "found after a leader move", code: kerr.NotLeaderForPartition.Code, landed: true, moveTo: 1, settled: "the batch had landed"},
		{name: "missing", code: kerr.RequestTimedOut.Code, moveTo: -1, settled: "the batch had not landed; sending it again"},
		{name: "missing after a leader move", code: kerr.NotLeaderForPartition.Code, moveTo: 2, settled: "the batch had not landed; sending it again"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := onKfake(t).mirrored(t, "settle", srcTopic("t", 1).alsoAtDst())
			dst := f.dst
			f.load(idempotent, 0, "before", 50)
			logs := &logtest.Buffer{}
			f.cfg.Link.ProduceTimeout = time.Minute // an unanswered append would wait this long: none here does
			l := f.startWith(Deps{Logger: logtest.Logger(logs)})
			f.waitMirrored(60 * time.Second)

			reqs, answer := answerFirstProduce(t, dst, tc.code)
			f.load(idempotent, 1, "answered", 20)
			var req *kmsg.ProduceRequest
			select {
			case req = <-reqs:
			case <-time.After(30 * time.Second):
				t.Fatal("the appender sent no Produce")
			}
			if tc.landed {
				produceRaw(t, dst, "t", 0, req.Topics[0].Partitions[0].Records)
			}
			if tc.moveTo >= 0 {
				if err := dst.Fake.MoveTopicPartition("t", 0, tc.moveTo); err != nil {
					t.Fatal(err)
				}
			}
			answer()
			f.load(idempotent, 2, "after", 20)
			f.waitMirrored(60 * time.Second)
			f.exactlyOnce()
			if !strings.Contains(logs.String(), "append settled: "+tc.settled) {
				t.Errorf("the log does not say %q:\n%s", tc.settled, logs.String())
			}
			if c := l.Status().Counters; c.Get(UnknownOutcomes) != 1 || c.Get(ForeignBatches) != 0 {
				t.Errorf("counters %+v: want one unknown outcome and no foreign batch", c)
			}
			if st := l.Status(); st.State != Mirroring {
				t.Errorf("state %s (last error %q), want MIRRORING: settling is not a failure", st.State, st.LastError)
			}
		})
	}
}

// An append of unknown outcome that cannot be settled (the destination's
// high watermark stays below the leader's log end: its in-sync replicas
// are behind) fails the session after produce_timeout + settle_delay with
// an error that says so, instead of guessing; the next session waits out
// the lease and reconciles, and the destination ends exact.
func TestSettleGivesUpWhileReplicasLag(t *testing.T) {
	f := onKfake(t).mirrored(t, "lagging", srcTopic("t", 1).alsoAtDst())
	dst := f.dst
	f.load(idempotent, 0, "before", 30)
	l := f.start("lagging")
	f.waitMirrored(60 * time.Second)

	// While lagging, the destination reports a high watermark of 0 for t.
	var lagging atomic.Bool
	lagging.Store(true)
	dst.Fake.ControlKey(int16(kmsg.ListOffsets), func(req kmsg.Request) (kmsg.Response, error, bool) {
		dst.Fake.KeepControl()
		lr := req.(*kmsg.ListOffsetsRequest)
		if !lagging.Load() || len(lr.Topics) != 1 || lr.Topics[0].Topic != "t" {
			return nil, nil, false
		}
		return listOffsetsAnswer(lr, func(rp kmsg.ListOffsetsRequestTopicPartition, sp *kmsg.ListOffsetsResponseTopicPartition) {
			sp.Timestamp, sp.Offset, sp.LeaderEpoch = -1, 0, rp.CurrentLeaderEpoch
		}), nil, true
	})
	reqs, answer := answerFirstProduce(t, dst, kerr.RequestTimedOut.Code)
	f.load(idempotent, 1, "lagging", 10)
	select {
	case <-reqs:
	case <-time.After(30 * time.Second):
		t.Fatal("the appender sent no Produce")
	}
	answer()
	// The session fails; the link may be FAILED only for its first backoff
	// (1 s), short enough for a poll on a loaded machine to miss, so the
	// failure is read from what outlives it: the last error.
	deadline := time.Now().Add(30 * time.Second)
	for st := l.Status(); !strings.Contains(st.LastError, "high watermark"); st = l.Status() {
		if time.Now().After(deadline) {
			t.Fatalf("link lagging: state %s after 30s, last error %q: the session did not fail on the high watermark", st.State, st.LastError)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st := l.Status(); !strings.Contains(st.LastError, "t[0]") || !strings.HasPrefix(st.LastError, "settle append to t[0]") {
		t.Errorf("last error %q does not say the high watermark of t[0] stayed behind", st.LastError)
	}
	lagging.Store(false)
	l.waitState(t, Mirroring, 30*time.Second)
	f.waitMirrored(60 * time.Second)
	f.exactlyOnce()
}

// The leader moved away from the broker an unanswered append went to: the
// request can no longer reach the partition's log.
func TestLeaderMoved(t *testing.T) {
	sent := &leaders.Leader{Broker: 1, Epoch: 4}
	for _, tc := range []struct {
		sent  *leaders.Leader
		now   leaders.Leader
		moved bool
	}{
		{sent, leaders.Leader{Broker: 2, Epoch: 5}, true},
		{sent, leaders.Leader{Broker: 2, Epoch: 9}, true},
		{sent, leaders.Leader{Broker: 1, Epoch: 5}, false}, // the same broker leads again: it may still hold the request
		{sent, leaders.Leader{Broker: 2, Epoch: 4}, false}, // no newer epoch: the cache is behind, not the leader
		{sent, leaders.Leader{Broker: 1, Epoch: 4}, false},
		{nil, leaders.Leader{Broker: 2, Epoch: 5}, false}, // not known where it went
	} {
		if got := leaderMoved(tc.sent, tc.now); got != tc.moved {
			t.Errorf("leaderMoved(%+v, %+v) = %v, want %v", tc.sent, tc.now, got, tc.moved)
		}
	}
}

// An append that got no answer (the connection closed after the broker
// appended it, or before the broker saw it) is settled against the
// destination, found or sent again, and the destination ends exact. While
// the partition's leader stays, the settle waits out the request's produce
// timeout (the request could still be inside the broker); once another
// broker leads under a newer epoch, it settles after settle_delay.
func TestSettleUnanswered(t *testing.T) {
	for _, tc := range []struct {
		name   string
		landed bool // the broker appended it before the connection closed
		move   bool
	}{
		{name: "landed", landed: true},
		{name: "not landed", landed: false},
		{name: "landed, leader moved", landed: true, move: true},
		{name: "not landed, leader moved", landed: false, move: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := onKfake(t).mirrored(t, "unanswered", srcTopic("t", 1).alsoAtDst())
			dst := f.dst
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			brokers, err := faultproxy.Brokers(ctx, dst.Client)
			if err != nil {
				t.Fatal(err)
			}
			px := faultproxy.Start(t, brokers)
			f.load(idempotent, 0, "before", 40)
			logs := &logtest.Buffer{}
			f.cfg.Destination.BootstrapServers = px.Addrs()
			f.cfg.Link.ProduceTimeout = 3 * time.Second
			if tc.move {
				f.cfg.Link.ProduceTimeout = 2 * time.Minute // the move must cut the wait short
			}
			l := f.startWith(Deps{Logger: logtest.Logger(logs),
				DestinationOpts: []kgo.Opt{kgo.SeedBrokers(px.Addrs()...), kgo.MetadataMinAge(50 * time.Millisecond)}})
			f.waitMirrored(60 * time.Second)

			// Cut the connection of the next Produce to t: after the
			// broker answered (it appended), or before it saw it.
			var cut atomic.Bool
			px.Intercept(func(f *faultproxy.Frame) faultproxy.Action {
				if f.APIKey != int16(kmsg.Produce) || !f.Writes("t", 0) || f.IsResponse() != tc.landed || !cut.CompareAndSwap(false, true) {
					return faultproxy.Pass
				}
				return faultproxy.DropConnection
			})
			f.load(idempotent, 1, "cut", 20)
			deadline := time.Now().Add(30 * time.Second)
			for !cut.Load() && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if !cut.Load() {
				t.Fatal("no Produce to t went through the proxy")
			}
			if tc.move {
				ld, err := leaders.New(dst.Client, 0).Lookup(ctx, tp.Key{Topic: "t", Partition: 0})
				if err != nil {
					t.Fatal(err)
				}
				if err := dst.Fake.MoveTopicPartition("t", 0, (ld.Broker+1)%3); err != nil {
					t.Fatal(err)
				}
			}
			f.load(plain, 2, "after", 20)
			f.waitMirrored(90 * time.Second)
			f.exactlyOnce()
			out := logs.String()
			if c := l.Status().Counters; c.Get(UnknownOutcomes) != 1 || c.Get(ForeignBatches) != 0 {
				t.Errorf("counters %+v: want one unknown outcome and no foreign batch", c)
			}
			if early := strings.Contains(out, "settling an unanswered append early"); early != tc.move {
				t.Errorf("settled early: %v, want %v:\n%s", early, tc.move, out)
			}
			want := "append settled: the batch had not landed; sending it again"
			if tc.landed {
				want = "append settled: the batch had landed"
			}
			if !strings.Contains(out, want) {
				t.Errorf("the log does not say %q:\n%s", want, out)
			}
		})
	}
}

// listOffsetsAnswer is a canned answer to lr: one partition per partition
// asked for, each as fill makes it.
func listOffsetsAnswer(lr *kmsg.ListOffsetsRequest, fill func(kmsg.ListOffsetsRequestTopicPartition, *kmsg.ListOffsetsResponseTopicPartition)) *kmsg.ListOffsetsResponse {
	resp := lr.ResponseKind().(*kmsg.ListOffsetsResponse)
	for _, rt := range lr.Topics {
		st := kmsg.NewListOffsetsResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewListOffsetsResponseTopicPartition()
			sp.Partition = rp.Partition
			fill(rp, &sp)
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}
