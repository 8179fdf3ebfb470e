package link

import (
	"errors"
	"testing"
	"time"

	"github.com/seed83556561/mirrord/fetcher"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/internal/testkit/batchtest"
	"github.com/seed83556561/mirrord/statestore"
	"github.com/seed83556561/mirrord/transform"
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

// Guards the transactional plan's order: a partition's batches are appended
// one at a time in source order, the position moves only past appended
// batches, a due commit waits for the appends in flight and holds back new
// ones, and its checkpoint records are what was appended before it.
func TestTxnPlanCommitWaitsForAppends(t *testing.T) {
	p := newTxnPlan("l", "src", "dst", 3, 30*time.Second, txnT0)
	acts := p.step(txnT0, txnInAdd{parts: []Placement{{Pair: txnPair(0), StartOffset: 10, DstEnd: 0}}})
	if as := actionsOf[txnDoAssign](acts); len(as) != 1 || as[0].offset != 10 {
		t.Fatalf("assign: %+v", acts)
	}
	acts = p.step(txnT0, txnInFetched{r: fetchedBatches(0, 1, 15, 10, 12)})
	if ap := actionsOf[txnDoAppend](acts); len(ap) != 1 {
		t.Fatalf("want the first batch appended alone, got %+v", acts)
	}
	// A commit falls due while the first append is in flight: nothing
	// starts, not even the partition's next append.
	if acts = p.step(txnT0, txnInCommitDue{now: txnT0}); len(acts) != 0 {
		t.Fatalf("commit due with an append in flight: %+v", acts)
	}
	acts = p.step(txnT0, txnInAppended{p: txnPair(0).Src.Key(), base: 100, n: 2})
	cs := actionsOf[txnDoCommit](acts)
	if len(cs) != 1 || len(actionsOf[txnDoAppend](acts)) != 0 {
		t.Fatalf("after the append: want the commit and no append, got %+v", acts)
	}
	ck := cs[0].records[0].Value.(statestore.CheckpointValue)
	if ck.SourceNextOffset != 12 || ck.DestNextOffset != 102 {
		t.Fatalf("checkpoint %+v, want source 12, destination 102", ck)
	}
	if lv := cs[0].records[len(cs[0].records)-1].Value.(statestore.LinkValue); lv.Delivery != statestore.DeliveryTransactional || lv.State != statestore.Mirroring {
		t.Fatalf("link record %+v", lv)
	}
	acts = p.step(txnT0, txnInCommitted{})
	if ap := actionsOf[txnDoAppend](acts); len(ap) != 1 {
		t.Fatalf("after the commit the next batch goes: %+v", acts)
	}
	acts = p.step(txnT0, txnInAppended{p: txnPair(0).Src.Key(), base: 103, n: 2})
	// The result's last batch ends at the result's End (15) and releases
	// its pin.
	if rel := actionsOf[txnDoRelease](acts); len(rel) != 1 {
		t.Fatalf("pin not released after the result's last batch: %+v", acts)
	}
	if st := p.partitions(txnT0)[0]; st.SourceNextOffset != 15 || st.DestNextOffset != 105 || st.CheckpointSource != 12 {
		t.Fatalf("status %+v", st)
	}
}

// Guards the stop: fetching ends, queued batches are dropped with their
// pins released, the final commit carries the stop's state once nothing
// is in flight, and the session finishes only after it committed.
func TestTxnPlanStop(t *testing.T) {
	p := newTxnPlan("l", "src", "dst", 3, 30*time.Second, txnT0)
	p.step(txnT0, txnInAdd{parts: []Placement{{Pair: txnPair(0), StartOffset: 0}}})
	p.step(txnT0, txnInFetched{r: fetchedBatches(0, 1, 4, 0, 2)})
	acts := p.step(txnT0, txnInStop{state: statestore.Paused})
	if len(actionsOf[txnDoUnassign](acts)) != 1 || len(actionsOf[txnDoRelease](acts)) != 1 || len(actionsOf[txnDoCommit](acts)) != 0 {
		t.Fatalf("stop with an append in flight: %+v", acts)
	}
	acts = p.step(txnT0, txnInAppended{p: txnPair(0).Src.Key(), base: 0, n: 2})
	cs := actionsOf[txnDoCommit](acts)
	if len(cs) != 1 || !cs[0].final {
		t.Fatalf("want the final commit: %+v", acts)
	}
	if lv := cs[0].records[len(cs[0].records)-1].Value.(statestore.LinkValue); lv.State != statestore.Paused {
		t.Fatalf("final link record %+v", lv)
	}
	if ck := cs[0].records[0].Value.(statestore.CheckpointValue); ck.SourceNextOffset != 2 {
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
	if acts := p.step(txnT0, txnInAppended{p: txnPair(0).Src.Key(), err: boom}); len(actionsOf[txnDoFail](acts)) != 1 {
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
	acts := p.step(txnT0, txnInAppended{p: txnPair(0).Src.Key(), base: 0, n: 2})
	if len(actionsOf[txnDoCommit](acts)) != 1 {
		t.Fatalf("the session's first append: want a commit at once, got %+v", acts)
	}
	acts = p.step(txnT0, txnInCommitted{})
	if len(actionsOf[txnDoAppend](acts)) != 1 {
		t.Fatalf("after the first commit: %+v", acts)
	}
	acts = p.step(txnT0, txnInAppended{p: txnPair(0).Src.Key(), base: 3, n: 2})
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
	p.step(txnT0, txnInAppended{p: txnPair(0).Src.Key(), base: 0, n: 2})
	p.step(txnT0, txnInCommitted{})
	p.step(txnT0, txnInFetched{r: fetchedBatches(1, 2, 2, 0)})
	acts := p.step(txnT0, txnInAppended{p: txnPair(1).Src.Key(), base: 0, n: 2})
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
	p.step(txnT0, txnInFetched{r: fetchedBatches(0, 1, 6, 0, 2, 4)})
	key := txnPair(0).Src.Key()
	if acts := p.step(txnT0, txnInAppended{p: key, base: 0, n: 2}); len(actionsOf[txnDoCommit](acts)) != 1 {
		t.Fatalf("first append: %+v", acts)
	}
	p.step(txnT0, txnInCommitted{})
	if acts := p.step(txnT0, txnInAppended{p: key, base: 3, n: 2}); len(actionsOf[txnDoCommit](acts)) != 0 {
		t.Fatalf("an append short of the high watermark committed: %+v", acts)
	}
	acts := p.step(txnT0, txnInAppended{p: key, base: 5, n: 2})
	cs := actionsOf[txnDoCommit](acts)
	if len(cs) != 1 || cs[0].records[0].Value.(statestore.CheckpointValue).SourceNextOffset != 6 {
		t.Fatalf("the append that caught up: want a commit at source 6, got %+v", acts)
	}
	p.step(txnT0, txnInCommitted{})
	p.step(txnT0, txnInFetched{r: fetchedBatches(0, 1, 8, 6)})
	if acts := p.step(txnT0, txnInAppended{p: key, base: 8, n: 2}); len(actionsOf[txnDoCommit](acts)) != 0 {
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
	p.step(txnT0, txnInAppended{p: txnPair(0).Src.Key(), empty: true})
	st := p.partitions(txnT0)[0]
	if st.SourceNextOffset != 12 || st.DestNextOffset != 7 || p.counts.Get(RecordsMirrored) != 0 {
		t.Fatalf("after an empty re-encode: %+v, %d records mirrored", st, p.counts.Get(RecordsMirrored))
	}
}
