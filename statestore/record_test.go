package statestore

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// testTopicID has distinct bytes so that a byte-order mistake shows.
var testTopicID = UUID{0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff}

// uuidBytes is testTopicID written out.
var uuidBytes = []byte{0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// TestGolden checks each record type against bytes written out by hand from
// the schemas (DESIGN §9, spec 000), so that the encoding is checked against
// the spec and not against itself.
func TestGolden(t *testing.T) {
	long := strings.Repeat("t", 200)
	tests := []struct {
		name  string
		key   Key
		value Value
		kb    []byte
		vb    []byte
		// readOnly: the bytes are of a version this build reads but no
		// longer writes (version 0 of the link and checkpoint values,
		// as the previous release wrote them).
		readOnly bool
	}{
		{
			name:     "link v0",
			readOnly: true,
			key:      LinkKey{LinkName: "l1"},
			value:    LinkValue{State: Mirroring, SessionEpoch: 5, SourceClusterID: "ab", DestinationClusterID: "xyz", LeaseExpiresMs: 0x0102030405060708, TimestampMs: 1700000000000},
			kb: cat(
				[]byte{0x00, 0x00}, // int16 record type 0
				[]byte{0x00, 0x02}, // LinkName: int16 length 2
				[]byte{'l', '1'},   //   bytes
			),
			vb: cat(
				[]byte{0x00, 0x00},          // int16 version 0
				[]byte{0x02},                // State int8 = MIRRORING (2)
				[]byte{0x00, 0x05},          // SessionEpoch int16 = 5
				[]byte{0x03, 'a', 'b'},      // SourceClusterId: compact, uvarint(2+1)
				[]byte{0x04, 'x', 'y', 'z'}, // DestinationClusterId: uvarint(3+1)
				[]byte{0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08}, // LeaseExpiresMs int64
				[]byte{0x00, 0x00, 0x01, 0x8b, 0xcf, 0xe5, 0x68, 0x00}, // TimestampMs int64 = 1700000000000
				[]byte{0x00}, // tagged fields: none
			),
		},
		{
			name:     "checkpoint v0",
			readOnly: true,
			key:      CheckpointKey{LinkName: "ab", TopicID: testTopicID, Partition: 7},
			value:    CheckpointValue{SourceTopic: long, SourcePartition: 3, SourceNextOffset: 100, DestNextOffset: -1, TimestampMs: 1700000030000},
			kb: cat(
				[]byte{0x00, 0x01},             // int16 record type 1
				[]byte{0x00, 0x02, 'a', 'b'},   // LinkName: int16 length 2 + bytes
				uuidBytes,                      // TopicId: 16 bytes as they are
				[]byte{0x00, 0x00, 0x00, 0x07}, // Partition int32 = 7
			),
			vb: cat(
				[]byte{0x00, 0x00},               // int16 version 0
				[]byte{0xc9, 0x01},               // SourceTopic: uvarint(200+1) = 201 = 0x49|0x80, 0x01
				[]byte(long),                     //   200 bytes
				[]byte{0x00, 0x00, 0x00, 0x03},   // SourcePartition int32 = 3
				[]byte{0, 0, 0, 0, 0, 0, 0, 100}, // SourceNextOffset int64 = 100
				[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, // DestNextOffset int64 = -1
				[]byte{0x00, 0x00, 0x01, 0x8b, 0xcf, 0xe5, 0xdd, 0x30}, // TimestampMs = 1700000030000
				[]byte{0x00}, // tagged fields: none
			),
		},
		{
			name: "link v1",
			key:  LinkKey{LinkName: "l1"},
			value: LinkValue{State: Stopped, SessionEpoch: 5, SourceClusterID: "ab", DestinationClusterID: "xyz", LeaseExpiresMs: 0x0102030405060708, TimestampMs: 1700000000000,
				AppendTimeoutMs: 30000, UnresolvedAppends: 2},
			kb: cat(
				[]byte{0x00, 0x00},           // int16 record type 0
				[]byte{0x00, 0x02, 'l', '1'}, // LinkName
			),
			vb: cat(
				[]byte{0x00, 0x01},          // int16 version 1
				[]byte{0x00},                // State int8 = STOPPED (0)
				[]byte{0x00, 0x05},          // SessionEpoch int16 = 5
				[]byte{0x03, 'a', 'b'},      // SourceClusterId
				[]byte{0x04, 'x', 'y', 'z'}, // DestinationClusterId
				[]byte{0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08}, // LeaseExpiresMs
				[]byte{0x00, 0x00, 0x01, 0x8b, 0xcf, 0xe5, 0x68, 0x00}, // TimestampMs
				[]byte{0x00, 0x00, 0x75, 0x30},                         // AppendTimeoutMs int32 = 30000
				[]byte{0x00, 0x00, 0x00, 0x02},                         // UnresolvedAppends int32 = 2
				[]byte{0x00},                                           // tagged fields: none
			),
		},
		{
			name: "link v1, transactional delivery",
			key:  LinkKey{LinkName: "l1"},
			value: LinkValue{State: Mirroring, SessionEpoch: 5, SourceClusterID: "ab", DestinationClusterID: "xyz", LeaseExpiresMs: 0x0102030405060708, TimestampMs: 1700000000000,
				Delivery: DeliveryTransactional},
			kb: cat(
				[]byte{0x00, 0x00},           // int16 record type 0
				[]byte{0x00, 0x02, 'l', '1'}, // LinkName
			),
			vb: cat(
				[]byte{0x00, 0x01},          // int16 version 1
				[]byte{0x02},                // State int8 = MIRRORING (2)
				[]byte{0x00, 0x05},          // SessionEpoch int16 = 5
				[]byte{0x03, 'a', 'b'},      // SourceClusterId
				[]byte{0x04, 'x', 'y', 'z'}, // DestinationClusterId
				[]byte{0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08}, // LeaseExpiresMs
				[]byte{0x00, 0x00, 0x01, 0x8b, 0xcf, 0xe5, 0x68, 0x00}, // TimestampMs
				[]byte{0x00, 0x00, 0x00, 0x00},                         // AppendTimeoutMs int32 = 0
				[]byte{0x00, 0x00, 0x00, 0x00},                         // UnresolvedAppends int32 = 0
				[]byte{0x01},                                           // one tagged field
				[]byte{0x00, 0x01, 0x01},                               // tag 0 (Delivery), size 1, TRANSACTIONAL
			),
		},
		{
			name: "checkpoint v1",
			key:  CheckpointKey{LinkName: "ab", TopicID: testTopicID, Partition: 7},
			value: CheckpointValue{SourceTopic: "s", SourcePartition: 3, SourceNextOffset: 100, DestNextOffset: 90, TimestampMs: 1700000030000,
				SourceTopicID: testTopicID,
				Producers:     []ProducerState{{SourceClusterID: "c", OriginalPID: 5, MappedPID: -2, Region: 0x2a, Epoch: 1, LastSequence: 9, LastAppendMs: 1700000029000}}},
			kb: cat(
				[]byte{0x00, 0x01},
				[]byte{0x00, 0x02, 'a', 'b'},
				uuidBytes,
				[]byte{0x00, 0x00, 0x00, 0x07},
			),
			vb: cat(
				[]byte{0x00, 0x01},                                     // int16 version 1
				[]byte{0x02, 's'},                                      // SourceTopic: compact, uvarint(1+1)
				[]byte{0x00, 0x00, 0x00, 0x03},                         // SourcePartition int32 = 3
				[]byte{0, 0, 0, 0, 0, 0, 0, 100},                       // SourceNextOffset int64 = 100
				[]byte{0, 0, 0, 0, 0, 0, 0, 90},                        // DestNextOffset int64 = 90
				[]byte{0x00, 0x00, 0x01, 0x8b, 0xcf, 0xe5, 0xdd, 0x30}, // TimestampMs
				uuidBytes,                      // SourceTopicId
				[]byte{0x02},                   // Producers: compact array, uvarint(1+1)
				[]byte{0x02, 'c'},              // SourceClusterId
				[]byte{0, 0, 0, 0, 0, 0, 0, 5}, // OriginalPid int64 = 5
				[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe}, // MappedPid int64 = -2
				[]byte{0x00, 0x00, 0x00, 0x2a},                         // Region uint32 = 42
				[]byte{0x00, 0x01},                                     // Epoch int16 = 1
				[]byte{0x00, 0x00, 0x00, 0x09},                         // LastSequence int32 = 9
				[]byte{0x00, 0x00, 0x01, 0x8b, 0xcf, 0xe5, 0xd9, 0x48}, // LastAppendMs = 1700000029000
				[]byte{0x00}, //   entry's tagged fields: none
				[]byte{0x00}, // tagged fields: none
			),
		},
		{
			name:  "pid reset",
			key:   PIDResetKey{TopicID: testTopicID, Partition: 0x01020304},
			value: PIDResetValue{SourceClusterID: "MkU3OEVBNTcwNTJENDM2Qg", TimestampMs: 1700000000000},
			kb: cat(
				[]byte{0x00, 0x02},             // int16 record type 2
				uuidBytes,                      // TopicId
				[]byte{0x01, 0x02, 0x03, 0x04}, // Partition int32, big-endian
			),
			vb: cat(
				[]byte{0x00, 0x00},               // int16 version 0
				[]byte{0x17},                     // SourceClusterId: uvarint(22+1) = 23
				[]byte("MkU3OEVBNTcwNTJENDM2Qg"), //   22 bytes
				[]byte{0x00, 0x00, 0x01, 0x8b, 0xcf, 0xe5, 0x68, 0x00}, // TimestampMs
				[]byte{0x00}, // tagged fields: none
			),
		},
		{
			name:  "pid collision",
			key:   PIDCollisionKey{TopicID: testTopicID, Partition: 7, SourceClusterID: "src", OriginalPID: 5},
			value: PIDCollisionValue{Salt: -2, CollidingClusterID: "", TimestampMs: 1700000000000},
			kb: cat(
				[]byte{0x00, 0x03},                // int16 record type 3
				uuidBytes,                         // TopicId uuid
				[]byte{0x00, 0x00, 0x00, 0x07},    // Partition int32 = 7
				[]byte{0x00, 0x03, 's', 'r', 'c'}, // SourceClusterId: string (int16 length), not compact
				[]byte{0, 0, 0, 0, 0, 0, 0, 5},    // OriginalPid int64 = 5
			),
			vb: cat(
				[]byte{0x00, 0x00}, // int16 version 0
				[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe}, // Salt int64 = -2
				[]byte{0x01}, // CollidingClusterId: compact, empty = uvarint(0+1)
				[]byte{0x00, 0x00, 0x01, 0x8b, 0xcf, 0xe5, 0x68, 0x00}, // TimestampMs
				[]byte{0x00}, // tagged fields: none
			),
		},
		{
			name:  "topic",
			key:   TopicKey{LinkName: "ab", TopicID: testTopicID},
			value: TopicValue{Topic: "dst", SourceTopic: "src", TimestampMs: 1700000000000},
			kb: cat(
				[]byte{0x00, 0x04},           // int16 record type 4
				[]byte{0x00, 0x02, 'a', 'b'}, // LinkName: string (int16 length)
				uuidBytes,                    // TopicId uuid
			),
			vb: cat(
				[]byte{0x00, 0x00},                                     // int16 version 0
				[]byte{0x04, 'd', 's', 't'},                            // Topic: compact, uvarint(3+1)
				[]byte{0x04, 's', 'r', 'c'},                            // SourceTopic: compact
				[]byte{0x00, 0x00, 0x01, 0x8b, 0xcf, 0xe5, 0x68, 0x00}, // TimestampMs
				[]byte{0x00},                                           // tagged fields: none
			),
		},
		{
			name:  "acl",
			key:   ACLKey{LinkName: "ab", ResourceType: 2, ResourceName: "t", PatternType: 3, Principal: "User:u", Host: "*", Operation: 3, Permission: 3},
			value: ACLValue{SourceResource: "s", Failover: true, TimestampMs: 1700000000000},
			kb: cat(
				[]byte{0x00, 0x05},           // int16 record type 5
				[]byte{0x00, 0x02, 'a', 'b'}, // LinkName: string (int16 length)
				[]byte{0x02},                 // ResourceType int8: TOPIC
				[]byte{0x00, 0x01, 't'},      // ResourceName: string
				[]byte{0x03},                 // PatternType int8: LITERAL
				[]byte{0x00, 0x06, 'U', 's', 'e', 'r', ':', 'u'}, // Principal
				[]byte{0x00, 0x01, '*'},                          // Host
				[]byte{0x03},                                     // Operation int8: READ
				[]byte{0x03},                                     // Permission int8: ALLOW
			),
			vb: cat(
				[]byte{0x00, 0x00}, // int16 version 0
				[]byte{0x02, 's'},  // SourceResource: compact
				[]byte{0x01},       // Failover: true
				[]byte{0x00, 0x00, 0x01, 0x8b, 0xcf, 0xe5, 0x68, 0x00}, // TimestampMs
				[]byte{0x00}, // tagged fields: none
			),
		},
		{
			name:  "txn producer",
			key:   TxnProducerKey{LinkName: "ab", ProducerID: 0x0102},
			value: TxnProducerValue{SourceClusterID: "s", DestinationClusterID: "d", TimestampMs: 1700000000000},
			kb: cat(
				[]byte{0x00, 0x06},                   // int16 record type 6
				[]byte{0x00, 0x02, 'a', 'b'},         // LinkName: string (int16 length)
				[]byte{0, 0, 0, 0, 0, 0, 0x01, 0x02}, // ProducerId int64
			),
			vb: cat(
				[]byte{0x00, 0x00}, // int16 version 0
				[]byte{0x02, 's'},  // SourceClusterId: compact
				[]byte{0x02, 'd'},  // DestinationClusterId: compact
				[]byte{0x00, 0x00, 0x01, 0x8b, 0xcf, 0xe5, 0x68, 0x00}, // TimestampMs
				[]byte{0x00}, // tagged fields: none
			),
		},
		{
			name:  "salted pid",
			key:   SaltedPIDKey{SourceClusterID: "ab", MappedPID: -2},
			value: SaltedPIDValue{OriginalPID: 0x0102, TimestampMs: 1700000000000},
			kb: cat(
				[]byte{0x00, 0x07},                                     // int16 record type 7
				[]byte{0x00, 0x02, 'a', 'b'},                           // SourceClusterId: string (int16 length)
				[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe}, // MappedPid int64
			),
			vb: cat(
				[]byte{0x00, 0x00},                                     // int16 version 0
				[]byte{0, 0, 0, 0, 0, 0, 0x01, 0x02},                   // OriginalPid int64
				[]byte{0x00, 0x00, 0x01, 0x8b, 0xcf, 0xe5, 0x68, 0x00}, // TimestampMs
				[]byte{0x00}, // tagged fields: none
			),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kb, err := EncodeKey(tt.key)
			if err != nil {
				t.Fatalf("EncodeKey: %v", err)
			}
			if !bytes.Equal(kb, tt.kb) {
				t.Errorf("key bytes\n got % x\nwant % x", kb, tt.kb)
			}
			if vb := EncodeValue(tt.value); !tt.readOnly && !bytes.Equal(vb, tt.vb) {
				t.Errorf("value bytes\n got % x\nwant % x", vb, tt.vb)
			}
			rec, err := Decode(tt.kb, tt.vb)
			if err != nil {
				t.Fatalf("Decode of the hand-written bytes: %v", err)
			}
			if !reflect.DeepEqual(rec.Key, tt.key) || !reflect.DeepEqual(rec.Value, tt.value) {
				t.Errorf("decoded %#v / %#v, want %#v / %#v", rec.Key, rec.Value, tt.key, tt.value)
			}
			// A tombstone: the key with a null value.
			rec, err = Decode(tt.kb, nil)
			if err != nil || rec.Value != nil || !reflect.DeepEqual(rec.Key, tt.key) {
				t.Errorf("tombstone decoded to %#v, %v", rec, err)
			}
		})
	}
}

// TestDecodeErrors guards the split between records to skip (unknown type
// or version) and records that are broken (corrupt).
func TestDecodeErrors(t *testing.T) {
	goodKey := []byte{0x00, 0x02, 0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0, 0, 0, 1}
	goodValue := []byte{0x00, 0x00, 0x02, 'c', 0, 0, 0, 0, 0, 0, 0, 9, 0x00}
	tests := []struct {
		name       string
		key, value []byte
		want       error
	}{
		{"unknown type", []byte{0x00, 0x63, 0xde, 0xad}, goodValue, ErrUnknownRecord},
		{"negative type", []byte{0xff, 0xff}, goodValue, ErrUnknownRecord},
		{"unknown value version", goodKey, []byte{0x00, 0x01, 0xaa}, ErrUnknownRecord},
		{"empty key", []byte{}, goodValue, ErrCorrupt},
		{"one-byte key", []byte{0x00}, goodValue, ErrCorrupt},
		{"truncated key", goodKey[:len(goodKey)-1], goodValue, ErrCorrupt},
		{"key with trailing byte", append(append([]byte{}, goodKey...), 0), goodValue, ErrCorrupt},
		{"key string length past end", []byte{0x00, 0x00, 0x00, 0x09, 'a'}, nil, ErrCorrupt},
		{"key string negative length", []byte{0x00, 0x00, 0xff, 0xff}, nil, ErrCorrupt},
		{"empty value", goodKey, []byte{}, ErrCorrupt},
		{"truncated value", goodKey, goodValue[:len(goodValue)-1], ErrCorrupt},
		{"value with trailing byte", goodKey, append(append([]byte{}, goodValue...), 0), ErrCorrupt},
		{"null compact string", goodKey, []byte{0x00, 0x00, 0x00, 0, 0, 0, 0, 0, 0, 0, 9, 0x00}, ErrCorrupt},
		{"tag size past end", goodKey, []byte{0x00, 0x00, 0x02, 'c', 0, 0, 0, 0, 0, 0, 0, 9, 0x01, 0x00, 0x05, 0x01}, ErrCorrupt},
		{"tags out of order", goodKey, []byte{0x00, 0x00, 0x02, 'c', 0, 0, 0, 0, 0, 0, 0, 9, 0x02, 0x03, 0x00, 0x01, 0x00}, ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(tt.key, tt.value)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Decode(% x, % x) = %v, want %v", tt.key, tt.value, err, tt.want)
			}
		})
	}
}

