package link

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/internal/testkit/logtest"
	"github.com/seed83556561/mirrord/internal/testkit/mirrortest"
	"github.com/seed83556561/mirrord/statestore"
	"github.com/seed83556561/mirrord/translate"
	"github.com/seed83556561/mirrord/verify"
)

// committedRecord is one record as a read_committed consumer sees it, for
// comparing the two sides record by record.
type committedRecord struct {
	key, value string
	headers    string
	ts         int64
}

// readCommitted reads every committed record of topic, partition by
// partition, up to the partitions' last stable offsets as of the call.
func readCommitted(t *testing.T, c *cluster, topic string) map[int32][]committedRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ends, err := c.Admin.ListCommittedOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil && o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	cl, err := kgo.NewClient(append(c.Opts(), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(100*time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	out := map[int32][]committedRecord{}
	idle := time.Now()
	for len(want) > 0 && time.Since(idle) < 2*time.Second {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pctx)
		pcancel()
		if fs.NumRecords() > 0 {
			idle = time.Now()
		}
		fs.EachRecord(func(r *kgo.Record) {
			h := ""
			for _, x := range r.Headers {
				h += x.Key + "=" + string(x.Value) + ";"
			}
			out[r.Partition] = append(out[r.Partition], committedRecord{string(r.Key), string(r.Value), h, r.Timestamp.UnixMilli()})
			if end, ok := want[r.Partition]; ok && r.Offset+1 >= end {
				delete(want, r.Partition)
			}
		})
	}
	return out
}

// sameCommitted compares the committed records of a source topic and its
// mirror, partition by partition, in order; it returns the number of
// records and the first difference ("" when they are the same).
func sameCommitted(src, dst map[int32][]committedRecord) (int, string) {
	n := 0
	for p, s := range src {
		d := dst[p]
		for i := range max(len(s), len(d)) {
			switch {
			case i >= len(d):
				return n, fmt.Sprintf("partition %d: destination ends at record %d of %d (next %+v)", p, i, len(s), s[i])
			case i >= len(s):
				return n, fmt.Sprintf("partition %d: destination record %d is beyond the source's %d: %+v", p, i, len(s), d[i])
			case s[i] != d[i]:
				return n, fmt.Sprintf("partition %d: record %d is %+v at the destination, %+v at the source", p, i, d[i], s[i])
			}
			n++
		}
	}
	for p, d := range dst {
		if _, ok := src[p]; !ok && len(d) > 0 {
			return n, fmt.Sprintf("partition %d: %d records at the destination, none at the source", p, len(d))
		}
	}
	return n, ""
}

// waitSameCommitted waits until read_committed consumers see the same
// records, in the same order, in each topic and its mirror.
func (f *fixture) waitSameCommitted(within time.Duration, bases ...string) int {
	f.t.Helper()
	deadline := time.Now().Add(within)
	for {
		total, diff := 0, ""
		for _, b := range f.or(bases) {
			n, d := sameCommitted(readCommitted(f.t, f.src, f.topic(b)), readCommitted(f.t, f.dst, f.topic(b)))
			total += n
			if d != "" {
				diff = f.topic(b) + ": " + d
				break
			}
		}
		if diff == "" {
			return total
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("the mirror is not the source after %s: %s", within, diff)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Transactional delivery end to end (issue 22): every producer kind and
// codec at the source, the link in transactional delivery, agent crashes
// (no final commit) in the middle of the load: the destination, read
// read_committed, holds the committed source records exactly once and in
// order, partition by partition, after every takeover; a new session
// takes over without waiting out a lease; the mode shows in the status;
// offset translation is exact across the aborted transactions the crashes
// left.
func TestTransactionalDelivery(t *testing.T) {
	scenario(t, func(t *testing.T, e *env) {
		f := e.mirrored(t, "txn", srcTopic("t", 3), srcTopic("u", 2))
		f.cfg.Link.Delivery = statestore.DeliveryTransactional
		f.cfg.Link.TransactionTimeout = 30 * time.Second
		// A long lease: a takeover that waited for it would show.
		f.cfg.Link.SessionTimeout = 30 * time.Second
		f.cfg.Link.CheckpointInterval = 300 * time.Millisecond

		for codec := range codecs {
			f.load(idempotent, codec, fmt.Sprintf("before-%d", codec), 40)
		}
		f.load(transactional, 4, "before-txn", 60)
		f.load(plain, 2, "before-plain", 30)

		a := f.start("A")
		a.waitState(t, Mirroring, 60*time.Second)
		if st := a.Status(); st.Delivery != "transactional" {
			t.Fatalf("status delivery %q, want transactional", st.Delivery)
		}
		n := f.waitSameCommitted(90 * time.Second)
		t.Logf("first session: %d records the same on both sides", n)
		// Up to five batches of a partition are in flight, and none may
		// reach the broker before an earlier one (appender's sendGate):
		// without the gate 20 to 27 of these 60 batches overtook one.
		if n := testutil.ToFloat64(a.met.counters[BatchesOvertaken]); n != 0 {
			t.Errorf("%v of %v batches overtook an earlier batch of their partition and were sent again", n, testutil.ToFloat64(a.met.counters[BatchesMirrored]))
		}
		// The load was there before the session: its small batches
		// formed backlogs, which coalescing joins (coalesce_bytes at its
		// default), so every check below also covers joined batches.
		joined, sources := a.Status().Counters.Get(BatchesCoalesced), a.Status().Counters.Get(SourceBatchesCoalesced)
		t.Logf("first session: %d source batches appended as %d joined batches, of %d batches mirrored", sources, joined, a.Status().Counters.Get(BatchesMirrored))
		if joined == 0 || sources < 2*joined {
			t.Errorf("coalescing: %d joined batches of %d source batches; want a backlog joined", joined, sources)
		}

		// Crashes in the middle of loads: each new session fences the
		// last and resumes at its committed checkpoints.
		prev := a
		for round := range 3 {
			var wg sync.WaitGroup
			wg.Go(func() {
				f.load(transactional, round%5, fmt.Sprintf("during-%d", round), 70)
				f.load(idempotent, (round+1)%5, fmt.Sprintf("during-idem-%d", round), 50)
			})
			time.Sleep(time.Duration(100+150*round) * time.Millisecond)
			prev.stop(t, true) // a crash: no final commit, a transaction left open
			began := time.Now()
			next := f.start(fmt.Sprintf("B%d", round))
			next.waitState(t, Mirroring, 60*time.Second)
			took := time.Since(began)
			t.Logf("round %d: the new session mirrored %s after the crash", round, took.Round(time.Millisecond))
			if took > 20*time.Second {
				t.Errorf("round %d: the takeover took %s; a transactional session does not wait out the 30s lease", round, took)
			}
			wg.Wait()
			t.Logf("round %d: %d records the same on both sides", round, f.waitSameCommitted(90*time.Second))
			prev = next
		}
		// A pause commits the final checkpoint (PAUSED); a resume begins
		// a new session there.
		prev.Pause()
		prev.waitState(t, Paused, 30*time.Second)
		f.load(plain, 0, "after", 40)
		prev.Resume()
		prev.waitState(t, Mirroring, 30*time.Second)
		n = f.waitSameCommitted(90 * time.Second)
		f.exactlyOnceCommitted()
		t.Logf("after 3 crashes: %d records the same on both sides, in order", n)

		// Offset translation after the crashes, whose aborted
		// transactions lie between the committed mirrors: every way
		// (the running session's, the offline translator's) answers
		// where a read_committed consumer resumes without re-reading or
		// skipping a record.
		cfg := f.cfg
		rng := rand.New(rand.NewPCG(22, uint64(time.Now().UnixNano())))
		off, err := NewOffline(context.Background(), cfg, Deps{SourceOpts: f.src.Opts(), DestinationOpts: f.dst.Opts()})
		if err != nil {
			t.Fatal(err)
		}
		defer off.Close()
		for _, c := range []struct {
			base string
			part int32
		}{{"t", 0}, {"u", 1}} { // two of the five: the race detector makes each translation slow
			topic, k := f.topic(c.base), tp.Key{Topic: f.topic(c.base), Partition: c.part}
			lt := readTruthTxn(t, f.src, f.dst, topic, topic, c.part)
			ws := []way{
				{name: "link", must: "window", fn: func(ctx context.Context, p int64) (translate.Result, error) {
					return prev.Translate(ctx, k.Topic, k.Partition, p)
				}},
				{name: "offline", must: "timestamp", fn: func(ctx context.Context, p int64) (translate.Result, error) {
					return off.Translate(ctx, k.Topic, k.Partition, p)
				}},
			}
			// Under CI's race detector a translation takes up to 0.4 s
			// on kfake: 40 positions, evenly spread over all.
			checkTranslations(t, ws, lt, thin(lt.points(rng, 10, 0), 40), 0)
		}

		// mirrord verify's way: the same, batch boundaries and codecs
		// included; and a preserve-mode comparison tells the modes apart.
		topics := f.same("t", "u")
		rep, err := mirrortest.VerifyMode(t, f.src, f.dst, f.stateTopic(), topics, true)
		if err != nil || rep.First != nil || rep.Behind != 0 {
			t.Fatalf("verify (transactional): %v, first difference %v, %d behind", err, rep.First, rep.Behind)
		}
		rep, err = mirrortest.VerifyMode(t, f.src, f.dst, f.stateTopic(), topics, false)
		if err != nil || rep.First == nil || rep.First.Field != verify.FieldProducerID {
			t.Fatalf("verify (preserve) of a transactional mirror: %v, first difference %v; want a producer_id difference", err, rep.First)
		}
		if got := prev.Status().Counters.Get(RecordsMirrored); got == 0 {
			t.Errorf("records_mirrored %d", got)
		}
	})
}

// exactlyOnceCommitted checks the ledger against the destination read
// read_committed: every committed record once, nothing aborted.
func (f *fixture) exactlyOnceCommitted() {
	f.t.Helper()
	got := map[string]int{}
	for _, b := range f.made {
		for _, rs := range readCommitted(f.t, f.dst, f.topic(b)) {
			for _, r := range rs {
				got[f.topic(b)+"/"+r.key]++
			}
		}
	}
	for k, c := range f.p.Committed {
		if got[k] != c {
			f.t.Errorf("record %s: %d at the destination, %d committed at the source", k, got[k], c)
		}
	}
	for k := range f.p.Aborted {
		if got[k] > 0 {
			f.t.Errorf("aborted record %s at the destination", k)
		}
	}
}

// Switching a link from preserve to transactional delivery after an
// unclean stop (issue 22): the preserve session crashed with batches
// appended past its last checkpoint. The transactional session waits out
// the preserve session's lease and produce timeout (its appends carry no
// epoch a broker fences), then refuses to resume, naming the partition and
// what to do, because only preserve delivery's reconciliation can tell
// which batches past the checkpoint it appended: resuming at the
// checkpoint appended them again. Before, the wait was never taken (the
// session read the link record after its own first commit had replaced
// it) and every record of the tail was at the destination twice. One more
// preserve run that stops cleanly makes the switch safe.
func TestTxnAfterPreserveCrash(t *testing.T) {
	scenario(t, func(t *testing.T, e *env) {
		f := e.mirrored(t, "p2t", srcTopic("t", 1))
		f.cfg.Link.ProduceTimeout = 3 * time.Second
		topic := f.topic("t")
		ck := crashPastCheckpoint(t, f, "A", "t", func() { f.load(idempotent, 1, "before", 60) })
		t.Logf("preserve session crashed; checkpoint at destination offset %d, destination end %d", ck, endOffset(t, f.dst, topic, 0))

		f.cfg.Link.Delivery = statestore.DeliveryTransactional
		f.cfg.Link.TransactionTimeout = 30 * time.Second
		logs := &logtest.Buffer{}
		b := f.startWith(Deps{Logger: hclog.New(&hclog.LoggerOptions{Name: "B", Level: hclog.Info, Output: io.MultiWriter(logs, testWriter{t}), DisableTime: true})})
		const refusal = "ran in preserve delivery and did not stop cleanly"
		for deadline := time.Now().Add(90 * time.Second); !strings.Contains(b.Status().LastError, refusal); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the transactional session did not refuse the preserve tail: status %+v", b.Status())
			}
		}
		if !strings.Contains(logs.String(), "waiting out its lease and produce timeout") {
			t.Error("the transactional session did not wait out the crashed preserve session's lease")
		}
		if st := b.Status(); !strings.Contains(st.LastError, fmt.Sprintf("destination %s[0] holds offsets %d to", topic, ck)) || !strings.Contains(st.LastError, `delivery = "preserve"`) {
			t.Errorf("refusal %q does not name the partition, the checkpoint and what to do", st.LastError)
		}
		b.stop(t, false)
		onceEach(t, f, "t")

		// Preserve once more, stopped cleanly: then the switch resumes.
		f.cfg.Link.Delivery = statestore.DeliveryPreserve
		c := f.start("C")
		waitCaughtUp(t, c, endOffset(t, f.src, topic, 0), 90*time.Second)
		c.stop(t, false)
		f.cfg.Link.Delivery = statestore.DeliveryTransactional
		d := f.start("D")
		d.waitState(t, Mirroring, 60*time.Second)
		f.load(transactional, 3, "after", 50)
		t.Logf("%d records the same on both sides after the switch", f.waitSameCommitted(90*time.Second))
		f.exactlyOnceCommitted() // read_committed (onceEach would count the transaction markers)
	})
}
