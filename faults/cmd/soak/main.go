// Command soak runs mirrord under random broker and agent faults for a long
// time (issue 11): two real Kafka clusters of three nodes each, the mirrord
// binary between them, a mixed load on the source, and every pause a random
// fault (a broker SIGKILLed, a rolling restart, a preferred-leader election,
// a reassignment, the destination below min.insync.replicas, the state
// topic's leader killed, the agent SIGKILLed alone or with a broker). At the
// end the destination is checked record by record and key by key, and the
// report gives the stall figures of every leader move.
//
//	go run ./faults/cmd/soak                      # 30 minutes on Kafka 4.4.0
//	go run ./faults/cmd/soak -duration 2h -pause 30s -report soak.txt
//	go run ./faults/cmd/soak -agents 3 -slots 6   # three agents sharing the link
//	go run ./faults/cmd/soak -agents 3 -slots 6 -agent-faults-only -duration 15m
//
// It needs java (17 or later) and mvn, as the real-Kafka test tier does, and
// exits 0 when the mirror is exact, 1 when it is not or a fault failed, 2 on
// bad flags. Its goroutines are the fault package's (the load's producers
// and the watcher), each stopped and waited for by run before it returns.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/seed83556561/mirrord/faults"
	"github.com/seed83556561/mirrord/internal/testkit/realkafka"
)

func main() { os.Exit(soak(os.Args[1:])) }

func soak(args []string) int {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	duration := fs.Duration("duration", 30*time.Minute, "how long faults are made (the check and the start come on top)")
	pause := fs.Duration("pause", 20*time.Second, "the least time between two faults (a random as much again is added)")
	version := fs.String("kafka", realkafka.Kafka4, "Kafka version of both clusters")
	seed := fs.Uint64("seed", uint64(time.Now().UnixNano()), "seed of the random faults (printed, to repeat a run)")
	reportPath := fs.String("report", "", "also write the report to this file")
	keep := fs.Bool("keep", false, "keep the clusters' directories and the agent's log")
	delivery := fs.String("delivery", "preserve", "the link's delivery mode: preserve or transactional")
	agents := fs.Int("agents", 1, "how many agents run the link; with more than one they are named and stand by for each other, and an agent fault kills the one that holds the link, which starts again once another took it over")
	slots := fs.Int("slots", 1, "the link's slots; above 1 (with -agents above 1) the agents share the link, and an agent fault kills the owner of slot 0, which starts again once the others own every slot")
	sessionTimeout := fs.Duration("session-timeout", 0, "the link's session_timeout (with slots also the slots group's); 0: the default")
	agentFaults := fs.Bool("agent-faults-only", false, "with -agents above 1: every fault is an agent's SIGKILL or clean stop (half each), for the stall of each move by cause")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *delivery != "preserve" && *delivery != "transactional" {
		fmt.Fprintln(os.Stderr, "soak: -delivery must be preserve or transactional")
		return 2
	}
	if *agents < 1 {
		fmt.Fprintln(os.Stderr, "soak: -agents must be at least 1")
		return 2
	}
	if *slots < 1 || *slots > 1 && *agents < 2 {
		fmt.Fprintln(os.Stderr, "soak: -slots must be at least 1, and above 1 only with -agents above 1")
		return 2
	}
	if *agentFaults && *agents < 2 {
		fmt.Fprintln(os.Stderr, "soak: -agent-faults-only needs -agents above 1")
		return 2
	}
	if *sessionTimeout < 0 {
		fmt.Fprintln(os.Stderr, "soak: -session-timeout must not be negative")
		return 2
	}
	if *duration <= 0 || *pause <= 0 {
		fmt.Fprintln(os.Stderr, "soak: -duration and -pause must be positive")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf := func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
	}
	o := options{duration: *duration, pause: *pause, version: *version, seed: *seed, reportPath: *reportPath, keep: *keep,
		delivery: *delivery, agents: *agents, slots: *slots, sessionTimeout: *sessionTimeout, agentFaults: *agentFaults}
	if err := run(ctx, o, logf); err != nil {
		logf("soak: %v", err)
		return 1
	}
	return 0
}

// options are soak's flags.
type options struct {
	duration, pause time.Duration
	version         string
	seed            uint64
	reportPath      string
	keep            bool
	delivery        string
	agents, slots   int
	sessionTimeout  time.Duration
	agentFaults     bool
}

