package statestore

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/twmb/franz-go/pkg/kbin"
)

// RecordType is the int16 that opens every state record key (DESIGN §9).
type RecordType int16

// The record types of the state topic.
const (
	TypeLink         RecordType = 0 // MirrorLinkKey → MirrorLinkValue
	TypeCheckpoint   RecordType = 1 // MirrorCheckpointKey → MirrorCheckpointValue
	TypePIDReset     RecordType = 2 // MirrorPidResetKey → MirrorPidResetValue
	TypePIDCollision RecordType = 3 // MirrorPidCollisionKey → MirrorPidCollisionValue
	TypeTopic        RecordType = 4 // MirrorTopicKey → MirrorTopicValue
	TypeACL          RecordType = 5 // MirrorAclKey → MirrorAclValue
	TypeTxnProducer  RecordType = 6 // MirrorTxnProducerKey → MirrorTxnProducerValue
	TypeSaltedPID    RecordType = 7 // MirrorSaltedPidKey → MirrorSaltedPidValue
)

// String is the schema name of the type without its Key/Value suffix.
func (t RecordType) String() string {
	switch t {
	case TypeLink:
		return "MirrorLink"
	case TypeCheckpoint:
		return "MirrorCheckpoint"
	case TypePIDReset:
		return "MirrorPidReset"
	case TypePIDCollision:
		return "MirrorPidCollision"
	case TypeTopic:
		return "MirrorTopic"
	case TypeACL:
		return "MirrorAcl"
	case TypeTxnProducer:
		return "MirrorTxnProducer"
	case TypeSaltedPID:
		return "MirrorSaltedPid"
	}
	return fmt.Sprintf("unknown(%d)", int16(t))
}

// Value versions. Every type reads and writes version 0, except the link
// and checkpoint values, which this build writes as version 1 and reads as
// 0 or 1 (DESIGN §9: a version may add fields; an agent upgraded over a
// state topic the previous release wrote resumes from it).
const (
	versionV0 int16 = 0
	versionV1 int16 = 1
)

// LinkState is a link's lifecycle state (DESIGN §8), as the MirrorLinkValue
// State field carries it. Package link runs the lifecycle over these values.
type LinkState int8

// Link states.
const (
	Stopped   LinkState = 0
	Preparing LinkState = 1
	Mirroring LinkState = 2
	Paused    LinkState = 3
	Failed    LinkState = 4
)

// LinkStates lists every state, for metrics and tests.
var LinkStates = []LinkState{Stopped, Preparing, Mirroring, Paused, Failed}

var linkStateNames = [...]string{"STOPPED", "PREPARING", "MIRRORING", "PAUSED", "FAILED"}

// String is the upper-case name of the state, for logs, dumps and JSON.
func (s LinkState) String() string {
	if s >= 0 && int(s) < len(linkStateNames) {
		return linkStateNames[s]
	}
	return fmt.Sprintf("STATE(%d)", int8(s))
}

// MarshalJSON writes the state by name.
func (s LinkState) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// UnmarshalJSON reads a state by name, as MarshalJSON writes it.
func (s *LinkState) UnmarshalJSON(b []byte) error {
	var name string
	if err := json.Unmarshal(b, &name); err != nil {
		return fmt.Errorf("link state: %w", err)
	}
	for _, st := range LinkStates {
		if st.String() == name {
			*s = st
			return nil
		}
	}
	return fmt.Errorf("link state: unknown state %q", name)
}

// Sentinel errors of the codec.
var (
	// ErrUnknownRecord: the key's record type or the value's version is
	// not one this build knows. A newer agent may have written it; the
	// replay skips it with a warning.
	ErrUnknownRecord = errors.New("unknown state record type or version")
	// ErrCorrupt: the bytes do not decode as the schema says.
	ErrCorrupt = errors.New("corrupt state record")
)

// UUID is a Kafka UUID such as a topic ID. Its text form is Kafka's: 22
// characters of unpadded base64url.
type UUID [16]byte

func (u UUID) String() string { return base64.RawURLEncoding.EncodeToString(u[:]) }

// MarshalJSON writes the Kafka text form.
func (u UUID) MarshalJSON() ([]byte, error) { return []byte(`"` + u.String() + `"`), nil }

