package twin

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/seed83556561/mirrord/internal/testkit/batchtest"
	"github.com/seed83556561/mirrord/transform"
)

const walkCluster = "AAAAAAAAAAAAAAAAAAAAKg" // region 42

var walkSource = Source{Cluster: walkCluster, Region: 42}

func clock() time.Time { return time.Unix(1_700_000_000, 0) }

// appended is what the destination holds for a source batch: the pipeline's
// rewrite, then the broker's base offset.
func appended(src []byte, mapped int64, destOffset int64) []byte {
	b := append([]byte(nil), src...)
	h, _ := transform.ParseHeader(b)
	if !h.Dense() {
		out, _, err := transform.NewReencoder().Reencode(nil, b, mapped)
		if err != nil {
			panic(err)
		}
		b = out
	} else {
		transform.Rewrite(b, mapped)
	}
	binary.BigEndian.PutUint64(b, uint64(destOffset))
	return b
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }

// walkAll drives a walker the way the pipeline does: each destination batch
// is compared with source batches (fetched from the walk's start) until one
// matches, is foreign or the source runs out.
func walkAll(t *testing.T, w *Walker, src, dst [][]byte) []Step {
	t.Helper()
	var steps []Step
	si := 0
	from := w.SrcNext()
	for _, d := range dst {
		for {
			if si == len(src) {
				if err := w.ForeignRest(d); err != nil {
					t.Fatal(err)
				}
				steps = append(steps, StepForeign)
				break
			}
			before := clone(src[si])
			h, err := transform.ParseHeader(src[si])
			if err != nil {
				t.Fatal(err)
			}
			st, err := w.Compare(src[si], h, from, d, clock())
			if string(before) != string(src[si]) {
				t.Fatal("compare modified the source batch")
			}
			if err != nil {
				t.Fatal(err)
			}
			steps = append(steps, st)
			if st == StepSkip || st == StepMatch || st == StepDeleted {
				si++
			}
			if st != StepSkip && st != StepDeleted {
				break
			}
		}
	}
	return steps
}

