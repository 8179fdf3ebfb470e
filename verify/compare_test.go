package verify

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/transform"
)

// Synthetic batches for the comparator, without clusters.
type tbatch struct {
	base  int64 // offset of the first record (source side; the destination is dense)
	pid   int64
	epoch int16
	seq   int32
	codec uint8
	txn   bool
	recs  []trec
	// deltas, if set, are the records' offset deltas (a batch the
	// source's cleaner left with gaps); nil: 0..n-1.
	deltas []int64
}

type trec struct {
	key, value []byte
	headers    []kgo.RecordHeader
	ts         int64
	logAppend  bool
	// created: the create time of a source record stamped with log
	// append time ts (what its mirror shows).
	created int64
}

func (b tbatch) clone() tbatch {
	b.recs = slices.Clone(b.recs)
	return b
}

var testRegion, _ = transform.RegionOf(kafkatest.SourceClusterID)

func trecs(prefix string, n int, ts int64) []trec {
	var rs []trec
	for i := range n {
		rs = append(rs, trec{
			key:     fmt.Appendf(nil, "%s-k%d", prefix, i),
			value:   fmt.Appendf(nil, "%s-v%d", prefix, i),
			headers: []kgo.RecordHeader{{Key: "h", Value: fmt.Appendf(nil, "%s%d", prefix, i)}},
			ts:      ts + int64(i),
		})
	}
	return rs
}

// sourceBatches is a source partition: an idempotent batch, then an
// aborted transaction and its marker (absent from a read_committed fetch:
// offsets 3–5), a plain batch, a committed transactional batch and its
// marker (offset 11), and a second batch of the idempotent producer.
func sourceBatches() []tbatch {
	return []tbatch{
		{base: 0, pid: 7, epoch: 0, seq: 0, codec: 3, recs: trecs("a", 3, 1000)},
		{base: 6, pid: -1, epoch: -1, seq: -1, codec: 1, recs: trecs("b", 2, 2000)},
		{base: 8, pid: 9, epoch: 2, seq: 0, codec: 4, txn: true, recs: trecs("c", 3, 3000)},
		{base: 12, pid: 7, epoch: 0, seq: 3, codec: 3, recs: trecs("d", 2, 4000)},
	}
}

// mirrorBatches is what mirrord makes of them.
func mirrorBatches(src []tbatch) []tbatch {
	var out []tbatch
	for _, b := range src {
		b = b.clone()
		b.pid = transform.MapPID(b.pid, testRegion)
		b.txn = false
		out = append(out, b)
	}
	return out
}

// flatten turns batches into records; dense numbers offsets from 0 as a
// destination broker does, otherwise each record is at its batch's base
// plus its offset delta.
func flatten(bs []tbatch, dense bool) []rec {
	var out []rec
	var next int64
	for _, b := range bs {
		for i, r := range b.recs {
			if !dense {
				next = b.base + int64(i)
				if b.deltas != nil {
					next = b.base + b.deltas[i]
				}
			}
			attrs := kgo.RecordAttrsOpts{Codec: kgo.CompressionCodecType(b.codec), Transactional: b.txn}
			if r.logAppend {
				attrs.TimestampType = 1
			}
			out = append(out, rec{
				appendTime: r.logAppend && !dense,
				mirrorTime: time.UnixMilli(r.created),
				Record: &kgo.Record{
					Key: r.key, Value: r.value, Headers: r.headers,
					Timestamp:     time.UnixMilli(r.ts),
					Attrs:         kgo.NewRecordAttrs(attrs),
					ProducerID:    b.pid,
					ProducerEpoch: b.epoch,
					Offset:        next,
				},
				baseSeq: b.seq,
				place:   int32(i),
			})
			next++
		}
	}
	return out
}

// sliceFeed yields recs two at a time, so that look-ahead crosses chunks.
func sliceFeed(recs []rec) feed {
	return func(context.Context) ([]rec, error) {
		if len(recs) == 0 {
			return nil, io.EOF
		}
		n := min(2, len(recs))
		chunk := recs[:n]
		recs = recs[n:]
		return chunk, nil
	}
}

// logAppendSource stamps batch 1 of the source with log append time.
func logAppendSource(bs []tbatch) []tbatch {
	for i := range bs[1].recs {
		r := &bs[1].recs[i]
		r.created, r.ts, r.logAppend = r.ts, 9000, true
	}
	return bs
}