// Key is the key of a state record: LinkKey, CheckpointKey, PIDResetKey,
// PIDCollisionKey, TopicKey or ACLKey. The set is closed.
type Key interface {
	Type() RecordType
	appendKey(dst []byte) []byte
	check() error
}

// Value is the value of a state record, of the same type as its key. A nil
// Value in a Record is a tombstone.
type Value interface {
	Type() RecordType
	appendValue(dst []byte) []byte
}

// LinkKey is MirrorLinkKey: one per link.
type LinkKey struct {
	LinkName string `json:"LinkName"`
}

// LinkValue is MirrorLinkValue: the link's state as of its session's last
// commit, and the lease that commit renewed.
//
// Version 1 adds AppendTimeoutMs and UnresolvedAppends (both 0 when a
// version 0 record is read): how long after its lease a Produce of the
// session may still be inside a destination broker, and how many appends
// the session left unresolved when it stopped (DESIGN §12 I2). A STOPPED or
// PAUSED record is a clean stop only when UnresolvedAppends is 0.
type LinkValue struct {
	State                LinkState `json:"State"`
	SessionEpoch         int16     `json:"SessionEpoch"`
	SourceClusterID      string    `json:"SourceClusterId"`
	DestinationClusterID string    `json:"DestinationClusterId"`
	LeaseExpiresMs       int64     `json:"LeaseExpiresMs"`
	TimestampMs          int64     `json:"TimestampMs"`
	AppendTimeoutMs      int32     `json:"AppendTimeoutMs"`
	UnresolvedAppends    int32     `json:"UnresolvedAppends"`
	// Delivery is the delivery mode of the session that wrote the record
	// (tagged field 0 of version 1, so that a build that does not know it
	// reads the record as preserve delivery's, the safe side: it waits out
	// the lease). A transactional session's appends are fenced by the
	// broker, so a session that follows one need not wait for its lease.
	Delivery Delivery `json:"Delivery,omitempty"`
	// Agent is the agent.name of the process whose session wrote the
	// record, and Fingerprint a digest of the link's settings there
	// (tagged fields 1 and 2; empty when a build without them wrote the
	// record). A starting agent stands by while another agent's session
	// holds the link, and refuses to run it with other settings.
	Agent       string `json:"Agent,omitempty"`
	Fingerprint string `json:"Fingerprint,omitempty"`
}

// Delivery is a link's delivery mode (DESIGN §14).
type Delivery int8

// The delivery modes.
const (
	// DeliveryPreserve keeps the source producer's identity on every
	// forwarded batch; the agent keeps the producer state and leases.
	DeliveryPreserve Delivery = 0
	// DeliveryTransactional appends as the session's transactional
	// producer, data and checkpoints in one destination transaction.
	DeliveryTransactional Delivery = 1
)

// String is the mode's name in the configuration ("preserve",
// "transactional").
func (d Delivery) String() string {
	switch d {
	case DeliveryPreserve:
		return "preserve"
	case DeliveryTransactional:
		return "transactional"
	}
	return fmt.Sprintf("delivery(%d)", int8(d))
}

// Clean reports whether the record says the session stopped appending for
// good with nothing left in flight: a STOPPED or PAUSED record with no
// unresolved append. A new session need not wait for a clean session's
// lease.
func (v LinkValue) Clean() bool {
	return (v.State == Stopped || v.State == Paused) && v.UnresolvedAppends == 0
}

// CheckpointKey is MirrorCheckpointKey: one per link and destination
// partition.
type CheckpointKey struct {
	LinkName  string `json:"LinkName"`
	TopicID   UUID   `json:"TopicId"`
	Partition int32  `json:"Partition"`
}

// CheckpointValue is MirrorCheckpointValue: every forwarded source batch
// below SourceNextOffset is in the destination below DestNextOffset.
//
// Version 1 adds SourceTopicID, so that a source topic deleted and created
// again under the same name is a new partition and never a continuation
// (DESIGN §12 I5; zero when a version 0 record is read: the name alone
// then identifies the topic), and Producers, the destination partition's
// producer state as of the checkpoint, so that reconciliation reaches the
// decisions the pipeline reached for the batches after it (I3).
type CheckpointValue struct {
	SourceTopic      string          `json:"SourceTopic"`
	SourcePartition  int32           `json:"SourcePartition"`
	SourceNextOffset int64           `json:"SourceNextOffset"`
	DestNextOffset   int64           `json:"DestNextOffset"`
	TimestampMs      int64           `json:"TimestampMs"`
	SourceTopicID    UUID            `json:"SourceTopicId"`
	Producers        []ProducerState `json:"Producers,omitempty"`
}

