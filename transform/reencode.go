package transform

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// minRecordSize is the smallest encoded record: one byte each for the length,
// attributes, timestamp delta, offset delta, key length, value length and
// header count.
const minRecordSize = 7

// OffsetMap maps one record of a re-encoded batch back to the source.
type OffsetMap struct {
	Source int64 // the record's offset at the source: base offset + original offset delta
	Delta  int32 // its offset delta in the re-encoded batch (its index)
}

// Reencoder rebuilds batches that compaction left with offset gaps (the slow
// path of DESIGN §5). It holds kgo's decompressor, one kgo compressor per
// codec (made on first use) and scratch buffers, so that repeated calls
// allocate little. A Reencoder is for one goroutine at a time.
type Reencoder struct {
	dec  kgo.Decompressor
	dbuf *decompBuf        // what dec decompresses into
	comp [5]kgo.Compressor // by codec; index 0 stays nil
	raw  []byte            // re-encoded, uncompressed records
	zbuf bytes.Buffer      // compressor output
	hs   []Header          // Merge's headers of its batches
}

// keepScratch is the most capacity a Reencoder keeps in each of its scratch
// buffers from one call to the next. Ordinary batches (up to Kafka's
// default max.message.bytes of 1 MiB, joined runs up to coalesce_bytes)
// stay well below it and reuse their buffers; a buffer that one unusually
// large batch grew past it is let go when the call ends, so that a batch
// of tens of MiB does not stay in memory, once per Reencoder, for the rest
// of the agent's life. A variable for the test, which lowers it.
var keepScratch = 8 << 20

// release lets go of the scratch buffers a call grew past keepScratch. It
// runs when a call ends: nothing a call returns aliases them.
func (r *Reencoder) release() {
	if cap(r.dbuf.b) > keepScratch {
		r.dbuf.b = nil
	}
	if cap(r.raw) > keepScratch {
		r.raw = nil
	}
	if r.zbuf.Cap() > keepScratch {
		r.zbuf = bytes.Buffer{}
	}
}

// NewReencoder returns a Reencoder.
func NewReencoder() *Reencoder {
	d := &decompBuf{}
	return &Reencoder{dec: kgo.DefaultDecompressor(d), dbuf: d}
}

// decompBuf is the one buffer a Reencoder's decompressor writes into, as
// kgo's PoolDecompressBytes: without it kgo's decompressor gives every
// call a fresh copy of its output (lz4 and gzip) or a fresh allocation
// (zstd and snappy), which was a tenth of the CPU of joining small lz4
// batches at 1,000 partitions. It is a pool of one: the Reencoder is for
// one goroutine at a time, and every caller is done with the decompressed
// records (copied them, or only read them) before the next decompression.
type decompBuf struct{ b []byte }

// GetDecompressBytes gives the buffer (only its capacity counts).
func (d *decompBuf) GetDecompressBytes([]byte, kgo.CompressionCodecType) []byte { return d.b[:0] }

// PutDecompressBytes takes the buffer back: kgo's decompressor calls it
// when a decompression failed.
func (d *decompBuf) PutDecompressBytes(b []byte) { d.b = b[:0] }

// decompress gives the records of batch b (header h) uncompressed: b's own
// bytes when b is uncompressed, otherwise the Reencoder's buffer, valid
// until its next decompression.
func (r *Reencoder) decompress(b []byte, h Header) ([]byte, error) {
	codec := h.Compression()
	raw, err := r.dec.Decompress(b[BatchHeaderSize:], kgo.CompressionCodecType(codec))
	if err != nil {
		return nil, corrupt(b, -1, CheckCodec, "decompress %s records: %v", codecNames[codec], err)
	}
	if codec != 0 {
		r.dbuf.b = raw[:0] // keep what the codec grew
	}
	return raw, nil
}

var (
	kgoCodecs = [5]kgo.CompressionCodec{
		kgo.NoCompression(), kgo.GzipCompression(), kgo.SnappyCompression(), kgo.Lz4Compression(), kgo.ZstdCompression(),
	}
	codecNames = [5]string{"uncompressed", "gzip", "snappy", "lz4", "zstd"}
)

