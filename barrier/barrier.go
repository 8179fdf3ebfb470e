package barrier

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/seed83556561/mirrord/statestore"
	"github.com/seed83556561/mirrord/transform"
)

// Partition is a destination partition, as the state records key it.
type Partition struct {
	TopicID   statestore.UUID
	Partition int32
}

func (p Partition) String() string { return fmt.Sprintf("%s/%d", p.TopicID, p.Partition) }

// Record is the state record of a barrier for p: MirrorPidResetKey
// {TopicId, Partition} → MirrorPidResetValue {SourceClusterId, TimestampMs}.
func Record(p Partition, sourceClusterID string, now time.Time) statestore.Record {
	return statestore.Record{
		Key:   statestore.PIDResetKey{TopicID: p.TopicID, Partition: p.Partition},
		Value: statestore.PIDResetValue{SourceClusterID: sourceClusterID, TimestampMs: now.UnixMilli()},
	}
}

// SaltRecord is the state record that persists a collision salt of p
// (spec 000 MirrorPidCollisionKey/Value).
func SaltRecord(p Partition, s transform.Salt, now time.Time) statestore.Record {
	return statestore.Record{
		Key:   saltKey(p, s.Origin),
		Value: statestore.PIDCollisionValue{Salt: s.Salt, CollidingClusterID: s.Colliding, TimestampMs: now.UnixMilli()},
	}
}

// SaltedPIDRecord is the state record that keeps salt s's mapped producer
// ID with its origin for good (MirrorSaltedPid): a link in the other
// direction reads it to tell the salted ID's batches as its destination's
// own. It commits with SaltRecord; SaltTombstone leaves it.
func SaltedPIDRecord(s transform.Salt, now time.Time) statestore.Record {
	return statestore.Record{
		Key:   statestore.SaltedPIDKey{SourceClusterID: s.Origin.Cluster, MappedPID: s.Mapped},
		Value: statestore.SaltedPIDValue{OriginalPID: s.Origin.PID, TimestampMs: now.UnixMilli()},
	}
}

// SaltTombstone is the record that deletes the salt of origin o at p (the
// PSM expired it).
func SaltTombstone(p Partition, o transform.Origin) statestore.Record {
	return statestore.Record{Key: saltKey(p, o)}
}

func saltKey(p Partition, o transform.Origin) statestore.PIDCollisionKey {
	return statestore.PIDCollisionKey{TopicID: p.TopicID, Partition: p.Partition, SourceClusterID: o.Cluster, OriginalPID: o.PID}
}

// Apply is the barrier's effect on the producer state of a destination
// partition: every producer entry with a negative (mapped) PID is dropped
// (spec 000); salts stay. It returns how many entries it dropped, for the
// caller's INFO log. Apply does no I/O: the caller applies a barrier only
// after the state transaction that holds its Record committed, and before
// anything more is appended to the partition.
func Apply(psm *transform.PSM) int { return psm.ResetMirrored() }

// Salt is a collision salt as the state topic holds it.
type Salt struct {
	Origin transform.Origin
	Salt   int64
	At     time.Time // when it was committed
}

// Salts returns the collision salts of a replayed state topic by
// destination partition: what a new session restores into each partition's
// producer state (PSM.AddSalt) so that it maps every origin as the sessions
// before it did. A salt the PSM expired is gone: its tombstone deleted it
// from the view. Each partition's salts are sorted by origin.
func Salts(view *statestore.View) map[Partition][]Salt {
	out := make(map[Partition][]Salt)
	for k, v := range view.Salts {
		p := Partition{TopicID: k.TopicID, Partition: k.Partition}
		out[p] = append(out[p], Salt{Origin: transform.Origin{Cluster: k.SourceClusterID, PID: k.OriginalPID}, Salt: v.Salt, At: time.UnixMilli(v.TimestampMs)})
	}
	for _, ss := range out {
		slices.SortFunc(ss, func(a, b Salt) int {
			return cmp.Or(cmp.Compare(a.Origin.Cluster, b.Origin.Cluster), cmp.Compare(a.Origin.PID, b.Origin.PID))
		})
	}
	return out
}
