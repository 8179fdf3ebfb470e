package link

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/fetcher"
	"github.com/seed83556561/mirrord/internal/testkit/batchtest"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/internal/testkit/mirrortest"
	"github.com/seed83556561/mirrord/statestore"
	"github.com/seed83556561/mirrord/transform"
)

// Two sessions of one link at once (a second agent, or a zombie): the newer
// fences the older, which stops writing and stands by; the destination stays
// exact.
func TestTwoSessionsOfOneLink(t *testing.T) {
	scenario(t, func(t *testing.T, e *env) {
		f := e.mirrored(t, "twice", srcTopic("t", 3))

		f.load(idempotent, 3, "a", 300)
		a := f.start("A")
		a.waitState(t, Mirroring, 60*time.Second)

		var wg sync.WaitGroup
		wg.Go(func() { f.load(transactional, 4, "during", 400) })
		b := f.start("B")
		b.waitState(t, Mirroring, 60*time.Second)
		wg.Wait()
		f.load(plain, 1, "after", 200)

		f.waitMirrored(90 * time.Second)
		f.exactlyOnce()

		// A was fenced and stands by while B holds the lease.
		deadline := time.Now().Add(10 * time.Second)
		for a.Status().State == Mirroring && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if st := a.Status(); st.State == Mirroring || !strings.Contains(st.LastError, "fenced") {
			t.Errorf("older session: state %s, last error %q; want it fenced and out of MIRRORING", st.State, st.LastError)
		}
		if b.Status().State != Mirroring {
			t.Errorf("newer session: state %s, want MIRRORING", b.Status().State)
		}
		if got := testutil.ToFloat64(a.met.counters[SessionsFenced]); got < 1 {
			t.Errorf("sessions fenced counted %v, want at least 1", got)
		}
	})
}

// compactedConfig is a compacted topic whose log the broker's cleaner takes
// on quickly: segments roll after 100ms, any dirty ratio is enough, and
// records may be cleaned at once (the active segment never is).
var compactedConfig = map[string]*string{
	"cleanup.policy":            new("compact"),
	"retention.ms":              new("-1"),
	"segment.ms":                new("100"),
	"min.cleanable.dirty.ratio": new("0.01"),
	"min.compaction.lag.ms":     new("0"),
	"delete.retention.ms":       new("0"),
}

// compactedLaterConfig is compactedConfig with a segment that does not roll
// by itself: Kafka's cleaner never touches the active segment, so nothing
// is compacted until cleanSoon lets segments roll. Tests whose premise is
// "mirrored dense, compacted afterwards" use it: with compactedConfig the
// real cleaner may compact a batch before the link reads it, and the link
// then re-encodes that batch (TestTranslateAfterCompaction failed that way
// on Kafka 4.4.0 in CI: a position in such a batch has no exact
// translation once the cleaner removes more of it).
var compactedLaterConfig = func() map[string]*string {
	m := maps.Clone(compactedConfig)
	m["segment.ms"] = new("3600000")
	return m
}()

// cleanSoon lets the cleaner at a topic created with compactedLaterConfig:
// segments roll after 100 ms again, so the next append rolls the active
// one. kfake has no cleaner (tests compact it by hand) and no segments.
func cleanSoon(t *testing.T, c *cluster, topic string) {
	t.Helper()
	if c.Fake == nil {
		alterSettings(t, c, topic, kadm.AlterConfig{Name: "segment.ms", Value: new("100")})
	}
}

