package transform

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/internal/testkit/batchtest"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
)

// gappyTestBatch rebuilds batch b without the records whose index keep
// rejects, keeping every header field (lastOffsetDelta included) and the codec,
// as Kafka's log cleaner does. It returns the batch and the kept records.
func gappyTestBatch(t testing.TB, b []byte, keep func(i int) bool) ([]byte, []kmsg.Record) {
	t.Helper()
	h := mustHeader(t, b)
	_, recs := decodeTestBatch(t, b)
	var kept []kmsg.Record
	for i, r := range recs {
		if keep(i) {
			kept = append(kept, r)
		}
	}
	h.NumRecords = int32(len(kept))
	return encodeTestBatch(t, h, kept), kept
}

// checkReencoded checks out against the source batch src and the records it
// should hold.
func checkReencoded(t testing.TB, out []byte, offsets []OffsetMap, src []byte, want []kmsg.Record, pid int64) {
	t.Helper()
	if err := Validate(out); err != nil {
		t.Fatalf("re-encoded batch: %v", err)
	}
	sh, h := mustHeader(t, src), mustHeader(t, out)
	n := int32(len(want))
	wantH := Header{BaseOffset: 0, Length: h.Length, PartitionLeaderEpoch: -1, Magic: 2, CRC: h.CRC,
		Attributes: sh.Attributes &^ AttrTransactional, LastOffsetDelta: n - 1,
		FirstTimestamp: sh.FirstTimestamp, MaxTimestamp: sh.MaxTimestamp, ProducerID: pid,
		ProducerEpoch: sh.ProducerEpoch, BaseSequence: sh.BaseSequence, NumRecords: n}
	if h != wantH {
		t.Fatalf("re-encoded header =\n%+v, want\n%+v", h, wantH)
	}
	if !h.Dense() || h.Compression() != sh.Compression() {
		t.Fatalf("re-encoded batch: dense %v, codec %d (source codec %d)", h.Dense(), h.Compression(), sh.Compression())
	}
	_, got := decodeTestBatch(t, out)
	if len(got) != len(want) || len(offsets) != len(want) {
		t.Fatalf("re-encoded batch has %d records and %d offsets, want %d", len(got), len(offsets), len(want))
	}
	for i := range got {
		if d := diffRecord(got[i], want[i]); d != "" {
			t.Fatalf("record %d: %s", i, d)
		}
		if got[i].OffsetDelta != int32(i) {
			t.Fatalf("record %d has offset delta %d", i, got[i].OffsetDelta)
		}
		if wantMap := (OffsetMap{Source: sh.BaseOffset + int64(want[i].OffsetDelta), Delta: int32(i)}); offsets[i] != wantMap {
			t.Fatalf("offsets[%d] = %+v, want %+v", i, offsets[i], wantMap)
		}
	}
}

func TestReencode(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	base := Header{BaseOffset: 5000, PartitionLeaderEpoch: 3, FirstTimestamp: 1_700_000_000_000,
		ProducerID: 99, ProducerEpoch: 2, BaseSequence: 700}
	r := NewReencoder()
	for _, codec := range testCodecs {
		for _, tc := range []struct {
			name  string
			n     int
			attrs int16
			keep  func(i int) bool
		}{
			// Guards the compaction case: records gone from the middle.
			{"gaps in the middle", 20, 0, func(i int) bool { return i%3 != 1 }},
			// Guards a cleaner that dropped the last records but kept lastOffsetDelta.
			{"tail dropped", 10, 0, func(i int) bool { return i < 6 }},
			// Guards a dropped first record: timestamp deltas stay relative to the
			// original firstTimestamp, source offsets do not start at the base.
			{"head dropped", 10, 0, func(i int) bool { return i > 2 }},
			// Guards a single survivor far into the batch.
			{"one survivor", 30, 0, func(i int) bool { return i == 17 }},
			// Guards a dense batch: re-encoding changes nothing in the records.
			{"dense", 8, 0, func(int) bool { return true }},
			// Guards attributes: transactional cleared, log-append-time kept.
			{"transactional log append time", 6, AttrTransactional | AttrTimestampLogAppend, func(i int) bool { return i != 2 }},
			// Guards the codec on a tiny input, where compression makes it bigger.
			{"tiny", 1, 0, func(int) bool { return true }},
		} {
			t.Run(codec.name+"/"+tc.name, func(t *testing.T) {
				h := base
				h.Attributes = tc.attrs
				dense, _ := denseTestBatch(t, rng, tc.n, codec.codec, h)
				if tc.name == "tiny" {
					dense = encodeTestBatch(t, Header{Attributes: int16(codec.codec), NumRecords: 1, BaseSequence: -1, ProducerID: -1},
						[]kmsg.Record{{Value: []byte("x")}})
				}
				b, kept := gappyTestBatch(t, dense, tc.keep)
				if err := Validate(b); err != nil {
					t.Fatalf("gappy batch: %v", err)
				}
				pid := MapPID(mustHeader(t, b).ProducerID, 0x1234)
				out, offsets, err := r.Reencode(nil, b, pid)
				if err != nil {
					t.Fatalf("Reencode: %v", err)
				}
				checkReencoded(t, out, offsets, b, kept, pid)
			})
		}
	}
}

