package twin

import (
	"fmt"

	"github.com/seed83556561/mirrord/transform"
)

// Coalescing (issue 23): the link appends a run of consecutive source
// batches of a partition as one destination batch (transform.Merge; in
// preserve delivery only one producer's batches with consecutive
// sequences, under its identity: Walker.ProducerRuns): batches of one codec, each dense and taken whole (from
// its base offset), without LogAppendTime, and contiguous at the source
// (each one's base offset the previous one's next offset). The destination
// batch holds their records in order, each with its key, value, headers
// and create time, so source offset o of a run that begins at source
// offset s lies at destination offset base+(o-s). A source batch is then
// no longer the twin of a whole destination batch (Match, Same) but a part
// of one: Run tells which part, record by record, by content.

// Run is a destination batch with its records decoded once, so that the
// source batches it may hold are each checked without decoding it again.
// It is the slow path of translation and of a walk, never of the pipeline.
type Run struct {
	h    transform.Header
	recs []transform.Record
	byTS map[int64][]int // record indexes by create time, built by Find
}

// NewRun validates and decodes destination batch dst.
func NewRun(reenc *transform.Reencoder, dst []byte) (*Run, error) {
	h, err := transform.ParseHeader(dst)
	if err != nil {
		return nil, fmt.Errorf("destination batch: %w", err)
	}
	if h.Control() || h.NumRecords <= 0 {
		return &Run{h: h}, nil // holds no source batch's records
	}
	if err := transform.Validate(dst); err != nil {
		return nil, fmt.Errorf("destination batch at offset %d: %w", h.BaseOffset, err)
	}
	recs, err := reenc.Records(dst)
	if err != nil {
		return nil, fmt.Errorf("destination batch at offset %d: %w", h.BaseOffset, err)
	}
	return &Run{h: h, recs: recs}, nil
}

// Header is the destination batch's header.
func (r *Run) Header() transform.Header { return r.h }

// Len is how many records the destination batch holds.
func (r *Run) Len() int { return len(r.recs) }

// Part is a source batch with its records decoded once, to be looked for
// in runs.
type Part struct {
	h    transform.Header
	recs []transform.Record
}

// NewPart validates and decodes source batch raw (header h); raw is not
// modified.
func NewPart(reenc *transform.Reencoder, raw []byte, h transform.Header) (*Part, error) {
	if h.Control() || h.NumRecords <= 0 {
		return &Part{h: h}, nil // never a part
	}
	if err := transform.Validate(raw); err != nil {
		return nil, fmt.Errorf("source batch at offset %d: %w", h.BaseOffset, err)
	}
	recs, err := reenc.Records(raw)
	if err != nil {
		return nil, fmt.Errorf("source batch at offset %d: %w", h.BaseOffset, err)
	}
	return &Part{h: h, recs: recs}, nil
}

// Holds reports whether the destination batch's records from index at on
// are the records of source batch p, fetched from position from, each at
// index at plus its offset delta, the same in key, value, headers and
// create time: p is the part of a run (or the batch alone) that begins at
// index at. Only a batch the link may have merged qualifies: data with
// records, taken whole (from at or before its base offset), without
// LogAppendTime, and, while dense, of the destination batch's codec (a
// batch the source's cleaner cut since may have lost its codec to kfake's
// cleaner, and keeps its records at their offset deltas).
func (r *Run) Holds(p *Part, from int64, at int) bool {
	return r.partOK(p.h, from, at) && r.holds(p, at)
}

// Find returns the first index at or after start at which the destination
// batch holds source batch p (Holds), or -1. A match found so is only a
// candidate: records with the same content and create times may lie in
// another place too, which the caller tells apart (by the source batches
// around p, or by order).
func (r *Run) Find(p *Part, from int64, start int) int {
	start = max(start, 0)
	if !r.partOK(p.h, from, start) || len(p.recs) == 0 {
		return -1
	}
	if r.byTS == nil {
		r.byTS = make(map[int64][]int)
		for i, rec := range r.recs {
			r.byTS[rec.Timestamp] = append(r.byTS[rec.Timestamp], i)
		}
	}
	// Where p's first record could be: a record with its create time.
	first, delta := p.recs[0], int(p.recs[0].Offset-p.h.BaseOffset)
	for _, i := range r.byTS[first.Timestamp] {
		if at := i - delta; at >= start && r.partOK(p.h, from, at) && r.holds(p, at) {
			return at
		}
	}
	return -1
}

// Within reports whether destination batch dst holds source batch raw
// (header h, fetched from position from) from its record index at on
// (Run.Holds), for a single check.
func Within(reenc *transform.Reencoder, raw []byte, h transform.Header, from int64, dst []byte, at int) (bool, error) {
	r, err := NewRun(reenc, dst)
	if err != nil {
		return false, err
	}
	if !r.partOK(h, from, at) {
		return false, nil
	}
	p, err := NewPart(reenc, raw, h)
	if err != nil {
		return false, err
	}
	return r.holds(p, at), nil
}

// partOK reports whether source batch h may be a part of r from index at,
// by their headers alone. The destination batch must be dense: its record
// at index i is then at offset base+i, which is what a part's place says;
// one the destination's cleaner cut since (a destination topic compacted
// after the link joined a run into it) is no run.
func (r *Run) partOK(h transform.Header, from int64, at int) bool {
	return r.h.Dense() && !h.Control() && h.NumRecords > 0 && h.Attributes&transform.AttrTimestampLogAppend == 0 &&
		from <= h.BaseOffset && at >= 0 && at+int(h.LastOffsetDelta)+1 <= len(r.recs) &&
		(!h.Dense() || h.Compression() == r.h.Compression())
}

func (r *Run) holds(p *Part, at int) bool {
	if len(p.recs) == 0 {
		return false
	}
	for _, rec := range p.recs {
		i := at + int(rec.Offset-p.h.BaseOffset)
		if i < at || i >= len(r.recs) || !rec.Same(r.recs[i]) {
			return false
		}
	}
	return true
}
