package faults

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/seed83556561/mirrord/internal/backoff"
	"github.com/seed83556561/mirrord/link"
)

// Mirror is what a fault run needs of the agents that run the link: one
// Agent, or a Group of named agents that stand by for each other.
type Mirror interface {
	// Status is the link's status from the agent that runs it.
	Status(ctx context.Context) (link.Status, error)
	// Kill SIGKILLs the agent that runs the link; Start starts what Kill
	// killed again.
	Kill()
	Start() error
	// WaitMirroring waits until an agent's link is MIRRORING.
	WaitMirroring(ctx context.Context, within time.Duration) error
}

// Leaver is a Mirror of several agents whose agent can also leave
// cleanly: Leave stops (SIGTERM, drain, final checkpoint) the agent Kill
// would kill, and Start starts it again as after a kill. AwaitMove waits
// until the other agents took over the work of the agent the last Kill or
// Leave ended, and records how long that took (Start does, if not yet):
// a fault that brings the agent back after a pause calls it first, so
// that the pause is not counted.
type Leaver interface {
	Mirror
	Leave()
	AwaitMove()
}

var (
	_ Mirror = (*Agent)(nil)
	_ Leaver = (*Group)(nil)
)

// The causes of an agent's end, as Group.Takeovers and Slotted.Moves
// report them.
const (
	CauseCrash = "crash"       // Kill: SIGKILL
	CauseLeave = "clean leave" // Leave: SIGTERM
)

// turns is what Group and Slotted share: their agents, the ones Kill
// killed, and when. Its methods are called with the owner's lock held
// (waitUntil takes it itself).
type turns struct {
	agents []*Agent

	mu       sync.Mutex
	killed   []*Agent // killed or stopped, to start again
	killedAt time.Time
	cause    string                     // of the last end: CauseCrash or CauseLeave
	waits    map[string][]time.Duration // by cause: the end to the condition await waited for
	awaited  bool                       // the last end's wait is recorded
}

func newTurns(agents []*Agent) turns {
	return turns{agents: agents, killed: slices.Clone(agents), waits: map[string][]time.Duration{}}
}

// running reports whether a is running (not killed, or not started yet).
func (t *turns) running(a *Agent) bool { return !slices.Contains(t.killed, a) }

// kill SIGKILLs victim (clean: stops it with SIGTERM and waits until it
// exited), or the first running agent when victim is nil.
func (t *turns) kill(victim *Agent, clean bool) {
	if victim == nil {
		for _, b := range t.agents {
			if t.running(b) {
				victim = b
				break
			}
		}
	}
	if victim == nil {
		return
	}
	t.killedAt, t.cause, t.awaited = time.Now(), CauseCrash, false
	if clean {
		t.cause = CauseLeave
		victim.Stop()
	} else {
		victim.Kill()
	}
	t.killed = append(t.killed, victim)
}

// await waits until taken reports the last end's work taken over by the
// other agents (within 3 minutes; then it gives up), and records the time
// since the end, once per end.
func (t *turns) await(taken func(ctx context.Context) bool) {
	if t.awaited || len(t.killed) == 0 || len(t.killed) == len(t.agents) {
		return
	}
	t.awaited = true
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for {
		if taken(ctx) {
			t.waits[t.cause] = append(t.waits[t.cause], time.Since(t.killedAt))
			return
		}
		if backoff.Sleep(ctx, 100*time.Millisecond) != nil {
			return
		}
	}
}

// restart starts the killed agents again: the first time all of them at
// once; after a kill, once taken reports the kill's work taken over
// (await, unless AwaitMove did).
func (t *turns) restart(taken func(ctx context.Context) bool) error {
	t.await(taken)
	var errs []error
	for _, a := range t.killed {
		if err := a.Start(); err != nil {
			errs = append(errs, fmt.Errorf("agent %s: %w", a.cfg.Name, err))
		}
	}
	t.killed = nil
	return errors.Join(errs...)
}

// waitUntil polls done (under the lock) every 100 ms until it holds, or
// fails after within with what, its last answer's problem and error.
func (t *turns) waitUntil(ctx context.Context, within time.Duration, what string, done func(ctx context.Context) (bool, string, error)) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		t.mu.Lock()
		ok, problem, err := done(ctx)
		t.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("%s within %s: %w", what, within, err)
			}
			return fmt.Errorf("%s within %s: %s", what, within, problem)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Group is several named agents (AgentConfig.Name) of one link: one holds
// it, the others stand by. Kill kills the holder; Start starts it again
// only once another agent took the link over (so that the standbys'
// takeover is what a kill exercises, not the killed agent's own restart),
// and records how long that took.
type Group struct {
	turns
	holders []string // the agent names that held the link, in turn
}

// NewGroup makes a group of agents; Start starts them all the first time.
func NewGroup(agents ...*Agent) *Group {
	return &Group{turns: newTurns(agents)}
}

// holder returns the running agent whose link is MIRRORING, if any, and
// the first status any running agent answered.
func (g *Group) holder(ctx context.Context) (*Agent, link.Status, error) {
	var first link.Status
	var firstErr error
	answered := false
	for _, a := range g.agents {
		if !g.running(a) {
			continue
		}
		st, err := a.Status(ctx)
		if err == nil && st.State == link.Mirroring {
			return a, st, nil
		}
		if !answered {
			first, firstErr, answered = st, err, err == nil
		}
	}
	if firstErr == nil && !answered {
		firstErr = errors.New("no agent of the group runs")
	}
	return nil, first, firstErr
}

// Status is the holder's status, or, while none mirrors, a running agent's.
func (g *Group) Status(ctx context.Context) (link.Status, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, st, err := g.holder(ctx)
	return st, err
}

// Kill SIGKILLs the holder (the first running agent when none mirrors).
func (g *Group) Kill() { g.end(false) }

// Leave stops the holder cleanly (the first running agent when none
// mirrors).
func (g *Group) Leave() { g.end(true) }

func (g *Group) end(clean bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a, _, _ := g.holder(ctx)
	g.kill(a, clean)
}

// Start starts the agents Kill or Leave ended, once another agent holds the link
// (within 3 minutes; then anyway), or all of them the first time.
func (g *Group) Start() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.restart(g.taken)
}

// AwaitMove waits until another agent holds the link (Leaver).
func (g *Group) AwaitMove() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.await(g.taken)
}

// taken reports whether an agent holds the link, and records it.
func (g *Group) taken(ctx context.Context) bool {
	a, _, _ := g.holder(ctx)
	if a != nil {
		g.holders = append(g.holders, a.cfg.Name)
	}
	return a != nil
}

// WaitMirroring waits until an agent of the group mirrors.
func (g *Group) WaitMirroring(ctx context.Context, within time.Duration) error {
	return g.waitUntil(ctx, within, "no agent of the group mirrors", func(ctx context.Context) (bool, string, error) {
		a, st, err := g.holder(ctx)
		return a != nil, fmt.Sprintf("state %s, last error %q", st.State, st.LastError), err
	})
}

// Takeovers are the times from each kill (CauseCrash) or clean stop
// (CauseLeave) until another agent held the link, and the agents that
// took it, in turn.
func (g *Group) Takeovers() (map[string][]time.Duration, []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return maps.Clone(g.waits), slices.Clone(g.holders)
}

// Stop stops every agent of the group (SIGTERM).
func (g *Group) Stop() {
	for _, a := range g.agents {
		a.Stop()
	}
}
