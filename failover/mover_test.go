package failover

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/internal/backoff"
	"github.com/seed83556561/mirrord/internal/kafka/access"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/statestore"
	"github.com/seed83556561/mirrord/translate"
)

// liveLink is the link as these tests' Movers see it: live while the test
// says so, mirroring topic "t" to the destination topic "t" at the same
// offsets. beforeTranslate, when set, runs before each translation.
type liveLink struct {
	live            atomic.Bool
	beforeTranslate func()
}

func (f *liveLink) State() statestore.LinkState {
	if f.live.Load() {
		return statestore.Mirroring
	}
	return statestore.Preparing
}

func (f *liveLink) Live() bool { return f.live.Load() }

func (f *liveLink) Pause() {}

func (f *liveLink) Pausing() bool { return false }

func (f *liveLink) Anchors(context.Context) ([]translate.Anchor, error) {
	return nil, errors.New("the test link has no anchors")
}

func (f *liveLink) Discover(context.Context) error { return nil }

func (f *liveLink) GrantACLWrite(context.Context) (ACLGrant, error) {
	return ACLGrant{}, errors.New("liveLink has no ACL sync")
}

func (f *liveLink) Translate(_ context.Context, topic string, partition int32, offset int64) (translate.Result, error) {
	if f.beforeTranslate != nil {
		f.beforeTranslate()
	}
	return translate.Result{SourceTopic: topic, DestinationTopic: topic, Partition: partition, SourceOffset: offset, DestinationOffset: offset,
		Via: "head", SourceBatch: -1, DestinationBatch: -1}, nil
}

func (f *liveLink) Translator(context.Context) (translate.Func, func(), error) {
	return f.Translate, func() {}, nil
}

// selectAll selects every group.
type selectAll struct{}

func (selectAll) Selects(string) bool { return true }

// moverEnv is a Mover between two kfake clusters that hold topic "t" with
// two partitions, its fake link, and admin clients of both clusters.
type moverEnv struct {
	src, dst       *kfake.Cluster
	srcAdm, dstAdm *kadm.Client
	link           *liveLink
	m              *Mover
}

