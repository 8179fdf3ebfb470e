package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/seed83556561/mirrord/internal/backoff"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/link"
)

// Fault is one fault a Run made, and the leaders it moved.
type Fault struct {
	Name       string
	Side       Side
	Start, End time.Time
	// Moved are the mirrored partitions whose leader on Side differs
	// after the fault (with the state topic's, on the destination).
	Moved []tp.Key
	// LeaderMove says whether Moved is a leader move the stall figures
	// count (a fault that also keeps the partition unwritable for a set
	// time, such as too few in-sync replicas, is not).
	LeaderMove bool
	// Stalls are, per moved partition, how long it stopped appending
	// (Watcher.Stall over the fault and the 60 s after it); Gap the
	// longest time the watcher could not list a moved partition's end
	// offset in that window, the precision of the stalls.
	Stalls []time.Duration
	Gap    time.Duration
	Err    error
}

// Run is one fault run: the clusters, the agent, the topics and what the
// faults did. Its methods are the faults; each records a Fault.
type Run struct {
	Env        *Env
	Agent      Mirror
	Watcher    *Watcher
	Topics     []string // the mirrored topics (same names at the destination)
	StateTopic string
	Log        func(format string, args ...any)
	Rand       *rand.Rand

	// Conn, per side, puts faults on the agent's connections to that
	// side's brokers (a TCP proxy the agent reaches the brokers through);
	// nil: no connection faults.
	Conn [2]ConnFaults

	// AgentFaultsOnly makes Random's every fault an agent's: a SIGKILL,
	// or with a Leaver half the time a clean stop.
	AgentFaultsOnly bool

	Faults      []Fault
	AgentKills  int
	AgentLeaves int // clean stops (Leaver)
	BrokerKills [2]int
}

// ConnFaults acts on the connections to one broker (node ID), as
// internal/testkit/faultproxy does: Stall holds every byte until Resume,
// Drop closes the connections (FIN), Reset aborts them (RST).
type ConnFaults interface {
	Stall(node int32)
	Resume(node int32)
	Drop(node int32)
	Reset(node int32)
}

// settle is how long after a fault's end its partitions are watched for
// their stall.
const settle = 60 * time.Second

// record runs fault fn on side s and records it.
func (r *Run) record(ctx context.Context, name string, s Side, leaderMove bool, fn func(ctx context.Context) error) error {
	topics := r.Topics
	if s == Destination {
		topics = append(slices.Clone(r.Topics), r.StateTopic)
	}
	r.waitQuiet(ctx)
	before, err := r.Env.Leaders(ctx, s, topics...)
	if err != nil {
		return err
	}
	f := Fault{Name: name, Side: s, Start: time.Now(), LeaderMove: leaderMove}
	r.Log("fault %s on the %s: start", name, s)
	f.Err = fn(ctx)
	f.End = time.Now()
	if after, err := r.Env.Leaders(ctx, s, topics...); err == nil {
		f.Moved = moved(before, after)
	}
	r.Log("fault %s on the %s: done in %s, %d leaders moved (err: %v)", name, s, f.End.Sub(f.Start).Round(time.Millisecond), len(f.Moved), f.Err)
	r.Faults = append(r.Faults, f)
	return f.Err
}

// quietLag is how far behind in time the link may be for a fault to start:
// the stall a fault causes is only its own if the previous one's is over
// (an agent restart waits out its lease for most of a minute).
const quietLag = 3 * time.Second

// waitQuiet waits, for at most 3 minutes, until the link is MIRRORING and
// no partition is more than quietLag behind (lag_seconds); past that the
// fault starts anyway, and the log says so.
func (r *Run) waitQuiet(ctx context.Context) {
	start := time.Now()
	deadline := start.Add(3 * time.Minute)
	last := "no status"
	for time.Now().Before(deadline) && ctx.Err() == nil {
		st, err := r.Agent.Status(ctx)
		switch {
		case err != nil:
			last = err.Error()
		case st.State != link.Mirroring:
			last = "state " + st.State.String()
		case st.LagSeconds == nil:
			last = "lag in time not known yet"
		case *st.LagSeconds > quietLag.Seconds():
			last = fmt.Sprintf("%.1fs behind", *st.LagSeconds)
		default:
			if waited := time.Since(start); waited > time.Second {
				r.Log("the mirror caught up after %s", waited.Round(100*time.Millisecond))
			}
			return
		}
		if backoff.Sleep(ctx, 200*time.Millisecond) != nil {
			return
		}
	}
	r.Log("the mirror did not catch up within 3m (%s); the next fault starts anyway", last)
}

