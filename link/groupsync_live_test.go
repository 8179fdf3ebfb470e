package link

import (
	"context"
	"errors"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/failover"
)

// offsetCommits counts the OffsetCommit requests a link's clients send.
type offsetCommits struct{ n atomic.Int64 }

func (c *offsetCommits) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, _ kgo.BrokerE2E) {
	if key == int16(kmsg.OffsetCommit) {
		c.n.Add(1)
	}
}

// Guards issue 21's "group sync runs in an agent whose session is fenced or
// standing by": group sync commits only from the session that holds the
// link. Agent A mirrors and syncs groups every 50 ms; agent B takes the
// same link over (fencing A, which then stands by) and syncs only when
// asked. While A stands by, the source group commits: A commits nothing (it
// sends no OffsetCommit at all), and its status says why; B, the live one,
// syncs the group. Once B is paused (and A gone), B commits nothing either.
// Before the fix, a Mover ran its rounds whatever its link's state, through
// an offline translation of the state topic: the standby and the paused
// agent both committed.
func TestGroupSyncOnlyInTheLiveSession(t *testing.T) {
	f := onKfake(t).mirrored(t, "live", srcTopic("t", 2))
	topic := f.topic("t")
	f.load(idempotent, 0, "one", 60)
	group := f.topic("app")
	// B must hold the link while A stands by: a lease that a starved
	// -race run cannot miss (B waits A's out when it takes over).
	f.cfg.Link.SessionTimeout = 10 * time.Second
	f.cfg.Link.Groups = &config.Groups{Include: []*regexp.Regexp{regexp.MustCompile(`^(?:` + regexp.QuoteMeta(group) + `)$`)}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srcAdm, dstAdm := kadm.NewClient(f.src.NewClient(t)), kadm.NewClient(f.dst.NewClient(t))
	commitAtSource := func(at int64) {
		t.Helper()
		os := kadm.Offsets{}
		os.Add(kadm.Offset{Topic: topic, Partition: 0, At: at, LeaderEpoch: -1})
		os.Add(kadm.Offset{Topic: topic, Partition: 1, At: at, LeaderEpoch: -1})
		if r, err := srcAdm.CommitOffsets(ctx, group, os); err != nil || r.Error() != nil {
			t.Fatalf("commit %s at the source: %v %v", group, err, r.Error())
		}
	}
	atDestination := func() map[int32]int64 {
		t.Helper()
		offs, err := dstAdm.FetchOffsets(ctx, group)
		if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
			t.Fatal(err)
		}
		out := map[int32]int64{}
		offs.Each(func(o kadm.OffsetResponse) {
			if o.At >= 0 {
				out[o.Partition] = o.At
			}
		})
		return out
	}

	var aCommits offsetCommits
	cfgA := f.cfg
	cfgA.Link.GroupSyncInterval = 50 * time.Millisecond
	a := startLinkWith(t, cfgA, Deps{Logger: testLogger(t, "A"), SourceOpts: f.src.Opts(), DestinationOpts: append(f.dst.Opts(), kgo.WithHooks(&aCommits))})
	a.waitState(t, Mirroring, 30*time.Second)
	f.waitMirrored(60 * time.Second)

	cfgB := f.cfg
	cfgB.Link.GroupSyncInterval = time.Hour // B syncs when asked
	b := startLinkWith(t, cfgB, Deps{Logger: testLogger(t, "B"), SourceOpts: f.src.Opts(), DestinationOpts: f.dst.Opts()})
	b.waitState(t, Mirroring, 60*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for a.Status().State == Mirroring {
		if time.Now().After(deadline) {
			t.Fatal("A still MIRRORING 30 s after B took the link over")
		}
		time.Sleep(20 * time.Millisecond)
	}

	t.Run("standby", func(t *testing.T) {
		before := aCommits.n.Load()
		commitAtSource(10)
		// 40 of A's intervals while it stands by.
		for range 40 {
			time.Sleep(50 * time.Millisecond)
			if st := a.Status().State; st == Mirroring {
				t.Fatalf("A took the link back (%s) while B held it", st)
			}
		}
		if got, n := atDestination(), aCommits.n.Load()-before; len(got) != 0 || n != 0 {
			t.Errorf("the standby agent A sent %d OffsetCommits; the destination group is at %v; want none", n, got)
		}
		if gs := a.Status().GroupSync; gs == nil || gs.Idle == "" {
			t.Errorf("A's group sync status %+v; want it to say why it does not sync", gs)
		}
		gs, err := b.SyncGroups(ctx)
		if err != nil || len(gs) != 1 || gs[0].State != failover.GroupSynced {
			t.Fatalf("the live agent B's round: %+v, %v; want the group synced", gs, err)
		}
		got := atDestination()
		for _, p := range gs[0].Partitions {
			if got[p.Partition] != p.Translation || p.Translation <= 0 {
				t.Errorf("partition %d: destination at %d, B translated %d", p.Partition, got[p.Partition], p.Translation)
			}
		}
	})

	t.Run("paused", func(t *testing.T) {
		a.stop(t, false) // else A takes the link once B pauses
		was := atDestination()
		b.Pause()
		b.waitState(t, Paused, 30*time.Second)
		commitAtSource(20)
		if gs, err := b.SyncGroups(ctx); !errors.Is(err, failover.ErrNotLive) {
			t.Errorf("a round of the paused agent B: %+v, %v; want failover.ErrNotLive", gs, err)
		}
		if got := atDestination(); got[0] != was[0] || got[1] != was[1] {
			t.Errorf("the paused agent B moved the destination group from %v to %v", was, got)
		}
	})
}
