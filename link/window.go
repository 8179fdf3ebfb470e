package link

import (
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/transform"
)

// The window of recently mirrored batches (DESIGN §13): each partition of a
// session remembers where the destination put its last WindowSpans
// appended batches, so that offset translation near the head knows which
// destination batch to compare with a source batch instead of searching for
// it. The pipeline fills it from appender acknowledgements (and settled
// appends) and hands copies to the driver (Pipeline.Anchor); it does no I/O
// for it.

// WindowSpans bounds the window of each partition: its WindowSpans most
// recently appended batches, 40 bytes each (1,280 bytes per partition),
// allocated as batches are acknowledged.
const WindowSpans = 32

// Span is one batch the link appended, as the destination acknowledged it:
// the records of the source batch at Base, from source offset From on (the
// fetch position, when the batch began before it), are the destination
// batch at DstBase. End and DstEnd are the offsets after each. Source
// offsets between two spans of a partition, and between its last span and
// its position, hold nothing the link mirrored (transaction markers,
// aborted transactions, batches compaction emptied, duplicates).
type Span struct {
	From, Base, End int64
	DstBase, DstEnd int64
}

// window is a partition's spans: oldest first until full, then a ring.
type window struct {
	spans []Span
	next  int // once full: the oldest span, overwritten next
}

func (w *window) add(s Span) {
	if len(w.spans) < WindowSpans {
		w.spans = append(w.spans, s)
		return
	}
	w.spans[w.next] = s
	w.next = (w.next + 1) % WindowSpans
}

// reset forgets every span: the destination no longer holds what they say.
func (w *window) reset() { w.spans, w.next = w.spans[:0], 0 }

// list returns a copy of the spans, oldest first.
func (w *window) list() []Span {
	out := make([]Span, 0, len(w.spans))
	out = append(out, w.spans[w.next:]...)
	return append(out, w.spans[:w.next]...)
}

// Anchor is what a session knows of one mirrored partition without reading
// either cluster: the starting points of offset translation.
type Anchor struct {
	Pair
	// SrcNext and DstNext: every batch the link mirrored from below
	// SrcNext is below DstNext at the destination. With Head they are
	// the partition's acknowledged head (it is mirroring, or reconciled
	// and waiting for its barrier): nothing the link appended is at or
	// past DstNext. Without Head (the partition is reconciling) they are
	// its checkpoint's, and the destination may hold the link's batches
	// past DstNext.
	Head             bool
	SrcNext, DstNext int64
	// CkSrc and CkDst are the last checkpoint committed to the state
	// topic (-1: none yet), and Producers the producer state saved with
	// it, when known.
	CkSrc, CkDst int64
	Producers    []transform.ProducerEntry
	// Spans is the window, oldest first; Salts the partition's collision
	// salts, so that a translation maps producers as the link does.
	Spans []Span
	Salts map[transform.Origin]int64
}

// Anchor returns what the pipeline knows of source partition src, copied;
// false if the session does not mirror it.
func (pl *Pipeline) Anchor(src tp.Key) (Anchor, bool) {
	p := pl.bySrc[src]
	if p == nil {
		return Anchor{}, false
	}
	return Anchor{
		Pair:    p.Pair,
		Head:    p.phase == phaseAdmitting || p.phase.mirroring(),
		SrcNext: p.srcNext, DstNext: p.dstNext,
		CkSrc: p.ckSrc, CkDst: p.ckDst,
		Spans: p.win.list(),
		Salts: p.psm.Salts(),
	}, true
}

// Pairs returns every partition the session mirrors, in the order they
// joined.
func (pl *Pipeline) Pairs() []Pair {
	out := make([]Pair, 0, len(pl.parts))
	for _, p := range pl.parts {
		out = append(out, p.Pair)
	}
	return out
}
