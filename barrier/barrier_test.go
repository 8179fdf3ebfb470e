package barrier

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/internal/testkit/batchtest"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
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

// TestApplyAndRestore guards DESIGN §8: a barrier, committed with the
// partition's checkpoint in one state transaction, resets exactly the
// mirrored producer state of the partition it names; and a restarted agent
// that restores the salts of the replayed state topic (Salts) maps every
// origin, and decides every batch that follows, as the live agent does.
func TestApplyAndRestore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, dst := kafkatest.Pair(t)
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
	// Another link's barrier and salt in the same state topic.
	other := transform.Salt{Origin: transform.Origin{Cluster: kafkatest.SourceClusterID, PID: 5}, Salt: 9, Colliding: kafkatest.ThirdClusterID}
	if err := begin("l2").Commit(ctx, statestore.Mirroring, Record(pOther, kafkatest.ThirdClusterID, now), SaltRecord(pOther, other, now)); err != nil {
		t.Fatalf("commit l2's barrier: %v", err)
	}

	// The barrier of p0 goes with its checkpoint, as the pipeline commits
	// them, and is applied once they committed.
	checkpoint := statestore.Record{
		Key:   statestore.CheckpointKey{LinkName: "l1", TopicID: topicA, Partition: 0},
		Value: statestore.CheckpointValue{SourceTopic: "a", SourceNextOffset: 42, DestNextOffset: 40, TimestampMs: now.UnixMilli()},
	}
	if err := live.sess.Commit(ctx, statestore.Mirroring, Record(p0, kafkatest.SourceClusterID, now), checkpoint); err != nil {
		t.Fatalf("commit the barrier: %v", err)
	}
	if n := Apply(live.psms[p0]); n != 3 {
		t.Errorf("Apply expired %d producers on p0, want 3", n)
	}
	if n := live.psms[p0].Len(); n != 0 {
		t.Errorf("p0 holds %d producers after the barrier", n)
	}
	if n := live.psms[p1].Len(); n != 2 {
		t.Errorf("p1 holds %d producers after p0's barrier, want its 2", n)
	}
	if _, ok := live.psms[p0].Salt(transform.Origin{Cluster: kafkatest.ThirdClusterID, PID: 5}); !ok {
		t.Error("the barrier dropped p0's salt; it drops producer entries only")
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
		t.Error("p1 has a barrier, but only p0's was committed")
	}
	if got := view.Checkpoints[checkpoint.Key.(statestore.CheckpointKey)]; !reflect.DeepEqual(got, checkpoint.Value) {
		t.Errorf("checkpoint %+v, want %+v", got, checkpoint.Value)
	}

	// A restarted agent (fresh PSMs) restores the salts of the replayed
	// state topic: each partition gets its own (not another link's, not
	// the tombstoned one), and the same decision for every batch that
	// follows as the live agent.
	salts := Salts(view)
	if got := len(salts[p0]) + len(salts[p1]); got != 1 {
		t.Errorf("restored %d salts of l1's partitions (%v), want p0's one", got, salts)
	}
	if got := salts[pOther]; len(got) != 1 || got[0].Origin != other.Origin || got[0].Salt != other.Salt || !got[0].At.Equal(now) {
		t.Errorf("the other link's partition restores %+v, want its salt %+v", got, other)
	}
	restarted := newPSMs()
	for p, psm := range restarted {
		for _, s := range salts[p] {
			psm.AddSalt(s.Origin, s.Salt, s.At)
		}
	}
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

// TestBrokerRefusesBarrierBatch shows why mirrord writes the barrier to the
// state topic: spec 000 puts it into the data partition as a control batch,
// and a broker refuses a control batch from a client. kfake, like Kafka's
// LogValidator, answers INVALID_RECORD.
func TestBrokerRefusesBarrierBatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, dst := kafkatest.Pair(t)
	cl := kafkatest.Client(t, dst)
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "data"); err != nil {
		t.Fatal(err)
	}
	md, err := adm.Metadata(ctx, "data")
	if err != nil {
		t.Fatal(err)
	}
	td := md.Topics["data"]

	// The spec's control record: key {version 0, type 7}, value the
	// state topic's MirrorPidResetValue, in a control batch.
	key := kbin.AppendInt16(kbin.AppendInt16(nil, 0), 7)
	value := statestore.EncodeValue(statestore.PIDResetValue{SourceClusterID: kafkatest.SourceClusterID, TimestampMs: 1_700_000_000_000})
	batch := batchtest.Build(batchtest.Spec{PID: -1, Epoch: -1, BaseSequence: -1, Control: true, FirstTimestamp: 1_700_000_000_000,
		Records: []batchtest.Record{{Key: key, Value: value}}})

	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TimeoutMillis = 10_000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic, rt.TopicID = "data", td.ID
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition = 0
	rp.Records = batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	kresp, err := cl.Broker(int(td.Partitions[0].Leader)).Request(ctx, req)
	if err != nil {
		t.Fatalf("produce: %v", err)
	}
	resp := kresp.(*kmsg.ProduceResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("response %+v", resp)
	}
	if err := kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode); !errors.Is(err, kerr.InvalidRecord) {
		t.Fatalf("produce of a client control batch: %v, want INVALID_RECORD", err)
	}
}
