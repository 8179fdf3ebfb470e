package link

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/seed83556561/mirrord/fetcher"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/internal/testkit/batchtest"
	"github.com/seed83556561/mirrord/statestore"
	"github.com/seed83556561/mirrord/transform"
	"github.com/seed83556561/mirrord/translate"
)

var txnT0 = time.UnixMilli(1_700_000_000_000)

func txnPair(p int32) Pair {
	return Pair{Src: tp.Partition{Topic: "s", ID: [16]byte{1}, Partition: p}, Dst: tp.Partition{Topic: "d", ID: [16]byte{2}, Partition: p}}
}

// fetchedBatches is a fetch result of p with dense batches of n records
// from base, ending at end.
func fetchedBatches(p int32, gen uint64, end int64, bases ...int64) fetcher.Result {
	r := fetcher.Result{Partition: txnPair(p).Src, Gen: gen, Start: bases[0], End: end, HighWatermark: end, Pin: fetcher.NewPin(100)}
	for _, b := range bases {
		raw := batchtest.Simple(b, 7, 0, int32(b), 2)
		h, _ := transform.ParseHeader(raw)
		r.Batches = append(r.Batches, fetcher.Batch{Raw: raw, Header: h})
	}
	return r
}

func actionsOf[T any](acts []any) []T {
	var out []T
	for _, a := range acts {
		if x, ok := a.(T); ok {
			out = append(out, x)
		}
	}
	return out
}

// fetchedTo is fetchedBatches with the source's high watermark at hw.
func fetchedTo(p int32, end, hw int64, bases ...int64) fetcher.Result {
	r := fetchedBatches(p, 1, end, bases...)
	r.HighWatermark = hw
	return r
}

// warm runs partition 0's first transaction of the session: one batch at
// base, appended at dst and committed (shown, caught up), so that later
// steps see only the rules of appends in flight.
func warm(t *testing.T, p *txnPlan, base, dst int64) {
	t.Helper()
	p.step(txnT0, txnInAdd{parts: []Placement{{Pair: txnPair(0), StartOffset: base, DstEnd: dst}}})
	if ap := actionsOf[txnDoAppend](p.step(txnT0, txnInFetched{r: fetchedBatches(0, 1, base+2, base)})); len(ap) != 1 {
		t.Fatalf("warm-up append: %+v", ap)
	}
	if cs := actionsOf[txnDoCommit](p.step(txnT0, txnInAppended{p: txnPair(0).Src.Key(), id: 1, base: dst, n: 2})); len(cs) != 1 {
		t.Fatalf("warm-up commit: %+v", cs)
	}
	p.step(txnT0, txnInCommitted{})
}

