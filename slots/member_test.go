package slots

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/internal/testkit/faultproxy"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/internal/testkit/mirrortest"
)

// The real-Kafka subtests share one broker per version (mirrortest).
func TestMain(m *testing.M) { os.Exit(mirrortest.Main(m)) }

// event is one Handler call, in the order the timeline saw them.
type event struct {
	member, kind string // kind: assigned, revoking, revoked, lost
	slots        []int
	at           time.Time
}

// timeline records every member's Handler calls under one lock, so that
// their order across members is the order they happened in.
type timeline struct {
	mu  sync.Mutex
	evs []event
}

func (tl *timeline) add(member, kind string, s []int) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.evs = append(tl.evs, event{member, kind, slices.Clone(s), time.Now()})
}

func (tl *timeline) events() []event {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return slices.Clone(tl.evs)
}

// handler records its member's calls; a revoke takes revokeTime, as a
// clean stop with its final checkpoint does.
type handler struct {
	name       string
	tl         *timeline
	revokeTime time.Duration
}

func (h *handler) Assigned(_ context.Context, s []int) { h.tl.add(h.name, "assigned", s) }

func (h *handler) Revoked(_ context.Context, s []int) {
	h.tl.add(h.name, "revoking", s)
	time.Sleep(h.revokeTime)
	h.tl.add(h.name, "revoked", s)
}

func (h *handler) Lost(s []int) { h.tl.add(h.name, "lost", s) }

// exclusive checks the timeline: a slot is assigned to a member only after
// the member that had it gave it up (revoked, done, or lost), never to
// two at once.
func exclusive(t *testing.T, evs []event) {
	t.Helper()
	owner := map[int]string{}
	for _, e := range evs {
		for _, s := range e.slots {
			switch e.kind {
			case "assigned":
				if o, ok := owner[s]; ok {
					t.Errorf("slot %d assigned to %s at %s while %s still had it", s, e.member, e.at.Format("15:04:05.000"), o)
				}
				owner[s] = e.member
			case "revoked", "lost":
				if owner[s] != e.member {
					t.Errorf("slot %d %s by %s, which did not have it (owner %q)", s, e.kind, e.member, owner[s])
				}
				delete(owner, s)
			}
		}
	}
}