// TestUnknownTagsSkipped guards forward compatibility: a v0 value that
// carries tagged fields a newer writer added still decodes.
// Guards the link value's tagged fields: the delivery mode is read from tag
// 0 among unknown tags, and a malformed tag 0 is corrupt, not preserve.
func TestLinkDeliveryTag(t *testing.T) {
	head := EncodeValue(LinkValue{State: Mirroring, SessionEpoch: 1})
	head = head[:len(head)-1] // without its empty tag section
	v, err := DecodeValue(TypeLink, cat(head, []byte{0x02}, []byte{0x00, 0x01, 0x01}, []byte{0x07, 0x02, 0xbb, 0xcc}))
	if err != nil {
		t.Fatal(err)
	}
	if d := v.(LinkValue).Delivery; d != DeliveryTransactional {
		t.Fatalf("delivery %v, want transactional", d)
	}
	for _, bad := range [][]byte{
		cat([]byte{0x01}, []byte{0x00, 0x02, 0x01, 0x00}),               // tag 0 of two bytes
		cat([]byte{0x02}, []byte{0x03, 0x00}, []byte{0x00, 0x01, 0x01}), // tags out of order
		cat([]byte{0x01}, []byte{0x00, 0x05, 0x01}),                     // size past the end
	} {
		if _, err := DecodeValue(TypeLink, cat(head, bad)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("tags % x: %v, want ErrCorrupt", bad, err)
		}
	}
	if got := fmt.Sprint(DeliveryPreserve, " ", DeliveryTransactional); got != "preserve transactional" {
		t.Fatalf("names: %q", got)
	}
}

