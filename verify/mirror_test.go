package verify

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/transform"
)

// This file is the tests' own mirror: it copies raw source batches the way
// mirrord does (read_committed fetch, aborted and control batches dropped
// with the response's aborted-transaction index, transform.Rewrite, raw
// Produce), and can re-encode a batch with edited records, so that each test
// can damage the copy in one precise way.

const testTimeout = 2 * time.Minute

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// batchKind says what a fetched source batch is.
type batchKind int

const (
	kindKept    batchKind = iota // committed data: mirrored
	kindAborted                  // data of an aborted transaction
	kindControl                  // a transaction marker
)

// mbatch is one source batch and how the test mirror writes it.
type mbatch struct {
	kind batchKind
	hdr  transform.Header // of the source batch
	raw  []byte           // the source batch as fetched
	src  []int64          // source offsets of its records
	pid  int64            // producer ID to write

	// recs, if set, replaces the batch's records: the batch is
	// re-encoded (densely) with codec, hdr's epoch and base sequence.
	recs  []trecord
	codec int8
}

// trecord is a record with its absolute timestamp.
type trecord struct {
	key, value []byte
	headers    []kmsg.Header
	ts         int64
}

func (b *mbatch) clone() *mbatch {
	c := *b
	c.src = slices.Clone(b.src)
	c.recs = slices.Clone(b.recs)
	return &c
}

func (b *mbatch) count() int {
	if b.recs != nil {
		return len(b.recs)
	}
	return len(b.src)
}

// records decodes the source batch's records.
func (b *mbatch) records(t testing.TB) []trecord {
	t.Helper()
	if b.recs != nil {
		return slices.Clone(b.recs)
	}
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(b.raw); err != nil {
		t.Fatalf("decode batch at offset %d: %v", b.hdr.BaseOffset, err)
	}
	raw, err := kgo.DefaultDecompressor().Decompress(rb.Records, kgo.CompressionCodecType(b.hdr.Compression()))
	if err != nil {
		t.Fatalf("decompress batch at offset %d: %v", b.hdr.BaseOffset, err)
	}
	var out []trecord
	for range rb.NumRecords {
		length, n := binary.Varint(raw)
		if n <= 0 || int(length)+n > len(raw) {
			t.Fatalf("batch at offset %d: record does not decode", b.hdr.BaseOffset)
		}
		var r kmsg.Record
		if err := r.ReadFrom(raw[:n+int(length)]); err != nil {
			t.Fatalf("batch at offset %d: %v", b.hdr.BaseOffset, err)
		}
		raw = raw[n+int(length):]
		out = append(out, trecord{key: r.Key, value: r.Value, headers: r.Headers, ts: rb.FirstTimestamp + r.TimestampDelta64})
	}
	return out
}

// edit makes the batch re-encode with recs.
func (b *mbatch) edit(recs []trecord) {
	b.recs = recs
	if b.codec == 0 {
		b.codec = b.hdr.Compression()
	}
}

// encode is the batch as the test mirror produces it.
func (b *mbatch) encode(t testing.TB) []byte {
	t.Helper()
	if b.recs == nil && b.hdr.Dense() {
		out := slices.Clone(b.raw)
		transform.Rewrite(out, b.pid)
		return out
	}
	recs := b.recs
	if recs == nil { // compaction left gaps: renumber densely
		recs = b.records(t)
		b.codec = b.hdr.Compression()
	}
	return encodeBatch(t, recs, b.codec, b.pid, b.hdr.ProducerEpoch, b.hdr.BaseSequence)
}

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// encodeBatch builds a v2 batch as a client would send it.
func encodeBatch(t testing.TB, recs []trecord, codec int8, pid int64, epoch int16, seq int32) []byte {
	t.Helper()
	if len(recs) == 0 {
		t.Fatal("encodeBatch: no records")
	}
	first, maxTS := recs[0].ts, recs[0].ts
	var raw []byte
	for i, r := range recs {
		maxTS = max(maxTS, r.ts)
		kr := kmsg.Record{TimestampDelta64: r.ts - first, OffsetDelta: int32(i), Key: r.key, Value: r.value, Headers: r.headers}
		body := kr.AppendTo(nil) // with Length 0, a one-byte varint
		kr.Length = int32(len(body) - 1)
		raw = kr.AppendTo(raw)
	}
	if codec != 0 {
		c, err := kgo.DefaultCompressor(codecOf(codec))
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		out, got := c.Compress(&buf, raw)
		if out == nil || int8(got) != codec {
			t.Fatalf("compress with codec %d: got codec %d", codec, got)
		}
		raw = slices.Clone(out)
	}
	rb := kmsg.RecordBatch{
		PartitionLeaderEpoch: -1,
		Magic:                2,
		Attributes:           int16(codec),
		LastOffsetDelta:      int32(len(recs) - 1),
		FirstTimestamp:       first,
		MaxTimestamp:         maxTS,
		ProducerID:           pid,
		ProducerEpoch:        epoch,
		FirstSequence:        seq,
		NumRecords:           int32(len(recs)),
		Records:              raw,
	}
	b := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32c))
	return b
}

