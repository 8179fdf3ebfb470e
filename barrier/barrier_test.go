package barrier

import (
	"context"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/internal/testkit/logtest"
	"github.com/seed83556561/mirrord/statestore"
	"github.com/seed83556561/mirrord/transform"
)

var (
	topicA = statestore.UUID{0xaa, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	topicB = statestore.UUID{0xbb, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	p0     = Partition{TopicID: topicA, Partition: 0}
	p1     = Partition{TopicID: topicA, Partition: 1}
	pOther = Partition{TopicID: topicB, Partition: 0} // another link's partition
)

var (
	srcRegion, _   = transform.RegionOf(kafkatest.SourceClusterID)
	thirdRegion, _ = transform.RegionOf(kafkatest.ThirdClusterID)
)

func info(cluster string, r transform.Region, pid int64, seq int32) transform.BatchInfo {
	return transform.BatchInfo{Origin: transform.Origin{Cluster: cluster, PID: pid}, Region: r, Epoch: 0, BaseSequence: seq, LastOffsetDelta: 0}
}

// pipeline drives batches through the PSMs the way a link does: decide; on
// a collision commit the salt record, AddSalt, decide again; commit.
type pipeline struct {
	t    *testing.T
	ctx  context.Context
	sess *statestore.Session
	psms map[Partition]*transform.PSM
	now  time.Time
}

func (pl *pipeline) forward(p Partition, b transform.BatchInfo) transform.Decision {
	pl.t.Helper()
	psm := pl.psms[p]
	d := psm.Decide(b)
	if d.Kind == transform.KindCollision {
		if err := pl.sess.Commit(pl.ctx, statestore.Mirroring, SaltRecord(p, *d.Salt, pl.now)); err != nil {
			pl.t.Fatalf("commit salt: %v", err)
		}
		psm.AddSalt(d.Salt.Origin, d.Salt.Salt, pl.now)
		d = psm.Decide(b)
	}
	psm.Commit(d, pl.now)
	return d
}

// populate gives PSMs the producer entries of a running link: on p0 two
// origins whose regions clash (one gets a salt) and a PID an upstream
// mirror already mapped; on p1 two origins.
func populate(pl *pipeline) {
	upstream := transform.MapPID(9, thirdRegion)
	pl.forward(p0, info(kafkatest.SourceClusterID, srcRegion, 5, 0))
	// A third cluster whose region equals the source's (a hash
	// collision) with the same PID: the PSM salts it.
	pl.forward(p0, info(kafkatest.ThirdClusterID, srcRegion, 5, 0))
	pl.forward(p0, info(kafkatest.SourceClusterID, srcRegion, upstream, 0))
	pl.forward(p1, info(kafkatest.SourceClusterID, srcRegion, 5, 0))
	pl.forward(p1, info(kafkatest.SourceClusterID, srcRegion, 6, 0))
}

// seqRand yields fixed salts so that the live and the restarted agent draw
// the same ones.
func seqRand(vals ...int64) func() int64 {
	var mu sync.Mutex
	return func() int64 {
		mu.Lock()
		defer mu.Unlock()
		v := vals[0]
		vals = append(vals[1:], v+1)
		return v
	}
}

// TestEmitApplyReplay guards DESIGN §8: the barrier resets exactly the
// mirrored producer state of the partitions it names, live and on replay,
// and a restarted agent that replays the state topic decides batches
// exactly as the live agent does.
func TestEmitApplyReplay(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, dst := kafkatest.Pair(t)
	var logs logtest.Buffer
	log := logtest.Logger(&logs)
	newStore := func() *statestore.Store {
		s, err := statestore.New(statestore.Config{}, statestore.Deps{ClientOpts: []kgo.Opt{kgo.SeedBrokers(dst.ListenAddrs()...)}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	store := newStore()
	if err := store.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	begin := func(link string) *statestore.Session {
		sess, err := store.Begin(ctx, link, time.Minute, statestore.SourceCluster(kafkatest.SourceClusterID))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sess.Close(context.Background()) })
		return sess
	}
	now := time.UnixMilli(1_700_000_000_000)
	newPSMs := func() map[Partition]*transform.PSM {
		return map[Partition]*transform.PSM{
			p0: transform.NewPSM(transform.PSMConfig{Rand: seqRand(1000)}),
			p1: transform.NewPSM(transform.PSMConfig{Rand: seqRand(2000)}),
		}
	}

	// The live agent.
	live := &pipeline{t: t, ctx: ctx, sess: begin("l1"), psms: newPSMs(), now: now}
	populate(live)
	if n := live.psms[p0].Len(); n != 3 {
		t.Fatalf("p0 holds %d producers, want 3", n)
	}
	// A salt on p1 that the PSM later expired: committed, then tombstoned.
	gone := transform.Salt{Origin: transform.Origin{Cluster: kafkatest.ThirdClusterID, PID: 77}, Salt: 3, Colliding: kafkatest.SourceClusterID}
	if err := live.sess.Commit(ctx, statestore.Mirroring, SaltRecord(p1, gone, now)); err != nil {
		t.Fatal(err)
	}
	if err := live.sess.Commit(ctx, statestore.Mirroring, SaltTombstone(p1, gone.Origin)); err != nil {
		t.Fatal(err)
	}
	// Another link's barrier in the same state topic.
	if err := Emit(ctx, begin("l2"), []Partition{pOther}, kafkatest.ThirdClusterID, now); err != nil {
		t.Fatalf("emit l2: %v", err)
	}

	checkpoint := statestore.Record{
		Key:   statestore.CheckpointKey{LinkName: "l1", TopicID: topicA, Partition: 0},
		Value: statestore.CheckpointValue{SourceTopic: "a", SourceNextOffset: 42, DestNextOffset: 40, TimestampMs: now.UnixMilli()},
	}
	if err := Emit(ctx, live.sess, []Partition{p0}, kafkatest.SourceClusterID, now, checkpoint); err != nil {
		t.Fatalf("Emit: %v", err)
	}
	if n := Apply(live.psms[p0], log, p0); n != 3 {
		t.Errorf("Apply expired %d producers on p0, want 3", n)
	}
	if n := live.psms[p0].Len(); n != 0 {
		t.Errorf("p0 holds %d producers after the barrier", n)
	}
	if n := live.psms[p1].Len(); n != 2 {
		t.Errorf("p1 holds %d producers after p0's barrier, want its 2", n)
	}
	wantLog := `[INFO]  MIRROR_PID_RESET applied: expired mirrored producer IDs: topic_id=qgECAwQFBgcICQoLDA0ODw partition=0 expired=3` + "\n"
	if !strings.Contains(logs.String(), wantLog) {
		t.Errorf("log does not hold %q:\n%s", wantLog, logs.String())
	}

	// The barrier, the checkpoint and the link record are one
	// transaction in the state topic.
	view, err := newStore().Replay(ctx)
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	if got, want := view.Barriers[statestore.PIDResetKey{TopicID: topicA, Partition: 0}], (statestore.PIDResetValue{SourceClusterID: kafkatest.SourceClusterID, TimestampMs: now.UnixMilli()}); got != want {
		t.Errorf("barrier of p0: %+v, want %+v", got, want)
	}
	if _, ok := view.Barriers[statestore.PIDResetKey{TopicID: topicA, Partition: 1}]; ok {
		t.Error("p1 has a barrier, but only p0 was emitted")
	}
	if got := view.Checkpoints[checkpoint.Key.(statestore.CheckpointKey)]; !reflect.DeepEqual(got, checkpoint.Value) {
		t.Errorf("checkpoint %+v, want %+v", got, checkpoint.Value)
	}

	// An agent whose producer state predates the barrier (as one that
	// rejoins after FAILED) replays the topic: the barrier expires p0's
	// mirrored producers and leaves p1's alone.
	stale := &pipeline{t: t, ctx: ctx, sess: live.sess, psms: newPSMs(), now: now}
	for _, b := range []struct {
		p Partition
		b transform.BatchInfo
	}{
		{p0, info(kafkatest.SourceClusterID, srcRegion, 5, 0)},
		{p0, info(kafkatest.SourceClusterID, srcRegion, 8, 0)},
		{p1, info(kafkatest.SourceClusterID, srcRegion, 5, 0)},
		{p1, info(kafkatest.SourceClusterID, srcRegion, 6, 0)},
	} {
		d := stale.psms[b.p].Decide(b.b)
		stale.psms[b.p].Commit(d, now)
	}
	psmFor := func(psms map[Partition]*transform.PSM) func(Partition) *transform.PSM {
		return func(p Partition) *transform.PSM { return psms[p] }
	}
	st := Replay(view.Records, psmFor(stale.psms), log)
	if st.Barriers != 1 || st.Expired != 2 || st.Salts != 2 || st.SaltTombstones != 1 {
		t.Errorf("replay stats %+v, want 1 barrier, 2 expired, 2 salts, 1 tombstone", st)
	}
	if n := stale.psms[p0].Len(); n != 0 {
		t.Errorf("p0 holds %d producers after replaying its barrier", n)
	}
	for _, pid := range []int64{5, 6} {
		if _, ok := stale.psms[p1].Mapped(transform.Origin{Cluster: kafkatest.SourceClusterID, PID: pid}); !ok {
			t.Errorf("replay of p0's barrier dropped producer %d of p1", pid)
		}
	}

	// A restarted agent (fresh PSMs) against the live one: same salts,
	// and the same decision for every batch that follows.
	restarted := newPSMs()
	Replay(view.Records, psmFor(restarted), log)
	origins := []transform.Origin{
		{Cluster: kafkatest.SourceClusterID, PID: 5},
		{Cluster: kafkatest.ThirdClusterID, PID: 5},
		gone.Origin,
	}
	for _, p := range []Partition{p0, p1} {
		for _, o := range origins {
			ls, lok := live.psms[p].Salt(o)
			rs, rok := restarted[p].Salt(o)
			if ls != rs || lok != rok {
				t.Errorf("%s salt of %s: live %d,%v restarted %d,%v", p, o, ls, lok, rs, rok)
			}
		}
	}
	if s, ok := restarted[p0].Salt(transform.Origin{Cluster: kafkatest.ThirdClusterID, PID: 5}); !ok || s != 1000 {
		t.Errorf("the collision salt was not restored: %d, %v", s, ok)
	}
	next := []transform.BatchInfo{
		info(kafkatest.SourceClusterID, srcRegion, 5, 1),
		info(kafkatest.ThirdClusterID, srcRegion, 5, 1),
		info(kafkatest.SourceClusterID, srcRegion, transform.MapPID(9, thirdRegion), 1),
	}
	for _, b := range next {
		ld, rd := live.psms[p0].Decide(b), restarted[p0].Decide(b)
		if ld.Kind != rd.Kind || ld.Mapped != rd.Mapped {
			t.Errorf("batch of %s: live %s→%d, restarted %s→%d", b.Origin, ld.Kind, ld.Mapped, rd.Kind, rd.Mapped)
		}
		live.psms[p0].Commit(ld, now)
		restarted[p0].Commit(rd, now)
	}
}
