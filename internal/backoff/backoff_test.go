package backoff

import (
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
