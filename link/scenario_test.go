package link

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/statestore"
	"github.com/seed83556561/mirrord/transform"
)

// Two sessions of one link at once (a second agent, or a zombie): the newer
// fences the older, which stops writing and stands by; the destination stays
// exact.
func TestTwoSessionsOfOneLink(t *testing.T) {
	src := newCluster(t, "src", kafkatest.SourceClusterID)
	dst := newCluster(t, "dst", kafkatest.DestClusterID)
	src.createTopic(t, "t", 3, nil)
	p := newProduced()
	cfg := linkConfig("twice", src, dst, "t")

	load(t, src, p, idempotent, 3, "a", 300, "t")
	a := startLink(t, cfg, src, dst, "A")
	a.waitState(t, Mirroring, 30*time.Second)

	var wg sync.WaitGroup
	wg.Go(func() { load(t, src, p, transactional, 4, "during", 400, "t") })
	b := startLink(t, cfg, src, dst, "B")
	b.waitState(t, Mirroring, 30*time.Second)
	wg.Wait()
	load(t, src, p, plain, 1, "after", 200, "t")

	waitMirrored(t, src, dst, "__mirror_state", map[string]string{"t": "t"}, 60*time.Second)
	exactlyOnce(t, dst, p, "t")

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
	if got := testutil.ToFloat64(a.met.fenced); got < 1 {
		t.Errorf("sessions fenced counted %v, want at least 1", got)
	}
}

