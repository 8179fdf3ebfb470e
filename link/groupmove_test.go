package link

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/internal/testkit/mirrortest"
	"github.com/seed83556561/mirrord/statestore"
	"github.com/seed83556561/mirrord/translate"
)

// A group that moves from A to B while both clusters are written (links
// A→B and B→A, DESIGN §16) re-reads records rather than skips any. The
// logs interleave differently: B's record b1 is at B before A's a2 and a3
// (B→A was down when b1 was written), and at A after them. A group at A
// that has read a1 and a2 has not read b1; the mirror of a3 at B, where a
// translation by A's records alone answers, lies past b1. Every position at
// A is translated, online (the running link's session) and offline (the
// state topic), twice: while B→A is down, crashed (b1 is at B only: the
// answer is at most B→A's last checkpoint at B), and after it copied b1 to
// A (the answer is at most b1's original). For each answer, the records
// below the position at A and those from the answer on at B together hold
// every record B holds. A round of the link's group sync puts a group
// committed at A where the translation says.
func TestActiveActiveGroupMove(t *testing.T) {
	t.Run("preserve", func(t *testing.T) {
		scenario(t, func(t *testing.T, e *env) { movingGroup(t, e, false) })
	})
	t.Run("transactional", func(t *testing.T) {
		scenario(t, func(t *testing.T, e *env) { movingGroup(t, e, true) })
	})
}

