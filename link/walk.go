package link

import (
	"fmt"
	"time"

	"github.com/seed83556561/mirrord/transform"
)

// Reconciliation (DESIGN §6) is the agent's "truncation": after a restart,
// or when a partition joins a session, the destination may hold batches past
// the partition's checkpoint that an earlier session appended. The walker
// takes the destination tail and the source from the checkpoint in step,
// decides each source batch exactly as the pipeline would (decide, with the
// producer state saved with the checkpoint restored into its PSM), and
// matches: a destination batch that is the twin of the next forwarded
// source batch advances both sides; a source batch the pipeline skips
// (empty, duplicate) advances the source only; anything else at the
// destination is foreign. The source position reached is where mirroring
// resumes (I3).
//
// The walker is pure: the pipeline feeds it batches and reads its positions.

// walkStep says what one comparison concluded.
type walkStep uint8

const (
	// stepMatch: the destination batch is the forwarded source batch; both
	// sides advance.
	stepMatch walkStep = iota
	// stepForeign: the destination batch is not the next forwarded one;
	// the destination advances and the same source batch is compared with
	// the next destination batch.
	stepForeign
	// stepSkip: the pipeline never appends this source batch (no records
	// to forward, or a duplicate); the source advances.
	stepSkip
	// stepStop: this source batch needs a collision salt that was never
	// committed (salts are committed, with a checkpoint, before the batch
	// they concern is appended), so neither it nor anything after it was
	// appended. The destination batch and every one after it are foreign.
	stepStop
)

var walkStepNames = [...]string{"match", "foreign", "skip", "stop"}

func (s walkStep) String() string { return walkStepNames[s] }

// walker reconciles one destination partition.
type walker struct {
	psm   *transform.PSM
	src   source
	reenc *transform.Reencoder

	srcNext int64 // source offset after the last matched or skipped batch
	dstNext int64 // destination offset after the last batch examined
	matched int   // destination batches recognised as the link's own
	foreign int   // destination batches the link did not write
	skipped int   // source batches the pipeline skips
	stopped bool  // a needed salt was never committed: the rest is foreign

	scratch []byte
}

func newWalker(psm *transform.PSM, src source, reenc *transform.Reencoder, srcNext, dstNext int64) *walker {
	return &walker{psm: psm, src: src, reenc: reenc, srcNext: srcNext, dstNext: dstNext}
}

// compare checks destination batch dst against the source batch raw (as
// fetched and filtered, with header h, fetched from position from). Neither
// is modified; after stepForeign the same source batch is compared with the
// next destination batch. now is the time PSM commits record.
func (w *walker) compare(raw []byte, h transform.Header, from int64, dst []byte, now time.Time) (walkStep, error) {
	dh, err := transform.ParseHeader(dst)
	if err != nil {
		return 0, fmt.Errorf("destination batch at offset %d: %w", w.dstNext, err)
	}
	if w.stopped {
		w.foreignBatch(dh)
		return stepStop, nil
	}
	d, err := decide(w.psm, w.src, w.reenc, w.scratch, raw, h, from, true)
	if err != nil {
		return 0, err
	}
	switch d.verdict {
	case skipEmpty:
		w.srcNext = max(w.srcNext, h.NextOffset())
		w.skipped++
		return stepSkip, nil
	case skipDuplicate:
		w.psm.Commit(d.psm, now)
		w.srcNext = h.NextOffset()
		w.skipped++
		return stepSkip, nil
	case needSalt:
		w.stopped = true
		w.foreignBatch(dh)
		return stepStop, nil
	}
	w.scratch = d.out
	if !twin(d.out, dst) {
		w.foreignBatch(dh)
		return stepForeign, nil
	}
	w.psm.Commit(d.psm, now)
	w.srcNext = h.NextOffset()
	w.dstNext = dh.NextOffset()
	w.matched++
	return stepMatch, nil
}

// foreignRest marks a destination batch foreign when the source has nothing
// left to compare it with.
func (w *walker) foreignRest(dst []byte) error {
	dh, err := transform.ParseHeader(dst)
	if err != nil {
		return fmt.Errorf("destination batch at offset %d: %w", w.dstNext, err)
	}
	w.foreignBatch(dh)
	return nil
}

func (w *walker) foreignBatch(dh transform.Header) {
	w.dstNext = dh.NextOffset()
	w.foreign++
}
