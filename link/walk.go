package link

import (
	"bytes"
	"fmt"
	"time"

	"github.com/seed83556561/mirrord/transform"
)

// Reconciliation (DESIGN §6) is the agent's "truncation": after a restart, or
// after a Produce whose outcome is unknown, the destination may hold batches
// past the last checkpoint. The walker reads the destination tail and the
// source from the checkpoint in step, transforms each source batch exactly as
// the pipeline would, and matches: a destination batch equal to the next
// expected one advances both sides; anything else is foreign. The source
// position reached is where mirroring resumes.
//
// The walker is pure: the driver feeds it batches and reads its positions.

// walkStep says what one comparison concluded.
type walkStep uint8

const (
	// stepMatch: the destination batch is the transformed source batch;
	// both sides advance.
	stepMatch walkStep = iota
	// stepForeign: the destination batch is not the next expected one;
	// the destination advances, the source batch is compared again with
	// the next destination batch.
	stepForeign
	// stepSkip: the pipeline never appends this source batch (a
	// duplicate, or a batch without records); the source advances.
	stepSkip
	// stepStop: this source batch needs a collision salt that was never
	// committed, so neither it nor anything after it was appended (salts
	// are committed before the batch they concern). Every remaining
	// destination batch is foreign.
	stepStop
)

func (s walkStep) String() string {
	return [...]string{"match", "foreign", "skip", "stop"}[s]
}

// walker reconciles one destination partition.
type walker struct {
	psm     *transform.PSM
	cluster string // source cluster ID
	region  transform.Region
	reenc   *transform.Reencoder
	now     func() time.Time

	from    int64 // where the walk started at the source: records before it are not the link's
	srcNext int64 // source offset after the last matched or skipped batch
	dstNext int64 // destination offset after the last batch examined
	matched int
	foreign int
	stopped bool

	scratch []byte
}

func newWalker(psm *transform.PSM, cluster string, region transform.Region, reenc *transform.Reencoder, srcNext, dstNext int64, now func() time.Time) *walker {
	return &walker{psm: psm, cluster: cluster, region: region, reenc: reenc, now: now, from: srcNext, srcNext: srcNext, dstNext: dstNext}
}

// compare checks destination batch dst against source batch src (raw, as
// fetched and filtered). Neither is modified: after stepForeign the same src
// is compared with the next destination batch.
func (w *walker) compare(src, dst []byte) (walkStep, error) {
	dh, err := transform.ParseHeader(dst)
	if err != nil {
		return 0, fmt.Errorf("destination batch at offset %d: %w", w.dstNext, err)
	}
	if w.stopped {
		w.dstNext = dh.NextOffset()
		w.foreign++
		return stepForeign, nil
	}
	sh, err := transform.ParseHeader(src)
	if err != nil {
		return 0, fmt.Errorf("source batch at offset %d: %w", w.srcNext, err)
	}
	if sh.NumRecords == 0 || sh.NextOffset() <= w.from {
		w.srcNext = max(w.srcNext, sh.NextOffset())
		return stepSkip, nil
	}
	d := w.psm.Decide(transform.InfoOf(sh, w.cluster, w.region))
	switch d.Kind {
	case transform.KindDuplicate:
		w.psm.Commit(d, w.now())
		w.srcNext = sh.NextOffset()
		return stepSkip, nil
	case transform.KindCollision:
		w.stopped = true
		w.dstNext = dh.NextOffset()
		w.foreign++
		return stepStop, nil
	}
	want, err := w.expected(src, sh, d.Mapped)
	if err != nil {
		return 0, err
	}
	if !sameBatch(want, dst) {
		w.dstNext = dh.NextOffset()
		w.foreign++
		return stepForeign, nil
	}
	w.psm.Commit(d, w.now())
	w.srcNext = sh.NextOffset()
	w.dstNext = dh.NextOffset()
	w.matched++
	return stepMatch, nil
}

// expected is the batch the pipeline would have appended for src, built in
// the walker's scratch space.
func (w *walker) expected(src []byte, h transform.Header, mapped int64) ([]byte, error) {
	out, _, err := forward(w.reenc, w.scratch, src, h, mapped, w.from, true)
	if err != nil {
		return nil, fmt.Errorf("source batch at offset %d: %w", h.BaseOffset, err)
	}
	w.scratch = out
	return out, nil
}

// crcAndAfter is where the bytes that identify a batch's content start: the
// CRC, which covers everything after it. Base offset and partition leader
// epoch come before it; the destination broker assigns both.
const crcAndAfter = 17

// sameBatch reports whether the destination holds exactly the batch want:
// same length, same CRC and the same header fields it covers (attributes,
// last offset delta, timestamps, producer ID, epoch, base sequence, count).
// The CRC stands for the records.
func sameBatch(want, got []byte) bool {
	return len(want) == len(got) && len(got) >= transform.BatchHeaderSize &&
		bytes.Equal(want[crcAndAfter:transform.BatchHeaderSize], got[crcAndAfter:transform.BatchHeaderSize])
}

// foreignRest marks a destination batch foreign when the source has nothing
// left to compare it with.
func (w *walker) foreignRest(dst []byte) error {
	dh, err := transform.ParseHeader(dst)
	if err != nil {
		return fmt.Errorf("destination batch at offset %d: %w", w.dstNext, err)
	}
	w.dstNext = dh.NextOffset()
	w.foreign++
	return nil
}
