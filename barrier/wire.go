package barrier

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/twmb/franz-go/pkg/kbin"

	"github.com/seed83556561/mirrord/statestore"
)

// ControlType is the control record type of MIRROR_PID_RESET in the
// standard control record key (version 0): the next free type after
// Kafka's KRaft ones (ABORT 0, COMMIT 1, ..., KRAFT_VOTERS 6).
const ControlType int16 = 7

// Sentinel errors of the wire codec.
var (
	// ErrCorrupt: the bytes are not a well-formed v2 record batch.
	ErrCorrupt = errors.New("corrupt barrier batch")
	// ErrNotBarrier: a well-formed batch that is not a MIRROR_PID_RESET
	// control batch (a data batch, a transaction marker, another control
	// type).
	ErrNotBarrier = errors.New("not a MIRROR_PID_RESET control batch")
)

// Batch header layout of record batch format v2.
const (
	batchHeaderLen  = 61
	crcOffset       = 17
	crcCoveredStart = 21 // attributes to the end
	attrControl     = 0x20
	attrTxn         = 0x10
	attrCompression = 0x07
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// EncodeBatch returns the control-record wire form of a MIRROR_PID_RESET
// barrier (spec 000): a complete v2 record batch with base offset 0,
// partition leader epoch -1, attributes = control bit only (not
// transactional, uncompressed), producer ID -1, producer epoch -1, base
// sequence -1, both timestamps v.TimestampMs, and one record whose key is
// the standard control record key {version 0, type 7} and whose value is
// the bytes of the state topic's MirrorPidResetValue.
//
// Stock brokers refuse control batches from clients (Kafka's LogValidator;
// kfake answers INVALID_RECORD), so mirrord never produces this form; it
// writes the same value to the state topic instead (DESIGN §1, §8). The
// form is defined so that a broker that implements spec 000 and mirrord
// agree on it.
func EncodeBatch(v statestore.PIDResetValue) []byte {
	key := kbin.AppendInt16(kbin.AppendInt16(nil, 0), ControlType)
	value := statestore.EncodeValue(v)

	var rec []byte
	rec = kbin.AppendInt8(rec, 0)    // record attributes
	rec = kbin.AppendVarlong(rec, 0) // timestamp delta
	rec = kbin.AppendVarint(rec, 0)  // offset delta
	rec = kbin.AppendVarintBytes(rec, key)
	rec = kbin.AppendVarintBytes(rec, value)
	rec = kbin.AppendVarint(rec, 0) // header count

	b := make([]byte, 0, batchHeaderLen+len(rec)+5)
	b = kbin.AppendInt64(b, 0)  // base offset
	b = kbin.AppendInt32(b, 0)  // batch length, set below
	b = kbin.AppendInt32(b, -1) // partition leader epoch
	b = kbin.AppendInt8(b, 2)   // magic
	b = kbin.AppendUint32(b, 0) // CRC, set below
	b = kbin.AppendInt16(b, attrControl)
	b = kbin.AppendInt32(b, 0) // last offset delta
	b = kbin.AppendInt64(b, v.TimestampMs)
	b = kbin.AppendInt64(b, v.TimestampMs)
	b = kbin.AppendInt64(b, -1) // producer ID
	b = kbin.AppendInt16(b, -1) // producer epoch
	b = kbin.AppendInt32(b, -1) // base sequence
	b = kbin.AppendInt32(b, 1)  // record count
	b = kbin.AppendVarint(b, int32(len(rec)))
	b = append(b, rec...)

	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[crcOffset:], crc32.Checksum(b[crcCoveredStart:], castagnoli))
	return b
}