// ProducerState is one producer entry of a destination partition's
// producer state (transform.PSM), as a checkpoint saves it.
type ProducerState struct {
	SourceClusterID string `json:"SourceClusterId"`
	OriginalPID     int64  `json:"OriginalPid"`
	MappedPID       int64  `json:"MappedPid"`
	Region          uint32 `json:"Region"` // the unsalted region of SourceClusterID
	Epoch           int16  `json:"Epoch"`
	LastSequence    int32  `json:"LastSequence"`
	LastAppendMs    int64  `json:"LastAppendMs"`
}

// PIDResetKey is MirrorPidResetKey: the latest MIRROR_PID_RESET barrier of
// a destination partition.
type PIDResetKey struct {
	TopicID   UUID  `json:"TopicId"`
	Partition int32 `json:"Partition"`
}

// PIDResetValue is MirrorPidResetValue, which is also the value of the
// barrier's control-record wire form (package barrier).
type PIDResetValue struct {
	SourceClusterID string `json:"SourceClusterId"`
	TimestampMs     int64  `json:"TimestampMs"`
}

// PIDCollisionKey is MirrorPidCollisionKey of spec 000.
type PIDCollisionKey struct {
	TopicID         UUID   `json:"TopicId"`
	Partition       int32  `json:"Partition"`
	SourceClusterID string `json:"SourceClusterId"`
	OriginalPID     int64  `json:"OriginalPid"`
}

// PIDCollisionValue is MirrorPidCollisionValue of spec 000.
type PIDCollisionValue struct {
	Salt               int64  `json:"Salt"`
	CollidingClusterID string `json:"CollidingClusterId"`
	TimestampMs        int64  `json:"TimestampMs"`
}

// TopicKey is MirrorTopicKey: a destination topic that the link created,
// by its topic ID (a topic deleted and created again by someone else is
// another topic).
type TopicKey struct {
	LinkName string `json:"LinkName"`
	TopicID  UUID   `json:"TopicId"`
}

// TopicValue is MirrorTopicValue: the created topic's name, its source
// topic, and when the link created it. Config sync manages the settings of
// the topics a link created, and leaves others alone unless the link says
// otherwise (package link).
type TopicValue struct {
	Topic       string `json:"Topic"`
	SourceTopic string `json:"SourceTopic"`
	TimestampMs int64  `json:"TimestampMs"`
}

// ACLKey is MirrorAclKey: an ACL binding that the link's ACL sync created
// at the destination (package internal/aclsync). Only bindings recorded
// here are ever deleted by the link; a binding an operator made is not.
// The resource pattern is always LITERAL.
type ACLKey struct {
	LinkName     string `json:"LinkName"`
	ResourceType int8   `json:"ResourceType"`
	ResourceName string `json:"ResourceName"`
	PatternType  int8   `json:"PatternType"`
	Principal    string `json:"Principal"`
	Host         string `json:"Host"`
	Operation    int8   `json:"Operation"`
	Permission   int8   `json:"Permission"`
}

// ACLValue is MirrorAclValue: the source resource the binding follows
// from, whether it grants WRITE that a failover granted (write was not
// granted by the link's settings), and when it was recorded, just before
// the link created it.
type ACLValue struct {
	SourceResource string `json:"SourceResource"`
	Failover       bool   `json:"Failover"`
	TimestampMs    int64  `json:"TimestampMs"`
}

// TxnProducerKey is MirrorTxnProducerKey: a producer ID under which a
// transactional session of the link appended at the destination. A
// transactional session's batches carry its own producer ID, not the
// origin's; a link in the other direction reads these records from its
// source (this link's destination) to know that the batches under those IDs
// came from its destination and must not go back (DESIGN §16). One record
// per producer ID, kept by compaction for as long as the topic lives, so a
// reverse link that reads old data still finds an ID the link no longer
// uses.
type TxnProducerKey struct {
	LinkName   string `json:"LinkName"`
	ProducerID int64  `json:"ProducerId"`
}