// spread waits until the members own every slot between them, each
// slots/len(ms) (±1), none owned twice.
func spread(t *testing.T, n int, within time.Duration, ms map[string]*Member) time.Duration {
	t.Helper()
	start := time.Now()
	var last string
	for time.Since(start) < within {
		seen := map[int]bool{}
		ok := true
		var parts []string
		for name, m := range ms {
			o := m.Owned()
			parts = append(parts, fmt.Sprintf("%s=%v", name, o))
			if len(o) < n/len(ms) || len(o) > (n+len(ms)-1)/len(ms) {
				ok = false
			}
			for _, s := range o {
				if seen[s] {
					ok = false
				}
				seen[s] = true
			}
		}
		if ok && len(seen) == n {
			return time.Since(start)
		}
		slices.Sort(parts)
		last = strings.Join(parts, " ")
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the slots did not spread over %d members within %s: %s", len(ms), within, last)
	return 0
}

// Several members of one slots group, on kfake and Apache Kafka: they
// share the slots evenly, a clean leave moves its slots only after they
// were revoked (stopped), a member cut off from the cluster gives its
// slots up (lost) before the coordinator gives them to the others, and
// comes back for a share; no slot is ever held by two members.
func TestMembers(t *testing.T) {
	mirrortest.Each(t, func(t *testing.T, b mirrortest.Backend) {
		const n = 6
		names := mirrortest.NamesFor(t, b)
		c := mirrortest.NewCluster(t, b, "state", kafkatest.DestClusterID)
		session := 6 * time.Second // Kafka's group.min.session.timeout.ms
		cfg := Config{Group: names.Of("mirrord.l.slots"), Topic: names.Of("__mirror_slots.l"), Slots: n, SessionTimeout: session}
		tl := &timeline{}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		members := map[string]*Member{}
		join := func(name string, opts []kgo.Opt) *Member {
			t.Helper()
			mc := cfg
			mc.Logger = hclog.New(&hclog.LoggerOptions{Name: name, Output: testWriter{t}, DisableTime: true})
			m, err := Join(ctx, mc, opts, &handler{name: name, tl: tl, revokeTime: 200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = m.Leave(context.Background()) })
			members[name] = m
			return m
		}
		leave := func(name string) {
			t.Helper()
			if err := members[name].Leave(ctx); err != nil {
				t.Fatal(err)
			}
			delete(members, name)
		}

		join("a", c.Opts())
		t.Logf("one member owns all %d slots after %s", n, spread(t, n, time.Minute, members).Round(time.Millisecond))
		join("b", c.Opts())
		join("c", c.Opts())
		t.Logf("three members share them after %s", spread(t, n, time.Minute, members).Round(time.Millisecond))
		leave("b")
		t.Logf("b left cleanly; a and c share them after %s", spread(t, n, time.Minute, members).Round(time.Millisecond))

		// d reaches the cluster through a proxy, which then stalls:
		// nothing in either direction, as behind a network partition.
		brokers, err := faultproxy.Brokers(ctx, c.Client)
		if err != nil {
			t.Fatal(err)
		}
		p := faultproxy.Start(t, brokers)
		d := join("d", []kgo.Opt{kgo.SeedBrokers(p.Addrs()...)})
		spread(t, n, time.Minute, members)
		had := d.Owned()
		cut := time.Now()
		for _, node := range p.Nodes() {
			p.Stall(node)
		}
		delete(members, "d")
		moved := spread(t, n, time.Minute, members)
		var lostAt time.Time
		for _, e := range tl.events() {
			if e.member == "d" && e.kind == "lost" && e.at.After(cut) {
				lostAt = e.at
			}
		}
		if lostAt.IsZero() {
			t.Fatalf("d, cut off, never gave up its slots %v (no Lost) while the others took them", had)
		}
		t.Logf("d cut off with slots %v: it gave them up after %s; a and c own all after %s (session timeout %s)",
			had, lostAt.Sub(cut).Round(time.Millisecond), moved.Round(time.Millisecond), session)
		for _, node := range p.Nodes() {
			p.Resume(node)
		}
		members["d"] = d
		t.Logf("d back: the three share them after %s", spread(t, n, 2*time.Minute, members).Round(time.Millisecond))
		for name, m := range members {
			if m.Rebalances() == 0 {
				t.Errorf("%s counted no rebalance", name)
			}
			// Only the member cut off gave slots up: the others'
			// rebalances never left them without an answer long
			// enough for the watchdog.
			if l := m.Losses(); name == "d" && l == 0 || name != "d" && l != 0 {
				t.Errorf("%s gave its slots up %d times", name, l)
			}
		}
		for _, name := range []string{"a", "c", "d"} {
			leave(name)
		}
		evs := tl.events()
		exclusive(t, evs)
		for _, e := range evs {
			t.Logf("%s %s %s %v", e.at.Format("15:04:05.000"), e.member, e.kind, e.slots)
		}
	})
}

// A slots topic with another partition count than the link's slots (an
// agent started with another slots value) is refused with what to do.
func TestJoinRefusesOtherSlots(t *testing.T) {
	c := mirrortest.NewCluster(t, mirrortest.Backend{}, "state", kafkatest.DestClusterID)
	c.CreateTopic(t, "__mirror_slots.l", 4, nil)
	_, err := Join(context.Background(), Config{Group: "g", Topic: "__mirror_slots.l", Slots: 6}, c.Opts(), &handler{tl: &timeline{}})
	if err == nil || !strings.Contains(err.Error(), "has 4 partitions, but the link has 6 slots") {
		t.Fatalf("Join = %v, want the refusal of a slots topic with 4 partitions", err)
	}
	if _, err := Join(context.Background(), Config{Group: "g", Topic: "t", Slots: 0}, c.Opts(), &handler{tl: &timeline{}}); err == nil {
		t.Fatal("Join with 0 slots succeeded")
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// A member whose settings differ from those of the members that own the
// slots joins the group but gets no slot, and the leader logs it with its
// agent's name: an agent started with another configuration stands idle
// instead of taking slots it would refuse to run (before, it was given
// its share and each of those slots stayed FAILED). Once every member
// with the old settings left, it takes every slot (a change of settings,
// rolled). A member without settings in its metadata (an agent of an
// earlier version) is given slots as before.
func TestMembersWithOtherSettings(t *testing.T) {
	mirrortest.Each(t, func(t *testing.T, b mirrortest.Backend) {
		const n = 4
		names := mirrortest.NamesFor(t, b)
		c := mirrortest.NewCluster(t, b, "state", kafkatest.DestClusterID)
		cfg := Config{Group: names.Of("mirrord.s.slots"), Topic: names.Of("__mirror_slots.s"), Slots: n, SessionTimeout: 6 * time.Second}
		tl := &timeline{}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		var logs strings.Builder
		var logMu sync.Mutex
		members := map[string]*Member{}
		join := func(name, fp string) *Member {
			t.Helper()
			mc := cfg
			mc.Fingerprint, mc.Agent = fp, name
			mc.Logger = hclog.New(&hclog.LoggerOptions{Name: name, Output: lockedWriter{&logMu, &logs, testWriter{t}}, DisableTime: true})
			m, err := Join(ctx, mc, c.Opts(), &handler{name: name, tl: tl, revokeTime: 100 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = m.Leave(context.Background()) })
			members[name] = m
			return m
		}
		join("a", "old")
		join("b", "old")
		spread(t, n, time.Minute, members)
		odd := join("c", "new")
		// c joined: the group rebalanced; a and b keep every slot.
		delete(members, "c")
		deadline := time.Now().Add(time.Minute)
		for {
			logMu.Lock()
			// The leader names c, and c says why it has no slot.
			logged := strings.Contains(logs.String(), "runs the link with other settings and gets no slot") && strings.Contains(logs.String(), "agent=c") &&
				strings.Contains(logs.String(), "c: slots group: this agent runs the link with other settings")
			logMu.Unlock()
			if logged {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("neither the leader nor c logged that c runs other settings within a minute; c owns %v", odd.Owned())
			}
			time.Sleep(20 * time.Millisecond)
		}
		spread(t, n, time.Minute, members)
		time.Sleep(2 * time.Second) // a rebalance that would give c slots has had time
		if o := odd.Owned(); len(o) != 0 {
			t.Errorf("c, with other settings, owns slots %v", o)
		}
		spread(t, n, time.Minute, members)
		// An agent of an earlier version (no settings) shares them.
		join("d", "")
		spread(t, n, time.Minute, members)
		// The members with the old settings leave: c takes the slots, d
		// keeps its share.
		for _, name := range []string{"a", "b"} {
			if err := members[name].Leave(ctx); err != nil {
				t.Fatal(err)
			}
			delete(members, name)
		}
		members["c"] = odd
		spread(t, n, time.Minute, members)
		for _, name := range []string{"c", "d"} {
			if err := members[name].Leave(ctx); err != nil {
				t.Fatal(err)
			}
		}
		exclusive(t, tl.events())
	})
}

// lockedWriter writes to both under mu.
type lockedWriter struct {
	mu  *sync.Mutex
	buf *strings.Builder
	w   testWriter
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.buf.Write(p)
	l.mu.Unlock()
	return l.w.Write(p)
}
