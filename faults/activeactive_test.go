package faults

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seed83556561/mirrord/internal/testkit/realkafka"
	"github.com/seed83556561/mirrord/link"
)

// TestActiveActiveKills runs links in both directions over the same topic
// names (README, "Active-active and failback") as two agent processes on
// three-broker Kafka 4.x clusters, under the mixed load at both ends (every
// producer kind, aborts included), and SIGKILLs each agent in turn and
// starts it again. At the end each cluster must hold its own records and
// the other's once: every record of an idempotent or transactional
// producer exactly as often at both clusters (once if acknowledged, never
// if aborted), records of plain producers only where they were written
// (unattributed = "skip"), nothing else. MIRRORD_ACTIVE_ACTIVE=N kills
// each agent N times; without it the test skips (.ci/run runs N=1 in
// transactional delivery; TestActiveActive crashes a link in process on
// Kafka 4.4.0 and 3.9.2). MIRRORD_ACTIVE_ACTIVE_DELIVERY=transactional
// runs both links in transactional delivery.
func TestActiveActiveKills(t *testing.T) {
	kills, _ := strconv.Atoi(os.Getenv("MIRRORD_ACTIVE_ACTIVE"))
	if kills <= 0 {
		t.Skip("MIRRORD_ACTIVE_ACTIVE=N kills each of the two agents N times")
	}
	vs := realkafka.TestVersions(t)
	if !slices.Contains(vs, realkafka.Kafka4) {
		t.Skipf("runs on Kafka %s; MIRRORD_TEST_KAFKA selects %v", realkafka.Kafka4, vs)
	}
	realkafka.RequireTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin, err := BuildAgent(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	env, err := StartEnv(ctx, EnvConfig{Version: realkafka.Kafka4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	const topic, state = "both", "__mirror_state_aa"
	for _, s := range []Side{Source, Destination} {
		if err := env.CreateTopic(ctx, s, topic, 6, nil); err != nil {
			t.Fatal(err)
		}
	}
	extra := "  unattributed = \"skip\"\n  shared_destination = true\n  session_timeout = \"10s\"\n"
	switch d := os.Getenv("MIRRORD_ACTIVE_ACTIVE_DELIVERY"); d {
	case "", "preserve":
	case "transactional":
		extra += "  delivery = \"transactional\"\n"
	default:
		t.Fatalf("MIRRORD_ACTIVE_ACTIVE_DELIVERY=%q: use preserve or transactional", d)
	}
	// A takeover slower than this gets the restarted agent's log in the
	// test's output: a transactional session fences at once; a preserve
	// one waits out the 10 s lease plus produce_timeout and settles.
	slow := 90 * time.Second
	if strings.Contains(extra, "transactional") {
		slow = 15 * time.Second
	}
	sides := [2]Side{Source, Destination} // A, B
	var agents [2]*Agent
	for i, from := range sides {
		to := sides[1-i]
		a, err := NewAgent(AgentConfig{Bin: bin, Dir: t.TempDir(), Source: env.Addrs(from), Dest: env.Addrs(to),
			Include: topic, StateTopic: state,
			LinkExtra: extra})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(a.Stop)
		agents[i] = a
	}
	for _, a := range agents {
		if err := a.WaitMirroring(ctx, 3*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	var leds [2]*Ledger
	var loads [2]*Load
	for i, s := range sides {
		leds[i] = NewLedger()
		if loads[i], err = StartLoad(LoadConfig{Addrs: env.Addrs(s), Topics: []string{topic}, Prefix: "at-" + s.String(),
			Ledger: leds[i], Pause: 300 * time.Millisecond, Records: 20}); err != nil {
			t.Fatal(err)
		}
	}
	var back []time.Duration
	for k := range 2 * kills {
		time.Sleep(5 * time.Second)
		a := agents[k%2]
		a.Kill()
		killed := time.Now()
		time.Sleep(2 * time.Second)
		if err := a.Start(); err != nil {
			t.Fatal(err)
		}
		if err := a.WaitMirroring(ctx, 3*time.Minute); err != nil {
			t.Fatal(err)
		}
		back = append(back, time.Since(killed))
		if time.Since(killed) > slow {
			lines, err := a.LogSince(killed)
			t.Logf("kill %d: MIRRORING again only after %.1fs; the agent's log since the kill (%v):\n%s", k+1, time.Since(killed).Seconds(), err, strings.Join(lines, "\n"))
		}
		t.Logf("kill %d (agent %s→%s): MIRRORING again %.1fs after the kill", k+1, sides[k%2], sides[1-k%2], time.Since(killed).Seconds())
	}
	time.Sleep(5 * time.Second)
	for i, l := range loads {
		l.Stop()
		n, last := l.Errors()
		t.Logf("load at the %s: %d rounds, %d with an error (last: %v)", sides[i], l.Rounds(), n, last)
	}
	for range 2 { // the links append to each other's sources: twice in a row
		for i, a := range agents {
			if err := waitAgentCaughtUp(ctx, env, a, sides[i], topic, 5*time.Minute); err != nil {
				t.Fatal(err)
			}
		}
	}
	var held [2]map[string]int
	for i, s := range sides {
		leds[i].mu.Lock()
		want := len(leds[i].acked) // at least what was acknowledged at that side
		leds[i].mu.Unlock()
		if held[i], err = readAll(ctx, env.Addrs(s), []string{topic}, want); err != nil {
			t.Fatal(err)
		}
	}
	checked, bad := 0, 0
	report := func(format string, args ...any) {
		if bad++; bad <= 10 {
			t.Errorf(format, args...)
		}
	}
	known := map[string]bool{}
	for i, led := range leds {
		led.mu.Lock()
		for _, m := range []map[string]bool{led.acked, led.aborted, led.uncertain} {
			for k := range m {
				known[k] = true
				checked++
				own, other := held[i][k], held[1-i][k]
				plain := strings.Contains(k, "-plain-")
				switch {
				case plain && other != 0:
					report("%s: a record without a producer ID written at the %s is at the %s %d times (unattributed = \"skip\")", k, sides[i], sides[1-i], other)
				case plain && led.acked[k] && own == 0:
					report("%s: acknowledged at the %s, not there", k, sides[i])
				case !plain && led.acked[k] && (own != 1 || other != 1):
					report("%s: acknowledged at the %s; held %d times there, %d at the %s; want once each", k, sides[i], own, other, sides[1-i])
				case !plain && led.aborted[k] && (own != 0 || other != 0):
					report("%s: aborted at the %s; held %d times there, %d at the %s", k, sides[i], own, other, sides[1-i])
				case !plain && led.uncertain[k] && (own > 1 || own != other):
					report("%s: uncertain at the %s; held %d times there, %d at the %s; want the same, at most once", k, sides[i], own, other, sides[1-i])
				}
			}
		}
		led.mu.Unlock()
	}
	for i, m := range held {
		for k := range m {
			if !known[k] {
				report("%s: at the %s, produced by nobody", k, sides[i])
			}
		}
	}
	var counts []string
	for i, s := range sides {
		st, err := agents[i].Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c := st.Counters
		counts = append(counts, fmt.Sprintf("%s→%s: mirrored %d records, %d batches not sent home, %d unattributed skipped",
			s, sides[1-i], c.Get(link.RecordsMirrored), c.Get(link.BatchesReturnedHome), c.Get(link.BatchesUnattributedSkipped)))
	}
	slices.Sort(back)
	t.Logf("%d records checked at both clusters, %d wrong; back to MIRRORING after a kill: p50 %.1fs, max %.1fs; %s",
		checked, bad, back[len(back)/2].Seconds(), back[len(back)-1].Seconds(), strings.Join(counts, "; "))
}

// waitAgentCaughtUp waits until the agent's link has mirrored every
// partition of topic up to the end its source (side) has now.
func waitAgentCaughtUp(ctx context.Context, env *Env, a *Agent, side Side, topic string, within time.Duration) error {
	ends, err := env.Admin(side).ListEndOffsets(ctx, topic)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(within)
	for {
		st, err := a.Status(ctx)
		behind := -1
		if err == nil && len(st.Partitions) > 0 {
			behind = 0
			for _, p := range st.Partitions {
				if end, ok := ends.Lookup(p.SourceTopic, p.Partition); !ok || p.SourceNextOffset < end.Offset {
					behind++
				}
			}
		}
		if behind == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the link from the %s did not catch up within %s (%d partitions behind, status error %w)", side, within, behind, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
