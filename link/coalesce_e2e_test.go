package link

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/internal/testkit/logtest"
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

// Coalescing when the destination refuses DescribeConfigs on a topic
// (joinSettings): the session cannot know the topic's max.message.bytes,
// so it joins none of that topic's batches, says so at WARN with the topic
// and the permission to grant, and mirrors every batch alone; another
// topic, whose settings it can read, is joined as usual, and no WARN names
// it. Before describe.TopicConfigs it was not: kadm failed the whole
// request on the one refusal, and the session logged both topics as
// refused and joined nothing. kfake only: its request controls answer the
// DescribeConfigs (the real tier's ACL tests grant DescribeConfigs).
func TestCoalesceSettingsRefused(t *testing.T) {
	f := onKfake(t).mirrored(t, "joinref", srcTopic("denied", 1), srcTopic("fine", 1))
	denied, fine := f.topic("denied"), f.topic("fine")
	f.cfg.Link.Delivery = statestore.DeliveryTransactional
	f.cfg.Link.TransactionTimeout = 30 * time.Second
	var refused atomic.Int64
	f.dst.Fake.ControlKey(int16(kmsg.DescribeConfigs), func(req kmsg.Request) (kmsg.Response, error, bool) {
		f.dst.Fake.KeepControl()
		r := req.(*kmsg.DescribeConfigsRequest)
		if !slices.ContainsFunc(r.Resources, func(rr kmsg.DescribeConfigsRequestResource) bool { return rr.ResourceName == denied }) {
			return nil, nil, false
		}
		// Every resource of the request is answered: the denied topic
		// refused, the others with kfake's max.message.bytes.
		resp := r.ResponseKind().(*kmsg.DescribeConfigsResponse)
		for _, rr := range r.Resources {
			rs := kmsg.NewDescribeConfigsResponseResource()
			rs.ResourceName, rs.ResourceType = rr.ResourceName, rr.ResourceType
			if rr.ResourceName == denied {
				rs.ErrorCode = kerr.TopicAuthorizationFailed.Code
				refused.Add(1)
			} else {
				c := kmsg.NewDescribeConfigsResponseResourceConfig()
				c.Name, c.Value = "max.message.bytes", new("1048588")
				rs.Configs = append(rs.Configs, c)
			}
			resp.Resources = append(resp.Resources, rs)
		}
		return resp, nil, true
	})
	// A backlog of small batches in each topic before the session: runs
	// that a session joins when it may.
	for _, topic := range []string{"denied", "fine"} {
		for i := range 6 {
			f.load(idempotent, 0, fmt.Sprintf("%s-%d", topic, i), 20, topic)
		}
	}
	logs := &logtest.Buffer{}
	a := f.startWith(Deps{Logger: logtest.Logger(logs)})
	a.waitState(t, Mirroring, 60*time.Second)
	f.waitSameCommitted(90 * time.Second)
	f.exactlyOnceCommitted()
	if refused.Load() == 0 {
		t.Fatal("the session never asked the destination for the denied topic's settings: the test did not take the path it is for")
	}
	want := "cannot read the topic's settings: its small batches are not joined (coalesce_bytes); grant DescribeConfigs on the topic"
	if out := logs.String(); !strings.Contains(out, want) || !strings.Contains(out, "topic="+denied) {
		t.Errorf("no WARN naming %s and the permission to grant (%q):\n%s", denied, want, out)
	} else if strings.Contains(out, "cluster=destination topic="+fine) {
		t.Errorf("a WARN says the destination refused %s, which it answered:\n%s", fine, out)
	}
	c := a.Status().Counters
	t.Logf("%d batches mirrored, %d joined", c.Get(BatchesMirrored), c.Get(BatchesCoalesced))
	src, dst := dataBatches(t, f.src, denied), dataBatches(t, f.dst, denied)
	if dst != src {
		t.Errorf("%s: %d destination batches for %d source batches: batches of a topic whose limit is unknown were joined", denied, dst, src)
	}
	if got, in := dataBatches(t, f.dst, fine), dataBatches(t, f.src, fine); got >= in {
		t.Errorf("%s: %d destination batches for %d source batches: nothing joined where the settings were read", fine, got, in)
	}
}

// dataBatches counts the batches of the topic's partition 0 that hold data
// (transaction markers left out).
func dataBatches(t *testing.T, c *cluster, topic string) int {
	t.Helper()
	n := 0
	for _, h := range rawHeaders(t, c, topic, 0) {
		if !h.Control() {
			n++
		}
	}
	return n
}
