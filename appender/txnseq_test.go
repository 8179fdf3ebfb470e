package appender

import (
	"math"
	"testing"
)

// Guards the sequence arithmetic the broker checks: a batch of n offsets
// from seq is followed by seq+n, wrapping past MaxInt32 to 0 exactly as
// Kafka's DefaultRecordBatch.incrementSequence does.
func TestNextSequence(t *testing.T) {
	for _, tc := range []struct{ seq, n, want int32 }{
		{0, 1, 1},
		{0, 5, 5},
		{100, 3, 103},
		{math.MaxInt32 - 5, 5, math.MaxInt32},
		{math.MaxInt32 - 5, 6, 0},
		{math.MaxInt32 - 5, 10, 4},
		{math.MaxInt32, 1, 0},
		{math.MaxInt32, 3, 2},
	} {
		if got := nextSequence(tc.seq, tc.n); got != tc.want {
			t.Errorf("nextSequence(%d, %d) = %d, want %d", tc.seq, tc.n, got, tc.want)
		}
	}
}
