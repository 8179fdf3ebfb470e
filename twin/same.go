package twin

import (
	"errors"
	"fmt"

	"github.com/seed83556561/mirrord/transform"
)

// How a destination batch is recognised as the batch the link appended for
// a source batch, when the source log changed after the link mirrored it
// (DESIGN §6): the log cleaner cut records out of the batch, or the log
// start moved into it. What the link appended is then no longer what Decide
// makes of the batch now, but the batch is still the same batch.

// Sameness is how Same recognised a destination batch.
type Sameness uint8

const (
	// NotSame: the destination batch is not the source batch's.
	NotSame Sameness = iota
	// Twin: the destination batch is what Decide makes of the source
	// batch from the position given (Match): nothing changed.
	Twin
	// Whole: the destination batch is what Decide makes of the whole
	// source batch, from its base offset: the source's log start moved
	// into the batch after the link appended it whole.
	Whole
	// Cut: the source's cleaner cut records out of the batch since: the
	// same producer batch (mapped producer ID, epoch, base sequence), whose
	// records the source still holds are, in order, records of the
	// destination batch, the same in key, value, headers and create time.
	Cut
	// DestinationCut: the destination's cleaner cut records out of the
	// batch since, or emptied it (a compacted destination topic; Kafka
	// keeps a producer's last batch, emptied, for its producer state):
	// the same producer batch with the same offset range, and each record
	// it kept the source batch's record at the same offset delta.
	DestinationCut
)

var samenessNames = [...]string{"not the same", "twin", "whole", "cut", "cut at the destination"}

func (s Sameness) String() string { return samenessNames[s] }

// Same reports whether destination batch dst is the batch the link appended
// for source batch raw (header h, fetched from position from): its Twin,
// its Whole twin, or the batch the cleaner Cut. It returns the decision the
// pipeline made for the batch (what the caller commits to psm), with the
// whole batch's sequence range for a Whole or Cut batch. raw is not
// modified. Cut decodes the records of both batches: it is the slow path of
// reconciliation and translation, never of the pipeline.
//
// A batch without a producer ID (a non-idempotent producer) carries no
// identity but its records: Cut then needs every record of the destination
// batch that the source no longer holds to lie between records it holds,
// which a batch mirrored whole and cut since satisfies. A batch the
// source's cleaner emptied is never Same: nothing of it tells it from a
// later batch of the same identity.
//
// DestinationCut needs a source batch that the link forwarded whole (from
// its base offset), a destination batch with its mapped producer ID,
// epoch, base sequence and offset range (kfake's cleaner may shorten the
// range by the records it removed at the end), and fewer records, each the
// appended batch's record at the same offset delta: the source batch's at
// that delta, or, for a batch the link re-encoded because it had offset
// gaps, its record at that index (the source must hold the batch as it
// was mirrored: one the cleaners cut on both sides is not recognised).
// An emptied one, with the whole range (as Kafka keeps a
// producer's last batch), is the link's too when the batch has a producer
// ID: the link appends a producer batch (mapped identity and sequence
// range) once, as the producer state refuses a second (SkipDuplicate). A
// batch without one is told by the records it kept alone, as a plain
// producer's retry is mirrored in order with its original.
func Same(psm *transform.PSM, src Source, reenc *transform.Reencoder, raw []byte, h transform.Header, from int64, dst []byte) (Sameness, Decision, error) {
	dh, err := transform.ParseHeader(dst)
	if err != nil {
		return NotSame, Decision{}, fmt.Errorf("destination batch: %w", err)
	}
	d, err := Decide(psm, src, reenc, nil, raw, h, from, true)
	if err != nil {
		return NotSame, Decision{}, err
	}
	if d.Verdict == Forward && Match(d.Out, dst) {
		return Twin, d, nil
	}
	if d.Verdict == NeedSalt || d.Verdict == SkipDuplicate || d.Verdict == SkipHome || d.Verdict == SkipUnattributed {
		return NotSame, d, nil
	}
	if from > h.BaseOffset && h.NumRecords > 0 {
		w, err := Decide(psm, src, reenc, nil, raw, h, h.BaseOffset, true)
		if err != nil {
			return NotSame, Decision{}, err
		}
		if w.Verdict == Forward && Match(w.Out, dst) {
			return Whole, w, nil
		}
	}
	// The same producer batch, cut: identity by header, records by content.
	info := transform.InfoOf(h, src.Cluster, src.Region)
	info.LastOffsetDelta = max(h.LastOffsetDelta, dh.LastOffsetDelta) // the range the pipeline committed
	pd := psm.Decide(info)
	if pd.Kind == transform.KindCollision || pd.Kind == transform.KindDuplicate {
		return NotSame, d, nil
	}
	// Not the codec: Kafka's cleaner keeps it, kfake's writes a cut batch
	// uncompressed (docs/kafka-differences.md).
	if dh.ProducerID != pd.Mapped || dh.ProducerEpoch != h.ProducerEpoch || dh.BaseSequence != h.BaseSequence {
		return NotSame, d, nil
	}
	if h.NumRecords > 0 && dh.NumRecords < h.NumRecords && d.Verdict == Forward {
		ok, err := cutAtDestination(reenc, raw, h, from, d.Out, dst, dh)
		if err != nil || !ok {
			return NotSame, d, err
		}
		return DestinationCut, d, nil
	}
	if h.NumRecords == 0 || dh.NumRecords < h.NumRecords {
		// A batch the cleaner emptied is never taken for the link's: a
		// later batch with the same identity (a chain source's copy)
		// may be the one the link appended. The walker accounts for
		// the mirror of an emptied batch (Walker.Compare).
		return NotSame, d, nil
	}
	ok, err := cutOf(reenc, raw, h, dst, dh)
	if err != nil || !ok {
		return NotSame, d, err
	}
	return Cut, Decision{Verdict: Forward, PSM: pd}, nil
}

