package statestore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
)

// decodeBounded decodes b from inside a larger buffer whose bytes after b
// are garbage, capped at len(b): a decoder that reads past the end of its
// input would see the garbage and disagree with the decode of a copy.
func decodeBounded[T any](b []byte, dec func([]byte) (T, error)) (T, error) {
	buf := append(append([]byte{}, b...), 0x7f, 0x00, 0x01, 0x02, 0xff)
	return dec(buf[:len(b):len(b)])
}

func FuzzDecodeKey(f *testing.F) {
	for _, k := range []Key{
		LinkKey{LinkName: "l1"},
		CheckpointKey{LinkName: "ab", TopicID: testTopicID, Partition: 7},
		PIDResetKey{TopicID: testTopicID, Partition: 1},
		PIDCollisionKey{TopicID: testTopicID, Partition: 7, SourceClusterID: "src", OriginalPID: 5},
		TopicKey{LinkName: "l1", TopicID: testTopicID},
		ACLKey{LinkName: "l1", ResourceType: 2, ResourceName: "t", PatternType: 3, Principal: "User:u", Host: "*", Operation: 3, Permission: 3},
		TxnProducerKey{LinkName: "l1", ProducerID: 9},
		SaltedPIDKey{SourceClusterID: "s", MappedPID: -9},
	} {
		b, _ := EncodeKey(k)
		f.Add(b)
	}
	f.Add([]byte{0x00, 0x63})
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := DecodeKey(b)
		k2, err2 := decodeBounded(b, DecodeKey)
		if !reflect.DeepEqual(k, k2) || (err == nil) != (err2 == nil) {
			t.Fatalf("decode depends on bytes past the end: %#v, %v vs %#v, %v", k, err, k2, err2)
		}
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnknownRecord) {
				t.Fatalf("error wraps neither sentinel: %v", err)
			}
			return
		}
		// Keys have one encoding: the round trip gives the input back.
		again, err := EncodeKey(k)
		if err != nil {
			t.Fatalf("re-encode of a decoded key: %v", err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("round trip changed the key\n in % x\nout % x", b, again)
		}
	})
}

func FuzzDecodeValue(f *testing.F) {
	for _, v := range []Value{
		LinkValue{State: Mirroring, SessionEpoch: 5, SourceClusterID: "ab", DestinationClusterID: "xyz", LeaseExpiresMs: 7, TimestampMs: 9},
		CheckpointValue{SourceTopic: "t", SourcePartition: 3, SourceNextOffset: 100, DestNextOffset: 90, TimestampMs: 9},
		PIDResetValue{SourceClusterID: "MkU3OEVBNTcwNTJENDM2Qg", TimestampMs: 9},
		PIDCollisionValue{Salt: -2, CollidingClusterID: "c", TimestampMs: 9},
		TopicValue{Topic: "d", SourceTopic: "s", TimestampMs: 9},
		ACLValue{SourceResource: "s", Failover: true, TimestampMs: 9},
		TxnProducerValue{SourceClusterID: "s", DestinationClusterID: "d", TimestampMs: 9},
		SaltedPIDValue{OriginalPID: 9, TimestampMs: 9},
	} {
		f.Add(int16(v.Type()), EncodeValue(v))
	}
	f.Add(int16(2), []byte{0x00, 0x00, 0x02, 'c', 0, 0, 0, 0, 0, 0, 0, 9, 0x01, 0x00, 0x01, 0xaa})
	f.Fuzz(func(t *testing.T, typ int16, b []byte) {
		dec := func(b []byte) (Value, error) { return DecodeValue(RecordType(typ), b) }
		v, err := dec(b)
		v2, err2 := decodeBounded(b, dec)
		if !reflect.DeepEqual(v, v2) || (err == nil) != (err2 == nil) {
			t.Fatalf("decode depends on bytes past the end: %#v, %v vs %#v, %v", v, err, v2, err2)
		}
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnknownRecord) {
				t.Fatalf("error wraps neither sentinel: %v", err)
			}
			return
		}
		if b == nil {
			if v != nil {
				t.Fatalf("nil bytes decoded to %#v, want a tombstone", v)
			}
			return
		}
		// Unknown tagged fields are dropped, so the bytes may shrink,
		// but what they say must survive. A value of an older version
		// is written at the current one, whose added fields may make it
		// longer (a version 0 link value gains 8 bytes).
		again := EncodeValue(v)
		older := len(b) >= 2 && len(again) >= 2 && binary.BigEndian.Uint16(b) < binary.BigEndian.Uint16(again)
		if len(again) > len(b) && !older {
			t.Fatalf("re-encode grew the value from %d to %d bytes", len(b), len(again))
		}
		v3, err := DecodeValue(RecordType(typ), again)
		if err != nil || !reflect.DeepEqual(v3, v) {
			t.Fatalf("round trip: %#v, %v; want %#v", v3, err, v)
		}
	})
}

