package twin

import (
	"fmt"
	"slices"
	"time"

	"github.com/seed83556561/mirrord/transform"
)

// Reconciliation (DESIGN §6) is the agent's "truncation": after a restart,
// or when a partition joins a session, the destination may hold batches past
// the partition's checkpoint that an earlier session appended. A Walker
// takes the destination tail and the source from the checkpoint in step,
// decides each source batch exactly as the pipeline would (Decide, with the
// producer state saved with the checkpoint restored into its PSM), and
// matches: a destination batch that is the batch the link appended for the
// next source batch (Same: its twin, or the same batch after the source's
// cleaner cut records out of it or its log start moved into it) advances
// both sides; a source batch the pipeline skips (empty, duplicate)
// advances the source only; anything else at the destination is foreign. The source position reached is where mirroring
// resumes (I3). Offset translation walks the same way from a checkpoint.
//
// The walker is pure: its caller feeds it batches and reads its positions.

// Step says what one comparison concluded.
type Step uint8

const (
	// StepMatch: the destination batch is the forwarded source batch; both
	// sides advance.
	StepMatch Step = iota
	// StepForeign: the destination batch is not the next forwarded one;
	// the destination advances and the same source batch is compared with
	// the next destination batch.
	StepForeign
	// StepSkip: the pipeline never appends this source batch (no records
	// to forward, a duplicate, a batch that started at the destination or
	// an unattributed one the link skips); the source advances.
	StepSkip
	// StepEmptied: the destination batch is the mirror of a source batch
	// the cleaner emptied since (the walk skipped it): the link's own;
	// the destination advances and the same source batch is compared with
	// the next destination batch.
	StepEmptied
	// StepPassed: the destination batch mirrors records the source no
	// longer holds (Walker.Lost): the destination advances and the same
	// source batch is compared with the next destination batch.
	StepPassed
	// StepDeleted: the destination deleted records from the walk's
	// start (Walker.Hole) and no batch matched yet: the source batch is
	// taken for one whose mirror the destination deleted, committed to
	// the producer state as the pipeline did when it appended it; the
	// source advances.
	StepDeleted
	// StepStop: this source batch needs a collision salt that was never
	// committed (salts are committed, with a checkpoint, before the batch
	// they concern is appended), so neither it nor anything after it was
	// appended. The destination batch and every one after it are foreign.
	StepStop
	// StepPart: the source batch is the next part of a run the link
	// appended as one destination batch (Walker.Runs), which holds more
	// records after it: the source advances, and the next source batch
	// is compared with the same destination batch, from RunAt on. The
	// run's last part is a StepMatch.
	StepPart
)

var stepNames = [...]string{"match", "foreign", "skip", "emptied", "passed", "deleted", "stop", "part"}

func (s Step) String() string { return stepNames[s] }

// Walker reconciles one destination partition.
type Walker struct {
	psm   *transform.PSM
	src   Source
	reenc *transform.Reencoder

	srcNext int64 // source offset after the last matched or skipped batch
	dstNext int64 // destination offset after the last batch examined
	counts  Counts
	stopped bool // a needed salt was never committed: the rest is foreign
	// emptied are the identities of the source batches the cleaner
	// emptied since the last match, in source order (at most
	// maxEmptied), so that their mirrors, if the link appended them
	// before, are counted as the link's, not as foreign.
	emptied []identity
	// lost: the source deleted records from the walk's position on
	// (Lost), and no match confirmed since that the destination batches
	// met meanwhile (lostDst, with lostRecords records) mirror them.
	lost        bool
	lostDst     int
	lostRecords int64
	// hole: the destination deleted records from the walk's start and
	// nothing matched since (Hole).
	hole bool
	// gaps: an offset gap before a destination batch opens a hole
	// (HoleAtGaps).
	gaps bool
	// runs: the destination batches may hold runs of source batches
	// (Runs); run is the one the walk is inside (nil: none), runAt the
	// records of it matched so far, runNext the source offset after its
	// last part matched.
	runs    bool
	byPID   bool // ProducerRuns: a run is one producer's batches
	run     *Run
	runAt   int
	runNext int64
}

