package fetcher

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/internal/kafka/tp"
)

// TestReleasedResponsesCountUntilCollected: a response whose results were
// all released is garbage, still in the heap until a collection reclaims
// it, so it keeps counting against MaxBufferedBytes until the collection
// the fetcher asks for has run. With that collection held, fetching stops
// once released responses fill the buffer, and it goes on when the
// collection returns. Before, released bytes counted as free at once: in
// the bench a thousand partitions' response (the whole buffer, one
// allocation) arrived while the last one was still garbage, and peak RSS
// passed max_buffered_bytes + 64 MiB.
func TestReleasedResponsesCountUntilCollected(t *testing.T) {
	ctx := deadline(t)
	c, ends, want := garbageLog(t)
	k := tp.Key{Topic: "t", Partition: 0}
	f, m := newFetcher(t, c, garbageConfig)
	asked, gate := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	f.gcCycles = func() uint64 { return 0 } // no collection but the fetcher's own
	f.collect = func() {
		if calls.Add(1) == 1 {
			close(asked)
			<-gate
		}
	}
	con := newConsumer(t, f) // releases every result at once
	con.assignAll(ends)
	run(t, f)

wait:
	for {
		select {
		case r := <-f.Results():
			con.take(r)
			if con.s[k].end >= ends[k] {
				t.Fatalf("the whole log (%d) was fetched and released without a collection asked for, with a buffer of a quarter of it", ends[k])
			}
		case <-asked:
			break wait
		case <-ctx.Done():
			t.Fatalf("no collection asked for with the log fetched to %d of %d and every result released", con.s[k].end, ends[k])
		}
	}
	at := con.s[k].end

	// While the collection runs, no request goes out: the released
	// responses still fill the buffer. (A request in flight when it was
	// asked for may still answer: count from a moment later.)
	requests := func() float64 { return testutil.ToFloat64(m.requests.WithLabelValues(testLink)) }
	settle := time.After(200 * time.Millisecond)
	var before float64
	for held := time.After(700 * time.Millisecond); ; {
		select {
		case r := <-f.Results():
			con.take(r)
			continue
		case <-settle:
			before = requests()
			continue
		case <-held:
		}
		break
	}
	if after := requests(); after != before {
		t.Fatalf("%v fetch requests went out while the collection of the released responses ran (fetched to %d of %d)", after-before, con.s[k].end, ends[k])
	}

	close(gate)
	con.until(ctx, ends)
	compare(t, con.s, want)
	if n := testutil.ToFloat64(m.collections.WithLabelValues(testLink)); n < 1 || int(n) != int(calls.Load()) {
		t.Fatalf("fetch_buffer_collections_total %v, collections run %d", n, calls.Load())
	}
	t.Logf("a collection was first asked for at offset %d of %d; %d collections in all", at, ends[k], calls.Load())
}

// garbageConfig is a buffer of a quarter of garbageLog's log.
var garbageConfig = Config{PartitionMaxBytes: 8 << 10, MaxBufferedBytes: 32 << 10}

// garbageLog is a partition of 40 batches of 3 KiB (incompressible) and
// the sentinel, with its end offsets and committed records.
func garbageLog(t *testing.T) (*kfake.Cluster, map[tp.Key]int64, map[tp.Key][]rec) {
	ctx := deadline(t)
	c := source(t, 1, "t")
	cl := producer(t, c, kgo.ProducerLinger(0))
	rnd := rand.New(rand.NewPCG(3, 4))
	for i := range 40 {
		pad := make([]byte, 3<<10)
		for j := range pad {
			pad[j] = 'a' + byte(rnd.IntN(26))
		}
		produce(ctx, t, cl, "t", 0, fmt.Sprintf("%02d %s", i, pad))
	}
	endAll(ctx, t, c, "t", 1)
	ends := endOffsets(ctx, t, c, "t")
	return c, ends, readCommitted(ctx, t, c, "t", ends)
}

// TestCollectionsOfTheProcessReclaim: garbage counts as reclaimed once two
// collections of the process's own have completed since it was let go
// (the second began after), so a fetcher whose process collects on its
// own never forces one. Here every look at the collection count finds two
// more: the whole log is fetched without a collection asked for.
func TestCollectionsOfTheProcessReclaim(t *testing.T) {
	ctx := deadline(t)
	c, ends, want := garbageLog(t)
	f, m := newFetcher(t, c, garbageConfig)
	var cycles atomic.Uint64
	f.gcCycles = func() uint64 { return cycles.Add(2) }
	f.collect = func() { t.Error("a collection was forced although the process's own had reclaimed the garbage") }
	con := newConsumer(t, f)
	con.assignAll(ends)
	run(t, f)
	con.until(ctx, ends)
	compare(t, con.s, want)
	if n := testutil.ToFloat64(m.collections.WithLabelValues(testLink)); n != 0 {
		t.Errorf("fetch_buffer_collections_total %v, want 0", n)
	}
}
