package twin

import (
	"fmt"
	"testing"

	"github.com/seed83556561/mirrord/internal/testkit/batchtest"
	"github.com/seed83556561/mirrord/transform"
)

// recs are n records with distinct keys and values, timestamps 0..n-1 ms
// after the batch's first timestamp.
func recs(n int) []batchtest.Record {
	out := make([]batchtest.Record, n)
	for i := range out {
		out[i] = batchtest.Record{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i), TimestampDelta: int64(i), OffsetDelta: -1}
	}
	return out
}

// keep returns the records of rs at the given indexes, each with its
// original offset delta: what a cleaner leaves of them.
func keep(rs []batchtest.Record, idx ...int) []batchtest.Record {
	var out []batchtest.Record
	for _, i := range idx {
		r := rs[i]
		r.OffsetDelta = int32(i)
		out = append(out, r)
	}
	return out
}

// atDelta returns r with offset delta d.
func atDelta(r batchtest.Record, d int32) batchtest.Record {
	r.OffsetDelta = d
	return r
}

// Same recognises the batch the link appended for a source batch also when
// the source log changed after it was mirrored, and nothing else: guards
// reconciliation and translation against calling the link's own batch
// foreign (and appending it again) after compaction or a moved log start
// (issue 21 cases 2 and 6), and against taking another batch for it.
func TestSame(t *testing.T) {
	const pid, base = 3, 100
	m := transform.MapPID(pid, 42)
	rs := recs(6)
	spec := func(s batchtest.Spec) []byte {
		if s.BaseOffset == 0 {
			s.BaseOffset = base
		}
		if s.PID == 0 {
			s.PID = pid
		}
		s.FirstTimestamp = 1_700_000_000_000
		return batchtest.Build(s)
	}
	whole := spec(batchtest.Spec{Codec: 3, Records: rs})
	dense := appended(whole, m, 50) // what the link appended for it

	kafkaCut := spec(batchtest.Spec{Codec: 3, LastOffsetDelta: 5, Records: keep(rs, 1, 3, 4)}) // Kafka's cleaner: same range and codec
	kfakeCut := spec(batchtest.Spec{Records: keep(rs, 0, 2)})                                  // kfake: uncompressed, the range shrunk
	lastCut := spec(batchtest.Spec{Codec: 3, LastOffsetDelta: 5, Records: keep(rs, 5)})
	emptied := spec(batchtest.Spec{Codec: 3, LastOffsetDelta: 5}) // Kafka keeps a producer's last batch, empty
	changed := append([]batchtest.Record(nil), keep(rs, 1, 3)...)
	changed[1].Value = []byte("another value")
	changedCut := spec(batchtest.Spec{Codec: 3, LastOffsetDelta: 5, Records: changed})
	otherSeq := spec(batchtest.Spec{Codec: 3, BaseSequence: 6, Records: rs})
	otherPID := spec(batchtest.Spec{Codec: 3, PID: 4, LastOffsetDelta: 5, Records: keep(rs, 1, 3)})

	// A batch already cut when the link mirrored it is appended re-encoded
	// (dense, fewer records); cut again since, its records are still a
	// subsequence of the re-encoding.
	gappyAtMirror := spec(batchtest.Spec{Codec: 2, LastOffsetDelta: 5, Records: keep(rs, 0, 2, 3, 5)})
	reencoded := appended(gappyAtMirror, m, 70)
	cutAgain := spec(batchtest.Spec{Codec: 2, LastOffsetDelta: 5, Records: keep(rs, 2, 5)})
	cutOther := spec(batchtest.Spec{Codec: 2, LastOffsetDelta: 5, Records: keep(rs, 1, 5)}) // record 1 was not in it

	// Plain (PID -1) batches carry no identity but their records.
	plainWhole := spec(batchtest.Spec{PID: -1, Epoch: -1, BaseSequence: -1, Records: rs})
	plainDense := appended(plainWhole, -1, 90)
	plainCut := spec(batchtest.Spec{PID: -1, Epoch: -1, BaseSequence: -1, LastOffsetDelta: 5, Records: keep(rs, 2, 4)})
	plainEmptied := spec(batchtest.Spec{PID: -1, Epoch: -1, BaseSequence: -1, LastOffsetDelta: 5})

	for _, tc := range []struct {
		name string
		src  []byte
		from int64
		dst  []byte
		want Sameness
	}{
		{"unchanged", whole, base, dense, Twin},
		{"log start moved into it", whole, base + 3, dense, Whole},
		{"Kafka's cleaner cut it", kafkaCut, base, dense, Cut},
		{"kfake's cleaner cut it", kfakeCut, base, dense, Cut},
		{"only its last record left", lastCut, base, dense, Cut},
		{"cut and the log start moved into it", kafkaCut, base + 2, dense, Cut},
		{"emptied, with a producer ID: a later copy may be the one appended", emptied, base, dense, NotSame},
		{"a record's value differs", changedCut, base, dense, NotSame},
		{"another base sequence", otherSeq, base, dense, NotSame},
		{"another producer", otherPID, base, dense, NotSame},
		{"cut before and after mirroring", cutAgain, base, reencoded, Cut},
		{"a record the re-encoding never held", cutOther, base, reencoded, NotSame},
		{"plain, unchanged", plainWhole, base, plainDense, Twin},
		{"plain, cut", plainCut, base, plainDense, Cut},
		{"plain, emptied: nothing to tell it by", plainEmptied, base, plainDense, NotSame},
		{"plain batch against the idempotent one", plainWhole, base, dense, NotSame},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := clone(tc.src)
			psm := transform.NewPSM(transform.PSMConfig{})
			got, d, err := Same(psm, walkSource, transform.NewReencoder(), tc.src, mustHeader(t, tc.src), tc.from, tc.dst)
			if err != nil {
				t.Fatal(err)
			}
			if string(before) != string(tc.src) {
				t.Fatal("Same modified the source batch")
			}
			if got != tc.want {
				t.Fatalf("Same = %s, want %s", got, tc.want)
			}
			if got != NotSame && d.Verdict != Forward {
				t.Errorf("a recognised batch's decision is %s, want forward (its sequence range committed)", d.Verdict)
			}
		})
	}
}