// Counts are what a walk found.
type Counts struct {
	Matched int // destination batches recognised as the link's own
	// Changed counts the matched batches that the source log changed
	// since they were mirrored (Same: Whole or Cut).
	Changed int
	// Passed counts the destination batches that mirror records the
	// source deleted since (Lost), confirmed by a match after them.
	Passed  int
	Foreign int // destination batches the link did not write
	Skipped int // source batches the pipeline skips
	// Home and Unattributed count the skipped source batches that
	// started at the destination, and those without a producer ID the
	// link's policy skips (Decide's SkipHome, SkipUnattributed);
	// HomeRecords and UnattributedRecords their records.
	Home, Unattributed               int
	HomeRecords, UnattributedRecords int64
	// Deleted counts the source batches taken for batches the link
	// appended and the destination deleted since (Hole), confirmed by a
	// match after them; DeletedRecords their records.
	Deleted        int
	DeletedRecords int64
}

// maxEmptied bounds the emptied source batches a walk remembers between
// two matches: 16 bytes each.
const maxEmptied = 4096

// identity is what tells a producer's batch at the destination: the mapped
// producer ID, epoch, base sequence and last offset delta.
type identity struct {
	pid   int64
	epoch int16
	seq   int32
	lod   int32
}

// NewWalker starts a walk at the pair (srcNext, dstNext) with the producer
// state psm (restored from the checkpoint), which the walk commits to as
// the pipeline would.
func NewWalker(psm *transform.PSM, src Source, reenc *transform.Reencoder, srcNext, dstNext int64) *Walker {
	return &Walker{psm: psm, src: src, reenc: reenc, srcNext: srcNext, dstNext: dstNext}
}

// SrcNext is the source offset after the last batch matched or skipped:
// where mirroring resumes.
func (w *Walker) SrcNext() int64 { return w.srcNext }

// DstNext is the destination offset after the last batch examined.
func (w *Walker) DstNext() int64 { return w.dstNext }

// Counts returns what the walk found so far.
func (w *Walker) Counts() Counts { return w.counts }

// Stopped reports whether the walk met a batch whose salt was never
// committed: every destination batch from there on is foreign.
func (w *Walker) Stopped() bool { return w.stopped }

// Pass moves the source side past end: the source holds nothing the
// pipeline forwards below it (control batches, aborted transactions).
func (w *Walker) Pass(end int64) { w.srcNext = max(w.srcNext, end) }

// Lost moves the source side past end: the source no longer holds its
// offsets from the walk's position up to end (retention, DeleteRecords, a
// cleaner that moved the log start), and the link may have mirrored them
// before. The destination batches met until the next match are taken for
// their mirrors (StepPassed): the link appends in source order, so a match
// after them confirms it (Counts.Passed); LostOpen reports those no match
// confirmed. A source batch may then also be a later part of a run the
// link appended as one destination batch (Runs, ProducerRuns), whose first
// parts the source lost: the run's records before it are their mirrors.
func (w *Walker) Lost(end int64) {
	w.Pass(end)
	w.lost = true
}

// LostOpen reports the destination batches (and their records) met since
// records were lost (Lost) that no match confirmed as their mirrors: what
// the link may have appended of them before the source deleted them, or
// foreign batches. ok is false when no such stretch is open.
func (w *Walker) LostOpen() (batches int, records int64, ok bool) {
	return w.lostDst, w.lostRecords, w.lost
}

// Hole tells the walk that the destination deleted records from the
// walk's destination position on (DeleteRecords, retention): the link
// appended batches there, for source batches from the walk's source
// position, that the destination no longer holds. Until a match, a source
// batch the pipeline forwards whose mirror is not the next destination
// batch is taken for one of those (StepDeleted): the link appends in source
// order, so the first destination batch the destination still holds
// mirrors a source batch at or after the walk's position, or is foreign.
// HoleOpen reports a hole no match closed.
func (w *Walker) Hole() { w.hole = true }

// HoleAtGaps tells the walk that it is handed every batch of the
// destination from its start on (reconciliation's tail reads, markers and
// aborted data included), so that offsets between two batches, or between
// its start and the first, are records the destination removed: its
// cleaner removed batches it emptied (a compacted topic), or DeleteRecords
// or retention moved its log start. A hole (Hole) then opens at each gap.
// A walk over a filtered read (translation's read_committed reads skip
// aborted data and markers) must not be told so.
func (w *Walker) HoleAtGaps() { w.gaps = true }

// Runs tells the walk that a destination batch may hold a run of source
// batches (transactional delivery's coalescing, issue 23; ProducerRuns for
// preserve delivery's): consecutive source batches, each dense and whole,
// with contiguous offsets, appended as one batch (transform.Merge). A source batch that is the first records
// of a destination batch with more records than its offsets is then the
// run's first part (StepPart), and each next source batch must be the next
// records of that batch, its base offset the previous part's next offset,
// until the last part ends it (StepMatch). A destination batch whose
// records stop being the next source batch's is not a run the link
// appended from the walk's position (StepForeign): the walk cannot place
// it. Without Runs, such a batch is compared as a whole, as before
// coalescing.
func (w *Walker) Runs() { w.runs = true }

