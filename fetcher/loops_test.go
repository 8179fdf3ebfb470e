package fetcher

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed83556561/mirrord/internal/kafka/leaders"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
)

// loopLog counts the broker fetch loops the fetcher's debug log says it
// started and stopped, and passes every line on to the test log.
type loopLog struct {
	testLogger
	started, stopped atomic.Int64
}

func (w *loopLog) Write(p []byte) (int, error) {
	switch {
	case bytes.Contains(p, []byte("started broker fetch loop")):
		w.started.Add(1)
	case bytes.Contains(p, []byte("stopped broker fetch loop")):
		w.stopped.Add(1)
	}
	return w.testLogger.Write(p)
}

// Guards the broker fetch loops' lifetime: once no assigned partition is
// led by a broker, its loop ends, also with fetches in flight when the
// partitions go (the coordinator looks for idle loops only after the events
// that can leave one without work, not at every step).
func TestIdleBrokerLoopsStop(t *testing.T) {
	ctx := deadline(t)
	c := source(t, 6, "t")
	produceBulk(ctx, t, c, "t", 6, 20, 2, 200)
	w := &loopLog{testLogger: testLogger{t: t}}
	t.Cleanup(func() { w.mu.Lock(); w.done = true; w.mu.Unlock() })
	cl := kafkatest.Client(t, c)
	f, err := New(Config{Link: testLink, PartitionMaxBytes: 1 << 10, MaxWait: 200 * time.Millisecond}, Deps{
		Client: cl, Leaders: leaders.New(cl, time.Minute), Metrics: NewMetrics(prometheus.NewRegistry()),
		Logger: hclog.New(&hclog.LoggerOptions{Output: w, Level: hclog.Debug}),
	})
	if err != nil {
		t.Fatal(err)
	}
	con := newConsumer(t, f)
	ends := endOffsets(ctx, t, c, "t")
	con.assignAll(ends)
	run(t, f)
	caughtUp := func() bool {
		for k, end := range ends {
			if s := con.s[k]; end > 0 && (s == nil || s.end < end) {
				return false
			}
		}
		return true
	}
	for !caughtUp() {
		select {
		case r := <-f.Results():
			con.take(r)
		case <-ctx.Done():
			t.Fatal("not caught up")
		}
	}
	// Every partition is at its end: the loops are in their long polls.
	started := w.started.Load()
	if started < 2 {
		t.Fatalf("%d broker fetch loops started over 3 brokers and 6 partitions, want several", started)
	}
	for k := range ends {
		f.Unassign(tp.Partition{Topic: k.Topic, Partition: k.Partition})
	}
	for w.stopped.Load() < started {
		select {
		case r := <-f.Results():
			f.Release(r.Pin)
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			t.Fatalf("%d of %d broker fetch loops stopped after every partition was unassigned", w.stopped.Load(), started)
		}
	}
}