// FinishStalls fills in every fault's stalls from the watcher; call it once
// the last fault is at least settle old, or at the end. A fault's window
// ends settle after it, or when the next fault starts.
func (r *Run) FinishStalls() {
	for i := range r.Faults {
		f := &r.Faults[i]
		f.Stalls, f.Gap = nil, 0
		to := f.End.Add(settle)
		if i+1 < len(r.Faults) && r.Faults[i+1].Start.Before(to) {
			to = r.Faults[i+1].Start
		}
		for _, k := range f.Moved {
			if k.Topic == r.StateTopic {
				continue
			}
			f.Gap = max(f.Gap, r.Watcher.Gap(k, f.Start, to))
			if d, ok := r.Watcher.Stall(k, f.Start, to); ok {
				f.Stalls = append(f.Stalls, d)
			}
		}
	}
}

// busiest is the node leading most mirrored partitions on side s (the
// state topic's leader on the destination when want says so).
func (r *Run) busiest(ctx context.Context, s Side, stateLeader bool) (int, error) {
	if stateLeader {
		ls, err := r.Env.Leaders(ctx, Destination, r.StateTopic)
		if err != nil {
			return 0, err
		}
		return int(ls[tp.Key{Topic: r.StateTopic, Partition: 0}].Node), nil
	}
	ls, err := r.Env.Leaders(ctx, s, r.Topics...)
	if err != nil {
		return 0, err
	}
	count := map[int32]int{}
	for _, l := range ls {
		count[l.Node]++
	}
	best, most := int32(1), -1
	for n, c := range count {
		if c > most || (c == most && n < best) {
			best, most = n, c
		}
	}
	return int(best), nil
}

// KillBroker SIGKILLs the broker that leads most mirrored partitions on
// side s (the state topic's leader with stateLeader), keeps it down for
// down, starts it again and waits until the cluster is whole.
func (r *Run) KillBroker(ctx context.Context, s Side, down time.Duration, stateLeader bool) error {
	node, err := r.busiest(ctx, s, stateLeader)
	if err != nil {
		return err
	}
	name := fmt.Sprintf("SIGKILL broker %d for %s", node, down)
	if stateLeader {
		name = fmt.Sprintf("SIGKILL broker %d (the state topic's leader) for %s", node, down)
	}
	return r.record(ctx, name, s, true, func(ctx context.Context) error {
		c := r.Env.Cluster(s)
		if err := c.Kill(node); err != nil {
			return err
		}
		r.BrokerKills[s]++
		if err := backoff.Sleep(ctx, down); err != nil {
			return err
		}
		if err := c.Start(ctx, node); err != nil {
			return err
		}
		return r.Env.WaitHealthy(ctx, s, 3*time.Minute)
	})
}