func run(ctx context.Context, o options, logf func(string, ...any)) error {
	duration, pause, version, seed, reportPath, keep, delivery, agents := o.duration, o.pause, o.version, o.seed, o.reportPath, o.keep, o.delivery, o.agents
	start := time.Now()
	dir, err := os.MkdirTemp("", "mirrord-soak-")
	if err != nil {
		return err
	}
	logf("soak: %s of faults on Kafka %s, seed %d, files in %s", duration, version, seed, dir)
	bin, err := faults.BuildAgent(ctx, dir)
	if err != nil {
		return err
	}
	env, err := faults.StartEnv(ctx, faults.EnvConfig{Version: version, Dir: dir})
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok || keep {
			env.Keep()
			logf("soak: clusters and the agent's log kept in %s", dir)
		}
		env.Close()
		if ok && !keep {
			_ = os.RemoveAll(dir)
		}
	}()
	logf("soak: clusters up in %s", time.Since(start).Round(time.Second))
	topics := []string{"orders", "events"}
	for i, t := range topics {
		if err := env.CreateTopic(ctx, faults.Source, t, int32(6-3*i), nil); err != nil {
			return err
		}
	}
	cfg := faults.AgentConfig{
		Bin: bin, Dir: dir, Source: env.Addrs(faults.Source), Dest: env.Addrs(faults.Destination),
		Include: "orders|events", StateTopic: "__mirror_state", Delivery: delivery,
	}
	if o.slots > 1 {
		cfg.LinkExtra += fmt.Sprintf("  slots = %d\n", o.slots)
	}
	if o.sessionTimeout > 0 {
		cfg.LinkExtra += fmt.Sprintf("  session_timeout = %q\n", o.sessionTimeout.String())
	}
	var agent faults.Mirror
	var group *faults.Group
	var slotted *faults.Slotted
	if agents == 1 {
		a, err := faults.NewAgent(cfg)
		if err != nil {
			return err
		}
		defer a.Kill()
		agent = a
	} else {
		var as []*faults.Agent
		for i := range agents {
			c := cfg
			c.Name, c.Dir = fmt.Sprintf("soak-%d", i), filepath.Join(dir, fmt.Sprintf("agent-%d", i))
			if err := os.MkdirAll(c.Dir, 0o755); err != nil {
				return err
			}
			a, err := faults.NewAgent(c)
			if err != nil {
				return err
			}
			defer a.Kill()
			as = append(as, a)
		}
		if o.slots > 1 {
			slotted = faults.NewSlotted(o.slots, as...)
			agent = slotted
		} else {
			group = faults.NewGroup(as...)
			agent = group
		}
	}
	if err := agent.Start(); err != nil {
		return err
	}
	if err := agent.WaitMirroring(ctx, 3*time.Minute); err != nil {
		return err
	}
	led := faults.NewLedger()
	load, err := faults.StartLoad(faults.LoadConfig{Addrs: env.Addrs(faults.Source), Topics: topics, Prefix: "soak", Ledger: led})
	if err != nil {
		return err
	}
	watcher := faults.StartWatcher(env, agent, topics, 100*time.Millisecond)
	r := &faults.Run{
		Env: env, Agent: agent, Watcher: watcher, Topics: topics, StateTopic: "__mirror_state",
		Log: logf, Rand: rand.New(rand.NewPCG(seed, seed)), AgentFaultsOnly: o.agentFaults,
	}
	faultErr := r.Random(ctx, time.Now().Add(duration), pause)
	load.Stop()
	logf("soak: load stopped after %d rounds; checking", load.Rounds())
	res, checkErr := faults.Check(context.WithoutCancel(ctx), env, r.StateTopic, topics, led, delivery == "transactional")
	watcher.Stop()
	r.FinishStalls()
	var report bytes.Buffer
	acked, aborted, uncertain := led.Counts()
	loadErrs, lastLoadErr := load.Errors()
	fmt.Fprintf(&report, "soak: seed %d, Kafka %s, load %d rounds: %d acknowledged, %d aborted, %d uncertain records; %d rounds with an error (last: %v)\n",
		seed, version, load.Rounds(), acked, aborted, uncertain, loadErrs, lastLoadErr)
	r.WriteReport(&report, res, time.Since(start))
	if group != nil {
		took, by := group.Takeovers()
		fmt.Fprintf(&report, "%d agents: takeovers of the holder's link by a standby, in turn by %v:\n", agents, by)
		for _, cause := range []string{faults.CauseCrash, faults.CauseLeave} {
			fmt.Fprintf(&report, "  after a %s: %d, to another agent MIRRORING: %s\n", cause, len(took[cause]), faults.FiguresOf(took[cause]))
		}
	}
	if slotted != nil {
		moves, twice := slotted.Moves()
		fmt.Fprintf(&report, "%d agents sharing %d slots: moves of slot 0's owner's slots; surveys that saw a slot run by two agents: %d\n", agents, o.slots, twice)
		for _, cause := range []string{faults.CauseCrash, faults.CauseLeave} {
			fmt.Fprintf(&report, "  after a %s: %d, to every slot MIRRORING at the other agents: %s\n", cause, len(moves[cause]), faults.FiguresOf(moves[cause]))
		}
	}
	_, _ = os.Stdout.Write(report.Bytes()) // like fmt.Print: nowhere else to report it
	if reportPath != "" {
		if err := os.WriteFile(reportPath, report.Bytes(), 0o644); err != nil {
			return err
		}
	}
	switch {
	case faultErr != nil && ctx.Err() == nil:
		return fmt.Errorf("a fault failed: %w", faultErr)
	case checkErr != nil:
		return fmt.Errorf("check: %w", checkErr)
	case !res.OK():
		return fmt.Errorf("the mirror is not exact: %s", res)
	}
	ok = true
	return nil
}
