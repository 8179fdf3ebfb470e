package twin

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/seed83556561/mirrord/transform"
)

// Verdict is what Decide concluded for one source batch.
type Verdict uint8

const (
	// SkipEmpty: nothing of the batch is forwarded: it holds no records
	// (compaction can leave one), or none at or after the fetch position.
	SkipEmpty Verdict = iota
	// SkipDuplicate: the producer already appended this sequence range in
	// this epoch (transform.KindDuplicate); the batch is skipped and
	// counted, and its decision is committed to the PSM.
	SkipDuplicate
	// NeedSalt: the mapped PID is held by another origin
	// (transform.KindCollision); the salt must be committed to the state
	// topic before anything of the batch is appended, then the batch is
	// decided again.
	NeedSalt
	// Forward: the destination gets Out.
	Forward
	// SkipHome: the batch's producer ID says it was first produced at the
	// destination (transform.Home): it is not sent back there.
	SkipHome
	// SkipUnattributed: the batch has no producer ID and the link's
	// unattributed policy skips those (transform.Unattributed).
	SkipUnattributed
)

var verdictNames = [...]string{"skip", "duplicate", "salt", "forward", "home", "unattributed"}

// Skips reports whether v leaves the batch out of the destination for
// good: nothing of it is appended, and the link moves past it.
func (v Verdict) Skips() bool {
	return v == SkipEmpty || v == SkipDuplicate || v == SkipHome || v == SkipUnattributed
}

func (v Verdict) String() string { return verdictNames[v] }

// Decision is Decide's result.
type Decision struct {
	Verdict Verdict
	// PSM is the producer-state decision, for PSM.Commit (SkipDuplicate,
	// Forward) or the salt to commit (NeedSalt).
	PSM transform.Decision
	// Out is the batch the destination gets (Forward): the source batch
	// rewritten, or a dense re-encoding of its records at or after the
	// fetch position.
	Out       []byte
	Reencoded bool
}

// Source names what Decide needs to know about the source cluster.
type Source struct {
	Cluster string
	Region  transform.Region
	// Returns keeps batches that started at the destination (and, by
	// the link's policy, those without a producer ID) from being sent
	// there (DESIGN §16).
	Returns transform.Returns
}

// Decide decides a fetched source batch raw with header h, fetched from
// position from (records of the batch before from are not forwarded; only
// the first batch of a fetch can start before its position). It rewrites
// raw in place unless inScratch is set, in which case Out is built in
// scratch (which Out may reuse). A batch is validated before it is
// re-encoded, so that damaged bytes never get a fresh CRC (DESIGN §5).
// Decide consults the PSM but does not change it: the caller commits the
// decision once the batch is appended (Forward) or skipped (SkipDuplicate).
func Decide(psm *transform.PSM, src Source, reenc *transform.Reencoder, scratch, raw []byte, h transform.Header, from int64, inScratch bool) (Decision, error) {
	if h.NumRecords == 0 || h.NextOffset() <= from {
		return Decision{Verdict: SkipEmpty}, nil
	}
	switch src.Returns.Of(h.ProducerID) {
	case transform.Home:
		return Decision{Verdict: SkipHome}, nil
	case transform.Unattributed:
		return Decision{Verdict: SkipUnattributed}, nil
	}
	d := psm.Decide(transform.InfoOf(h, src.Cluster, src.Region))
	switch d.Kind {
	case transform.KindDuplicate:
		return Decision{Verdict: SkipDuplicate, PSM: d}, nil
	case transform.KindCollision:
		return Decision{Verdict: NeedSalt, PSM: d}, nil
	}
	if h.Dense() && h.BaseOffset >= from {
		if inScratch {
			raw = append(scratch[:0], raw...)
		}
		transform.Rewrite(raw, d.Mapped)
		return Decision{Verdict: Forward, PSM: d, Out: raw}, nil
	}
	if err := transform.Validate(raw); err != nil {
		return Decision{}, fmt.Errorf("source batch at offset %d: %w", h.BaseOffset, err)
	}
	out, _, err := reenc.ReencodeFrom(scratch, raw, d.Mapped, from)
	if errors.Is(err, transform.ErrEmptyBatch) {
		return Decision{Verdict: SkipEmpty}, nil
	}
	if err != nil {
		return Decision{}, fmt.Errorf("source batch at offset %d: re-encode: %w", h.BaseOffset, err)
	}
	return Decision{Verdict: Forward, PSM: d, Out: out, Reencoded: true}, nil
}

// Match reports whether got, a batch read from the destination, is the
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
func Match(want, got []byte) bool {
	const at = transform.PosAttributes
	if len(want) != len(got) || len(got) < transform.BatchHeaderSize {
		return false
	}
	if want[at] != got[at] ||
		want[at+1]&^transform.AttrTimestampLogAppend != got[at+1]&^transform.AttrTimestampLogAppend {
		return false
	}
	return bytes.Equal(want[transform.PosLastOffsetDelta:transform.PosMaxTimestamp], got[transform.PosLastOffsetDelta:transform.PosMaxTimestamp]) &&
		bytes.Equal(want[transform.PosProducerID:], got[transform.PosProducerID:])
}