func codecOf(c int8) kgo.CompressionCodec {
	switch c {
	case 1:
		return kgo.GzipCompression()
	case 2:
		return kgo.SnappyCompression()
	case 3:
		return kgo.Lz4Compression()
	case 4:
		return kgo.ZstdCompression()
	}
	return kgo.NoCompression()
}

// partitionInfo is a topic's ID and a partition's leader.
func partitionInfo(t testing.TB, cl *kgo.Client, topic string, p int32) (id [16]byte, leader int32) {
	t.Helper()
	m, err := kadm.NewClient(cl).Metadata(testCtx(t), topic)
	if err != nil {
		t.Fatalf("metadata of %s: %v", topic, err)
	}
	td, ok := m.Topics[topic]
	if !ok || td.Err != nil {
		t.Fatalf("metadata of %s: %v", topic, td.Err)
	}
	pd, ok := td.Partitions[p]
	if !ok {
		t.Fatalf("metadata of %s: no partition %d", topic, p)
	}
	return td.ID, pd.Leader
}

// fetchSource fetches every batch of a source partition below its last
// stable offset with raw read_committed fetches and classifies it as a
// Kafka consumer does with the response's aborted-transaction index.
func fetchSource(t testing.TB, cl *kgo.Client, topic string, p int32) []*mbatch {
	t.Helper()
	ctx := testCtx(t)
	id, leader := partitionInfo(t, cl, topic, p)
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup(topic, p)
	starts, err := kadm.NewClient(cl).ListStartOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	start, _ := starts.Lookup(topic, p)
	var out []*mbatch
	for offset := start.Offset; offset < end.Offset; {
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID = -1
		req.MaxWaitMillis = 100
		req.MinBytes = 1
		req.IsolationLevel = 1
		req.SessionEpoch = -1
		req.MaxBytes = 2 << 20 // partition limit + more than any test batch: never binds (DESIGN §11, read.go)
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = topic, id
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, offset, 1<<20
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		kresp, err := cl.Broker(int(leader)).Request(ctx, req)
		if err != nil {
			t.Fatalf("fetch %s[%d] at %d: %v", topic, p, offset, err)
		}
		part := kresp.(*kmsg.FetchResponse).Topics[0].Partitions[0]
		if err := kerr.ErrorForCode(part.ErrorCode); err != nil {
			t.Fatalf("fetch %s[%d] at %d: %v", topic, p, offset, err)
		}
		batches, _, err := transform.Split(part.RecordBatches, nil)
		if err != nil {
			t.Fatalf("split %s[%d] at %d: %v", topic, p, offset, err)
		}
		if len(batches) == 0 {
			t.Fatalf("fetch %s[%d] at %d below the end %d returned no batch", topic, p, offset, end.Offset)
		}
		aborted := slices.Clone(part.AbortedTransactions)
		slices.SortFunc(aborted, func(a, b kmsg.FetchResponseTopicPartitionAbortedTransaction) int {
			return int(a.FirstOffset - b.FirstOffset)
		})
		active := make(map[int64]bool)
		for _, raw := range batches {
			h, err := transform.ParseHeader(raw)
			if err != nil {
				t.Fatal(err)
			}
			if h.NextOffset() <= offset {
				continue
			}
			for len(aborted) > 0 && aborted[0].FirstOffset <= h.NextOffset()-1 {
				active[aborted[0].ProducerID] = true
				aborted = aborted[1:]
			}
			b := &mbatch{hdr: h, raw: slices.Clone(raw), pid: h.ProducerID}
			switch {
			case h.Control():
				b.kind = kindControl
				delete(active, h.ProducerID) // a producer's next marker after an aborted start is its abort marker
			case h.Transactional() && active[h.ProducerID]:
				b.kind = kindAborted
			}
			if b.kind != kindControl {
				b.src = recordOffsets(t, b)
			}
			out = append(out, b)
			offset = h.NextOffset()
		}
	}
	return out
}