// TxnProducerValue is MirrorTxnProducerValue: the link's clusters when the
// session recorded the producer ID, and when. The record commits in a
// transaction of the session no later than the first data batch under the
// ID (package link), so a reader that has seen a committed batch under the
// ID and then reads the state topic to its end finds the record.
type TxnProducerValue struct {
	SourceClusterID      string `json:"SourceClusterId"`
	DestinationClusterID string `json:"DestinationClusterId"`
	TimestampMs          int64  `json:"TimestampMs"`
}

// SaltedPIDKey is MirrorSaltedPidKey: a salted mapped producer ID that a
// link appended under (a collision it resolved with a salt, DESIGN §4), by
// the cluster that first produced its batches. The collision record
// (MirrorPidCollision) is tombstoned when the producer state expires; this
// one stays for as long as the topic lives, so that a link in the other
// direction that reads old data still tells the salted ID's batches as its
// destination's own and does not send them back. Written in the same
// transaction as the collision record, before the first batch under the
// salted ID is appended.
type SaltedPIDKey struct {
	SourceClusterID string `json:"SourceClusterId"`
	MappedPID       int64  `json:"MappedPid"`
}

// SaltedPIDValue is MirrorSaltedPidValue: the original producer ID at the
// source cluster, and when the salt was recorded.
type SaltedPIDValue struct {
	OriginalPID int64 `json:"OriginalPid"`
	TimestampMs int64 `json:"TimestampMs"`
}

func (LinkKey) Type() RecordType           { return TypeLink }
func (SaltedPIDKey) Type() RecordType      { return TypeSaltedPID }
func (SaltedPIDValue) Type() RecordType    { return TypeSaltedPID }
func (TxnProducerKey) Type() RecordType    { return TypeTxnProducer }
func (TxnProducerValue) Type() RecordType  { return TypeTxnProducer }
func (ACLKey) Type() RecordType            { return TypeACL }
func (ACLValue) Type() RecordType          { return TypeACL }
func (LinkValue) Type() RecordType         { return TypeLink }
func (CheckpointKey) Type() RecordType     { return TypeCheckpoint }
func (CheckpointValue) Type() RecordType   { return TypeCheckpoint }
func (PIDResetKey) Type() RecordType       { return TypePIDReset }
func (PIDResetValue) Type() RecordType     { return TypePIDReset }
func (PIDCollisionKey) Type() RecordType   { return TypePIDCollision }
func (PIDCollisionValue) Type() RecordType { return TypePIDCollision }
func (TopicKey) Type() RecordType          { return TypeTopic }
func (TopicValue) Type() RecordType        { return TypeTopic }

// Keys are non-flexible: strings carry an int16 length.

func (k LinkKey) appendKey(b []byte) []byte {
	b = kbin.AppendInt16(b, int16(TypeLink))
	return kbin.AppendString(b, k.LinkName)
}

func (k CheckpointKey) appendKey(b []byte) []byte {
	b = kbin.AppendInt16(b, int16(TypeCheckpoint))
	b = kbin.AppendString(b, k.LinkName)
	b = kbin.AppendUuid(b, k.TopicID)
	return kbin.AppendInt32(b, k.Partition)
}

func (k PIDResetKey) appendKey(b []byte) []byte {
	b = kbin.AppendInt16(b, int16(TypePIDReset))
	b = kbin.AppendUuid(b, k.TopicID)
	return kbin.AppendInt32(b, k.Partition)
}

func (k PIDCollisionKey) appendKey(b []byte) []byte {
	b = kbin.AppendInt16(b, int16(TypePIDCollision))
	b = kbin.AppendUuid(b, k.TopicID)
	b = kbin.AppendInt32(b, k.Partition)
	b = kbin.AppendString(b, k.SourceClusterID)
	return kbin.AppendInt64(b, k.OriginalPID)
}

func (k TopicKey) appendKey(b []byte) []byte {
	b = kbin.AppendInt16(b, int16(TypeTopic))
	b = kbin.AppendString(b, k.LinkName)
	return kbin.AppendUuid(b, k.TopicID)
}

func (k TxnProducerKey) appendKey(b []byte) []byte {
	b = kbin.AppendInt16(b, int16(TypeTxnProducer))
	b = kbin.AppendString(b, k.LinkName)
	return kbin.AppendInt64(b, k.ProducerID)
}

