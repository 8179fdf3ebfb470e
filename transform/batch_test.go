package transform

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
)

// Test helpers for the batch codec. The encoder here is independent of the
// code under test: headers go through kmsg.RecordBatch.AppendTo, records
// through kmsg.Record.AppendTo, compression through kgo's compressor, and
// decoding through kfake.BatchRecords.

// testCodecs are the five codecs of attribute bits 0-2, by name.
var testCodecs = []struct {
	name  string
	codec int8
	kgo   kgo.CompressionCodec
}{
	{"none", 0, kgo.NoCompression()},
	{"gzip", 1, kgo.GzipCompression()},
	{"snappy", 2, kgo.SnappyCompression()},
	{"lz4", 3, kgo.Lz4Compression()},
	{"zstd", 4, kgo.ZstdCompression()},
}

// testCompressors are kgo's compressors by codec, made once (they pool
// their encoders).
var testCompressors = func() (cs [5]kgo.Compressor) {
	for _, c := range testCodecs[1:] {
		var err error
		if cs[c.codec], err = kgo.DefaultCompressor(c.kgo); err != nil {
			panic(fmt.Sprintf("kgo compressor %s: %v", c.name, err))
		}
	}
	return cs
}()

// appendTestRecord appends rec with its Length field computed.
func appendTestRecord(dst []byte, rec kmsg.Record) []byte {
	rec.Length = 0
	body := rec.AppendTo(nil)[1:] // a zero varint is one byte
	rec.Length = int32(len(body))
	return rec.AppendTo(dst)
}

// compressTest compresses raw with codec (0 returns raw).
func compressTest(t testing.TB, codec int8, raw []byte) []byte {
	t.Helper()
	if codec == 0 {
		return raw
	}
	out, used := testCompressors[codec].Compress(new(bytes.Buffer), raw)
	if int8(used) != codec {
		t.Fatalf("compressor used codec %d, want %d", used, codec)
	}
	return bytes.Clone(out)
}

// encodeTestBatch encodes a v2 batch with header h (Length, CRC and Magic
// are computed) and the given records, compressed with h.Compression().
func encodeTestBatch(t testing.TB, h Header, recs []kmsg.Record) []byte {
	t.Helper()
	var raw []byte
	for _, r := range recs {
		raw = appendTestRecord(raw, r)
	}
	return encodeTestBatchRaw(h, compressTest(t, h.Compression(), raw))
}