// cutOf reports whether the records of source batch raw are, in order,
// records of destination batch dst with the same content; for a dst that
// holds the batch dense (as many records as the source's offset range),
// each at its offset delta.
func cutOf(reenc *transform.Reencoder, raw []byte, h transform.Header, dst []byte, dh transform.Header) (bool, error) {
	srcRecs, dstRecs, err := bothRecords(reenc, raw, h, dst, dh)
	if err != nil || dstRecs == nil {
		return false, err
	}
	dense := int64(dh.NumRecords) == int64(h.LastOffsetDelta)+1
	j := 0
	for _, r := range srcRecs {
		if dense {
			i := int(r.Offset - h.BaseOffset)
			if i < 0 || i >= len(dstRecs) || !r.Same(dstRecs[i]) {
				return false, nil
			}
			continue
		}
		for j < len(dstRecs) && !r.Same(dstRecs[j]) {
			j++
		}
		if j == len(dstRecs) {
			return false, nil
		}
		j++
	}
	return true, nil
}

// Place is where the records of a destination batch came from, for offset
// translation: the destination index of the first record whose source
// offset is at least p.
//
// dst is the batch the link appended for source batch raw (Same said so);
// its records are, in order, the source batch's records as they were when
// the link mirrored them (from its fetch position on). When dst holds them
// dense (one record per source offset from its first one: the batch had no
// gaps when mirrored), record i came from source offset first+i, whatever
// the source holds now. That is known when dst has as many records as the
// source batch has offsets (Kafka's cleaner keeps a batch's offset range),
// or when every record the source still holds sits in dst at its offset's
// place (kfake's cleaner shrinks the range of a batch whose last records it
// removed). Otherwise each record the source still holds is aligned with
// its copy in dst (in order, by content), and a destination record between
// two aligned ones came from an offset between theirs, no longer known: if
// p falls strictly inside such a stretch the answer cannot be exact, and
// exact is false.
func Place(reenc *transform.Reencoder, raw []byte, h transform.Header, from int64, dst []byte, p int64) (index int, exact bool, err error) {
	dh, err := transform.ParseHeader(dst)
	if err != nil {
		return 0, false, fmt.Errorf("destination batch: %w", err)
	}
	n := int(dh.NumRecords)
	first := h.BaseOffset // the source offset of dst's first record, if dense
	if from > first && int64(n) == h.NextOffset()-from {
		first = from // the link began mirroring inside the batch
	}
	positional := func() (int, bool, error) { return int(min(max(p-first, 0), int64(n))), true, nil }
	if int64(n) == h.NextOffset()-first {
		return positional()
	}
	if err := transform.Validate(raw); err != nil {
		return 0, false, fmt.Errorf("source batch at offset %d: %w", h.BaseOffset, err)
	}
	if err := transform.Validate(dst); err != nil {
		return 0, false, fmt.Errorf("destination batch at offset %d: %w", dh.BaseOffset, err)
	}
	srcRecs, err := reenc.Records(raw)
	if err != nil {
		return 0, false, fmt.Errorf("source batch at offset %d: %w", h.BaseOffset, err)
	}
	dstRecs, err := reenc.Records(dst)
	if err != nil {
		return 0, false, fmt.Errorf("destination batch at offset %d: %w", dh.BaseOffset, err)
	}
	// Align the source's records, from the fetch position on, with dst's.
	type pair struct {
		off int64
		at  int
	}
	var aligned []pair
	dense := true
	j := 0
	for _, r := range srcRecs {
		if r.Offset < from {
			continue
		}
		for j < len(dstRecs) && !r.Same(dstRecs[j]) {
			j++
		}
		if j == len(dstRecs) {
			return 0, false, fmt.Errorf("source record at offset %d is not in the destination batch at offset %d", r.Offset, dh.BaseOffset)
		}
		aligned = append(aligned, pair{r.Offset, j})
		dense = dense && int64(j) == r.Offset-first
		j++
	}
	if dense && len(aligned) > 0 && n >= int(h.NextOffset()-first) {
		return positional()
	}
	prev := pair{off: max(from, h.BaseOffset) - 1, at: -1} // the last aligned record before p
	for _, a := range aligned {
		if a.off >= p {
			switch {
			case a.at == prev.at+1 || p == a.off:
				return a.at, true, nil // nothing between, or all of it before p
			case p <= prev.off+1:
				return prev.at + 1, true, nil // what lies between came after p
			}
			return a.at, false, nil
		}
		prev = a
	}
	// p is past every record the source still holds of the batch.
	switch {
	case prev.at == n-1 || p >= h.NextOffset():
		return n, true, nil
	case p <= prev.off+1:
		return prev.at + 1, true, nil
	}
	return n, false, nil
}