// A batch the cleaner cut is committed to the producer state with the range
// the pipeline committed when it appended the batch whole, so that the
// producer's next batch follows it (no gap, no duplicate).
func TestSameCommitsTheWholeRange(t *testing.T) {
	rs := recs(6)
	first := batchtest.Build(batchtest.Spec{BaseOffset: 100, PID: 3, Records: rs})
	dst := appended(first, transform.MapPID(3, 42), 0)
	cut := batchtest.Build(batchtest.Spec{BaseOffset: 100, PID: 3, Records: keep(rs, 1)}) // kfake: the range shrunk to delta 1
	next := batchtest.Build(batchtest.Spec{BaseOffset: 106, PID: 3, BaseSequence: 6, Records: recs(2)})
	psm := transform.NewPSM(transform.PSMConfig{})
	got, d, err := Same(psm, walkSource, transform.NewReencoder(), cut, mustHeader(t, cut), 100, dst)
	if err != nil || got != Cut {
		t.Fatalf("Same = %s, %v; want cut", got, err)
	}
	psm.Commit(d.PSM, clock())
	if k := psm.Decide(transform.InfoOf(mustHeader(t, next), walkCluster, 42)).Kind; k != transform.KindAppend {
		t.Errorf("the producer's next batch is decided %s, want in sequence", k)
	}
}