// encodeTestBatchRaw encodes a v2 batch around already encoded (and
// compressed) records.
func encodeTestBatchRaw(h Header, records []byte) []byte {
	kb := kmsg.RecordBatch{
		FirstOffset:          h.BaseOffset,
		Length:               int32(49 + len(records)),
		PartitionLeaderEpoch: h.PartitionLeaderEpoch,
		Magic:                2,
		Attributes:           h.Attributes,
		LastOffsetDelta:      h.LastOffsetDelta,
		FirstTimestamp:       h.FirstTimestamp,
		MaxTimestamp:         h.MaxTimestamp,
		ProducerID:           h.ProducerID,
		ProducerEpoch:        h.ProducerEpoch,
		FirstSequence:        h.BaseSequence,
		NumRecords:           h.NumRecords,
		Records:              records,
	}
	b := kb.AppendTo(nil)
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

// decodeTestBatch decodes b with kmsg and kfake, independently of the code
// under test.
func decodeTestBatch(t testing.TB, b []byte) (kmsg.RecordBatch, []kmsg.Record) {
	t.Helper()
	var kb kmsg.RecordBatch
	if err := kb.ReadFrom(b); err != nil {
		t.Fatalf("decode batch: %v", err)
	}
	recs, err := kfake.BatchRecords(kb)
	if err != nil {
		t.Fatalf("decode records of batch at offset %d: %v", kb.FirstOffset, err)
	}
	return kb, recs
}

// randomTestRecords returns n records with dense offset deltas, random keys
// (some null), values (some null, some empty, some compressible), headers and
// timestamp deltas; and the max timestamp delta.
func randomTestRecords(rng *rand.Rand, n int) ([]kmsg.Record, int64) {
	recs := make([]kmsg.Record, n)
	var maxTS int64
	for i := range recs {
		r := kmsg.NewRecord()
		r.OffsetDelta = int32(i)
		r.TimestampDelta64 = rng.Int64N(5000)
		r.TimestampDelta = int32(r.TimestampDelta64)
		maxTS = max(maxTS, r.TimestampDelta64)
		if rng.IntN(5) != 0 {
			r.Key = fmt.Appendf(nil, "key-%d", rng.IntN(50))
		}
		switch rng.IntN(6) {
		case 0: // null value (tombstone)
		case 1:
			r.Value = []byte{}
		case 2:
			r.Value = make([]byte, rng.IntN(300))
			for j := range r.Value {
				r.Value[j] = byte(rng.Uint32())
			}
		default:
			r.Value = []byte(strings.Repeat(fmt.Sprintf("value %d of a compressible record; ", i), 1+rng.IntN(8)))
		}
		for h := range rng.IntN(4) {
			hv := []byte(fmt.Sprintf("h%d", rng.IntN(100)))
			if rng.IntN(4) == 0 {
				hv = nil
			}
			r.Headers = append(r.Headers, kmsg.Header{Key: fmt.Sprintf("hk%d", h), Value: hv})
		}
		recs[i] = r
	}
	return recs, maxTS
}

// denseTestBatch builds a valid dense batch of n random records.
func denseTestBatch(t testing.TB, rng *rand.Rand, n int, codec int8, h Header) ([]byte, []kmsg.Record) {
	t.Helper()
	recs, maxTS := randomTestRecords(rng, n)
	h.Attributes = h.Attributes&^AttrCompressionMask | int16(codec)
	h.LastOffsetDelta = int32(n - 1)
	h.NumRecords = int32(n)
	h.MaxTimestamp = h.FirstTimestamp + maxTS
	return encodeTestBatch(t, h, recs), recs
}

// sameBytes compares two byte slices including null-ness, which Kafka
// distinguishes for keys, values and header values.
func sameBytes(a, b []byte) bool {
	return (a == nil) == (b == nil) && bytes.Equal(a, b)
}

// diffRecord says how got differs from want in content (key, value, headers,
// timestamp delta, attributes); offset deltas are compared by the caller.
func diffRecord(got, want kmsg.Record) string {
	var d []string
	if !sameBytes(got.Key, want.Key) {
		d = append(d, fmt.Sprintf("key %q != %q", got.Key, want.Key))
	}
	if !sameBytes(got.Value, want.Value) {
		d = append(d, fmt.Sprintf("value %q != %q", got.Value, want.Value))
	}
	if got.TimestampDelta64 != want.TimestampDelta64 {
		d = append(d, fmt.Sprintf("timestamp delta %d != %d", got.TimestampDelta64, want.TimestampDelta64))
	}
	if got.Attributes != want.Attributes {
		d = append(d, fmt.Sprintf("attributes %d != %d", got.Attributes, want.Attributes))
	}
	if len(got.Headers) != len(want.Headers) {
		d = append(d, fmt.Sprintf("%d headers != %d", len(got.Headers), len(want.Headers)))
	} else {
		for i := range got.Headers {
			if got.Headers[i].Key != want.Headers[i].Key || !sameBytes(got.Headers[i].Value, want.Headers[i].Value) {
				d = append(d, fmt.Sprintf("header %d %q=%q != %q=%q", i, got.Headers[i].Key, got.Headers[i].Value, want.Headers[i].Key, want.Headers[i].Value))
			}
		}
	}
	return strings.Join(d, "; ")
}

// sampleHeader is a header with every field distinct and non-zero.
var sampleHeader = Header{
	BaseOffset:           1_000_000_007,
	PartitionLeaderEpoch: 13,
	Magic:                2,
	Attributes:           AttrTransactional | 3,
	LastOffsetDelta:      4,
	FirstTimestamp:       1_700_000_000_000,
	MaxTimestamp:         1_700_000_000_900,
	ProducerID:           4242,
	ProducerEpoch:        7,
	BaseSequence:         100,
	NumRecords:           5,
}

func TestHeaderRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    Header
	}{
		// Guards the field layout with every field distinct and non-zero.
		{"all fields", sampleHeader},
		// Guards sign handling of the extremes of every field.
		{"extremes", Header{BaseOffset: math.MaxInt64, PartitionLeaderEpoch: -1, Magic: 2, Attributes: -1,
			LastOffsetDelta: math.MaxInt32, FirstTimestamp: math.MinInt64, MaxTimestamp: -1, ProducerID: math.MinInt64,
			ProducerEpoch: math.MinInt16, BaseSequence: math.MinInt32, NumRecords: -1}},
		// Guards a header of an empty batch (no records, not dense).
		{"empty batch", Header{Magic: 2, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := encodeTestBatchRaw(tc.h, []byte("records"))
			got, err := ParseHeader(b)
			if err != nil {
				t.Fatalf("ParseHeader: %v", err)
			}
			want := tc.h
			want.Length = int32(len(b) - 12)
			want.CRC = binary.BigEndian.Uint32(b[17:])
			if got != want {
				t.Fatalf("ParseHeader =\n%+v, want\n%+v", got, want)
			}
			var again [BatchHeaderSize]byte
			putHeader(again[:], got)
			if !bytes.Equal(again[:], b[:BatchHeaderSize]) {
				t.Fatalf("putHeader(ParseHeader(b)) = %x, want %x", again, b[:BatchHeaderSize])
			}
		})
	}
}

