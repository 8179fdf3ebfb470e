package statestore

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/transform"
)

// TestOriginsLearn: Origins reads the state topic at the link's source only
// for a transactional batch under a producer ID it has not looked up, finds
// the IDs of transactional links from the link's destination into its
// source (and no others), and remembers an ID that is not one.
func TestOriginsLearn(t *testing.T) {
	ctx := testCtx(t)
	// The link mirrors src → dst; the state topic it reads is at src,
	// where a link dst → src (the reverse link) recorded its sessions.
	src, _ := kafkatest.Pair(t)
	const reverseSrc, reverseDst = kafkatest.DestClusterID, kafkatest.SourceClusterID
	o, err := NewOrigins(OriginsConfig{Topic: "__state", SourceOpts: []kgo.Opt{kgo.SeedBrokers(src.ListenAddrs()...)},
		SourceClusterID: reverseDst, DestinationClusterID: reverseSrc, Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Close)
	txn := func(pid int64) transform.Header {
		return transform.Header{ProducerID: pid, Attributes: transform.AttrTransactional}
	}
	learn := func(hs ...transform.Header) {
		t.Helper()
		if err := o.Learn(ctx, hs); err != nil {
			t.Fatalf("Learn: %v", err)
		}
	}

	// No state topic at the source: nothing is a link's, and looked up once.
	learn(txn(7))
	if o.Sessions().Has(7) || o.Reads() != 1 {
		t.Fatalf("without a state topic: has 7 %v, reads %d; want false, 1", o.Sessions().Has(7), o.Reads())
	}
	learn(txn(7))
	if o.Reads() != 1 {
		t.Fatalf("an ID looked up before was read again: %d reads", o.Reads())
	}

	s := newStore(t, src, Config{Topic: "__state"}, nil)
	if err := s.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	sess := begin(t, ctx, s, "ba")
	rec := func(link string, pid int64, from, to string) Record {
		return Record{Key: TxnProducerKey{LinkName: link, ProducerID: pid}, Value: TxnProducerValue{SourceClusterID: from, DestinationClusterID: to, TimestampMs: 1}}
	}
	// Salted mappings of producers: one of the link's destination (the
	// reverse link's source), one of a third cluster.
	home, _ := transform.RegionOf(reverseSrc)
	salted, third := transform.MapPIDSalted(9, home, 77), transform.MapPIDSalted(9, home, 78)
	saltRec := func(origin string, mapped int64) Record {
		return Record{Key: SaltedPIDKey{SourceClusterID: origin, MappedPID: mapped}, Value: SaltedPIDValue{OriginalPID: 9, TimestampMs: 1}}
	}
	if err := sess.Commit(ctx, Mirroring, rec("ba", 40, reverseSrc, reverseDst), rec("ba", 41, reverseSrc, reverseDst),
		rec("other", 50, kafkatest.ThirdClusterID, reverseDst), rec("ab", 60, reverseDst, reverseSrc),
		saltRec(reverseSrc, salted), saltRec(kafkatest.ThirdClusterID, third)); err != nil {
		t.Fatal(err)
	}

	// Not candidates: no read. A batch without the transactional bit,
	// a mapped ID in the destination's region (the region says it), a
	// batch without a producer ID.
	learn(transform.Header{ProducerID: 40}, txn(transform.MapPID(9, home)), txn(-1))
	if o.Reads() != 1 || o.Sessions().Has(40) {
		t.Fatalf("non-candidates: reads %d, has 40 %v; want 1, false", o.Reads(), o.Sessions().Has(40))
	}
	// An ID remembered as not a link's stays so (an ID is allocated
	// once); a new one reads, and the read learns every reverse link ID.
	learn(txn(7), txn(40))
	if o.Reads() != 2 || !o.Sessions().Has(40) || !o.Sessions().Has(41) {
		t.Fatalf("after a read: reads %d, has 40 %v, 41 %v; want 2, true, true", o.Reads(), o.Sessions().Has(40), o.Sessions().Has(41))
	}
	learn(txn(41), txn(40))
	if o.Reads() != 2 {
		t.Fatalf("known IDs read again: %d reads", o.Reads())
	}
	// Records of links between other clusters, or in the link's own
	// direction, are not the reverse link's.
	learn(txn(50), txn(60))
	if o.Sessions().Has(50) || o.Sessions().Has(60) || !o.Sessions().Has(salted) || o.Sessions().Has(third) || o.Sessions().Len() != 3 {
		t.Fatalf("has 50 %v, 60 %v, salted %v, third's %v, %d IDs; want only 40, 41 and the salted one", o.Sessions().Has(50), o.Sessions().Has(60),
			o.Sessions().Has(salted), o.Sessions().Has(third), o.Sessions().Len())
	}
	// A salted mapping is a candidate without the transactional bit (a
	// preserve mirror forwards a committed transaction's batches without
	// it); known already, it costs no read.
	reads := o.Reads()
	learn(transform.Header{ProducerID: salted}, transform.Header{ProducerID: third})
	if o.Reads() != reads+1 {
		t.Fatalf("a mapped ID of another region not looked up before: reads %d, want %d", o.Reads(), reads+1)
	}

	// What Returns says with the set.
	r := transform.ReturnsOf(reverseDst, reverseSrc, false, true)
	r.Sessions = o.Sessions()
	for pid, want := range map[int64]transform.Return{40: transform.Home, 41: transform.Home, 50: transform.Away, 7: transform.Away, -1: transform.Unattributed,
		salted: transform.Home, third: transform.Away, transform.MapPID(9, home): transform.Home} {
		if got := r.Of(pid); got != want {
			t.Errorf("Of(%d) = %v, want %v", pid, got, want)
		}
	}
}

// BenchmarkOriginsLearn is the fetcher's Screen on a response of 100
// batches whose producer IDs are all known (the steady state: every
// response of every link that checks origins goes through it): idempotent
// producers of the source, transactional ones looked up before, and mapped
// IDs of the destination's region.
func BenchmarkOriginsLearn(b *testing.B) {
	o, err := NewOrigins(OriginsConfig{Topic: "__state", SourceOpts: []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")},
		SourceClusterID: kafkatest.SourceClusterID, DestinationClusterID: kafkatest.DestClusterID})
	if err != nil {
		b.Fatal(err)
	}
	defer o.Close()
	home, _ := transform.RegionOf(kafkatest.DestClusterID)
	hs := make([]transform.Header, 100)
	for i := range hs {
		switch i % 3 {
		case 0:
			hs[i] = transform.Header{ProducerID: int64(i)}
		case 1:
			hs[i] = transform.Header{ProducerID: int64(i), Attributes: transform.AttrTransactional}
			o.checked[int64(i)] = struct{}{}
		default:
			hs[i] = transform.Header{ProducerID: transform.MapPID(int64(i), home)}
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := o.Learn(b.Context(), hs); err != nil {
			b.Fatal(err)
		}
	}
}

// Reverse finds the checkpoint that the link in the other direction (from
// the link's destination into its source) committed for a partition, in
// the state topic at the link's source: by that link's clusters, its
// source partition (the link's destination partition) and the topic IDs on
// both sides where known; a stop or pause makes it not live; an answer is
// at most 10 s old.
func TestOriginsReverse(t *testing.T) {
	ctx := testCtx(t)
	src, _ := kafkatest.Pair(t)
	const reverseSrc, reverseDst = kafkatest.DestClusterID, kafkatest.SourceClusterID
	o, err := NewOrigins(OriginsConfig{Topic: "__state", SourceOpts: []kgo.Opt{kgo.SeedBrokers(src.ListenAddrs()...)},
		SourceClusterID: reverseDst, DestinationClusterID: reverseSrc, Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Close)
	now := time.Unix(1000, 0)
	o.now = func() time.Time { return now }
	srcT := tp.Partition{Topic: "orders", ID: [16]byte{1}, Partition: 2} // the link's source partition (the reverse link's destination)
	dstT := tp.Partition{Topic: "orders", ID: [16]byte{2}, Partition: 2} // the link's destination partition (the reverse link's source)
	reverse := func() (Reverse, bool) {
		t.Helper()
		r, ok, err := o.Reverse(ctx, srcT, dstT)
		if err != nil {
			t.Fatalf("Reverse: %v", err)
		}
		return r, ok
	}
	if r, ok := reverse(); ok {
		t.Fatalf("without a state topic: %+v", r)
	}

	s := newStore(t, src, Config{Topic: "__state"}, nil)
	if err := s.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	ck := func(link string, dstID, srcID [16]byte, topic string, part int32, srcNext, dstNext int64) Record {
		return Record{Key: CheckpointKey{LinkName: link, TopicID: UUID(dstID), Partition: part},
			Value: CheckpointValue{SourceTopic: topic, SourcePartition: part, SourceNextOffset: srcNext, DestNextOffset: dstNext, SourceTopicID: UUID(srcID), TimestampMs: 1}}
	}
	session := func(link, from, to string) *Session {
		sess, err := s.Begin(ctx, link, time.Minute, SourceCluster(from), DestinationCluster(to))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sess.Close(context.Background()) })
		return sess
	}
	ba, ab, other := session("ba", reverseSrc, reverseDst), session("ab", reverseDst, reverseSrc), session("other", kafkatest.ThirdClusterID, reverseDst)
	for _, c := range []struct {
		sess *Session
		recs []Record
	}{
		{ba, []Record{ck("ba", srcT.ID, dstT.ID, "orders", 2, 500, 700), ck("ba", srcT.ID, dstT.ID, "orders", 1, 1, 1),
			ck("ba", [16]byte{9}, dstT.ID, "orders", 2, 1, 1)}},
		{ab, []Record{ck("ab", dstT.ID, srcT.ID, "orders", 2, 3, 3)}},
		{other, []Record{ck("other", srcT.ID, dstT.ID, "orders", 2, 4, 4)}},
	} {
		if err := c.sess.Commit(ctx, Mirroring, c.recs...); err != nil {
			t.Fatal(err)
		}
	}
	// The read 10 s ago (no topic) still answers.
	if r, ok := reverse(); ok {
		t.Fatalf("within 10 s of the last read: %+v; want its answer, none", r)
	}
	now = now.Add(10 * time.Second)
	if r, ok := reverse(); !ok || r.Link != "ba" || !r.Live || r.State != Mirroring || r.SourceNext != 500 || r.DestNext != 700 || len(r.Earlier) != 0 {
		t.Fatalf("Reverse = %+v, %v; want ba's checkpoint of the partition, live, nothing earlier", r, ok)
	}
	// A later checkpoint: the earlier one is kept as a cut too.
	if err := ba.Commit(ctx, Mirroring, ck("ba", srcT.ID, dstT.ID, "orders", 2, 600, 800)); err != nil {
		t.Fatal(err)
	}
	now = now.Add(10 * time.Second)
	if r, ok := reverse(); !ok || r.SourceNext != 600 || r.DestNext != 800 || len(r.Earlier) != 1 || r.Earlier[0] != (Cut{SourceNext: 500, DestNext: 700}) {
		t.Fatalf("after a second checkpoint: %+v, %v; want 600/800 with 500/700 earlier", r, ok)
	}
	if err := ba.CommitStop(ctx, Paused, 0); err != nil {
		t.Fatal(err)
	}
	now = now.Add(10 * time.Second)
	if r, ok := reverse(); !ok || r.Live || r.State != Paused || r.SourceNext != 600 {
		t.Fatalf("after a pause: %+v, %v; want ba's checkpoint, not live", r, ok)
	}
	// Topic IDs unknown on either side (a cluster that reports none, a
	// version 0 checkpoint): the names decide.
	srcT.ID, dstT.ID = [16]byte{}, [16]byte{}
	if r, ok := reverse(); !ok || r.SourceNext != 1 {
		t.Fatalf("without topic IDs: %+v, %v; want the lowest of ba's checkpoints of orders[2] (1)", r, ok)
	}
}