// newMoverEnv starts the clusters and runs a live Mover whose periodic
// rounds come every interval; the test's cleanup stops it.
func newMoverEnv(t *testing.T, interval time.Duration) *moverEnv {
	t.Helper()
	src, dst := kafkatest.Pair(t)
	e := &moverEnv{src: src, dst: dst, srcAdm: kadm.NewClient(kafkatest.Client(t, src)), dstAdm: kadm.NewClient(kafkatest.Client(t, dst)),
		link: &liveLink{}}
	e.link.live.Store(true)
	ctx := t.Context()
	for _, adm := range []*kadm.Client{e.srcAdm, e.dstAdm} {
		if _, err := adm.CreateTopic(ctx, 2, 1, nil, "t"); err != nil {
			t.Fatal(err)
		}
	}
	e.m = New(Config{
		Groups: selectAll{}, GroupSyncInterval: interval,
		Selects:          func(topic string) bool { return topic == "t" },
		DestinationTopic: func(source string) string { return source },
		Source:           access.Cluster{Role: "source", Name: "src", Principal: "User:ANONYMOUS"},
		Destination:      access.Cluster{Role: "destination", Name: "dst", Principal: "User:ANONYMOUS"},
		SourceOpts:       []kgo.Opt{kgo.SeedBrokers(src.ListenAddrs()...)},
		DestinationOpts:  []kgo.Opt{kgo.SeedBrokers(dst.ListenAddrs()...)},
	}, e.link, Deps{})
	// Shortened: a coordinator that persists gives up within a second.
	e.m.coordinatorRetry, e.m.coordinatorPatience = backoff.Policy{First: 20 * time.Millisecond, Max: 200 * time.Millisecond}, time.Second
	runCtx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := e.m.Run(runCtx); err != nil {
			t.Errorf("Mover.Run: %v", err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	deadline := time.Now().Add(time.Minute)
	for {
		e.m.mu.Lock()
		running := e.m.groups != nil
		e.m.mu.Unlock()
		if running {
			return e
		}
		if time.Now().After(deadline) {
			t.Fatal("the Mover's group sync did not start")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// commitAt commits offsets of group on topic "t" (partition → offset) to
// a cluster, as a consumer that left would have.
func commitAt(t *testing.T, adm *kadm.Client, group string, at map[int32]int64) {
	t.Helper()
	os := kadm.Offsets{}
	for p, o := range at {
		os.Add(kadm.Offset{Topic: "t", Partition: p, At: o, LeaderEpoch: -1})
	}
	r, err := adm.CommitOffsets(t.Context(), group, os)
	if err == nil {
		err = r.Error()
	}
	if err != nil {
		t.Fatalf("commit %s: %v", group, err)
	}
}

// committed is group's committed offset of each partition of "t" at a
// cluster (absent: none).
func committed(t *testing.T, adm *kadm.Client, group string) map[int32]int64 {
	t.Helper()
	offs, err := adm.FetchOffsets(t.Context(), group)
	if err == nil {
		err = offs.Error()
	}
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		t.Fatalf("fetch the offsets of %s: %v", group, err)
	}
	out := map[int32]int64{}
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Topic == "t" && o.At >= 0 {
			out[o.Partition] = o.At
		}
	})
	return out
}

// statusOf is group's outcome in a round's result.
func statusOf(t *testing.T, gs []GroupStatus, group string) GroupStatus {
	t.Helper()
	for _, g := range gs {
		if g.Group == group {
			return g
		}
	}
	t.Fatalf("group %s not in the round's outcome %+v", group, gs)
	return GroupStatus{}
}

// Guards a round against giving up on a group coordinator's passing
// answer: a cluster that has just started answers COORDINATOR_NOT_AVAILABLE
// while it creates __consumer_offsets, a rolling restart moves
// coordinators (NOT_COORDINATOR) and a new one loads its groups
// (COORDINATOR_LOAD_IN_PROGRESS). kgo does not retry a FindCoordinator
// answer inside DescribeGroups or OffsetFetch, so before the fix the round
// failed the group (and a failover's final sync failed). Each answer, given
// a few times at either cluster, is waited out within the round and the
// group synced; one that persists fails the group within the patience,
// commits nothing and says so.
func TestGroupSyncCoordinatorRetries(t *testing.T) {
	for _, tc := range []struct {
		name    string
		atDst   bool
		err     *kerr.Error
		count   int    // -1: for good
		wantErr string // besides the coordinator's answer, and how often it came
	}{
		{name: "destination not available", atDst: true, err: kerr.CoordinatorNotAvailable, count: 3},
		{name: "destination not coordinator", atDst: true, err: kerr.NotCoordinator, count: 3},
		{name: "destination loading", atDst: true, err: kerr.CoordinatorLoadInProgress, count: 3},
		{name: "source not available", err: kerr.CoordinatorNotAvailable, count: 3},
		{name: "source loading", err: kerr.CoordinatorLoadInProgress, count: 3},
		{name: "destination for good", atDst: true, err: kerr.CoordinatorNotAvailable, count: -1,
			wantErr: `describe group "app" at the destination: `},
		{name: "source for good", err: kerr.CoordinatorLoadInProgress, count: -1,
			wantErr: `fetch the committed offsets of group "app" at the source: `},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newMoverEnv(t, time.Hour)
			commitAt(t, e.srcAdm, "app", map[int32]int64{0: 5, 1: 7})
			c := e.src
			if tc.atDst {
				c = e.dst
			}
			if tc.count > 0 {
				// A few answers are waited out however slow the
				// machine: the patience is the persistent cases'.
				e.m.coordinatorPatience = time.Minute
			}
			fault := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.FindCoordinator}, Group: "app", Err: tc.err, Count: tc.count})
			start := time.Now()
			gs, err := e.m.SyncGroups(t.Context())
			took := time.Since(start)
			hits := fault.Hits()
			fault.Remove() // the test's own reads below
			if err != nil {
				t.Fatalf("round: %v", err)
			}
			st := statusOf(t, gs, "app")
			got := committed(t, e.dstAdm, "app")
			if tc.wantErr == "" {
				if st.State != GroupSynced || got[0] != 5 || got[1] != 7 || hits != tc.count {
					t.Errorf("group %+v, destination offsets %v, %d faulted answers; want synced at 5 and 7 after the coordinator answered %s %d times",
						st, got, hits, tc.err.Message, tc.count)
				}
				return
			}
			t.Logf("group status: %s", st.Error)
			if st.State != GroupFailed || !strings.Contains(st.Error, tc.wantErr) || !strings.Contains(st.Error, tc.err.Message) ||
				!strings.Contains(st.Error, "(the coordinator's answer ") || len(got) != 0 {
				t.Errorf("group %+v, destination offsets %v; want failed with %q (%s) and nothing committed", st, got, tc.wantErr, tc.err.Message)
			}
			if took > 30*time.Second {
				t.Errorf("the round took %s with a coordinator that never answers; the patience is %s", took, e.m.coordinatorPatience)
			}
		})
	}
}