func movingGroup(t *testing.T, e *env, txn bool) {
	a := e.cluster(t, "a", kafkatest.SourceClusterID)
	b := e.cluster(t, "b", kafkatest.DestClusterID)
	topic := e.topic("t")
	a.CreateTopic(t, topic, 1, nil)
	b.CreateTopic(t, topic, 1, nil)
	cfg := func(name string, src, dst *cluster) Config {
		c := e.linkConfig(name, src, dst, "t")
		c.Link.SkipUnattributed, c.Link.SharedDestination = true, true
		if txn {
			c.Link.Delivery = statestore.DeliveryTransactional
			c.Link.TransactionTimeout = 30 * time.Second
		}
		return c
	}
	abCfg, baCfg := cfg("ab", a, b), cfg("ba", b, a)
	// Group sync as the link runs it (rounds called by the test).
	abCfg.Link.Groups = &config.Groups{Include: []*regexp.Regexp{regexp.MustCompile(`^(?:` + regexp.QuoteMeta(e.topic("app")) + `.*)$`)}}
	abCfg.Link.GroupSyncInterval = time.Hour
	sent := newProduced()
	kind := idempotent
	if txn {
		kind = transactional
	}

	load(t, a, sent, kind, 3, "a1", 20, topic)
	ab := startLink(t, abCfg, a, b, "ab")
	ba := startLink(t, baCfg, b, a, "ba")
	bothCaughtUp(t, topic, map[*testLink]*cluster{ab: a, ba: b})
	// B→A's checkpoint past A's copies at B, then a crash: its state
	// stays MIRRORING (live), at that checkpoint.
	waitCheckpointed(t, ba, b, topic)
	ba.stop(t, true)

	load(t, b, sent, kind, 2, "b1", 15, topic)
	load(t, a, sent, kind, 3, "a2", 10, topic)
	bothCaughtUp(t, topic, map[*testLink]*cluster{ab: a})
	load(t, a, sent, kind, 0, "a3", 10, topic)
	bothCaughtUp(t, topic, map[*testLink]*cluster{ab: a})

	offline, err := NewOffline(context.Background(), abCfg, Deps{SourceOpts: a.Opts(), DestinationOpts: b.Opts()})
	if err != nil {
		t.Fatal(err)
	}
	defer offline.Close()
	translators := map[string]func(ctx context.Context, p int64) (translate.Result, error){
		"online": func(ctx context.Context, p int64) (translate.Result, error) { return ab.Translate(ctx, topic, 0, p) },
		"offline": func(ctx context.Context, p int64) (translate.Result, error) {
			return offline.Translate(ctx, topic, 0, p)
		},
	}

	// b1 at B only. A group that read all of A's records has not read
	// it.
	atA, atB := recordsAt(t, a, topic), recordsAt(t, b, topic)
	b1 := firstOf(t, atB, mirrortest.KeyPrefix(kind, 2, "b1")+"-")
	for name, tr := range translators {
		r := moveAll(t, name+", b1 at B only", atA, atB, tr)
		if end := atA[len(atA)-1].Offset + 1; r[end].DestinationOffset > b1 {
			t.Errorf("%s: A's end %d translates to %d (%s), past b1 at %d", name, end, r[end].DestinationOffset, r[end].Via, b1)
		}
	}
	if at := syncGroup(t, ab, a, b, e.topic("app-all"), topic, atA[len(atA)-1].Offset+1); at > b1 {
		t.Errorf("group sync: a group at A's end is at %d at B, past b1 at %d", at, b1)
	}

	// B→A back: b1 reaches A after a3. A group that read a1 and a2
	// resumes at b1's original.
	ba = startLink(t, baCfg, b, a, "ba2")
	bothCaughtUp(t, topic, map[*testLink]*cluster{ab: a, ba: b})
	atA, atB = recordsAt(t, a, topic), recordsAt(t, b, topic)
	a3 := firstOf(t, atA, mirrortest.KeyPrefix(kind, 0, "a3")+"-")
	for name, tr := range translators {
		r := moveAll(t, name+", b1 at both", atA, atB, tr)
		if got := r[a3]; got.DestinationOffset != b1 || got.Via != "reverse" {
			t.Errorf("%s: a3's offset %d at A translates to %d (%s), want b1's original at %d (reverse)", name, a3, got.DestinationOffset, got.Via, b1)
		}
	}
	if at := syncGroup(t, ab, a, b, e.topic("app-a2"), topic, a3); at != b1 {
		t.Errorf("group sync: a group at a3's offset %d at A is at %d at B; want b1's original at %d", a3, at, b1)
	}

	// The search's budget: 20 records of 800 KiB at A, no copy among
	// them, then b2 at B, which B→A copies after them. From a position
	// in front of them the search for a copy reads 16 MiB and stops below
	// B→A's last checkpoint at A; an earlier checkpoint of B→A at or
	// below where it stopped bounds the answer (without, the translation
	// failed).
	bigRecords(t, a, sent, "a4", 20, 800<<10, topic)
	bothCaughtUp(t, topic, map[*testLink]*cluster{ab: a})
	load(t, b, sent, kind, 1, "b2", 5, topic)
	bothCaughtUp(t, topic, map[*testLink]*cluster{ab: a, ba: b})
	waitCheckpointed(t, ba, b, topic)
	waitCheckpointed(t, ab, a, topic)
	offline2, err := NewOffline(context.Background(), abCfg, Deps{SourceOpts: a.Opts(), DestinationOpts: b.Opts()})
	if err != nil {
		t.Fatal(err)
	}
	defer offline2.Close()
	translators["offline"] = func(ctx context.Context, p int64) (translate.Result, error) {
		return offline2.Translate(ctx, topic, 0, p)
	}
	atA, atB = recordsAt(t, a, topic), recordsAt(t, b, topic)
	a4 := firstOf(t, atA, "a4-")
	for name, tr := range translators {
		last := atA[len(atA)-1].Offset + 1
		if txn && name == "offline" {
			// Offline, a transactional link's translation of a position
			// among the 800 KiB batches is a timestamp search by
			// content, which may read past its 16 MiB budget at the
			// destination (ErrUntranslatable; seen once, in a
			// clean-clone run on Kafka 4.4.0, also without a link in the
			// other direction): a limit of its own, not this test's. The
			// positions before them are translated: their search for
			// copies of a plain batch looks ahead into the 800 KiB
			// batches, which spent the budget at the source before that
			// lookahead was bounded by bytes.
			last = a4
		}
		r := moveUpTo(t, name+", past the budget", atA, atB, tr, last)
		if got, ok := r[a4]; ok {
			t.Logf("%s: a4's offset %d at A translates to %d (%s, %d bytes read)", name, a4, got.DestinationOffset, got.Via, got.Bytes)
		}
	}
	ba.stop(t, false)
}

// bigRecords produces n records of size bytes each to the topic's partition
// 0 with an idempotent producer, uncompressed, keys prefix-<i>.
func bigRecords(t *testing.T, c *cluster, p *produced, prefix string, n, size int, topic string) {
	t.Helper()
	cl, err := kgo.NewClient(append(c.Opts(), kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(1<<20))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	val := make([]byte, size)
	for i := range val {
		val[i] = byte('a' + i%26)
	}
	for i := range n {
		k := fmt.Sprintf("%s-%06d", prefix, i)
		if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte(k), Value: val, Partition: 0}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		p.Committed[topic+"/"+k]++
	}
}