func (k SaltedPIDKey) appendKey(b []byte) []byte {
	b = kbin.AppendInt16(b, int16(TypeSaltedPID))
	b = kbin.AppendString(b, k.SourceClusterID)
	return kbin.AppendInt64(b, k.MappedPID)
}

func (k ACLKey) appendKey(b []byte) []byte {
	b = kbin.AppendInt16(b, int16(TypeACL))
	b = kbin.AppendString(b, k.LinkName)
	b = kbin.AppendInt8(b, k.ResourceType)
	b = kbin.AppendString(b, k.ResourceName)
	b = kbin.AppendInt8(b, k.PatternType)
	b = kbin.AppendString(b, k.Principal)
	b = kbin.AppendString(b, k.Host)
	b = kbin.AppendInt8(b, k.Operation)
	return kbin.AppendInt8(b, k.Permission)
}

// checkString rejects a string that an int16 length cannot carry.
func checkString(field, s string) error {
	if len(s) > math.MaxInt16 {
		return fmt.Errorf("%s is %d bytes; a key string holds at most %d", field, len(s), math.MaxInt16)
	}
	return nil
}

func (k LinkKey) check() error        { return checkString("LinkName", k.LinkName) }
func (k CheckpointKey) check() error  { return checkString("LinkName", k.LinkName) }
func (k PIDResetKey) check() error    { return nil }
func (k TopicKey) check() error       { return checkString("LinkName", k.LinkName) }
func (k TxnProducerKey) check() error { return checkString("LinkName", k.LinkName) }
func (k SaltedPIDKey) check() error   { return checkString("SourceClusterId", k.SourceClusterID) }
func (k ACLKey) check() error {
	for _, f := range []struct{ name, s string }{{"LinkName", k.LinkName}, {"ResourceName", k.ResourceName}, {"Principal", k.Principal}, {"Host", k.Host}} {
		if err := checkString(f.name, f.s); err != nil {
			return err
		}
	}
	return nil
}
func (k PIDCollisionKey) check() error {
	return checkString("SourceClusterId", k.SourceClusterID)
}

// Values are flexible (version 0+): compact strings, then an empty tagged
// field section.

func appendVersion(b []byte) []byte { return kbin.AppendInt16(b, versionV0) }

func appendNoTags(b []byte) []byte { return kbin.AppendUvarint(b, 0) }

func (v LinkValue) appendValue(b []byte) []byte {
	b = kbin.AppendInt16(b, versionV1)
	b = kbin.AppendInt8(b, int8(v.State))
	b = kbin.AppendInt16(b, v.SessionEpoch)
	b = kbin.AppendCompactString(b, v.SourceClusterID)
	b = kbin.AppendCompactString(b, v.DestinationClusterID)
	b = kbin.AppendInt64(b, v.LeaseExpiresMs)
	b = kbin.AppendInt64(b, v.TimestampMs)
	b = kbin.AppendInt32(b, v.AppendTimeoutMs)
	b = kbin.AppendInt32(b, v.UnresolvedAppends)
	// Tagged fields, in tag order, each only when it is not its zero
	// value: 0 the delivery mode (int8), 1 the agent, 2 the fingerprint
	// (compact strings).
	var tags [][]byte
	var fields []uint32
	if v.Delivery != DeliveryPreserve {
		fields, tags = append(fields, 0), append(tags, kbin.AppendInt8(nil, int8(v.Delivery)))
	}
	if v.Agent != "" {
		fields, tags = append(fields, 1), append(tags, kbin.AppendCompactString(nil, v.Agent))
	}
	if v.Fingerprint != "" {
		fields, tags = append(fields, 2), append(tags, kbin.AppendCompactString(nil, v.Fingerprint))
	}
	b = kbin.AppendUvarint(b, uint32(len(tags)))
	for i, t := range tags {
		b = kbin.AppendUvarint(b, fields[i])
		b = kbin.AppendUvarint(b, uint32(len(t)))
		b = append(b, t...)
	}
	return b
}