func mustHeader(t *testing.T, b []byte) transform.Header {
	t.Helper()
	h, err := transform.ParseHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// Place gives the destination index of the first record at or after a
// source position in the batch the link appended, also after the source's
// cleaner cut records out of the batch, and says when that cannot be
// exact: guards offset translation against moving a consumer past records
// (issue 21 case 1).
func TestPlace(t *testing.T) {
	const base = 100
	rs := recs(6)
	build := func(s batchtest.Spec) []byte {
		s.BaseOffset, s.PID, s.FirstTimestamp = base, 3, 1_700_000_000_000
		return batchtest.Build(s)
	}
	m := transform.MapPID(3, 42)
	dense := appended(build(batchtest.Spec{Records: rs}), m, 0)
	kafkaCut := build(batchtest.Spec{LastOffsetDelta: 5, Records: keep(rs, 1, 3)})
	kfakeCut := build(batchtest.Spec{Records: keep(rs, 1, 3)}) // the range shrunk to delta 3
	gappyAtMirror := build(batchtest.Spec{LastOffsetDelta: 5, Records: keep(rs, 0, 2, 3, 5)})
	reencoded := appended(gappyAtMirror, m, 0) // 4 records from offsets 100, 102, 103, 105
	cutAgain := build(batchtest.Spec{LastOffsetDelta: 5, Records: keep(rs, 0, 5)})
	for _, tc := range []struct {
		name    string
		src     []byte
		from    int64
		dst     []byte
		p       int64
		want    int
		inexact bool
	}{
		{"dense, before the batch", kafkaCut, base, dense, 90, 0, false},
		{"dense, at a record cut since", kafkaCut, base, dense, 102, 2, false},
		{"dense, at a surviving record", kafkaCut, base, dense, 103, 3, false},
		{"dense, past the batch", kafkaCut, base, dense, 106, 6, false},
		{"kfake's shrunk range: positional by the aligned records", kfakeCut, base, dense, 104, 4, false},
		{"re-encoded, unchanged", gappyAtMirror, base, reencoded, 101, 1, false},
		{"re-encoded, at a gap it had when mirrored", gappyAtMirror, base, reencoded, 104, 3, false},
		{"re-encoded and cut again: right after a record it holds", cutAgain, base, reencoded, 101, 1, false},
		{"re-encoded and cut again: at the next record it holds", cutAgain, base, reencoded, 105, 3, false},
		{"re-encoded and cut again: between, unknown", cutAgain, base, reencoded, 103, 3, true},
		{"re-encoded and cut again: past it", cutAgain, base, reencoded, 106, 4, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, exact, err := Place(transform.NewReencoder(), tc.src, mustHeader(t, tc.src), tc.from, tc.dst, tc.p)
			if err != nil {
				t.Fatal(err)
			}
			if exact == tc.inexact || (exact && got != tc.want) {
				t.Errorf("Place(%d) = %d, exact %v; want %d, exact %v", tc.p, got, exact, tc.want, !tc.inexact)
			}
		})
	}
}

// A batch the link re-encoded (the source had compacted it) is recognised
// also when deciding it again compresses its records to other bytes (mirrord
// upgraded to another compressor version since, or the destination holds it
// recompressed at another level): Same compares its records, reconciliation
// matches it, and Place is exact. Settles the "likely" item of issue 21: it
// holds.
func TestSameAcrossCompressors(t *testing.T) {
	rs := recs(6)
	m := transform.MapPID(3, 42)
	gappy := batchtest.Build(batchtest.Spec{BaseOffset: 100, PID: 3, Codec: 1, FirstTimestamp: 1_700_000_000_000, LastOffsetDelta: 5, Records: keep(rs, 0, 2, 3, 5)})
	linkOut := appended(gappy, m, 70) // what this version appends for it
	dense := keep(rs, 0, 2, 3, 5)
	for i := range dense {
		dense[i].OffsetDelta = -1
	}
	other := batchtest.Build(batchtest.Spec{BaseOffset: 70, PID: m, Codec: 1, Level: 1, FirstTimestamp: 1_700_000_000_000, Records: dense})
	if Match(linkOut, other) {
		t.Fatal("both encodings are the same bytes: the test does not set up another compressor's output")
	}
	got, _, err := Same(transform.NewPSM(transform.PSMConfig{}), walkSource, transform.NewReencoder(), gappy, mustHeader(t, gappy), 100, other)
	if err != nil || got != Cut {
		t.Fatalf("Same = %s, %v; want cut (the same records)", got, err)
	}
	w := NewWalker(transform.NewPSM(transform.PSMConfig{}), walkSource, transform.NewReencoder(), 100, 70)
	if steps := walkAll(t, w, [][]byte{gappy}, [][]byte{other}); fmt.Sprint(steps) != "[match]" || w.SrcNext() != 106 || w.DstNext() != 74 {
		t.Errorf("walk: steps %v, resume %d/%d; want [match], 106/74", steps, w.SrcNext(), w.DstNext())
	}
	for p, want := range map[int64]int{100: 0, 101: 1, 103: 2, 104: 3, 105: 3, 106: 4} {
		i, exact, err := Place(transform.NewReencoder(), gappy, mustHeader(t, gappy), 100, other, p)
		if err != nil || !exact || i != want {
			t.Errorf("Place(%d) = %d, exact %v, %v; want %d, exact", p, i, exact, err, want)
		}
	}
}