// Guards "unknown means left alone": a destination group that the
// DescribeGroups answer leaves out, or answers with an error, is not known
// to be inactive, so nothing is committed to it and its status says why (a
// refusal names the permission that is missing).
// Before the fix, a group left out of the answer was described as a zero
// value (no members, no state) and taken for inactive: its offsets were
// overwritten. Also guards that a group described without a state is left
// alone, and that a group that does not exist (GROUP_ID_NOT_FOUND) is
// synced as Dead.
func TestGroupSyncUnknownGroupLeftAlone(t *testing.T) {
	for _, tc := range []struct {
		name string
		// answer rewrites the destination's answer for group "app"; nil:
		// the broker's own answer.
		answer func(*kmsg.DescribeGroupsResponseGroup) (keep bool)
		// refused: the destination refuses to find the group's
		// coordinator (as Kafka does without Describe on the group).
		refused bool
		wantErr string
	}{
		{name: "left out of the answer", answer: func(*kmsg.DescribeGroupsResponseGroup) bool { return false },
			wantErr: `describe group "app" at the destination: the destination's DescribeGroups answer did not include the group; not knowing whether it is active there, group sync leaves it alone`},
		{name: "answered with an error", answer: func(g *kmsg.DescribeGroupsResponseGroup) bool {
			g.ErrorCode, g.State = kerr.UnknownServerError.Code, ""
			return true
		}, wantErr: `describe group "app" at the destination: UNKNOWN_SERVER_ERROR`},
		{name: "refused", refused: true,
			wantErr: `describe group "app" at the destination: destination cluster "dst" does not allow User:ANONYMOUS Describe on Group:app (` +
				WhyDstGroupDescribe + `; see docs/acls.md): GROUP_AUTHORIZATION_FAILED`},
		{name: "no state", answer: func(g *kmsg.DescribeGroupsResponseGroup) bool {
			g.ErrorCode, g.State = 0, ""
			return true
		}},
		{name: "not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newMoverEnv(t, time.Hour)
			commitAt(t, e.srcAdm, "app", map[int32]int64{0: 5, 1: 7})
			if tc.answer != nil {
				rewriteDescribe(t, e.dst, "app", tc.answer)
			}
			var refusal *kfake.FaultHandle
			if tc.refused {
				refusal = e.dst.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.FindCoordinator}, Group: "app", Err: kerr.GroupAuthorizationFailed, Count: -1})
			}
			gs, err := e.m.SyncGroups(t.Context())
			if err != nil {
				t.Fatalf("round: %v", err)
			}
			if refusal != nil {
				refusal.Remove() // the test's own reads below
			}
			st := statusOf(t, gs, "app")
			got := committed(t, e.dstAdm, "app")
			switch {
			case tc.name == "not found":
				if st.State != GroupSynced || st.DstState != "Dead" || got[0] != 5 || got[1] != 7 {
					t.Errorf("group %+v, destination offsets %v; want a Dead group synced at 5 and 7", st, got)
				}
			case tc.wantErr == "":
				if st.State != GroupActive || len(got) != 0 {
					t.Errorf("group %+v, destination offsets %v; want it left alone (active) with nothing committed", st, got)
				}
			default:
				if st.State != GroupFailed || !strings.Contains(st.Error, tc.wantErr) || len(got) != 0 {
					t.Errorf("group %+v, destination offsets %v; want failed with %q and nothing committed", st, got, tc.wantErr)
				}
			}
		})
	}
}