// Guards reconciliation: which destination batches are recognised as the
// pipeline's own and where mirroring resumes, for the cases a restart meets.
func TestWalker(t *testing.T) {
	m := transform.MapPID(3, 42)
	s0 := batchtest.Simple(100, 3, 0, 0, 5)  // offsets 100-104
	s1 := batchtest.Simple(107, 3, 0, 5, 5)  // 107-111 (a control batch at 105-106 was filtered)
	s2 := batchtest.Simple(112, 3, 0, 10, 5) // 112-116
	foreign := batchtest.Simple(0, 77, 0, 0, 2)
	binary.BigEndian.PutUint64(foreign, 55)
	gappy := batchtest.Build(batchtest.Spec{BaseOffset: 117, PID: 3, BaseSequence: 15, Codec: 3, FirstTimestamp: 5, LastOffsetDelta: 4,
		Records: []batchtest.Record{{Key: []byte("a"), OffsetDelta: 0}, {Key: []byte("c"), OffsetDelta: 2}}})
	empty := batchtest.Build(batchtest.Spec{BaseOffset: 117, PID: 3, BaseSequence: 15, FirstTimestamp: 5})

	for _, tc := range []struct {
		name             string
		src, dst         [][]byte
		steps            []Step
		srcNext, dstNext int64
		foreign          int
	}{
		{
			name:    "tail fully ours",
			src:     [][]byte{s0, s1, s2},
			dst:     [][]byte{appended(s0, m, 50), appended(s1, m, 55)},
			steps:   []Step{StepMatch, StepMatch},
			srcNext: 112, dstNext: 60,
		},
		{
			name:    "foreign batch in between",
			src:     [][]byte{s0, s1, s2},
			dst:     [][]byte{appended(s0, m, 50), foreign, appended(s1, m, 57)},
			steps:   []Step{StepMatch, StepForeign, StepMatch},
			srcNext: 112, dstNext: 62, foreign: 1,
		},
		{
			name:    "destination holds more than the source has",
			src:     [][]byte{s0},
			dst:     [][]byte{appended(s0, m, 50), appended(s1, m, 55)},
			steps:   []Step{StepMatch, StepForeign},
			srcNext: 105, dstNext: 60, foreign: 1,
		},
		{
			name:    "same records under another PID are not ours",
			src:     [][]byte{s0},
			dst:     [][]byte{appended(s0, transform.MapPID(3, 43), 50)},
			steps:   []Step{StepForeign},
			srcNext: 100, dstNext: 55, foreign: 1,
		},
		{
			name:    "compacted source batch matches its re-encoding",
			src:     [][]byte{s2, gappy},
			dst:     [][]byte{appended(s2, m, 50), appended(gappy, m, 55)},
			steps:   []Step{StepMatch, StepMatch},
			srcNext: 122, dstNext: 57,
		},
		{
			name:    "batch without records is skipped",
			src:     [][]byte{empty, s2},
			dst:     [][]byte{appended(s2, m, 50)},
			steps:   []Step{StepSkip, StepMatch},
			srcNext: 117, dstNext: 55,
		},
		{
			name: "the mirror of a batch the cleaner emptied since is the link's",
			src:  [][]byte{batchtest.Build(batchtest.Spec{BaseOffset: 100, PID: 3, FirstTimestamp: 0, LastOffsetDelta: 4}), s1},
			dst:  [][]byte{appended(s0, m, 50), appended(s1, m, 55)},
			// s0 (offsets 100-104) is what was appended, emptied since.
			steps:   []Step{StepSkip, StepEmptied, StepMatch},
			srcNext: 112, dstNext: 60,
		},
		{
			name: "an emptied batch is not taken for a later one of the same identity",
			src: [][]byte{batchtest.Build(batchtest.Spec{BaseOffset: 100, PID: 3, BaseSequence: 5, LastOffsetDelta: 4}),
				batchtest.Simple(105, 3, 0, 5, 5)},
			dst:     [][]byte{appended(batchtest.Simple(105, 3, 0, 5, 5), m, 50)},
			steps:   []Step{StepSkip, StepMatch},
			srcNext: 110, dstNext: 55,
		},
		{
			name:    "duplicate source batch is skipped",
			src:     [][]byte{s0, batchtest.Simple(105, 3, 0, 0, 5), s1},
			dst:     [][]byte{appended(s0, m, 50), appended(s1, m, 55)},
			steps:   []Step{StepMatch, StepSkip, StepMatch},
			srcNext: 112, dstNext: 60,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := NewWalker(transform.NewPSM(transform.PSMConfig{}), walkSource, transform.NewReencoder(), 100, 50)
			steps := walkAll(t, w, tc.src, tc.dst)
			if fmt.Sprint(steps) != fmt.Sprint(tc.steps) {
				t.Errorf("steps %v, want %v", steps, tc.steps)
			}
			if w.SrcNext() != tc.srcNext || w.DstNext() != tc.dstNext || w.Counts().Foreign != tc.foreign {
				t.Errorf("srcNext %d dstNext %d foreign %d; want %d %d %d", w.SrcNext(), w.DstNext(), w.Counts().Foreign, tc.srcNext, tc.dstNext, tc.foreign)
			}
		})
	}
}

// Guards the salt rule during reconciliation: a replayed salt maps the
// origin as the crashed session did; a collision without a committed salt
// means the batch, and everything after it, was never appended.
func TestWalkerSalts(t *testing.T) {
	// PID 5 and 5+2^31 from one cluster clash after masking.
	a := batchtest.Simple(10, 5, 0, 0, 2)
	b := batchtest.Simple(12, 5+1<<31, 0, 0, 2)
	a2 := batchtest.Simple(14, 5, 0, 2, 2)

	t.Run("salt replayed", func(t *testing.T) {
		psm := transform.NewPSM(transform.PSMConfig{})
		psm.AddSalt(transform.Origin{Cluster: walkCluster, PID: 5 + 1<<31}, 9, clock())
		w := NewWalker(psm, walkSource, transform.NewReencoder(), 10, 0)
		dst := [][]byte{appended(a, transform.MapPID(5, 42), 0), appended(b, transform.MapPIDSalted(5, 42, 9), 2), appended(a2, transform.MapPID(5, 42), 4)}
		if steps := walkAll(t, w, [][]byte{a, b, a2}, dst); fmt.Sprint(steps) != "[match match match]" {
			t.Errorf("steps %v", steps)
		}
		if w.SrcNext() != 16 || w.DstNext() != 6 {
			t.Errorf("srcNext %d dstNext %d", w.SrcNext(), w.DstNext())
		}
	})
	t.Run("salt never committed", func(t *testing.T) {
		w := NewWalker(transform.NewPSM(transform.PSMConfig{Rand: func() int64 { return 1 }}), walkSource, transform.NewReencoder(), 10, 0)
		dst := [][]byte{appended(a, transform.MapPID(5, 42), 0), appended(a2, transform.MapPID(5, 42), 2)}
		if steps := walkAll(t, w, [][]byte{a, b, a2}, dst); fmt.Sprint(steps) != "[match stop]" {
			t.Errorf("steps %v", steps)
		}
		if w.SrcNext() != 12 || w.Counts().Foreign != 1 || !w.Stopped() {
			t.Errorf("srcNext %d foreign %d stopped %v; want 12, 1, true", w.SrcNext(), w.Counts().Foreign, w.Stopped())
		}
	})
}