// FuzzRoundTrip builds records of every type from arbitrary field values and
// checks that they decode to themselves.
func FuzzRoundTrip(f *testing.F) {
	f.Add("l", "a", "b", int8(2), int16(3), int32(4), int64(5), int64(-6), []byte{1, 2, 3}, uint8(2))
	f.Add("", "", "", int8(-1), int16(-1), int32(-1), int64(-1), int64(0), []byte{}, uint8(0))
	f.Fuzz(func(t *testing.T, s1, s2, s3 string, i8 int8, i16 int16, i32 int32, i64a, i64b int64, id []byte, producers uint8) {
		if len(s1) > 1<<15-1 || len(s3) > 1<<15-1 {
			t.Skip("key strings longer than an int16 length are rejected by design (TestEncodeRejects)")
		}
		var u UUID
		copy(u[:], id)
		var ps []ProducerState
		for i := range int(producers % 8) {
			ps = append(ps, ProducerState{SourceClusterID: s3[:min(i, len(s3))], OriginalPID: i64a + int64(i), MappedPID: i64b - int64(i),
				Region: uint32(i32) + uint32(i), Epoch: i16, LastSequence: i32 - int32(i), LastAppendMs: i64a ^ int64(i)})
		}
		recs := []Record{
			{Key: LinkKey{LinkName: s1}, Value: LinkValue{State: LinkState(i8), SessionEpoch: i16, SourceClusterID: s2, DestinationClusterID: s3, LeaseExpiresMs: i64a, TimestampMs: i64b,
				AppendTimeoutMs: i32, UnresolvedAppends: int32(i16)}},
			{Key: CheckpointKey{LinkName: s1, TopicID: u, Partition: i32}, Value: CheckpointValue{SourceTopic: s2, SourcePartition: i32, SourceNextOffset: i64a, DestNextOffset: i64b, TimestampMs: i64a ^ i64b,
				SourceTopicID: u, Producers: ps}},
			{Key: PIDResetKey{TopicID: u, Partition: i32}, Value: PIDResetValue{SourceClusterID: s2, TimestampMs: i64b}},
			{Key: PIDCollisionKey{TopicID: u, Partition: i32, SourceClusterID: s3, OriginalPID: i64a}, Value: PIDCollisionValue{Salt: i64b, CollidingClusterID: s2, TimestampMs: i64a}},
			{Key: TopicKey{LinkName: s1, TopicID: u}, Value: TopicValue{Topic: s2, SourceTopic: s3, TimestampMs: i64b}},
			{Key: ACLKey{LinkName: s1, ResourceType: i8, ResourceName: s2, PatternType: i8 ^ 1, Principal: s3, Host: s2, Operation: int8(i16), Permission: int8(i32)},
				Value: ACLValue{SourceResource: s3, Failover: i8%2 == 0, TimestampMs: i64a}},
			{Key: TxnProducerKey{LinkName: s1, ProducerID: i64b}, Value: TxnProducerValue{SourceClusterID: s2, DestinationClusterID: s3, TimestampMs: i64a}},
			{Key: SaltedPIDKey{SourceClusterID: s1, MappedPID: i64a}, Value: SaltedPIDValue{OriginalPID: i64b, TimestampMs: i64a ^ i64b}},
			{Key: PIDResetKey{TopicID: u, Partition: i32}}, // tombstone
		}
		for _, r := range recs {
			kb, vb, err := r.encode()
			if err != nil {
				t.Fatalf("encode %#v: %v", r, err)
			}
			got, err := Decode(kb, vb)
			if err != nil {
				t.Fatalf("decode of encoded %#v: %v", r, err)
			}
			if !reflect.DeepEqual(got.Key, r.Key) || !reflect.DeepEqual(got.Value, r.Value) {
				t.Fatalf("round trip: got %#v / %#v, want %#v / %#v", got.Key, got.Value, r.Key, r.Value)
			}
		}
	})
}