func TestHeaderAccessors(t *testing.T) {
	type want struct {
		txn, control bool
		codec        int8
		next         int64
		dense        bool
		lastSeq      int32
	}
	for _, tc := range []struct {
		name string
		h    Header
		want want
	}{
		// Guards the plain case: lz4, transactional, dense, no wrap.
		{"sample", sampleHeader, want{true, false, 3, 1_000_000_012, true, 104}},
		// Guards the control bit and a single-record batch.
		{"control", Header{BaseOffset: 9, Attributes: AttrControl | AttrTransactional, NumRecords: 1, BaseSequence: -1},
			want{true, true, 0, 10, true, -1}},
		// Guards that the timestamp-type bit is not read as compression.
		{"log append time zstd", Header{Attributes: AttrTimestampLogAppend | 4, LastOffsetDelta: 2, NumRecords: 3, BaseSequence: 0},
			want{false, false, 4, 3, true, 2}},
		// Guards Dense on what compaction leaves: fewer records than the offset range.
		{"compacted", Header{BaseOffset: 100, LastOffsetDelta: 9, NumRecords: 4, BaseSequence: 50},
			want{false, false, 0, 110, false, 59}},
		// Guards Dense against int32 overflow of LastOffsetDelta+1.
		{"max delta", Header{LastOffsetDelta: math.MaxInt32, NumRecords: math.MinInt32, BaseSequence: 0},
			want{false, false, 0, math.MaxInt32 + 1, false, math.MaxInt32}},
		// Guards Kafka's sequence wrap: MaxInt32 + 1 is 0.
		{"sequence wrap by one", Header{LastOffsetDelta: 1, NumRecords: 2, BaseSequence: math.MaxInt32},
			want{false, false, 0, 2, true, 0}},
		// Guards the sequence wrap landing past zero.
		{"sequence wrap", Header{LastOffsetDelta: 9, NumRecords: 10, BaseSequence: math.MaxInt32 - 3},
			want{false, false, 0, 10, true, 5}},
		// Guards the last sequence exactly at MaxInt32 (no wrap).
		{"sequence at max", Header{LastOffsetDelta: 3, NumRecords: 4, BaseSequence: math.MaxInt32 - 3},
			want{false, false, 0, 4, true, math.MaxInt32}},
		// Guards that a batch without sequence reports -1, not -1+delta.
		{"no sequence", Header{LastOffsetDelta: 3, NumRecords: 4, BaseSequence: -1},
			want{false, false, 0, 4, true, -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.h
			got := want{h.Transactional(), h.Control(), h.Compression(), h.NextOffset(), h.Dense(), h.LastSequence()}
			if got != tc.want {
				t.Fatalf("accessors = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestParseHeaderErrors(t *testing.T) {
	good := encodeTestBatchRaw(sampleHeader, nil)
	withMagic := func(m byte) []byte { b := bytes.Clone(good); b[16] = m; return b }
	for _, tc := range []struct {
		name string
		b    []byte
		is   error
		msg  string
	}{
		// Guards reading a header out of a buffer too short to hold one.
		{"short", good[:60], ErrTruncated, "60 bytes"},
		// Guards against decoding a legacy v1 message as a v2 header.
		{"magic 1", withMagic(1), ErrUnsupportedMagic, "magic 1 in batch at offset 1000000007"},
		// Guards against decoding a legacy v0 message as a v2 header.
		{"magic 0", withMagic(0), ErrUnsupportedMagic, "magic 0"},
		// Guards against decoding garbage with an unknown magic.
		{"magic 9", withMagic(9), ErrCorrupt, "offset 1000000007: magic check failed: magic byte is 9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseHeader(tc.b)
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("ParseHeader error = %v, want %v containing %q", err, tc.is, tc.msg)
			}
		})
	}
}

// threeTestBatches returns a buffer of three valid batches at offsets 0, 3 and
// 10 (the last one compressed), and the batches.
func threeTestBatches(t testing.TB) ([]byte, [][]byte) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	b1, _ := denseTestBatch(t, rng, 3, 0, Header{BaseOffset: 0, ProducerID: 1, BaseSequence: 0})
	b2, _ := denseTestBatch(t, rng, 7, 0, Header{BaseOffset: 3, ProducerID: 1, BaseSequence: 3})
	b3, _ := denseTestBatch(t, rng, 2, 1, Header{BaseOffset: 10, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1})
	return bytes.Join([][]byte{b1, b2, b3}, nil), [][]byte{b1, b2, b3}
}

func TestSplit(t *testing.T) {
	buf, batches := threeTestBatches(t)
	n1, n2 := len(batches[0]), len(batches[1])
	setLength := func(b []byte, at int, v int32) []byte {
		b = bytes.Clone(b)
		binary.BigEndian.PutUint32(b[at+8:], uint32(v))
		return b
	}
	setMagic := func(b []byte, at int, m byte) []byte { b = bytes.Clone(b); b[at+16] = m; return b }
	legacy := make([]byte, 30) // a v1 message: offset 77, size 18, crc, magic 1, ...
	binary.BigEndian.PutUint64(legacy, 77)
	binary.BigEndian.PutUint32(legacy[8:], 18)
	legacy[16] = 1

	for _, tc := range []struct {
		name      string
		buf       []byte
		want      int // number of batches
		truncated int
		is        error  // nil: no error
		msg       string // error text that must appear
	}{
		// Guards the end condition on an empty fetch.
		{"empty", nil, 0, 0, nil, ""},
		// Guards a single batch.
		{"one", batches[0], 1, 0, nil, ""},
		// Guards walking several batches back to back, compressed ones too.
		{"three", buf, 3, 0, nil, ""},
		// Guards a tail cut inside the offset/length prefix.
		{"tail of 5 bytes", buf[:n1+5], 1, 5, nil, ""},
		// Guards a tail that holds the length but not the magic.
		{"tail of 16 bytes", buf[:n1+16], 1, 16, nil, ""},
		// Guards a tail cut inside the header.
		{"tail of 40 bytes", buf[:n1+40], 1, 40, nil, ""},
		// Guards a tail cut one byte before the end of the last batch.
		{"tail one short", buf[:len(buf)-1], 2, len(batches[2]) - 1, nil, ""},
		// Guards a buffer that is only a partial batch.
		{"only a partial batch", buf[:n1-1], 0, n1 - 1, nil, ""},
		// Guards a length below the v2 minimum of 49 (would underflow the records).
		{"length 48", setLength(buf, n1, 48), 1, 0, ErrCorrupt,
			fmt.Sprintf("offset 3 (byte %d): length check failed: length field is 48", n1)},
		// Guards a negative length (would index backwards).
		{"negative length", setLength(buf, 0, -5), 0, 0, ErrCorrupt, "offset 0 (byte 0): length check failed: length field is -5"},
		// Guards a negative length in a tail too short for the magic.
		{"negative length in short tail", setLength(buf[:n1+14], n1, -1), 1, 0, ErrCorrupt, "length field is -1"},
		// Guards an absurd length taken for a batch cut at the fetch limit.
		{"absurd length", setLength(buf, n1+n2, math.MaxInt32), 2, 0, ErrCorrupt,
			fmt.Sprintf("offset 10 (byte %d): length check failed: length field is 2147483647, more than", n1+n2)},
		// Guards a length that swallows the next batch's bytes into a wrong frame: it
		// must end up either as a truncated tail or an error, never read past the end.
		{"length past end", setLength(buf, n1+n2, int32(len(batches[2])+100)), 2, len(batches[2]), nil, ""},
		// Guards refusing legacy messages (magic 1) with the offset.
		{"magic 1 first", legacy, 0, 0, ErrUnsupportedMagic, "magic 1 in batch at offset 77 (byte 0)"},
		// Guards refusing legacy messages (magic 0) after good batches, with the position.
		{"magic 0 second", setMagic(buf, n1, 0), 1, 0, ErrUnsupportedMagic, fmt.Sprintf("magic 0 in batch at offset 3 (byte %d)", n1)},
		// Guards an unknown magic (garbage) as corruption naming the check.
		{"magic 3", setMagic(buf, n1+n2, 3), 2, 0, ErrCorrupt, "magic check failed: magic byte is 3"},
		// Guards garbage bytes: an error, not a panic.
		{"garbage", bytes.Repeat([]byte{0xA5}, 200), 0, 0, ErrCorrupt, "length field is -1515870811"},
		// Guards garbage after good batches.
		{"garbage tail", append(bytes.Clone(buf), bytes.Repeat([]byte{0x7F}, 100)...), 3, 0, ErrCorrupt,
			fmt.Sprintf("byte %d", len(buf))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := [][]byte{[]byte("kept")}
			got, truncated, err := Split(tc.buf, prefix)
			if tc.is == nil && err != nil {
				t.Fatalf("Split error: %v", err)
			}
			if tc.is != nil && (!errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.msg)) {
				t.Fatalf("Split error = %v, want %v containing %q", err, tc.is, tc.msg)
			}
			if len(got) != 1+tc.want || string(got[0]) != "kept" {
				t.Fatalf("Split returned %d batches after dst's 1, want %d (and dst kept)", len(got)-1, tc.want)
			}
			if truncated != tc.truncated {
				t.Fatalf("truncated = %d, want %d", truncated, tc.truncated)
			}
			var joined []byte
			for i, b := range got[1:] {
				if i < len(batches) && tc.is == nil && !bytes.Equal(b, batches[i]) {
					t.Fatalf("batch %d differs from the one encoded", i)
				}
				joined = append(joined, b...)
			}
			if tc.is == nil {
				joined = append(joined, tc.buf[len(tc.buf)-truncated:]...)
				if !bytes.Equal(joined, tc.buf) {
					t.Fatal("batches and truncated tail do not add up to the buffer")
				}
			}
		})
	}
}