// Guards a walk that starts inside a batch (a fresh partition whose source
// log start is mid-batch): the pipeline forwarded only the records from the
// start on, re-encoded, and the walker expects exactly that.
func TestWalkerStartsMidBatch(t *testing.T) {
	m := transform.MapPID(3, 42)
	s0 := batchtest.Simple(100, 3, 0, 0, 5) // 100-104
	s1 := batchtest.Simple(105, 3, 0, 5, 5)
	trimmed, _, err := transform.NewReencoder().ReencodeFrom(nil, clone(s0), m, 102)
	if err != nil {
		t.Fatal(err)
	}
	binary.BigEndian.PutUint64(trimmed, 0)
	w := NewWalker(transform.NewPSM(transform.PSMConfig{}), walkSource, transform.NewReencoder(), 102, 0)
	steps := walkAll(t, w, [][]byte{s0, s1}, [][]byte{trimmed, appended(s1, m, 3)})
	if fmt.Sprint(steps) != "[match match]" || w.SrcNext() != 110 || w.DstNext() != 8 {
		t.Errorf("steps %v srcNext %d dstNext %d; want two matches, 110, 8", steps, w.SrcNext(), w.DstNext())
	}
	// A walk from a later position skips batches that end before it.
	w = NewWalker(transform.NewPSM(transform.PSMConfig{}), walkSource, transform.NewReencoder(), 105, 0)
	if steps := walkAll(t, w, [][]byte{s0, s1}, [][]byte{appended(s1, m, 0)}); fmt.Sprint(steps) != "[skip match]" {
		t.Errorf("steps %v, want [skip match]", steps)
	}
}

// Guards I3 for a skipped duplicate (issue 10, case 1): a chain source holds
// a forwarded (negative-PID) batch twice; the pipeline appended the first,
// checkpointed, skipped the second as a duplicate and appended the next
// batch, then the agent died. Reconciliation from that checkpoint, with the
// producer state the checkpoint saved, skips the duplicate as the pipeline
// did and recognises the next batch. Without that state (the previous
// release) the duplicate looked new, the next batch was called foreign, and
// both were appended again.
func TestWalkerSkipsDuplicateAfterCheckpoint(t *testing.T) {
	const upstream = int64(-9223371946660462587) // a PID an upstream mirror mapped
	x := batchtest.Simple(100, upstream, 0, 0, 5)
	dup := batchtest.Simple(105, upstream, 0, 0, 5) // the same sequence range again
	y := batchtest.Simple(110, upstream, 0, 5, 5)

	// The pipeline's state at the checkpoint (after x): x's sequence.
	pipe := transform.NewPSM(transform.PSMConfig{})
	hx, _ := transform.ParseHeader(x)
	pipe.Commit(pipe.Decide(transform.InfoOf(hx, walkCluster, 42)), clock())
	hd, _ := transform.ParseHeader(dup)
	if pipe.Decide(transform.InfoOf(hd, walkCluster, 42)).Kind != transform.KindDuplicate {
		t.Fatal("the pipeline would not skip the second batch; the test does not set up the duplicate")
	}
	dst := [][]byte{appended(y, upstream, 60)}

	restored := transform.NewPSM(transform.PSMConfig{})
	restored.Restore(pipe.Snapshot())
	w := NewWalker(restored, walkSource, transform.NewReencoder(), 105, 60)
	if steps := walkAll(t, w, [][]byte{dup, y}, dst); fmt.Sprint(steps) != "[skip match]" || w.Counts().Foreign != 0 || w.SrcNext() != 115 || w.DstNext() != 65 {
		t.Errorf("with the saved producer state: steps %v, foreign %d, resume at %d/%d; want [skip match], 0, 115/65", steps, w.Counts().Foreign, w.SrcNext(), w.DstNext())
	}

	// What the previous release did: no state from before the checkpoint.
	w = NewWalker(transform.NewPSM(transform.PSMConfig{}), walkSource, transform.NewReencoder(), 105, 60)
	if steps := walkAll(t, w, [][]byte{dup, y}, dst); w.Counts().Foreign == 0 {
		t.Errorf("without the saved state the walk found no foreign batch (steps %v); the test no longer shows the failure it guards", steps)
	}
}

