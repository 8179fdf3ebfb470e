package link

import (
	"errors"
	"testing"
	"time"

	"github.com/seed83556561/mirrord/fetcher"
	"github.com/seed83556561/mirrord/internal/testkit/batchtest"
	"github.com/seed83556561/mirrord/transform"
	"github.com/seed83556561/mirrord/translate"
	"github.com/seed83556561/mirrord/twin"
)

// fetchedSpecs is a fetch result of partition 0 with the given batches
// (n records each, codec c) at bases, ending at end.
func fetchedSpecs(end int64, n int, c int8, bases ...int64) fetcher.Result {
	r := fetcher.Result{Partition: txnPair(0).Src, Gen: 1, Start: bases[0], End: end, HighWatermark: end, Pin: fetcher.NewPin(100)}
	for _, b := range bases {
		recs := make([]batchtest.Record, n)
		for i := range recs {
			recs[i] = batchtest.Record{Key: []byte{'k', byte(i)}, Value: []byte("value"), TimestampDelta: int64(i), OffsetDelta: -1}
		}
		raw := batchtest.Build(batchtest.Spec{BaseOffset: b, PID: 7, BaseSequence: int32(b), Codec: c, FirstTimestamp: 1_700_000_000_000 + b, Records: recs})
		h, _ := transform.ParseHeader(raw)
		r.Batches = append(r.Batches, fetcher.Batch{Raw: raw, Header: h})
	}
	return r
}