// Guards the transactional plan's order: a partition's batches are appended
// in source order, several at once once the transaction's first is
// answered, their answers are applied in that order whatever order they
// come in (positions and pins move only past applied batches), a due
// commit waits for every append in flight and holds back new ones, and its
// checkpoint records are what was appended before it.
func TestTxnPlanCommitWaitsForAppends(t *testing.T) {
	p := newTxnPlan("l", "src", "dst", 3, 30*time.Second, txnT0)
	warm(t, p, 8, 98)
	key := txnPair(0).Src.Key()
	acts := p.step(txnT0, txnInFetched{r: fetchedTo(0, 17, 100, 10, 12, 14)})
	if ap := actionsOf[txnDoAppend](acts); len(ap) != 1 || ap[0].id != 2 || ap[0].offsets != 2 {
		t.Fatalf("want the transaction's first append alone, got %+v", acts)
	}
	acts = p.step(txnT0, txnInAppended{p: key, id: 2, base: 100, n: 2})
	if ap := actionsOf[txnDoAppend](acts); len(ap) != 2 || ap[0].id != 3 || ap[1].id != 4 {
		t.Fatalf("once it is answered: want the other two at once, in order, got %+v", acts)
	}
	// A commit falls due while the appends are in flight: nothing
	// starts, not even the next batch fetched.
	if acts = p.step(txnT0, txnInCommitDue{now: txnT0}); len(acts) != 0 {
		t.Fatalf("commit due with appends in flight: %+v", acts)
	}
	if acts = p.step(txnT0, txnInFetched{r: fetchedTo(0, 19, 100, 17)}); len(acts) != 0 {
		t.Fatalf("a fetch while the commit waits: %+v", acts)
	}
	// The later answer comes first: it waits for the earlier one.
	if acts = p.step(txnT0, txnInAppended{p: key, id: 4, base: 104, n: 2}); len(acts) != 0 {
		t.Fatalf("an answer before the earlier one: %+v", acts)
	}
	if st := p.partitions(txnT0)[0]; st.SourceNextOffset != 12 || st.DestNextOffset != 102 {
		t.Fatalf("the position moved past an append whose predecessor is unanswered: %+v", st)
	}
	acts = p.step(txnT0, txnInAppended{p: key, id: 3, base: 102, n: 2})
	cs := actionsOf[txnDoCommit](acts)
	if len(cs) != 1 || len(actionsOf[txnDoAppend](acts)) != 0 || len(actionsOf[txnDoRelease](acts)) != 1 {
		t.Fatalf("after both answers: want the pin released, the commit and no append, got %+v", acts)
	}
	ck := cs[0].records[0].Value.(statestore.CheckpointValue)
	if ck.SourceNextOffset != 17 || ck.DestNextOffset != 106 {
		t.Fatalf("checkpoint %+v, want source 17, destination 106", ck)
	}
	if lv := cs[0].records[len(cs[0].records)-1].Value.(statestore.LinkValue); lv.Delivery != statestore.DeliveryTransactional || lv.State != statestore.Mirroring {
		t.Fatalf("link record %+v", lv)
	}
	acts = p.step(txnT0, txnInCommitted{})
	if ap := actionsOf[txnDoAppend](acts); len(ap) != 1 || ap[0].id != 5 {
		t.Fatalf("after the commit the next batch goes: %+v", acts)
	}
	acts = p.step(txnT0, txnInAppended{p: key, id: 5, base: 106, n: 2})
	if rel := actionsOf[txnDoRelease](acts); len(rel) != 1 {
		t.Fatalf("pin not released after the result's last batch: %+v", acts)
	}
	if st := p.partitions(txnT0)[0]; st.SourceNextOffset != 19 || st.DestNextOffset != 108 || st.CheckpointSource != 17 {
		t.Fatalf("status %+v", st)
	}
}

