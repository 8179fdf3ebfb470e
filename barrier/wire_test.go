package barrier

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/statestore"
)

var goldenValue = statestore.PIDResetValue{SourceClusterID: kafkatest.SourceClusterID, TimestampMs: 1700000000000}

// golden is the batch of goldenValue written out by hand from the v2 batch
// format and spec 000.
func golden() []byte {
	return bytes.Join([][]byte{
		{0, 0, 0, 0, 0, 0, 0, 0}, // baseOffset int64 = 0
		{0x00, 0x00, 0x00, 0x5e}, // batchLength int32 = 106 - 12 = 94
		{0xff, 0xff, 0xff, 0xff}, // partitionLeaderEpoch int32 = -1
		{0x02},                   // magic = 2
		{0xc0, 0xea, 0xe7, 0xc2}, // CRC-32C of bytes 21..106 (checked below)
		{0x00, 0x20},             // attributes: control bit (0x20) only
		{0x00, 0x00, 0x00, 0x00}, // lastOffsetDelta int32 = 0
		{0x00, 0x00, 0x01, 0x8b, 0xcf, 0xe5, 0x68, 0x00}, // baseTimestamp = 1700000000000
		{0x00, 0x00, 0x01, 0x8b, 0xcf, 0xe5, 0x68, 0x00}, // maxTimestamp = the same
		{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, // producerId int64 = -1
		{0xff, 0xff},             // producerEpoch int16 = -1
		{0xff, 0xff, 0xff, 0xff}, // baseSequence int32 = -1
		{0x00, 0x00, 0x00, 0x01}, // record count int32 = 1
		// the record
		{0x58},                   // length varint: zigzag(44) = 88
		{0x00},                   // attributes int8
		{0x00},                   // timestampDelta varlong 0
		{0x00},                   // offsetDelta varint 0
		{0x08},                   // key length varint: zigzag(4) = 8
		{0x00, 0x00, 0x00, 0x07}, // control record key: int16 version 0, int16 type 7
		{0x44},                   // value length varint: zigzag(34) = 68
		{0x00, 0x00},             // MirrorPidResetValue: int16 version 0
		{0x17},                   //   SourceClusterId: compact string, uvarint(22+1)
		[]byte(kafkatest.SourceClusterID),
		{0x00, 0x00, 0x01, 0x8b, 0xcf, 0xe5, 0x68, 0x00}, //   TimestampMs
		{0x00}, //   tagged fields: none
		{0x00}, // header count varint 0
	}, nil)
}

// TestBatchGolden checks the wire form against the hand-written bytes and
// against franz-go's independent batch and record parsers.
func TestBatchGolden(t *testing.T) {
	want := golden()
	if got := crc32.Checksum(want[21:], crc32.MakeTable(crc32.Castagnoli)); got != binary.BigEndian.Uint32(want[17:]) {
		t.Fatalf("the hand-written CRC is wrong: the bytes checksum to %08x", got)
	}
	got := EncodeBatch(goldenValue)
	if !bytes.Equal(got, want) {
		t.Fatalf("EncodeBatch\n got % x\nwant % x", got, want)
	}
	v, err := DecodeBatch(want)
	if err != nil || v != goldenValue {
		t.Fatalf("DecodeBatch = %+v, %v; want %+v", v, err, goldenValue)
	}

	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(want); err != nil {
		t.Fatalf("kmsg cannot read the batch: %v", err)
	}
	if rb.ProducerID != -1 || rb.ProducerEpoch != -1 || rb.FirstSequence != -1 || rb.Attributes != 0x20 || rb.NumRecords != 1 || int(rb.Length) != len(want)-12 {
		t.Errorf("kmsg header %+v", rb)
	}
	var rec kmsg.Record
	if err := rec.ReadFrom(rb.Records); err != nil {
		t.Fatalf("kmsg cannot read the record: %v", err)
	}
	var ck kmsg.ControlRecordKey
	if err := ck.ReadFrom(rec.Key); err != nil || ck.Version != 0 || int16(ck.Type) != ControlType {
		t.Errorf("control key %+v, %v", ck, err)
	}
	sv, err := statestore.DecodeValue(statestore.TypePIDReset, rec.Value)
	if err != nil || sv != goldenValue {
		t.Errorf("record value %+v, %v", sv, err)
	}
}

// TestDecodeBatchErrors guards the decoder's verdicts on batches that are
// broken or are something else.
func TestDecodeBatchErrors(t *testing.T) {
	// mutate returns golden with f applied and, unless keepCRC, a fresh CRC.
	mutate := func(f func(b []byte) []byte, keepCRC bool) []byte {
		b := f(golden())
		if !keepCRC && len(b) >= 21 {
			binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
		}
		return b
	}
	setLen := func(b []byte) []byte { binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12)); return b }
	tests := []struct {
		name string
		b    []byte
		want error
	}{
		{"short", golden()[:60], ErrCorrupt},
		{"truncated", golden()[:100], ErrCorrupt},
		{"trailing byte", mutate(func(b []byte) []byte { return setLen(append(b, 0)) }, false), ErrCorrupt},
		{"bad CRC", mutate(func(b []byte) []byte { b[30] ^= 1; return b }, true), ErrCorrupt},
		{"magic 1", mutate(func(b []byte) []byte { b[16] = 1; return b }, false), ErrCorrupt},
		{"data batch", mutate(func(b []byte) []byte { b[22] = 0x00; return b }, false), ErrNotBarrier},
		{"transaction marker", mutate(func(b []byte) []byte { b[22] = 0x30; return b }, false), ErrNotBarrier},
		{"compressed", mutate(func(b []byte) []byte { b[22] = 0x21; return b }, false), ErrCorrupt},
		{"has a producer", mutate(func(b []byte) []byte { b[50] = 5; return b }, false), ErrNotBarrier},
		{"two records", mutate(func(b []byte) []byte { b[60] = 2; return b }, false), ErrCorrupt},
		{"commit marker key", mutate(func(b []byte) []byte { b[69] = 1; return b }, false), ErrNotBarrier},
		{"key version 1", mutate(func(b []byte) []byte { b[67] = 1; return b }, false), ErrNotBarrier},
		{"value version 1", mutate(func(b []byte) []byte { b[72] = 1; return b }, false), statestore.ErrUnknownRecord},
		{"record length off", mutate(func(b []byte) []byte { b[61] = 0x56; return b }, false), ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeBatch(tt.b)
			if !errors.Is(err, tt.want) {
				t.Fatalf("DecodeBatch = %v, want %v", err, tt.want)
			}
		})
	}
}