// Guards the iterator contract: empty ends, ErrTruncated unwrapped with the
// tail as rest, and zero allocations on the happy path.
func TestNextBatch(t *testing.T) {
	buf, batches := threeTestBatches(t)
	rest := buf[:len(buf)-10]
	for i := range 2 {
		var b []byte
		var err error
		b, rest, err = NextBatch(rest)
		if err != nil || !bytes.Equal(b, batches[i]) {
			t.Fatalf("batch %d: err %v, equal %v", i, err, bytes.Equal(b, batches[i]))
		}
		if cap(b) != len(b) {
			t.Fatalf("batch %d has capacity %d past its end %d: an append would overwrite the next batch", i, cap(b), len(b))
		}
	}
	b, tail, err := NextBatch(rest)
	if err != ErrTruncated || b != nil || len(tail) != len(batches[2])-10 { //nolint:errorlint // NextBatch returns ErrTruncated itself, not wrapped (its doc says so); this checks that
		t.Fatalf("tail: batch %v, tail %d bytes, err %v; want nil, %d bytes, ErrTruncated", b, len(tail), err, len(batches[2])-10)
	}
	if b, rest, err := NextBatch(nil); b != nil || rest != nil || err != nil {
		t.Fatalf("NextBatch(nil) = %v, %v, %v", b, rest, err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		r := buf
		for len(r) > 0 {
			_, r, err = NextBatch(r)
			if err != nil {
				panic(err)
			}
		}
	})
	if allocs != 0 {
		t.Fatalf("NextBatch allocates %v times per buffer", allocs)
	}
}

