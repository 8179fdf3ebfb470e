package transform

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
)

// rawCRC is the register after feeding d into c with no pre- or
// post-inversion, computed with hash/crc32 (independent of crc.go).
func rawCRC(c uint32, d []byte) uint32 {
	return ^crc32.Update(^c, crc32.MakeTable(crc32.Castagnoli), d)
}

// Guards the zero-byte shift tables against hash/crc32 over real zero bytes,
// for lengths that exercise single bits, many bits and the carry chains.
func TestCRCShift(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	zeros := make([]byte, 1<<21)
	for _, n := range []int{0, 1, 2, 3, 7, 8, 10, 28, 61, 255, 256, 4095, 65536, 1<<20 - 51, 1<<21 - 1} {
		for range 5 {
			c := rng.Uint32()
			if got, want := crcShift(c, uint64(n)), rawCRC(c, zeros[:n]); got != want {
				t.Fatalf("crcShift(%#x, %d) = %#x, hash/crc32 says %#x", c, n, got, want)
			}
		}
	}
	// Levels above what a batch needs still compose: 2^40 zero bytes is
	// 2^8 times 2^32, and shifting by 2^32 is shifting by 2^31 twice.
	c := rng.Uint32()
	if crcShift(c, 1<<32) != crcShift(crcShift(c, 1<<31), 1<<31) {
		t.Fatal("crcShift(2^32) != crcShift(2^31) twice")
	}
	if crcShift(c, 1<<63|1) != crcShift(crcShift(c, 1<<63), 1) {
		t.Fatal("crcShift does not compose at the top level")
	}
}

// randomBatch is a batch of size bytes with random header fields and random
// record bytes (Rewrite never looks at the records).
func randomBatch(rng *rand.Rand, size int, attrs int16) []byte {
	recs := make([]byte, size-BatchHeaderSize)
	for i := 0; i+8 <= len(recs); i += 8 {
		binary.LittleEndian.PutUint64(recs[i:], rng.Uint64())
	}
	for i := len(recs) &^ 7; i < len(recs); i++ {
		recs[i] = byte(rng.Uint32())
	}
	return encodeTestBatchRaw(Header{
		BaseOffset: rng.Int64(), PartitionLeaderEpoch: rng.Int32(), Attributes: attrs,
		LastOffsetDelta: rng.Int32(), FirstTimestamp: rng.Int64(), MaxTimestamp: rng.Int64(),
		ProducerID: rng.Int64(), ProducerEpoch: int16(rng.Uint32()), BaseSequence: rng.Int32(), NumRecords: rng.Int32(),
	}, recs)
}

// checkRewrite runs Rewrite and checks the result against a full CRC and the
// original bytes.
func checkRewrite(t testing.TB, b []byte, pid int64) {
	t.Helper()
	orig := bytes.Clone(b)
	Rewrite(b, pid)
	if err := Validate(b); err != nil {
		t.Fatalf("after Rewrite of a %d-byte batch (attrs %#x, pid %d -> %d): %v", len(b), orig[22], int64(binary.BigEndian.Uint64(orig[43:])), pid, err)
	}
	h, err := ParseHeader(b)
	if err != nil {
		t.Fatalf("ParseHeader after Rewrite: %v", err)
	}
	oh, _ := ParseHeader(orig)
	want := oh
	want.BaseOffset, want.PartitionLeaderEpoch, want.ProducerID = 0, -1, pid
	want.Attributes &^= AttrTransactional
	want.CRC = h.CRC
	if h != want {
		t.Fatalf("header after Rewrite =\n%+v, want\n%+v", h, want)
	}
	// Everything outside baseOffset, leader epoch, CRC, attributes and
	// producer ID is untouched, the records above all.
	for _, r := range [][2]int{{16, 17}, {23, 43}, {51, len(b)}} {
		if !bytes.Equal(b[r[0]:r[1]], orig[r[0]:r[1]]) {
			t.Fatalf("Rewrite changed bytes %d..%d", r[0], r[1])
		}
	}
}

