package faults

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed83556561/mirrord/internal/backoff"
	"github.com/seed83556561/mirrord/internal/testkit/faultproxy"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/internal/testkit/realkafka"
	"github.com/seed83556561/mirrord/link"
)

// slotCount is the slots of TestSlottedAgents' link.
const slotCount = 6

// TestSlottedAgents runs one link with slots = 6 in three agents, each a
// process of its own, under a steady load, in each delivery mode (issue
// 24): the agents share the slots through the link's slots group. An agent
// is SIGKILLed (its slots move to the others when the group's session
// times out), another stopped cleanly (its slots move at once), in
// transactional delivery one cut off the destination by a network
// partition (partition: its slots move, its late writes are fenced), a
// fourth added and one removed, and all are stopped and started again; after
// each, every slot must have exactly one owner, MIRRORING. Each slot that
// moves after a crash or clean stop is checked in its new owner's log
// ("taking over the slot", with the cause); no agent may log a fenced
// session; at the end the destination holds every committed source record
// exactly once, in order, record by record. The stall of each move (from
// the kill or stop until a read_committed consumer sees, in every
// destination partition, a record produced after the agent exited) is
// reported per cause and mode: a measurement, not an assertion.
//
// On kfake (clusters of three brokers in the test's process) it runs in
// every test run (CI's kfake tier); on Kafka 4.4.0 (two clusters of three
// brokers) with MIRRORD_THREE_AGENTS set (any value), which CI's real tier
// sets for this test.
func TestSlottedAgents(t *testing.T) {
	modes := []string{"transactional", "preserve"}
	if m := os.Getenv("MIRRORD_THREE_AGENTS_MODES"); m != "" {
		modes = strings.Split(m, ",")
	}
	run := func(t *testing.T, env *Env) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
		defer cancel()
		bin, err := BuildAgent(ctx, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		var table []string
		for _, mode := range modes {
			table = append(table, slottedAgents(t, ctx, env, bin, mode)...)
		}
		t.Logf("SLOTTED AGENTS stall per move (from the kill or stop until every destination partition shows a record produced after the agent exited):\n%s", strings.Join(table, "\n"))
	}
	t.Run("kfake", func(t *testing.T) {
		if os.Getenv(kafkatest.RealTierEnv) == "real" {
			t.Skipf("a kfake test: it ran in the kfake tier (%s=real)", kafkatest.RealTierEnv)
		}
		env, err := StartKfakeEnv()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(env.Close)
		run(t, env)
	})
	t.Run("kafka-"+realkafka.Kafka4, func(t *testing.T) {
		if os.Getenv("MIRRORD_THREE_AGENTS") == "" {
			t.Skip("MIRRORD_THREE_AGENTS=N runs it on Kafka")
		}
		if vs := realkafka.TestVersions(t); !slices.Contains(vs, realkafka.Kafka4) {
			t.Skipf("runs on Kafka %s; MIRRORD_TEST_KAFKA selects %v", realkafka.Kafka4, vs)
		}
		realkafka.RequireTools(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		env, err := StartEnv(ctx, EnvConfig{Version: realkafka.Kafka4})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(env.Close)
		run(t, env)
	})
}

// partitioned is the agent of TestSlottedAgents that reaches the
// destination through a fault proxy.
const partitioned = "pod-2"

// partition cuts the agent partitioned off the destination (every
// connection through px cut, as a network partition would: the requests it
// sent wait, and reach the brokers when the partition heals unless the
// agent reset their connection first), where the link keeps its state and
// the slots group lives. Its slots must move to the others, and it must
// have given them up before they did (no slot has two MIRRORING owners,
// "slots lost" logged) when its group membership could not be proven. Its
// appends in flight must never land after the others took its slots over
// (the final check finds every record once): in preserve delivery the
// broker fences nothing, and what keeps them out is that the agent gives
// up an append when its lease lapses at the latest (which the new owner
// waits out) and resets the connection that carried it (SO_LINGER 0,
// internal/kafka/dial), which drops what the partition held; in
// transactional delivery the new owners' InitProducerId also fences them.
// When the partition heals the agent joins again and gets its share. It
// returns the stall: from the cut until every destination partition shows
// a record produced after it.
func partition(t *testing.T, ctx context.Context, env *Env, h *haAgents, px *faultproxy.Proxy, topic, mode string) time.Duration {
	t.Helper()
	before := steadyOffsets(t, ctx, env, topic)
	cut := h.byName[partitioned]
	sts, err := cut.Statuses(ctx)
	if err != nil || len(sts) == 0 {
		t.Fatalf("%s: %s owns no slot before the partition (%v): %+v", mode, partitioned, err, sts)
	}
	began := time.Now()
	for _, n := range px.Nodes() {
		px.Cut(n)
	}
	healed := false
	heal := func() {
		if !healed {
			for _, n := range px.Nodes() {
				px.Resume(n)
			}
			healed = true
		}
	}
	defer heal()
	// The others must own every slot, and the agent cut off none.
	h.running[partitioned] = false
	own, err := h.owners(ctx, 2*time.Minute)
	if err != nil {
		t.Fatalf("%s: %s cut off the destination: the others do not take its slots: %v", mode, partitioned, err)
	}
	moved := time.Since(began)
	if sts, err := cut.Statuses(ctx); err != nil {
		t.Errorf("%s: %s cut off the destination does not answer for its slots: %v", mode, partitioned, err)
	} else {
		for _, st := range sts {
			if st.State == link.Mirroring && st.Slot != nil {
				t.Errorf("%s: %s cut off the destination still runs slot %d MIRRORING while %s owns it", mode, partitioned, *st.Slot, own[*st.Slot])
			}
		}
	}
	stall, err := firstNewRecords(ctx, env, topic, before, began, began, 5*time.Minute)
	if err != nil {
		t.Fatalf("%s: network partition of %s: %v", mode, partitioned, err)
	}
	lost, err := cut.LogLines("slots lost")
	if err != nil || len(lost) == 0 {
		t.Errorf("%s: %s cut off the destination did not log that it gave its slots up (slots lost): %v", mode, partitioned, err)
	}
	heal()
	h.running[partitioned] = true
	t.Logf("%s: network partition of %s from the destination: the others owned every slot, MIRRORING, after %s (%v); records produced after the cut at the destination %s after it",
		mode, partitioned, moved.Round(10*time.Millisecond), own, stall.Round(10*time.Millisecond))
	return stall
}

// slotOwners is who owns which slot, as the running agents' /v1/links say.
type slotOwners map[int]string

// owners waits until the running agents own every slot exactly once, each
// MIRRORING, and returns who owns which.
func (h *haAgents) owners(ctx context.Context, within time.Duration) (slotOwners, error) {
	deadline := time.Now().Add(within)
	var last string
	for time.Now().Before(deadline) {
		own, problem := slotOwners{}, ""
		for _, name := range slices.Sorted(maps.Keys(h.byName)) {
			if !h.running[name] {
				continue
			}
			sts, err := h.byName[name].Statuses(ctx)
			if err != nil {
				problem = fmt.Sprintf("%s: %v", name, err)
				break
			}
			for _, st := range sts {
				if st.Slot == nil {
					return nil, fmt.Errorf("%s: a status without a slot: %+v", name, st)
				}
				if other, dup := own[*st.Slot]; dup {
					h.races++
					h.t.Logf("slot %d is run by %s and %s at once", *st.Slot, other, name)
					problem = fmt.Sprintf("slot %d run by %s and %s", *st.Slot, other, name)
				}
				own[*st.Slot] = name
				if st.State != link.Mirroring && problem == "" {
					problem = fmt.Sprintf("slot %d at %s: %s, last error %q", *st.Slot, name, st.State, st.LastError)
				}
			}
		}
		// Settled: the group spread the slots (cooperative-sticky: the
		// first agent to join takes all of them, and later rebalances
		// hand some on), each running agent owning its share.
		running := 0
		for name := range h.byName {
			if h.running[name] {
				running++
			}
		}
		if problem == "" && running > 0 {
			for name := range h.byName {
				if h.running[name] && len(own.of(name)) < slotCount/running {
					problem = fmt.Sprintf("owners %v: %s owns fewer than %d", own, name, slotCount/running)
				}
			}
		}
		if problem == "" && len(own) == slotCount {
			return own, nil
		}
		if problem == "" {
			problem = fmt.Sprintf("owners %v", own)
		}
		last = problem
		if err := backoff.Sleep(ctx, 100*time.Millisecond); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("the slots have no single MIRRORING owner each within %s: %s", within, last)
}

// of returns the slots name owns.
func (o slotOwners) of(name string) []int {
	var out []int
	for s, n := range o {
		if n == name {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// slottedAgents runs the test in one delivery mode.
func slottedAgents(t *testing.T, ctx context.Context, env *Env, bin, mode string) []string {
	topic, state := "slots-"+mode, "__mirror_state_slots_"+mode
	if err := env.CreateTopic(ctx, Source, topic, 12, nil); err != nil {
		t.Fatal(err)
	}
	h := &haAgents{t: t, byName: map[string]*Agent{}, running: map[string]bool{}}
	// pod-2 reaches the destination through a fault proxy, for the network
	// partition below.
	brokers, err := faultproxy.Brokers(ctx, env.Client(Destination))
	if err != nil {
		t.Fatal(err)
	}
	px := faultproxy.Start(t, brokers)
	for i := range 4 {
		name := fmt.Sprintf("pod-%d", i)
		dest := env.Addrs(Destination)
		if name == partitioned {
			dest = px.Addrs()
		}
		// The group's session timeout is the link's session_timeout: at
		// least the brokers' group.min.session.timeout.ms (6 s).
		a, err := NewAgent(AgentConfig{Bin: bin, Dir: t.TempDir(), Name: name, Source: env.Addrs(Source), Dest: dest,
			Include: topic, StateTopic: state, Delivery: mode, ProduceTimeout: 2 * time.Second,
			LinkExtra: fmt.Sprintf("  session_timeout = \"6s\"\n  slots = %d\n", slotCount)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(a.Stop)
		h.byName[name] = a
	}
	for _, name := range []string{"pod-0", "pod-1", "pod-2"} {
		h.start(name)
	}
	own, err := h.owners(ctx, 3*time.Minute)
	if err != nil {
		t.Fatalf("%s: %v", mode, err)
	}
	t.Logf("%s: three agents: %v", mode, own)
	led := NewLedger()
	load, err := StartLoad(LoadConfig{Addrs: env.Addrs(Source), Topics: []string{topic}, Prefix: "slots-" + mode, Ledger: led, Pause: 200 * time.Millisecond, Records: 20})
	if err != nil {
		t.Fatal(err)
	}
	stalls := map[string][]time.Duration{}
	// move ends an agent (kill or stop), measures the stall, and checks
	// that its slots moved to the others with the cause logged.
	move := func(cause, victim string, end func(string)) {
		t.Helper()
		before := steadyOffsets(t, ctx, env, topic)
		moved := own.of(victim)
		began := time.Now()
		end(victim)
		stall, err := firstNewRecords(ctx, env, topic, before, began, time.Now(), 5*time.Minute)
		if err != nil {
			t.Fatalf("%s %s of %s: %v", mode, cause, victim, err)
		}
		if own, err = h.owners(ctx, 2*time.Minute); err != nil {
			t.Fatalf("%s %s of %s: %v", mode, cause, victim, err)
		}
		stalls[cause] = append(stalls[cause], stall)
		want := map[string]string{"crash": "", "clean stop": "its session stopped cleanly"}[cause]
		var when []string
		for _, s := range moved {
			owner := own[s]
			lines, err := h.byName[owner].LogSince(began)
			slot := fmt.Sprintf(" slot=%d ", s)
			took := slices.IndexFunc(lines, func(l string) bool {
				return strings.Contains(l, "taking over the slot") && strings.Contains(l, slot) &&
					strings.Contains(l, "from_agent="+victim+" ") && strings.Contains(l, want)
			})
			if took < 0 {
				t.Errorf("%s %s of %s: %s took slot %d without logging it with cause %q (%v):\n%s", mode, cause, victim, owner, s, want, err, strings.Join(lines, "\n"))
				continue
			}
			// When the new owner was given the slot, logged the
			// takeover and reached MIRRORING, from the kill or stop:
			// what the stall is made of.
			at := func(match func(string) bool) string {
				for _, l := range lines {
					if match(l) {
						if ts, err := time.Parse("15:04:05.000", l[:min(len(l), 12)]); err == nil {
							b := began.UTC()
							return ts.Sub(time.Date(0, 1, 1, b.Hour(), b.Minute(), b.Second(), b.Nanosecond(), time.UTC)).Round(10 * time.Millisecond).String()
						}
					}
				}
				return "?"
			}
			when = append(when, fmt.Sprintf("slot %d at %s: assigned %s, took over %s, MIRRORING %s", s, owner,
				at(func(l string) bool { return strings.Contains(l, "slots assigned") }),
				at(func(l string) bool { return strings.Contains(l, "taking over the slot") && strings.Contains(l, slot) }),
				at(func(l string) bool { return strings.Contains(l, "to=MIRRORING") && strings.Contains(l, slot) })))
		}
		t.Logf("%s: %s of %s: %s", mode, cause, victim, strings.Join(when, "; "))
		t.Logf("%s: %s of %s (slots %v): now %v; records produced after it exited at the destination %s after it",
			mode, cause, victim, moved, own, stall.Round(10*time.Millisecond))
		h.start(victim) // back: the group shares the slots again
		if own, err = h.owners(ctx, 2*time.Minute); err != nil {
			t.Fatalf("%s: %s started again after its %s: %v", mode, victim, cause, err)
		}
	}
	move("crash", own[0], h.kill) // the owner of slot 0, which does the link-wide work
	move("clean stop", own[slotCount-1], h.stop)
	stalls["network partition"] = append(stalls["network partition"], partition(t, ctx, env, h, px, topic, mode))
	if own, err = h.owners(ctx, 2*time.Minute); err != nil {
		t.Fatalf("%s: after the network partition healed: %v", mode, err)
	}
	// An agent added takes slots; one removed hands its slots on.
	h.start("pod-3")
	if own, err = h.owners(ctx, 2*time.Minute); err != nil {
		t.Fatalf("%s: after pod-3 joined: %v", mode, err)
	}
	t.Logf("%s: four agents: %v", mode, own)
	h.stop("pod-1")
	if own, err = h.owners(ctx, 2*time.Minute); err != nil {
		t.Fatalf("%s: after pod-1 left: %v", mode, err)
	}
	// All stopped, all started again.
	before, err := stableOffsets(ctx, env.Admin(Destination), topic)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	var back []string
	for _, name := range slices.Sorted(maps.Keys(h.byName)) {
		if h.running[name] {
			h.stop(name)
			back = append(back, name)
		}
	}
	stopped := time.Now()
	for _, name := range back {
		h.start(name)
	}
	restart, err := firstNewRecords(ctx, env, topic, before, began, stopped, 5*time.Minute)
	if err != nil {
		t.Fatalf("%s: restart of all: %v", mode, err)
	}
	if own, err = h.owners(ctx, 2*time.Minute); err != nil {
		t.Fatalf("%s: restart of all: %v", mode, err)
	}
	t.Logf("%s: all %d agents stopped and started: %v; records produced after it at the destination after %s", mode, len(back), own, restart.Round(10*time.Millisecond))

	load.Stop()
	res, err := Check(ctx, env, state, []string{topic}, led, mode == "transactional")
	if err != nil || !res.OK() {
		t.Fatalf("%s: the mirror is not exact: %v %s", mode, err, res)
	}
	t.Logf("%s: %s", mode, res)
	for name, a := range h.byName {
		fenced, err := a.LogLines("link session fenced")
		if err != nil {
			t.Fatal(err)
		}
		if len(fenced) > 0 {
			t.Errorf("%s: %s logged %d fenced sessions; the first: %v", mode, name, len(fenced), fenced[0])
		}
	}
	for name := range h.byName {
		if h.running[name] {
			h.stop(name)
		}
	}
	var rows []string
	for _, cause := range []string{"crash", "clean stop", "network partition"} {
		if len(stalls[cause]) > 0 {
			rows = append(rows, fmt.Sprintf("  %s delivery, %s: %s", mode, cause, FiguresOf(stalls[cause])))
		}
	}
	rows = append(rows, fmt.Sprintf("  %s delivery, restart of all: %s; polls that saw a slot run twice: %d; %s", mode, restart.Round(10*time.Millisecond), h.races, res))
	return rows
}