// Guards coalescing's rules in the transactional plan: a backlog of
// contiguous batches of one codec is started as one append whose sequences
// cover them all (one append in flight, however many batches), a gap in
// the source offsets (aborted data or a marker consumed between them), a
// change of codec and the byte limit end a run, a batch alone goes as it
// is, and the answer gives each source batch its own span inside the
// joined batch, so that the anchor translates every position exactly.
func TestTxnPlanCoalesces(t *testing.T) {
	p := newTxnPlan("l", "src", "dst", 3, 30*time.Second, txnT0)
	p.coalesce = 1 << 20
	warm(t, p, 8, 98)
	key := txnPair(0).Src.Key()

	// 10, 12, 14: contiguous, joined; 17 follows a gap (offsets 16-16
	// were an aborted batch or a marker), so it starts the next run with
	// 19; 21 is gzip, alone at the end.
	r := fetchedSpecs(23, 2, 0, 10, 12, 14)
	more := fetchedSpecs(23, 2, 0, 17, 19)
	r.Batches = append(r.Batches, more.Batches...)
	gz := fetchedSpecs(23, 2, 1, 21)
	r.Batches = append(r.Batches, gz.Batches...)
	acts := p.step(txnT0, txnInFetched{r: r})
	ap := actionsOf[txnDoAppend](acts)
	if len(ap) != 1 || ap[0].id != 2 || len(ap[0].run) != 2 || ap[0].offsets != 6 || ap[0].limit != 1<<20 {
		t.Fatalf("want the transaction's first append to join 10, 12 and 14 (6 offsets), got %+v", ap)
	}
	acts = p.step(txnT0, txnInAppended{p: key, id: 2, base: 100, n: 6, bases: []int64{100, 102, 104}, merged: true})
	ap = actionsOf[txnDoAppend](acts)
	if len(ap) != 2 || ap[0].id != 3 || len(ap[0].run) != 1 || ap[0].offsets != 4 || ap[1].id != 4 || len(ap[1].run) != 0 {
		t.Fatalf("want 17+19 joined and the gzip batch alone, got %+v", ap)
	}
	if st := p.partitions(txnT0)[0]; st.SourceNextOffset != 16 || st.DestNextOffset != 106 {
		t.Fatalf("after the first run: %+v", st)
	}
	p.step(txnT0, txnInAppended{p: key, id: 3, base: 106, n: 4, bases: []int64{106, 108}, merged: true})
	acts = p.step(txnT0, txnInAppended{p: key, id: 4, base: 110, n: 2})
	if rel := actionsOf[txnDoRelease](acts); len(rel) != 1 {
		t.Fatalf("the fetch's pin is released once its last batch is applied: %+v", acts)
	}
	if st := p.partitions(txnT0)[0]; st.SourceNextOffset != 23 || st.DestNextOffset != 112 {
		t.Fatalf("after every append: %+v", st)
	}
	if got := p.counts.Get(BatchesCoalesced); got != 2 {
		t.Fatalf("batches coalesced %d, want 2", got)
	}
	if got := p.counts.Get(SourceBatchesCoalesced); got != 5 {
		t.Fatalf("source batches coalesced %d, want 5", got)
	}
	if got := p.counts.Get(BatchesMirrored); got != 7 {
		t.Fatalf("batches mirrored %d, want 7 (the warm-up's and six)", got)
	}
	want := []translate.Span{
		{From: 10, Base: 10, End: 12, DstBase: 100, DstEnd: 102},
		{From: 12, Base: 12, End: 14, DstBase: 102, DstEnd: 104},
		{From: 14, Base: 14, End: 16, DstBase: 104, DstEnd: 106},
		{From: 17, Base: 17, End: 19, DstBase: 106, DstEnd: 108},
		{From: 19, Base: 19, End: 21, DstBase: 108, DstEnd: 110},
		{From: 21, Base: 21, End: 23, DstBase: 110, DstEnd: 112},
	}
	got := p.parts[key].pend
	if len(got) != len(want) {
		t.Fatalf("spans %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("span %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

// Guards that a run stays within coalesce_bytes, and that coalescing off
// (0) appends every batch alone as before.
func TestTxnPlanCoalesceLimit(t *testing.T) {
	for _, tc := range []struct {
		limit int64
		want  []int // run lengths of the appends started
	}{
		{limit: 0, want: []int{1, 1, 1, 1}},
		{limit: 1 << 20, want: []int{4}},
		// Each batch counts its bytes and 20 per record.
		{limit: 2 * (int64(len(fetchedSpecs(12, 2, 0, 10).Batches[0].Raw)) + 40), want: []int{2, 2}},
	} {
		p := newTxnPlan("l", "src", "dst", 3, 30*time.Second, txnT0)
		p.coalesce = tc.limit
		warm(t, p, 8, 98)
		acts := p.step(txnT0, txnInFetched{r: fetchedSpecs(18, 2, 0, 10, 12, 14, 16)})
		// The transaction's first append goes alone; answer it to see
		// the rest start.
		first := actionsOf[txnDoAppend](acts)
		runs := []int{len(first[0].run) + 1}
		n := int64(first[0].offsets)
		bases := []int64{100}
		for i := 1; i < runs[0]; i++ {
			bases = append(bases, 100+2*int64(i))
		}
		e := txnInAppended{p: txnPair(0).Src.Key(), id: first[0].id, base: 100, n: n}
		if runs[0] > 1 {
			e.bases, e.merged = bases, true
		}
		for _, a := range actionsOf[txnDoAppend](p.step(txnT0, e)) {
			runs = append(runs, len(a.run)+1)
		}
		if len(runs) != len(tc.want) {
			t.Fatalf("limit %d: runs %v, want %v", tc.limit, runs, tc.want)
		}
		for i := range runs {
			if runs[i] != tc.want[i] {
				t.Fatalf("limit %d: runs %v, want %v", tc.limit, runs, tc.want)
			}
		}
	}
}

// Guards that an answer that does not account for every batch of a run
// fails the session instead of moving the positions on a guess.
func TestTxnPlanCoalescedAnswerChecked(t *testing.T) {
	p := newTxnPlan("l", "src", "dst", 3, 30*time.Second, txnT0)
	p.coalesce = 1 << 20
	warm(t, p, 8, 98)
	key := txnPair(0).Src.Key()
	if ap := actionsOf[txnDoAppend](p.step(txnT0, txnInFetched{r: fetchedSpecs(14, 2, 0, 10, 12)})); len(ap) != 1 || len(ap[0].run) != 1 {
		t.Fatalf("want one joined append, got %+v", ap)
	}
	_, err := p.appended(txnInAppended{p: key, id: 2, base: 100, n: 4, bases: []int64{100}, merged: true})
	if !errors.Is(err, errInvariant) {
		t.Fatalf("an answer with one base for two batches: %v, want errInvariant", err)
	}
}

// Guards each partition's joining limit: its destination topic's
// max.message.bytes where that is below coalesce_bytes (a joined batch
// above it would be refused, and joined again by the next session), and
// none for a compacted source topic (or one whose settings could not be
// read).
func TestTxnPlanJoinLimitOf(t *testing.T) {
	one := int64(len(fetchedSpecs(12, 2, 0, 10).Batches[0].Raw)) + 40 // a batch as runBytes counts it
	for _, tc := range []struct {
		name  string
		pc    Placement
		want  int
		limit int64 // of the joined batch
	}{
		{"coalesce_bytes", Placement{}, 4, 1 << 20},
		{"max.message.bytes below it", Placement{MaxMessageBytes: 2 * one}, 2, 2 * one},
		{"max.message.bytes above it", Placement{MaxMessageBytes: 1 << 30}, 4, 1 << 20},
		{"compacted", Placement{Compacted: true, MaxMessageBytes: 1 << 20}, 1, 0},
	} {
		p := newTxnPlan("l", "src", "dst", 3, 30*time.Second, txnT0)
		p.coalesce = 1 << 20
		pc := tc.pc
		pc.Pair, pc.StartOffset, pc.DstEnd = txnPair(0), 10, 100
		p.step(txnT0, txnInAdd{parts: []Placement{pc}})
		ap := actionsOf[txnDoAppend](p.step(txnT0, txnInFetched{r: fetchedSpecs(18, 2, 0, 10, 12, 14, 16)}))
		if len(ap) != 1 || len(ap[0].run)+1 != tc.want || ap[0].limit != tc.limit {
			t.Errorf("%s: first append %+v, want a run of %d, its joined batch at most %d bytes", tc.name, ap, tc.want, tc.limit)
		}
	}
}

// Guards that only small batches are joined, in either delivery: a batch
// of joinBelow bytes or more goes alone, and ends a run before it (1 MiB
// source batches of zstd or gzip, a few hundred KB each, were joined and
// compressed again for nothing).
func TestJoinOnlySmallBatches(t *testing.T) {
	batch := func(base int64, values int, seq int32) (raw []byte, h transform.Header) {
		recs := make([]batchtest.Record, 2)
		for i := range recs {
			recs[i] = batchtest.Record{Key: []byte{'k', byte(i)}, Value: make([]byte, values), OffsetDelta: -1}
		}
		raw = batchtest.Build(batchtest.Spec{BaseOffset: base, PID: 7, Epoch: 0, BaseSequence: seq, FirstTimestamp: 1_700_000_000_000, Records: recs})
		h, _ = transform.ParseHeader(raw)
		return raw, h
	}
	small1, h1 := batch(100, 100, 0)
	small2, h2 := batch(102, 100, 2)
	big, h3 := batch(104, joinBelow/2, 4)
	small3, h4 := batch(106, 100, 6)
	if len(big) < joinBelow || len(small1) >= joinBelow {
		t.Fatalf("batch sizes %d and %d around joinBelow %d", len(small1), len(big), joinBelow)
	}
	items := []item{
		{raw: small1, hdr: h1, from: 100, end: 102},
		{raw: small2, hdr: h2, from: 100, end: 104},
		{raw: big, hdr: h3, from: 100, end: 106},
		{raw: small3, hdr: h4, from: 100, end: 108},
	}
	d := twin.Decision{Verdict: twin.Forward, PSM: transform.Decision{Kind: transform.KindAppend}}
	for i, want := range []int{2, 1, 1, 1} {
		if got := producerRun(items[i:], d, 10<<20); got != want {
			t.Errorf("preserve: a run from batch %d of %d batches, want %d", i, got, want)
		}
	}
	var qs []txnQueued
	for _, it := range items {
		qs = append(qs, txnQueued{raw: it.raw, hdr: it.hdr, end: it.end})
	}
	for i, want := range []int{2, 1, 1, 1} {
		if got := runLength(qs[i:], 10<<20); got != want {
			t.Errorf("transactional: a run from batch %d of %d batches, want %d", i, got, want)
		}
	}
}
