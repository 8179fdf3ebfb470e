package link

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/statestore"
)

// consumeAll reads every record of the topics from the cluster up to their
// high watermarks as of the call. A partition whose last offsets are
// transaction markers (markers: a source cluster with transactional
// producers) never shows a record at its high watermark - 1, so such a read
// also ends when polls find nothing for five seconds; a destination holds no
// markers and is read to its end offsets, however slow the machine.
func consumeAll(t *testing.T, c *cluster, markers bool, topics ...string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ends, err := c.adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			if want[o.Topic] == nil {
				want[o.Topic] = map[int32]int64{}
			}
			want[o.Topic][o.Partition] = o.Offset
		}
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.c.ListenAddrs()...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	idleSince := time.Now()
	for len(want) > 0 {
		pollCtx, pollCancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pollCtx)
		pollCancel()
		if err := ctx.Err(); err != nil {
			t.Fatalf("consume %v: %v (still waiting for %v)", topics, err, want)
		}
		if fs.NumRecords() > 0 {
			idleSince = time.Now()
		} else if markers && time.Since(idleSince) > 5*time.Second {
			break // nothing more: the rest are transaction markers
		}
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, r)
			if end, ok := want[r.Topic][r.Partition]; ok && r.Offset+1 >= end {
				delete(want[r.Topic], r.Partition)
				if len(want[r.Topic]) == 0 {
					delete(want, r.Topic)
				}
			}
		})
	}
	return out
}

// exactlyOnce checks the destination against what the producers had
// acknowledged: every committed record exactly once, no aborted record, no
// record that nobody produced.
func exactlyOnce(t *testing.T, dst *cluster, p *produced, topics ...string) int {
	t.Helper()
	got := map[string]int{}
	for _, r := range consumeAll(t, dst, false, topics...) {
		got[r.Topic+"/"+string(r.Key)]++
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	mirrored := func(k string) bool {
		for _, t := range topics {
			if strings.HasPrefix(k, t+"/") {
				return true
			}
		}
		return false
	}
	bad, n := 0, 0
	for k, c := range p.committed {
		if !mirrored(k) {
			continue
		}
		n += c
		if got[k] != c {
			bad++
			if bad < 10 {
				t.Errorf("record %s: %d at the destination, %d committed at the source", k, got[k], c)
			}
		}
	}
	for k := range p.aborted {
		if mirrored(k) && got[k] > 0 {
			bad++
			if bad < 10 {
				t.Errorf("aborted record %s reached the destination", k)
			}
		}
	}
	for k := range got {
		if _, ok := p.committed[k]; !ok {
			if _, ab := p.aborted[k]; !ab {
				t.Errorf("record %s at the destination was never produced", k)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d records wrong", bad)
	}
	return n
}

// The product promise: committed source records from idempotent,
// transactional (with aborts across partitions) and plain producers over
// every codec reach the destination exactly once, in order, with mapped
// PIDs, and nothing aborted or unselected does.
func TestMirrorProducersAndCodecs(t *testing.T) {
	src := newCluster(t, "src", kafkatest.SourceClusterID)
	dst := newCluster(t, "dst", kafkatest.DestClusterID)
	src.createTopic(t, "orders", 4, nil)
	src.createTopic(t, "events", 3, nil)
	src.createTopic(t, "private", 2, nil)
	p := newProduced()

	// Data before the link starts...
	for codec := range codecs {
		load(t, src, p, idempotent, codec, "before", 300, "orders")
	}
	load(t, src, p, transactional, 3, "txn-a", 200, "orders", "events")
	load(t, src, p, plain, 0, "before", 100, "events", "private")

	l := startLink(t, linkConfig("main", src, dst, "orders|events"), src, dst, "main")

	// ...and while it runs.
	var wg sync.WaitGroup
	for codec := range codecs {
		wg.Go(func() { load(t, src, p, transactional, codec, "txn-live-"+codecNames[codec], 140, "orders", "events") })
	}
	wg.Go(func() { load(t, src, p, idempotent, 4, "live", 500, "events") })
	wg.Go(func() { load(t, src, p, plain, 2, "live", 200, "orders") })
	wg.Wait()

	topics := map[string]string{"orders": "orders", "events": "events"}
	rep := waitMirrored(t, src, dst, "__mirror_state", topics, 60*time.Second)
	n := exactlyOnce(t, dst, p, "orders", "events")
	t.Logf("mirrored %d records over %d partitions, verified record by record", rep.Records, len(rep.Partitions))
	if rep.Records == 0 || int64(n) < rep.Records {
		t.Fatalf("verify saw %d records, producers committed %d to the mirrored topics and more", rep.Records, n)
	}
	if l.Status().State != Mirroring {
		t.Errorf("state %s, want MIRRORING", l.Status().State)
	}
	// Status reports the counters: every record verified was appended
	// once by this session (nothing was settled or reconciled).
	if c := l.Status().Counters; c.Records != rep.Records || c.Batches == 0 || c.Bytes == 0 || c.Barriers == 0 {
		t.Errorf("status counters %+v, want %d records and nonzero batches, bytes and barriers", c, rep.Records)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if tds, err := dst.adm.ListTopics(ctx, "private"); err == nil && tds.Has("private") {
		t.Error("unselected topic private was created at the destination")
	}
}

// No loss and no duplicate when the agent dies (no drain, no final
// checkpoint) several times mid-stream and restarts.
func TestMirrorSurvivesCrashes(t *testing.T) {
	src := newCluster(t, "src", kafkatest.SourceClusterID)
	dst := newCluster(t, "dst", kafkatest.DestClusterID)
	src.createTopic(t, "t", 5, nil)
	p := newProduced()
	cfg := linkConfig("crashy", src, dst, "t")

	stopLoad := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stopLoad:
				return
			default:
			}
			load(t, src, p, producerKind(i%3), i%len(codecs), "round"+string(rune('a'+i%26))+string(rune('a'+i/26%26)), 60, "t")
		}
	})
	const kills = 5
	rng := rand.New(rand.NewPCG(1, 2))
	var links []*testLink
	for range kills {
		l := startLink(t, cfg, src, dst, "crashy")
		links = append(links, l)
		l.waitState(t, Mirroring, 30*time.Second)
		time.Sleep(time.Duration(200+rng.IntN(600)) * time.Millisecond)
		l.stop(t, true)
	}
	close(stopLoad)
	wg.Wait()

	last := startLink(t, cfg, src, dst, "crashy")
	rep := waitMirrored(t, src, dst, "__mirror_state", map[string]string{"t": "t"}, 60*time.Second)
	n := exactlyOnce(t, dst, p, "t")
	t.Logf("killed the agent %d times; %d committed records mirrored exactly once (verify: %d records)", kills, n, rep.Records)
	barriersPerPartition(t, dst, "__mirror_state", append(links, last)...)
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