func TestRewrite(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	mapped := MapPID(4242, 0x71720375)
	for _, tc := range []struct {
		name    string
		size    int
		attrs   int16
		pid     int64
		samePID bool // the batch already carries pid
	}{
		// Guards the smallest batch: header only, zero records, no bytes after the PID but the tail of the header.
		{"header only", BatchHeaderSize, 0, mapped, false},
		// Guards a transactional header-only batch (both diffs at once, shift of 10 bytes).
		{"header only transactional", BatchHeaderSize, AttrTransactional | 4, mapped, false},
		// Guards the common case: idempotent non-transactional, small batch.
		{"idempotent 1KiB", 1 << 10, 3, mapped, false},
		// Guards a transactional batch: attributes and PID both change.
		{"transactional 16KiB", 16 << 10, AttrTransactional | 1, mapped, false},
		// Guards an unchanged PID with a transactional bit (attribute diff only).
		{"txn bit only", 300, AttrTransactional, -1, true},
		// Guards a no-op rewrite (PID already the target, not transactional): only offset and epoch change.
		{"no-op", 300, AttrTimestampLogAppend, -1, true},
		// Guards a rewrite to a positive PID and odd sizes.
		{"odd size", 12345, 2, 77, false},
		// Guards the shift at 1 MiB.
		{"1MiB", 1 << 20, AttrTransactional | 2, mapped, false},
		// Guards the shift at 16 MiB (more set bits of n than any smaller size here).
		{"16MiB", 16 << 20, AttrTransactional, math.MinInt64, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := randomBatch(rng, tc.size, tc.attrs)
			if tc.samePID {
				h := mustHeader(t, b)
				h.ProducerID = tc.pid
				b = encodeTestBatchRaw(h, b[BatchHeaderSize:])
			}
			checkRewrite(t, b, tc.pid)
			// Rewriting again with the same PID is idempotent for the CRC.
			before := bytes.Clone(b)
			Rewrite(b, tc.pid)
			if !bytes.Equal(before, b) {
				t.Fatal("a second Rewrite with the same PID changed the batch")
			}
		})
	}
}

func mustHeader(t testing.TB, b []byte) Header {
	t.Helper()
	h, err := ParseHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// Guards end-to-end integrity: a batch damaged before the agent saw it still
// fails the CRC check after Rewrite, so the destination broker refuses it.
func TestRewriteKeepsDamage(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, at := range []int{22, 30, 61, 500, 1023} {
		b := randomBatch(rng, 1024, AttrTransactional)
		b[at] ^= 0x04
		Rewrite(b, MapPID(1, 2))
		if err := Validate(b); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "crc check failed") {
			t.Fatalf("damage at byte %d: Validate after Rewrite = %v, want a crc failure", at, err)
		}
	}
}

// Guards the hot path's promise: no allocation at any size.
func TestRewriteAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, size := range []int{BatchHeaderSize, 16 << 10, 1 << 20} {
		b := randomBatch(rng, size, AttrTransactional)
		pid := int64(-5)
		if allocs := testing.AllocsPerRun(100, func() { pid--; Rewrite(b, pid) }); allocs != 0 {
			t.Fatalf("Rewrite of %d bytes allocates %v times", size, allocs)
		}
		if err := Validate(b); err != nil {
			t.Fatalf("after 100 rewrites: %v", err)
		}
	}
}

func FuzzRewriteCRC(f *testing.F) {
	f.Add([]byte{}, int16(0), int64(0), int64(-1), int64(0))
	f.Add([]byte("some records"), int16(AttrTransactional|3), int64(4242), MapPID(4242, 99), int64(12))
	f.Add(bytes.Repeat([]byte{0xFF}, 5000), int16(-1), int64(-1), int64(math.MaxInt64), int64(-7))
	f.Fuzz(func(t *testing.T, recs []byte, attrs int16, pid, newPID, other int64) {
		b := encodeTestBatchRaw(Header{BaseOffset: other, PartitionLeaderEpoch: int32(other), Attributes: attrs,
			LastOffsetDelta: int32(other >> 8), FirstTimestamp: other * 3, MaxTimestamp: other ^ pid, ProducerID: pid,
			ProducerEpoch: int16(other), BaseSequence: int32(other >> 32), NumRecords: int32(len(recs))}, recs)
		checkRewrite(t, b, newPID)
		// Incremental == full also when the batch arrives with a wrong
		// CRC: the error carries over unchanged.
		b[17] ^= 0x5A
		stored := binary.BigEndian.Uint32(b[17:])
		full := crc32.Checksum(b[21:], crcTable)
		Rewrite(b, ^newPID)
		if got, want := binary.BigEndian.Uint32(b[17:])^crc32.Checksum(b[21:], crcTable), stored^full; got != want {
			t.Fatalf("CRC error changed from %#x to %#x across Rewrite", want, got)
		}
	})
}