func (v CheckpointValue) appendValue(b []byte) []byte {
	b = kbin.AppendInt16(b, versionV1)
	b = kbin.AppendCompactString(b, v.SourceTopic)
	b = kbin.AppendInt32(b, v.SourcePartition)
	b = kbin.AppendInt64(b, v.SourceNextOffset)
	b = kbin.AppendInt64(b, v.DestNextOffset)
	b = kbin.AppendInt64(b, v.TimestampMs)
	b = kbin.AppendUuid(b, v.SourceTopicID)
	b = kbin.AppendCompactArrayLen(b, len(v.Producers))
	for _, p := range v.Producers {
		b = kbin.AppendCompactString(b, p.SourceClusterID)
		b = kbin.AppendInt64(b, p.OriginalPID)
		b = kbin.AppendInt64(b, p.MappedPID)
		b = kbin.AppendUint32(b, p.Region)
		b = kbin.AppendInt16(b, p.Epoch)
		b = kbin.AppendInt32(b, p.LastSequence)
		b = kbin.AppendInt64(b, p.LastAppendMs)
		b = appendNoTags(b)
	}
	return appendNoTags(b)
}

func (v PIDResetValue) appendValue(b []byte) []byte {
	b = appendVersion(b)
	b = kbin.AppendCompactString(b, v.SourceClusterID)
	b = kbin.AppendInt64(b, v.TimestampMs)
	return appendNoTags(b)
}

func (v PIDCollisionValue) appendValue(b []byte) []byte {
	b = appendVersion(b)
	b = kbin.AppendInt64(b, v.Salt)
	b = kbin.AppendCompactString(b, v.CollidingClusterID)
	b = kbin.AppendInt64(b, v.TimestampMs)
	return appendNoTags(b)
}

func (v TopicValue) appendValue(b []byte) []byte {
	b = appendVersion(b)
	b = kbin.AppendCompactString(b, v.Topic)
	b = kbin.AppendCompactString(b, v.SourceTopic)
	b = kbin.AppendInt64(b, v.TimestampMs)
	return appendNoTags(b)
}

func (v TxnProducerValue) appendValue(b []byte) []byte {
	b = appendVersion(b)
	b = kbin.AppendCompactString(b, v.SourceClusterID)
	b = kbin.AppendCompactString(b, v.DestinationClusterID)
	b = kbin.AppendInt64(b, v.TimestampMs)
	return appendNoTags(b)
}

func (v SaltedPIDValue) appendValue(b []byte) []byte {
	b = appendVersion(b)
	b = kbin.AppendInt64(b, v.OriginalPID)
	b = kbin.AppendInt64(b, v.TimestampMs)
	return appendNoTags(b)
}

func (v ACLValue) appendValue(b []byte) []byte {
	b = appendVersion(b)
	b = kbin.AppendCompactString(b, v.SourceResource)
	b = kbin.AppendBool(b, v.Failover)
	b = kbin.AppendInt64(b, v.TimestampMs)
	return appendNoTags(b)
}

// EncodeKey returns the wire bytes of a key. It fails only for a string
// longer than an int16 length can say.
func EncodeKey(k Key) ([]byte, error) {
	if k == nil {
		return nil, errors.New("encode key: nil key")
	}
	if err := k.check(); err != nil {
		return nil, fmt.Errorf("encode %s key: %w", k.Type(), err)
	}
	return k.appendKey(nil), nil
}

// EncodeValue returns the wire bytes of a value; nil (a tombstone) encodes
// to nil.
func EncodeValue(v Value) []byte {
	if v == nil {
		return nil
	}
	return v.appendValue(nil)
}