// DecodeBatch parses one v2 record batch that must be exactly b and returns
// the barrier it carries. A batch that is malformed (length, magic, CRC,
// record framing) is ErrCorrupt; a well-formed batch that is not a
// MIRROR_PID_RESET control batch as EncodeBatch writes it is ErrNotBarrier;
// a value that does not decode wraps statestore's sentinels. The base
// offset and partition leader epoch, which brokers assign, are not checked.
func DecodeBatch(b []byte) (statestore.PIDResetValue, error) {
	var zero statestore.PIDResetValue
	if len(b) < batchHeaderLen {
		return zero, fmt.Errorf("batch of %d bytes is shorter than a v2 header (%d): %w", len(b), batchHeaderLen, ErrCorrupt)
	}
	r := kbin.Reader{Src: b}
	r.Int64() // base offset
	length := r.Int32()
	r.Int32() // partition leader epoch
	magic := r.Int8()
	crc := r.Uint32()
	attrs := r.Int16()
	lastOffsetDelta := r.Int32()
	r.Int64() // first timestamp
	r.Int64() // max timestamp
	pid := r.Int64()
	epoch := r.Int16()
	seq := r.Int32()
	count := r.Int32()
	switch {
	case int(length) != len(b)-12:
		return zero, fmt.Errorf("batch length field %d, but the batch is %d bytes: %w", length, len(b), ErrCorrupt)
	case magic != 2:
		return zero, fmt.Errorf("magic %d, want 2: %w", magic, ErrCorrupt)
	case crc != crc32.Checksum(b[crcCoveredStart:], castagnoli):
		return zero, fmt.Errorf("CRC-32C %08x does not match the batch (%08x): %w", crc, crc32.Checksum(b[crcCoveredStart:], castagnoli), ErrCorrupt)
	case attrs&attrControl == 0:
		return zero, fmt.Errorf("attributes %#04x: a data batch: %w", attrs, ErrNotBarrier)
	case attrs&attrTxn != 0:
		return zero, fmt.Errorf("attributes %#04x: a transactional control batch (a transaction marker): %w", attrs, ErrNotBarrier)
	case attrs&attrCompression != 0:
		return zero, fmt.Errorf("attributes %#04x: a compressed control batch: %w", attrs, ErrCorrupt)
	case pid != -1 || epoch != -1 || seq != -1:
		return zero, fmt.Errorf("producer %d epoch %d sequence %d, want -1, -1, -1: %w", pid, epoch, seq, ErrNotBarrier)
	case count != 1 || lastOffsetDelta != 0:
		return zero, fmt.Errorf("%d records with last offset delta %d, want one record: %w", count, lastOffsetDelta, ErrCorrupt)
	}

	recLen := r.Varint()
	if !r.Ok() || recLen < 0 || int(recLen) != len(r.Src) {
		return zero, fmt.Errorf("record length %d, but %d bytes follow: %w", recLen, len(r.Src), ErrCorrupt)
	}
	r.Int8()    // record attributes
	r.Varlong() // timestamp delta
	offsetDelta := r.Varint()
	key := r.VarintBytes()
	value := r.VarintBytes()
	headers := r.Varint()
	if !r.Ok() || len(r.Src) != 0 {
		return zero, fmt.Errorf("record does not fill its %d bytes: %w", recLen, ErrCorrupt)
	}
	if offsetDelta != 0 || headers != 0 {
		return zero, fmt.Errorf("record offset delta %d and %d headers, want 0 and 0: %w", offsetDelta, headers, ErrCorrupt)
	}
	if len(key) != 4 {
		return zero, fmt.Errorf("control record key of %d bytes, want 4: %w", len(key), ErrNotBarrier)
	}
	if v, t := int16(binary.BigEndian.Uint16(key)), int16(binary.BigEndian.Uint16(key[2:])); v != 0 || t != ControlType {
		return zero, fmt.Errorf("control record key version %d type %d, want version 0 type %d: %w", v, t, ControlType, ErrNotBarrier)
	}
	if value == nil {
		return zero, fmt.Errorf("barrier record has a null value: %w", ErrCorrupt)
	}
	dv, err := statestore.DecodeValue(statestore.TypePIDReset, value)
	if err != nil {
		return zero, fmt.Errorf("barrier value: %w", err)
	}
	return dv.(statestore.PIDResetValue), nil
}
