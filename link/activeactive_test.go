package link

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/seed83556561/mirrord/internal/testkit/batchtest"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/internal/testkit/mirrortest"
	"github.com/seed83556561/mirrord/statestore"
	"github.com/seed83556561/mirrord/transform"
	"github.com/seed83556561/mirrord/verify"
)

// Links in both directions over the same topic names (DESIGN §16): A→B and
// B→A, both preserve delivery, unattributed = "skip", shared_destination.
// Producers of every kind write at both ends before, during and after a
// crash of one link; each cluster ends with its own records and the
// other's idempotent and transactional ones, each exactly once, no aborted
// record, and none of the other's records without a producer ID (they
// carry no origin). Nothing goes back: both links count the batches they
// did not send home.
func TestActiveActive(t *testing.T) { activeActive(t, false, false) }

// TestActiveActiveTransactional is TestActiveActive with both links
// delivering transactionally, and with one link of each mode: a
// transactional link appends under its session's producer ID, which the
// link in the other direction learns from the MirrorTxnProducer records of
// the state topic at its source (DESIGN §16). The crash of one link gives
// its next session a new epoch (and, under transaction protocol 2, new
// producer IDs as epochs run out), which must not be sent back either.
func TestActiveActiveTransactional(t *testing.T) {
	t.Run("both", func(t *testing.T) { activeActive(t, true, true) })
	t.Run("ab", func(t *testing.T) { activeActive(t, true, false) })
}

// activeActive runs the scenario with the link A→B (abTxn) and B→A (baTxn)
// delivering transactionally or in preserve delivery.
func activeActive(t *testing.T, abTxn, baTxn bool) {
	scenario(t, func(t *testing.T, e *env) {
		a := e.cluster(t, "a", kafkatest.SourceClusterID)
		b := e.cluster(t, "b", kafkatest.DestClusterID)
		topic := e.topic("t")
		a.CreateTopic(t, topic, 2, nil)
		b.CreateTopic(t, topic, 2, nil)
		cfg := func(name string, src, dst *cluster) Config {
			c := e.linkConfig(name, src, dst, "t")
			c.Link.SkipUnattributed, c.Link.SharedDestination = true, true
			return c
		}
		abCfg, baCfg := cfg("ab", a, b), cfg("ba", b, a)
		if abTxn {
			abCfg.Link.Delivery = statestore.DeliveryTransactional
		}
		if baTxn {
			baCfg.Link.Delivery = statestore.DeliveryTransactional
		}

		// What each cluster's producers committed and aborted: sent
		// (idempotent and transactional producers, which the other
		// cluster gets) and local (plain producers, which it does not).
		sentA, localA, sentB, localB := newProduced(), newProduced(), newProduced(), newProduced()
		round := func(r string, n int) {
			load(t, a, sentA, idempotent, 3, "a-idem-"+r, n, topic)
			load(t, a, sentA, transactional, 4, "a-txn-"+r, n, topic)
			load(t, a, localA, plain, 1, "a-plain-"+r, n/2, topic)
			load(t, b, sentB, idempotent, 2, "b-idem-"+r, n, topic)
			load(t, b, sentB, transactional, 0, "b-txn-"+r, n, topic)
			load(t, b, localB, plain, 0, "b-plain-"+r, n/2, topic)
		}

		round("before", 40)
		ab := startLink(t, abCfg, a, b, "ab")
		ba := startLink(t, baCfg, b, a, "ba")
		round("during", 40)
		ab.stop(t, true) // a crash: no final checkpoint
		round("down", 30)
		ab = startLink(t, abCfg, a, b, "ab2")
		round("after", 30)

		bothCaughtUp(t, topic, map[*testLink]*cluster{ab: a, ba: b})
		at := func(c *cluster, want ...*produced) {
			t.Helper()
			ledger := newProduced()
			for _, p := range want {
				maps.Copy(ledger.Committed, p.Committed)
				maps.Copy(ledger.Aborted, p.Aborted)
			}
			holdsExactly(t, c, ledger, topic)
		}
		at(a, sentA, localA, sentB)
		at(b, sentB, localB, sentA)
		if abTxn && !baTxn {
			// mirrord verify on the preserve link B→A: B holds A→B's
			// transactional copies, which it learns from the state
			// topic at B and leaves out, and A's own records are not
			// the mirror's (shared destination).
			verifyReverse(t, b, a, e.stateTopic(), topic)
		}

		for _, l := range []*testLink{ab, ba} {
			c := l.Status().Counters
			if c.Get(BatchesReturnedHome) == 0 || c.Get(RecordsReturnedHome) == 0 || c.Get(BatchesUnattributedSkipped) == 0 {
				t.Errorf("link %s: returned home %d batches (%d records), unattributed skipped %d; want some of each",
					l.Name(), c.Get(BatchesReturnedHome), c.Get(RecordsReturnedHome), c.Get(BatchesUnattributedSkipped))
			}
			if c.Get(ForeignBatches) != 0 || c.Get(DestinationGapOffsets) != 0 {
				t.Errorf("link %s: foreign batches %d, gap offsets %d; with shared_destination the destination's own writes are counted apart",
					l.Name(), c.Get(ForeignBatches), c.Get(DestinationGapOffsets))
			}
			t.Logf("link %s: mirrored %d records; returned home %d batches (%d records); unattributed skipped %d batches (%d records); local destination offsets %d, batches %d",
				l.Name(), c.Get(RecordsMirrored), c.Get(BatchesReturnedHome), c.Get(RecordsReturnedHome), c.Get(BatchesUnattributedSkipped),
				c.Get(RecordsUnattributedSkipped), c.Get(DestinationLocalOffsets), c.Get(DestinationLocalBatches))
		}
	})
}