// A compacted source topic has offset gaps between and inside batches;
// batches with gaps take the re-encode path and records arrive exact.
func TestCompactedSource(t *testing.T) {
	src := newCluster(t, "src", kafkatest.SourceClusterID)
	dst := newCluster(t, "dst", kafkatest.DestClusterID)
	src.createTopic(t, "kv", 2, map[string]*string{
		"cleanup.policy": kadm.StringPtr("compact"),
		"retention.ms":   kadm.StringPtr("-1"),
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(src.c.ListenAddrs()...), kgo.ProducerBatchCompression(kgo.Lz4Compression()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// Rounds of one batch per partition; each round overwrites some keys
	// of the previous ones, so compaction cuts records out of batches.
	for round := range 12 {
		var recs []*kgo.Record
		for i := range 20 {
			key := fmt.Sprintf("key-%02d", (i*7+round*3)%31)
			recs = append(recs, &kgo.Record{Topic: "kv", Partition: int32(i % 2), Key: []byte(key), Value: fmt.Appendf(nil, "round %d", round)})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	src.c.Compact()

	gappy := 0
	for part := int32(0); part < 2; part++ {
		for _, h := range rawHeaders(t, src, "kv", part) {
			if !h.Dense() {
				gappy++
			}
		}
	}
	if gappy == 0 {
		t.Fatal("compaction left no batch with offset gaps; the test would not exercise the re-encode path")
	}

	l := startLink(t, linkConfig("compacted", src, dst, "kv"), src, dst, "compacted")
	rep := waitMirrored(t, src, dst, "__mirror_state", map[string]string{"kv": "kv"}, 60*time.Second)
	if got := testutil.ToFloat64(l.met.reencoded); int(got) != gappy {
		t.Errorf("batches re-encoded: %v, want %d (the batches compaction left with gaps)", got, gappy)
	}
	t.Logf("compacted topic: %d records mirrored, %d gappy batches re-encoded", rep.Records, gappy)
	for part := int32(0); part < 2; part++ {
		for _, h := range rawHeaders(t, dst, "kv", part) {
			if !h.Dense() {
				t.Errorf("destination kv[%d] holds a batch with gaps at offset %d", part, h.BaseOffset)
			}
		}
	}
}

// rawHeaders fetches every batch header of a partition.
func rawHeaders(t testing.TB, c *cluster, topic string, partition int32) []transform.Header {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := c.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup(topic, partition)
	starts, err := c.adm.ListStartOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	start, _ := starts.Lookup(topic, partition)
	md, err := c.adm.Metadata(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	td := md.Topics[topic]
	p := topicPartition(topic, td.ID, partition)
	leaders := newLeaders(c)
	tr := &tailReader{cl: c.cl, leaders: leaders, p: p, pos: start.Offset, end: end.Offset}
	var out []transform.Header
	for {
		batches, err := tr.next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(batches) == 0 {
			return out
		}
		for _, b := range batches {
			h, err := transform.ParseHeader(b)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, h)
		}
	}
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
// to B has the PID that A's producer has (kfake derives a transactional
// producer's PID from its transactional ID): at C the forwarded PID keeps its
// identity, B's local producer is salted, and the B→C state topic holds the
// salt.
func TestChainCollision(t *testing.T) {
	a := newCluster(t, "A", kafkatest.SourceClusterID)
	b := newCluster(t, "B", clusterIDWithRegion(t, kafkatest.SourceClusterID))
	c := newCluster(t, "C", kafkatest.DestClusterID)
	a.createTopic(t, "t", 1, nil)
	p := newProduced()

	load(t, a, p, transactional, 0, "shared-txid", 60, "t")
	ab := startLink(t, linkConfig("a-to-b", a, b, "t"), a, b, "a-to-b")
	waitMirrored(t, a, b, "__mirror_state", map[string]string{"t": "t"}, 60*time.Second)
	ab.stop(t, false)

	load(t, b, p, transactional, 0, "shared-txid", 60, "t") // B's local producer, same PID as A's
	aPID, bPID := producerIDs(t, a, "t"), producerIDs(t, b, "t")
	if len(aPID) != 1 {
		t.Fatalf("A's topic has producer IDs %v, want one", aPID)
	}
	rA, _ := transform.RegionOf(a.id)
	var local int64 = -1
	for pid := range bPID {
		if pid >= 0 {
			local = pid
		}
	}
	if _, ok := aPID[local]; !ok {
		t.Fatalf("B's local producer has PID %d, A's has %v: the test needs them equal", local, aPID)
	}
	forwarded := transform.MapPID(local, rA)
	if _, ok := bPID[forwarded]; !ok {
		t.Fatalf("B holds PIDs %v, want A's mapped PID %d among them", bPID, forwarded)
	}

	bc := startLink(t, linkConfig("b-to-c", b, c, "t"), b, c, "b-to-c")
	waitMirrored(t, b, c, "__mirror_state", map[string]string{"t": "t"}, 60*time.Second)
	exactlyOnce(t, c, p, "t")

	cPID := producerIDs(t, c, "t")
	if len(cPID) != 2 {
		t.Fatalf("C holds PIDs %v, want two distinct ones", cPID)
	}
	if _, ok := cPID[forwarded]; !ok {
		t.Errorf("C lost the forwarded PID %d: %v", forwarded, cPID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	view, err := replayState(ctx, c, "__mirror_state")
	if err != nil {
		t.Fatal(err)
	}
	var salt *statestore.PIDCollisionValue
	for k, v := range view.Salts {
		if k.SourceClusterID == b.id && k.OriginalPID == local {
			salt = &v
		}
	}
	if salt == nil {
		t.Fatalf("the B→C state topic holds no salt for B's PID %d: %v", local, view.Salts)
	}
	if salted := transform.MapPIDSalted(local, rA, salt.Salt); cPID[salted] == 0 {
		t.Errorf("B's local producer is not under its salted PID %d at C: %v", salted, cPID)
	}
	if got := testutil.ToFloat64(bc.met.collisions); got != 1 {
		t.Errorf("collisions resolved: %v, want 1", got)
	}
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
// append.
func TestDiscoveryWhileMirroring(t *testing.T) {
	src := newCluster(t, "src", kafkatest.SourceClusterID)
	dst := newCluster(t, "dst", kafkatest.DestClusterID)
	src.createTopic(t, "grow", 1, nil)
	p := newProduced()
	load(t, src, p, idempotent, 0, "one", 50, "grow")
	l := startLink(t, linkConfig("disc", src, dst, "grow|late"), src, dst, "disc")
	waitMirrored(t, src, dst, "__mirror_state", map[string]string{"grow": "grow"}, 60*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := src.adm.CreatePartitions(ctx, 2, "grow"); err != nil {
		t.Fatal(err)
	}
	src.createTopic(t, "late", 2, nil)
	load(t, src, p, idempotent, 3, "two", 90, "grow", "late")

	topics := map[string]string{"grow": "grow", "late": "late"}
	waitMirrored(t, src, dst, "__mirror_state", topics, 60*time.Second)
	exactlyOnce(t, dst, p, "grow", "late")
	if n := len(l.Status().Partitions); n != 5 {
		t.Errorf("link mirrors %d partitions, want 5", n)
	}
	tds, err := dst.adm.ListTopics(ctx, "grow")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(tds["grow"].Partitions); n != 3 {
		t.Errorf("destination grow has %d partitions, want 3", n)
	}
	barriersPerPartition(t, dst, "__mirror_state", l)
}

// Pause stops mirroring after a final checkpoint; resume prepares again
// (a new barrier) and catches up.
func TestPauseResume(t *testing.T) {
	src := newCluster(t, "src", kafkatest.SourceClusterID)
	dst := newCluster(t, "dst", kafkatest.DestClusterID)
	src.createTopic(t, "t", 2, nil)
	p := newProduced()
	load(t, src, p, idempotent, 1, "one", 100, "t")
	l := startLink(t, linkConfig("pausable", src, dst, "t"), src, dst, "pausable")
	waitMirrored(t, src, dst, "__mirror_state", map[string]string{"t": "t"}, 60*time.Second)

	l.Pause()
	l.waitState(t, Paused, 10*time.Second)
	load(t, src, p, idempotent, 2, "paused", 100, "t")
	time.Sleep(500 * time.Millisecond)
	if rep, err := mirrorOf(t, src, dst, "__mirror_state", map[string]string{"t": "t"}); err != nil || rep.First != nil || rep.Behind != 100 {
		t.Fatalf("while paused: behind %d, first difference %v, error %v; want exactly the 100 new records behind", rep.Behind, rep.First, err)
	}
	l.Resume()
	l.waitState(t, Mirroring, 30*time.Second)
	waitMirrored(t, src, dst, "__mirror_state", map[string]string{"t": "t"}, 60*time.Second)
	exactlyOnce(t, dst, p, "t")
	if got := l.prepared.Load(); got < 2 {
		t.Errorf("link reached MIRRORING %d times, want at least 2 (start and resume)", got)
	}
	barriersPerPartition(t, dst, "__mirror_state", l)
}

// A source offset that retention deleted fails the link with an error that
// names the partition and says what to do, under the default policy; with
// on_offset_out_of_range = earliest the link skips ahead and counts it.
func TestOffsetOutOfRange(t *testing.T) {
	for _, policy := range []config.OutOfRange{config.OutOfRangeFail, config.OutOfRangeEarliest} {
		t.Run(string(policy), func(t *testing.T) {
			src := newCluster(t, "src", kafkatest.SourceClusterID)
			dst := newCluster(t, "dst", kafkatest.DestClusterID)
			src.createTopic(t, "t", 1, nil)
			p := newProduced()
			load(t, src, p, idempotent, 0, "one", 50, "t")
			cfg := linkConfig("oor", src, dst, "t")
			cfg.Link.OnOffsetOutOfRange = policy
			l := startLink(t, cfg, src, dst, "oor")
			waitMirrored(t, src, dst, "__mirror_state", map[string]string{"t": "t"}, 60*time.Second)
			l.stop(t, false)

			load(t, src, p, idempotent, 0, "two", 50, "t")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			offs := kadm.Offsets{}
			offs.Add(kadm.Offset{Topic: "t", Partition: 0, At: 80})
			if _, err := src.adm.DeleteRecords(ctx, offs); err != nil {
				t.Fatal(err)
			}
			l = startLink(t, cfg, src, dst, "oor")
			if policy == "fail" {
				l.waitState(t, Failed, 30*time.Second)
				msg := l.Status().LastError
				for _, want := range []string{"t[0]", "50", "on_offset_out_of_range"} {
					if !strings.Contains(msg, want) {
						t.Errorf("error %q does not mention %q", msg, want)
					}
				}
				return
			}
			deadline := time.Now().Add(30 * time.Second)
			for time.Now().Before(deadline) {
				if st := l.Status(); len(st.Partitions) == 1 && st.Partitions[0].SourceNextOffset == 100 {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			got := consumeAll(t, dst, false, "t")
			if len(got) != 70 {
				t.Fatalf("destination holds %d records, want 50 + the 20 that retention left", len(got))
			}
			for i, r := range got[50:] {
				if want := fmt.Sprintf("idempotent-none-two-%06d", 30+i); string(r.Key) != want {
					t.Fatalf("record %d: key %s, want %s", 50+i, r.Key, want)
				}
			}
		})
	}
}
