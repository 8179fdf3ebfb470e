// Package batchtest builds v2 record batches for tests, the way a Kafka
// producer would write them (kmsg encoding, kgo compression, CRC-32C), so that
// tests of the pipeline's pure parts need no cluster.
//
// The package is pure (no I/O, no state) and starts no goroutines.
package batchtest

import (
	"bytes"
	"hash/crc32"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Record is one record of a batch.
type Record struct {
	Key, Value     []byte
	Headers        []kmsg.Header
	TimestampDelta int64
	OffsetDelta    int32 // -1: its index in the batch
}

// Spec describes a batch. LastOffsetDelta 0 or -1 means the last record's
// delta; a larger value leaves a gap at the end, as compaction does.
type Spec struct {
	BaseOffset    int64
	PID           int64
	Epoch         int16
	BaseSequence  int32
	Transactional bool
	Control       bool
	Codec         int8 // 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd
	// Level, when not zero, is the codec's compression level: the same
	// records compress to other bytes, as under another compressor
	// version.
	Level           int
	FirstTimestamp  int64
	LastOffsetDelta int32
	Records         []Record
	// LogAppendTime, when not zero, makes the batch one that a broker
	// stamped with LogAppendTime: the timestamp-type attribute set and
	// the max timestamp this value (the records keep their own).
	LogAppendTime int64
}

var codecs = [5]kgo.CompressionCodec{kgo.NoCompression(), kgo.GzipCompression(), kgo.SnappyCompression(), kgo.Lz4Compression(), kgo.ZstdCompression()}

// Build encodes the batch. It panics on a bad spec: it is for tests.
func Build(s Spec) []byte {
	var raw []byte
	maxTS := s.FirstTimestamp
	last := int32(-1)
	for i, r := range s.Records {
		od := r.OffsetDelta
		if od < 0 {
			od = int32(i)
		}
		last = od
		rec := kmsg.Record{
			TimestampDelta64: r.TimestampDelta,
			OffsetDelta:      od,
			Key:              r.Key,
			Value:            r.Value,
			Headers:          r.Headers,
		}
		raw = appendRecord(raw, rec)
		maxTS = max(maxTS, s.FirstTimestamp+r.TimestampDelta)
	}
	if s.LastOffsetDelta > 0 {
		last = s.LastOffsetDelta
	}
	attrs := int16(s.Codec)
	if s.Codec != 0 {
		cc := codecs[s.Codec]
		if s.Level != 0 {
			cc = cc.WithLevel(s.Level)
		}
		comp, err := kgo.DefaultCompressor(cc)
		if err != nil {
			panic(err)
		}
		var buf bytes.Buffer
		out, codec := comp.Compress(&buf, raw)
		if int8(codec) != s.Codec {
			panic("batchtest: compressor changed the codec")
		}
		raw = append([]byte(nil), out...)
	}
	if s.Transactional {
		attrs |= 0x10
	}
	if s.Control {
		attrs |= 0x20
	}
	if s.LogAppendTime != 0 {
		attrs |= 0x08
		maxTS = s.LogAppendTime
	}
	b := kmsg.RecordBatch{
		FirstOffset:          s.BaseOffset,
		PartitionLeaderEpoch: -1,
		Magic:                2,
		Attributes:           attrs,
		LastOffsetDelta:      last,
		FirstTimestamp:       s.FirstTimestamp,
		MaxTimestamp:         maxTS,
		ProducerID:           s.PID,
		ProducerEpoch:        s.Epoch,
		FirstSequence:        s.BaseSequence,
		NumRecords:           int32(len(s.Records)),
		Records:              raw,
	}
	enc := b.AppendTo(nil)
	b.Length = int32(len(enc) - 12)
	enc = b.AppendTo(enc[:0])
	crc := crc32.Checksum(enc[21:], crc32.MakeTable(crc32.Castagnoli))
	enc[17], enc[18], enc[19], enc[20] = byte(crc>>24), byte(crc>>16), byte(crc>>8), byte(crc)
	return enc
}

// appendRecord encodes r with its length prefix: kmsg writes r.Length as
// given, so encode once with length 0 (one varint byte) to measure the body.
func appendRecord(dst []byte, r kmsg.Record) []byte {
	r.Length = 0
	r.Length = int32(len(r.AppendTo(nil)) - 1)
	return r.AppendTo(dst)
}

// Simple returns a dense uncompressed batch of n records with keys k0..kn-1
// and values v0..vn-1.
func Simple(base, pid int64, epoch int16, seq int32, n int) []byte {
	recs := make([]Record, n)
	for i := range recs {
		recs[i] = Record{Key: []byte{'k', byte('0' + i%10)}, Value: []byte{'v', byte('0' + i%10)}, TimestampDelta: int64(i), OffsetDelta: -1}
	}
	return Build(Spec{BaseOffset: base, PID: pid, Epoch: epoch, BaseSequence: seq, FirstTimestamp: 1_700_000_000_000, LastOffsetDelta: -1, Records: recs})
}
