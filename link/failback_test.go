package link

import (
	"context"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/failover"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/statestore"
)

// The round trip of DESIGN §16 and README "Active-active and failback":
// records produced at A, a failover to B, consumers and producers at B,
// the reverse link B→A and a failover back, consumers at A, and the link
// A→B resumed. Two groups move both ways: one that had read part of A's
// records when it moved to B and still had some left when it moved back
// (its position at B is in the copies of A's records: at A it resumes at
// the original of the first copy it had not read), and one that had read
// all of them and part of B's. Across the three clusters' reads every
// committed record is consumed exactly once by each group; A ends with
// B's records once and B with A's, none sent back.
func TestFailback(t *testing.T) {
	scenario(t, func(t *testing.T, e *env) { testFailback(t, e, false, false) })
}

// The same round trip with transactional delivery: the reverse link B→A
// (its translation finds the originals of the copies it skipped by
// content, Logs.Stamped), the link A→B (the reverse link learns its
// sessions' producer IDs from the state topic at B, and translates a
// position in front of one of its copies to the copy's original at A by
// content), or both. The link A→B resumed at the end skips B→A's copies
// of B's records the same way.
func TestFailbackTransactional(t *testing.T) {
	t.Run("back", func(t *testing.T) {
		scenario(t, func(t *testing.T, e *env) { testFailback(t, e, false, true) })
	})
	t.Run("forward", func(t *testing.T) {
		scenario(t, func(t *testing.T, e *env) { testFailback(t, e, true, false) })
	})
	t.Run("both", func(t *testing.T) {
		scenario(t, func(t *testing.T, e *env) { testFailback(t, e, true, true) })
	})
}

func testFailback(t *testing.T, e *env, txnForward, txnBack bool) {
	a := e.cluster(t, "a", kafkatest.SourceClusterID)
	b := e.cluster(t, "b", kafkatest.DestClusterID)
	topic := e.topic("t")
	topics := []string{topic}
	a.CreateTopic(t, topic, 2, nil)
	groups := &config.Groups{Include: []*regexp.Regexp{regexp.MustCompile(`^(?:` + regexp.QuoteMeta(e.topic("app")) + `.*)$`)}}
	slow, quick := e.topic("app-slow"), e.topic("app-quick")
	cfg := func(name string, src, dst *cluster, unattributed bool) Config {
		c := e.linkConfig(name, src, dst, "t")
		c.Link.Groups, c.Link.GroupSyncInterval = groups, 300*time.Millisecond
		c.Link.SkipUnattributed, c.Link.SharedDestination = unattributed, true
		return c
	}
	// B→A skips batches without a producer ID (unattributed = "skip").
	abCfg, baCfg := cfg("ab", a, b, false), cfg("ba", b, a, true)
	for _, c := range []struct {
		cfg *Config
		txn bool
	}{{&abCfg, txnForward}, {&baCfg, txnBack}} {
		if c.txn {
			c.cfg.Link.Delivery = statestore.DeliveryTransactional
			c.cfg.Link.TransactionTimeout = 30 * time.Second
			c.cfg.Link.CheckpointInterval = 300 * time.Millisecond
		}
	}

	// What the producers committed: idempotent and transactional
	// ones at both ends. Records without a producer ID make where a
	// group's read stops decide which translation rule runs; their
	// positions are checked one by one in TestFailbackPlainRecords.
	atA, atB, later := newProduced(), newProduced(), newProduced()
	load(t, a, atA, idempotent, 3, "a-idem", 80, topic)
	load(t, a, atA, transactional, 4, "a-txn", 70, topic)
	totalA := committedCount(atA)

	ab := startLink(t, abCfg, a, b, "ab")
	consumed := map[string]map[string]int{slow: {}, quick: {}}
	read := func(c *cluster, group string, n int) {
		t.Helper()
		got := readGroup(t, c, group, topics, func(got int, _ map[tp.Key][]*kgo.Record) bool { return got >= n })
		for _, rs := range got {
			for _, r := range rs {
				consumed[group][r.Topic+"/"+string(r.Key)]++
			}
		}
	}
	read(a, slow, totalA/4)
	read(a, quick, totalA*3/4)

	// Failover A→B: the link catches up, the groups move, it pauses.
	failOver(t, ab, 2*time.Minute)

	load(t, b, atB, idempotent, 2, "b-idem", 60, topic)
	load(t, b, atB, transactional, 0, "b-txn", 49, topic)
	totalB := committedCount(atB)
	read(b, slow, 10)                                    // still within the copies of A's records
	read(b, quick, totalA-len(consumed[quick])+totalB/2) // A's rest and half of B's

	// Failback: the reverse link sends B's records to A, not A's
	// back; the groups move back with it.
	ba := startLink(t, baCfg, b, a, "ba")
	failOver(t, ba, 2*time.Minute)
	if c := ba.Status().Counters; c.Get(BatchesReturnedHome) == 0 {
		t.Errorf("link ba sent no batch home: %d; want the copies of A's records skipped", c.Get(BatchesReturnedHome))
	}
	want := committedCount(atA) + committedCount(atB)
	for _, g := range []string{slow, quick} {
		// Until the group has read as many records as were committed,
		// or gets nothing more for five seconds; then two seconds more:
		// a record read twice would be past the count. consumedOnce
		// names what is missing or extra.
		left := want - total(consumed[g])
		prev, last := -1, time.Time{}
		got := readGroup(t, a, g, topics, func(n int, _ map[tp.Key][]*kgo.Record) bool {
			if n != prev {
				prev, last = n, time.Now()
			}
			idle := time.Since(last)
			return n >= left && idle > 2*time.Second || idle > 5*time.Second
		})
		for _, rs := range got {
			for _, r := range rs {
				consumed[g][r.Topic+"/"+string(r.Key)]++
			}
		}
		consumedOnce(t, g, consumed[g], atA, atB)
	}

	// Producers back at A, and the link A→B resumed: A's new records
	// reach B, B's copies at A do not go back.
	load(t, a, later, idempotent, 0, "a-later", 30, topic)
	ab.Resume()
	bothCaughtUp(t, topic, map[*testLink]*cluster{ab: a})
	holdsExactly(t, a, union(atA, atB, later), topic)
	holdsExactly(t, b, union(atA, atB, later), topic)
	if c := ab.Status().Counters; c.Get(BatchesReturnedHome) == 0 {
		t.Errorf("link ab sent no batch home after its resume; want B's records at A skipped")
	}
}