// DecodeKey decodes a key. An unknown record type is ErrUnknownRecord;
// anything that does not decode is ErrCorrupt.
func DecodeKey(b []byte) (Key, error) {
	r := kbin.Reader{Src: b}
	t := RecordType(r.Int16())
	if !r.Ok() {
		return nil, fmt.Errorf("key of %d bytes has no record type: %w", len(b), ErrCorrupt)
	}
	var k Key
	switch t {
	case TypeLink:
		k = LinkKey{LinkName: r.String()}
	case TypeCheckpoint:
		k = CheckpointKey{LinkName: r.String(), TopicID: r.Uuid(), Partition: r.Int32()}
	case TypePIDReset:
		k = PIDResetKey{TopicID: r.Uuid(), Partition: r.Int32()}
	case TypePIDCollision:
		k = PIDCollisionKey{TopicID: r.Uuid(), Partition: r.Int32(), SourceClusterID: r.String(), OriginalPID: r.Int64()}
	case TypeTopic:
		k = TopicKey{LinkName: r.String(), TopicID: r.Uuid()}
	case TypeACL:
		k = ACLKey{LinkName: r.String(), ResourceType: r.Int8(), ResourceName: r.String(), PatternType: r.Int8(),
			Principal: r.String(), Host: r.String(), Operation: r.Int8(), Permission: r.Int8()}
	case TypeTxnProducer:
		k = TxnProducerKey{LinkName: r.String(), ProducerID: r.Int64()}
	case TypeSaltedPID:
		k = SaltedPIDKey{SourceClusterID: r.String(), MappedPID: r.Int64()}
	default:
		return nil, fmt.Errorf("key record type %d: %w", int16(t), ErrUnknownRecord)
	}
	if !r.Ok() {
		return nil, fmt.Errorf("%s key of %d bytes is truncated: %w", t, len(b), ErrCorrupt)
	}
	if len(r.Src) != 0 {
		return nil, fmt.Errorf("%s key has %d trailing bytes: %w", t, len(r.Src), ErrCorrupt)
	}
	return k, nil
}

// DecodeValue decodes the value of a record of type t. A nil b is a
// tombstone and decodes to a nil Value. A version this build does not know
// (above 1 for link and checkpoint values, above 0 for the others) is
// ErrUnknownRecord; anything that does not decode is ErrCorrupt. Unknown
// tagged fields are skipped, as Kafka's flexible versions require.
func DecodeValue(t RecordType, b []byte) (Value, error) {
	if b == nil {
		return nil, nil
	}
	r := kbin.Reader{Src: b}
	version := r.Int16()
	if !r.Ok() {
		return nil, fmt.Errorf("%s value of %d bytes has no version: %w", t, len(b), ErrCorrupt)
	}
	newest := versionV0
	if t == TypeLink || t == TypeCheckpoint {
		newest = versionV1
	}
	if version < 0 || version > newest {
		return nil, fmt.Errorf("%s value version %d: %w", t, version, ErrUnknownRecord)
	}
	var v Value
	switch t {
	case TypeLink:
		lv := LinkValue{
			State:                LinkState(r.Int8()),
			SessionEpoch:         r.Int16(),
			SourceClusterID:      r.CompactString(),
			DestinationClusterID: r.CompactString(),
			LeaseExpiresMs:       r.Int64(),
			TimestampMs:          r.Int64(),
		}
		if version >= versionV1 {
			lv.AppendTimeoutMs = r.Int32()
			lv.UnresolvedAppends = r.Int32()
		}
		linkTags(&r, &lv)
		if !r.Ok() {
			return nil, fmt.Errorf("%s value of %d bytes is truncated: %w", t, len(b), ErrCorrupt)
		}
		if len(r.Src) != 0 {
			return nil, fmt.Errorf("%s value has %d trailing bytes: %w", t, len(r.Src), ErrCorrupt)
		}
		return lv, nil
	case TypeCheckpoint:
		cv := CheckpointValue{
			SourceTopic:      r.CompactString(),
			SourcePartition:  r.Int32(),
			SourceNextOffset: r.Int64(),
			DestNextOffset:   r.Int64(),
			TimestampMs:      r.Int64(),
		}
		if version >= versionV1 {
			cv.SourceTopicID = r.Uuid()
			n := r.CompactArrayLen()
			// Each entry takes at least 36 bytes: a count beyond what
			// is left is corrupt, and must not size an allocation.
			if n < 0 || int(n) > len(r.Src)/36 {
				return nil, fmt.Errorf("%s value: producer count %d for %d bytes: %w", t, n, len(r.Src), ErrCorrupt)
			}
			if n > 0 {
				cv.Producers = make([]ProducerState, n)
			}
			for i := range cv.Producers {
				cv.Producers[i] = ProducerState{
					SourceClusterID: r.CompactString(),
					OriginalPID:     r.Int64(),
					MappedPID:       r.Int64(),
					Region:          r.Uint32(),
					Epoch:           r.Int16(),
					LastSequence:    r.Int32(),
					LastAppendMs:    r.Int64(),
				}
				skipTags(&r)
			}
		}
		v = cv
	case TypePIDReset:
		v = PIDResetValue{SourceClusterID: r.CompactString(), TimestampMs: r.Int64()}
	case TypePIDCollision:
		v = PIDCollisionValue{Salt: r.Int64(), CollidingClusterID: r.CompactString(), TimestampMs: r.Int64()}
	case TypeTopic:
		v = TopicValue{Topic: r.CompactString(), SourceTopic: r.CompactString(), TimestampMs: r.Int64()}
	case TypeACL:
		av := ACLValue{SourceResource: r.CompactString()}
		switch f := r.Int8(); {
		case f == 1:
			av.Failover = true
		case f != 0 && r.Ok():
			return nil, fmt.Errorf("%s value: Failover is %d, not a boolean: %w", t, f, ErrCorrupt)
		}
		av.TimestampMs = r.Int64()
		v = av
	case TypeTxnProducer:
		v = TxnProducerValue{SourceClusterID: r.CompactString(), DestinationClusterID: r.CompactString(), TimestampMs: r.Int64()}
	case TypeSaltedPID:
		v = SaltedPIDValue{OriginalPID: r.Int64(), TimestampMs: r.Int64()}
	default:
		return nil, fmt.Errorf("value record type %d: %w", int16(t), ErrUnknownRecord)
	}
	skipTags(&r)
	if !r.Ok() {
		return nil, fmt.Errorf("%s value of %d bytes is truncated: %w", t, len(b), ErrCorrupt)
	}
	if len(r.Src) != 0 {
		return nil, fmt.Errorf("%s value has %d trailing bytes: %w", t, len(r.Src), ErrCorrupt)
	}
	return v, nil
}