// Guards dst reuse: the output lands in dst's memory when it fits, and dst
// may be the input batch's own memory.
func TestReencodeDst(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	r := NewReencoder()
	for _, codec := range testCodecs {
		t.Run(codec.name, func(t *testing.T) {
			dense, _ := denseTestBatch(t, rng, 12, codec.codec, Header{BaseOffset: 10, ProducerID: 1, BaseSequence: 0})
			b, kept := gappyTestBatch(t, dense, func(i int) bool { return i%2 == 0 })
			want, _, err := r.Reencode(nil, b, -7)
			if err != nil {
				t.Fatal(err)
			}
			dst := make([]byte, 3, len(want)+100)
			out, _, err := r.Reencode(dst, b, -7)
			if err != nil || !bytes.Equal(out, want) || &out[0] != &dst[:1][0] {
				t.Fatalf("into a roomy dst: err %v, same bytes %v, same memory %v", err, bytes.Equal(out, want), &out[0] == &dst[:1][0])
			}
			// In place: the batch's own buffer as dst.
			src := append(make([]byte, 0, len(b)+len(want)), b...)
			out, offsets, err := r.Reencode(src[:0], src, -7)
			if err != nil || !bytes.Equal(out, want) || &out[0] != &src[0] {
				t.Fatalf("in place: err %v, same bytes %v, same memory %v", err, bytes.Equal(out, want), &out[0] == &src[0])
			}
			checkReencoded(t, out, offsets, b, kept, -7)
		})
	}
}