// Guards the bound on appends in flight (txnMaxInFlight, counted from the
// oldest batch not yet applied, answered or not: a broker recognises a
// batch sent again only among a producer's last five), that a step with
// nothing to append between batches in flight is applied in its place,
// and that a re-encoded batch goes alone.
func TestTxnPlanInFlightBound(t *testing.T) {
	p := newTxnPlan("l", "src", "dst", 3, 30*time.Second, txnT0)
	warm(t, p, 0, 0)
	key := txnPair(0).Src.Key()
	var bases []int64
	for b := int64(2); b < 20; b += 2 {
		bases = append(bases, b)
	}
	if ap := actionsOf[txnDoAppend](p.step(txnT0, txnInFetched{r: fetchedTo(0, 20, 1000, bases...)})); len(ap) != 1 {
		t.Fatalf("want the transaction's first append alone, got %+v", ap)
	}
	if ap := actionsOf[txnDoAppend](p.step(txnT0, txnInAppended{p: key, id: 2, base: 2, n: 2})); len(ap) != txnMaxInFlight || ap[0].id != 3 {
		t.Fatalf("want %d appends in flight, got %+v", txnMaxInFlight, ap)
	}
	// Answers 4 to 7 come, 3 does not: nothing more may start.
	for id := uint64(4); id <= 7; id++ {
		if acts := p.step(txnT0, txnInAppended{p: key, id: id, base: int64(id-1) * 2, n: 2}); len(acts) != 0 {
			t.Fatalf("answer %d with append 3 unanswered: %+v", id, acts)
		}
	}
	ap := actionsOf[txnDoAppend](p.step(txnT0, txnInAppended{p: key, id: 3, base: 4, n: 2}))
	if len(ap) != 3 || ap[0].id != 8 || ap[2].id != 10 {
		t.Fatalf("after answer 3: want appends 8 to 10 (the rest), got %+v", ap)
	}
	if st := p.partitions(txnT0)[0]; st.SourceNextOffset != 14 || st.DestNextOffset != 14 {
		t.Fatalf("after answers 2 to 7: %+v", st)
	}
	for id := uint64(8); id <= 10; id++ {
		p.step(txnT0, txnInAppended{p: key, id: id, base: int64(id-1) * 2, n: 2})
	}
	// A batch, aborted data the fetch consumed (a step with nothing to
	// append), a batch, a compacted batch (re-encoded), a batch.
	gappy := batchtest.Build(batchtest.Spec{BaseOffset: 30, PID: 7, BaseSequence: 0, FirstTimestamp: 1, LastOffsetDelta: 4,
		Records: []batchtest.Record{{Key: []byte("a"), OffsetDelta: 0}, {Key: []byte("b"), OffsetDelta: 3}}})
	h, _ := transform.ParseHeader(gappy)
	var apps []txnDoAppend
	for _, r := range []fetcher.Result{
		fetchedTo(0, 22, 1000, 20),
		{Partition: txnPair(0).Src, Gen: 1, Start: 22, End: 24, HighWatermark: 1000},
		fetchedTo(0, 30, 1000, 24),
		{Partition: txnPair(0).Src, Gen: 1, Start: 30, End: 35, HighWatermark: 1000, Batches: []fetcher.Batch{{Raw: gappy, Header: h}}},
		fetchedTo(0, 40, 1000, 35),
	} {
		apps = append(apps, actionsOf[txnDoAppend](p.step(txnT0, txnInFetched{r: r}))...)
	}
	if len(apps) != 2 || apps[0].id != 11 || apps[1].id != 12 || apps[1].reencode {
		t.Fatalf("want the batches at 20 and 24 (the re-encoded one waits for them), got %+v", apps)
	}
	if acts := p.step(txnT0, txnInAppended{p: key, id: 12, base: 22, n: 2}); len(acts) != 0 {
		t.Fatalf("answer 12 before 11: %+v", acts)
	}
	acts := p.step(txnT0, txnInAppended{p: key, id: 11, base: 20, n: 2})
	if ap := actionsOf[txnDoAppend](acts); len(ap) != 1 || ap[0].id != 13 || !ap[0].reencode {
		t.Fatalf("want the re-encoded batch alone, got %+v", acts)
	}
	if st := p.partitions(txnT0)[0]; st.SourceNextOffset != 30 || st.DestNextOffset != 24 {
		t.Fatalf("after answers 11 and 12 (the aborted range between them applied in its place): %+v", st)
	}
	acts = p.step(txnT0, txnInAppended{p: key, id: 13, base: 24, n: 2, reencode: true})
	if ap := actionsOf[txnDoAppend](acts); len(ap) != 1 || ap[0].id != 14 {
		t.Fatalf("after the re-encoded batch: %+v", acts)
	}
	p.step(txnT0, txnInAppended{p: key, id: 14, base: 26, n: 2})
	if st := p.partitions(txnT0)[0]; st.SourceNextOffset != 40 || st.DestNextOffset != 28 {
		t.Fatalf("at the end: %+v", st)
	}
	if n := p.counts.Get(BatchesMirrored); n != 14 {
		t.Fatalf("%d batches mirrored, want 14", n)
	}
}