// A compacted source topic has offset gaps between and inside batches, and,
// on Kafka, batches emptied by the cleaner (a producer's last batch is kept,
// empty, for its producer state). Batches with gaps take the re-encode path
// (counted); empty ones are skipped; records arrive exact. On Kafka the
// topic is cleaned by the broker's own log cleaner, which keeps a cleaned
// batch's base offset and offset range (so its record count no longer
// matches); on kfake by kfake's Compact.
func TestCompactedSource(t *testing.T) {
	scenario(t, func(t *testing.T, e *env) {
		f := e.mirrored(t, "compacted", srcTopic("kv", 2).with(compactedConfig))
		// The test compacts the source only: config sync would give the
		// destination the source's quick cleaner settings, and the
		// destination's cleaner would compact the mirror too.
		f.cfg.Link.ConfigSync.Enabled = false
		src, dst := f.src, f.dst
		kv := f.topic("kv")
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		// Rounds of one batch per partition, each by its own producer;
		// each round overwrites some keys of the previous ones, so the
		// cleaner cuts records out of batches and empties some.
		produceRound := func(round int) {
			cl := src.NewClient(t, kgo.ProducerBatchCompression(kgo.Lz4Compression()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			var recs []*kgo.Record
			for i := range 20 {
				key := fmt.Sprintf("key-%02d", (i*7+round*3)%31)
				recs = append(recs, &kgo.Record{Topic: kv, Partition: int32(i % 2), Key: []byte(key), Value: fmt.Appendf(nil, "round %d", round)})
			}
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			cl.Close()
		}
		for round := range 12 {
			produceRound(round)
		}
		// A producer whose only batch a later producer overwrites whole:
		// Kafka's cleaner keeps that batch, empty, as the producer's last
		// (its producer state must survive).
		for _, who := range []string{"first", "second"} {
			cl := src.NewClient(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
			var recs []*kgo.Record
			for i := range 5 {
				recs = append(recs, &kgo.Record{Topic: kv, Partition: 0, Key: fmt.Appendf(nil, "whole-%d", i), Value: []byte(who)})
			}
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			cl.Close()
		}
		gappy, empty := compactSource(t, src, kv, 2, func() { time.Sleep(300 * time.Millisecond); produceRound(12) })
		t.Logf("%s: the cleaner left %d batches with gaps and %d without records", e.b, gappy, empty)
		if e.b.Real() && empty == 0 {
			t.Fatal("Kafka's cleaner left no batch without records; the test would not exercise empty batches")
		}

		l := f.start("compacted")
		rep := f.waitMirrored(90 * time.Second)
		if got := testutil.ToFloat64(l.met.counters[BatchesReencoded]); int(got) != gappy {
			t.Errorf("batches re-encoded: %v, want %d (the batches compaction left with gaps)", got, gappy)
		}
		t.Logf("compacted topic: %d records mirrored, %d gappy batches re-encoded", rep.Records, gappy)
		for part := range int32(2) {
			for _, h := range rawHeaders(t, dst, kv, part) {
				if !h.Dense() || h.NumRecords == 0 {
					t.Errorf("destination %s[%d] holds a batch with gaps or without records at offset %d", kv, part, h.BaseOffset)
				}
			}
		}

		// The same source in transactional delivery, into kv.txn: the
		// gappy batches re-encoded, the empty ones skipped, and the
		// committed records the same on both sides, in order.
		cfg := f.cfg
		cfg.Link.Name += "-txn"
		cfg.Link.Rename = "{topic}.txn"
		cfg.Link.StateTopic += "-txn"
		cfg.Link.Delivery = statestore.DeliveryTransactional
		lt := startLink(t, cfg, src, dst, "compacted-txn")
		deadline := time.Now().Add(90 * time.Second)
		for {
			n, diff := sameCommitted(readCommitted(t, src, kv), readCommitted(t, dst, kv+".txn"))
			if diff == "" {
				t.Logf("transactional delivery: %d records the same on both sides", n)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("transactional delivery of the compacted topic: %s", diff)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if got := testutil.ToFloat64(lt.met.counters[BatchesReencoded]); int(got) != gappy {
			t.Errorf("transactional delivery: batches re-encoded %v, want %d", got, gappy)
		}
		for part := range int32(2) {
			for _, h := range rawHeaders(t, dst, kv+".txn", part) {
				if !h.Dense() || h.NumRecords == 0 {
					t.Errorf("destination %s.txn[%d] holds a batch with gaps or without records at offset %d", kv, part, h.BaseOffset)
				}
			}
		}
	})
}

// compactSource compacts a topic and counts the batches left with gaps and
// without records: kfake's Compact at once; on Kafka, roll rolls the
// active segment (the cleaner never cleans it) and the broker's cleaner is
// waited for until some batch has a gap.
func compactSource(t *testing.T, c *cluster, topic string, partitions int32, roll func()) (gappy, empty int) {
	t.Helper()
	count := func() (int, int) {
		g, e := 0, 0
		for part := range partitions {
			for _, h := range rawHeaders(t, c, topic, part) {
				switch {
				case h.NumRecords == 0:
					e++
				case !h.Dense():
					g++
				}
			}
		}
		return g, e
	}
	if c.Fake != nil {
		c.Fake.Compact()
		gappy, empty = count()
	} else {
		roll()
		// The cleaner may take several passes: wait until it left gaps
		// and its result stayed the same for three looks a second apart.
		deadline := time.Now().Add(90 * time.Second)
		stable := 0
		for stable < 3 {
			g, e := count()
			if g > 0 && g == gappy && e == empty {
				stable++
			} else {
				stable = 0
			}
			gappy, empty = g, e
			if time.Now().After(deadline) {
				t.Fatalf("Kafka's log cleaner left no stable result with gaps in %s within 90s (%d with gaps, %d empty)", topic, gappy, empty)
			}
			time.Sleep(time.Second)
		}
	}
	if gappy == 0 {
		t.Fatal("compaction left no batch with offset gaps; the test would not exercise the re-encode path")
	}
	return gappy, empty
}

// clusterIDWithRegion returns a cluster ID other than id that folds to the
// same region: both halves XORed with the same 64-bit value.
func clusterIDWithRegion(t *testing.T, id string) string {
	t.Helper()
	u, ok := transform.ParseClusterID(id)
	if !ok {
		t.Fatalf("%s is not a UUID", id)
	}
	x := uint64(0x0123_4567_89ab_cdef)
	binary.BigEndian.PutUint64(u[:8], binary.BigEndian.Uint64(u[:8])^x)
	binary.BigEndian.PutUint64(u[8:], binary.BigEndian.Uint64(u[8:])^x)
	other := base64.RawURLEncoding.EncodeToString(u[:])
	if r1, _ := transform.RegionOf(id); func() bool { r2, _ := transform.RegionOf(other); return r1 != r2 }() {
		t.Fatal("constructed cluster ID folds to another region")
	}
	return other
}

// A chain A→B→C where B's cluster ID folds to A's region and a producer local
// to B writes under the PID that A's producer has (an idempotent producer of
// B writing raw batches with that PID): at C the forwarded PID keeps its
// identity, B's local producer is salted, and the B→C state topic holds the
// salt (spec 000's collision resolution).
func TestChainCollision(t *testing.T) {
	scenario(t, func(t *testing.T, e *env) {
		a := e.cluster(t, "A", kafkatest.SourceClusterID)
		b := e.cluster(t, "B", clusterIDWithRegion(t, kafkatest.SourceClusterID))
		c := e.cluster(t, "C", kafkatest.DestClusterID)
		first := e.mirroredBetween(t, a, b, "a-to-b", srcTopic("t", 1))
		topic := first.topic("t")
		p := first.p // the chain's one ledger: A's producer's records, and B's local producer's below

		first.load(transactional, 0, "shared-txid", 60)
		ab := first.start("a-to-b")
		first.waitMirrored(90 * time.Second)
		ab.stop(t, false)

		aPID := producerIDs(t, a, topic)
		if len(aPID) != 1 {
			t.Fatalf("A's topic has producer IDs %v, want one", aPID)
		}
		var local int64
		for pid := range aPID {
			local = pid
		}
		// B's local producer, with A's producer's PID: idempotent raw
		// batches at sequence 0, 5, 10 (a broker accepts an unknown
		// non-transactional PID whose first batch starts at 0).
		for i := range 3 {
			batch := batchtest.Simple(0, local, 0, int32(5*i), 5)
			produceRawTo(t, b, topic, 0, batch)
			for j := range 5 {
				p.Add(true, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", j)})
			}
		}
		rA, _ := transform.RegionOf(a.ID)
		forwarded := transform.MapPID(local, rA)
		bPID := producerIDs(t, b, topic)
		if _, ok := bPID[forwarded]; !ok || bPID[local] != 15 {
			t.Fatalf("B holds PIDs %v, want A's mapped PID %d and 15 records of the local PID %d", bPID, forwarded, local)
		}

		second := e.mirroredBetween(t, b, c, "b-to-c", lateTopic("t")) // B's t: the mirror of A's, and B's local records
		second.p = p
		bc := second.start("b-to-c")
		second.waitMirrored(90*time.Second, "t")
		second.exactlyOnce("t")

		cPID := producerIDs(t, c, topic)
		if len(cPID) != 2 {
			t.Fatalf("C holds PIDs %v, want two distinct ones", cPID)
		}
		if _, ok := cPID[forwarded]; !ok {
			t.Errorf("C lost the forwarded PID %d: %v", forwarded, cPID)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		view, err := replayState(ctx, c, e.stateTopic())
		if err != nil {
			t.Fatal(err)
		}
		var salt *statestore.PIDCollisionValue
		for k, v := range view.Salts {
			if k.SourceClusterID == b.ID && k.OriginalPID == local {
				salt = &v
			}
		}
		if salt == nil {
			t.Fatalf("the B→C state topic holds no salt for B's PID %d: %v", local, view.Salts)
		}
		if salted := transform.MapPIDSalted(local, rA, salt.Salt); cPID[salted] != 15 {
			t.Errorf("B's local producer is not under its salted PID %d at C: %v", salted, cPID)
		}
		if got := testutil.ToFloat64(bc.met.counters[CollisionsResolved]); got != 1 {
			t.Errorf("collisions resolved: %v, want 1", got)
		}
	})
}

// producerIDs counts the records of each producer ID in a topic.
func producerIDs(t *testing.T, c *cluster, topic string) map[int64]int {
	t.Helper()
	out := map[int64]int{}
	for _, r := range consumeAll(t, c, true, topic) {
		out[r.ProducerID]++
	}
	return out
}

// While MIRRORING, a new matching topic and a grown partition count are
// picked up, each new partition with its own barrier before its first
// append, without a new PREPARING.
func TestDiscoveryWhileMirroring(t *testing.T) {
	scenario(t, func(t *testing.T, e *env) {
		f := e.mirrored(t, "disc", srcTopic("grow", 1), lateTopic("late"))
		src, dst := f.src, f.dst
		grow, late := f.topic("grow"), f.topic("late")
		f.load(idempotent, 0, "one", 50)
		l := f.start("disc")
		f.waitMirrored(90 * time.Second)

		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := src.Admin.CreatePartitions(ctx, 2, grow); err != nil {
			t.Fatal(err)
		}
		src.WaitTopic(t, grow, 3)
		src.CreateTopic(t, late, 2, nil)
		f.load(idempotent, 3, "two", 90, "grow", "late")

		f.waitMirrored(90*time.Second, "grow", "late")
		f.exactlyOnce("grow", "late")
		if n := len(l.Status().Partitions); n != 5 {
			t.Errorf("link mirrors %d partitions, want 5", n)
		}
		if got := l.prepared.Load(); got != 1 {
			t.Errorf("link prepared %d times, want once: growth needs no new PREPARING", got)
		}
		tds, err := dst.Admin.ListTopics(ctx, grow)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(tds[grow].Partitions); n != 3 {
			t.Errorf("destination grow has %d partitions, want 3", n)
		}
		barriersPerPartition(t, dst, f.stateTopic(), l)
	})
}

// Pause stops mirroring after a final checkpoint; resume prepares again
// (a new barrier) and catches up.
func TestPauseResume(t *testing.T) {
	scenario(t, func(t *testing.T, e *env) {
		f := e.mirrored(t, "pausable", srcTopic("t", 2))
		f.load(idempotent, 1, "one", 100)
		l := f.start("pausable")
		f.waitMirrored(90 * time.Second)

		l.Pause()
		l.waitState(t, Paused, 10*time.Second)
		f.load(idempotent, 2, "paused", 100)
		time.Sleep(500 * time.Millisecond)
		if rep, err := mirrorOf(t, f.src, f.dst, f.stateTopic(), f.same("t")); err != nil || rep.First != nil || rep.Behind != 100 {
			t.Fatalf("while paused: behind %d, first difference %v, error %v; want exactly the 100 new records behind", rep.Behind, rep.First, err)
		}
		l.Resume()
		l.waitState(t, Mirroring, 30*time.Second)
		f.waitMirrored(90 * time.Second)
		f.exactlyOnce()
		if got := l.prepared.Load(); got < 2 {
			t.Errorf("link reached MIRRORING %d times, want at least 2 (start and resume)", got)
		}
		barriersPerPartition(t, f.dst, f.stateTopic(), l)
	})
}

// A source offset that was deleted fails the link with an error that names
// the partition and says what to do, under the default policy; with
// on_offset_out_of_range = earliest the link skips ahead and counts it.
// Here DeleteRecords deletes them; TestOffsetOutOfRangeAfterRetention has
// Kafka's retention delete whole segments.
func TestOffsetOutOfRange(t *testing.T) {
	scenario(t, func(t *testing.T, e *env) {
		for _, policy := range []fetcher.OutOfRange{fetcher.OutOfRangeFail, fetcher.OutOfRangeEarliest} {
			t.Run(string(policy), func(t *testing.T) {
				e := &env{b: e.b, n: mirrortest.NamesFor(t, e.b)}
				f := e.mirrored(t, "oor", srcTopic("t", 1))
				f.load(idempotent, 0, "one", 50)
				f.cfg.Link.OnOffsetOutOfRange = policy
				l := f.start("oor")
				f.waitMirrored(90 * time.Second)
				l.stop(t, false)

				f.load(idempotent, 0, "two", 50)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				offs := kadm.Offsets{}
				offs.Add(kadm.Offset{Topic: f.topic("t"), Partition: 0, At: 80})
				if _, err := f.src.Admin.DeleteRecords(ctx, offs); err != nil {
					t.Fatal(err)
				}
				checkOutOfRange(f, policy, 50, 20, mirrortest.KeyPrefix(idempotent, 0, f.topic("two")), 30)
			})
		}
	})
}

// Kafka's retention deletes whole segments of the source while the link is
// down: the link finds its position below the log start offset, and fails
// or skips as on_offset_out_of_range says.
func TestOffsetOutOfRangeAfterRetention(t *testing.T) {
	mirrortest.RealOnly(t, func(t *testing.T, b mirrortest.Backend) {
		for _, policy := range []fetcher.OutOfRange{fetcher.OutOfRangeFail, fetcher.OutOfRangeEarliest} {
			t.Run(string(policy), func(t *testing.T) {
				e := &env{b: b, n: mirrortest.NamesFor(t, b)}
				// Segments roll at the first append 100ms after the last
				// roll; retention is turned on once the log is in place.
				f := e.mirrored(t, "oor", srcTopic("t", 1).with(map[string]*string{"segment.ms": new("100")}))
				// Only the source loses records: config sync would give
				// the mirror the source's 3 s retention too.
				f.cfg.Link.ConfigSync.Enabled = false
				src, topic := f.src, f.topic("t")
				f.load(idempotent, 0, "one", 50)
				f.cfg.Link.OnOffsetOutOfRange = policy
				l := f.start("oor")
				f.waitMirrored(90 * time.Second)
				l.stop(t, false)

				// Three segments while the link is down: its 50 records
				// (offsets 0-49), 30 more (50-79), then 20 (80-99) in the
				// active segment, stamped half an hour ahead. Retention
				// of 3s then deletes the first two whenever the broker
				// checks; time retention deletes an active segment too
				// once it is old enough (rolling the log first), and the
				// future timestamps keep the last one young.
				time.Sleep(300 * time.Millisecond)
				f.load(idempotent, 0, "two", 30)
				time.Sleep(300 * time.Millisecond)
				three := f.topic("three")
				ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
				defer cancel()
				prod := src.NewClient(t)
				ahead := time.Now().Add(30 * time.Minute)
				var recs []*kgo.Record
				for i := range 20 {
					recs = append(recs, &kgo.Record{Topic: topic, Timestamp: ahead,
						Key: fmt.Appendf(nil, "%s-%06d", mirrortest.KeyPrefix(idempotent, 0, three), i), Value: []byte("kept")})
				}
				if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
					t.Fatal(err)
				}
				f.p.Add(true, recs...)
				time.Sleep(3 * time.Second)
				if _, err := src.Admin.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: new("3000")}}, topic); err != nil {
					t.Fatal(err)
				}
				for {
					starts, err := src.Admin.ListStartOffsets(ctx, topic)
					if err != nil {
						t.Fatal(err)
					}
					if o, _ := starts.Lookup(topic, 0); o.Offset >= 80 {
						if o.Offset != 80 {
							t.Fatalf("retention left the log from offset %d, want 80 (the active segment)", o.Offset)
						}
						break
					}
					if ctx.Err() != nil {
						t.Fatal("retention did not delete the old segments")
					}
					time.Sleep(200 * time.Millisecond)
				}
				checkOutOfRange(f, policy, 50, 20, mirrortest.KeyPrefix(idempotent, 0, three), 0)
			})
		}
	})
}

// checkOutOfRange restarts the fixture's link over a source whose log of
// topic t now starts past its position (the link mirrored offsets below
// mirrored; the source kept the last kept of 100), and checks the policy:
// "fail" names the partition and the key to set; "earliest" skips to the
// log start, mirrors the kept records (keys prefix-firstKey, ...) and
// counts the skipped ones.
func checkOutOfRange(f *fixture, policy fetcher.OutOfRange, mirrored, kept int, prefix string, firstKey int) {
	t, topic := f.t, f.topic("t")
	t.Helper()
	l := f.start("oor")
	if policy == fetcher.OutOfRangeFail {
		l.waitState(t, Failed, 60*time.Second)
		msg := l.Status().LastError
		for _, want := range []string{topic + "[0]", fmt.Sprint(mirrored), "on_offset_out_of_range"} {
			if !strings.Contains(msg, want) {
				t.Errorf("error %q does not mention %q", msg, want)
			}
		}
		return
	}
	waitCaughtUp(t, l, 100, 60*time.Second)
	got := consumeAll(t, f.dst, false, topic)
	if len(got) != mirrored+kept {
		t.Fatalf("destination holds %d records, want %d mirrored + the %d the source kept", len(got), mirrored, kept)
	}
	for i, r := range got[mirrored:] {
		if want := fmt.Sprintf("%s-%06d", prefix, firstKey+i); string(r.Key) != want {
			t.Fatalf("destination record %d: key %s, want %s", mirrored+i, r.Key, want)
		}
	}
	if got := l.Status().Counters.Get(SourceRecordsSkipped); got != int64(100-mirrored-kept) {
		t.Errorf("source records skipped %d, want %d", got, 100-mirrored-kept)
	}
}

// A source topic that stamps LogAppendTime (real Kafka only: kfake stamps
// by the batch's own type bit, ignores the topic config, and leaves a
// stale CRC; docs/kafka-differences.md). Its mirror is a CreateTime topic,
// and the destination broker rewrites each appended batch's type bit, max
// timestamp and CRC (LogValidator), so the mirror's consumers see every
// record's create time as its producer set it. Reconciliation after a
// crash must still recognise those rewritten batches as the source's
// (twin), or it would append them twice.
func TestLogAppendTimeSource(t *testing.T) {
	mirrortest.RealOnly(t, func(t *testing.T, b mirrortest.Backend) {
		e := &env{b: b, n: mirrortest.NamesFor(t, b)}
		f := e.mirrored(t, "lat", srcTopic("stamped", 3).with(map[string]*string{"message.timestamp.type": new("LogAppendTime")}))
		src, dst, topic := f.src, f.dst, f.topic("stamped")

		// Records whose create times are an hour old and distinct, so
		// that no append time can pass for one.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		created := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
		createTime := map[string]time.Time{}
		produceOld := func(prefix string, n int, codec int) {
			prod := src.NewClient(t, kgo.ProducerBatchCompression(codecs[codec]), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
			var recs []*kgo.Record
			for i := range n {
				k := fmt.Sprintf("%s-%06d", prefix, i)
				ts := created.Add(time.Duration(len(createTime)) * time.Millisecond)
				createTime[k] = ts
				recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(k), Value: fmt.Appendf(nil, "created at %d", ts.UnixMilli()), Timestamp: ts})
			}
			if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			f.p.Add(true, recs...)
		}
		produceOld("before", 300, 3)

		l := f.start("lat")
		var wg sync.WaitGroup
		wg.Go(func() { f.load(transactional, 4, "txn", 300) })
		l.waitState(t, Mirroring, 60*time.Second)
		time.Sleep(300 * time.Millisecond)
		l.stop(t, true) // mid-load: the next session reconciles what this one appended
		wg.Wait()
		produceOld("after", 200, 1)
		f.load(plain, 2, "plain", 100)

		f.start("lat")
		rep := f.waitMirrored(90 * time.Second)
		n := f.exactlyOnce()

		// Verify compared create times; check them here too, from what
		// a consumer of each side sees.
		for _, r := range consumeAll(t, src, true, topic) {
			if r.Attrs.TimestampType() != 1 {
				t.Fatalf("source record %s is not stamped with LogAppendTime", r.Key)
			}
			if ts, ok := createTime[string(r.Key)]; ok && r.Timestamp.Equal(ts) {
				t.Fatalf("source record %s: the append time is the create time", r.Key)
			}
		}
		var checked int
		for _, r := range consumeAll(t, dst, false, topic) {
			if r.Attrs.TimestampType() != 0 {
				t.Fatalf("destination record %s at %s[%d] offset %d keeps the LogAppendTime type", r.Key, r.Topic, r.Partition, r.Offset)
			}
			if ts, ok := createTime[string(r.Key)]; ok {
				if !r.Timestamp.Equal(ts) {
					t.Fatalf("destination record %s: timestamp %d, want its create time %d", r.Key, r.Timestamp.UnixMilli(), ts.UnixMilli())
				}
				checked++
			}
		}
		if checked != len(createTime) {
			t.Fatalf("checked %d create times at the destination, produced %d", checked, len(createTime))
		}
		t.Logf("%s: %d records from a LogAppendTime topic mirrored exactly once across a crash (verify: %d records); %d create times checked", b, n, rep.Records, checked)
	})
}