// CutAtDestination recognises the mirror the destination's cleaner cut
// since the link appended it (a compacted destination topic): the same
// producer batch under the mapped producer ID, fewer records, each the
// source's record at its offset delta; and nothing else.
func TestCutAtDestination(t *testing.T) {
	c := newDestCuts()
	m, rs, src, at, changed, gappy, plain := c.m, c.rs, c.src, c.at, c.changed, c.gappy, c.plain
	gappier, reencodedCut := c.gappier, c.reencodedCut
	for _, tc := range []struct {
		name string
		src  []byte
		dst  []byte
		want bool
	}{
		{"Kafka's cleaner cut the mirror", src, at(batchtest.Spec{Codec: 3, LastOffsetDelta: 5, Records: keep(rs, 1, 3, 4)}), true},
		{"kfake's cleaner cut the mirror", src, at(batchtest.Spec{Records: keep(rs, 0, 2)}), true},
		{"only its last record left", src, at(batchtest.Spec{Codec: 3, LastOffsetDelta: 5, Records: keep(rs, 5)}), true},
		{"not cut: Same's twin", src, appended(src, m, 50), false},
		{"emptied", src, at(batchtest.Spec{Codec: 3, LastOffsetDelta: 5}), false},
		{"a record's value differs", src, at(batchtest.Spec{Codec: 3, LastOffsetDelta: 5, Records: changed}), false},
		{"a record at another offset delta", src, at(batchtest.Spec{Codec: 3, LastOffsetDelta: 5, Records: []batchtest.Record{func() batchtest.Record { r := rs[1]; r.OffsetDelta = 2; return r }()}}), false},
		{"another base sequence", src, at(batchtest.Spec{Codec: 3, BaseSequence: 6, LastOffsetDelta: 5, Records: keep(rs, 1, 3)}), false},
		{"another producer", src, at(batchtest.Spec{PID: transform.MapPID(4, 42), Codec: 3, LastOffsetDelta: 5, Records: keep(rs, 1, 3)}), false},
		{"re-encoded (the source batch had gaps when mirrored), then cut", gappy, at(batchtest.Spec{Codec: 3, LastOffsetDelta: 3, Records: reencodedCut}), true},
		{"re-encoded, a record at its source offset delta", gappy, at(batchtest.Spec{Codec: 3, LastOffsetDelta: 3, Records: keep(rs, 2)}), false},
		{"re-encoded, a record it never held", gappy, at(batchtest.Spec{Codec: 3, LastOffsetDelta: 3, Records: keep(rs, 1)}), false},
		{"re-encoded, cut at both sides since", gappier, at(batchtest.Spec{Codec: 3, LastOffsetDelta: 3, Records: reencodedCut}), false},
		{"a batch without a producer ID", plain, at(batchtest.Spec{PID: -1, Epoch: -1, BaseSequence: -1, LastOffsetDelta: 5, Records: keep(rs, 2)}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := clone(tc.src)
			got, err := CutAtDestination(transform.NewPSM(transform.PSMConfig{}), walkSource, transform.NewReencoder(), tc.src, mustHeader(t, tc.src), tc.dst)
			if err != nil {
				t.Fatal(err)
			}
			if string(before) != string(tc.src) {
				t.Fatal("CutAtDestination modified the source batch")
			}
			if got != tc.want {
				t.Fatalf("CutAtDestination = %v, want %v", got, tc.want)
			}
		})
	}
}