func TestReencodeErrors(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	h := Header{BaseOffset: 321, ProducerID: 5, BaseSequence: 0, FirstTimestamp: 1000}
	recs, _ := randomTestRecords(rng, 4)
	var raw []byte
	for _, r := range recs {
		raw = appendTestRecord(raw, r)
	}
	with := func(f func(h *Header) []byte) []byte { h := h; h.LastOffsetDelta, h.NumRecords = 3, 4; return f(&h) }
	swapped := append(append([]kmsg.Record{}, recs[1], recs[0]), recs[2:]...)
	for _, tc := range []struct {
		name string
		b    []byte
		is   error
		msg  string
	}{
		// Guards against forwarding a transaction marker.
		{"control", with(func(h *Header) []byte { h.Attributes = AttrControl; return encodeTestBatchRaw(*h, raw) }), ErrControlBatch, "offset 321"},
		// Guards a batch compaction emptied: nothing to forward, and brokers refuse it.
		{"empty", with(func(h *Header) []byte { h.NumRecords = 0; return encodeTestBatchRaw(*h, nil) }), ErrEmptyBatch, "offsets 321..324"},
		// Guards an unknown codec (6) that the CRC cannot catch.
		{"codec 6", with(func(h *Header) []byte { h.Attributes = 6; return encodeTestBatchRaw(*h, raw) }), ErrCorrupt,
			"offset 321: compression check failed: unknown compression codec 6"},
		// Guards gzip bytes that do not decompress (producer bug; CRC is fine).
		{"bad gzip", with(func(h *Header) []byte { h.Attributes = 1; return encodeTestBatchRaw(*h, raw) }), ErrCorrupt,
			"compression check failed: decompress gzip records"},
		// Guards a record count larger than the bytes can hold (no huge allocation).
		{"count too large", with(func(h *Header) []byte { h.NumRecords = 1 << 30; return encodeTestBatchRaw(*h, raw) }), ErrCorrupt,
			"records check failed: 1073741824 records cannot fit"},
		// Guards a record cut short.
		{"record cut", with(func(h *Header) []byte { return encodeTestBatchRaw(*h, raw[:len(raw)-3]) }), ErrCorrupt,
			"records check failed: record 3 of 4"},
		// Guards bytes left after the last record.
		{"trailing bytes", with(func(h *Header) []byte { return encodeTestBatchRaw(*h, append(bytes.Clone(raw), 0, 0)) }), ErrCorrupt,
			"2 bytes after the last of 4 records"},
		// Guards offset deltas that go backwards (the offset map would lie).
		{"deltas out of order", with(func(h *Header) []byte {
			return encodeTestBatch(t, *h, swapped)
		}), ErrCorrupt, "record 1 of 4: offset delta 0 after 1"},
		// Guards a record delta past lastOffsetDelta.
		{"delta past last", with(func(h *Header) []byte { h.LastOffsetDelta = 2; return encodeTestBatchRaw(*h, raw) }), ErrCorrupt,
			"offset delta 3 after 2, last offset delta 2"},
		// Guards a length field that disagrees with the buffer.
		{"length", with(func(h *Header) []byte { return encodeTestBatchRaw(*h, raw)[:70] }), ErrCorrupt, "length check failed"},
		// Guards a legacy message set.
		{"magic 1", with(func(h *Header) []byte { b := encodeTestBatchRaw(*h, raw); b[16] = 1; return b }), ErrUnsupportedMagic, "offset 321"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, offsets, err := NewReencoder().Reencode(nil, tc.b, -2)
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("Reencode error = %v, want %v containing %q", err, tc.is, tc.msg)
			}
			if out != nil || offsets != nil {
				t.Fatal("Reencode returned output with an error")
			}
		})
	}
}

func FuzzReencode(f *testing.F) {
	f.Add(uint64(1), uint8(5), uint8(0), uint64(0b10110), []byte(nil))
	f.Add(uint64(2), uint8(40), uint8(3), uint64(1<<39|1), []byte("x"))
	f.Add(uint64(3), uint8(1), uint8(4), uint64(0), []byte{0x02, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00})
	r := NewReencoder()
	f.Fuzz(func(t *testing.T, seed uint64, n, codec uint8, drop uint64, garbage []byte) {
		// Random records in, the same records out.
		rng := rand.New(rand.NewPCG(seed, seed>>32))
		c := int8(codec % 5)
		n = n%64 + 1
		dense, _ := denseTestBatch(t, rng, int(n), c, Header{BaseOffset: int64(seed >> 2), FirstTimestamp: int64(seed >> 20),
			ProducerID: int64(seed >> 1), ProducerEpoch: int16(seed), BaseSequence: int32(seed >> 3), Attributes: int16(seed>>8) & AttrTransactional})
		b, kept := gappyTestBatch(t, dense, func(i int) bool { return drop&(1<<(i%64)) == 0 })
		if len(kept) == 0 {
			if _, _, err := r.Reencode(nil, b, -3); !errors.Is(err, ErrEmptyBatch) {
				t.Fatalf("no records left: Reencode error %v, want ErrEmptyBatch", err)
			}
		} else {
			out, offsets, err := r.Reencode(nil, b, -3)
			if err != nil {
				t.Fatalf("Reencode: %v", err)
			}
			checkReencoded(t, out, offsets, b, kept, -3)
			// Records reads the same records from both, at the source's
			// offsets and at the dense ones.
			srcRecs, err := r.Records(b)
			if err != nil {
				t.Fatalf("Records of the source batch: %v", err)
			}
			outRecs, err := r.Records(out)
			if err != nil {
				t.Fatalf("Records of the re-encoded batch: %v", err)
			}
			if len(srcRecs) != len(offsets) || len(outRecs) != len(offsets) {
				t.Fatalf("Records: %d and %d records, want %d", len(srcRecs), len(outRecs), len(offsets))
			}
			for i, o := range offsets {
				if srcRecs[i].Offset != o.Source || outRecs[i].Offset != int64(o.Delta) || !srcRecs[i].Same(outRecs[i]) {
					t.Fatalf("record %d: source %+v, re-encoded %+v, offset map %+v", i, srcRecs[i], outRecs[i], o)
				}
			}
		}
		// Garbage records behind a valid header and CRC: an error or a
		// valid dense batch, never a panic.
		gb := encodeTestBatchRaw(Header{Attributes: int16(c), NumRecords: int32(n), LastOffsetDelta: int32(drop)}, garbage)
		if out, _, err := r.Reencode(nil, gb, -3); err == nil {
			if err := Validate(out); err != nil || !mustHeader(t, out).Dense() {
				t.Fatalf("Reencode accepted garbage and gave an invalid batch: %v", err)
			}
		} else if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrEmptyBatch) {
			t.Fatalf("Reencode of garbage: %v is neither ErrCorrupt nor ErrEmptyBatch", err)
		}
		if _, err := r.Records(gb); err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Records of garbage: %v is not ErrCorrupt", err)
		}
	})
}