// Guards a walk over a destination that deleted records past the checkpoint
// (issue 21 case 4): the source batches before the one the first batch left
// mirrors are taken for mirrors the destination deleted, not appended
// again; with no source batch matching it, the hole stays open for the
// caller to start again.
func TestWalkerHole(t *testing.T) {
	m := transform.MapPID(3, 42)
	s0 := batchtest.Simple(100, 3, 0, 0, 5)
	s1 := batchtest.Simple(105, 3, 0, 5, 5)
	s2 := batchtest.Simple(110, 3, 0, 10, 5)
	foreign := batchtest.Simple(0, 77, 0, 0, 2)

	w := NewWalker(transform.NewPSM(transform.PSMConfig{}), walkSource, transform.NewReencoder(), 100, 60)
	w.Hole()
	steps := walkAll(t, w, [][]byte{s0, s1, s2}, [][]byte{appended(s1, m, 60), appended(s2, m, 65)})
	if fmt.Sprint(steps) != "[deleted match match]" || w.SrcNext() != 115 || w.DstNext() != 70 || w.HoleOpen() {
		t.Errorf("steps %v, resume %d/%d, hole open %v; want [deleted match match], 115/70, closed", steps, w.SrcNext(), w.DstNext(), w.HoleOpen())
	}
	if n := w.Counts(); n.Deleted != 1 || n.DeletedRecords != 5 || n.Matched != 2 || n.Foreign != 0 {
		t.Errorf("counts %+v; want 1 deleted batch of 5 records, 2 matched", n)
	}
	// After the first match, a batch that does not match is foreign again.
	w = NewWalker(transform.NewPSM(transform.PSMConfig{}), walkSource, transform.NewReencoder(), 100, 60)
	w.Hole()
	if steps := walkAll(t, w, [][]byte{s0, s1, s2}, [][]byte{appended(s0, m, 60), foreign, appended(s1, m, 67)}); fmt.Sprint(steps) != "[match foreign match]" {
		t.Errorf("steps %v, want [match foreign match]", steps)
	}
	// Nothing matches the first batch left: the hole stays open.
	w = NewWalker(transform.NewPSM(transform.PSMConfig{}), walkSource, transform.NewReencoder(), 100, 60)
	w.Hole()
	if steps := walkAll(t, w, [][]byte{s0, s1}, [][]byte{foreign}); fmt.Sprint(steps) != "[deleted deleted foreign]" || !w.HoleOpen() {
		t.Errorf("steps %v, hole open %v; want [deleted deleted foreign], open", steps, w.HoleOpen())
	}
}

// Guards origin during reconciliation (DESIGN §16): a source batch that
// started at the destination, and one without a producer ID under
// unattributed = "skip", were never appended; the walk moves past them
// and takes the destination's own batch, which the reverse link's copy
// came from, for one the link did not write.
func TestWalkerReturns(t *testing.T) {
	home, _ := transform.RegionOf("MkU3OEVBNTcwNTJENDM2Qg")
	m := transform.MapPID(3, 42)
	s0 := batchtest.Simple(100, 3, 0, 0, 5)                           // 100-104
	back := batchtest.Simple(105, transform.MapPID(9, home), 0, 0, 2) // 105-106: the reverse link's copy of a destination batch
	plain := batchtest.Simple(107, -1, -1, -1, 2)                     // 107-108
	s1 := batchtest.Simple(109, 3, 0, 5, 5)                           // 109-113
	local := batchtest.Simple(55, 9, 0, 0, 2)                         // the destination's own batch, at 55-56

	src := Source{Cluster: walkCluster, Region: 42, Returns: transform.Returns{Home: home, Check: true, SkipUnattributed: true}}
	w := NewWalker(transform.NewPSM(transform.PSMConfig{}), src, transform.NewReencoder(), 100, 50)
	steps := walkAll(t, w, [][]byte{s0, back, plain, s1}, [][]byte{appended(s0, m, 50), local, appended(s1, m, 57)})
	if want := []Step{StepMatch, StepSkip, StepSkip, StepForeign, StepMatch}; fmt.Sprint(steps) != fmt.Sprint(want) {
		t.Errorf("steps %v, want %v", steps, want)
	}
	if n := w.Counts(); w.SrcNext() != 114 || w.DstNext() != 62 || n.Foreign != 1 || n.Skipped != 2 ||
		n.Home != 1 || n.HomeRecords != 2 || n.Unattributed != 1 || n.UnattributedRecords != 2 {
		t.Errorf("srcNext %d dstNext %d counts %+v; want 114, 62, 1 foreign, 2 skipped: 1 home, 1 unattributed, 2 records each", w.SrcNext(), w.DstNext(), n)
	}

	// Decide says why; Same never takes a batch that is not sent for the
	// link's, even where the destination holds its twin (the policy
	// changed since it was appended).
	psm := transform.NewPSM(transform.PSMConfig{})
	for _, tc := range []struct {
		raw  []byte
		want Verdict
	}{{back, SkipHome}, {plain, SkipUnattributed}, {s0, Forward}} {
		h := mustHeader(t, tc.raw)
		d, err := Decide(psm, src, transform.NewReencoder(), nil, tc.raw, h, h.BaseOffset, true)
		if err != nil || d.Verdict != tc.want || d.Verdict.Skips() == (tc.want == Forward) {
			t.Errorf("batch at %d: verdict %v (skips %v), err %v; want %v", h.BaseOffset, d.Verdict, d.Verdict.Skips(), err, tc.want)
		}
		if tc.want == Forward {
			continue
		}
		same, _, err := Same(psm, src, transform.NewReencoder(), tc.raw, h, h.BaseOffset, appended(tc.raw, transform.MapPID(h.ProducerID, 42), 70))
		if err != nil || same != NotSame {
			t.Errorf("batch at %d: Same = %v, %v; want NotSame", h.BaseOffset, same, err)
		}
	}
}