// failOver runs a failover of l and waits until it is done and l paused.
func failOver(t *testing.T, l *testLink, within time.Duration) {
	t.Helper()
	l.waitState(t, Mirroring, within)
	if err := l.StartFailover(failover.Options{Timeout: within}); err != nil {
		t.Fatal(err)
	}
	if f := failoverEnd(t, l, within+30*time.Second); f.Outcome != failover.Done || f.Lag != 0 || f.Error != "" {
		t.Fatalf("failover of %s: %+v, want done without lag", l.Name(), f)
	}
	l.waitState(t, Paused, 30*time.Second)
}

func committedCount(p *produced) int {
	n := 0
	for _, c := range p.Committed {
		n += c
	}
	return n
}

func total(m map[string]int) int {
	n := 0
	for _, c := range m {
		n += c
	}
	return n
}

func union(ps ...*produced) *produced {
	u := newProduced()
	for _, p := range ps {
		maps.Copy(u.Committed, p.Committed)
		maps.Copy(u.Aborted, p.Aborted)
	}
	return u
}

// onceEach checks that a group consumed every committed record of the
// ledgers exactly once and nothing else.
func consumedOnce(t *testing.T, group string, got map[string]int, ledgers ...*produced) {
	t.Helper()
	want := union(ledgers...)
	var bad []string
	for k, n := range want.Committed {
		if got[k] != n {
			bad = append(bad, k)
		}
	}
	for k := range got {
		if _, ok := want.Committed[k]; !ok {
			bad = append(bad, k)
		}
	}
	slices.Sort(bad)
	for i, k := range bad {
		if i == 10 {
			break
		}
		t.Errorf("group %s: record %s consumed %d times, committed %d", group, k, got[k], want.Committed[k])
	}
	if len(bad) > 0 {
		t.Fatalf("group %s: %d records consumed wrongly across the round trip (of %d)", group, len(bad), len(want.Committed))
	}
	t.Logf("group %s: %d records, each consumed exactly once across A, B and A", group, total(got))
}

