// Package backoff is mirrord's one retry schedule: exponential from a first
// wait, doubling with every attempt, capped. It is deterministic (no
// jitter): each link runs in one agent, and its components retry different
// partitions at different times anyway. It holds no state and starts no
// goroutines.
package backoff

import "time"

// Policy is an exponential backoff: First before retry 1, doubling, at most
// Max.
type Policy struct {
	First, Max time.Duration
}

// Wait is the wait before retry number attempt (1-based; below 1 counts as
// 1): First·2^(attempt-1), capped at Max. A Max below First caps at First.
func (p Policy) Wait(attempt int) time.Duration {
	d := p.First
	for i := 1; i < attempt && d < p.Max; i++ {
		d *= 2
	}
	return max(min(d, p.Max), min(p.First, p.Max), 0)
}