// Reencode rebuilds batch b, which must have passed Validate (Reencode would
// otherwise give damaged bytes a fresh CRC), into a dense batch that a broker
// accepts from a client, appended to dst[:0] (dst's capacity is reused; dst may
// share memory with b, as Reencode reads all of b before it writes):
//
//   - records decompressed with kgo's decompressor, parsed as kmsg.Record and
//     renumbered densely: offset deltas 0..n-1;
//   - timestamp deltas, keys, values, headers and record attributes as they
//     were (timestamps stay relative to the original firstTimestamp);
//   - recompressed with the same codec through kgo's compressor, which keeps
//     the codec even when the output is larger;
//   - header: baseOffset 0, partitionLeaderEpoch -1, attributes without
//     AttrTransactional, lastOffsetDelta n-1, the same first and max
//     timestamps, producer ID pid, the same epoch and base sequence, count n,
//     and a fresh length and CRC.
//
// offsets[i] gives record i's source offset (source base offset + original
// delta) and new delta i; the slice is newly allocated and the caller's.
//
// A control batch is refused with ErrControlBatch, a batch without records
// with ErrEmptyBatch (brokers refuse it from clients; it carries nothing to
// mirror). Records that do not decode give a *CorruptError (CheckCodec or
// CheckRecords) naming the base offset.
func (r *Reencoder) Reencode(dst []byte, b []byte, pid int64) (out []byte, offsets []OffsetMap, err error) {
	return r.ReencodeFrom(dst, b, pid, math.MinInt64)
}

