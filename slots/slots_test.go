package slots

import (
	"fmt"
	"testing"
)

// Of keeps a partition's slot as its topic grows and other topics appear,
// spreads a topic's partitions round-robin, and spreads many topics'
// partitions evenly.
func TestOf(t *testing.T) {
	for _, n := range []int{0, 1} {
		if got := Of("t", 5, n); got != 0 {
			t.Errorf("Of(t, 5, %d) = %d, want 0 (one slot)", n, got)
		}
	}
	const n = 8
	// Round-robin within a topic: consecutive partitions, consecutive
	// slots, whatever the topic's partition count.
	for _, topic := range []string{"orders", "payments", "a", ""} {
		first := Of(topic, 0, n)
		for p := range int32(3 * n) {
			if got, want := Of(topic, p, n), (first+int(p))%n; got != want {
				t.Fatalf("Of(%q, %d, %d) = %d, want %d", topic, p, n, got, want)
			}
		}
	}
	// Many single-partition topics spread over the slots (not all in
	// slot 0), within 30% of the mean.
	count := make([]int, n)
	const topics = 4000
	for i := range topics {
		count[Of(fmt.Sprintf("topic-%d", i), 0, n)]++
	}
	for s, c := range count {
		if c < topics/n*7/10 || c > topics/n*13/10 {
			t.Errorf("slot %d holds %d of %d single-partition topics; want about %d", s, c, topics, topics/n)
		}
	}
	// Pinned values: a partition's slot names the session that mirrors
	// it (its transactional.id and checkpoints), so a change of the rule
	// moves partitions between sessions and must be deliberate.
	for _, c := range []struct {
		topic     string
		partition int32
		n, want   int
	}{
		{"orders", 0, 8, 4}, {"orders", 5, 8, 1}, {"payments", 0, 8, 6}, {"payments", 3, 12, 9}, {"orders", 0, 12, 8},
	} {
		if got := Of(c.topic, c.partition, c.n); got != c.want {
			t.Errorf("Of(%q, %d, %d) = %d, want %d", c.topic, c.partition, c.n, got, c.want)
		}
	}
}