// TestBrokerRefusesBarrierBatch shows why mirrord writes the barrier to the
// state topic: a broker refuses a control batch from a client. kfake, like
// Kafka's LogValidator, answers INVALID_RECORD.
func TestBrokerRefusesBarrierBatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, dst := kafkatest.Pair(t)
	cl := kafkatest.Client(t, dst)
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "data"); err != nil {
		t.Fatal(err)
	}
	md, err := adm.Metadata(ctx, "data")
	if err != nil {
		t.Fatal(err)
	}
	td := md.Topics["data"]

	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TimeoutMillis = 10_000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic, rt.TopicID = "data", td.ID
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition = 0
	rp.Records = EncodeBatch(goldenValue)
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	kresp, err := cl.Broker(int(td.Partitions[0].Leader)).Request(ctx, req)
	if err != nil {
		t.Fatalf("produce: %v", err)
	}
	resp := kresp.(*kmsg.ProduceResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("response %+v", resp)
	}
	if err := kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode); !errors.Is(err, kerr.InvalidRecord) {
		t.Fatalf("produce of a client control batch: %v, want INVALID_RECORD", err)
	}
}

func FuzzDecodeBatch(f *testing.F) {
	f.Add(golden())
	f.Add(EncodeBatch(statestore.PIDResetValue{}))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := DecodeBatch(b)
		// The same bytes inside a larger buffer, capped at len(b): a
		// read past the end would see the extra bytes.
		buf := append(append([]byte{}, b...), 0xff, 0x00, 0x7f)
		v2, err2 := DecodeBatch(buf[:len(b):len(b)])
		if v != v2 || (err == nil) != (err2 == nil) {
			t.Fatalf("decode depends on bytes past the end")
		}
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNotBarrier) && !errors.Is(err, statestore.ErrCorrupt) && !errors.Is(err, statestore.ErrUnknownRecord) {
				t.Fatalf("error wraps no sentinel: %v", err)
			}
			return
		}
		again, err := DecodeBatch(EncodeBatch(v))
		if err != nil || again != v {
			t.Fatalf("round trip of %+v: %+v, %v", v, again, err)
		}
	})
}

func FuzzBatchRoundTrip(f *testing.F) {
	f.Add(kafkatest.SourceClusterID, int64(1700000000000))
	f.Add("", int64(-1))
	f.Fuzz(func(t *testing.T, cluster string, ts int64) {
		v := statestore.PIDResetValue{SourceClusterID: cluster, TimestampMs: ts}
		b := EncodeBatch(v)
		got, err := DecodeBatch(b)
		if err != nil || got != v {
			t.Fatalf("round trip of %+v: %+v, %v", v, got, err)
		}
		var rb kmsg.RecordBatch
		if err := rb.ReadFrom(b); err != nil || int(rb.Length) != len(b)-12 || rb.FirstTimestamp != ts {
			t.Fatalf("kmsg reads %+v, %v", rb, err)
		}
	})
}
