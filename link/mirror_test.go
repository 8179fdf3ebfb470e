package link

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/seed83556561/mirrord/internal/testkit/mirrortest"
	"github.com/seed83556561/mirrord/statestore"
)

// The product promise: committed source records from idempotent,
// transactional (with aborts across partitions and topics) and plain
// producers over every codec reach the destination exactly once, in order,
// with mapped PIDs, and nothing aborted or unselected does. On Kafka 4.x the
// transactional producers run transaction.version 2 (an epoch bump at every
// commit and abort, sequences restarting at 0); on 3.9 the older protocol.
func TestMirrorProducersAndCodecs(t *testing.T) {
	scenario(t, func(t *testing.T, e *env) {
		f := e.mirrored(t, "main", srcTopic("orders", 4), srcTopic("events", 3), srcTopic("private", 2).unmirrored())

		// Data before the link starts...
		for codec := range codecs {
			f.load(idempotent, codec, "before", 300, "orders")
		}
		f.load(transactional, 3, "txn-a", 200, "orders", "events")
		f.load(plain, 0, "before", 100, "events", "private")

		l := f.start("main")

		// ...and while it runs.
		var wg sync.WaitGroup
		for codec := range codecs {
			wg.Go(func() {
				f.load(transactional, codec, "txn-live-"+codecNames[codec], 140, "orders", "events")
			})
		}
		wg.Go(func() { f.load(idempotent, 4, "live", 500, "events") })
		wg.Go(func() { f.load(plain, 2, "live", 200, "orders") })
		wg.Wait()

		rep := f.waitMirrored(90*time.Second, "orders", "events")
		n := f.exactlyOnce("orders", "events")
		t.Logf("%s: mirrored %d records over %d partitions, verified record by record", e.b, rep.Records, len(rep.Partitions))
		if rep.Records == 0 || int64(n) < rep.Records {
			t.Fatalf("verify saw %d records, producers committed %d to the mirrored topics and more", rep.Records, n)
		}
		if l.Status().State != Mirroring {
			t.Errorf("state %s, want MIRRORING", l.Status().State)
		}
		// Status reports the counters: every record verified was appended
		// once by this session (nothing was settled or reconciled).
		if c := l.Status().Counters; c.Get(RecordsMirrored) != rep.Records || c.Get(BatchesMirrored) == 0 || c.Get(BytesMirrored) == 0 || c.Get(BarriersEmitted) == 0 {
			t.Errorf("status counters %+v, want %d records and nonzero batches, bytes and barriers", c, rep.Records)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		private := f.topic("private")
		if tds, err := f.dst.Admin.ListTopics(ctx, private); err == nil && tds.Has(private) {
			t.Error("unselected topic private was created at the destination")
		}
	})
}

// No loss and no duplicate when the agent dies (no drain, no final
// checkpoint) several times mid-stream and restarts.
func TestMirrorSurvivesCrashes(t *testing.T) {
	scenario(t, func(t *testing.T, e *env) {
		f := e.mirrored(t, "crashy", srcTopic("t", 5))

		stopLoad := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stopLoad:
					return
				default:
				}
				f.load(mirrortest.Kind(i%3), i%len(codecs), fmt.Sprintf("round%03d", i), 60)
			}
		})
		const kills = 5
		rng := rand.New(rand.NewPCG(1, 2))
		var links []*testLink
		for range kills {
			l := f.start("crashy")
			links = append(links, l)
			l.waitState(t, Mirroring, 60*time.Second)
			time.Sleep(time.Duration(200+rng.IntN(600)) * time.Millisecond)
			l.stop(t, true)
		}
		close(stopLoad)
		wg.Wait()

		last := f.start("crashy")
		// Mirrored by the last session or already by the one killed
		// before it: the barrier count below wants the last session
		// MIRRORING (it waits out the killed one's lease first).
		last.waitState(t, Mirroring, 60*time.Second)
		rep := f.waitMirrored(90 * time.Second)
		n := f.exactlyOnce()
		t.Logf("%s: killed the agent %d times; %d committed records mirrored exactly once (verify: %d records)", e.b, kills, n, rep.Records)
		barriersPerPartition(t, f.dst, f.stateTopic(), append(links, last)...)
	})
}

// barriersPerPartition checks that every session of the links that reached
// MIRRORING left one barrier record per destination partition in the state
// topic.
func barriersPerPartition(t *testing.T, dst *cluster, stateTopic string, links ...*testLink) {
	t.Helper()
	var sessions int
	for _, l := range links {
		sessions += int(l.prepared.Load())
	}
	if sessions < len(links) {
		t.Fatalf("%d links reached MIRRORING %d times in all", len(links), sessions)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	view, err := replayState(ctx, dst, stateTopic)
	if err != nil {
		t.Fatal(err)
	}
	count := map[statestore.PIDResetKey]int{}
	for _, r := range view.Records {
		if k, ok := r.Key.(statestore.PIDResetKey); ok && r.Value != nil {
			count[k]++
		}
	}
	if len(count) == 0 {
		t.Fatal("no barrier records in the state topic")
	}
	for k, n := range count {
		if n != sessions {
			t.Errorf("destination partition %v has %d barrier records, want one per session: %d", k, n, sessions)
		}
	}
}