// Same recognises the mirror the destination's cleaner cut or emptied (a
// compacted destination topic) as the link's own batch, and nothing else:
// guards reconciliation after a crash against calling the crashed session's
// compacted tail foreign and appending its surviving records again.
func TestSameCutAtDestination(t *testing.T) {
	const base = destCutBase
	c := newDestCuts()
	m, rs, src, at, changed, gappy, plain := c.m, c.rs, c.src, c.at, c.changed, c.gappy, c.plain
	gappier, reencodedCut := c.gappier, c.reencodedCut
	for _, tc := range []struct {
		name string
		src  []byte
		from int64
		dst  []byte
		want Sameness
	}{
		{"Kafka's cleaner cut the mirror", src, base, at(batchtest.Spec{Codec: 3, LastOffsetDelta: 5, Records: keep(rs, 1, 3, 4)}), DestinationCut},
		{"kfake's cleaner cut the mirror", src, base, at(batchtest.Spec{Records: keep(rs, 0, 2)}), DestinationCut},
		{"only its last record left", src, base, at(batchtest.Spec{Codec: 3, LastOffsetDelta: 5, Records: keep(rs, 5)}), DestinationCut},
		{"emptied, its range kept (Kafka keeps a producer's last batch)", src, base, at(batchtest.Spec{Codec: 3, LastOffsetDelta: 5}), DestinationCut},
		{"emptied, its range shortened", src, base, at(batchtest.Spec{Codec: 3, LastOffsetDelta: 3}), NotSame},
		{"not cut: the twin", src, base, appended(src, m, 50), Twin},
		{"a range longer than the source batch's", src, base, at(batchtest.Spec{Codec: 3, LastOffsetDelta: 7, Records: keep(rs, 1)}), NotSame},
		{"a record's value differs", src, base, at(batchtest.Spec{Codec: 3, LastOffsetDelta: 5, Records: changed}), NotSame},
		{"a record at another offset delta", src, base, at(batchtest.Spec{Codec: 3, LastOffsetDelta: 5, Records: []batchtest.Record{func() batchtest.Record { r := rs[1]; r.OffsetDelta = 2; return r }()}}), NotSame},
		{"another base sequence", src, base, at(batchtest.Spec{Codec: 3, BaseSequence: 6, LastOffsetDelta: 5, Records: keep(rs, 1, 3)}), NotSame},
		{"another epoch", src, base, at(batchtest.Spec{Codec: 3, Epoch: 1, LastOffsetDelta: 5, Records: keep(rs, 1, 3)}), NotSame},
		{"another producer", src, base, at(batchtest.Spec{PID: transform.MapPID(4, 42), Codec: 3, LastOffsetDelta: 5, Records: keep(rs, 1, 3)}), NotSame},
		{"transactional at the destination only", src, base, at(batchtest.Spec{Codec: 3, Transactional: true, LastOffsetDelta: 5, Records: keep(rs, 1, 3)}), NotSame},
		{"mirrored from inside the batch", src, base + 2, at(batchtest.Spec{Codec: 3, LastOffsetDelta: 3, Records: keep(rs, 1)}), NotSame},
		{"re-encoded (the source batch had gaps when mirrored), then cut", gappy, base, at(batchtest.Spec{Codec: 3, LastOffsetDelta: 3, Records: reencodedCut}), DestinationCut},
		{"re-encoded, then emptied", gappy, base, at(batchtest.Spec{Codec: 3, LastOffsetDelta: 3}), DestinationCut},
		{"re-encoded, a range longer than the re-encoded batch's", gappy, base, at(batchtest.Spec{Codec: 3, LastOffsetDelta: 5, Records: reencodedCut}), NotSame},
		{"re-encoded, a record at its source offset delta", gappy, base, at(batchtest.Spec{Codec: 3, LastOffsetDelta: 3, Records: keep(rs, 2)}), NotSame},
		{"re-encoded, a record it never held", gappy, base, at(batchtest.Spec{Codec: 3, LastOffsetDelta: 3, Records: keep(rs, 1)}), NotSame},
		// Not recognised (a limit, docs/guarantees.md): what Decide makes
		// of the batch now is not what the link appended.
		{"re-encoded, cut at both sides since", gappier, base, at(batchtest.Spec{Codec: 3, LastOffsetDelta: 3, Records: reencodedCut}), NotSame},
		{"a batch without a producer ID, cut", plain, base, at(batchtest.Spec{PID: -1, Epoch: -1, BaseSequence: -1, LastOffsetDelta: 5, Records: keep(rs, 2)}), DestinationCut},
		{"a batch without a producer ID, emptied", plain, base, at(batchtest.Spec{PID: -1, Epoch: -1, BaseSequence: -1, LastOffsetDelta: 5}), NotSame},
		{"a batch without a producer ID, a record differs", plain, base, at(batchtest.Spec{PID: -1, Epoch: -1, BaseSequence: -1, LastOffsetDelta: 5, Records: changed}), NotSame},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := clone(tc.src)
			got, d, err := Same(transform.NewPSM(transform.PSMConfig{}), walkSource, transform.NewReencoder(), tc.src, mustHeader(t, tc.src), tc.from, tc.dst)
			if err != nil {
				t.Fatal(err)
			}
			if string(before) != string(tc.src) {
				t.Fatal("Same modified the source batch")
			}
			if got != tc.want {
				t.Fatalf("Same = %s, want %s", got, tc.want)
			}
			if got != NotSame && d.Verdict != Forward {
				t.Errorf("a recognised batch's decision is %s, want forward", d.Verdict)
			}
		})
	}
}