// syncGroup commits group at offset p of the topic's partition 0 at src,
// runs a round of l's group sync, and returns the group's offset at dst.
func syncGroup(t *testing.T, l *testLink, src, dst *cluster, group, topic string, p int64) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	os := kadm.Offsets{}
	os.Add(kadm.Offset{Topic: topic, Partition: 0, At: p, LeaderEpoch: -1})
	if r, err := src.Admin.CommitOffsets(ctx, group, os); err != nil || r.Error() != nil {
		t.Fatalf("commit %s at %s: %v %v", group, src.Name, err, r.Error())
	}
	if _, err := l.SyncGroups(ctx); err != nil {
		t.Fatalf("group sync: %v", err)
	}
	got, err := dst.Admin.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := got.Lookup(topic, 0)
	if !ok || o.At < 0 {
		t.Fatalf("group %s has no offset at %s after a sync round: %+v", group, dst.Name, got)
	}
	return o.At
}

// waitCheckpointed waits until the state topic holds a checkpoint of l's
// partition at its source's end.
func waitCheckpointed(t *testing.T, l *testLink, src *cluster, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	waitFor(t, "link "+l.Name()+" checkpointed at its source's end", time.Minute, func() bool {
		ends, err := src.Admin.ListEndOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		end, _ := ends.Lookup(topic, 0)
		for _, p := range l.Status().Partitions {
			if p.SourceTopic == topic && p.Partition == 0 && p.CheckpointSource >= end.Offset {
				return true
			}
		}
		return false
	})
}

// recordsAt is c's committed records of the topic's partition 0, in offset
// order.
func recordsAt(t *testing.T, c *cluster, topic string) []*kgo.Record {
	t.Helper()
	var out []*kgo.Record
	for _, r := range mirrortest.ConsumeCommitted(t, c, topic) {
		if r.Partition == 0 {
			out = append(out, r)
		}
	}
	return out
}

// firstOf is the offset of the first record whose key starts with prefix.
func firstOf(t *testing.T, rs []*kgo.Record, prefix string) int64 {
	t.Helper()
	for _, r := range rs {
		if k := string(r.Key); len(k) >= len(prefix) && k[:len(prefix)] == prefix {
			return r.Offset
		}
	}
	t.Fatalf("no record %s*", prefix)
	return -1
}

// moveAll translates every position at A from 0 to A's end and checks that
// a group moved there would read every record B holds: each is below the
// position at A or at or after the answer at B. It logs how many records
// the moves re-read at most and in total, and returns the answers.
func moveAll(t *testing.T, what string, atA, atB []*kgo.Record, tr func(context.Context, int64) (translate.Result, error)) map[int64]translate.Result {
	t.Helper()
	return moveUpTo(t, what, atA, atB, tr, atA[len(atA)-1].Offset+1)
}

// moveUpTo is moveAll for the positions from 0 to last.
func moveUpTo(t *testing.T, what string, atA, atB []*kgo.Record, tr func(context.Context, int64) (translate.Result, error), last int64) map[int64]translate.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out := map[int64]translate.Result{}
	reread, most, vias := 0, 0, map[string]int{}
	for p := int64(0); p <= last; p++ {
		r, err := tr(ctx, p)
		if err != nil {
			t.Fatalf("%s: translate %d: %v", what, p, err)
		}
		out[p] = r
		vias[r.Via]++
		read := map[string]bool{}
		for _, rec := range atA {
			if rec.Offset < p {
				read[string(rec.Key)] = true
			}
		}
		n := 0
		for _, rec := range atB {
			switch k := string(rec.Key); {
			case rec.Offset >= r.DestinationOffset && read[k]:
				n++
			case rec.Offset < r.DestinationOffset && !read[k]:
				t.Errorf("%s: a group at A's offset %d, moved to B's %d (%s), skips %s at B's offset %d", what, p, r.DestinationOffset, r.Via, k, rec.Offset)
			}
		}
		reread += n
		most = max(most, n)
	}
	t.Logf("%s: %d positions translated (%s); re-read at most %d records at one position, %d in all", what, last+1, fmt.Sprint(vias), most, reread)
	return out
}
