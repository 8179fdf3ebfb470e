package fetcher

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/transform"
)

// spec describes one uncompressed v2 batch for mkBatch.
type spec struct {
	base    int64
	n       int   // records (ignored for control batches: one marker record)
	pid     int64 // -1: no producer ID
	txn     bool
	control int16 // -1: data batch, else the control type (0 ABORT, 1 COMMIT)
}

func data(base int64, n int, pid int64, txn bool) spec {
	return spec{base: base, n: n, pid: pid, txn: txn, control: -1}
}

func marker(base, pid int64, typ int16) spec {
	return spec{base: base, n: 1, pid: pid, txn: true, control: typ}
}

// mkBatch encodes s as a v2 batch with a correct CRC. Record values name
// their offset, so that tests can tell batches apart.
func mkBatch(s spec) []byte {
	var recs []byte
	n := s.n
	attrs := int16(0)
	if s.txn {
		attrs |= transform.AttrTransactional
	}
	if s.control >= 0 {
		attrs |= transform.AttrControl
		n = 1
		key := binary.BigEndian.AppendUint16([]byte{0, 0}, uint16(s.control))
		val := []byte{0, 0, 0, 0, 0, 1} // version 0, coordinator epoch 1
		recs = appendRecord(recs, 0, key, val)
	} else {
		for i := range n {
			recs = appendRecord(recs, int32(i), []byte("k"), fmt.Appendf(nil, "v%d", s.base+int64(i)))
		}
	}
	seq := int32(-1)
	epoch := int16(-1)
	if s.pid >= 0 {
		seq, epoch = 0, 0
	}
	b := kmsg.RecordBatch{
		FirstOffset:          s.base,
		PartitionLeaderEpoch: 0,
		Magic:                2,
		Attributes:           attrs,
		LastOffsetDelta:      int32(n - 1),
		FirstTimestamp:       1000,
		MaxTimestamp:         1000,
		ProducerID:           s.pid,
		ProducerEpoch:        epoch,
		FirstSequence:        seq,
		NumRecords:           int32(n),
		Records:              recs,
	}
	b.Length = int32(transform.BatchHeaderSize - 12 + len(recs))
	raw := b.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return raw
}

func appendRecord(dst []byte, delta int32, key, val []byte) []byte {
	r := kmsg.Record{OffsetDelta: delta, Key: key, Value: val}
	body := r.AppendTo(nil)[1:] // without the zero length varint
	r.Length = int32(len(body))
	return r.AppendTo(dst)
}

func concat(specs ...spec) []byte {
	var b []byte
	for _, s := range specs {
		b = append(b, mkBatch(s)...)
	}
	return b
}

// delivered lists the base offsets of the delivered batches.
func delivered(f filtered) []int64 {
	var offs []int64
	for _, b := range f.Batches {
		offs = append(offs, b.Header.BaseOffset)
	}
	return offs
}