// sourceRecordsByOffset consumes n records of a source topic with a kgo
// consumer and indexes them by partition and offset.
func sourceRecordsByOffset(t *testing.T, c *kfake.Cluster, topic string, n int) map[int32]map[int64]*kgo.Record {
	t.Helper()
	out := map[int32]map[int64]*kgo.Record{}
	for p, rs := range consumeTestRecords(t, c, topic, n) {
		out[p] = map[int64]*kgo.Record{}
		for _, r := range rs {
			out[p][r.Offset] = r
		}
	}
	return out
}

// forwardedTestRecord is what the destination must hold for one record: the
// source record it comes from and the PID it must carry.
type forwardedTestRecord struct {
	source int64 // source offset
	pid    int64
}

// checkForwarded consumes the destination partition 0 and checks it record by
// record against the source records named by want.
func checkForwarded(t *testing.T, dst *kfake.Cluster, topic string, src map[int64]*kgo.Record, want []forwardedTestRecord) {
	t.Helper()
	got := consumeTestRecords(t, dst, topic, len(want))[0]
	for i, r := range got {
		s, ok := src[want[i].source]
		if !ok {
			t.Fatalf("destination record %d maps to source offset %d, which the source does not hold", i, want[i].source)
		}
		if d := diffKgoRecord(r, s); d != "" {
			t.Fatalf("destination record %d (source offset %d): %s", i, want[i].source, d)
		}
		if r.Offset != int64(i) || r.ProducerID != want[i].pid {
			t.Fatalf("destination record %d: offset %d, pid %d; want offset %d, pid %d", i, r.Offset, r.ProducerID, i, want[i].pid)
		}
	}
}

