package statestore

import (
	"time"

	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/transform"
)

// What a checkpoint says about the partition it belongs to, read the way
// the pipeline and offset translation both read it.

// IsOf reports whether the checkpoint is of source partition src (I5): the
// same topic, partition and topic ID. A version 0 checkpoint has no topic
// ID and goes by name, and so does a source that reports none.
func (v *CheckpointValue) IsOf(src tp.Partition) bool {
	if v.SourceTopic != src.Topic || v.SourcePartition != src.Partition {
		return false
	}
	return v.SourceTopicID == (UUID{}) || src.ID == ([16]byte{}) || v.SourceTopicID == UUID(src.ID)
}

// ProducerEntries is producer state saved with a checkpoint as a PSM
// restores it.
func ProducerEntries(ps []ProducerState) []transform.ProducerEntry {
	out := make([]transform.ProducerEntry, 0, len(ps))
	for _, s := range ps {
		out = append(out, transform.ProducerEntry{
			Origin:     transform.Origin{Cluster: s.SourceClusterID, PID: s.OriginalPID},
			Mapped:     s.MappedPID,
			Region:     transform.Region(s.Region),
			Epoch:      s.Epoch,
			LastSeq:    s.LastSequence,
			LastAppend: time.UnixMilli(s.LastAppendMs),
		})
	}
	return out
}

// ProducerStates is a PSM's snapshot as a checkpoint saves it; nil for none.
func ProducerStates(es []transform.ProducerEntry) []ProducerState {
	if len(es) == 0 {
		return nil
	}
	out := make([]ProducerState, 0, len(es))
	for _, e := range es {
		out = append(out, ProducerState{
			SourceClusterID: e.Origin.Cluster,
			OriginalPID:     e.Origin.PID,
			MappedPID:       e.Mapped,
			Region:          uint32(e.Region),
			Epoch:           e.Epoch,
			LastSequence:    e.LastSeq,
			LastAppendMs:    e.LastAppend.UnixMilli(),
		})
	}
	return out
}