// Guards the READ_COMMITTED filter: the same decisions as Kafka's
// CompletedFetch for every arrangement of data, markers and aborted txns.
func TestFilterRecords(t *testing.T) {
	for _, tc := range []struct {
		name      string
		records   []byte
		aborted   []abortedTxn
		start     int64
		want      []int64 // base offsets delivered
		end       int64
		nAborted  int
		truncated bool
	}{
		{
			name:    "plain and idempotent batches",
			records: concat(data(0, 3, -1, false), data(3, 2, 7, false), data(5, 1, 7, false)),
			want:    []int64{0, 3, 5}, end: 6,
		},
		{
			name:    "committed transaction: data delivered, marker consumed",
			records: concat(data(0, 2, 5, true), data(2, 1, 5, true), marker(3, 5, controlCommit)),
			want:    []int64{0, 2}, end: 4,
		},
		{
			name: "aborted transaction interleaved with a committed one",
			records: concat(data(0, 3, 5, true), data(3, 1, 6, true), data(4, 2, 5, true),
				marker(6, 5, controlAbort), marker(7, 6, controlCommit), data(8, 1, -1, false)),
			aborted: []abortedTxn{{ProducerID: 5, FirstOffset: 0}},
			want:    []int64{3, 8}, end: 9, nAborted: 2,
		},
		{
			name: "abort marker takes the producer out of the set: its next transaction commits",
			records: concat(data(0, 1, 5, true), marker(1, 5, controlAbort),
				data(2, 2, 5, true), marker(4, 5, controlCommit)),
			aborted: []abortedTxn{{ProducerID: 5, FirstOffset: 0}},
			want:    []int64{2}, end: 5, nAborted: 1,
		},
		{
			name: "aborted txn starting after a committed one of the same producer",
			records: concat(data(0, 1, 5, true), marker(1, 5, controlCommit),
				data(2, 1, 5, true), marker(3, 5, controlAbort)),
			aborted: []abortedTxn{{ProducerID: 5, FirstOffset: 2}},
			want:    []int64{0}, end: 4, nAborted: 1,
		},
		{
			name: "aborted list out of order",
			records: concat(data(0, 1, 6, true), data(1, 1, 5, true), marker(2, 5, controlAbort),
				marker(3, 6, controlAbort), data(4, 1, 7, false)),
			aborted: []abortedTxn{{ProducerID: 5, FirstOffset: 1}, {ProducerID: 6, FirstOffset: 0}},
			want:    []int64{4}, end: 5, nAborted: 2,
		},
		{
			name:    "a non-transactional batch of an aborted producer ID is delivered",
			records: concat(data(0, 1, 5, true), data(1, 1, 5, false), marker(2, 5, controlAbort)),
			aborted: []abortedTxn{{ProducerID: 5, FirstOffset: 0}},
			want:    []int64{1}, end: 3, nAborted: 1,
		},
		{
			name:    "only control and aborted batches: End moves, nothing delivered",
			records: concat(data(0, 2, 5, true), marker(2, 5, controlAbort), marker(3, 9, controlCommit)),
			aborted: []abortedTxn{{ProducerID: 5, FirstOffset: 0}},
			end:     4, nAborted: 1,
		},
		{
			name:    "truncated trailing batch: End stops before it",
			records: concat(data(0, 2, -1, false), data(2, 3, -1, false))[:len(mkBatch(data(0, 2, -1, false)))+30],
			want:    []int64{0}, end: 2, truncated: true,
		},
		{
			name:    "only a truncated batch",
			records: mkBatch(data(10, 3, -1, false))[:70],
			start:   10, end: 10, truncated: true,
		},
		{
			name:    "batch below start skipped, batch straddling start delivered whole",
			records: concat(data(0, 2, -1, false), data(2, 3, -1, false), data(5, 1, -1, false)),
			start:   3,
			want:    []int64{2, 5}, end: 6,
		},
		{
			name:    "empty records",
			records: nil, start: 42, end: 42,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := filterRecords(tc.records, tc.aborted, tc.start, true)
			if got.Err != nil {
				t.Fatalf("error: %v", got.Err)
			}
			if !slices.Equal(delivered(got), tc.want) || got.End != tc.end || got.Aborted != tc.nAborted || (got.Truncated > 0) != tc.truncated {
				t.Errorf("delivered %v end %d aborted %d truncated %d; want %v end %d aborted %d truncated %v",
					delivered(got), got.End, got.Aborted, got.Truncated, tc.want, tc.end, tc.nAborted, tc.truncated)
			}
			for i, b := range got.Batches {
				if b.Header.Control() {
					t.Errorf("control batch at %d delivered", b.Header.BaseOffset)
				}
				if !bytes.Equal(b.Raw, mkBatchAt(tc.records, b.Header.BaseOffset)) {
					t.Errorf("batch %d: raw bytes are not the source batch", i)
				}
				if cap(b.Raw) != len(b.Raw) {
					t.Errorf("batch %d: capacity %d beyond its end %d", i, cap(b.Raw), len(b.Raw))
				}
			}
		})
	}
}

// mkBatchAt finds the batch with the given base offset in records.
func mkBatchAt(records []byte, base int64) []byte {
	raws, _, _ := transform.Split(records, nil)
	for _, r := range raws {
		if int64(binary.BigEndian.Uint64(r)) == base {
			return r
		}
	}
	return nil
}