// createTimesOf is what a destination broker makes of a mirrored batch of
// logAppendSource: a CreateTime batch with the records' create times.
func createTimesOf(bs []tbatch) []tbatch {
	for i := range bs[1].recs {
		r := &bs[1].recs[i]
		r.ts, r.logAppend = r.created, false
	}
	return bs
}

type wantDiff struct {
	field    string
	src, dst int64
}

func TestComparator(t *testing.T) {
	saltFor := func(pid int64, salt int64) func(tp.Partition, transform.Origin) (int64, bool) {
		return func(k tp.Partition, o transform.Origin) (int64, bool) {
			if k.Topic == "dst" && k.Partition == 0 && o == (transform.Origin{Cluster: kafkatest.SourceClusterID, PID: pid}) {
				return salt, true
			}
			return 0, false
		}
	}
	thirdRegion, _ := transform.RegionOf(kafkatest.ThirdClusterID)

	tests := []struct {
		name    string
		src     func([]tbatch) []tbatch // nil: sourceBatches unchanged
		dst     func([]tbatch) []tbatch // edits the mirror of the source
		salt    func(tp.Partition, transform.Origin) (int64, bool)
		max     int64
		want    *wantDiff
		records int64
		behind  int64
	}{
		{name: "exact mirror", records: 10},
		{name: "changed value", dst: func(bs []tbatch) []tbatch { bs[1].recs[1].value = []byte("x"); return bs },
			want: &wantDiff{FieldValue, 7, 4}},
		{name: "changed key", dst: func(bs []tbatch) []tbatch { bs[0].recs[2].key = []byte("x"); return bs },
			want: &wantDiff{FieldKey, 2, 2}},
		{name: "null key for empty key", src: func(bs []tbatch) []tbatch { bs[0].recs[0].key = []byte{}; return bs },
			dst: func(bs []tbatch) []tbatch { bs[0].recs[0].key = nil; return bs }, want: &wantDiff{FieldKey, 0, 0}},
		{name: "headers reordered", src: func(bs []tbatch) []tbatch {
			bs[2].recs[0].headers = []kgo.RecordHeader{{Key: "a", Value: []byte("1")}, {Key: "b"}}
			return bs
		}, dst: func(bs []tbatch) []tbatch {
			bs[2].recs[0].headers = []kgo.RecordHeader{{Key: "b"}, {Key: "a", Value: []byte("1")}}
			return bs
		}, want: &wantDiff{FieldHeaders, 8, 5}},
		{name: "null header value for empty", src: func(bs []tbatch) []tbatch {
			bs[2].recs[0].headers = []kgo.RecordHeader{{Key: "a", Value: []byte{}}}
			return bs
		}, dst: func(bs []tbatch) []tbatch { bs[2].recs[0].headers = []kgo.RecordHeader{{Key: "a"}}; return bs },
			want: &wantDiff{FieldHeaders, 8, 5}},
		{name: "timestamp", dst: func(bs []tbatch) []tbatch { bs[3].recs[1].ts++; return bs },
			want: &wantDiff{FieldTimestamp, 13, 9}},
		{name: "timestamp type", dst: func(bs []tbatch) []tbatch { bs[3].recs[0].logAppend = true; return bs },
			want: &wantDiff{FieldTimestamp, 12, 8}},
		{name: "log append time source", src: logAppendSource, dst: func(bs []tbatch) []tbatch {
			return createTimesOf(bs)
		}, records: 10},
		{name: "log append time source, append time kept", src: logAppendSource,
			want: &wantDiff{FieldTimestamp, 6, 3}},
		{name: "log append time source, append times as create times", src: logAppendSource, dst: func(bs []tbatch) []tbatch {
			for i := range bs[1].recs {
				bs[1].recs[i].logAppend = false
			}
			return bs
		}, want: &wantDiff{FieldTimestamp, 6, 3}},
		{name: "log append time source, record missing", src: logAppendSource, dst: func(bs []tbatch) []tbatch {
			bs = createTimesOf(bs)
			bs[1].recs = bs[1].recs[1:]
			return bs
		}, want: &wantDiff{FieldMissing, 6, -1}},
		{name: "record missing in the middle", dst: func(bs []tbatch) []tbatch {
			bs[0].recs = slices.Delete(bs[0].recs, 1, 2)
			return bs
		}, want: &wantDiff{FieldMissing, 1, -1}},
		{name: "batch missing", dst: func(bs []tbatch) []tbatch { return slices.Delete(bs, 1, 2) },
			want: &wantDiff{FieldMissing, 6, -1}},
		{name: "extra record", dst: func(bs []tbatch) []tbatch {
			bs[1].recs = slices.Insert(bs[1].recs, 0, trec{key: []byte("new")})
			return bs
		}, want: &wantDiff{FieldExtra, -1, 3}},
		{name: "extra record at the end", dst: func(bs []tbatch) []tbatch {
			return append(bs, tbatch{pid: -1, epoch: -1, seq: -1, recs: trecs("z", 1, 0)})
		}, records: 10, want: &wantDiff{FieldExtra, -1, 10}},
		{name: "batch duplicated", dst: func(bs []tbatch) []tbatch { return slices.Insert(bs, 2, bs[1].clone()) },
			want: &wantDiff{FieldExtra, -1, 5}},
		{name: "aborted batch mirrored", dst: func(bs []tbatch) []tbatch {
			return slices.Insert(bs, 1, tbatch{pid: transform.MapPID(9, testRegion), epoch: 2, recs: trecs("aborted", 2, 1500)})
		}, want: &wantDiff{FieldExtra, -1, 3}},
		{name: "records swapped", dst: func(bs []tbatch) []tbatch {
			bs[2].recs[1], bs[2].recs[2] = bs[2].recs[2], bs[2].recs[1]
			return bs
		}, want: &wantDiff{FieldOrder, 9, 6}},
		{name: "batches swapped", dst: func(bs []tbatch) []tbatch { bs[1], bs[2] = bs[2], bs[1]; return bs },
			want: &wantDiff{FieldOrder, 6, 3}},
		{name: "unmapped pid", dst: func(bs []tbatch) []tbatch { bs[0].pid = 7; return bs },
			want: &wantDiff{FieldProducerID, 0, 0}},
		{name: "pid mapped to another region", dst: func(bs []tbatch) []tbatch {
			bs[2].pid = transform.MapPID(9, thirdRegion)
			return bs
		}, want: &wantDiff{FieldProducerID, 8, 5}},
		{name: "pid given to a batch without one", dst: func(bs []tbatch) []tbatch {
			bs[1].pid = transform.MapPID(0, testRegion)
			return bs
		}, want: &wantDiff{FieldProducerID, 6, 3}},
		{name: "negative source pid mapped again", src: func(bs []tbatch) []tbatch {
			bs[2].pid = transform.MapPID(9, thirdRegion) // forwarded by an upstream mirror
			return bs
		}, dst: func(bs []tbatch) []tbatch {
			bs[2].pid = transform.MapPID(transform.MapPID(9, thirdRegion)&(1<<31-1), testRegion)
			return bs
		}, want: &wantDiff{FieldProducerID, 8, 5}},
		{name: "negative source pid kept", src: func(bs []tbatch) []tbatch {
			bs[2].pid = transform.MapPID(9, thirdRegion)
			return bs
		}, dst: func(bs []tbatch) []tbatch { bs[2].pid = transform.MapPID(9, thirdRegion); return bs }, records: 10},
		{name: "salted producer without its salt", dst: func(bs []tbatch) []tbatch {
			bs[0].pid, bs[3].pid = transform.MapPIDSalted(7, testRegion, 5), transform.MapPIDSalted(7, testRegion, 5)
			return bs
		}, want: &wantDiff{FieldProducerID, 0, 0}},
		{name: "salted producer with its salt", salt: saltFor(7, 5), dst: func(bs []tbatch) []tbatch {
			bs[0].pid, bs[3].pid = transform.MapPIDSalted(7, testRegion, 5), transform.MapPIDSalted(7, testRegion, 5)
			return bs
		}, records: 10},
		{name: "salted producer with a different salt", salt: saltFor(7, 6), dst: func(bs []tbatch) []tbatch {
			bs[0].pid, bs[3].pid = transform.MapPIDSalted(7, testRegion, 5), transform.MapPIDSalted(7, testRegion, 5)
			return bs
		}, want: &wantDiff{FieldProducerID, 0, 0}},
		{name: "holder salted mid-stream", salt: saltFor(7, 5), dst: func(bs []tbatch) []tbatch {
			bs[3].pid = transform.MapPIDSalted(7, testRegion, 5) // bs[0] keeps the unsalted mapping
			return bs
		}, records: 10},
		{name: "unsalted after salted", salt: saltFor(7, 5), dst: func(bs []tbatch) []tbatch {
			bs[0].pid = transform.MapPIDSalted(7, testRegion, 5) // bs[3] falls back to the unsalted mapping
			return bs
		}, want: &wantDiff{FieldProducerID, 12, 8}},
		{name: "salt of another partition", salt: func(k tp.Partition, o transform.Origin) (int64, bool) {
			return 5, k.Partition == 1
		}, records: 10},
		{name: "epoch", dst: func(bs []tbatch) []tbatch { bs[2].epoch++; return bs },
			want: &wantDiff{FieldProducerEpoch, 8, 5}},
		{name: "batch split", dst: func(bs []tbatch) []tbatch {
			tail := bs[2].clone()
			bs[2].recs, tail.recs = bs[2].recs[:1], tail.recs[1:]
			return slices.Insert(bs, 3, tail)
		}, want: &wantDiff{FieldBatch, 9, 6}},
		{name: "batches merged", src: func(bs []tbatch) []tbatch {
			bs[3].pid, bs[3].epoch, bs[3].seq, bs[3].codec = 9, 2, 3, 4
			return bs
		}, dst: func(bs []tbatch) []tbatch {
			bs[2].recs = append(bs[2].recs, bs[3].recs...)
			return bs[:3]
		}, want: &wantDiff{FieldBatch, 12, 8}},
		{name: "base sequence", dst: func(bs []tbatch) []tbatch { bs[3].seq = 4; return bs },
			want: &wantDiff{FieldSequence, 12, 8}},
		{name: "compression", dst: func(bs []tbatch) []tbatch { bs[1].codec = 2; return bs },
			want: &wantDiff{FieldCompression, 6, 3}},
		{name: "transactional bit kept", dst: func(bs []tbatch) []tbatch { bs[2].txn = true; return bs },
			want: &wantDiff{FieldTransactional, 8, 5}},
		{name: "destination behind", dst: func(bs []tbatch) []tbatch { return bs[:2] }, records: 5, behind: 5},
		{name: "destination empty", dst: func([]tbatch) []tbatch { return nil }, behind: 10},
		{name: "difference before the destination ends", dst: func(bs []tbatch) []tbatch {
			bs[1].recs[0].value = nil
			return bs[:2]
		}, records: 3, want: &wantDiff{FieldValue, 6, 3}},
		{name: "source empty", src: func([]tbatch) []tbatch { return nil },
			dst: func([]tbatch) []tbatch { return mirrorBatches(sourceBatches()) }, want: &wantDiff{FieldExtra, -1, 0}},
		{name: "max records stops before a difference", max: 7, dst: func(bs []tbatch) []tbatch {
			bs[3].recs[0].value = nil
			return bs
		}, records: 7},
		{name: "max records stops before extra records", max: 10, dst: func(bs []tbatch) []tbatch {
			return append(bs, tbatch{pid: -1, recs: trecs("z", 1, 0)})
		}, records: 10},
		{name: "max records counts behind", max: 7, dst: func(bs []tbatch) []tbatch { return bs[:1] }, records: 3, behind: 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := sourceBatches()
			if tc.src != nil {
				src = tc.src(src)
			}
			dst := mirrorBatches(src)
			if tc.dst != nil {
				dst = tc.dst(dst)
			}
			c := comparator{
				src:  cursor{next: sliceFeed(flatten(src, false))},
				dst:  cursor{next: sliceFeed(flatten(dst, true))},
				pids: newPIDCheck(testRegion, kafkatest.SourceClusterID, tp.Partition{Topic: "dst", Partition: 0}, tc.salt),
				max:  tc.max,
			}
			out, err := c.run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			checkDiff(t, out.diff, tc.want)
			// Before a difference at destination offset n (offsets are
			// dense from 0 here), n records were equal.
			if tc.want != nil && tc.records == 0 && tc.want.dst >= 0 {
				tc.records = tc.want.dst
			}
			if (tc.want == nil || tc.want.dst >= 0 || tc.records != 0) && out.records != tc.records || out.behind != tc.behind {
				t.Errorf("records %d, behind %d; want %d, %d", out.records, out.behind, tc.records, tc.behind)
			}
		})
	}
}

