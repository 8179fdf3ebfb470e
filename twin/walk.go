package twin

import (
	"fmt"
	"time"

	"github.com/seed83556561/mirrord/transform"
)

// Reconciliation (DESIGN §6) is the agent's "truncation": after a restart,
// or when a partition joins a session, the destination may hold batches past
// the partition's checkpoint that an earlier session appended. A Walker
// takes the destination tail and the source from the checkpoint in step,
// decides each source batch exactly as the pipeline would (Decide, with the
// producer state saved with the checkpoint restored into its PSM), and
// matches: a destination batch that is the twin of the next forwarded
// source batch advances both sides; a source batch the pipeline skips
// (empty, duplicate) advances the source only; anything else at the
// destination is foreign. The source position reached is where mirroring
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
	// to forward, or a duplicate); the source advances.
	StepSkip
	// StepStop: this source batch needs a collision salt that was never
	// committed (salts are committed, with a checkpoint, before the batch
	// they concern is appended), so neither it nor anything after it was
	// appended. The destination batch and every one after it are foreign.
	StepStop
)

var stepNames = [...]string{"match", "foreign", "skip", "stop"}

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

	scratch []byte
}

// Counts are what a walk found.
type Counts struct {
	Matched int // destination batches recognised as the link's own
	Foreign int // destination batches the link did not write
	Skipped int // source batches the pipeline skips
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
	d, err := Decide(w.psm, w.src, w.reenc, w.scratch, raw, h, from, true)
	if err != nil {
		return 0, err
	}
	switch d.Verdict {
	case SkipEmpty:
		w.srcNext = max(w.srcNext, h.NextOffset())
		w.counts.Skipped++
		return StepSkip, nil
	case SkipDuplicate:
		w.psm.Commit(d.PSM, now)
		w.srcNext = h.NextOffset()
		w.counts.Skipped++
		return StepSkip, nil
	case NeedSalt:
		w.stopped = true
		w.foreignBatch(dh)
		return StepStop, nil
	}
	w.scratch = d.Out
	if !Match(d.Out, dst) {
		w.foreignBatch(dh)
		return StepForeign, nil
	}
	w.psm.Commit(d.PSM, now)
	w.srcNext = h.NextOffset()
	w.dstNext = dh.NextOffset()
	w.counts.Matched++
	return StepMatch, nil
}

// ForeignRest marks a destination batch foreign when the source has nothing
// left to compare it with.
func (w *Walker) ForeignRest(dst []byte) error {
	dh, err := transform.ParseHeader(dst)
	if err != nil {
		return fmt.Errorf("destination batch at offset %d: %w", w.dstNext, err)
	}
	w.foreignBatch(dh)
	return nil
}

func (w *Walker) foreignBatch(dh transform.Header) {
	w.dstNext = dh.NextOffset()
	w.counts.Foreign++
}