func TestUnknownTagsSkipped(t *testing.T) {
	value := cat(
		[]byte{0x00, 0x00},             // version 0
		[]byte{0x02, 'c'},              // SourceClusterId "c"
		[]byte{0, 0, 0, 0, 0, 0, 0, 9}, // TimestampMs 9
		[]byte{0x02},                   // two tagged fields
		[]byte{0x00, 0x01, 0xaa},       // tag 0, size 1
		[]byte{0x05, 0x02, 0xbb, 0xcc}, // tag 5, size 2
	)
	v, err := DecodeValue(TypePIDReset, value)
	if err != nil {
		t.Fatalf("DecodeValue: %v", err)
	}
	if want := (PIDResetValue{SourceClusterID: "c", TimestampMs: 9}); v != want {
		t.Fatalf("got %#v, want %#v", v, want)
	}
}

// TestEncodeRejects guards the writer against records the schema cannot
// carry.
func TestEncodeRejects(t *testing.T) {
	if _, err := EncodeKey(LinkKey{LinkName: strings.Repeat("x", 1<<15)}); err == nil {
		t.Error("a 32768-byte link name encoded; an int16 length cannot carry it")
	}
	if _, err := EncodeKey(LinkKey{LinkName: strings.Repeat("x", 1<<15-1)}); err != nil {
		t.Errorf("a 32767-byte link name: %v", err)
	}
	r := Record{Key: LinkKey{LinkName: "l"}, Value: PIDResetValue{}}
	if _, _, err := r.encode(); err == nil || !strings.Contains(err.Error(), "MirrorLink key with a MirrorPidReset value") {
		t.Errorf("mismatched key and value: %v", err)
	}
}