func TestValidate(t *testing.T) {
	_, batches := threeTestBatches(t)
	good := batches[1]
	mod := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	for _, tc := range []struct {
		name string
		b    []byte
		is   error
		msg  string
	}{
		// Guards that a good batch passes (uncompressed and gzip).
		{"good", good, nil, ""},
		{"good gzip", batches[2], nil, ""},
		// Guards the magic check (garbage).
		{"magic 5", mod(func(b []byte) []byte { b[16] = 5; return b }), ErrCorrupt, "offset 3: magic check failed: magic byte is 5"},
		// Guards refusing a legacy message set.
		{"magic 1", mod(func(b []byte) []byte { b[16] = 1; return b }), ErrUnsupportedMagic, "magic 1 in batch at offset 3"},
		// Guards a length field that claims more bytes than the batch has.
		{"length too big", mod(func(b []byte) []byte { return b[:len(b)-1] }), ErrCorrupt,
			fmt.Sprintf("offset 3: length check failed: length field is %d, but %d bytes follow it", len(good)-12, len(good)-13)},
		// Guards a length field that claims fewer bytes (trailing junk).
		{"length too small", mod(func(b []byte) []byte { return append(b, 0) }), ErrCorrupt, "length check failed"},
		// Guards the minimum length of 49 even if it matches the buffer.
		{"length 40", mod(func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[8:], 40)
			return b
		}), ErrCorrupt, "length field is 40, a v2 batch has at least 49"},
		// Guards a buffer shorter than the header.
		{"short", good[:50], ErrCorrupt, "length check failed: batch is 50 bytes, shorter than the 61-byte header"},
		// Guards a buffer too short to hold even the base offset.
		{"tiny", good[:5], ErrCorrupt, "offset -1: length check failed"},
		// Guards the CRC over the records.
		{"record bit flip", mod(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), ErrCorrupt,
			"offset 3: crc check failed: stored crc 0x"},
		// Guards that the CRC covers the attributes (its first byte).
		{"attribute bit flip", mod(func(b []byte) []byte { b[22] ^= AttrTransactional; return b }), ErrCorrupt, "crc check failed"},
		// Guards that the CRC covers the producer ID (what Rewrite changes).
		{"producer id changed", mod(func(b []byte) []byte { b[50] ^= 0x80; return b }), ErrCorrupt, "crc check failed"},
		// Guards the stored CRC itself.
		{"crc changed", mod(func(b []byte) []byte { b[17] ^= 1; return b }), ErrCorrupt, "crc check failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(tc.b)
			if tc.is == nil {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("Validate error = %v, want %v containing %q", err, tc.is, tc.msg)
			}
			var ce *CorruptError
			if errors.Is(tc.is, ErrCorrupt) && (!errors.As(err, &ce) || ce.Pos != -1) {
				t.Fatalf("Validate error %v is not a *CorruptError with unknown position", err)
			}
		})
	}
}