func checkDiff(t *testing.T, got *Difference, want *wantDiff) {
	t.Helper()
	switch {
	case want == nil && got != nil:
		t.Fatalf("unexpected difference: %v", got)
	case want != nil && got == nil:
		t.Fatalf("no difference; want %s at source %d, destination %d", want.field, want.src, want.dst)
	case want != nil && (got.Field != want.field || got.SourceOffset != want.src || got.DestOffset != want.dst):
		t.Fatalf("difference %s at source %d, destination %d (%v); want %s at %d, %d",
			got.Field, got.SourceOffset, got.DestOffset, got, want.field, want.src, want.dst)
	}
}

// A batch missing as a whole that is larger than the look-ahead window is
// still reported at the right offsets, by the field that differs.
func TestComparatorBeyondWindow(t *testing.T) {
	src := []tbatch{
		{base: 0, pid: -1, recs: trecs("big", window+10, 0)},
		{base: window + 10, pid: -1, recs: trecs("next", 3, 0)},
	}
	checkPreserveCompare(t, src, mirrorBatches(src)[1:], &wantDiff{FieldKey, 0, 0})
}

// An error from a feed ends the comparison with that error, not a verdict.
func TestComparatorFeedError(t *testing.T) {
	boom := errors.New("boom")
	c := comparator{
		src:  cursor{next: sliceFeed(flatten(sourceBatches(), false))},
		dst:  cursor{next: func(context.Context) ([]rec, error) { return nil, boom }},
		pids: newPIDCheck(testRegion, kafkatest.SourceClusterID, tp.Partition{}, nil),
	}
	if _, err := c.run(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("err = %v, want %v", err, boom)
	}
}