func TestUUIDString(t *testing.T) {
	// Kafka prints UUIDs as unpadded base64url.
	if got, want := testTopicID.String(), "ABEiM0RVZneImaq7zN3u_w"; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

// The agent and the fingerprint are tagged fields 1 and 2 of the link
// value (compact strings), after the delivery mode's tag 0: a build that
// knows none of them skips them, and a record of one that did not write
// them reads as empty.
func TestLinkAgentTags(t *testing.T) {
	lv := LinkValue{State: Mirroring, SessionEpoch: 1, Delivery: DeliveryTransactional, Agent: "pod-1", Fingerprint: "ab12"}
	b := EncodeValue(lv)
	head := EncodeValue(LinkValue{State: Mirroring, SessionEpoch: 1})
	head = head[:len(head)-1]
	want := cat(head, []byte{0x03},
		[]byte{0x00, 0x01, 0x01},                          // tag 0, size 1: transactional
		[]byte{0x01, 0x06, 0x06, 'p', 'o', 'd', '-', '1'}, // tag 1, size 6: "pod-1"
		[]byte{0x02, 0x05, 0x05, 'a', 'b', '1', '2'})      // tag 2, size 5: "ab12"
	if !bytes.Equal(b, want) {
		t.Fatalf("encoded\n% x\nwant\n% x", b, want)
	}
	v, err := DecodeValue(TypeLink, b)
	if err != nil || v != lv {
		t.Fatalf("decoded %#v, %v; want %#v", v, err, lv)
	}
	only := LinkValue{State: Stopped, Agent: "a"}
	if v, err := DecodeValue(TypeLink, EncodeValue(only)); err != nil || v != only {
		t.Fatalf("agent alone: %#v, %v", v, err)
	}
	if _, err := DecodeValue(TypeLink, cat(head, []byte{0x01}, []byte{0x01, 0x02, 0x05, 'x'})); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a truncated agent: %v, want ErrCorrupt", err)
	}
}
