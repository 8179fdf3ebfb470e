package statestore

import (
	"fmt"
	"hash/crc32"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Batches encodes recs as the record batches a transactional-delivery
// session appends to the state topic inside its transaction (DESIGN §14):
// one uncompressed v2 batch per state-topic partition, with no producer yet
// (the session stamps its own, transform.Stamp) and every record in the
// partition that kgo's key partitioner gives its key, Kafka's murmur2, as
// the preserve-mode session's producer places them: a key's records always
// share a partition, so that compaction keeps the last. partitions is the
// state topic's partition count.
func Batches(topic string, partitions int32, recs []Record, now time.Time) (map[int32][]byte, error) {
	if partitions <= 0 {
		return nil, fmt.Errorf("state topic %s: %d partitions", topic, partitions)
	}
	part := kgo.StickyKeyPartitioner(nil).ForTopic(topic)
	byPart := make(map[int32][]kmsg.Record)
	for i, r := range recs {
		k, v, err := r.encode()
		if err != nil {
			return nil, fmt.Errorf("state record %d: %w", i, err)
		}
		p := int32(part.Partition(&kgo.Record{Topic: topic, Key: k}, int(partitions)))
		byPart[p] = append(byPart[p], kmsg.Record{OffsetDelta: int32(len(byPart[p])), Key: k, Value: v})
	}
	out := make(map[int32][]byte, len(byPart))
	ts := now.UnixMilli()
	for p, rs := range byPart {
		var raw []byte
		for _, r := range rs {
			raw = appendRecord(raw, r)
		}
		b := kmsg.RecordBatch{
			PartitionLeaderEpoch: -1,
			Magic:                2,
			LastOffsetDelta:      int32(len(rs) - 1),
			FirstTimestamp:       ts,
			MaxTimestamp:         ts,
			ProducerID:           -1,
			ProducerEpoch:        -1,
			FirstSequence:        -1,
			NumRecords:           int32(len(rs)),
			Records:              raw,
		}
		enc := b.AppendTo(nil)
		b.Length = int32(len(enc) - 12)
		enc = b.AppendTo(enc[:0])
		crc := crc32.Checksum(enc[21:], crc32.MakeTable(crc32.Castagnoli))
		enc[17], enc[18], enc[19], enc[20] = byte(crc>>24), byte(crc>>16), byte(crc>>8), byte(crc)
		out[p] = enc
	}
	return out, nil
}

// appendRecord encodes r with its length prefix: kmsg writes r.Length as
// given, so the body is encoded once with length 0 (one varint byte) to
// measure it.
func appendRecord(dst []byte, r kmsg.Record) []byte {
	r.Length = 0
	r.Length = int32(len(r.AppendTo(nil)) - 1)
	return r.AppendTo(dst)
}
