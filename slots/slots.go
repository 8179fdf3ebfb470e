package slots

import "hash/fnv"

// Of returns the slot, among n, of partition partition of topic: the
// topic's partitions go round-robin over the slots, beginning at a slot
// chosen by the topic's name (FNV-1a, 32 bits), so that the first
// partitions of many small topics do not all land in slot 0. The result
// depends on the topic name, the partition number and n only: a
// partition's slot stays the same when its topic grows or other topics
// appear. n < 2 is one slot, 0.
//
// Choosing n: each slot is one session (one transactional.id, one lease,
// one barrier per partition of it), and a slot is the unit that moves
// between agents, so n bounds how many agents share a link's work and how
// evenly. A few slots per agent the link may ever run on (for example 3
// agents: 6 to 12 slots) spreads the load and keeps a rebalance's move
// small; n above the link's partition count leaves slots empty.
func Of(topic string, partition int32, n int) int {
	if n < 2 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(topic))
	return int((uint64(h.Sum32()) + uint64(uint32(partition))) % uint64(n))
}
