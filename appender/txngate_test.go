package appender

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Guards the send gate's rules: a broker's gate is held from acquire until
// kgo wrote a Produce request to that broker (the write hook) or the
// holder released it; other requests' writes and other brokers' do not
// end a hold; a late release is a no-op; a waiter leaves when its context
// ends.
func TestSendGate(t *testing.T) {
	g := newSendGate()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	release1, err := g.acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.acquire(ctx, 2); err != nil { // another broker's gate is free
		t.Fatal(err)
	}
	got := make(chan func(), 1)
	go func() {
		r, err := g.acquire(ctx, 1)
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	wrote := func(node int32, key kmsg.Key) {
		g.OnBrokerWrite(kgo.BrokerMetadata{NodeID: node}, int16(key), 100, 0, 0, nil)
	}
	wrote(1, kmsg.Metadata) // not a Produce
	wrote(2, kmsg.Produce)  // another broker
	select {
	case <-got:
		t.Fatal("broker 1's gate opened before its holder's Produce was written")
	case <-time.After(100 * time.Millisecond):
	}
	wrote(1, kmsg.Produce)
	var release2 func()
	select {
	case release2 = <-got:
	case <-ctx.Done():
		t.Fatal("the write of the holder's Produce did not open the gate")
	}
	release1() // after the hook: must not end the new holder's hold
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	if _, err := g.acquire(short, 1); err == nil {
		t.Fatal("a late release of the first hold opened the second's gate")
	}
	release2() // no write happened (no connection): the holder opens it
	if _, err := g.acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
}
