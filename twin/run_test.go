package twin

import (
	"fmt"
	"testing"

	"github.com/seed83556561/mirrord/internal/testkit/batchtest"
	"github.com/seed83556561/mirrord/transform"
)

// runBatches are dense source batches of codec at offsets base on (sizes
// ns), each with its own keys, and the batch a transactional session
// appends for them as one run (transform.Merge, then transform.Stamp),
// read back with its producer fields stripped (transform.Unstamp), at
// destination offset dst.
func runBatches(t *testing.T, codec int8, base, dst int64, ns ...int) (srcs [][]byte, run []byte) {
	t.Helper()
	key := 0
	for _, n := range ns {
		rs := make([]batchtest.Record, n)
		for i := range rs {
			rs[i] = batchtest.Record{Key: fmt.Appendf(nil, "k%d", key), Value: fmt.Appendf(nil, "v%d", key), TimestampDelta: int64(i), OffsetDelta: -1}
			key++
		}
		srcs = append(srcs, batchtest.Build(batchtest.Spec{BaseOffset: base, PID: -1, Epoch: -1, BaseSequence: -1, Codec: codec,
			FirstTimestamp: 1_700_000_000_000 + base*10, Records: rs}))
		base += int64(n)
	}
	run, _, err := transform.NewReencoder().Merge(nil, srcs, transform.MergeHeader{ProducerID: 77, ProducerEpoch: 3, BaseSequence: 40, Transactional: true})
	if err != nil {
		t.Fatal(err)
	}
	transform.Stamp(run, 77, 3, 40)
	transform.Unstamp(run)
	putBase(run, dst)
	return srcs, run
}

func putBase(b []byte, o int64) {
	for i := range 8 {
		b[i] = byte(o >> (56 - 8*i))
	}
}

// Guards the placing of a source batch inside a run the link coalesced:
// each batch is found at its own place and nowhere else, for every codec,
// and batches the link never merges (trimmed, another codec,
// LogAppendTime) are no part.
func TestRunHolds(t *testing.T) {
	for codec := range int8(5) {
		t.Run(fmt.Sprint(codec), func(t *testing.T) {
			reenc := transform.NewReencoder()
			srcs, dst := runBatches(t, codec, 100, 7, 2, 1, 3)
			run, err := NewRun(reenc, dst)
			if err != nil {
				t.Fatal(err)
			}
			if run.Len() != 6 {
				t.Fatalf("run of %d records; want 6", run.Len())
			}
			places := []int{0, 2, 3}
			for i, raw := range srcs {
				h, _ := transform.ParseHeader(raw)
				part, err := NewPart(reenc, raw, h)
				if err != nil {
					t.Fatal(err)
				}
				for at := range run.Len() + 1 {
					if got, want := run.Holds(part, h.BaseOffset, at), at == places[i]; got != want {
						t.Errorf("batch %d at index %d: holds %v, want %v", i, at, got, want)
					}
				}
				if got := run.Find(part, h.BaseOffset, 0); got != places[i] {
					t.Errorf("batch %d: found at %d, want %d", i, got, places[i])
				}
				if got := run.Find(part, h.BaseOffset, places[i]+1); got != -1 {
					t.Errorf("batch %d: found again at %d", i, got)
				}
				if ok, err := Within(reenc, raw, h, h.BaseOffset, dst, places[i]); err != nil || !ok {
					t.Errorf("batch %d: within at %d: %v, %v", i, places[i], ok, err)
				}
				if ok, _ := Within(reenc, raw, h, h.BaseOffset+1, dst, places[i]); ok {
					t.Errorf("batch %d trimmed: a part", i)
				}
			}
			// The same records under another codec, or stamped with
			// LogAppendTime, are never merged into this run.
			h, _ := transform.ParseHeader(srcs[2])
			recs, _ := reenc.Records(srcs[2])
			var rs []batchtest.Record
			for i, r := range recs {
				rs = append(rs, batchtest.Record{Key: r.Key, Value: r.Value, TimestampDelta: r.Timestamp - h.FirstTimestamp, OffsetDelta: int32(i)})
			}
			other := batchtest.Build(batchtest.Spec{BaseOffset: h.BaseOffset, PID: -1, Epoch: -1, BaseSequence: -1, Codec: (codec + 1) % 5, FirstTimestamp: h.FirstTimestamp, Records: rs})
			oh, _ := transform.ParseHeader(other)
			if ok, _ := Within(reenc, other, oh, oh.BaseOffset, dst, 3); ok {
				t.Error("a batch of another codec is a part")
			}
			lat := batchtest.Build(batchtest.Spec{BaseOffset: h.BaseOffset, PID: -1, Epoch: -1, BaseSequence: -1, Codec: codec, FirstTimestamp: h.FirstTimestamp, Records: rs, LogAppendTime: h.FirstTimestamp + 5})
			lh, _ := transform.ParseHeader(lat)
			if ok, _ := Within(reenc, lat, lh, lh.BaseOffset, dst, 3); ok {
				t.Error("a LogAppendTime batch is a part")
			}
		})
	}
}