// The one-line message names both partitions, the offsets and the values.
func TestDifferenceError(t *testing.T) {
	tests := []struct {
		d    Difference
		want string
	}{
		{Difference{SourceTopic: "orders", DestTopic: "a.orders", Partition: 3, SourceOffset: 41, DestOffset: 38,
			Field: FieldValue, Want: `"abc"`, Got: `"abd"`},
			`orders[3] -> a.orders[3]: value differs at source offset 41, destination offset 38: want "abc", got "abd"`},
		{Difference{SourceTopic: "orders", DestTopic: "orders", Partition: 0, SourceOffset: 7, DestOffset: -1,
			Field: FieldMissing, Want: `7 (key "k")`, Got: "no such record: destination offset 5 holds source offset 8"},
			`orders[0] -> orders[0]: missing in destination at source offset 7, destination offset none: want 7 (key "k"), got no such record: destination offset 5 holds source offset 8`},
	}
	for _, tc := range tests {
		if got := tc.d.Error(); got != tc.want {
			t.Errorf("Error() =\n%s\nwant\n%s", got, tc.want)
		}
	}
	long := showBytes([]byte(strings.Repeat("x", 100) + "\n"))
	if strings.Contains(long, "\n") || !strings.HasSuffix(long, "... (101 bytes)") {
		t.Errorf("showBytes of 101 bytes = %s", long)
	}
}

