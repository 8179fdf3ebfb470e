package link

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seed83556561/mirrord/internal/testkit/mirrortest"
	"github.com/seed83556561/mirrord/statestore"
	"github.com/seed83556561/mirrord/transform"
)

// Coalescing end to end, for the path TestTransactionalDelivery does not
// take: a run whose joined batch comes out larger than allowed is sent as
// its batches one by one, under its part of the run's sequences each
// (appender's Txn.Split). A backlog of small batches of every codec and
// producer kind (transactional with aborts) is there before the session;
// every run is made to come out too large: nothing is joined, the
// destination holds every committed record once, in order, with the source
// batches' boundaries, and verify agrees.
func TestCoalescedRunSentOneByOne(t *testing.T) {
	scenario(t, func(t *testing.T, e *env) {
		f := e.mirrored(t, "split", srcTopic("t", 2))
		f.cfg.Link.Delivery = statestore.DeliveryTransactional
		f.cfg.Link.TransactionTimeout = 30 * time.Second
		// Three loads of each codec in a row: each partition holds runs
		// of three batches of one codec, which a backlog joins.
		for codec := range codecs {
			for i := range 3 {
				f.load(idempotent, codec, fmt.Sprintf("idem-%d-%d", codec, i), 30)
			}
		}
		f.load(transactional, 2, "txn", 40)
		f.load(plain, 3, "plain-0", 20)
		f.load(plain, 3, "plain-1", 20)
		a := startLinkSetup(t, f.cfg, Deps{Logger: testLogger(t, "A"), SourceOpts: f.src.Opts(), DestinationOpts: f.dst.Opts()},
			func(l *Link) { l.joinedLimit = 1 })
		a.waitState(t, Mirroring, 60*time.Second)
		n := f.waitSameCommitted(90 * time.Second)
		f.exactlyOnceCommitted()
		c := a.Status().Counters
		t.Logf("%d records the same on both sides; %d batches mirrored, %d joined", n, c.Get(BatchesMirrored), c.Get(BatchesCoalesced))
		if got := c.Get(BatchesCoalesced); got != 0 {
			t.Errorf("%d batches joined; every joined batch was over the limit", got)
		}
		if joins := sumJoinSeconds(a); joins == 0 {
			t.Errorf("no run was joined and found too large: the test did not take the path it is for")
		}
		rep, err := mirrortest.VerifyMode(t, f.src, f.dst, f.stateTopic(), f.same("t"), true)
		if err != nil || rep.First != nil || rep.Behind != 0 {
			t.Fatalf("verify (transactional): %v, first difference %v, %d behind", err, rep.First, rep.Behind)
		}
	})
}

// sumJoinSeconds is the link's mirrord_coalesce_seconds_total over every
// codec: time spent joining runs, joined batches appended or not.
func sumJoinSeconds(l *testLink) float64 {
	sum := 0.0
	for _, c := range codecLabels {
		sum += testutil.ToFloat64(l.met.m.joinSeconds.WithLabelValues(l.met.name, c))
	}
	return sum
}

// Coalescing under a destination topic's own max.message.bytes, below
// coalesce_bytes: the link reads it at placement and forms runs no larger
// (txnPlan.limitOf). The source topic carries max.message.bytes = 10000,
// which the link copies to the destination topic it creates; a backlog of
// ten uncompressed loads (batches of about 5 KB each) is there before the
// session. Runs must be joined (two batches at most fit) and every
// destination batch must stay within the limit: a run formed against
// coalesce_bytes alone is refused by the broker as MESSAGE_TOO_LARGE.
func TestCoalesceWithinDestinationLimit(t *testing.T) {
	const limit = 10000
	scenario(t, func(t *testing.T, e *env) {
		f := e.mirrored(t, "limit", srcTopic("t", 2).with(map[string]*string{"max.message.bytes": new(fmt.Sprint(limit))}))
		f.cfg.Link.Delivery = statestore.DeliveryTransactional
		f.cfg.Link.TransactionTimeout = 30 * time.Second
		for i := range 10 {
			f.load(idempotent, 0, fmt.Sprintf("idem-%d", i), 60)
		}
		f.load(transactional, 0, "txn", 40)
		a := startLinkSetup(t, f.cfg, Deps{Logger: testLogger(t, "A"), SourceOpts: f.src.Opts(), DestinationOpts: f.dst.Opts()}, nil)
		a.waitState(t, Mirroring, 60*time.Second)
		n := f.waitSameCommitted(90 * time.Second)
		f.exactlyOnceCommitted()
		c := a.Status().Counters
		t.Logf("%d records the same on both sides; %d batches mirrored, %d joined", n, c.Get(BatchesMirrored), c.Get(BatchesCoalesced))
		if c.Get(BatchesCoalesced) == 0 {
			t.Errorf("no batch joined: the test did not take the path it is for")
		}
		for p := range int32(2) {
			for _, h := range rawHeaders(t, f.dst, e.topic("t"), p) {
				if size := int64(h.Length) + transform.LengthOverhead; size > limit {
					t.Errorf("destination partition %d: the batch at offset %d is %d bytes, over max.message.bytes %d", p, h.BaseOffset, size, limit)
				}
			}
		}
		rep, err := mirrortest.VerifyMode(t, f.src, f.dst, f.stateTopic(), f.same("t"), true)
		if err != nil || rep.First != nil || rep.Behind != 0 {
			t.Fatalf("verify (transactional): %v, first difference %v, %d behind", err, rep.First, rep.Behind)
		}
	})
}