// Guards the checkpoint walk over coalesced runs: the walk keeps its place
// inside a destination batch across the source batches it holds (StepPart
// until the last, StepMatch), goes on with the next destination batch, and
// calls foreign a batch whose records stop being the next source batch's
// (a gap at the source, or other records) instead of placing it. Without
// Runs a run's first batch stays what Same says of it (compared whole).
func TestWalkerRuns(t *testing.T) {
	srcs, run := runBatches(t, 3, 100, 0, 2, 1, 3) // source 100-105, destination 0-5
	alone := batchtest.Build(batchtest.Spec{BaseOffset: 106, PID: -1, Epoch: -1, BaseSequence: -1, FirstTimestamp: 1_700_000_002_000,
		Records: []batchtest.Record{{Key: []byte("x"), Value: []byte("y"), OffsetDelta: -1}}})
	dstAlone := clone(alone)
	putBase(dstAlone, 7) // after the commit marker at 6
	walk := func(runs bool, src [][]byte, dst [][]byte) ([]Step, []int, *Walker) {
		w := NewWalker(transform.NewPSM(transform.PSMConfig{}), walkSource, transform.NewReencoder(), 100, 0)
		if runs {
			w.Runs()
		}
		var steps []Step
		var ats []int
		for si, di := 0, 0; si < len(src) && di < len(dst); {
			h, _ := transform.ParseHeader(src[si])
			ats = append(ats, w.RunAt())
			st, err := w.Compare(src[si], h, h.BaseOffset, dst[di], clock())
			if err != nil {
				t.Fatal(err)
			}
			steps = append(steps, st)
			switch st {
			case StepPart:
				si++
			case StepMatch:
				si++
				di++
			default:
				di++
			}
		}
		return steps, ats, w
	}
	all := append(append([][]byte{}, srcs...), alone)
	steps, ats, w := walk(true, all, [][]byte{run, dstAlone})
	if want := []Step{StepPart, StepPart, StepMatch, StepMatch}; fmt.Sprint(steps) != fmt.Sprint(want) {
		t.Fatalf("steps %v, want %v", steps, want)
	}
	if want := []int{0, 2, 3, 0}; fmt.Sprint(ats) != fmt.Sprint(want) {
		t.Errorf("run indexes %v, want %v", ats, want)
	}
	if w.SrcNext() != 107 || w.DstNext() != 8 || w.Counts().Matched != 2 || w.Counts().Foreign != 0 {
		t.Errorf("walk at %d/%d with %+v; want 107/8, 2 matched", w.SrcNext(), w.DstNext(), w.Counts())
	}

	// The second batch missing at the source (a gap the run cannot
	// span): the run's records from its place on are not placed.
	steps, _, w = walk(true, [][]byte{srcs[0], srcs[2], alone}, [][]byte{run, dstAlone})
	if want := []Step{StepPart, StepForeign, StepForeign}; fmt.Sprint(steps[:3]) != fmt.Sprint(want) {
		t.Errorf("with a batch missing: steps %v, want %v first", steps, want)
	}
	if w.Counts().Foreign == 0 {
		t.Errorf("with a batch missing: %+v; want the run foreign", w.Counts())
	}

	// Without Runs, the run is compared whole with each batch.
	steps, _, _ = walk(false, all, [][]byte{run, dstAlone})
	if steps[0] == StepPart {
		t.Errorf("without runs: steps %v", steps)
	}
}