// Guards the stop: fetching ends, queued batches are dropped with their
// pins released, the final commit carries the stop's state once nothing
// is in flight, and the session finishes only after it committed.
func TestTxnPlanStop(t *testing.T) {
	p := newTxnPlan("l", "src", "dst", 3, 30*time.Second, txnT0)
	warm(t, p, 0, 0)
	key := txnPair(0).Src.Key()
	p.step(txnT0, txnInFetched{r: fetchedTo(0, 16, 1000, 2, 4, 6, 8, 10, 12, 14)})
	if n := len(actionsOf[txnDoAppend](p.step(txnT0, txnInAppended{p: key, id: 2, base: 2, n: 2}))); n != txnMaxInFlight {
		t.Fatalf("%d appends started, want %d", n, txnMaxInFlight)
	}
	acts := p.step(txnT0, txnInStop{state: statestore.Paused})
	if len(actionsOf[txnDoUnassign](acts)) != 1 || len(actionsOf[txnDoRelease](acts)) != 1 || len(actionsOf[txnDoCommit](acts)) != 0 {
		t.Fatalf("stop with appends in flight: %+v", acts)
	}
	for id := uint64(3); id < 2+txnMaxInFlight; id++ {
		if acts = p.step(txnT0, txnInAppended{p: key, id: id, base: int64(id-1) * 2, n: 2}); len(acts) != 0 {
			t.Fatalf("with an append still in flight: %+v", acts)
		}
	}
	acts = p.step(txnT0, txnInAppended{p: key, id: 2 + txnMaxInFlight, base: 12, n: 2})
	cs := actionsOf[txnDoCommit](acts)
	if len(cs) != 1 || !cs[0].final {
		t.Fatalf("want the final commit: %+v", acts)
	}
	if lv := cs[0].records[len(cs[0].records)-1].Value.(statestore.LinkValue); lv.State != statestore.Paused {
		t.Fatalf("final link record %+v", lv)
	}
	if ck := cs[0].records[0].Value.(statestore.CheckpointValue); ck.SourceNextOffset != 14 || ck.DestNextOffset != 14 {
		t.Fatalf("final checkpoint %+v: the dropped batch must not count", ck)
	}
	if acts = p.step(txnT0, txnInCommitted{}); len(actionsOf[txnDoFinish](acts)) != 1 {
		t.Fatalf("after the final commit: %+v", acts)
	}
}

// Guards failure: a failed append or commit fails the session (the next one
// resumes at the committed checkpoints), and results of an older
// assignment are only released.
func TestTxnPlanFailures(t *testing.T) {
	p := newTxnPlan("l", "src", "dst", 3, 30*time.Second, txnT0)
	p.step(txnT0, txnInAdd{parts: []Placement{{Pair: txnPair(0), StartOffset: 0}}})
	stale := fetchedBatches(0, 9, 2, 0)
	if acts := p.step(txnT0, txnInFetched{r: stale}); len(actionsOf[txnDoRelease](acts)) != 1 || len(actionsOf[txnDoAppend](acts)) != 0 {
		t.Fatalf("stale result: %+v", acts)
	}
	p.step(txnT0, txnInFetched{r: fetchedBatches(0, 1, 2, 0)})
	boom := errors.New("fenced")
	if acts := p.step(txnT0, txnInAppended{p: txnPair(0).Src.Key(), id: 2, err: boom}); len(actionsOf[txnDoFail](acts)) != 1 {
		t.Fatalf("an answer of an append never started: %+v", acts)
	}
	if acts := p.step(txnT0, txnInAppended{p: txnPair(0).Src.Key(), id: 1, err: boom}); len(actionsOf[txnDoFail](acts)) != 1 {
		t.Fatalf("failed append: %+v", acts)
	}
	q := newTxnPlan("l", "src", "dst", 3, 30*time.Second, txnT0)
	q.step(txnT0, txnInAdd{parts: []Placement{{Pair: txnPair(0), StartOffset: 0}}})
	q.step(txnT0, txnInCommitDue{now: txnT0})
	if acts := q.step(txnT0, txnInCommitted{err: boom}); len(actionsOf[txnDoFail](acts)) != 1 {
		t.Fatalf("failed commit: %+v", acts)
	}
}

// Guards placement: a checkpoint of the same source topic resumes the
// partition there; one of a source topic recreated since (another topic
// ID) does not.
func TestTxnPlanPlacement(t *testing.T) {
	p := newTxnPlan("l", "src", "dst", 3, 30*time.Second, txnT0)
	ck := &statestore.CheckpointValue{SourceTopic: "s", SourcePartition: 0, SourceNextOffset: 40, DestNextOffset: 44, SourceTopicID: statestore.UUID{1}}
	old := &statestore.CheckpointValue{SourceTopic: "s", SourcePartition: 1, SourceNextOffset: 40, DestNextOffset: 44, SourceTopicID: statestore.UUID{9}}
	acts := p.step(txnT0, txnInAdd{parts: []Placement{{Pair: txnPair(0), Checkpoint: ck, StartOffset: 5}, {Pair: txnPair(1), Checkpoint: old, StartOffset: 5}}})
	as := actionsOf[txnDoAssign](acts)
	if len(as) != 2 || as[0].offset != 40 || as[1].offset != 5 {
		t.Fatalf("assignments %+v", as)
	}
}

