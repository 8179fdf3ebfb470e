package statestore

import (
	"encoding/binary"
	"hash/crc32"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// murmur2 is Kafka's Utils.murmur2, written out here so that the test does
// not check kgo's partitioner against itself.
func murmur2(data []byte) int32 {
	const m, r = uint32(0x5bd1e995), 24
	length := uint32(len(data))
	h := uint32(0x9747b28c) ^ length
	for len(data) >= 4 {
		k := binary.LittleEndian.Uint32(data)
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
		data = data[4:]
	}
	switch len(data) {
	case 3:
		h ^= uint32(data[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(data[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(data[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}

// Guards the state records of transactional delivery: each record lands
// in the partition Java's and kgo's key partitioners give its key (so that
// compaction meets all of a key's records in one partition), the batches
// are valid v2 batches (CRC, offsets 0..n-1, no producer yet), and the
// records decode to what was written.
func TestBatches(t *testing.T) {
	now := time.UnixMilli(1_700_000_123_456)
	var recs []Record
	for p := range int32(40) {
		recs = append(recs, Record{Key: CheckpointKey{LinkName: "orders", TopicID: testTopicID, Partition: p},
			Value: CheckpointValue{SourceTopic: "orders", SourcePartition: p, SourceNextOffset: int64(p) * 10, DestNextOffset: int64(p)*10 + 1, TimestampMs: now.UnixMilli(), SourceTopicID: testTopicID}})
	}
	recs = append(recs, Record{Key: LinkKey{LinkName: "orders"}, Value: LinkValue{State: Mirroring, SessionEpoch: 3, Delivery: DeliveryTransactional}})
	const n = 7
	out, err := Batches("__mirror_state", n, recs, now)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for p, raw := range out {
		var b kmsg.RecordBatch
		if err := b.ReadFrom(raw); err != nil {
			t.Fatalf("partition %d: %v", p, err)
		}
		if crc := crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)); uint32(b.CRC) != crc {
			t.Fatalf("partition %d: crc %x, want %x", p, uint32(b.CRC), crc)
		}
		if b.ProducerID != -1 || b.FirstSequence != -1 || b.Attributes != 0 || b.FirstTimestamp != now.UnixMilli() || int(b.Length) != len(raw)-12 {
			t.Fatalf("partition %d: header %+v", p, b)
		}
		rs := readRecords(t, b.Records, int(b.NumRecords))
		if b.LastOffsetDelta != b.NumRecords-1 {
			t.Fatalf("partition %d: last offset delta %d for %d records", p, b.LastOffsetDelta, b.NumRecords)
		}
		for i, r := range rs {
			if r.OffsetDelta != int32(i) {
				t.Fatalf("partition %d: record %d has offset delta %d", p, i, r.OffsetDelta)
			}
			if want := (murmur2(r.Key) & 0x7fffffff) % n; want != p {
				t.Fatalf("record with key % x in partition %d, Kafka's partitioner says %d", r.Key, p, want)
			}
			got, err := Decode(r.Key, r.Value)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, w := range recs {
				wk, _ := EncodeKey(w.Key)
				if string(wk) == string(r.Key) {
					found = true
					if EncodeValue(got.Value) == nil || string(EncodeValue(got.Value)) != string(EncodeValue(w.Value)) {
						t.Fatalf("record %v decodes to %+v, want %+v", w.Key, got.Value, w.Value)
					}
				}
			}
			if !found {
				t.Fatalf("record with key % x was not written", r.Key)
			}
			seen++
		}
	}
	if seen != len(recs) {
		t.Fatalf("%d records in the batches, want %d", seen, len(recs))
	}
	if len(out) < 3 {
		t.Fatalf("41 keys over %d partitions landed in %d: the spread is suspicious", n, len(out))
	}
}

// readRecords splits a batch's uncompressed records section.
func readRecords(t *testing.T, src []byte, n int) []kmsg.Record {
	t.Helper()
	var out []kmsg.Record
	for range n {
		length, used := binary.Varint(src)
		if used <= 0 || int(length) > len(src)-used {
			t.Fatalf("record length %d in %d bytes", length, len(src))
		}
		var r kmsg.Record
		if err := r.ReadFrom(src[:used+int(length)]); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
		src = src[used+int(length):]
	}
	if len(src) != 0 {
		t.Fatalf("%d bytes after %d records", len(src), n)
	}
	return out
}