// Rewrite prepares a fetched transactional batch of source PID 7 for a
// destination broker, under the PID mapped into region 42.
func ExampleRewrite() {
	b := encodeTestBatchRaw(Header{BaseOffset: 500, Attributes: AttrTransactional, ProducerID: 7, NumRecords: 1}, []byte("record"))
	Rewrite(b, MapPID(7, 42))
	h, _ := ParseHeader(b)
	fmt.Println(h.BaseOffset, h.PartitionLeaderEpoch, h.Transactional(), h.ProducerID, Validate(b))
	// Output: 0 -1 false -9223371946660462585 <nil>
}

// brokerSourceRecords produces to both partitions of topic on cl's cluster
// with an idempotent, a plain (non-idempotent) and a transactional producer,
// with one committed and one aborted transaction per round, all in codec.
// It returns the committed records by partition, in log order.
func brokerSourceRecords(t *testing.T, c *kfake.Cluster, topic string, codec kgo.CompressionCodec, name string) map[int32][]*kgo.Record {
	t.Helper()
	common := []kgo.Opt{kgo.DefaultProduceTopic(topic), kgo.ManualFlushing(), kgo.ProducerBatchCompression(codec),
		kgo.RecordPartitioner(kgo.ManualPartitioner())}
	idem := kafkatest.Client(t, c, common...)
	plain := kafkatest.Client(t, c, append(common, kgo.DisableIdempotentWrite())...)
	txn := kafkatest.Client(t, c, append(common, kgo.TransactionalID("transform-test-"+name))...)

	base := time.UnixMilli(1_700_000_000_000)
	want := map[int32][]*kgo.Record{}
	seq := 0
	mk := func(kind string, p int32, n int, committed bool) []*kgo.Record {
		var rs []*kgo.Record
		for range n {
			seq++
			r := &kgo.Record{
				Partition: p,
				Key:       fmt.Appendf(nil, "%s-%d", kind, seq),
				// Compressible, so that the producer keeps the codec.
				Value:     []byte(strings.Repeat(fmt.Sprintf("%s record %d in %s; ", kind, seq, name), 20)),
				Headers:   []kgo.RecordHeader{{Key: "kind", Value: []byte(kind)}, {Key: "seq", Value: fmt.Appendf(nil, "%d", seq)}},
				Timestamp: base.Add(time.Duration(seq) * time.Millisecond),
			}
			if seq%7 == 0 {
				r.Key = nil // null keys survive too
			}
			rs = append(rs, r)
			if committed {
				want[p] = append(want[p], r)
			}
		}
		return rs
	}
	ctx := testCtx(t)
	for range 2 {
		produceFlushed(t, idem, append(mk("idempotent", 0, 5, true), mk("idempotent", 1, 4, true)...)...)
		produceFlushed(t, plain, append(mk("plain", 0, 3, true), mk("plain", 1, 2, true)...)...)
		for _, commit := range []bool{true, false} {
			if err := txn.BeginTransaction(); err != nil {
				t.Fatalf("begin transaction: %v", err)
			}
			produceFlushed(t, txn, append(mk("transactional", 0, 4, commit), mk("transactional", 1, 3, commit)...)...)
			if err := txn.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
				t.Fatalf("end transaction (commit %v): %v", commit, err)
			}
		}
	}
	return want
}