// linkTags reads the link value's tagged fields into lv: tag 0 is the
// delivery mode (one int8), 1 the agent and 2 the fingerprint (compact
// strings); other tags are skipped.
func linkTags(r *kbin.Reader, lv *LinkValue) {
	n := r.Uvarint()
	last := int64(-1)
	for i := uint32(0); i < n && r.Ok(); i++ {
		tag := int64(r.Uvarint())
		if tag <= last {
			r.Span(-1)
			return
		}
		last = tag
		field := kbin.Reader{Src: r.Span(int(r.Uvarint()))}
		switch tag {
		case 0:
			lv.Delivery = Delivery(field.Int8())
		case 1:
			lv.Agent = field.CompactString()
		case 2:
			lv.Fingerprint = field.CompactString()
		default:
			continue
		}
		if !field.Ok() || len(field.Src) != 0 {
			r.Span(-1)
			return
		}
	}
}

// skipTags reads a tagged-field section and drops its fields. Tags must be
// strictly increasing, as in Kafka's flexible encoding.
func skipTags(r *kbin.Reader) {
	n := r.Uvarint()
	last := int64(-1)
	for i := uint32(0); i < n && r.Ok(); i++ {
		tag := int64(r.Uvarint())
		if tag <= last {
			// Force the reader invalid: out-of-order or repeated tag.
			r.Span(-1)
			return
		}
		last = tag
		r.Span(int(r.Uvarint()))
	}
}

// Record is one state-topic record. A nil Value is a tombstone.
type Record struct {
	Key   Key
	Value Value

	// Where the record was read; -1 and -1 for records not read from the
	// topic.
	Partition int32
	Offset    int64
}

// Decode decodes a key and a value (nil: tombstone) into a Record whose
// position is unset. Its errors wrap ErrUnknownRecord or ErrCorrupt.
func Decode(key, value []byte) (Record, error) {
	k, err := DecodeKey(key)
	if err != nil {
		return Record{}, err
	}
	v, err := DecodeValue(k.Type(), value)
	if err != nil {
		return Record{}, err
	}
	return Record{Key: k, Value: v, Partition: -1, Offset: -1}, nil
}

// encode returns the key and value bytes of a record to write, checking
// that the value is of the key's type.
func (r Record) encode() (key, value []byte, err error) {
	key, err = EncodeKey(r.Key)
	if err != nil {
		return nil, nil, err
	}
	if r.Value != nil && r.Value.Type() != r.Key.Type() {
		return nil, nil, fmt.Errorf("encode record: %s key with a %s value", r.Key.Type(), r.Value.Type())
	}
	return key, EncodeValue(r.Value), nil
}
