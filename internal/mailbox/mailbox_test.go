package mailbox

import (
	"slices"
	"sync"
	"testing"
)

// Guards the owner's view: everything put by many goroutines is taken
// exactly once, each sender's items in the order it put them, and a wake-up
// is pending whenever items wait.
func TestPutTakeOrderAndWake(t *testing.T) {
	b := New[[2]int]()
	const senders, each = 8, 500
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := range each {
				b.Put([2]int{s, i})
			}
		})
	}
	got := make(map[int][]int)
	n := 0
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for n < senders*each {
		select {
		case <-b.Wake():
		case <-done:
		}
		for _, it := range b.Take() {
			got[it[0]] = append(got[it[0]], it[1])
			n++
		}
	}
	for s := range senders {
		if len(got[s]) != each || !slices.IsSorted(got[s]) {
			t.Fatalf("sender %d: took %d items (want %d), in order %v", s, len(got[s]), each, slices.IsSorted(got[s]))
		}
	}
	if b.Len() != 0 || b.Take() != nil {
		t.Fatal("box not empty after everything was taken")
	}
	select { // a wake-up left from the last puts, whose items were taken
	case <-b.Wake():
	default:
	}
	b.Put()
	select {
	case <-b.Wake():
		t.Fatal("Put with no items woke the owner")
	default:
	}
	b.Put([2]int{1, 1})
	select {
	case <-b.Wake():
	default:
		t.Fatal("no wake-up pending after Put")
	}
}
