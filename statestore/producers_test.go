package statestore

import (
	"testing"

	"github.com/seed83556561/mirrord/internal/kafka/tp"
)

// Guards which checkpoint a partition resumes from: one of the same source
// topic, partition and (when both know it) topic ID; a version 0
// checkpoint, which has no ID, goes by name.
func TestCheckpointIsOf(t *testing.T) {
	id := [16]byte{1}
	src := tp.Partition{Topic: "orders", Partition: 2, ID: id}
	for _, c := range []struct {
		name string
		ck   CheckpointValue
		want bool
	}{
		{"same topic ID", CheckpointValue{SourceTopic: "orders", SourcePartition: 2, SourceTopicID: UUID(id)}, true},
		{"version 0, by name", CheckpointValue{SourceTopic: "orders", SourcePartition: 2}, true},
		{"the topic was recreated", CheckpointValue{SourceTopic: "orders", SourcePartition: 2, SourceTopicID: UUID{2}}, false},
		{"another topic", CheckpointValue{SourceTopic: "events", SourcePartition: 2, SourceTopicID: UUID(id)}, false},
		{"another partition", CheckpointValue{SourceTopic: "orders", SourcePartition: 3, SourceTopicID: UUID(id)}, false},
	} {
		if got := c.ck.IsOf(src); got != c.want {
			t.Errorf("%s: IsOf = %v, want %v", c.name, got, c.want)
		}
	}
	if ck := (CheckpointValue{SourceTopic: "orders", SourcePartition: 2, SourceTopicID: UUID{2}}); !ck.IsOf(tp.Partition{Topic: "orders", Partition: 2}) {
		t.Error("a source partition whose ID is not known goes by name")
	}
}