// Guards CorruptError's message forms and that a caller may fill in Pos.
func TestCorruptErrorMessage(t *testing.T) {
	e := &CorruptError{Offset: 42, Pos: -1, Check: CheckCRC, Detail: "stored 0x1, computed 0x2"}
	if got, want := e.Error(), "corrupt record batch at offset 42: crc check failed: stored 0x1, computed 0x2"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	e.Pos = 4096
	wrapped := fmt.Errorf("fetch orders/3: %w", e)
	if got, want := wrapped.Error(), "fetch orders/3: corrupt record batch at offset 42 (byte 4096): crc check failed: stored 0x1, computed 0x2"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(wrapped, ErrCorrupt) {
		t.Fatal("wrapped CorruptError is not ErrCorrupt")
	}
}

func FuzzSplit(f *testing.F) {
	buf, _ := threeTestBatches(f)
	f.Add(buf)
	f.Add(buf[:len(buf)-7])
	f.Add(buf[:20])
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0}, 61))
	f.Fuzz(func(t *testing.T, buf []byte) {
		// Split sees a slice whose capacity ends at its length, so a read past
		// the end panics instead of silently reading spare capacity.
		buf = slices.Clip(buf)
		got, truncated, err := Split(buf, nil)
		pos := 0
		for i, b := range got {
			if len(b) < BatchHeaderSize {
				t.Fatalf("batch %d is %d bytes, shorter than a header", i, len(b))
			}
			if pos+len(b) > len(buf) || &b[0] != &buf[pos] {
				t.Fatalf("batch %d is not the bytes of buf at %d", i, pos)
			}
			if l := int(int32(binary.BigEndian.Uint32(b[8:]))); l != len(b)-12 {
				t.Fatalf("batch %d: length field %d, batch %d bytes", i, l, len(b))
			}
			if b[16] != 2 {
				t.Fatalf("batch %d has magic %d", i, b[16])
			}
			pos += len(b)
		}
		switch {
		case err != nil:
			if truncated != 0 {
				t.Fatalf("error %v with truncated %d", err, truncated)
			}
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupportedMagic) {
				t.Fatalf("error %v is neither ErrCorrupt nor ErrUnsupportedMagic", err)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("(byte %d)", pos)) {
				t.Fatalf("error %q does not name byte %d", err, pos)
			}
		case pos+truncated != len(buf):
			t.Fatalf("batches cover %d bytes and the tail %d, buffer is %d", pos, truncated, len(buf))
		}
		// NextBatch agrees with Split.
		rest := buf
		for i := range got {
			var b []byte
			b, rest, _ = NextBatch(rest)
			if !bytes.Equal(b, got[i]) {
				t.Fatalf("NextBatch batch %d differs from Split's", i)
			}
		}
	})
}

func FuzzParseHeader(f *testing.F) {
	f.Add(int64(1), int32(2), int16(3), int32(4), int64(5), int64(6), int64(7), int16(8), int32(9), int32(10), []byte("r"))
	f.Add(int64(-1), int32(-1), int16(-1), int32(-1), int64(-1), int64(-1), int64(-1), int16(-1), int32(-1), int32(-1), []byte{})
	f.Fuzz(func(t *testing.T, base int64, epoch int32, attrs int16, lod int32, fts, mts, pid int64, pe int16, seq, n int32, recs []byte) {
		h := Header{BaseOffset: base, PartitionLeaderEpoch: epoch, Magic: 2, Attributes: attrs, LastOffsetDelta: lod,
			FirstTimestamp: fts, MaxTimestamp: mts, ProducerID: pid, ProducerEpoch: pe, BaseSequence: seq, NumRecords: n}
		b := encodeTestBatchRaw(h, recs)
		got, err := ParseHeader(b)
		if err != nil {
			t.Fatalf("ParseHeader: %v", err)
		}
		h.Length, h.CRC = int32(len(b)-12), binary.BigEndian.Uint32(b[17:])
		if got != h {
			t.Fatalf("ParseHeader = %+v, want %+v", got, h)
		}
		if err := Validate(b); err != nil {
			t.Fatalf("Validate of an encoded batch: %v", err)
		}
		again := make([]byte, BatchHeaderSize)
		putHeader(again, got)
		if !bytes.Equal(again, b[:BatchHeaderSize]) {
			t.Fatal("putHeader does not reproduce the encoded header")
		}
		// Any header-sized prefix of garbage parses or errors, never panics.
		if _, err := ParseHeader(recs); err == nil && len(recs) < BatchHeaderSize {
			t.Fatalf("ParseHeader accepted %d bytes", len(recs))
		}
	})
}