// Guards the errors of the filter: a malformed batch, a CRC mismatch (only
// with CRC checks), a malformed control key, a legacy message set; the good
// batches before the bad one still count and End stops at the bad one.
func TestFilterRecordsErrors(t *testing.T) {
	good := concat(data(0, 2, -1, false), marker(2, 5, controlCommit))
	third := mkBatch(data(3, 2, -1, false))
	flip := func(b []byte, pos int) []byte {
		b = slices.Clone(b)
		b[pos] ^= 0xff
		return b
	}
	badKey := mkBatch(marker(3, 5, controlCommit))
	// The control key length varint sits after length, attributes,
	// timestamp delta and offset delta (one byte each here): make it 1.
	badKey[transform.BatchHeaderSize+4] = 2 // zigzag 1
	binary.BigEndian.PutUint32(badKey[17:], crc32.Checksum(badKey[21:], crc32.MakeTable(crc32.Castagnoli)))

	for _, tc := range []struct {
		name      string
		records   []byte
		checkCRCs bool
		wantErr   error // nil: no error
		check     string
	}{
		{"bad magic", append(slices.Clone(good), flip(third, 16)...), false, transform.ErrCorrupt, transform.CheckMagic},
		{"bad length", append(slices.Clone(good), flip(third, 8)...), false, transform.ErrCorrupt, transform.CheckLength},
		{"crc mismatch checked", append(slices.Clone(good), flip(third, len(third)-1)...), true, transform.ErrCorrupt, transform.CheckCRC},
		{"crc mismatch unchecked", append(slices.Clone(good), flip(third, len(third)-1)...), false, nil, ""},
		{"malformed control key", append(slices.Clone(good), badKey...), false, transform.ErrCorrupt, transform.CheckRecords},
		{"legacy message set", append(slices.Clone(good), withMagic(third, 1)...), false, transform.ErrUnsupportedMagic, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := filterRecords(tc.records, nil, 0, tc.checkCRCs)
			if tc.wantErr == nil {
				if got.Err != nil || got.End != 5 {
					t.Fatalf("err %v end %d, want no error and end 5", got.Err, got.End)
				}
				return
			}
			if !errors.Is(got.Err, tc.wantErr) {
				t.Fatalf("err %v, want %v", got.Err, tc.wantErr)
			}
			if !slices.Equal(delivered(got), []int64{0}) || got.End != 3 {
				t.Errorf("delivered %v end %d, want [0] and end 3 (the bad batch's offset)", delivered(got), got.End)
			}
			var ce *transform.CorruptError
			if tc.check != "" && (!errors.As(got.Err, &ce) || ce.Check != tc.check || ce.Offset != 3) {
				t.Errorf("err %#v, want a CorruptError of check %q at offset 3", got.Err, tc.check)
			}
		})
	}
}

func withMagic(b []byte, m byte) []byte {
	b = slices.Clone(b)
	b[16] = m
	return b
}

// Guards the filter against any input: no panic, no read outside the
// records, and its invariants.
func FuzzFilterRecords(f *testing.F) {
	f.Add(concat(data(0, 3, 5, true), marker(3, 5, controlAbort), data(4, 1, -1, false)), int64(0), int64(5), int64(0))
	f.Add(concat(data(0, 1, 5, true), marker(1, 5, controlCommit)), int64(1), int64(5), int64(7))
	f.Add(mkBatch(data(7, 2, -1, false))[:40], int64(7), int64(-1), int64(0))
	f.Fuzz(func(t *testing.T, records []byte, start, pid, first int64) {
		got := filterRecords(records, []abortedTxn{{ProducerID: pid, FirstOffset: first}}, start, true)
		if got.End < start {
			t.Fatalf("End %d below start %d", got.End, start)
		}
		prev := start
		for _, b := range got.Batches {
			if b.Header.Control() {
				t.Fatal("control batch delivered")
			}
			if b.Header.NextOffset() <= start || b.Header.NextOffset() > got.End {
				t.Fatalf("batch [%d, %d) outside [%d, %d)", b.Header.BaseOffset, b.Header.NextOffset(), start, got.End)
			}
			if b.Header.NextOffset() < prev {
				t.Fatal("batches out of order")
			}
			prev = b.Header.NextOffset()
			if transform.Validate(b.Raw) != nil {
				t.Fatal("delivered a batch that fails validation with CRC checks on")
			}
			if !bytes.Contains(records, b.Raw) {
				t.Fatal("batch is not part of the records")
			}
		}
		if got.Examined == 0 && got.End != start {
			t.Fatalf("End moved to %d without a batch examined", got.End)
		}
	})
}
