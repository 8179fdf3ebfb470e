package link

import (
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/translate"
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

// window is a partition's spans: oldest first until full, then a ring.
type window struct {
	spans []translate.Span
	next  int // once full: the oldest span, overwritten next
}

func (w *window) add(s translate.Span) {
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
func (w *window) list() []translate.Span {
	out := make([]translate.Span, 0, len(w.spans))
	out = append(out, w.spans[w.next:]...)
	return append(out, w.spans[:w.next]...)
}

// Anchor returns what the pipeline knows of source partition src, copied;
// false if the session does not mirror it.
func (pl *Pipeline) Anchor(src tp.Key) (translate.Anchor, bool) {
	p := pl.bySrc[src]
	if p == nil {
		return translate.Anchor{}, false
	}
	return translate.Anchor{
		Pair:    p.Pair,
		Head:    p.phase == phaseAdmitting || p.phase.mirroring(),
		SrcNext: p.srcNext, DstNext: p.dstNext,
		CkSrc: p.ckSrc, CkDst: p.ckDst, Producers: p.ckProducers,
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