// Guards the checkpoint walk over preserve delivery's coalesced runs
// (ProducerRuns): a run is one producer's consecutive batches, joined under
// its mapped producer ID, epoch and first base sequence. The walk places
// each batch of the run (StepPart until the last, StepMatch), and calls the
// destination batch foreign when a part's identity does not continue the
// run: another producer with the same records, or a base sequence that is
// not the run's next. Runs alone (transactional delivery) places those by
// content.
func TestWalkerProducerRuns(t *testing.T) {
	build := func(pids []int64, seqs []int32, ns ...int) [][]byte {
		var srcs [][]byte
		base, key := int64(100), 0
		for b, n := range ns {
			rs := make([]batchtest.Record, n)
			for i := range rs {
				rs[i] = batchtest.Record{Key: fmt.Appendf(nil, "k%d", key), Value: fmt.Appendf(nil, "v%d", key), TimestampDelta: int64(i), OffsetDelta: -1}
				key++
			}
			srcs = append(srcs, batchtest.Build(batchtest.Spec{BaseOffset: base, PID: pids[b], Epoch: 2, BaseSequence: seqs[b], Codec: 3,
				FirstTimestamp: 1_700_000_000_000 + base*10, Records: rs}))
			base += int64(n)
		}
		return srcs
	}
	joined := func(srcs [][]byte, seq int32) []byte {
		run, err := transform.NewReencoder().Join(nil, srcs, transform.MergeHeader{ProducerID: transform.MapPID(5, 42), ProducerEpoch: 2, BaseSequence: seq})
		if err != nil {
			t.Fatal(err)
		}
		putBase(run, 0)
		return run
	}
	// newWalker starts a walk at source offset 100 that looks for runs,
	// by producer (ProducerRuns) or by content alone (Runs).
	newWalker := func(byPID bool) *Walker {
		w := NewWalker(transform.NewPSM(transform.PSMConfig{}), walkSource, transform.NewReencoder(), 100, 0)
		if byPID {
			w.ProducerRuns()
		} else {
			w.Runs()
		}
		return w
	}
	walk := func(byPID bool, src [][]byte, dst []byte) ([]Step, *Walker) {
		w := newWalker(byPID)
		var steps []Step
		for _, raw := range src {
			h, _ := transform.ParseHeader(raw)
			st, err := w.Compare(raw, h, h.BaseOffset, dst, clock())
			if err != nil {
				t.Fatal(err)
			}
			steps = append(steps, st)
			if st != StepPart {
				break
			}
		}
		return steps, w
	}
	one := build([]int64{5, 5, 5}, []int32{10, 12, 13}, 2, 1, 3)
	steps, w := walk(true, one, joined(one, 10))
	if want := []Step{StepPart, StepPart, StepMatch}; fmt.Sprint(steps) != fmt.Sprint(want) {
		t.Fatalf("one producer's run: steps %v, want %v", steps, want)
	}
	if w.SrcNext() != 106 || w.DstNext() != 6 || w.Counts().Matched != 1 {
		t.Errorf("one producer's run: walk at %d/%d with %+v; want 106/6, 1 matched", w.SrcNext(), w.DstNext(), w.Counts())
	}

	// The run's header one sequence off: not this producer's batch.
	if steps, _ := walk(true, one, joined(one, 11)); steps[0] == StepPart || steps[0] == StepMatch {
		t.Errorf("base sequence off by one: steps %v", steps)
	}
	// The second batch another producer's, with the same records: by
	// identity not the run's next part; by content (Runs) it is.
	mixed := build([]int64{5, 6, 5}, []int32{10, 12, 13}, 2, 1, 3)
	dst := joined(one, 10)
	if steps, _ := walk(true, mixed, dst); fmt.Sprint(steps) != fmt.Sprint([]Step{StepPart, StepForeign}) {
		t.Errorf("another producer inside the run: steps %v, want [part foreign]", steps)
	}
	if steps, _ := walk(false, mixed, dst); fmt.Sprint(steps) != fmt.Sprint([]Step{StepPart, StepPart, StepMatch}) {
		t.Errorf("by content alone: steps %v, want [part part match]", steps)
	}
	// The source's log start moved into the run's first batch after the
	// link joined it whole (DeleteRecords): fetched from inside it, the
	// batch is still the run's first part, taken whole (TestReconcile-
	// AfterDeleteRecords duplicated records in CI when the crashed
	// session had joined that batch).
	w = NewWalker(transform.NewPSM(transform.PSMConfig{}), walkSource, transform.NewReencoder(), 101, 0)
	w.ProducerRuns()
	var inside []Step
	for i, raw := range one {
		h, _ := transform.ParseHeader(raw)
		from := h.BaseOffset
		if i == 0 {
			from++
		}
		st, err := w.Compare(raw, h, from, joined(one, 10), clock())
		if err != nil {
			t.Fatal(err)
		}
		inside = append(inside, st)
	}
	if want := []Step{StepPart, StepPart, StepMatch}; fmt.Sprint(inside) != fmt.Sprint(want) {
		t.Errorf("log start inside the run's first batch: steps %v, want %v", inside, want)
	}

	// The source's log start moved to the run's second batch (retention
	// deletes whole segments; DeleteRecords): the walk is told the
	// source lost its records from the checkpoint on (Lost), and the
	// source's first batch is the run's second part. The run's records
	// before it mirror the records the source lost; the batch is placed
	// at its place in the run, by its producer's sequence (ProducerRuns)
	// or, in transactional delivery, by its records (Runs). Taking the
	// run for lost records alone would append its later parts again.
	for _, byPID := range []bool{true, false} {
		w = newWalker(byPID)
		w.Lost(102)
		var later []Step
		for _, raw := range one[1:] {
			h, _ := transform.ParseHeader(raw)
			st, err := w.Compare(raw, h, h.BaseOffset, joined(one, 10), clock())
			if err != nil {
				t.Fatal(err)
			}
			later = append(later, st)
		}
		if want := []Step{StepPart, StepMatch}; fmt.Sprint(later) != fmt.Sprint(want) {
			t.Errorf("log start at the run's second batch (producer runs %v): steps %v, want %v", byPID, later, want)
		}
		if c := w.Counts(); w.SrcNext() != 106 || w.DstNext() != 6 || c.Matched != 1 || c.Foreign != 0 || c.Passed != 0 {
			t.Errorf("log start at the run's second batch (producer runs %v): walk at %d/%d with %+v; want 106/6, 1 matched", byPID, w.SrcNext(), w.DstNext(), c)
		}
		if _, _, open := w.LostOpen(); open {
			t.Errorf("log start at the run's second batch (producer runs %v): the lost stretch is still open", byPID)
		}
	}
	// The log start inside the run's last part (DeleteRecords): fetched
	// from inside, the batch is the run's last part, taken whole.
	for _, byPID := range []bool{true, false} {
		w = newWalker(byPID)
		w.Lost(104)
		h, _ := transform.ParseHeader(one[2])
		st, err := w.Compare(one[2], h, 104, joined(one, 10), clock())
		if err != nil {
			t.Fatal(err)
		}
		if c := w.Counts(); st != StepMatch || w.SrcNext() != 106 || w.DstNext() != 6 || c.Matched != 1 || c.Foreign != 0 {
			t.Errorf("log start inside the run's last batch (producer runs %v): %v, walk at %d/%d with %+v; want a match, 106/6", byPID, st, w.SrcNext(), w.DstNext(), c)
		}
	}
	// Without Lost the source did not lose the run's first parts: a
	// later part alone is not the destination batch's.
	w = NewWalker(transform.NewPSM(transform.PSMConfig{}), walkSource, transform.NewReencoder(), 102, 0)
	w.ProducerRuns()
	h1, _ := transform.ParseHeader(one[1])
	if st, err := w.Compare(one[1], h1, h1.BaseOffset, joined(one, 10), clock()); err != nil || st == StepPart || st == StepMatch {
		t.Errorf("a later part without Lost: %v, %v; want it not placed", st, err)
	}

	// A sequence gap inside the run (the source producer's batch 12 is
	// missing, the next says 14): not placed.
	gap := build([]int64{5, 5, 5}, []int32{10, 13, 14}, 2, 1, 3)
	if steps, _ := walk(true, gap, dst); fmt.Sprint(steps) != fmt.Sprint([]Step{StepPart, StepForeign}) {
		t.Errorf("a sequence gap inside the run: steps %v, want [part foreign]", steps)
	}
}