// Guards the whole fast path against real brokers: batches that real kgo
// producers (idempotent, plain, transactional with an abort) wrote in each
// codec, fetched raw READ_COMMITTED, split, validated and rewritten with a
// mapped PID, are accepted by a destination broker (which checks the CRC, the
// control bit and the offset range) and read back record for record, under
// the mapped PID, with the record bytes unchanged.
func TestBrokerRewrite(t *testing.T) {
	src, dst := kafkatest.Pair(t)
	srcCl, dstCl := kafkatest.Client(t, src), kafkatest.Client(t, dst)
	region, _ := RegionOf(kafkatest.SourceClusterID)
	for _, codec := range testCodecs {
		t.Run(codec.name, func(t *testing.T) {
			topic := "rewrite-" + codec.name
			srcTopic := createTestTopic(t, srcCl, topic, 2, nil)
			dstTopic := createTestTopic(t, dstCl, topic, 2, map[string]*string{"compression.type": new("producer")})
			want := brokerSourceRecords(t, src, topic, codec.kgo, codec.name)

			total := 0
			for p := range int32(2) {
				fetched := fetchRaw(t, srcCl, srcTopic, p, 0)
				if len(fetched.aborted) == 0 {
					t.Fatalf("partition %d: the source fetch lists no aborted transaction", p)
				}
				var sent [][]byte
				var srcPIDs []int64
				for _, b := range committedData(t, fetched) {
					if err := Validate(b); err != nil {
						t.Fatalf("source batch of partition %d: %v", p, err)
					}
					h := mustHeader(t, b)
					if h.Compression() != codec.codec {
						t.Fatalf("source batch at offset %d has codec %d, the producer was set to %d", h.BaseOffset, h.Compression(), codec.codec)
					}
					if !h.Dense() {
						t.Fatalf("source batch at offset %d is not dense", h.BaseOffset)
					}
					Rewrite(b, MapPID(h.ProducerID, region))
					if err := produceRaw(t, dstCl, dstTopic, p, b); err != nil {
						t.Fatalf("rewritten batch (source offset %d, pid %d): %v", h.BaseOffset, h.ProducerID, err)
					}
					sent = append(sent, b)
					srcPIDs = append(srcPIDs, h.ProducerID)
				}
				// The destination holds exactly the sent batches: same bytes
				// from the CRC on (records, PID, attributes), new offsets.
				got := fetchRaw(t, dstCl, dstTopic, p, 0).batches
				if len(got) != len(sent) {
					t.Fatalf("partition %d: destination has %d batches, %d were sent", p, len(got), len(sent))
				}
				var next int64
				for i, b := range got {
					h := mustHeader(t, b)
					if !bytes.Equal(b[17:], sent[i][17:]) {
						t.Fatalf("partition %d: destination batch %d differs from the one sent", p, i)
					}
					if h.BaseOffset != next || h.ProducerID != MapPID(srcPIDs[i], region) || h.Transactional() {
						t.Fatalf("partition %d batch %d: offset %d (want %d), pid %d (want %d), transactional %v",
							p, i, h.BaseOffset, next, h.ProducerID, MapPID(srcPIDs[i], region), h.Transactional())
					}
					if srcPIDs[i] >= 0 && h.ProducerID >= 0 {
						t.Fatalf("partition %d batch %d: pid %d is not in the mapped (negative) space", p, i, h.ProducerID)
					}
					next = h.NextOffset()
				}
				total += len(want[p])
			}

			// A real consumer reads every committed source record, in order.
			srcRecs := consumeTestRecords(t, src, topic, total)
			dstRecs := consumeTestRecords(t, dst, topic, total)
			for p := range int32(2) {
				if len(dstRecs[p]) != len(want[p]) {
					t.Fatalf("partition %d: %d records at the destination, want %d", p, len(dstRecs[p]), len(want[p]))
				}
				for i, r := range dstRecs[p] {
					if d := diffKgoRecord(r, want[p][i]); d != "" {
						t.Fatalf("partition %d record %d: %s", p, i, d)
					}
					if s := srcRecs[p][i]; r.ProducerID != MapPID(s.ProducerID, region) || r.ProducerEpoch != s.ProducerEpoch {
						t.Fatalf("partition %d record %d: pid %d epoch %d, source pid %d epoch %d", p, i, r.ProducerID, r.ProducerEpoch, s.ProducerID, s.ProducerEpoch)
					}
				}
			}
		})
	}
}