// RollingRestart restarts every broker of side s in turn, each with a
// controlled shutdown (its leaderships move before it stops), waiting
// until the cluster is whole before the next.
func (r *Run) RollingRestart(ctx context.Context, s Side) error {
	for node := 1; node <= Nodes; node++ {
		err := r.record(ctx, fmt.Sprintf("controlled restart of broker %d", node), s, true, func(ctx context.Context) error {
			c := r.Env.Cluster(s)
			if err := c.Stop(ctx, node); err != nil {
				return err
			}
			if err := c.Start(ctx, node); err != nil {
				return err
			}
			return r.Env.WaitHealthy(ctx, s, 3*time.Minute)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// ElectPreferred moves every mirrored partition's leadership on side s
// back to its preferred replica (after restarts left them elsewhere).
func (r *Run) ElectPreferred(ctx context.Context, s Side) error {
	return r.record(ctx, "preferred-leader election", s, true, func(ctx context.Context) error {
		return r.elect(ctx, s)
	})
}

func (r *Run) elect(ctx context.Context, s Side) error {
	set := kadm.TopicsSet{}
	ls, err := r.Env.Leaders(ctx, s, r.Topics...)
	if err != nil {
		return err
	}
	for k := range ls {
		set.Add(k.Topic, k.Partition)
	}
	res, err := r.Env.Admin(s).ElectLeaders(ctx, kadm.ElectPreferredReplica, set)
	if err != nil {
		return fmt.Errorf("elect preferred leaders: %w", err)
	}
	for _, ps := range res {
		for _, p := range ps {
			// ELECTION_NOT_NEEDED: the preferred replica leads already.
			if p.Err != nil && !isElectionNotNeeded(p.Err) {
				return fmt.Errorf("elect the preferred leader of %s[%d]: %w: %s", p.Topic, p.Partition, p.Err, p.ErrMessage)
			}
		}
	}
	return nil
}

// Reassign rotates every mirrored partition's replica list on side s by
// one (the same brokers: three replicas on three brokers), waits for the
// reassignment, and elects the new preferred leaders: every leader moves.
func (r *Run) Reassign(ctx context.Context, s Side) error {
	return r.record(ctx, "reassignment (replicas rotated) and election", s, true, func(ctx context.Context) error {
		ls, err := r.Env.Leaders(ctx, s, r.Topics...)
		if err != nil {
			return err
		}
		req := kadm.AlterPartitionAssignmentsReq{}
		for k, l := range ls {
			rot := append(slices.Clone(l.Replicas[1:]), l.Replicas[0])
			req.Assign(k.Topic, k.Partition, rot)
		}
		res, err := r.Env.Admin(s).AlterPartitionAssignments(ctx, req)
		if err != nil {
			return fmt.Errorf("alter partition assignments: %w", err)
		}
		if err := res.Error(); err != nil {
			return fmt.Errorf("alter partition assignments: %w", err)
		}
		deadline := time.Now().Add(2 * time.Minute)
		for {
			lr, err := r.Env.Admin(s).ListPartitionReassignments(ctx, kadm.TopicsSet{})
			if err == nil && len(lr) == 0 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("reassignment did not complete within 2m (%v)", err) //nolint:errorlint // err is nil while reassignments are still listed: %v prints <nil>, %w would print %!w(<nil>)
			}
			if err := backoff.Sleep(ctx, 200*time.Millisecond); err != nil {
				return err
			}
		}
		return r.elect(ctx, s)
	})
}

// TooFewReplicas makes the mirrored topics at the destination demand more
// in-sync replicas than they have (min.insync.replicas 4 of 3) for d, so
// that every append is refused with NOT_ENOUGH_REPLICAS, then sets them
// back.
func (r *Run) TooFewReplicas(ctx context.Context, d time.Duration) error {
	return r.record(ctx, fmt.Sprintf("destination below min.insync.replicas for %s", d), Destination, false, func(ctx context.Context) error {
		set := func(v *string) error {
			var alters []kadm.AlterConfig
			op := kadm.SetConfig
			if v == nil {
				op = kadm.DeleteConfig
			}
			alters = append(alters, kadm.AlterConfig{Op: op, Name: "min.insync.replicas", Value: v})
			res, err := r.Env.Admin(Destination).AlterTopicConfigs(ctx, alters, r.Topics...)
			if err != nil {
				return err
			}
			for _, x := range res {
				if x.Err != nil {
					return fmt.Errorf("alter min.insync.replicas of %s: %w", x.Name, x.Err)
				}
			}
			return nil
		}
		four := "4"
		if err := set(&four); err != nil {
			return err
		}
		if err := backoff.Sleep(ctx, d); err != nil {
			return err
		}
		return set(nil)
	})
}

// KillAgent SIGKILLs the agent, starts it again after down, and waits
// until the link mirrors.
func (r *Run) KillAgent(ctx context.Context, down time.Duration) error {
	return r.record(ctx, fmt.Sprintf("SIGKILL the agent for %s", down), Destination, false, func(ctx context.Context) error {
		r.Agent.Kill()
		r.AgentKills++
		if l, ok := r.Agent.(Leaver); ok {
			l.AwaitMove() // the others take over while the agent is down
		}
		if err := backoff.Sleep(ctx, down); err != nil {
			return err
		}
		if err := r.Agent.Start(); err != nil {
			return err
		}
		return r.Agent.WaitMirroring(ctx, 3*time.Minute)
	})
}

// LeaveAgent stops the agent that runs the link (slot 0's owner) cleanly,
// starts it again after down, and waits until the link mirrors: with
// several agents, a clean leave of one (a rolling update, a scale-down).
func (r *Run) LeaveAgent(ctx context.Context, l Leaver, down time.Duration) error {
	return r.record(ctx, fmt.Sprintf("stop an agent cleanly for %s", down), Destination, false, func(ctx context.Context) error {
		l.Leave()
		r.AgentLeaves++
		l.AwaitMove()
		if err := backoff.Sleep(ctx, down); err != nil {
			return err
		}
		if err := l.Start(); err != nil {
			return err
		}
		return l.WaitMirroring(ctx, 3*time.Minute)
	})
}

// KillAgentAndBroker SIGKILLs the agent and the destination broker that
// leads most mirrored partitions together, starts the agent while the
// broker is down, and the broker down seconds later.
func (r *Run) KillAgentAndBroker(ctx context.Context, down time.Duration) error {
	node, err := r.busiest(ctx, Destination, false)
	if err != nil {
		return err
	}
	return r.record(ctx, fmt.Sprintf("SIGKILL the agent and destination broker %d", node), Destination, false, func(ctx context.Context) error {
		c := r.Env.Cluster(Destination)
		r.Agent.Kill()
		r.AgentKills++
		if err := c.Kill(node); err != nil {
			return err
		}
		r.BrokerKills[Destination]++
		if err := r.Agent.Start(); err != nil {
			return err
		}
		if err := backoff.Sleep(ctx, down); err != nil {
			return err
		}
		if err := c.Start(ctx, node); err != nil {
			return err
		}
		if err := r.Env.WaitHealthy(ctx, Destination, 3*time.Minute); err != nil {
			return err
		}
		return r.Agent.WaitMirroring(ctx, 3*time.Minute)
	})
}

// Figures are the stall figures of the leader moves: how long a moved
// destination partition stopped appending, by fault kind and in all.
type Figures struct {
	Moves         int
	P50, P99, Max time.Duration
}

// StallFigures computes the figures over the faults on side s that moved
// leaders (LeaderMove), for faults whose name has prefix (all with "").
func (r *Run) StallFigures(s Side, prefix string) Figures {
	var all []time.Duration
	for _, f := range r.Faults {
		if f.Side == s && f.LeaderMove && (prefix == "" || len(f.Name) >= len(prefix) && f.Name[:len(prefix)] == prefix) {
			all = append(all, f.Stalls...)
		}
	}
	return figures(all)
}

// FiguresOf is the figures of any durations (p50, p99 and max).
func FiguresOf(ds []time.Duration) Figures { return figures(slices.Clone(ds)) }

func figures(ds []time.Duration) Figures {
	if len(ds) == 0 {
		return Figures{}
	}
	slices.Sort(ds)
	q := func(p float64) time.Duration {
		i := int(p*float64(len(ds))+0.999999) - 1
		return ds[min(max(i, 0), len(ds)-1)]
	}
	return Figures{Moves: len(ds), P50: q(0.5), P99: q(0.99), Max: ds[len(ds)-1]}
}

func isElectionNotNeeded(err error) bool { return errors.Is(err, kerr.ElectionNotNeeded) }

// StallConnections holds every byte between the agent and the broker that
// leads most mirrored partitions on side s for d.
func (r *Run) StallConnections(ctx context.Context, s Side, d time.Duration) error {
	node, err := r.busiest(ctx, s, false)
	if err != nil {
		return err
	}
	return r.record(ctx, fmt.Sprintf("connections to broker %d stalled for %s", node, d), s, false, func(ctx context.Context) error {
		r.Conn[s].Stall(int32(node))
		defer r.Conn[s].Resume(int32(node))
		return backoff.Sleep(ctx, d)
	})
}

// CutConnections closes (reset: aborts) every connection between the agent
// and side s's brokers; the agent reconnects. An append in flight gets no
// answer and is settled once its produce timeout has passed.
func (r *Run) CutConnections(ctx context.Context, s Side, reset bool) error {
	name := "connections closed"
	if reset {
		name = "connections reset"
	}
	return r.record(ctx, name, s, false, func(ctx context.Context) error {
		for node := int32(1); node <= Nodes; node++ {
			if reset {
				r.Conn[s].Reset(node)
			} else {
				r.Conn[s].Drop(node)
			}
		}
		return r.Agent.WaitMirroring(ctx, 3*time.Minute)
	})
}

// Step is one fault of the suite, by the name that selects it.
type Step struct {
	Name string
	Run  func(ctx context.Context) error
}

// Steps are the suite's faults, in an order that leaves each leader move
// something to move. Connection faults are included when Conn is set.
func (r *Run) Steps() []Step {
	steps := []Step{
		{"kill-dst", func(ctx context.Context) error { return r.KillBroker(ctx, Destination, 5*time.Second, false) }},
		{"elect-dst", func(ctx context.Context) error { return r.ElectPreferred(ctx, Destination) }},
		{"kill-src", func(ctx context.Context) error { return r.KillBroker(ctx, Source, 5*time.Second, false) }},
		{"elect-src", func(ctx context.Context) error { return r.ElectPreferred(ctx, Source) }},
		{"restart-dst", func(ctx context.Context) error { return r.RollingRestart(ctx, Destination) }},
		{"restart-src", func(ctx context.Context) error { return r.RollingRestart(ctx, Source) }},
		{"reassign-dst", func(ctx context.Context) error { return r.Reassign(ctx, Destination) }},
		{"reassign-src", func(ctx context.Context) error { return r.Reassign(ctx, Source) }},
		{"too-few-replicas", func(ctx context.Context) error { return r.TooFewReplicas(ctx, 10*time.Second) }},
		{"kill-state-leader", func(ctx context.Context) error { return r.KillBroker(ctx, Destination, 5*time.Second, true) }},
		{"kill-agent", func(ctx context.Context) error { return r.KillAgent(ctx, 2*time.Second) }},
		{"kill-agent-and-broker", func(ctx context.Context) error { return r.KillAgentAndBroker(ctx, 10*time.Second) }},
		{"elect-dst-again", func(ctx context.Context) error { return r.ElectPreferred(ctx, Destination) }},
	}
	if r.Conn[Destination] != nil && r.Conn[Source] != nil {
		steps = append(steps,
			Step{"stall-dst", func(ctx context.Context) error { return r.StallConnections(ctx, Destination, 5*time.Second) }},
			Step{"close-dst", func(ctx context.Context) error { return r.CutConnections(ctx, Destination, false) }},
			Step{"reset-src", func(ctx context.Context) error { return r.CutConnections(ctx, Source, true) }},
		)
	}
	return steps
}

// Suite runs every fault once (CI's short form), or, when only names
// some, those of Steps (a developer's focused run); an unknown name is an
// error before any fault runs.
func (r *Run) Suite(ctx context.Context, only ...string) error {
	steps := r.Steps()
	if len(only) > 0 {
		var names []string
		for _, st := range steps {
			names = append(names, st.Name)
		}
		var picked []Step
		for _, name := range only {
			i := slices.Index(names, name)
			if i < 0 {
				return fmt.Errorf("no fault step %q; the steps are %v", name, names)
			}
			picked = append(picked, steps[i])
		}
		steps = picked
	}
	for _, step := range steps {
		if err := step.Run(ctx); err != nil {
			return err
		}
		if err := backoff.Sleep(ctx, 2*time.Second); err != nil { // the load runs between faults
			return err
		}
	}
	return nil
}

// Random runs random faults until ctx ends or until has passed (the soak),
// every pause apart.
func (r *Run) Random(ctx context.Context, until time.Time, pause time.Duration) error {
	side := func() Side { return Side(r.Rand.IntN(2)) }
	for time.Now().Before(until) {
		var err error
		fault := r.Rand.IntN(8)
		if r.AgentFaultsOnly {
			fault = 6
		}
		switch fault {
		case 0:
			err = r.KillBroker(ctx, side(), time.Duration(2+r.Rand.IntN(10))*time.Second, false)
		case 1:
			err = r.RollingRestart(ctx, side())
		case 2:
			err = r.ElectPreferred(ctx, side())
		case 3:
			err = r.Reassign(ctx, side())
		case 4:
			err = r.TooFewReplicas(ctx, time.Duration(5+r.Rand.IntN(10))*time.Second)
		case 5:
			err = r.KillBroker(ctx, Destination, time.Duration(2+r.Rand.IntN(8))*time.Second, true)
		case 6:
			// Agents that share the link also leave cleanly, half the
			// time: a rolling update or a scale-down.
			if l, ok := r.Agent.(Leaver); ok && r.Rand.IntN(2) == 0 {
				err = r.LeaveAgent(ctx, l, time.Duration(r.Rand.IntN(5))*time.Second)
			} else {
				err = r.KillAgent(ctx, time.Duration(r.Rand.IntN(5))*time.Second)
			}
		case 7:
			err = r.KillAgentAndBroker(ctx, time.Duration(5+r.Rand.IntN(10))*time.Second)
		}
		if err != nil {
			return err
		}
		if err := backoff.Sleep(ctx, pause+time.Duration(r.Rand.Int64N(int64(pause)))); err != nil {
			return err
		}
	}
	return nil
}
