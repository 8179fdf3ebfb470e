// Package mailbox is the one way mirrord's components hand work to the
// goroutine that owns some state (STYLE: one goroutine owns each piece of
// mutable state; others send it requests): any goroutine Puts; the owner
// waits on Wake and Takes everything put so far, in order.
//
// A Box never blocks a sender and never drops an item. It is not bounded by
// itself: each use bounds it by construction and says how in its own doc
// (the fetcher's commands by one pending assignment per partition and one
// release per delivered result, the appender's submissions by one batch per
// partition, a link's worker results by one worker per kind of work). Len
// lets tests check that bound.
//
// The package starts no goroutines. A Box is safe for concurrent use.
package mailbox

import "sync"

// Box holds items put by any goroutine until the owner takes them.
type Box[T any] struct {
	mu    sync.Mutex
	items []T
	wake  chan struct{} // capacity 1: items are waiting
}

// New returns an empty box.
func New[T any]() *Box[T] {
	return &Box[T]{wake: make(chan struct{}, 1)}
}

// Put adds items and wakes the owner. It never blocks.
func (b *Box[T]) Put(items ...T) {
	if len(items) == 0 {
		return
	}
	b.mu.Lock()
	b.items = append(b.items, items...)
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// Wake is ready when items may be waiting; the owner then calls Take. A
// wake-up may find the box empty (items taken after the signal), never the
// other way round.
func (b *Box[T]) Wake() <-chan struct{} { return b.wake }

// Take returns every item put since the last Take, in the order they were
// put, and empties the box.
func (b *Box[T]) Take() []T {
	b.mu.Lock()
	defer b.mu.Unlock()
	items := b.items
	b.items = nil
	return items
}

// Len is the number of items waiting.
func (b *Box[T]) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.items)
}
