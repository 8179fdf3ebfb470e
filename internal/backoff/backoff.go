// Package backoff is mirrord's one retry schedule: exponential from a first
// wait, doubling with every attempt, capped. It is deterministic (no
// jitter): each link runs in one agent, and its components retry different
// partitions at different times anyway. It holds no state and starts no
// goroutines; Sleep blocks its caller.
package backoff

import (
	"context"
	"time"
)

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

// Sleep waits d, or until ctx ends; it returns ctx's error if ctx ended
// first, else nil. It is the one sleep between retries: a wait that an
// ending context cuts short.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Retry runs fn until it succeeds, ctx ends or attempts run out, waiting
// p.Wait(i) after failure i. An error for which permanent reports true ends
// it at once (an authorization refusal: waiting grants no permission);
// permanent may be nil. It returns fn's last error, or ctx's if ctx ended
// while it waited.
func (p Policy) Retry(ctx context.Context, attempts int, fn func() error, permanent func(error) bool) error {
	var err error
	for i := 1; i <= attempts; i++ {
		if err = fn(); err == nil || permanent != nil && permanent(err) {
			return err
		}
		if i == attempts {
			break
		}
		if serr := Sleep(ctx, p.Wait(i)); serr != nil {
			return serr
		}
	}
	return err
}