// Helpers for tests against in-process kfake brokers.

// testTopic is a topic created on a test cluster.
type testTopic struct {
	name string
	id   [16]byte
}

func testCtx(t testing.TB) context.Context {
	t.Helper()
	// A generous deadline only so that a broken test cannot hang the run.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func createTestTopic(t testing.TB, cl *kgo.Client, name string, partitions int32, configs map[string]*string) testTopic {
	t.Helper()
	resp, err := kadm.NewClient(cl).CreateTopic(testCtx(t), partitions, 1, configs, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", name, err)
	}
	return testTopic{name: name, id: resp.ID}
}

// leaderOf returns the connection to the leader of the partition.
func leaderOf(t testing.TB, cl *kgo.Client, topic string, partition int32) *kgo.Broker {
	t.Helper()
	md, err := kadm.NewClient(cl).Metadata(testCtx(t), topic)
	if err != nil {
		t.Fatalf("metadata %s: %v", topic, err)
	}
	p, ok := md.Topics[topic].Partitions[partition]
	if !ok || p.Err != nil {
		t.Fatalf("metadata %s/%d: missing or %v", topic, partition, p.Err)
	}
	return cl.Broker(int(p.Leader))
}

// fetchedPartition is everything a READ_COMMITTED raw fetch of a partition
// returned, from an offset to the last stable offset.
type fetchedPartition struct {
	batches [][]byte
	aborted []kmsg.FetchResponseTopicPartitionAbortedTransaction
}

// fetchRaw reads the raw batches of a partition with kmsg.FetchRequest,
// READ_COMMITTED, from offset from up to the last stable offset. The request
// MaxBytes is the partition MaxBytes, so that kfake's request-level cut
// (DESIGN §11) never drops the aborted-transaction list.
func fetchRaw(t testing.TB, cl *kgo.Client, tp testTopic, partition int32, from int64) fetchedPartition {
	t.Helper()
	const partMax = 4 << 20
	var out fetchedPartition
	broker := leaderOf(t, cl, tp.name, partition)
	for range 1000 {
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID = -1
		req.MaxWaitMillis = 0
		req.MinBytes = 0
		req.MaxBytes = partMax
		req.IsolationLevel = 1
		req.SessionEpoch = -1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = tp.name, tp.id
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = partition, from, partMax
		rp.CurrentLeaderEpoch, rp.LogStartOffset = -1, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		kresp, err := broker.Request(testCtx(t), req)
		if err != nil {
			t.Fatalf("fetch %s/%d at %d: %v", tp.name, partition, from, err)
		}
		resp := kresp.(*kmsg.FetchResponse)
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			t.Fatalf("fetch %s/%d at %d: response has %d topics (error %d)", tp.name, partition, from, len(resp.Topics), resp.ErrorCode)
		}
		p := resp.Topics[0].Partitions[0]
		if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
			t.Fatalf("fetch %s/%d at %d: %v", tp.name, partition, from, err)
		}
		out.aborted = append(out.aborted, p.AbortedTransactions...)
		batches, truncated, err := Split(p.RecordBatches, nil)
		if err != nil || truncated != 0 {
			t.Fatalf("split fetch of %s/%d at %d: truncated %d, %v", tp.name, partition, from, truncated, err)
		}
		for _, b := range batches {
			h, err := ParseHeader(b)
			if err != nil {
				t.Fatalf("fetched batch of %s/%d: %v", tp.name, partition, err)
			}
			from = h.NextOffset()
		}
		out.batches = append(out.batches, batches...)
		if from >= p.LastStableOffset {
			return out
		}
		if len(batches) == 0 {
			t.Fatalf("fetch %s/%d at %d returned nothing below the last stable offset %d", tp.name, partition, from, p.LastStableOffset)
		}
	}
	t.Fatalf("fetch %s/%d did not reach the end", tp.name, partition)
	return out
}