// recordOffsets reads the offsets of a batch's records (they have gaps
// after compaction).
func recordOffsets(t testing.TB, b *mbatch) []int64 {
	t.Helper()
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(b.raw); err != nil {
		t.Fatal(err)
	}
	fp, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{}, &kmsg.FetchResponseTopicPartition{RecordBatches: b.raw}, kgo.DefaultDecompressor(), nil)
	if fp.Err != nil {
		t.Fatal(fp.Err)
	}
	var out []int64
	for _, r := range fp.Records {
		out = append(out, r.Offset)
	}
	if len(out) != int(rb.NumRecords) {
		t.Fatalf("batch at %d: %d records decoded, header says %d", b.hdr.BaseOffset, len(out), rb.NumRecords)
	}
	return out
}

// keptBatches are the batches the mirror forwards, with the producer ID
// mapped into the source region.
func keptBatches(all []*mbatch, r transform.Region) []*mbatch {
	var out []*mbatch
	for _, b := range all {
		if b.kind == kindKept && b.hdr.NumRecords > 0 {
			c := b.clone()
			c.pid = transform.MapPID(b.hdr.ProducerID, r)
			out = append(out, c)
		}
	}
	return out
}

// produceBatches appends batches to a destination partition, one raw
// Produce (acks=all) per batch, in order.
func produceBatches(t testing.TB, cl *kgo.Client, topic string, p int32, bs []*mbatch) {
	t.Helper()
	ctx := testCtx(t)
	id, leader := partitionInfo(t, cl, topic, p)
	for _, b := range bs {
		req := kmsg.NewPtrProduceRequest()
		req.Acks = -1
		req.TimeoutMillis = 10_000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic, rt.TopicID = topic, id
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition = p
		rp.Records = b.encode(t)
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		kresp, err := cl.Broker(int(leader)).Request(ctx, req)
		if err != nil {
			t.Fatalf("produce to %s[%d]: %v", topic, p, err)
		}
		part := kresp.(*kmsg.ProduceResponse).Topics[0].Partitions[0]
		if err := kerr.ErrorForCode(part.ErrorCode); err != nil {
			t.Fatalf("produce batch of source offset %d to %s[%d]: %v", b.hdr.BaseOffset, topic, p, err)
		}
	}
}

// destOffset is the destination offset of record k of batch j when bs is
// appended to an empty partition.
func destOffset(bs []*mbatch, j, k int) int64 {
	var n int64
	for _, b := range bs[:j] {
		n += int64(b.count())
	}
	return n + int64(k)
}

func countRecords(bs []*mbatch) int64 {
	var n int64
	for _, b := range bs {
		n += int64(b.count())
	}
	return n
}

func createTopic(t testing.TB, cl *kgo.Client, topic string, partitions int32, configs map[string]*string) {
	t.Helper()
	resp, err := kadm.NewClient(cl).CreateTopic(testCtx(t), partitions, 1, configs, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

func cloneBatches(bs []*mbatch) []*mbatch {
	out := make([]*mbatch, len(bs))
	for i, b := range bs {
		out[i] = b.clone()
	}
	return out
}

func (b *mbatch) String() string {
	return fmt.Sprintf("batch@%d(pid %d, %d records, codec %d)", b.hdr.BaseOffset, b.hdr.ProducerID, b.count(), b.hdr.Compression())
}
