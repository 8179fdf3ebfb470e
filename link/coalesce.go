package link

import (
	"math"

	"github.com/seed83556561/mirrord/transform"
	"github.com/seed83556561/mirrord/twin"
)

// Coalescing (issue 23). A broker's cost of an append is per batch: it
// validates each one, and decompresses each compressed one. A source whose
// producers send small batches (linger 0, a few records each) would cost
// the destination broker one validation per source batch, at a few
// records per round trip. When a partition of a transactional session has
// a backlog (several fetched batches waiting), the plan joins a run of
// them into one destination batch (transform.Merge), which holds their
// records in order with their create times, under the session's producer
// and sequences like any batch it appends. Preserve delivery joins one
// producer's runs (below).
//
// What may form a run is decided here, by pure functions of the queue:
//
//   - consecutive batches of the queue, none started yet, none to be
//     re-encoded (trimmed to the partition's start, or with offset gaps:
//     those go alone), each dense (its records at consecutive offsets);
//   - with contiguous offsets: each batch begins at the offset after the
//     previous one, so that no aborted data, control marker or cleaner gap
//     lies between them, and source offset o of the run is destination
//     offset base+(o-runBase), which keeps translation exact;
//   - of one codec, without control batches or LogAppendTime (Merge's own
//     rules);
//   - while their estimated joined size stays within the link's
//     coalesce_bytes (joinedBytes).
//
// A batch that comes alone is appended as it is, as before.

// limitOf is the coalescing limit of a partition: coalesce_bytes, or its
// destination topic's max.message.bytes where that is lower (a joined
// batch above it would be refused as too large, and the session that
// joined it fail, and the next join it again); none for a topic compacted
// at the source or at the destination. The source's cleaner removes
// records from source batches after the session joined them, and a joined
// batch then holds records the source no longer has beside those it has:
// which source offset each of its records came from can no longer be told
// from both logs, so offset translation (package translate) would answer
// untranslatable there. A batch of a compacted topic goes alone, and stays
// translatable as before. A destination's cleaner would cut the joined
// batch itself, which reconciliation then cannot place (it would take it
// for foreign).
func (p *txnPlan) limitOf(pt *txnPart) int64 {
	return joinLimit(p.coalesce, pt.compacted, pt.maxBytes)
}

// joinLimit is limitOf's rule, for either delivery: coalesce, or maxBytes
// where that is lower and known; 0 for a topic compacted at either side.
func joinLimit(coalesce int64, compacted bool, maxBytes int64) int64 {
	if compacted {
		return 0
	}
	if maxBytes > 0 {
		return min(coalesce, maxBytes)
	}
	return coalesce
}

// Preserve delivery (the Pipeline) joins too, but only one producer's
// batches: a run is consecutive batches of one producer ID and epoch with
// consecutive sequences, which become the batch that producer would have
// sent with a longer linger: its mapped producer ID, epoch and the first
// batch's base sequence, with all the run's records. The producer's
// identity and sequence semantics are kept: the destination broker checks
// the joined batch's sequence range as it would have checked the batches
// one by one, a retry of it is refused as a duplicate, and reconciliation
// and translation place each source batch inside it by its sequence and
// its records (twin.Walker.ProducerRuns). Batches without a producer ID,
// and anything across a sequence gap, an epoch change, a control marker,
// aborted data or a cleaner gap (offsets not contiguous), are not joined.
// The limit is joinLimit's, for the same reasons.

// producerRun is how many items from the head of queue (the head decided
// d, to be forwarded) one append joins in preserve delivery: 1 when the
// head goes alone.
func producerRun(queue []item, d twin.Decision, limit int64) int {
	if limit <= 0 || len(queue) < 2 || d.Reencoded || !producerJoinable(queue[0]) ||
		(d.PSM.Kind != transform.KindAppend && d.PSM.Kind != transform.KindSequenceGap) {
		return 1
	}
	h := queue[0].hdr
	size := joinedBytes(queue[0].raw, h)
	seq := int64(h.BaseSequence) + int64(h.NumRecords)
	n := 1
	for ; n < len(queue); n++ {
		prev, b := queue[n-1], queue[n]
		bh := b.hdr
		if !producerJoinable(b) || prev.end != prev.hdr.NextOffset() || bh.BaseOffset != prev.end ||
			bh.ProducerID != h.ProducerID || bh.ProducerEpoch != h.ProducerEpoch || int64(bh.BaseSequence) != seq ||
			bh.Attributes&^transform.AttrTransactional != h.Attributes&^transform.AttrTransactional {
			break
		}
		size += joinedBytes(b.raw, bh)
		seq += int64(bh.NumRecords)
		if size > limit || seq > math.MaxInt32 {
			break
		}
	}
	return n
}