// Guards a takeover's visibility: a partition's first append in the session
// makes a commit due at once (its data shows without waiting a checkpoint
// interval); later appends wait for the interval.
func TestTxnPlanFirstCommitAtOnce(t *testing.T) {
	p := newTxnPlan("l", "src", "dst", 3, 30*time.Second, txnT0)
	p.step(txnT0, txnInAdd{parts: []Placement{{Pair: txnPair(0), StartOffset: 0}}})
	p.step(txnT0, txnInFetched{r: fetchedBatches(0, 1, 6, 0, 2, 4)})
	key := txnPair(0).Src.Key()
	acts := p.step(txnT0, txnInAppended{p: key, id: 1, base: 0, n: 2})
	if len(actionsOf[txnDoCommit](acts)) != 1 {
		t.Fatalf("the session's first append: want a commit at once, got %+v", acts)
	}
	acts = p.step(txnT0, txnInCommitted{})
	if len(actionsOf[txnDoAppend](acts)) != 1 {
		t.Fatalf("after the first commit: %+v", acts)
	}
	acts = p.step(txnT0, txnInAppended{p: key, id: 2, base: 3, n: 2})
	if len(actionsOf[txnDoCommit](acts)) != 0 || len(actionsOf[txnDoAppend](acts)) != 1 {
		t.Fatalf("a later append: want the next append and no commit, got %+v", acts)
	}
}

// Guards the same for a partition that joins the session's appends after
// its first commit: its first append commits at once too.
func TestTxnPlanFirstCommitPerPartition(t *testing.T) {
	p := newTxnPlan("l", "src", "dst", 3, 30*time.Second, txnT0)
	p.step(txnT0, txnInAdd{parts: []Placement{{Pair: txnPair(0), StartOffset: 0}, {Pair: txnPair(1), StartOffset: 0}}})
	p.step(txnT0, txnInFetched{r: fetchedBatches(0, 1, 2, 0)})
	p.step(txnT0, txnInAppended{p: txnPair(0).Src.Key(), id: 1, base: 0, n: 2})
	p.step(txnT0, txnInCommitted{})
	p.step(txnT0, txnInFetched{r: fetchedBatches(1, 2, 2, 0)})
	acts := p.step(txnT0, txnInAppended{p: txnPair(1).Src.Key(), id: 1, base: 0, n: 2})
	if len(actionsOf[txnDoCommit](acts)) != 1 {
		t.Fatalf("partition 1's first append after the session's first commit: want a commit, got %+v", acts)
	}
}

// Guards the catch-up after a takeover: the append that first brings a
// partition up to the source's high watermark commits at once (the
// backlog shows without a checkpoint interval); the appends between its
// first and that one do not.
func TestTxnPlanCommitWhenCaughtUp(t *testing.T) {
	p := newTxnPlan("l", "src", "dst", 3, 30*time.Second, txnT0)
	p.step(txnT0, txnInAdd{parts: []Placement{{Pair: txnPair(0), StartOffset: 0}}})
	key := txnPair(0).Src.Key()
	fetch := func(end, base int64) {
		r := fetchedBatches(0, 1, end, base)
		r.HighWatermark = 6
		if ap := actionsOf[txnDoAppend](p.step(txnT0, txnInFetched{r: r})); len(ap) != 1 {
			t.Fatalf("fetch at %d: %+v", base, ap)
		}
	}
	fetch(2, 0)
	if acts := p.step(txnT0, txnInAppended{p: key, id: 1, base: 0, n: 2}); len(actionsOf[txnDoCommit](acts)) != 1 {
		t.Fatalf("first append: %+v", acts)
	}
	p.step(txnT0, txnInCommitted{})
	fetch(4, 2)
	if acts := p.step(txnT0, txnInAppended{p: key, id: 2, base: 3, n: 2}); len(actionsOf[txnDoCommit](acts)) != 0 {
		t.Fatalf("an append short of the high watermark committed: %+v", acts)
	}
	fetch(6, 4)
	acts := p.step(txnT0, txnInAppended{p: key, id: 3, base: 5, n: 2})
	cs := actionsOf[txnDoCommit](acts)
	if len(cs) != 1 || cs[0].records[0].Value.(statestore.CheckpointValue).SourceNextOffset != 6 {
		t.Fatalf("the append that caught up: want a commit at source 6, got %+v", acts)
	}
	p.step(txnT0, txnInCommitted{})
	p.step(txnT0, txnInFetched{r: fetchedBatches(0, 1, 8, 6)})
	if acts := p.step(txnT0, txnInAppended{p: key, id: 4, base: 8, n: 2}); len(actionsOf[txnDoCommit](acts)) != 0 {
		t.Fatalf("once shown caught up, appends wait for the interval: %+v", acts)
	}
}

