package link

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/seed83556561/mirrord/transform"
)

// The one decision for a fetched source batch (DESIGN §12): what the
// destination gets for it. The pipeline calls decide before it submits a
// batch, and the reconciliation walker calls it for every source batch it
// compares with the destination, so that reconciliation reaches exactly the
// decisions the pipeline reached (I3).

// verdict is what decide concluded for one batch.
type verdict uint8

const (
	// skipEmpty: nothing of the batch is forwarded: it holds no records
	// (compaction can leave one), or none at or after the fetch position.
	skipEmpty verdict = iota
	// skipDuplicate: the producer already appended this sequence range in
	// this epoch (transform.KindDuplicate); the batch is skipped and
	// counted, and its decision is committed to the PSM.
	skipDuplicate
	// needSalt: the mapped PID is held by another origin
	// (transform.KindCollision); the salt must be committed to the state
	// topic before anything of the batch is appended, then the batch is
	// decided again.
	needSalt
	// forward: the destination gets out.
	forward
)

var verdictNames = [...]string{"skip", "duplicate", "salt", "forward"}

func (v verdict) String() string { return verdictNames[v] }

// decision is decide's result.
type decision struct {
	verdict verdict
	psm     transform.Decision // for PSM.Commit (skipDuplicate, forward)
	// out is the batch the destination gets (forward): the source batch
	// rewritten, or a dense re-encoding of its records at or after the
	// fetch position.
	out       []byte
	reencoded bool
}

// source names what decide needs to know about the source cluster.
type source struct {
	cluster string
	region  transform.Region
}

// decide decides a fetched source batch raw with header h, fetched from
// position from (records of the batch before from are not forwarded; only
// the first batch of a fetch can start before its position). It rewrites
// raw in place unless inScratch is set, in which case out is built in scratch
// (which out may reuse). A batch is validated before it is re-encoded, so
// that damaged bytes never get a fresh CRC (DESIGN §5). decide consults the
// PSM but does not change it: the caller commits the decision once the
// batch is appended (forward) or skipped (skipDuplicate).
func decide(psm *transform.PSM, src source, reenc *transform.Reencoder, scratch, raw []byte, h transform.Header, from int64, inScratch bool) (decision, error) {
	if h.NumRecords == 0 || h.NextOffset() <= from {
		return decision{verdict: skipEmpty}, nil
	}
	d := psm.Decide(transform.InfoOf(h, src.cluster, src.region))
	switch d.Kind {
	case transform.KindDuplicate:
		return decision{verdict: skipDuplicate, psm: d}, nil
	case transform.KindCollision:
		return decision{verdict: needSalt, psm: d}, nil
	}
	if h.Dense() && h.BaseOffset >= from {
		if inScratch {
			raw = append(scratch[:0], raw...)
		}
		transform.Rewrite(raw, d.Mapped)
		return decision{verdict: forward, psm: d, out: raw}, nil
	}
	if err := transform.Validate(raw); err != nil {
		return decision{}, fmt.Errorf("source batch at offset %d: %w", h.BaseOffset, err)
	}
	out, _, err := reenc.ReencodeFrom(scratch, raw, d.Mapped, from)
	if errors.Is(err, transform.ErrEmptyBatch) {
		return decision{verdict: skipEmpty}, nil
	}
	if err != nil {
		return decision{}, fmt.Errorf("source batch at offset %d: re-encode: %w", h.BaseOffset, err)
	}
	return decision{verdict: forward, psm: d, out: out, reencoded: true}, nil
}

// Byte positions in a v2 batch (DESIGN §5).
const (
	offAttributes     = 21
	offLastOffsetDelt = 23
	offMaxTimestamp   = 35
	offProducerID     = 43
	// timestampTypeBit is the attributes bit of LogAppendTime.
	timestampTypeBit = 0x08
)

// twin reports whether got, a batch read from the destination, is the
// batch want that the link appended (the batch-twin relation of DESIGN §6
// and §13): the same length, the same bytes from the producer ID to the end
// (producer ID, epoch, base sequence, record count, records), the same last
// offset delta and first timestamp, and the same attributes but for the
// timestamp-type bit. Not compared: base offset and partition leader epoch,
// which the destination broker assigns, and the CRC, the timestamp type and
// the max timestamp, which it rewrites for a batch whose timestamp type or
// max timestamp differs from what the topic's message.timestamp.type makes
// of it (Kafka's LogValidator: a LogAppendTime source batch reaching a
// CreateTime topic, or a re-encoded batch whose max-timestamp record was
// trimmed; DESIGN §11). Reconciliation, settling and offset translation use
// this one relation.
func twin(want, got []byte) bool {
	if len(want) != len(got) || len(got) < transform.BatchHeaderSize {
		return false
	}
	if want[offAttributes] != got[offAttributes] ||
		want[offAttributes+1]&^timestampTypeBit != got[offAttributes+1]&^timestampTypeBit {
		return false
	}
	return bytes.Equal(want[offLastOffsetDelt:offMaxTimestamp], got[offLastOffsetDelt:offMaxTimestamp]) &&
		bytes.Equal(want[offProducerID:], got[offProducerID:])
}
