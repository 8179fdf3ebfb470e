package barrier

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

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

// SaltTombstone is the record that deletes the salt of origin o at p (the
// PSM expired it).
func SaltTombstone(p Partition, o transform.Origin) statestore.Record {
	return statestore.Record{Key: saltKey(p, o)}
}

func saltKey(p Partition, o transform.Origin) statestore.PIDCollisionKey {
	return statestore.PIDCollisionKey{TopicID: p.TopicID, Partition: p.Partition, SourceClusterID: o.Cluster, OriginalPID: o.PID}
}

// Emit commits, in one state transaction of sess, a barrier record for each
// of parts and the extra records (the link adds its resume checkpoints).
// The transaction's link record says MIRRORING: a barrier is what the link
// commits on its way into MIRRORING, and for a partition discovered while
// MIRRORING. Only after Emit returns nil may the caller Apply the barrier to
// each partition's PSM and then start appending to it.
func Emit(ctx context.Context, sess *statestore.Session, parts []Partition, sourceClusterID string, now time.Time, extra ...statestore.Record) error {
	recs := make([]statestore.Record, 0, len(parts)+len(extra))
	for _, p := range parts {
		recs = append(recs, Record(p, sourceClusterID, now))
	}
	recs = append(recs, extra...)
	if err := sess.Commit(ctx, statestore.Mirroring, recs...); err != nil {
		return fmt.Errorf("emit MIRROR_PID_RESET barrier for %d partitions: %w", len(parts), err)
	}
	return nil
}

// Apply is the barrier's effect on the producer state of partition p: every
// producer entry with a negative (mapped) PID is dropped, and the count is
// logged at INFO (spec 000). Salts stay. It returns the count.
func Apply(psm *transform.PSM, log hclog.Logger, p Partition) int {
	n := psm.ResetMirrored()
	log.Info("MIRROR_PID_RESET applied: expired mirrored producer IDs", "topic_id", p.TopicID.String(), "partition", p.Partition, "expired", n)
	return n
}

// ReplayStats counts what Replay applied.
type ReplayStats struct {
	Barriers       int // barriers applied
	Expired        int // producer entries the barriers dropped
	Salts          int // salts restored
	SaltTombstones int // salts deleted
}

// Replay applies replayed state records, in the order given (the View's log
// order), to the PSMs of the link's partitions: a barrier resets its
// partition (Apply), a salt record restores the salt (AddSalt at the
// record's timestamp), a salt tombstone deletes it. psmFor returns the PSM
// of a partition, or nil for a partition that is not the link's, whose
// records are left alone. Other record types are ignored.
//
// A restarted agent that replays the state topic into fresh PSMs ends with
// the salts and the (empty) mirrored producer state that the live agent had
// after its last barrier. Records of one key are in log order; a barrier and
// a salt of the same partition may sit in different state partitions, but
// the two commute: a barrier drops producer entries and keeps salts, and
// AddSalt changes only the salted origin.
func Replay(recs []statestore.Record, psmFor func(Partition) *transform.PSM, log hclog.Logger) ReplayStats {
	var st ReplayStats
	for _, r := range recs {
		switch k := r.Key.(type) {
		case statestore.PIDResetKey:
			if r.Value == nil {
				continue // a deleted barrier record resets nothing
			}
			p := Partition{TopicID: k.TopicID, Partition: k.Partition}
			if psm := psmFor(p); psm != nil {
				st.Barriers++
				st.Expired += Apply(psm, log, p)
			}
		case statestore.PIDCollisionKey:
			psm := psmFor(Partition{TopicID: k.TopicID, Partition: k.Partition})
			if psm == nil {
				continue
			}
			o := transform.Origin{Cluster: k.SourceClusterID, PID: k.OriginalPID}
			if v, ok := r.Value.(statestore.PIDCollisionValue); ok {
				psm.AddSalt(o, v.Salt, time.UnixMilli(v.TimestampMs))
				st.Salts++
			} else {
				psm.DeleteSalt(o)
				st.SaltTombstones++
			}
		}
	}
	return st
}