// Guards the slow path against real brokers, in every codec: a batch that
// lost records the way Kafka's cleaner drops them (same lastOffsetDelta) is
// refused by the destination even after Rewrite ("last offset delta
// mismatch"), and accepted once re-encoded; a consumer then reads exactly the
// surviving source records, and the offset map points each destination record
// at the source record it came from.
func TestBrokerReencode(t *testing.T) {
	src, dst := kafkatest.Pair(t)
	srcCl, dstCl := kafkatest.Client(t, src), kafkatest.Client(t, dst)
	region, _ := RegionOf(kafkatest.SourceClusterID)
	r := NewReencoder()
	for _, codec := range testCodecs {
		t.Run(codec.name, func(t *testing.T) {
			topic := "reencode-" + codec.name
			srcTopic := createTestTopic(t, srcCl, topic, 1, nil)
			dstTopic := createTestTopic(t, dstCl, topic, 1, nil)
			prod := kafkatest.Client(t, src, kgo.DefaultProduceTopic(topic), kgo.ManualFlushing(),
				kgo.ProducerBatchCompression(codec.kgo), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			const perBatch, batches = 10, 3
			for b := range batches {
				var recs []*kgo.Record
				for i := range perBatch {
					recs = append(recs, &kgo.Record{
						Key:       fmt.Appendf(nil, "k%d-%d", b, i),
						Value:     []byte(strings.Repeat(fmt.Sprintf("batch %d record %d; ", b, i), 10)),
						Headers:   []kgo.RecordHeader{{Key: "i", Value: fmt.Appendf(nil, "%d", i)}},
						Timestamp: time.UnixMilli(1_700_000_000_000 + int64(100*b+i)),
					})
				}
				produceFlushed(t, prod, recs...)
			}
			srcRecs := sourceRecordsByOffset(t, src, topic, perBatch*batches)[0]

			var want []forwardedTestRecord
			fetched := fetchRaw(t, srcCl, srcTopic, 0, 0).batches
			if len(fetched) != batches {
				t.Fatalf("source holds %d batches, want %d", len(fetched), batches)
			}
			for bi, dense := range fetched {
				h := mustHeader(t, dense)
				if h.Compression() != codec.codec || !h.Dense() || h.NumRecords != perBatch {
					t.Fatalf("source batch %d: codec %d, dense %v, %d records", bi, h.Compression(), h.Dense(), h.NumRecords)
				}
				gappy, _ := gappyTestBatch(t, dense, func(i int) bool { return (i+bi)%3 != 1 })
				if err := Validate(gappy); err != nil {
					t.Fatal(err)
				}
				pid := MapPID(h.ProducerID, region)

				rewritten := bytes.Clone(gappy)
				Rewrite(rewritten, pid)
				if err := produceRaw(t, dstCl, dstTopic, 0, rewritten); !errors.Is(err, kerr.CorruptMessage) {
					t.Fatalf("source batch %d with gaps, rewritten: destination answered %v, want CORRUPT_MESSAGE", bi, err)
				}

				out, offsets, err := r.Reencode(nil, gappy, pid)
				if err != nil {
					t.Fatalf("Reencode source batch %d: %v", bi, err)
				}
				if oh := mustHeader(t, out); oh.Compression() != codec.codec {
					t.Fatalf("re-encoded batch %d has codec %d, source %d", bi, oh.Compression(), codec.codec)
				}
				if err := produceRaw(t, dstCl, dstTopic, 0, out); err != nil {
					t.Fatalf("re-encoded source batch %d: %v", bi, err)
				}
				for _, o := range offsets {
					want = append(want, forwardedTestRecord{source: o.Source, pid: pid})
				}
			}
			checkForwarded(t, dst, topic, srcRecs, want)
		})
	}
}

// Guards the slow path on what kfake's own log compaction leaves (it
// re-encodes a partly cleaned batch uncompressed, with lastOffsetDelta of the
// last kept record): non-dense batches are re-encoded, dense ones rewritten,
// and the destination ends up with exactly what a consumer of the compacted
// source reads.
func TestBrokerCompactedReencode(t *testing.T) {
	src, dst := kafkatest.Pair(t)
	srcCl, dstCl := kafkatest.Client(t, src), kafkatest.Client(t, dst)
	region, _ := RegionOf(kafkatest.SourceClusterID)
	const topic = "compacted"
	srcTopic := createTestTopic(t, srcCl, topic, 1, map[string]*string{
		"cleanup.policy": new("compact"),
		"retention.ms":   new("-1"), // Compact also applies retention; the timestamps are from 2023
	})
	dstTopic := createTestTopic(t, dstCl, topic, 1, nil)
	prod := kafkatest.Client(t, src, kgo.DefaultProduceTopic(topic), kgo.ManualFlushing(),
		kgo.ProducerBatchCompression(kgo.Lz4Compression()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ts := int64(1_700_000_000_000)
	rec := func(key, value string) *kgo.Record {
		ts++
		return &kgo.Record{Key: []byte(key), Value: []byte(strings.Repeat(value+";", 30)), Timestamp: time.UnixMilli(ts)}
	}
	var first []*kgo.Record
	for i := range 8 {
		first = append(first, rec(fmt.Sprintf("k%d", i), "v1"))
	}
	produceFlushed(t, prod, first...)
	produceFlushed(t, prod, rec("k1", "v2"), rec("k3", "v2"), rec("k4", "v2"))
	produceFlushed(t, prod, rec("k9", "v1")) // the active segment: never cleaned
	src.Compact()

	// What the compacted source holds, by key, in offset order.
	wantKeys := []string{"k0", "k2", "k5", "k6", "k7", "k1", "k3", "k4", "k9"}
	srcRecs := sourceRecordsByOffset(t, src, topic, len(wantKeys))[0]

	var want []forwardedTestRecord
	gappy := 0
	for _, b := range fetchRaw(t, srcCl, srcTopic, 0, 0).batches {
		if err := Validate(b); err != nil {
			t.Fatalf("compacted source batch: %v", err)
		}
		h := mustHeader(t, b)
		pid := MapPID(h.ProducerID, region)
		if h.Dense() {
			Rewrite(b, pid)
			if err := produceRaw(t, dstCl, dstTopic, 0, b); err != nil {
				t.Fatalf("dense batch at %d: %v", h.BaseOffset, err)
			}
			for d := range h.NumRecords {
				want = append(want, forwardedTestRecord{source: h.BaseOffset + int64(d), pid: pid})
			}
			continue
		}
		gappy++
		out, offsets, err := NewReencoder().Reencode(nil, b, pid)
		if err != nil {
			t.Fatalf("Reencode batch at %d: %v", h.BaseOffset, err)
		}
		if err := produceRaw(t, dstCl, dstTopic, 0, out); err != nil {
			t.Fatalf("re-encoded batch at %d: %v", h.BaseOffset, err)
		}
		for _, o := range offsets {
			want = append(want, forwardedTestRecord{source: o.Source, pid: pid})
		}
	}
	if gappy == 0 {
		t.Fatal("kfake's compaction left no batch with offset gaps; the test would not exercise Reencode")
	}
	if len(want) != len(wantKeys) {
		t.Fatalf("forwarded %d records, the compacted source holds %d", len(want), len(wantKeys))
	}
	for i, w := range want {
		if k := string(srcRecs[w.source].Key); k != wantKeys[i] {
			t.Fatalf("forwarded record %d has key %s, want %s", i, k, wantKeys[i])
		}
	}
	checkForwarded(t, dst, topic, srcRecs, want)
}

// Records decodes a batch's records with their absolute offsets and create
// times, in every codec, and Same tells records apart by content only (a
// null field from an empty one, headers in order): reconciliation and
// translation recognise a batch the source's cleaner cut by it.
func TestRecords(t *testing.T) {
	recs := []batchtest.Record{
		{Key: []byte("a"), Value: []byte("1"), TimestampDelta: 0, OffsetDelta: 0},
		{Key: nil, Value: []byte{}, TimestampDelta: 7, OffsetDelta: 2, Headers: []kmsg.Header{{Key: "h", Value: []byte("x")}}},
		{Key: []byte("c"), Value: nil, TimestampDelta: 9, OffsetDelta: 5},
	}
	for codec := range int8(5) {
		b := batchtest.Build(batchtest.Spec{BaseOffset: 40, PID: 1, FirstTimestamp: 1000, Codec: codec, Records: recs})
		got, err := NewReencoder().Records(b)
		if err != nil {
			t.Fatalf("codec %d: %v", codec, err)
		}
		if len(got) != 3 || got[0].Offset != 40 || got[1].Offset != 42 || got[2].Offset != 45 ||
			got[0].Timestamp != 1000 || got[1].Timestamp != 1007 || got[2].Timestamp != 1009 {
			t.Fatalf("codec %d: records %+v", codec, got)
		}
		if got[1].Key != nil || got[1].Value == nil || len(got[1].Headers) != 1 || got[2].Value != nil {
			t.Errorf("codec %d: null and empty fields not kept apart: %+v", codec, got)
		}
	}
	r := Record{Offset: 1, Timestamp: 5, Key: []byte("k"), Value: []byte("v"), Headers: []kmsg.Header{{Key: "a", Value: []byte("1")}}}
	for _, tc := range []struct {
		name string
		edit func(*Record)
		same bool
	}{
		{"another offset", func(o *Record) { o.Offset = 9 }, true},
		{"another timestamp", func(o *Record) { o.Timestamp = 6 }, false},
		{"a null key", func(o *Record) { o.Key = nil }, false},
		{"an empty value", func(o *Record) { o.Value = []byte{} }, false},
		{"another header value", func(o *Record) { o.Headers = []kmsg.Header{{Key: "a", Value: []byte("2")}} }, false},
		{"no header", func(o *Record) { o.Headers = nil }, false},
	} {
		o := r
		tc.edit(&o)
		if got := r.Same(o); got != tc.same {
			t.Errorf("%s: Same = %v, want %v", tc.name, got, tc.same)
		}
	}
	if _, err := NewReencoder().Records(batchtest.Build(batchtest.Spec{Control: true, Records: recs[:1]})); !errors.Is(err, ErrControlBatch) {
		t.Errorf("a control batch: %v, want ErrControlBatch", err)
	}
}

// scratch is the capacity r's scratch buffers hold between calls.
func (r *Reencoder) scratch() int {
	return cap(r.dbuf.b) + cap(r.raw) + r.zbuf.Cap()
}

// Guards a long-running agent's memory: one batch that decompresses to
// tens of MiB (a topic with a large max.message.bytes) must not leave
// every Reencoder holding buffers of its size for the rest of the
// process, while the buffers of ordinary batches are kept for the next
// call.
//
// The limit is lowered to 64 KiB for the test, and its large batch is 768
// KiB: with the real 8 MiB and a 12 MiB batch the test took 0.75 GB under
// the race detector, beside the other packages of CI's kfake tier.
func TestReencoderReleasesLargeScratch(t *testing.T) {
	defer func(k int) { keepScratch = k }(keepScratch)
	keepScratch = 64 << 10
	big := make([]kmsg.Record, 12)
	for i := range big {
		big[i] = kmsg.Record{OffsetDelta: int32(i), Value: bytes.Repeat([]byte{byte(i)}, 64<<10)}
	}
	small := []kmsg.Record{{Value: []byte("a")}, {OffsetDelta: 1, Value: []byte("b")}}
	h := Header{FirstTimestamp: 1_700_000_000_000, ProducerID: 7, BaseSequence: 0}
	for _, codec := range testCodecs {
		t.Run(codec.name, func(t *testing.T) {
			h := h
			h.Attributes = int16(codec.codec)
			h.NumRecords, h.LastOffsetDelta = int32(len(big)), int32(len(big)-1)
			bigB := encodeTestBatch(t, h, big)
			h.NumRecords, h.LastOffsetDelta = int32(len(small)), int32(len(small)-1)
			smallB := encodeTestBatch(t, h, small)
			r := NewReencoder()
			calls := []struct {
				name string
				call func(b []byte) error
			}{
				{"Reencode", func(b []byte) error { _, _, err := r.Reencode(nil, b, 7); return err }},
				{"Merge", func(b []byte) error {
					_, _, err := r.Merge(nil, [][]byte{b, b}, MergeHeader{ProducerID: 7, BaseSequence: 0})
					return err
				}},
				{"Join", func(b []byte) error {
					_, err := r.Join(nil, [][]byte{b, b}, MergeHeader{ProducerID: 7, BaseSequence: 0})
					return err
				}},
				{"Records", func(b []byte) error { _, err := r.Records(b); return err }},
				{"MinTimestamp", func(b []byte) error { _, err := r.MinTimestamp(b); return err }},
			}
			for _, c := range calls {
				if err := c.call(smallB); err != nil {
					t.Fatalf("%s of a small batch: %v", c.name, err)
				}
				if c.name == "Reencode" && r.scratch() == 0 {
					t.Fatalf("%s of a small batch kept no scratch buffer for the next call", c.name)
				}
				if err := c.call(bigB); err != nil {
					t.Fatalf("%s of a %d KiB batch: %v", c.name, 64*len(big), err)
				}
				if got := r.scratch(); got > 3*keepScratch {
					t.Fatalf("after %s of a %d KiB batch the Reencoder keeps %d bytes of scratch, want at most %d",
						c.name, 64*len(big), got, 3*keepScratch)
				}
			}
		})
	}
}