// A failback translates a position at B in front of B's copy of a record
// that a plain producer (no producer ID) wrote at A to that record's
// original at A, found by content: the copy carries no origin, and the
// reverse link skips it (unattributed = "skip"). Before, such a position
// translated to the next batch the reverse link sent or the next
// attributed copy, past the original, and a group moved back skipped it
// (CI found it in TestFailback). Every position at B is translated by the
// reverse link and compared with the offset at A of the first record at or
// after it that A holds: the original of a copy, or the reverse link's
// copy of B's own record; B's own plain records are never sent, and a
// position in front of one is the next record's.
func TestFailbackPlainRecords(t *testing.T) {
	scenario(t, func(t *testing.T, e *env) {
		a := e.cluster(t, "a", kafkatest.SourceClusterID)
		b := e.cluster(t, "b", kafkatest.DestClusterID)
		topic := e.topic("t")
		a.CreateTopic(t, topic, 1, nil)
		cfg := func(name string, src, dst *cluster, skip bool) Config {
			c := e.linkConfig(name, src, dst, "t")
			c.Link.SkipUnattributed, c.Link.SharedDestination = skip, true
			return c
		}
		atA, atB := newProduced(), newProduced()
		load(t, a, atA, plain, 0, "a-plain", 20, topic)
		load(t, a, atA, idempotent, 1, "a-idem", 20, topic)
		load(t, a, atA, plain, 2, "a-plain2", 20, topic)
		ab := startLink(t, cfg("ab", a, b, false), a, b, "ab")
		failOver(t, ab, 2*time.Minute)

		load(t, b, atB, idempotent, 3, "b-idem", 20, topic)
		load(t, b, atB, plain, 0, "b-plain", 10, topic) // B's own: never sent
		load(t, b, atB, idempotent, 4, "b-idem2", 10, topic)
		ba := startLink(t, cfg("ba", b, a, true), b, a, "ba")
		bothCaughtUp(t, topic, map[*testLink]*cluster{ba: b})

		atOfA := map[string]int64{}
		for _, r := range consumeAll(t, a, false, topic) {
			atOfA[string(r.Key)] = r.Offset
		}
		recsB := consumeAll(t, b, false, topic)
		if len(recsB) == 0 {
			t.Fatal("B holds no record")
		}
		vias := map[string]int{}
		checked, fromPlain := 0, 0
		for p := int64(0); p <= recsB[len(recsB)-1].Offset; p++ {
			want, key := int64(-1), ""
			for _, r := range recsB {
				if at, ok := atOfA[string(r.Key)]; r.Offset >= p && ok {
					want, key = at, string(r.Key)
					break
				}
			}
			if want < 0 {
				continue // only B's own plain records from p on: nothing to resume at
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			got, err := ba.Translate(ctx, topic, 0, p)
			cancel()
			if err != nil {
				t.Errorf("translate B offset %d: %v; want A offset %d (record %s)", p, err, want, key)
				continue
			}
			if got.DestinationOffset != want {
				t.Errorf("translate B offset %d: A offset %d via %s (source batch %d, destination batch %d); want %d (record %s)",
					p, got.DestinationOffset, got.Via, got.SourceBatch, got.DestinationBatch, want, key)
			}
			vias[got.Via]++
			checked++
			if strings.HasPrefix(key, "plain-") && strings.Contains(key, "-a-plain") {
				fromPlain++
			}
		}
		if fromPlain == 0 {
			t.Errorf("no position translated to an original of a plain record of A (keys %v)", slices.Collect(maps.Keys(atOfA))[:min(5, len(atOfA))])
		}
		t.Logf("%s: %d positions at B translated to A, %d of them to originals of A's plain records; via %v", e.b, checked, fromPlain, vias)
	})
}
