package statestore

import (
	"maps"
	"slices"
	"strings"
	"time"
)

// View is the state of the state topic as a replay left it: the latest
// value of every key, tombstoned keys removed, and the records themselves in
// log order for appliers (package barrier replays salts and barriers from
// Records into the PSMs).
//
// A View is plain data, not safe for concurrent use; the goroutine that
// replayed it owns it.
type View struct {
	Links       map[string]LinkValue
	Checkpoints map[CheckpointKey]CheckpointValue
	Salts       map[PIDCollisionKey]PIDCollisionValue
	Barriers    map[PIDResetKey]PIDResetValue // latest barrier per destination partition
	Topics      map[TopicKey]TopicValue       // destination topics the links created
	ACLs        map[ACLKey]ACLValue           // destination ACL bindings the links created
	// TxnProducers are the producer IDs the links' transactional sessions
	// appended under.
	TxnProducers map[TxnProducerKey]TxnProducerValue
	// SaltedPIDs are the salted mapped producer IDs the links appended
	// under, by origin cluster.
	SaltedPIDs map[SaltedPIDKey]SaltedPIDValue

	// Records holds every record the replay decoded, tombstones included,
	// in log order: partition by partition in ascending partition order,
	// each in offset order. Records of one key always share a partition,
	// so each key's history is in order; records of different partitions
	// have no order between them (package barrier relies only on the
	// former).
	Records []Record

	// Skipped counts records of an unknown type or version (written by a
	// newer agent), which the replay logged and left out.
	Skipped int
}

// NewView returns an empty view.
func NewView() *View {
	return &View{
		Links:       make(map[string]LinkValue),
		Checkpoints: make(map[CheckpointKey]CheckpointValue),
		Salts:       make(map[PIDCollisionKey]PIDCollisionValue),
		Barriers:    make(map[PIDResetKey]PIDResetValue),
		Topics:      make(map[TopicKey]TopicValue),
		ACLs:        make(map[ACLKey]ACLValue),

		TxnProducers: make(map[TxnProducerKey]TxnProducerValue),
		SaltedPIDs:   make(map[SaltedPIDKey]SaltedPIDValue),
	}
}

// Apply brings the maps up to date with one record: a value replaces the
// key's previous one, a tombstone deletes it. It does not append to Records;
// a link that keeps its view current after its own commits calls Apply with
// what it committed.
func (v *View) Apply(r Record) {
	switch k := r.Key.(type) {
	case LinkKey:
		if val, ok := r.Value.(LinkValue); ok {
			v.Links[k.LinkName] = val
		} else {
			delete(v.Links, k.LinkName)
		}
	case CheckpointKey:
		if val, ok := r.Value.(CheckpointValue); ok {
			v.Checkpoints[k] = val
		} else {
			delete(v.Checkpoints, k)
		}
	case PIDResetKey:
		if val, ok := r.Value.(PIDResetValue); ok {
			v.Barriers[k] = val
		} else {
			delete(v.Barriers, k)
		}
	case PIDCollisionKey:
		if val, ok := r.Value.(PIDCollisionValue); ok {
			v.Salts[k] = val
		} else {
			delete(v.Salts, k)
		}
	case TopicKey:
		if val, ok := r.Value.(TopicValue); ok {
			v.Topics[k] = val
		} else {
			delete(v.Topics, k)
		}
	case ACLKey:
		if val, ok := r.Value.(ACLValue); ok {
			v.ACLs[k] = val
		} else {
			delete(v.ACLs, k)
		}
	case TxnProducerKey:
		if val, ok := r.Value.(TxnProducerValue); ok {
			v.TxnProducers[k] = val
		} else {
			delete(v.TxnProducers, k)
		}
	case SaltedPIDKey:
		if val, ok := r.Value.(SaltedPIDValue); ok {
			v.SaltedPIDs[k] = val
		} else {
			delete(v.SaltedPIDs, k)
		}
	}
}

// LeaseWait is how long a new session of link must wait, at wall-clock time
// now, before it may reconcile and append (DESIGN §7, §12 I2): until the
// lease that the previous session's last commit recorded has expired, plus
// skew for the difference between the two agents' clocks, plus the longest
// time a Produce the previous session wrote just before its lease ended may
// stay inside a destination broker before it lands or fails (the session's
// AppendTimeoutMs; defaultAppendTimeout for a record that does not say,
// version 0). It is zero when the link has no record and when the previous
// session recorded a clean stop (LinkValue.Clean: it stopped appending, with
// every append resolved, before it wrote that).
func (v *View) LeaseWait(link string, now time.Time, skew, defaultAppendTimeout time.Duration) time.Duration {
	lv, ok := v.Links[link]
	if !ok || lv.Clean() {
		return 0
	}
	inBroker := defaultAppendTimeout
	if lv.AppendTimeoutMs > 0 {
		inBroker = time.Duration(lv.AppendTimeoutMs) * time.Millisecond
	}
	wait := time.UnixMilli(lv.LeaseExpiresMs).Add(skew + inBroker).Sub(now)
	return max(wait, 0)
}

// LinkRecordAt finds the partition of the state topic that holds link's
// record in the view, and the offset after the last record the view holds
// of that partition: where a reader that follows the link's record
// (Follower) goes on.
func (v *View) LinkRecordAt(link string) (p int32, next int64, found bool) {
	for _, r := range slices.Backward(v.Records) {
		if k, ok := r.Key.(LinkKey); ok && k.LinkName == link {
			p, found = r.Partition, true
			break
		}
	}
	if !found {
		return 0, 0, false
	}
	for _, r := range v.Records {
		if r.Partition == p {
			next = max(next, r.Offset+1)
		}
	}
	return p, next, true
}

// SessionOf reports whether name is a session of link: the link's own name
// (a link without slots) or one of its slots' (<link>.<slot>). A link's
// name has no '.' (config's label rule), so no other link's session looks
// like one.
func SessionOf(link, name string) bool {
	if name == link {
		return true
	}
	rest, ok := strings.CutPrefix(name, link+".")
	if !ok || rest == "" {
		return false
	}
	for _, c := range rest {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// LatestCheckpoint is the checkpoint of destination partition (topicID,
// partition) among those of link's sessions, and the session that wrote
// it. Each slot of a link is a session with checkpoints of its own, so
// turning slots on or off or changing their number moves partitions
// between sessions: the checkpoint to resume or translate from is the one
// of whichever session mirrored the partition last, the one furthest at
// the destination (the sessions of a partition take turns, and each
// appends after the last, so a later session's checkpoint is never behind
// an earlier one's). On a tie, prefer's (a session's own) wins.
func (v *View) LatestCheckpoint(link, prefer string, topicID UUID, partition int32) (CheckpointValue, string, bool) {
	key := CheckpointKey{LinkName: prefer, TopicID: topicID, Partition: partition}
	best, ok := v.Checkpoints[key]
	of := prefer
	for _, name := range slices.Sorted(maps.Keys(v.Links)) {
		if name == prefer || !SessionOf(link, name) {
			continue
		}
		key.LinkName = name
		if ck, found := v.Checkpoints[key]; found && (!ok || ck.DestNextOffset > best.DestNextOffset) {
			best, of, ok = ck, name, true
		}
	}
	return best, of, ok
}