// destCutBase is the base offset of destCuts' source batches.
const destCutBase = 100

// destCuts are a source batch of 6 records with a producer ID (src), one
// the source's cleaner had left gaps in when it was mirrored (gappy), the
// same batch cut further since (gappier), one without a producer ID
// (plain), a maker of destination batches at offset 50 under src's mapped
// producer ID (at), and what the destination's cleaner left of gappy's
// re-encoded mirror (reencodedCut), for the tests of a mirror the
// destination's cleaner cut.
type destCuts struct {
	m                          int64
	rs, changed, reencodedCut  []batchtest.Record
	src, gappy, gappier, plain []byte
	at                         func(batchtest.Spec) []byte
}

func newDestCuts() destCuts {
	const pid = 3
	c := destCuts{m: transform.MapPID(pid, 42), rs: recs(6)}
	build := func(s batchtest.Spec) []byte {
		s.FirstTimestamp = 1_700_000_000_000
		return batchtest.Build(s)
	}
	c.src = build(batchtest.Spec{BaseOffset: destCutBase, PID: pid, Codec: 3, Records: c.rs})
	c.at = func(s batchtest.Spec) []byte {
		s.BaseOffset = 50
		if s.PID == 0 {
			s.PID = c.m
		}
		return build(s)
	}
	c.changed = keep(c.rs, 1, 3)
	c.changed[1].Value = []byte("another value")
	c.gappy = build(batchtest.Spec{BaseOffset: destCutBase, PID: pid, Codec: 3, LastOffsetDelta: 5, Records: keep(c.rs, 0, 2, 3, 5)})
	c.gappier = build(batchtest.Spec{BaseOffset: destCutBase, PID: pid, Codec: 3, LastOffsetDelta: 5, Records: keep(c.rs, 0, 5)})
	c.plain = build(batchtest.Spec{BaseOffset: destCutBase, PID: -1, Epoch: -1, BaseSequence: -1, Records: c.rs})
	// gappy re-encoded holds rs 0, 2, 3, 5 at deltas 0-3; the
	// destination's cleaner kept the second and the fourth.
	c.reencodedCut = []batchtest.Record{atDelta(c.rs[2], 1), atDelta(c.rs[5], 3)}
	return c
}