// Guards the re-encode decision: a batch with offset gaps (compacted) is
// re-encoded densely, also at offset 0, and one that begins before the
// partition's start from that start.
func TestTxnPlanReencode(t *testing.T) {
	p := newTxnPlan("l", "src", "dst", 3, 30*time.Second, txnT0)
	p.step(txnT0, txnInAdd{parts: []Placement{{Pair: txnPair(0), StartOffset: 0}, {Pair: txnPair(1), StartOffset: 11}}})
	gappy := batchtest.Build(batchtest.Spec{BaseOffset: 0, PID: 7, BaseSequence: 0, FirstTimestamp: 1, LastOffsetDelta: 4,
		Records: []batchtest.Record{{Key: []byte("a"), OffsetDelta: 0}, {Key: []byte("b"), OffsetDelta: 3}}})
	h, _ := transform.ParseHeader(gappy)
	r := fetcher.Result{Partition: txnPair(0).Src, Gen: 1, Start: 0, End: 5, HighWatermark: 5, Batches: []fetcher.Batch{{Raw: gappy, Header: h}}}
	ap := actionsOf[txnDoAppend](p.step(txnT0, txnInFetched{r: r}))
	if len(ap) != 1 || !ap[0].reencode || ap[0].from != 0 {
		t.Fatalf("a gappy batch at offset 0: %+v", ap)
	}
	ap = actionsOf[txnDoAppend](p.step(txnT0, txnInFetched{r: fetchedBatches(1, 2, 12, 10)}))
	if len(ap) != 1 || !ap[0].reencode || ap[0].from != 11 {
		t.Fatalf("a batch across the start offset 11: %+v", ap)
	}
}

// Guards a re-encode that leaves nothing (no record at or after the
// partition's start): the position moves past the batch and nothing is
// counted as mirrored.
func TestTxnPlanEmptyReencode(t *testing.T) {
	p := newTxnPlan("l", "src", "dst", 3, 30*time.Second, txnT0)
	p.step(txnT0, txnInAdd{parts: []Placement{{Pair: txnPair(0), StartOffset: 11, DstEnd: 7}}})
	p.step(txnT0, txnInFetched{r: fetchedBatches(0, 1, 12, 10)})
	p.step(txnT0, txnInAppended{p: txnPair(0).Src.Key(), id: 1, empty: true})
	st := p.partitions(txnT0)[0]
	if st.SourceNextOffset != 12 || st.DestNextOffset != 7 || p.counts.Get(RecordsMirrored) != 0 {
		t.Fatalf("after an empty re-encode: %+v, %d records mirrored", st, p.counts.Get(RecordsMirrored))
	}
}