// committedData drops control batches and batches of aborted transactions,
// as a READ_COMMITTED consumer does with the fetch response's aborted list.
func committedData(t testing.TB, f fetchedPartition) [][]byte {
	t.Helper()
	open := map[int64]bool{} // producer ID -> inside an aborted transaction
	next := 0
	aborted := slices.Clone(f.aborted)
	slices.SortFunc(aborted, func(a, b kmsg.FetchResponseTopicPartitionAbortedTransaction) int {
		return cmp.Compare(a.FirstOffset, b.FirstOffset)
	})
	var out [][]byte
	for _, b := range f.batches {
		h := mustHeader(t, b)
		for next < len(aborted) && aborted[next].FirstOffset <= h.NextOffset()-1 {
			open[aborted[next].ProducerID] = true
			next++
		}
		switch {
		case h.Control():
			delete(open, h.ProducerID) // the abort (or commit) marker ends it
		case h.Transactional() && open[h.ProducerID]:
		default:
			out = append(out, b)
		}
	}
	return out
}

// produceRaw sends one batch to a partition with a raw kmsg.ProduceRequest
// (Topic and TopicID both set; kgo puts the client's acks, all, into it) and
// returns the partition's error.
func produceRaw(t testing.TB, cl *kgo.Client, tp testTopic, partition int32, batch []byte) error {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TimeoutMillis = 30_000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic, rt.TopicID = tp.name, tp.id
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = partition, batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	kresp, err := leaderOf(t, cl, tp.name, partition).Request(testCtx(t), req)
	if err != nil {
		t.Fatalf("produce to %s/%d: %v", tp.name, partition, err)
	}
	resp := kresp.(*kmsg.ProduceResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("produce to %s/%d: response has %d topics", tp.name, partition, len(resp.Topics))
	}
	p := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
		msg := ""
		if p.ErrorMessage != nil {
			msg = *p.ErrorMessage
		}
		return fmt.Errorf("produce to %s/%d: %w (%s)", tp.name, partition, err, msg)
	}
	return nil
}

// produceFlushed produces recs with a ManualFlushing client and flushes, so
// that the records of one call form one batch per partition.
func produceFlushed(t testing.TB, cl *kgo.Client, recs ...*kgo.Record) {
	t.Helper()
	ctx := testCtx(t)
	var mu sync.Mutex
	var errs []error
	for i, r := range recs {
		cl.Produce(ctx, r, func(r *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("record %q to %s/%d: %w", r.Key, r.Topic, r.Partition, err))
				mu.Unlock()
			}
		})
		if i == 0 {
			waitTopicLoaded(t, cl, r)
		}
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// waitTopicLoaded waits until cl's producer knows the partitions of r's
// topic. A record of a topic the client has not loaded waits outside any
// partition; if the metadata arrives while Flush runs, kgo moves the waiting
// records into the partition one by one and drains after each, so a flush can
// send them as two batches (the flake "source holds 4 batches, want 3").
// Loaded before the rest are produced, all of them join one batch.
func waitTopicLoaded(t testing.TB, cl *kgo.Client, r *kgo.Record) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		leader, _, err := cl.PartitionLeader(r.Topic, 0)
		if err != nil {
			t.Fatalf("load topic %s: %v", r.Topic, err)
		}
		if leader >= 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("client did not load topic %s within 10s", r.Topic)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// consumeTestRecords reads n records of topic with a kgo consumer
// (READ_COMMITTED, from the start) and returns them by partition.
func consumeTestRecords(t testing.TB, c *kfake.Cluster, topic string, n int) map[int32][]*kgo.Record {
	t.Helper()
	cl := kafkatest.Client(t, c, kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx := testCtx(t)
	out := map[int32][]*kgo.Record{}
	got := 0
	for got < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consume %s: %d of %d records before %v", topic, got, n, err)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("consume %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			out[r.Partition] = append(out[r.Partition], r)
			got++
		})
	}
	if got != n {
		t.Fatalf("consumed %d records of %s, want %d", got, topic, n)
	}
	return out
}

// diffKgoRecord says how a consumed record differs from the one produced:
// key, value, headers and timestamp.
func diffKgoRecord(got, want *kgo.Record) string {
	var d []string
	if !sameBytes(got.Key, want.Key) {
		d = append(d, fmt.Sprintf("key %q != %q", got.Key, want.Key))
	}
	if !sameBytes(got.Value, want.Value) {
		d = append(d, fmt.Sprintf("value %.40q != %.40q", got.Value, want.Value))
	}
	if !got.Timestamp.Equal(want.Timestamp) {
		d = append(d, fmt.Sprintf("timestamp %v != %v", got.Timestamp, want.Timestamp))
	}
	if len(got.Headers) != len(want.Headers) {
		d = append(d, fmt.Sprintf("%d headers != %d", len(got.Headers), len(want.Headers)))
	} else {
		for i := range got.Headers {
			if got.Headers[i].Key != want.Headers[i].Key || !sameBytes(got.Headers[i].Value, want.Headers[i].Value) {
				d = append(d, fmt.Sprintf("header %d differs", i))
			}
		}
	}
	return strings.Join(d, "; ")
}