// ProducerRuns is Runs for preserve delivery's coalescing: a run is a
// producer's consecutive batches, appended as the one batch that producer
// would have sent with a longer linger (the mapped producer ID, the
// epoch and the first batch's base sequence). Each part must then also be
// that producer's next records: its mapped producer ID and epoch the
// destination batch's, its base sequence the batch's base sequence plus
// the records before it in the run. Batches without a producer ID never
// form a run.
func (w *Walker) ProducerRuns() { w.runs, w.byPID = true, true }

// sameProducer reports whether source batch h, decided d, may be the part
// of destination batch dh that begins at record index at, by producer
// identity (ProducerRuns; always true under Runs alone).
func (w *Walker) sameProducer(dh transform.Header, d Decision, h transform.Header, at int) bool {
	if !w.byPID {
		return true
	}
	return d.PSM.Mapped != -1 && dh.ProducerID == d.PSM.Mapped && dh.ProducerEpoch == h.ProducerEpoch &&
		h.BaseSequence >= 0 && dh.BaseSequence >= 0 && int64(dh.BaseSequence)+int64(at) == int64(h.BaseSequence)
}

// RunAt is the index of the destination batch's record the next source
// batch is compared with: 0 unless the walk is inside a run (StepPart).
func (w *Walker) RunAt() int { return w.runAt }

// HoleOpen reports whether the walk was told of a hole (Hole) and nothing
// matched since: the source batches it skipped are then only presumed to
// be mirrors the destination deleted. A caller whose source ran out with a
// hole open knows the next destination batch matches no source batch from
// the walk's start on: it is foreign, and the walk must start again after
// it (the producer state and the source position are the presumption's).
func (w *Walker) HoleOpen() bool { return w.hole }