// CutAtDestination reports whether destination batch dst is the batch the
// link appended whole for source batch raw (header h) and the destination's
// cleaner cut records out of since (a compacted destination topic): the
// same producer batch (the mapped producer ID psm gives h, its epoch and
// base sequence), fewer records than the source batch, and each of them
// the record the link appended at that offset delta (the source batch's
// record at that delta, or at that index when the batch had offset gaps
// and the link re-encoded it densely), the same in key, value, headers and
// create time. Only a source batch with a producer ID qualifies: a batch
// without one has no identity to tell it by. A batch the cleaner emptied
// is never one (nothing tells it from a later batch of the same
// identity). raw is
// not modified; it decodes the records of both batches (the slow path of
// translation only).
func CutAtDestination(psm *transform.PSM, src Source, reenc *transform.Reencoder, raw []byte, h transform.Header, dst []byte) (bool, error) {
	dh, err := transform.ParseHeader(dst)
	if err != nil {
		return false, fmt.Errorf("destination batch: %w", err)
	}
	if h.ProducerID < 0 || h.NumRecords == 0 || dh.NumRecords == 0 || dh.NumRecords >= h.NumRecords ||
		dh.ProducerEpoch != h.ProducerEpoch || dh.BaseSequence != h.BaseSequence || dh.Control() {
		return false, nil
	}
	d, err := Decide(psm, src, reenc, nil, raw, h, h.BaseOffset, true)
	if err != nil || d.Verdict != Forward {
		return false, err
	}
	return cutAtDestination(reenc, raw, h, h.BaseOffset, d.Out, dst, dh)
}

// cutAtDestination reports whether destination batch dst (header dh) is
// out, what the link appended for source batch raw (header h) forwarded
// from position from, after the destination's cleaner cut records out of
// it or emptied it (Same's DestinationCut).
func cutAtDestination(reenc *transform.Reencoder, raw []byte, h transform.Header, from int64, out, dst []byte, dh transform.Header) (bool, error) {
	mh, err := transform.ParseHeader(out)
	if err != nil {
		return false, err
	}
	if h.ProducerID < 0 && dh.NumRecords == 0 || from > h.BaseOffset || dh.Control() || dh.NumRecords >= mh.NumRecords ||
		dh.ProducerID != mh.ProducerID || dh.ProducerEpoch != mh.ProducerEpoch || dh.BaseSequence != mh.BaseSequence ||
		dh.LastOffsetDelta > mh.LastOffsetDelta || dh.NumRecords == 0 && dh.LastOffsetDelta != mh.LastOffsetDelta || dh.Transactional() != mh.Transactional() {
		return false, nil
	}
	// The records of out, not of raw: a batch with offset gaps was
	// re-encoded densely, so its mirror's record i is the source's i-th
	// record, not the one at offset delta i.
	outRecs, dstRecs, err := bothRecords(reenc, out, mh, dst, dh)
	if err != nil {
		return false, err
	}
	for _, r := range dstRecs {
		i := int(r.Offset - dh.BaseOffset)
		if i < 0 || i >= len(outRecs) || outRecs[i].Offset-mh.BaseOffset != int64(i) || !outRecs[i].Same(r) {
			return false, nil
		}
	}
	return true, nil
}

// bothRecords validates and decodes the records of source batch raw and
// destination batch dst; dstRecs is nil when dst holds none (emptied).
func bothRecords(reenc *transform.Reencoder, raw []byte, h transform.Header, dst []byte, dh transform.Header) (srcRecs, dstRecs []transform.Record, err error) {
	if err := transform.Validate(raw); err != nil {
		return nil, nil, fmt.Errorf("source batch at offset %d: %w", h.BaseOffset, err)
	}
	if err := transform.Validate(dst); err != nil {
		return nil, nil, fmt.Errorf("destination batch at offset %d: %w", dh.BaseOffset, err)
	}
	if srcRecs, err = reenc.Records(raw); err != nil {
		return nil, nil, fmt.Errorf("source batch at offset %d: %w", h.BaseOffset, err)
	}
	dstRecs, err = reenc.Records(dst)
	if errors.Is(err, transform.ErrEmptyBatch) {
		return srcRecs, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("destination batch at offset %d: %w", dh.BaseOffset, err)
	}
	return srcRecs, dstRecs, nil
}
