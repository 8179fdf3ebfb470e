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

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/internal/backoff"
	"github.com/seed83556561/mirrord/internal/testkit/realkafka"
)

// TestTakeover measures what an agent SIGKILL costs in each delivery mode,
// with the product's defaults (session_timeout 30s, produce_timeout 30s,
// checkpoint_interval 5s): under a steady load, the agent is killed and
// started again at once, and the stall is the time from the kill until a
// read_committed consumer sees, in every destination partition, a record
// the source received after the kill: the new session's work, and nothing
// the dead agent had in flight. It is a measurement, not an assertion of the
// figures (issue 22's goal: transactional p99 under 10 s); the mirror is
// checked record by record at the end. MIRRORD_TAKEOVER=N runs N kills
// per mode on Kafka 4.x (MIRRORD_TAKEOVER_MODES=transactional: one mode);
// without it the test skips (it is not in CI).
func TestTakeover(t *testing.T) {
	kills, _ := strconv.Atoi(os.Getenv("MIRRORD_TAKEOVER"))
	if kills <= 0 {
		t.Skip("MIRRORD_TAKEOVER=N measures N agent kills per delivery mode")
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
	modes := []string{"transactional", "preserve"}
	if m := os.Getenv("MIRRORD_TAKEOVER_MODES"); m != "" {
		modes = strings.Split(m, ",") // e.g. transactional
	}
	for _, mode := range modes {
		topic, state := "takeover-"+mode, "__mirror_state_"+mode
		if err := env.CreateTopic(ctx, Source, topic, 6, nil); err != nil {
			t.Fatal(err)
		}
		agentDir := t.TempDir()
		agent, err := NewAgent(AgentConfig{Bin: bin, Dir: agentDir, Source: env.Addrs(Source), Dest: env.Addrs(Destination),
			Include: topic, StateTopic: state, Delivery: mode, CheckpointInterval: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := agent.Start(); err != nil {
			t.Fatal(err)
		}
		if err := agent.WaitMirroring(ctx, 3*time.Minute); err != nil {
			t.Fatal(err)
		}
		led := NewLedger()
		load, err := StartLoad(LoadConfig{Addrs: env.Addrs(Source), Topics: []string{topic}, Prefix: mode, Ledger: led, Pause: 200 * time.Millisecond, Records: 20})
		if err != nil {
			t.Fatal(err)
		}
		var stalls []time.Duration
		for i := range kills {
			// A quiet start: the link caught up to within a few seconds.
			quietBy := time.Now().Add(3 * time.Minute)
			for {
				st, err := agent.Status(ctx)
				if err == nil && st.LagSeconds != nil && *st.LagSeconds < 3 {
					break
				}
				if time.Now().After(quietBy) {
					t.Logf("%s kill %d: the link is not caught up (%v); killing anyway", mode, i, err)
					break
				}
				if err := backoff.Sleep(ctx, 200*time.Millisecond); err != nil {
					t.Fatal(err)
				}
			}
			if err := backoff.Sleep(ctx, 3*time.Second); err != nil { // a few commits of steady state
				t.Fatal(err)
			}
			before, err := stableOffsets(ctx, env.Admin(Destination), topic)
			if err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			agent.Kill()
			if err := agent.Start(); err != nil {
				t.Fatal(err)
			}
			// A read_committed consumer from where every partition's
			// committed data ended at the kill: the stall ends when each
			// partition shows a record committed after it (the abort
			// of the dead session's transaction moves the last stable
			// offset too, but shows no record).
			stall, err := firstNewRecords(ctx, env, topic, before, killed, killed, 5*time.Minute)
			if err != nil {
				t.Fatalf("%s kill %d: %v", mode, i, err)
			}
			stalls = append(stalls, stall)
			t.Logf("%s kill %d: records produced after the kill visible to read_committed consumers after %s", mode, i, stall.Round(10*time.Millisecond))
		}
		load.Stop()
		res, err := Check(ctx, env, state, []string{topic}, led, mode == "transactional")
		if err != nil || !res.OK() {
			t.Fatalf("%s: the mirror is not exact: %v %s", mode, err, res)
		}
		agent.Stop()
		slices.Sort(stalls)
		q := func(f float64) time.Duration { return stalls[min(len(stalls)-1, int(f*float64(len(stalls))))] }
		t.Logf("TAKEOVER %s delivery: %d kills, stall p50 %s, p99 %s, max %s; %s",
			mode, len(stalls), q(0.5).Round(10*time.Millisecond), q(0.99).Round(10*time.Millisecond), stalls[len(stalls)-1].Round(10*time.Millisecond), res)
	}
}

// firstNewRecords consumes topic read_committed from the offsets given and
// returns how long after start every partition showed a record produced
// after after (the time the ending agent had exited, so that only the
// agent that took over can have mirrored it: an agent stopped cleanly
// drains and commits what it had fetched, records produced after start
// among them).
func firstNewRecords(ctx context.Context, env *Env, topic string, from map[int32]int64, start, after time.Time, within time.Duration) (time.Duration, error) {
	parts := map[int32]kgo.Offset{}
	for p, o := range from {
		parts[p] = kgo.NewOffset().At(o)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Addrs(Destination)...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	waiting := map[int32]bool{}
	for p := range from {
		waiting[p] = true
	}
	for len(waiting) > 0 {
		if time.Since(start) > within {
			return 0, fmt.Errorf("partitions %v showed no new record within %s", waiting, within)
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			// Produced after the agent ended (the load's producers
			// stamp CreateTime on this machine's clock): its appends
			// still in flight at the end cannot have carried it.
			if r.Timestamp.After(after) {
				delete(waiting, r.Partition)
			}
		})
	}
	return time.Since(start), nil
}

// steadyOffsets lets a few commits of steady state pass, then returns the
// last stable offsets of topic's partitions at the destination: where a
// move's stall is measured from.
func steadyOffsets(t *testing.T, ctx context.Context, env *Env, topic string) map[int32]int64 {
	t.Helper()
	if err := backoff.Sleep(ctx, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	before, err := stableOffsets(ctx, env.Admin(Destination), topic)
	if err != nil {
		t.Fatal(err)
	}
	return before
}

// stableOffsets are the last stable offsets of topic's partitions.
func stableOffsets(ctx context.Context, adm *kadm.Client, topic string) (map[int32]int64, error) {
	offs, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	var firstErr error
	offs.Each(func(o kadm.ListedOffset) {
		if o.Err != nil && firstErr == nil {
			firstErr = fmt.Errorf("%s[%d]: %w", o.Topic, o.Partition, o.Err)
		}
		out[o.Partition] = o.Offset
	})
	return out, firstErr
}