// ReencodeFrom is Reencode keeping only the records at offset from or later.
// A fetch that starts inside a batch (after the log start moved past part of
// it, or a start position from ListOffsets) gets the whole batch back;
// Kafka consumers drop the records before their position, and so does the
// mirror. It returns ErrEmptyBatch when no record is left.
func (r *Reencoder) ReencodeFrom(dst []byte, b []byte, pid int64, from int64) (out []byte, offsets []OffsetMap, err error) {
	defer r.release()
	h, err := ParseHeader(b)
	if err != nil {
		return nil, nil, err
	}
	if int64(h.Length) != int64(len(b))-LengthOverhead {
		return nil, nil, corrupt(b, -1, CheckLength, "length field is %d, but %d bytes follow it", h.Length, len(b)-LengthOverhead)
	}
	if h.Control() {
		return nil, nil, fmt.Errorf("%w: batch at offset %d", ErrControlBatch, h.BaseOffset)
	}
	if h.NumRecords == 0 {
		return nil, nil, fmt.Errorf("%w: batch at offset %d (offsets %d..%d)", ErrEmptyBatch, h.BaseOffset, h.BaseOffset, h.NextOffset()-1)
	}
	codec := h.Compression()
	if codec > 4 {
		return nil, nil, corrupt(b, -1, CheckCodec, "unknown compression codec %d", codec)
	}
	raw, err := r.decompress(b, h)
	if err != nil {
		return nil, nil, err
	}
	offsets, err = r.renumber(b, h, raw, from)
	if err != nil {
		return nil, nil, err
	}
	if len(offsets) == 0 {
		return nil, nil, fmt.Errorf("%w: no record of the batch at offset %d is at or after offset %d", ErrEmptyBatch, h.BaseOffset, from)
	}

	n := int32(len(offsets))
	out, err = r.seal(dst, Header{
		Attributes:      h.Attributes &^ AttrTransactional,
		LastOffsetDelta: n - 1,
		FirstTimestamp:  h.FirstTimestamp,
		MaxTimestamp:    h.MaxTimestamp,
		ProducerID:      pid,
		ProducerEpoch:   h.ProducerEpoch,
		BaseSequence:    h.BaseSequence,
		NumRecords:      n,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("re-encode batch at offset %d: %w", h.BaseOffset, err)
	}
	return out, offsets, nil
}

// seal builds a batch from the records in r.raw (uncompressed, offset
// deltas dense from 0) and header h, appended to dst[:0]: the records
// compressed with h's codec through kgo's compressor (which keeps the codec
// even when the output is larger), base offset 0, partition leader epoch
// -1, magic 2, a fresh length and CRC; the other fields as h gives them.
func (r *Reencoder) seal(dst []byte, h Header) ([]byte, error) {
	codec := h.Compression()
	records := r.raw
	if codec != 0 {
		c := r.comp[codec]
		if c == nil {
			var err error
			if c, err = kgo.DefaultCompressor(kgoCodecs[codec]); err != nil {
				return nil, fmt.Errorf("%s compressor: %w", codecNames[codec], err)
			}
			r.comp[codec] = c
		}
		r.zbuf.Reset()
		var used kgo.CompressionCodecType
		records, used = c.Compress(&r.zbuf, r.raw)
		if int8(used) != codec {
			return nil, fmt.Errorf("recompress: compressor used codec %d, want %s", used, codecNames[codec])
		}
	}
	size := BatchHeaderSize + len(records)
	if size-LengthOverhead > math.MaxInt32 {
		return nil, fmt.Errorf("%d bytes, too large for a batch", size)
	}
	h.BaseOffset, h.Length, h.PartitionLeaderEpoch, h.Magic = 0, int32(size-LengthOverhead), -1, 2
	if cap(dst) < size {
		dst = make([]byte, 0, size) // one allocation, of the batch's size
	}
	out := append(dst[:0], make([]byte, BatchHeaderSize)...)
	putHeader(out, h)
	out = append(out, records...)
	binary.BigEndian.PutUint32(out[PosCRC:], crc32.Checksum(out[PosAttributes:], crcTable))
	return out, nil
}

// MinTimestamp returns the earliest create time among the records of batch
// b (which must have passed Validate): its first timestamp plus the
// smallest timestamp delta of its records, the earliest timestamp a
// consumer of a CreateTime topic holding b sees. A batch without records
// gives ErrEmptyBatch; records that do not decode a *CorruptError.
func (r *Reencoder) MinTimestamp(b []byte) (int64, error) {
	defer r.release()
	h, err := ParseHeader(b)
	if err != nil {
		return 0, err
	}
	if h.NumRecords <= 0 {
		return 0, fmt.Errorf("%w: batch at offset %d", ErrEmptyBatch, h.BaseOffset)
	}
	codec := h.Compression()
	if codec > 4 {
		return 0, corrupt(b, -1, CheckCodec, "unknown compression codec %d", codec)
	}
	raw, err := r.decompress(b, h)
	if err != nil {
		return 0, err
	}
	rec := kmsg.NewRecord()
	least := int64(math.MaxInt64)
	for i := range int(h.NumRecords) {
		length, n := kbin.Varint(raw)
		if n <= 0 || length < 0 || int(length) > len(raw)-n {
			return 0, corrupt(b, -1, CheckRecords, "record %d of %d: bad length prefix", i, h.NumRecords)
		}
		if err := rec.ReadFrom(raw[:n+int(length)]); err != nil {
			return 0, corrupt(b, -1, CheckRecords, "record %d of %d: %v", i, h.NumRecords, err)
		}
		raw = raw[n+int(length):]
		least = min(least, rec.TimestampDelta64)
	}
	return h.FirstTimestamp + least, nil
}

// renumber parses the NumRecords records of raw (the batch's decompressed
// records) into r.raw with dense offset deltas, leaving out records before
// offset from, and returns the offset map of those kept.
func (r *Reencoder) renumber(b []byte, h Header, raw []byte, from int64) ([]OffsetMap, error) {
	r.raw = r.raw[:0]
	// The header's count is not trusted for the allocation: a batch that
	// claims 2^30 records (TestReencodeErrors' "count too large") asked
	// for 16 GiB, which the race detector's runtime touched and the
	// kernel killed the test binary for (CI, 23 GB RSS).
	rn := renumbering{keep: true, offsets: make([]OffsetMap, 0, min(max(int(h.NumRecords), 0), len(raw)/minRecordSize))}
	if err := r.reframe(b, h, raw, from, 0, &rn); err != nil {
		return nil, err
	}
	return rn.offsets, nil
}

// renumbering is where reframe numbers records on: the next record's new
// offset delta, and (when keep) the offset map of the records so far.
type renumbering struct {
	n       int32
	offsets []OffsetMap
	keep    bool
}

// reframe appends the records of raw (batch b's decompressed records,
// header h) at or after offset from to r.raw, numbered on from rn.n and
// with their timestamp deltas moved by shift, and (when rn.keep) appends
// each one's source offset and new delta to rn.offsets. Every record is
// checked, kept or not.
func (r *Reencoder) reframe(b []byte, h Header, raw []byte, from, shift int64, rn *renumbering) error {
	if h.NumRecords < 0 || int64(h.NumRecords) > int64(len(raw)/minRecordSize) {
		return corrupt(b, -1, CheckRecords, "%d records cannot fit in %d bytes", h.NumRecords, len(raw))
	}
	prev := int32(-1)
	for i := range int(h.NumRecords) {
		length, n := kbin.Varint(raw)
		if n <= 0 || length < 0 || int(length) > len(raw)-n {
			return corrupt(b, -1, CheckRecords, "record %d of %d: bad length prefix", i, h.NumRecords)
		}
		one := raw[n : n+int(length)]
		raw = raw[n+int(length):]
		// A record is its attributes, its timestamp and offset deltas,
		// and a tail (key, value, headers) that re-framing copies as
		// it is: only the deltas are decoded and written anew, and the
		// tail is walked field by field to check that it fills the
		// length exactly, without decoding it into values (no
		// allocation per record).
		if len(one) < 1 {
			return corrupt(b, -1, CheckRecords, "record %d of %d: empty", i, h.NumRecords)
		}
		attrs := one[0]
		oldTS, tn := kbin.Varlong(one[1:])
		if tn <= 0 {
			return corrupt(b, -1, CheckRecords, "record %d of %d: bad timestamp delta", i, h.NumRecords)
		}
		oldDelta, dn := kbin.Varint(one[1+tn:])
		if dn <= 0 {
			return corrupt(b, -1, CheckRecords, "record %d of %d: bad offset delta", i, h.NumRecords)
		}
		tail := one[1+tn+dn:]
		if err := checkRecordTail(tail); err != nil {
			return corrupt(b, -1, CheckRecords, "record %d of %d: %v (its fields do not fill its length of %d bytes)", i, h.NumRecords, err, length)
		}
		if oldDelta <= prev || oldDelta > h.LastOffsetDelta {
			return corrupt(b, -1, CheckRecords, "record %d of %d: offset delta %d after %d, last offset delta %d",
				i, h.NumRecords, oldDelta, prev, h.LastOffsetDelta)
		}
		prev = oldDelta
		if h.BaseOffset+int64(oldDelta) < from {
			continue // before the position: checked, not kept
		}
		kept := rn.n
		rn.n++
		ts := oldTS + shift
		r.raw = kbin.AppendVarint(r.raw, int32(1+kbin.VarlongLen(ts)+kbin.VarintLen(kept)+len(tail)))
		r.raw = append(r.raw, attrs)
		r.raw = kbin.AppendVarlong(r.raw, ts)
		r.raw = kbin.AppendVarint(r.raw, kept)
		r.raw = append(r.raw, tail...)
		if rn.keep {
			rn.offsets = append(rn.offsets, OffsetMap{Source: h.BaseOffset + int64(oldDelta), Delta: kept})
		}
	}
	if len(raw) != 0 {
		return corrupt(b, -1, CheckRecords, "%d bytes after the last of %d records", len(raw), h.NumRecords)
	}
	return nil
}

// checkRecordTail checks that a record's tail (after its offset delta) is
// exactly a key, a value and headers, each length within the bytes left,
// as a consumer decodes them (kmsg.Record.ReadFrom), without decoding them.
func checkRecordTail(b []byte) error {
	field := func(what string, null bool) error {
		n, k := kbin.Varint(b)
		switch {
		case k <= 0:
			return fmt.Errorf("bad %s length", what)
		case n == -1 && null:
			b = b[k:]
			return nil
		case n < 0 || int(n) > len(b)-k:
			return fmt.Errorf("%s length %d does not fit in %d bytes", what, n, len(b)-k)
		}
		b = b[k+int(n):]
		return nil
	}
	if err := field("key", true); err != nil {
		return err
	}
	if err := field("value", true); err != nil {
		return err
	}
	count, k := kbin.Varint(b)
	if k <= 0 || count < 0 || int(count) > len(b) {
		return fmt.Errorf("bad header count")
	}
	b = b[k:]
	for range count {
		if err := field("header key", false); err != nil {
			return err
		}
		if err := field("header value", true); err != nil {
			return err
		}
	}
	if len(b) != 0 {
		return fmt.Errorf("%d bytes after the headers", len(b))
	}
	return nil
}

// Record is one record of a batch, as Records decodes it: its offset and
// create time (absolute: the batch's base offset and first timestamp plus
// the record's deltas) and its content.
type Record struct {
	Offset    int64
	Timestamp int64
	Key       []byte // nil: a null key
	Value     []byte // nil: a null value (a tombstone)
	Headers   []kmsg.Header
}

// Same reports whether two records hold the same content: key, value,
// headers and create time (not their offsets).
func (a Record) Same(b Record) bool {
	if a.Timestamp != b.Timestamp || !bytesEqualNull(a.Key, b.Key) || !bytesEqualNull(a.Value, b.Value) || len(a.Headers) != len(b.Headers) {
		return false
	}
	for i, h := range a.Headers {
		if h.Key != b.Headers[i].Key || !bytesEqualNull(h.Value, b.Headers[i].Value) {
			return false
		}
	}
	return true
}

// bytesEqualNull is bytes.Equal that tells nil (a null field) from empty.
func bytesEqualNull(a, b []byte) bool {
	return (a == nil) == (b == nil) && string(a) == string(b)
}

// Records decodes the records of batch b (which must have passed Validate):
// decompressed, in order. The slow path's reader: reconciliation and offset
// translation use it to recognise a batch the source log changed after it
// was mirrored, never the pipeline. The records do not alias the
// Reencoder's buffers.
func (r *Reencoder) Records(b []byte) ([]Record, error) {
	defer r.release()
	h, err := ParseHeader(b)
	if err != nil {
		return nil, err
	}
	if h.Control() {
		return nil, fmt.Errorf("%w: batch at offset %d", ErrControlBatch, h.BaseOffset)
	}
	codec := h.Compression()
	if codec > 4 {
		return nil, corrupt(b, -1, CheckCodec, "unknown compression codec %d", codec)
	}
	raw, err := r.decompress(b, h)
	if err != nil {
		return nil, err
	}
	if h.NumRecords < 0 || int64(h.NumRecords) > int64(len(raw)/minRecordSize) {
		return nil, corrupt(b, -1, CheckRecords, "%d records cannot fit in %d bytes", h.NumRecords, len(raw))
	}
	raw = append([]byte(nil), raw...) // the records keep pointers into it
	out := make([]Record, 0, h.NumRecords)
	for i := range int(h.NumRecords) {
		length, n := kbin.Varint(raw)
		if n <= 0 || length < 0 || int(length) > len(raw)-n {
			return nil, corrupt(b, -1, CheckRecords, "record %d of %d: bad length prefix", i, h.NumRecords)
		}
		var rec kmsg.Record
		if err := rec.ReadFrom(raw[:n+int(length)]); err != nil {
			return nil, corrupt(b, -1, CheckRecords, "record %d of %d: %v", i, h.NumRecords, err)
		}
		raw = raw[n+int(length):]
		out = append(out, Record{
			Offset:    h.BaseOffset + int64(rec.OffsetDelta),
			Timestamp: h.FirstTimestamp + rec.TimestampDelta64,
			Key:       rec.Key, Value: rec.Value, Headers: rec.Headers,
		})
	}
	if len(raw) != 0 {
		return nil, corrupt(b, -1, CheckRecords, "%d bytes after the last of %d records", len(raw), h.NumRecords)
	}
	return out, nil
}
