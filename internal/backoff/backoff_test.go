package backoff

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Guards the schedule every component retries on: doubling from First,
// capped at Max, never negative, and attempt numbers below 1 taken as 1.
func TestWait(t *testing.T) {
	p := Policy{First: 100 * time.Millisecond, Max: time.Second}
	tests := []struct {
		attempt int
		want    time.Duration
	}{
		{-3, 100 * time.Millisecond},
		{0, 100 * time.Millisecond},
		{1, 100 * time.Millisecond},
		{2, 200 * time.Millisecond},
		{4, 800 * time.Millisecond},
		{5, time.Second},
		{1000, time.Second},
	}
	for _, tt := range tests {
		if got := p.Wait(tt.attempt); got != tt.want {
			t.Errorf("Wait(%d) = %v, want %v", tt.attempt, got, tt.want)
		}
	}
	if got := (Policy{First: time.Second, Max: time.Millisecond}).Wait(3); got != time.Millisecond {
		t.Errorf("Max below First: Wait = %v, want Max", got)
	}
	if got := (Policy{}).Wait(7); got != 0 {
		t.Errorf("zero policy: Wait = %v, want 0", got)
	}
}

// Guards Retry: it stops at the first success, at once on an
// error that permanent reports (waiting grants no permission), after the
// attempts, and when ctx ends while it waits.
func TestRetry(t *testing.T) {
	quick := Policy{First: time.Millisecond, Max: time.Millisecond}
	errTransient, errPermanent := errors.New("leader not available"), errors.New("not authorized")
	permanent := func(err error) bool { return errors.Is(err, errPermanent) }
	ctx := context.Background()
	calls := 0
	failThen := func(n int, err error) func() error {
		calls = 0
		return func() error {
			calls++
			if calls <= n {
				return err
			}
			return nil
		}
	}
	if err := quick.Retry(ctx, 5, failThen(2, errTransient), permanent); err != nil || calls != 3 {
		t.Errorf("two failures then success: %v after %d calls", err, calls)
	}
	if err := quick.Retry(ctx, 5, failThen(9, errPermanent), permanent); !errors.Is(err, errPermanent) || calls != 1 {
		t.Errorf("permanent error: %v after %d calls, want it after 1", err, calls)
	}
	if err := quick.Retry(ctx, 3, failThen(9, errTransient), permanent); !errors.Is(err, errTransient) || calls != 3 {
		t.Errorf("out of attempts: %v after %d calls, want the last error after 3", err, calls)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := (Policy{First: time.Hour, Max: time.Hour}).Retry(cctx, 3, failThen(9, errTransient), permanent); !errors.Is(err, context.Canceled) || calls != 1 {
		t.Errorf("ended while waiting: %v after %d calls", err, calls)
	}
}

// Guards Sleep: it waits the whole duration, and returns the context's
// error at once when the context ends first.
func TestSleep(t *testing.T) {
	start := time.Now()
	if err := Sleep(context.Background(), 20*time.Millisecond); err != nil || time.Since(start) < 20*time.Millisecond {
		t.Errorf("Sleep returned %v after %v, want nil after 20ms", err, time.Since(start))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start = time.Now()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) || time.Since(start) > time.Minute {
		t.Errorf("Sleep on an ended context returned %v after %v", err, time.Since(start))
	}
}