// rewriteDescribe answers every DescribeGroups of c as a broker that holds
// none of the groups asked for would (Dead; GROUP_ID_NOT_FOUND from
// version 6), with group's answer rewritten by fn (left out when it returns
// false).
func rewriteDescribe(t *testing.T, c *kfake.Cluster, group string, fn func(*kmsg.DescribeGroupsResponseGroup) bool) {
	t.Helper()
	c.ControlKey(int16(kmsg.DescribeGroups), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.DescribeGroupsRequest)
		resp := r.ResponseKind().(*kmsg.DescribeGroupsResponse)
		resp.Version = r.Version
		for _, name := range r.Groups {
			g := kmsg.NewDescribeGroupsResponseGroup()
			g.Group, g.State = name, "Dead"
			if r.Version >= 6 {
				g.ErrorCode = kerr.GroupIDNotFound.Code
			}
			if name == group && !fn(&g) {
				continue
			}
			resp.Groups = append(resp.Groups, g)
		}
		return resp, nil, true
	})
}

// Guards "group sync only in the live session": while this agent's session
// of the link is not the live one (a standby, a fenced or paused link), no
// round commits, periodic or asked for, and the status says why; and a
// session that stops being the live one during a round (fenced while it
// translated) commits nothing in that round. Once live, rounds sync.
func TestGroupSyncOnlyWhileLive(t *testing.T) {
	t.Run("standing by", func(t *testing.T) {
		e := newMoverEnv(t, 20*time.Millisecond)
		e.link.live.Store(false)
		commitAt(t, e.srcAdm, "app", map[int32]int64{0: 5, 1: 7})
		if gs, err := e.m.SyncGroups(t.Context()); !errors.Is(err, ErrNotLive) || len(gs) != 0 {
			t.Errorf("a round asked for while not live: %+v, %v; want ErrNotLive", gs, err)
		}
		time.Sleep(300 * time.Millisecond) // about 15 periodic rounds
		if got := committed(t, e.dstAdm, "app"); len(got) != 0 {
			t.Fatalf("committed %v at the destination while not live", got)
		}
		if st := e.m.GroupSync(); st.Idle == "" || !st.LastRound.IsZero() {
			t.Errorf("status %+v; want idle, and no round", st)
		}
		e.link.live.Store(true)
		deadline := time.Now().Add(time.Minute)
		for got := committed(t, e.dstAdm, "app"); got[0] != 5 || got[1] != 7; got = committed(t, e.dstAdm, "app") {
			if time.Now().After(deadline) {
				t.Fatalf("live for a minute and the destination group is at %v; status %+v", got, e.m.GroupSync())
			}
			time.Sleep(20 * time.Millisecond)
		}
		if st := e.m.GroupSync(); st.Idle != "" || st.LastSuccess.IsZero() {
			t.Errorf("status %+v once live; want a success and not idle", st)
		}
	})
	t.Run("fenced during the round", func(t *testing.T) {
		e := newMoverEnv(t, time.Hour)
		commitAt(t, e.srcAdm, "app", map[int32]int64{0: 5, 1: 7})
		e.link.beforeTranslate = func() { e.link.live.Store(false) }
		gs, err := e.m.SyncGroups(t.Context())
		if err != nil {
			t.Fatalf("round: %v", err)
		}
		st := statusOf(t, gs, "app")
		if got := committed(t, e.dstAdm, "app"); len(got) != 0 || st.State != GroupFailed || !strings.Contains(st.Error, ErrNotLive.Error()) {
			t.Errorf("group %+v, destination offsets %v; want nothing committed and the group failed with %q", st, got, ErrNotLive)
		}
	})
}
