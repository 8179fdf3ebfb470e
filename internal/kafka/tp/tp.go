// Package tp names a Kafka partition the way the mirroring pipeline needs it:
// by topic name and topic ID together, because Fetch v13+ and Produce v13+
// address topics by ID while operators read names.
//
// Its values are immutable and safe to share; the package starts no
// goroutines.
package tp

import "fmt"

// Partition is one partition of a topic.
type Partition struct {
	Topic     string
	ID        [16]byte // topic ID; zero if the cluster does not report one
	Partition int32
}

// String is "topic[partition]", the form every log line and error uses.
func (p Partition) String() string { return fmt.Sprintf("%s[%d]", p.Topic, p.Partition) }

// Key is the part of a Partition that identifies it within one cluster
// regardless of whether its ID is known yet.
type Key struct {
	Topic     string
	Partition int32
}

// Key returns the partition's map key.
func (p Partition) Key() Key { return Key{p.Topic, p.Partition} }

// Pair is one mirrored partition: a source partition and the destination
// partition with the same number in the renamed topic.
type Pair struct {
	Src, Dst Partition
}

// String is "source[n]→destination[n]".
func (p Pair) String() string { return fmt.Sprintf("%s→%s", p.Src, p.Dst) }