// producerJoinable reports whether a queued batch may be part of a
// producer's run: a small (joinBelow) data batch with a producer ID (its
// source's, or one an upstream mirror mapped) and records, taken whole
// and dense, without LogAppendTime, of a known codec.
func producerJoinable(it item) bool {
	h := it.hdr
	return it.raw != nil && len(it.raw) < joinBelow && it.from <= h.BaseOffset && h.ProducerID != -1 && h.BaseSequence >= 0 &&
		!h.Control() && h.NumRecords > 0 && h.Dense() && h.Attributes&transform.AttrTimestampLogAppend == 0 &&
		h.Compression() <= 4
}

// runLength is how many batches from the head of queue (a batch being
// started) one append joins: 1 when the head goes alone. The batches after
// it must not have been started.
func runLength(queue []txnQueued, limit int64) int {
	if limit <= 0 || len(queue) < 2 || !joinable(queue[0]) {
		return 1
	}
	size, records := joinedBytes(queue[0].raw, queue[0].hdr), int64(queue[0].hdr.NumRecords)
	n := 1
	for ; n < len(queue); n++ {
		prev, b := queue[n-1], queue[n]
		if b.sent || !joinable(b) || prev.end != prev.hdr.NextOffset() || b.hdr.BaseOffset != prev.end ||
			b.hdr.Compression() != queue[0].hdr.Compression() {
			break
		}
		size += joinedBytes(b.raw, b.hdr)
		records += int64(b.hdr.NumRecords)
		if size > limit || records > math.MaxInt32 {
			break
		}
	}
	return n
}

// joinBelow is the size from which a batch is not small: it is appended
// alone in either delivery. A broker's cost per batch is what joining
// saves; at 64 KiB it is spread over enough records, and a compressed
// batch that size would only be decompressed and compressed again (on
// 1 MiB source batches of zstd and gzip, which compress to a few hundred
// KB, joining them took the mirror from 2 to 32-50 CPU s per GB, with
// nothing gained at the destination).
const joinBelow = 64 << 10

// joinable reports whether a queued batch may be part of a run.
func joinable(q txnQueued) bool {
	h := q.hdr
	return q.raw != nil && len(q.raw) < joinBelow && !q.reencode && !h.Control() && h.NumRecords > 0 &&
		h.NumRecords == h.LastOffsetDelta+1 && h.Attributes&transform.AttrTimestampLogAppend == 0 &&
		h.Compression() <= 4
}

// joinedBytes estimates what a batch (raw, header h) adds to a joined
// batch, in either delivery: its bytes, and for each record the most its
// framing can grow by when it is re-framed in a larger batch (offset and timestamp deltas, and the record's length,
// in varints of up to 5, 10 and 5 bytes). A compressed run is compressed
// again as one and usually comes out smaller; where it does not, the
// append finds it over the limit and sends the batches one by one.
func joinedBytes(raw []byte, h transform.Header) int64 {
	return int64(len(raw)) + 20*int64(h.NumRecords)
}

// runAnswered checks the answer of a run's append against the run: a base
// per batch, in order, each batch's offsets after the previous one's, and
// the answer's span ending with the last batch.
func runAnswered(qs []txnQueued, e txnInAppended) bool {
	if len(e.bases) != len(qs) || e.bases[0] != e.base {
		return false
	}
	end := e.base
	for i, q := range qs {
		if e.bases[i] < end {
			return false
		}
		end = e.bases[i] + int64(q.hdr.LastOffsetDelta) + 1
	}
	return end == e.base+e.n
}