// Guards translation in transactional delivery: the plan's anchor is the
// last committed checkpoint, never the open transaction's appends (an
// abort throws them away and the next session appends them again
// later), and its window holds committed appends only.
func TestTxnPlanAnchorIsCommitted(t *testing.T) {
	p := newTxnPlan("l", "src", "dst", 3, 30*time.Second, txnT0)
	key := txnPair(0).Src.Key()
	p.step(txnT0, txnInAdd{parts: []Placement{{Pair: txnPair(0), StartOffset: 8, DstEnd: 98}}})
	if a, ok := p.Anchor(key); !ok || a.Head || a.CkSrc != -1 || len(a.Spans) != 0 {
		t.Fatalf("anchor before any commit: %+v %v; want no head, no checkpoint", a, ok)
	}
	if _, ok := p.Anchor(txnPair(1).Src.Key()); ok {
		t.Fatal("an anchor of a partition the session does not mirror")
	}
	p.step(txnT0, txnInFetched{r: fetchedTo(0, 10, 100, 8)})
	p.step(txnT0, txnInAppended{p: key, id: 1, base: 98, n: 2})
	p.step(txnT0, txnInCommitted{})
	a, _ := p.Anchor(key)
	if !a.Head || a.SrcNext != 10 || a.DstNext != 100 || a.CkSrc != 10 || len(a.Spans) != 1 ||
		a.Spans[0] != (translate.Span{From: 8, Base: 8, End: 10, DstBase: 98, DstEnd: 100}) {
		t.Fatalf("anchor after the first commit: %+v", a)
	}
	// Appended, not committed: the anchor stays where it was.
	p.step(txnT0, txnInFetched{r: fetchedTo(0, 14, 100, 10, 12)})
	p.step(txnT0, txnInAppended{p: key, id: 2, base: 101, n: 2})
	p.step(txnT0, txnInAppended{p: key, id: 3, base: 103, n: 2})
	if a, _ := p.Anchor(key); a.SrcNext != 10 || a.DstNext != 100 || len(a.Spans) != 1 {
		t.Fatalf("anchor with appends not committed: %+v", a)
	}
	if p.leaseEnd() != txnT0.Add(30*time.Second) {
		t.Fatalf("lease end %v, want the first commit's", p.leaseEnd())
	}
	now := txnT0.Add(time.Second)
	if cs := actionsOf[txnDoCommit](p.step(now, txnInCommitDue{now: now})); len(cs) != 1 {
		t.Fatal("no commit")
	}
	p.step(now, txnInCommitted{})
	if a, _ := p.Anchor(key); a.SrcNext != 14 || a.DstNext != 105 || len(a.Spans) != 3 || a.Spans[2].DstBase != 103 {
		t.Fatalf("anchor after the second commit: %+v", a)
	}
	if p.leaseEnd() != now.Add(30*time.Second) {
		t.Fatalf("lease end %v, want the second commit's", p.leaseEnd())
	}
}

// Guards memory: once the plan moves past an answered append (one batch,
// or a joined run), nothing of its queue's backing array still refers to
// the batches' bytes. Those are slices of whole fetch responses; a
// reference left there keeps each response alive after its pin went back
// to the fetcher, beyond max_buffered_bytes.
func TestTxnPlanLetsGoOfAppendedBatches(t *testing.T) {
	p := newTxnPlan("l", "src", "dst", 3, 30*time.Second, txnT0)
	p.coalesce = 1 << 20
	warm(t, p, 0, 0)
	key := txnPair(0).Src.Key()
	pt := p.parts[key]
	// A joined run of three, and a batch of another codec alone.
	r := fetchedSpecs(10, 2, 0, 2, 4, 6)
	r.Batches = append(r.Batches, fetchedSpecs(10, 2, 1, 8).Batches...)
	ap := actionsOf[txnDoAppend](p.step(txnT0, txnInFetched{r: r}))
	if len(ap) != 1 || len(ap[0].run) != 2 {
		t.Fatalf("want the transaction's first append to join 2, 4 and 6, got %+v", ap)
	}
	held := slices.Clip(pt.queue) // the same backing array, as it is now
	if len(held) != 4 {
		t.Fatalf("queue of %d, want the 4 fetched batches", len(held))
	}
	ap = actionsOf[txnDoAppend](p.step(txnT0, txnInAppended{p: key, id: ap[0].id, base: 2, n: 6, merged: true, bases: []int64{2, 4, 6}}))
	if len(ap) != 1 || len(ap[0].run) != 0 {
		t.Fatalf("want the gzip batch alone, got %+v", ap)
	}
	p.step(txnT0, txnInAppended{p: key, id: ap[0].id, base: 8, n: 2})
	if len(pt.queue) != 0 {
		t.Fatalf("%d batches still queued after every answer", len(pt.queue))
	}
	for i, q := range held {
		if q.raw != nil {
			t.Errorf("queue slot %d still holds the %d bytes of the batch at offset %d after its append was answered", i, len(q.raw), q.hdr.BaseOffset)
		}
	}
}
