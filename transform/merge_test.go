package transform

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/internal/testkit/batchtest"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
)

// checkMerged checks a merged batch against its source batches: a valid
// batch with header m, the codec and attributes of the first, every
// record of every source batch in order with its create time, key, value
// and headers, offset deltas 0..n-1, and the offset map pointing each
// record at its source offset.
func checkMerged(t testing.TB, r *Reencoder, out []byte, offsets []OffsetMap, bs [][]byte, m MergeHeader) {
	t.Helper()
	if err := Validate(out); err != nil {
		t.Fatalf("merged batch: %v", err)
	}
	h := mustHeader(t, out)
	first := mustHeader(t, bs[0])
	var want []Record
	maxTS := first.MaxTimestamp
	for _, b := range bs {
		recs, err := r.Records(b)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, recs...)
		maxTS = max(maxTS, mustHeader(t, b).MaxTimestamp)
	}
	attrs := first.Attributes &^ AttrTransactional
	if m.Transactional {
		attrs |= AttrTransactional
	}
	n := int32(len(want))
	wantH := Header{BaseOffset: 0, Length: h.Length, PartitionLeaderEpoch: -1, Magic: 2, CRC: h.CRC, Attributes: attrs,
		LastOffsetDelta: n - 1, FirstTimestamp: first.FirstTimestamp, MaxTimestamp: maxTS,
		ProducerID: m.ProducerID, ProducerEpoch: m.ProducerEpoch, BaseSequence: m.BaseSequence, NumRecords: n}
	if h != wantH {
		t.Fatalf("merged header =\n%+v, want\n%+v", h, wantH)
	}
	got, err := r.Records(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) || len(offsets) != len(want) {
		t.Fatalf("merged batch has %d records and %d offsets, want %d", len(got), len(offsets), len(want))
	}
	for i := range got {
		if got[i].Offset != int64(i) || !got[i].Same(want[i]) {
			t.Fatalf("merged record %d: %+v, want %+v at offset %d", i, got[i], want[i], i)
		}
		if o := (OffsetMap{Source: want[i].Offset, Delta: int32(i)}); offsets[i] != o {
			t.Fatalf("offsets[%d] = %+v, want %+v", i, offsets[i], o)
		}
	}
}

// Guards Merge in every codec: three batches, the second created before
// the first (its records' timestamp deltas become negative), the third
// with offset gaps the source's cleaner left, become one dense batch with
// every record's content and create time, the header the caller gives,
// and the offset map; the transactional bit as asked.
func TestMerge(t *testing.T) {
	r := NewReencoder()
	for _, codec := range testCodecs {
		t.Run(codec.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(codec.codec), 7))
			a, _ := denseTestBatch(t, rng, 3, codec.codec, Header{BaseOffset: 10, FirstTimestamp: 1_700_000_001_000, ProducerID: 4, BaseSequence: 0})
			b, _ := denseTestBatch(t, rng, 2, codec.codec, Header{BaseOffset: 13, FirstTimestamp: 1_700_000_000_000, ProducerID: 4, BaseSequence: 3})
			dense, _ := denseTestBatch(t, rng, 6, codec.codec, Header{BaseOffset: 15, FirstTimestamp: 1_700_000_002_000, ProducerID: 4, BaseSequence: 5})
			c, _ := gappyTestBatch(t, dense, func(i int) bool { return i%2 == 0 })
			for _, m := range []MergeHeader{{ProducerID: -77, ProducerEpoch: 3, BaseSequence: 0}, {ProducerID: 900, ProducerEpoch: 1, BaseSequence: 41, Transactional: true}} {
				out, offsets, err := r.Merge(nil, [][]byte{a, b, c}, m)
				if err != nil {
					t.Fatal(err)
				}
				checkMerged(t, r, out, offsets, [][]byte{a, b, c}, m)
				checkJoin(t, r, out, [][]byte{a, b, c}, m)
			}
			// One batch alone is re-framed whole.
			out, offsets, err := r.Merge(nil, [][]byte{c}, MergeHeader{ProducerID: 5})
			if err != nil {
				t.Fatal(err)
			}
			checkMerged(t, r, out, offsets, [][]byte{c}, MergeHeader{ProducerID: 5})
		})
	}
}

// Guards what Merge refuses: nothing to merge, a control batch, a batch
// without records, a LogAppendTime batch and batches of different codecs
// are ErrNotMergeable; damaged records a *CorruptError.
func TestMergeErrors(t *testing.T) {
	r := NewReencoder()
	rec := []batchtest.Record{{Key: []byte("k"), Value: []byte("v"), OffsetDelta: -1}}
	none := batchtest.Build(batchtest.Spec{PID: 1, Records: rec})
	lz4 := batchtest.Build(batchtest.Spec{PID: 1, Records: rec, Codec: 3})
	control := batchtest.Build(batchtest.Spec{PID: 1, Control: true, Transactional: true, Records: rec})
	stamped := batchtest.Build(batchtest.Spec{PID: 1, Records: rec, LogAppendTime: 1_700_000_000_000})
	empty := encodeTestBatchRaw(Header{LastOffsetDelta: 0}, nil)
	for name, bs := range map[string][][]byte{
		"nothing":        nil,
		"control":        {none, control},
		"empty":          {none, empty},
		"log append":     {stamped},
		"mixed codecs":   {none, lz4},
		"mixed codecs 2": {lz4, none},
	} {
		if _, _, err := r.Merge(nil, bs, MergeHeader{}); !errors.Is(err, ErrNotMergeable) {
			t.Errorf("%s: %v, want ErrNotMergeable", name, err)
		}
	}
	garbage := encodeTestBatchRaw(Header{NumRecords: 2, LastOffsetDelta: 1}, []byte{0x02, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x09})
	var ce *CorruptError
	if _, _, err := r.Merge(nil, [][]byte{none, garbage}, MergeHeader{}); !errors.As(err, &ce) {
		t.Errorf("damaged records: %v, want a *CorruptError", err)
	}
}