// A compacted destination: its cleaner cut records out of the tail's
// batches and removed those it emptied, leaving offset gaps. The walk takes
// a cut batch for the link's own, and the source batches across a gap for
// the mirrors the cleaner removed until the next match; with no gap, a
// batch that does not match is foreign as before. Guards reconciliation
// after a crash against appending a compacted tail's records again.
func TestWalkerDestinationGap(t *testing.T) {
	m := transform.MapPID(3, 42)
	s0 := batchtest.Simple(100, 3, 0, 0, 5)
	s1 := batchtest.Simple(105, 3, 0, 5, 5)
	s2 := batchtest.Simple(110, 3, 0, 10, 5)
	s3 := batchtest.Simple(115, 3, 0, 15, 5)
	// s1's mirror, cut by the destination's cleaner: records 1 and 3 kept,
	// its offset range kept.
	cut := func() []byte {
		rs := make([]batchtest.Record, 0, 2)
		for _, i := range []int{1, 3} {
			rs = append(rs, batchtest.Record{Key: []byte{'k', byte('0' + i)}, Value: []byte{'v', byte('0' + i)}, TimestampDelta: int64(i), OffsetDelta: int32(i)})
		}
		return batchtest.Build(batchtest.Spec{BaseOffset: 65, PID: m, BaseSequence: 5, FirstTimestamp: 1_700_000_000_000, LastOffsetDelta: 4, Records: rs})
	}()
	// s2's mirror (70..74) removed: s3's mirror follows a gap.
	w := NewWalker(transform.NewPSM(transform.PSMConfig{}), walkSource, transform.NewReencoder(), 100, 60)
	w.HoleAtGaps()
	steps := walkAll(t, w, [][]byte{s0, s1, s2, s3}, [][]byte{appended(s0, m, 60), cut, appended(s3, m, 75)})
	if fmt.Sprint(steps) != "[match match deleted match]" || w.SrcNext() != 120 || w.DstNext() != 80 || w.HoleOpen() {
		t.Errorf("steps %v, resume %d/%d, hole open %v; want [match match deleted match], 120/80, closed", steps, w.SrcNext(), w.DstNext(), w.HoleOpen())
	}
	if n := w.Counts(); n.Matched != 3 || n.Changed != 1 || n.Deleted != 1 || n.Foreign != 0 {
		t.Errorf("counts %+v; want 3 matched (1 changed), 1 deleted, none foreign", n)
	}
	// No gap: a batch that matches nothing is foreign.
	foreign := batchtest.Simple(65, 77, 0, 0, 5)
	w = NewWalker(transform.NewPSM(transform.PSMConfig{}), walkSource, transform.NewReencoder(), 100, 60)
	w.HoleAtGaps()
	if steps := walkAll(t, w, [][]byte{s0, s1}, [][]byte{appended(s0, m, 60), foreign, appended(s1, m, 70)}); fmt.Sprint(steps) != "[match foreign match]" {
		t.Errorf("steps %v, want [match foreign match]", steps)
	}
	// A walk over a filtered read (not told HoleAtGaps) takes a gap for
	// nothing: s2's mirror is foreign there.
	w = NewWalker(transform.NewPSM(transform.PSMConfig{}), walkSource, transform.NewReencoder(), 100, 60)
	if steps := walkAll(t, w, [][]byte{s0, s1, s2, s3}, [][]byte{appended(s0, m, 60), cut, appended(s3, m, 75)}); fmt.Sprint(steps) != "[match match foreign]" {
		t.Errorf("steps %v, want [match match foreign]", steps)
	}
}