// Compare checks destination batch dst against the source batch raw (as
// fetched and filtered, with header h, fetched from position from). Neither
// is modified; after StepForeign the same source batch is compared with the
// next destination batch. now is the time PSM commits record.
func (w *Walker) Compare(raw []byte, h transform.Header, from int64, dst []byte, now time.Time) (Step, error) {
	dh, err := transform.ParseHeader(dst)
	if err != nil {
		return 0, fmt.Errorf("destination batch at offset %d: %w", w.dstNext, err)
	}
	if w.stopped {
		w.foreignBatch(dh)
		return StepStop, nil
	}
	if w.run != nil {
		if dh.BaseOffset != w.run.h.BaseOffset {
			return 0, fmt.Errorf("destination batch at offset %d compared inside the run at offset %d", dh.BaseOffset, w.run.h.BaseOffset)
		}
		return w.continueRun(raw, h, from, now)
	}
	if w.gaps && dh.BaseOffset > w.dstNext {
		// Offsets the destination no longer holds: its cleaner removed
		// batches it had emptied (a compacted topic), or DeleteRecords
		// or retention moved its log start. The link appended batches
		// there, so a hole opens (Hole) until the next match.
		w.hole = true
	}
	same, d, err := Same(w.psm, w.src, w.reenc, raw, h, from, dst)
	if err != nil {
		return 0, err
	}
	if w.runs && d.Verdict == Forward && same != Twin && same != Whole && int64(dh.NumRecords) > int64(h.LastOffsetDelta)+1 {
		// More records than the source batch has offsets: not its
		// mirror alone (but after kfake's cleaner shortened the
		// batch's range), whatever Same's cut found in it by content.
		// It is the first part of a run when its first records are
		// the batch's. A batch the source's cleaner cut since, its
		// records at their offset deltas, stays what Same said (a
		// mirror kfake's cleaner shortened, or a run's first part:
		// either way its records are placed by their deltas).
		run, err := NewRun(w.reenc, dst)
		if err != nil {
			return 0, err
		}
		part, err := NewPart(w.reenc, raw, h)
		if err != nil {
			return 0, err
		}
		// Same's decision for a batch it took for cut spans the
		// destination batch's sequence range; a run's first part is
		// committed as the batch alone, as the pipeline decided it.
		alone, err := Decide(w.psm, w.src, w.reenc, nil, raw, h, from, true)
		if err != nil {
			return 0, err
		}
		ok := alone.Verdict == Forward && w.sameProducer(dh, alone, h, 0) && run.Holds(part, from, 0)
		if !ok && from > h.BaseOffset {
			// The source's log start moved into the batch after the
			// link joined it whole (DeleteRecords, retention): a run's
			// first part taken whole, as Same's Whole is for a batch
			// alone.
			whole, err := Decide(w.psm, w.src, w.reenc, nil, raw, h, h.BaseOffset, true)
			if err != nil {
				return 0, err
			}
			if whole.Verdict == Forward && w.sameProducer(dh, whole, h, 0) && run.Holds(part, h.BaseOffset, 0) {
				ok, alone = true, whole
			}
		}
		at := 0
		if !ok && w.lost && h.Dense() {
			// The source lost records from the walk's position on
			// (Lost): its log start moved past a run's first parts
			// after the link appended the run (retention deletes
			// whole segments, DeleteRecords). The batch may be a
			// later part: the records before it mirror records the
			// source lost.
			if at, alone, err = w.laterPart(run, part, raw, h, dh); err != nil {
				return 0, err
			}
			ok = at > 0
		}
		switch {
		case ok && h.Dense() && at+int(h.LastOffsetDelta)+1 == run.Len():
			// The run's last part: the lost records before it, and
			// it, are all the destination batch holds.
			w.confirmed()
			w.psm.Commit(alone.PSM, now)
			w.srcNext = h.NextOffset()
			w.dstNext = dh.NextOffset()
			w.counts.Matched++
			return StepMatch, nil
		case ok && h.Dense():
			w.confirmed()
			w.psm.Commit(alone.PSM, now)
			w.srcNext = h.NextOffset()
			w.run, w.runAt, w.runNext = run, at+int(h.LastOffsetDelta)+1, h.NextOffset()
			return StepPart, nil
		case !ok && (h.Dense() || dh.FirstTimestamp != h.FirstTimestamp):
			// Not where the batch's records would be in a run's
			// first part, nor a mirror of it alone that kfake's
			// cleaner shortened (which begins at its first
			// timestamp): Same's cut found its records inside
			// another batch.
			same = NotSame
		}
	}
	if same != NotSame {
		w.confirmed()
		w.psm.Commit(d.PSM, now)
		w.srcNext = h.NextOffset()
		w.dstNext = dh.NextOffset()
		w.counts.Matched++
		if same != Twin {
			w.counts.Changed++
		}
		return StepMatch, nil
	}
	switch d.Verdict {
	case SkipEmpty:
		if h.NumRecords == 0 && h.ProducerID >= 0 && len(w.emptied) < maxEmptied {
			if pd := w.psm.Decide(transform.InfoOf(h, w.src.Cluster, w.src.Region)); pd.Kind != transform.KindCollision {
				w.emptied = append(w.emptied, identity{pid: pd.Mapped, epoch: h.ProducerEpoch, seq: h.BaseSequence, lod: h.LastOffsetDelta})
			}
		}
		w.srcNext = max(w.srcNext, h.NextOffset())
		w.counts.Skipped++
		return StepSkip, nil
	case SkipDuplicate:
		w.psm.Commit(d.PSM, now)
		w.srcNext = h.NextOffset()
		w.counts.Skipped++
		return StepSkip, nil
	case SkipHome, SkipUnattributed:
		// Never appended: the batch started at the destination, or
		// carries no producer ID and the link skips those.
		w.srcNext = max(w.srcNext, h.NextOffset())
		w.counts.Skipped++
		if d.Verdict == SkipHome {
			w.counts.Home++
			w.counts.HomeRecords += int64(h.NumRecords)
		} else {
			w.counts.Unattributed++
			w.counts.UnattributedRecords += int64(h.NumRecords)
		}
		return StepSkip, nil
	case NeedSalt:
		w.stopped = true
		w.foreignBatch(dh)
		return StepStop, nil
	}
	if i := slices.Index(w.emptied, identity{pid: dh.ProducerID, epoch: dh.ProducerEpoch, seq: dh.BaseSequence, lod: dh.LastOffsetDelta}); i >= 0 &&
		int64(dh.NumRecords) == int64(dh.LastOffsetDelta)+1 {
		// The mirror of a batch the cleaner emptied since: the
		// link's own; the source is already past it.
		w.emptied = w.emptied[i+1:]
		w.dstNext = dh.NextOffset()
		w.counts.Matched++
		w.counts.Changed++
		return StepEmptied, nil
	}
	if w.hole {
		w.psm.Commit(d.PSM, now)
		w.srcNext = h.NextOffset()
		w.counts.Deleted++
		w.counts.DeletedRecords += int64(h.NumRecords)
		return StepDeleted, nil
	}
	if w.lost {
		w.passBatch(dh)
		return StepPassed, nil
	}
	w.foreignBatch(dh)
	return StepForeign, nil
}