func TestConfigValidate(t *testing.T) {
	err := (&Config{Topics: map[string]string{"a": ""}, MaxRecords: -1}).validate()
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("err = %v, want ErrInvalidConfig", err)
	}
	for _, want := range []string{"Source:", "Destination:", `Topics["a"]`, "SourceClusterID:", "MaxRecords:"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s: %v", want, err)
		}
	}
	if _, err := Run(context.Background(), Config{}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("Run with an empty config: %v", err)
	}
}

// batchSpans reads the headers a fetch returns and stops at a partial batch.
func TestBatchSpans(t *testing.T) {
	b1 := testBatch(100, 2, 17)
	b2 := testBatch(103, 0, -1)
	buf := slices.Concat(b1, b2, b1[:30])
	spans, err := batchSpans(buf, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []span{{base: 100, last: 102, baseSeq: 17}, {base: 103, last: 103, baseSeq: -1}}
	if !slices.EqualFunc(spans, want, func(a, b span) bool {
		return a.base == b.base && a.last == b.last && a.baseSeq == b.baseSeq && a.raw == nil
	}) {
		t.Fatalf("spans %v, want %v", spans, want)
	}
	legacy := slices.Clone(b1)
	legacy[transform.PosMagic] = 1
	if _, err := batchSpans(legacy, nil); !errors.Is(err, ErrUnsupportedFormat) {
		t.Fatalf("legacy message set: err = %v", err)
	}
}

// testBatch is a v2 batch header (no records, so not a valid batch for a
// broker, enough for batchSpans).
func testBatch(base int64, lastDelta, seq int32) []byte {
	b := make([]byte, transform.BatchHeaderSize+4)
	be := binary.BigEndian
	be.PutUint64(b, uint64(base))
	be.PutUint32(b[transform.PosLength:], uint32(len(b)-transform.LengthOverhead))
	b[transform.PosMagic] = 2
	be.PutUint32(b[transform.PosLastOffsetDelta:], uint32(lastDelta))
	be.PutUint32(b[transform.PosBaseSequence:], uint32(seq))
	return b
}

// A batch the broker stamped with LogAppendTime keeps its records' create
// times (first timestamp plus each record's delta); createTimes reads them
// through every codec, and batchSpans hands such a batch over for it.
func TestCreateTimes(t *testing.T) {
	const appendTime = 1_800_000_000_000
	for _, codec := range []int8{0, 1, 2, 3, 4} {
		var recs []trecord
		want := map[int64]int64{}
		for k := range 5 {
			ts := int64(1_700_000_000_000 + k*k*11)
			recs = append(recs, trecord{key: fmt.Appendf(nil, "k%d", k), value: []byte(strings.Repeat("v", 50)), ts: ts})
			want[40+int64(k)] = ts
		}
		b := encodeBatch(t, recs, codec, -1, -1, -1)
		binary.BigEndian.PutUint64(b, 40)
		plain := slices.Clone(b)
		b[transform.PosAttributes+1] |= transform.AttrTimestampLogAppend
		binary.BigEndian.PutUint64(b[transform.PosFirstTimestamp+8:], appendTime) // max timestamp: the append time
		spans, err := batchSpans(slices.Concat(plain, b), nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(spans) != 2 || spans[0].raw != nil || !slices.Equal(spans[1].raw, b) {
			t.Fatalf("codec %d: spans %v: want the second (LogAppendTime) batch's bytes only", codec, spans)
		}
		got, err := createTimes(spans[1].raw, kgo.DefaultDecompressor())
		if err != nil {
			t.Fatalf("codec %d: %v", codec, err)
		}
		if !maps.Equal(got, want) {
			t.Errorf("codec %d: create times %v, want %v", codec, got, want)
		}
		if _, err := createTimes(b[:len(b)-10], kgo.DefaultDecompressor()); err == nil {
			t.Errorf("codec %d: a truncated batch decoded", codec)
		}
	}
}

// Guards the comparison of a transactional-delivery mirror: the session's
// producer ID, epoch and sequences are not the source's and are not
// compared; a batch without the transactional bit is a difference (it was
// not appended by a transactional session), and so are records, batch
// boundaries and codecs, as in preserve delivery.
func TestComparatorTransactional(t *testing.T) {
	src := []tbatch{
		{base: 0, pid: 4242, epoch: 3, seq: 10, codec: 1, recs: trecs("a", 3, 0)},
		{base: 3, pid: -1, epoch: -1, seq: -1, recs: trecs("b", 2, 0)},
	}
	session := func(bs []tbatch) []tbatch {
		out := append([]tbatch(nil), bs...)
		for i := range out {
			out[i].pid, out[i].epoch, out[i].seq, out[i].txn = 99, 7, int32(100*i), true
		}
		return out
	}
	for _, tc := range []struct {
		name string
		dst  []tbatch
		want *wantDiff
	}{
		{"the session's producer", session(src), nil},
		{"transactional bit missing", func() []tbatch { d := session(src); d[1].txn = false; return d }(), &wantDiff{FieldTransactional, 3, 3}},
		{"codec changed", func() []tbatch { d := session(src); d[0].codec = 2; return d }(), &wantDiff{FieldCompression, 0, 0}},
		{"record changed", func() []tbatch { d := session(src); d[1].recs = trecs("c", 2, 0); return d }(), &wantDiff{FieldKey, 3, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkTxnCompare(t, src, tc.dst, tc.want) })
	}
}

// checkTxnCompare compares src with a transactional mirror's dst and
// checks the first difference against want (nil: none).
func checkTxnCompare(t *testing.T, src, dst []tbatch, want *wantDiff) {
	t.Helper()
	checkCompare(t, src, dst, true, want)
}

// checkCompare compares src with dst, a transactional mirror's (txn) or a
// preserve-delivery mirror's, and checks the first difference against want
// (nil: none).
func checkCompare(t *testing.T, src, dst []tbatch, txn bool, want *wantDiff) {
	t.Helper()
	c := comparator{
		src:  cursor{next: sliceFeed(flatten(src, false))},
		dst:  cursor{next: sliceFeed(flatten(dst, true))},
		pids: newPIDCheck(testRegion, kafkatest.SourceClusterID, tp.Partition{}, nil),
		txn:  txn,
	}
	out, err := c.run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	checkDiff(t, out.diff, want)
}

// Guards the comparison of a transactional mirror whose session joined
// runs of source batches (coalesce_bytes): a destination batch that holds
// several whole source batches is the mirror, one that begins inside a
// source batch is a batch boundary difference, and the records are still
// compared one by one.
func TestComparatorTransactionalJoined(t *testing.T) {
	src := []tbatch{
		{base: 0, pid: 4242, epoch: 3, seq: 0, codec: 3, recs: trecs("a", 3, 0)},
		{base: 3, pid: 4242, epoch: 3, seq: 3, codec: 3, recs: trecs("b", 2, 10)},
		{base: 5, pid: 4242, epoch: 3, seq: 5, codec: 3, recs: trecs("c", 2, 20)},
	}
	joined := func(groups ...[]int) []tbatch {
		var out []tbatch
		for i, g := range groups {
			b := tbatch{pid: 99, epoch: 7, seq: int32(100 * i), codec: 3, txn: true}
			for _, j := range g {
				b.recs = append(b.recs, src[j].recs...)
			}
			out = append(out, b)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		dst  []tbatch
		want *wantDiff
	}{
		{"all three joined", joined([]int{0, 1, 2}), nil},
		{"the last two joined", joined([]int{0}, []int{1, 2}), nil},
		{"a batch begins inside a source batch", func() []tbatch {
			d := joined([]int{0, 1, 2})
			rest := tbatch{pid: 99, epoch: 7, seq: 1, codec: 3, txn: true, recs: d[0].recs[1:]}
			d[0].recs = d[0].recs[:1]
			return append(d, rest)
		}(), &wantDiff{FieldBatch, 1, 1}},
		{"a record changed inside a joined batch", func() []tbatch {
			d := joined([]int{0, 1, 2})
			d[0].recs = append(append([]trec(nil), d[0].recs[:4]...), trecs("x", 1, 11)...)
			d[0].recs = append(d[0].recs, src[2].recs...)
			return d
		}(), &wantDiff{FieldKey, 4, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkTxnCompare(t, src, tc.dst, tc.want) })
	}
}

// checkPreserveCompare compares src with a preserve-delivery mirror's dst
// and checks the first difference against want (nil: none).
func checkPreserveCompare(t *testing.T, src, dst []tbatch, want *wantDiff) {
	t.Helper()
	checkCompare(t, src, dst, false, want)
}

// joinRuns is what preserve delivery's coalescing makes of src: each group
// of batch indexes one destination batch under the mapped producer ID, the
// epoch and the base sequence of the group's first batch.
func joinRuns(src []tbatch, groups ...[]int) []tbatch {
	var out []tbatch
	for _, g := range groups {
		b := mirrorBatches(src[g[0] : g[0]+1])[0]
		for _, j := range g[1:] {
			b.recs = append(b.recs, src[j].recs...)
		}
		out = append(out, b)
	}
	return out
}

// idempotentRun is three consecutive batches of one idempotent producer:
// contiguous offsets, each base sequence the previous one's plus its
// record count.
func idempotentRun() []tbatch {
	return []tbatch{
		{base: 0, pid: 7, epoch: 1, seq: 10, codec: 3, recs: trecs("a", 3, 0)},
		{base: 3, pid: 7, epoch: 1, seq: 13, codec: 3, recs: trecs("b", 2, 10)},
		{base: 5, pid: 7, epoch: 1, seq: 15, codec: 3, recs: trecs("c", 2, 20)},
	}
}

// Guards the comparison of a preserve-delivery mirror that joined runs of
// one producer's consecutive batches (coalescing): the joined batch, under
// the first batch's base sequence, is the mirror; a source batch inside a
// destination batch that is not that producer's next batch (a sequence
// that does not continue, offsets that do not, another producer, no
// producer ID) is a difference, and a destination batch must still begin
// where a source batch does.
func TestComparatorPreserveJoined(t *testing.T) {
	all := []int{0, 1, 2}
	for _, tc := range []struct {
		name string
		src  func([]tbatch) []tbatch // edits idempotentRun; nil: as it is
		dst  func([]tbatch) []tbatch // the mirror of the (edited) source
		want *wantDiff
	}{
		{name: "all three joined", dst: func(s []tbatch) []tbatch { return joinRuns(s, all) }},
		{name: "the last two joined", dst: func(s []tbatch) []tbatch { return joinRuns(s, []int{0}, []int{1, 2}) }},
		{name: "the last batch's sequence does not continue", src: func(s []tbatch) []tbatch {
			s[2].seq = 16
			return s
		}, dst: func(s []tbatch) []tbatch { return joinRuns(s, all) }, want: &wantDiff{FieldSequence, 5, 5}},
		{name: "the middle batch's sequence does not continue", src: func(s []tbatch) []tbatch {
			s[1].seq, s[2].seq = 14, 16
			return s
		}, dst: func(s []tbatch) []tbatch { return joinRuns(s, all) }, want: &wantDiff{FieldSequence, 3, 3}},
		{name: "a destination batch begins inside a source batch", dst: func(s []tbatch) []tbatch {
			d := joinRuns(s, all)
			rest := d[0].clone()
			rest.seq, rest.recs = 11, d[0].recs[1:]
			d[0].recs = d[0].recs[:1]
			return append(d, rest)
		}, want: &wantDiff{FieldBatch, 1, 1}},
		{name: "batches without a producer ID joined", src: func(s []tbatch) []tbatch {
			for i := range s {
				s[i].pid, s[i].epoch, s[i].seq = -1, -1, -1
			}
			return s
		}, dst: func(s []tbatch) []tbatch { return joinRuns(s, all) }, want: &wantDiff{FieldBatch, 3, 3}},
		{name: "batches without a producer ID but with sequences joined", src: func(s []tbatch) []tbatch {
			for i := range s {
				s[i].pid, s[i].epoch = -1, -1 // franz-go numbers such batches all the same
			}
			return s
		}, dst: func(s []tbatch) []tbatch { return joinRuns(s, all) }, want: &wantDiff{FieldBatch, 3, 3}},
		{name: "batches with offsets between them joined", src: func(s []tbatch) []tbatch {
			s[2].base = 6 // offset 5: a marker or an aborted batch
			return s
		}, dst: func(s []tbatch) []tbatch { return joinRuns(s, all) }, want: &wantDiff{FieldBatch, 6, 5}},
		{name: "another producer's batch joined", src: func(s []tbatch) []tbatch {
			s[1].pid = 8
			return s
		}, dst: func(s []tbatch) []tbatch { return joinRuns(s, all) }, want: &wantDiff{FieldProducerID, 3, 3}},
		{name: "a forwarded producer ID that collides with the mapping joined", src: func(s []tbatch) []tbatch {
			// An upstream mirror's producer ID, kept as it is, equal
			// to the mapping of producer 7: each batch alone carries
			// the right producer ID, but they are two producers.
			s[1].pid = transform.MapPID(7, testRegion)
			return s
		}, dst: func(s []tbatch) []tbatch { return joinRuns(s, all) }, want: &wantDiff{FieldBatch, 3, 3}},
		{name: "another epoch's batch joined", src: func(s []tbatch) []tbatch {
			s[1].epoch = 2
			return s
		}, dst: func(s []tbatch) []tbatch { return joinRuns(s, all) }, want: &wantDiff{FieldProducerEpoch, 3, 3}},
		{name: "sequences wrap inside the joined batch", src: func(s []tbatch) []tbatch {
			s[0].seq, s[1].seq, s[2].seq = math.MaxInt32-1, 1, 3
			return s
		}, dst: func(s []tbatch) []tbatch { return joinRuns(s, all) }},
		{name: "a batch with gaps mirrored alone", src: func(s []tbatch) []tbatch {
			s[0].recs, s[0].deltas = s[0].recs[:2], []int64{0, 2} // the cleaner removed offset 1
			return s
		}, dst: mirrorBatches},
		{name: "a batch with gaps joined", src: func(s []tbatch) []tbatch {
			s[0].recs, s[0].deltas = s[0].recs[:2], []int64{0, 2}
			return s
		}, dst: func(s []tbatch) []tbatch { return joinRuns(s, all) }, want: &wantDiff{FieldSequence, 3, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := idempotentRun()
			if tc.src != nil {
				src = tc.src(src)
			}
			checkPreserveCompare(t, src, tc.dst(src), tc.want)
		})
	}
}
