package transform

import (
	"errors"
	"fmt"
	"math"
)

// Coalescing (issue 23): when a partition has a backlog of small batches,
// a run of consecutive batches may be appended as one destination batch,
// which costs the destination broker one batch's validation instead of
// one per source batch. Merge builds that batch; which batches may form a
// run (the same producer with consecutive sequences in preserve delivery,
// any batches in transactional delivery) is the caller's decision.

// ErrNotMergeable says the batches cannot form one batch as they are (a
// control batch, different codecs, broker-stamped LogAppendTime, too many
// records).
var ErrNotMergeable = errors.New("batches cannot be merged")

// MergeHeader is what a merged batch says of its producer: the producer
// ID, epoch and base sequence it is appended under, and whether it is part
// of a transaction.
type MergeHeader struct {
	ProducerID    int64
	ProducerEpoch int16
	BaseSequence  int32
	Transactional bool
}

// Merge joins the records of batches bs (each passed Validate; appended
// in this order) into one batch with header m, appended to dst[:0] (dst's
// capacity is reused; dst must not share memory with bs):
//
//   - every record of every batch, in order, with offset deltas 0..n-1
//     (dense, also where the source's cleaner left gaps) and timestamp
//     deltas relative to the first batch's first timestamp, so that each
//     record keeps its create time; keys, values, headers and record
//     attributes as they were;
//   - the codec of the batches, which must all have the same one:
//     uncompressed records are re-framed without any decompression,
//     compressed ones are decompressed and compressed again with kgo's
//     compressor for the codec (at its default level: a batch does not say
//     the level it was compressed at);
//   - header: the first batch's attributes (the transactional bit as m
//     says), lastOffsetDelta n-1, the first batch's first timestamp, the
//     largest max timestamp, and m's producer ID, epoch and base sequence.
//
// offsets[i] gives record i's source offset (its batch's base offset plus
// its original delta) and its delta i in the merged batch; the slice is
// newly allocated and the caller's.
//
// Control batches, batches without records, a LogAppendTime batch (its
// records' create times are not what a consumer reads) and batches of
// different codecs give ErrNotMergeable; records that do not decode a
// *CorruptError naming the batch.
func (r *Reencoder) Merge(dst []byte, bs [][]byte, m MergeHeader) (out []byte, offsets []OffsetMap, err error) {
	return r.merge(dst, bs, m, true)
}

// Join is Merge without the offset map, for a caller that does not need
// it (a joined batch's records are its batches' records in order): it
// allocates nothing once the Reencoder's buffers have grown.
func (r *Reencoder) Join(dst []byte, bs [][]byte, m MergeHeader) ([]byte, error) {
	out, _, err := r.merge(dst, bs, m, false)
	return out, err
}

func (r *Reencoder) merge(dst []byte, bs [][]byte, m MergeHeader, keep bool) (out []byte, offsets []OffsetMap, err error) {
	defer r.release()
	if len(bs) == 0 {
		return nil, nil, fmt.Errorf("%w: no batches", ErrNotMergeable)
	}
	hs := r.hs[:0]
	for range bs {
		hs = append(hs, Header{})
	}
	r.hs = hs
	total := int64(0)
	for i, b := range bs {
		h, err := ParseHeader(b)
		if err != nil {
			return nil, nil, err
		}
		if int64(h.Length) != int64(len(b))-LengthOverhead {
			return nil, nil, corrupt(b, -1, CheckLength, "length field is %d, but %d bytes follow it", h.Length, len(b)-LengthOverhead)
		}
		switch {
		case h.Control():
			return nil, nil, fmt.Errorf("%w: batch at offset %d is a control batch", ErrNotMergeable, h.BaseOffset)
		case h.NumRecords <= 0:
			return nil, nil, fmt.Errorf("%w: batch at offset %d has no records", ErrNotMergeable, h.BaseOffset)
		case h.Attributes&AttrTimestampLogAppend != 0:
			return nil, nil, fmt.Errorf("%w: batch at offset %d carries LogAppendTime", ErrNotMergeable, h.BaseOffset)
		case h.Compression() > 4:
			return nil, nil, corrupt(b, -1, CheckCodec, "unknown compression codec %d", h.Compression())
		case h.Compression() != hs[0].Compression() && i > 0:
			return nil, nil, fmt.Errorf("%w: batch at offset %d is %s, the first (offset %d) %s", ErrNotMergeable,
				h.BaseOffset, codecNames[h.Compression()], hs[0].BaseOffset, codecNames[hs[0].Compression()])
		}
		hs[i] = h
		total += int64(h.NumRecords)
	}
	if total > math.MaxInt32 {
		return nil, nil, fmt.Errorf("%w: %d records, more than a batch holds", ErrNotMergeable, total)
	}
	first := hs[0]
	base := first.FirstTimestamp
	maxTS := first.MaxTimestamp
	rn := renumbering{keep: keep}
	if keep {
		size := 0
		for _, b := range bs {
			size += len(b) // a capacity hint, not trusted counts: compressed records grow it
		}
		rn.offsets = make([]OffsetMap, 0, min(total, int64(size/minRecordSize)))
	}
	r.raw = r.raw[:0]
	for i, b := range bs {
		h := hs[i]
		maxTS = max(maxTS, h.MaxTimestamp)
		raw, err := r.decompress(b, h)
		if err != nil {
			return nil, nil, err
		}
		if err := r.reframe(b, h, raw, math.MinInt64, h.FirstTimestamp-base, &rn); err != nil {
			return nil, nil, err
		}
	}
	attrs := first.Attributes &^ AttrTransactional
	if m.Transactional {
		attrs |= AttrTransactional
	}
	n := rn.n
	out, err = r.seal(dst, Header{
		Attributes:      attrs,
		LastOffsetDelta: n - 1,
		FirstTimestamp:  base,
		MaxTimestamp:    maxTS,
		ProducerID:      m.ProducerID,
		ProducerEpoch:   m.ProducerEpoch,
		BaseSequence:    m.BaseSequence,
		NumRecords:      n,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("merge %d batches from offset %d: %w", len(bs), first.BaseOffset, err)
	}
	return out, rn.offsets, nil
}
