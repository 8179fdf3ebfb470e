package translate

import (
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/transform"
)

// Anchor is what a session knows of one mirrored partition without reading
// either cluster: the starting points of offset translation.
type Anchor struct {
	tp.Pair
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