func FuzzMerge(f *testing.F) {
	f.Add(uint64(1), uint8(3), uint8(0), uint64(0b101))
	f.Add(uint64(2), uint8(9), uint8(3), uint64(1<<40|6))
	f.Add(uint64(3), uint8(1), uint8(4), uint64(0))
	r := NewReencoder()
	f.Fuzz(func(t *testing.T, seed uint64, batches, codec uint8, drop uint64) {
		// Random batches of random records (some with gaps) in, every
		// record out in order.
		rng := rand.New(rand.NewPCG(seed, seed>>32))
		c := int8(codec % 5)
		var bs [][]byte
		base := int64(seed >> 4)
		for i := range int(batches%8) + 1 {
			n := rng.IntN(12) + 1
			dense, _ := denseTestBatch(t, rng, n, c, Header{BaseOffset: base, FirstTimestamp: int64(seed>>24) + rng.Int64N(1<<20) - 1<<19,
				ProducerID: int64(seed >> 1), BaseSequence: int32(i)})
			base += int64(n)
			b, kept := gappyTestBatch(t, dense, func(j int) bool { return j == 0 || drop&(1<<((i*12+j)%64)) == 0 })
			if len(kept) == 0 {
				continue
			}
			bs = append(bs, b)
		}
		m := MergeHeader{ProducerID: int64(seed), ProducerEpoch: int16(seed >> 5), BaseSequence: int32(seed >> 9), Transactional: seed&1 == 1}
		out, offsets, err := r.Merge(nil, bs, m)
		if err != nil {
			t.Fatalf("Merge: %v", err)
		}
		checkMerged(t, r, out, offsets, bs, m)
		checkJoin(t, r, out, bs, m)
	})
}

// checkJoin checks that Join gives the bytes Merge gave (out), also into a
// buffer that held another batch, with the Reencoder's buffers used since.
func checkJoin(t *testing.T, r *Reencoder, out []byte, bs [][]byte, m MergeHeader) {
	t.Helper()
	for _, dst := range [][]byte{nil, bytes.Repeat([]byte{0xee}, len(out)+100)} {
		got, err := r.Join(dst, bs, m)
		if err != nil {
			t.Fatalf("Join: %v", err)
		}
		if !bytes.Equal(got, out) {
			t.Fatalf("Join gave %d bytes that differ from Merge's %d", len(got), len(out))
		}
	}
}

// Guards a merged batch against a broker, in every codec: three batches a
// kgo producer wrote (linger 0: one batch per flush), the middle one with
// records the cleaner would drop, merged under a mapped producer ID and
// appended to the destination; a consumer there reads every record of the
// source in order, each with its key, value, headers and timestamp.
func TestBrokerMerge(t *testing.T) {
	src, dst := kafkatest.Pair(t)
	srcCl, dstCl := kafkatest.Client(t, src), kafkatest.Client(t, dst)
	region, _ := RegionOf(kafkatest.SourceClusterID)
	r := NewReencoder()
	for _, codec := range testCodecs {
		t.Run(codec.name, func(t *testing.T) {
			topic := "merge-" + codec.name
			srcTopic := createTestTopic(t, srcCl, topic, 1, nil)
			dstTopic := createTestTopic(t, dstCl, topic, 1, nil)
			prod := kafkatest.Client(t, src, kgo.DefaultProduceTopic(topic), kgo.ManualFlushing(),
				kgo.ProducerBatchCompression(codec.kgo), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			const perBatch, batches = 4, 3
			for b := range batches {
				var recs []*kgo.Record
				for i := range perBatch {
					recs = append(recs, &kgo.Record{
						Key:       fmt.Appendf(nil, "k%d-%d", b, i),
						Value:     []byte(strings.Repeat(fmt.Sprintf("batch %d record %d; ", b, i), 3)),
						Headers:   []kgo.RecordHeader{{Key: "i", Value: fmt.Appendf(nil, "%d", i)}},
						Timestamp: time.UnixMilli(1_700_000_000_000 + int64(1000*(batches-b)+i)), // later batches created earlier
					})
				}
				produceFlushed(t, prod, recs...)
			}
			srcRecs := sourceRecordsByOffset(t, src, topic, perBatch*batches)[0]
			fetched := fetchRaw(t, srcCl, srcTopic, 0, 0).batches
			if len(fetched) != batches {
				t.Fatalf("source holds %d batches, want %d", len(fetched), batches)
			}
			fetched[1], _ = gappyTestBatch(t, fetched[1], func(i int) bool { return i != 2 })
			h := mustHeader(t, fetched[0])
			pid := MapPID(h.ProducerID, region)
			out, offsets, err := r.Merge(nil, fetched, MergeHeader{ProducerID: pid, ProducerEpoch: h.ProducerEpoch, BaseSequence: h.BaseSequence})
			if err != nil {
				t.Fatal(err)
			}
			if mustHeader(t, out).Compression() != codec.codec {
				t.Fatalf("merged batch has codec %d, source %d", mustHeader(t, out).Compression(), codec.codec)
			}
			if err := produceRaw(t, dstCl, dstTopic, 0, out); err != nil {
				t.Fatalf("append the merged batch: %v", err)
			}
			var want []forwardedTestRecord
			for _, o := range offsets {
				want = append(want, forwardedTestRecord{source: o.Source, pid: pid})
			}
			if len(want) != perBatch*batches-1 {
				t.Fatalf("merged %d records, want %d", len(want), perBatch*batches-1)
			}
			checkForwarded(t, dst, topic, srcRecs, want)
		})
	}
}
