package leaders

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
)

// Guards leader lookup, caching, invalidation after a leader move, and the
// unknown-partition error.
func TestLeaders(t *testing.T) {
	c := kafkatest.NewCluster(t, kafkatest.SourceClusterID, kfake.NumBrokers(3), kfake.SeedTopics(2, "t"))
	cl := kafkatest.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	l := New(cl, time.Hour)
	k := tp.Key{Topic: "t", Partition: 1}
	got, err := l.Lookup(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if want := c.LeaderFor("t", 1); got.Broker != want {
		t.Fatalf("leader %d, want %d", got.Broker, want)
	}
	if got.ID == ([16]byte{}) {
		t.Error("topic ID not reported")
	}

	next := (got.Broker + 1) % 3
	if err := c.MoveTopicPartition("t", 1, next); err != nil {
		t.Fatal(err)
	}
	if again, _ := l.Lookup(ctx, k); again.Broker != got.Broker {
		t.Fatalf("cache not used: %d", again.Broker)
	}
	l.Invalidate(k)
	moved, err := l.Lookup(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if moved.Broker != next || moved.Epoch <= got.Epoch {
		t.Errorf("after move: %+v, want broker %d and an epoch above %d", moved, next, got.Epoch)
	}

	if _, err := l.Lookup(ctx, tp.Key{Topic: "t", Partition: 9}); !errors.Is(err, ErrUnknownPartition) {
		t.Errorf("missing partition: %v, want ErrUnknownPartition", err)
	}
	if _, err := l.Lookup(ctx, tp.Key{Topic: "nope", Partition: 0}); !errors.Is(err, ErrUnknownPartition) {
		t.Errorf("missing topic: %v, want ErrUnknownPartition", err)
	}
}