// confirmed is what a match tells the walk: the source batches the cleaner
// emptied and the records either side deleted before it are accounted for.
func (w *Walker) confirmed() {
	w.emptied = w.emptied[:0]
	w.hole = false
	if w.lost {
		w.counts.Passed += w.lostDst
		w.lost, w.lostDst, w.lostRecords = false, 0, 0
	}
}

// laterPart returns the index of the run's record at which source batch
// raw begins as a part other than the first, and its decision taken
// whole, or 0 when it is none: by its producer's sequence (ProducerRuns),
// or by its records (Runs), where they must lie in one place only (copies
// with the same records and create times, a plain producer's retries,
// cannot be told apart).
func (w *Walker) laterPart(run *Run, part *Part, raw []byte, h, dh transform.Header) (int, Decision, error) {
	// A part is taken whole: fetched from inside (the log start moved
	// into it), it is what the link appended from its base offset.
	d, err := Decide(w.psm, w.src, w.reenc, nil, raw, h, h.BaseOffset, true)
	if err != nil || d.Verdict != Forward {
		return 0, Decision{}, err
	}
	at := -1
	if w.byPID {
		if a := int64(h.BaseSequence) - int64(dh.BaseSequence); h.BaseSequence >= 0 && dh.BaseSequence >= 0 && a > 0 && a < int64(run.Len()) &&
			w.sameProducer(dh, d, h, int(a)) && run.Holds(part, h.BaseOffset, int(a)) {
			at = int(a)
		}
	} else if at = run.Find(part, h.BaseOffset, 1); at > 0 && run.Find(part, h.BaseOffset, at+1) >= 0 {
		at = -1
	}
	if at <= 0 {
		return 0, Decision{}, nil
	}
	return at, d, nil
}

// continueRun compares source batch raw with the records of the run the
// walk is inside, from runAt on (Runs).
func (w *Walker) continueRun(raw []byte, h transform.Header, from int64, now time.Time) (Step, error) {
	d, err := Decide(w.psm, w.src, w.reenc, nil, raw, h, from, true)
	if err != nil {
		return 0, err
	}
	switch d.Verdict {
	case SkipEmpty, SkipHome, SkipUnattributed:
		// Never appended, so no part of the run; a batch after it
		// is then not contiguous with the run's last part.
		w.srcNext = max(w.srcNext, h.NextOffset())
		w.counts.Skipped++
		return StepSkip, nil
	case Forward:
		if h.BaseOffset == w.runNext && h.Dense() {
			part, err := NewPart(w.reenc, raw, h)
			if err != nil {
				return 0, err
			}
			if w.sameProducer(w.run.h, d, h, w.runAt) && w.run.Holds(part, from, w.runAt) {
				w.psm.Commit(d.PSM, now)
				w.srcNext = h.NextOffset()
				w.runAt += int(h.LastOffsetDelta) + 1
				w.runNext = h.NextOffset()
				if w.runAt < w.run.Len() {
					return StepPart, nil
				}
				w.dstNext = w.run.h.NextOffset()
				w.run, w.runAt = nil, 0
				w.counts.Matched++
				return StepMatch, nil
			}
		}
	}
	// A duplicate, a batch that needs a salt, or one that is not the
	// run's next records: the destination batch's records from runAt on
	// are not what the link appended from here, and the walk cannot
	// place them.
	w.foreignBatch(w.run.h)
	w.run, w.runAt = nil, 0
	return StepForeign, nil
}

// passBatch takes dh for the mirror of records the source lost.
func (w *Walker) passBatch(dh transform.Header) {
	w.dstNext = dh.NextOffset()
	w.lostDst++
	w.lostRecords += int64(dh.NumRecords)
}

// ForeignRest marks a destination batch foreign when the source has nothing
// left to compare it with.
func (w *Walker) ForeignRest(dst []byte) error {
	dh, err := transform.ParseHeader(dst)
	if err != nil {
		return fmt.Errorf("destination batch at offset %d: %w", w.dstNext, err)
	}
	w.run, w.runAt = nil, 0 // a run the source ends inside is not the link's
	if w.lost {
		w.passBatch(dh)
		return nil
	}
	w.foreignBatch(dh)
	return nil
}

func (w *Walker) foreignBatch(dh transform.Header) {
	w.dstNext = dh.NextOffset()
	w.counts.Foreign++
}