// verifyReverse runs package verify as `mirrord verify` does for an
// active-active preserve link from src to dst (unattributed = "skip",
// shared_destination), with the origins it learns from the state topic at
// src, and fails on any difference. Without the origins, the transactional
// copies at src would be expected at dst.
func verifyReverse(t *testing.T, src, dst *cluster, stateTopic, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	salts, err := verify.StateSalts(ctx, dst.Client, dst.Opts(), stateTopic)
	if err != nil {
		t.Fatal(err)
	}
	cfg := verify.Config{Source: src.Client, Destination: dst.Client, Topics: map[string]string{topic: topic}, SourceClusterID: src.ID, Salt: salts,
		Returns: transform.ReturnsOf(src.ID, dst.ID, false, true), SharedDestination: true}
	if rep, err := verify.Run(ctx, cfg); err != nil || rep.First == nil {
		t.Fatalf("verify without the state topic at the source: %v, %v; want the transactional copies reported missing", rep.First, err)
	}
	o, err := statestore.NewOrigins(statestore.OriginsConfig{Topic: stateTopic, SourceOpts: src.Opts(), SourceClusterID: src.ID, DestinationClusterID: dst.ID, Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	cfg.Returns.Sessions, cfg.Screen = o.Sessions(), o.Learn
	rep, err := verify.Run(ctx, cfg)
	if err != nil || rep.First != nil {
		t.Fatalf("verify: %v, %+v", err, rep.First)
	}
	t.Logf("verify %s → %s: %d records equal, producer IDs learnt from the state topic at %s: %d", src.Name, dst.Name, rep.Records, src.Name, o.Sessions().Len())
}

// bothCaughtUp waits until every link has mirrored its source partitions up
// to their ends, twice in a row: links in both directions append to each
// other's sources, so one link's end moves while the other catches up.
func bothCaughtUp(t *testing.T, topic string, links map[*testLink]*cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	settled := 0
	waitFor(t, "links in both directions caught up", 3*time.Minute, func() bool {
		for l, src := range links {
			ends, err := src.Admin.ListEndOffsets(ctx, topic)
			if err != nil {
				t.Fatal(err)
			}
			st := l.Status()
			for _, p := range st.Partitions {
				end, ok := ends.Lookup(p.SourceTopic, p.Partition)
				if !ok || p.SourceNextOffset < end.Offset {
					settled = 0
					return false
				}
			}
			if len(st.Partitions) == 0 {
				settled = 0
				return false
			}
		}
		settled++
		return settled >= 2
	})
}

// holdsExactly checks that c's topic holds every record the ledger has
// committed exactly once, none it has aborted and none it does not know.
// Unlike exactlyOnce it reads read_committed, as the cluster's consumers
// do: its own transactional producers' aborted records are in its log.
func holdsExactly(t *testing.T, c *cluster, ledger *produced, topic string) {
	t.Helper()
	got := map[string]int{}
	for _, r := range mirrortest.ConsumeCommitted(t, c, topic) {
		got[r.Topic+"/"+string(r.Key)]++
	}
	bad := 0
	report := func(format string, args ...any) {
		t.Helper()
		if bad++; bad <= 10 {
			t.Errorf(format, args...)
		}
	}
	for k, n := range ledger.Committed {
		if got[k] != n {
			report("cluster %s: record %s held %d times, committed %d", c.Name, k, got[k], n)
		}
	}
	for k := range ledger.Aborted {
		if got[k] > 0 {
			report("cluster %s: aborted record %s held", c.Name, k)
		}
	}
	for k, n := range got {
		if _, ok := ledger.Committed[k]; !ok {
			report("cluster %s: record %s held %d times, not expected here", c.Name, k, n)
		}
	}
	if bad > 0 {
		t.Fatalf("cluster %s: %d records wrong", c.Name, bad)
	}
	t.Logf("cluster %s: %d records, each exactly once", c.Name, len(got))
}

// A producer of A salted at B does not come back (DESIGN §16): X's
// cluster ID folds to A's region, and X's producer is mirrored into A
// (X→A); a producer local to A then writes under the PID X's producer had
// (raw idempotent batches), so at B the link A→B salts A's producer (its
// mapped PID is X's). The salted PID carries A's region plus the salt, not
// A's: the reverse link B→A learns it from the MirrorSaltedPid record the
// link A→B committed with the salt in the state topic at B, and skips its
// batches. A ends with what it held, and B's own records once.
func TestActiveActiveSalted(t *testing.T) {
	scenario(t, func(t *testing.T, e *env) {
		a := e.cluster(t, "A", kafkatest.SourceClusterID)
		x := e.cluster(t, "X", clusterIDWithRegion(t, kafkatest.SourceClusterID))
		b := e.cluster(t, "B", kafkatest.DestClusterID)
		xa := e.mirroredBetween(t, x, a, "x-to-a", srcTopic("t", 1))
		topic := xa.topic("t")
		xa.load(idempotent, 0, "x-idem", 40)
		l := xa.start("x-to-a")
		xa.waitMirrored(90 * time.Second)
		l.stop(t, false)
		xPID := producerIDs(t, x, topic)
		if len(xPID) != 1 {
			t.Fatalf("X's topic has producer IDs %v, want one", xPID)
		}
		var local int64
		for pid := range xPID {
			local = pid
		}
		// A's local producer, under the PID X's producer has.
		for i := range 3 {
			produceRawTo(t, a, topic, 0, batchtest.Simple(0, local, 0, int32(5*i), 5))
		}
		before := producerIDs(t, a, topic)
		rA, _ := transform.RegionOf(a.ID)
		if before[local] != 15 || before[transform.MapPID(local, rA)] != 40 {
			t.Fatalf("A holds %v, want 15 records of the local PID %d and 40 of X's mapped one", before, local)
		}

		cfg := func(name string, src, dst *cluster) Config {
			c := e.linkConfig(name, src, dst, "t")
			c.Link.SkipUnattributed, c.Link.SharedDestination = true, true
			return c
		}
		b.CreateTopic(t, topic, 1, nil)
		ab := startLink(t, cfg("ab", a, b), a, b, "ab")
		bothCaughtUp(t, topic, map[*testLink]*cluster{ab: a})
		if got := ab.Status().Counters.Get(CollisionsResolved); got != 1 {
			t.Fatalf("link ab resolved %d collisions, want 1 (A's local producer salted)", got)
		}
		atB := producerIDs(t, b, topic)
		var salted int64
		for pid, n := range atB {
			if r, _, ok := transform.DecodePID(pid); ok && r != rA && n == 15 {
				salted = pid
			}
		}
		if salted == 0 {
			t.Fatalf("B holds %v, want A's local producer under a salted PID", atB)
		}

		bLocal := newProduced()
		load(t, b, bLocal, idempotent, 2, "b-idem", 30, topic)
		ba := startLink(t, cfg("ba", b, a), b, a, "ba")
		bothCaughtUp(t, topic, map[*testLink]*cluster{ba: b, ab: a})
		after := producerIDs(t, a, topic)
		if after[salted] != 0 {
			t.Errorf("A got %d records of the salted PID %d back from B", after[salted], salted)
		}
		for pid, n := range before {
			if after[pid] != n {
				t.Errorf("A's producer %d: %d records, had %d", pid, after[pid], n)
			}
		}
		sum := func(m map[int64]int) (n int) {
			for _, k := range m {
				n += k
			}
			return n
		}
		if got := committedCount(bLocal); len(after)-len(before) != 1 || sum(after)-sum(before) != got {
			t.Errorf("A holds %v after B→A, had %v: want B's %d records under one more PID", after, before, got)
		}
		c := ba.Status().Counters
		if c.Get(RecordsReturnedHome) != 40+15 {
			t.Errorf("link ba returned home %d records, want 55 (X's 40 under A's region, A's 15 salted)", c.Get(RecordsReturnedHome))
		}
		t.Logf("A: %v; B: %v; salted PID %d; link ba mirrored %d records, returned home %d", after, atB, salted, c.Get(RecordsMirrored), c.Get(RecordsReturnedHome))
	})
}
