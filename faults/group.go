package faults

import (
	"context"
	"errors"
	"fmt"
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

var (
	_ Mirror = (*Agent)(nil)
	_ Mirror = (*Group)(nil)
)

// Group is several named agents (AgentConfig.Name) of one link: one holds
// it, the others stand by. Kill kills the holder; Start starts it again
// only once another agent took the link over (so that the standbys'
// takeover is what a kill exercises, not the killed agent's own restart),
// and records how long that took.
type Group struct {
	agents []*Agent

	mu        sync.Mutex
	killed    []*Agent
	killedAt  time.Time
	takeovers []time.Duration // kill to another agent MIRRORING
	holders   []string        // the agent names that held the link, in turn
}

// NewGroup makes a group of agents; Start starts them all the first time.
func NewGroup(agents ...*Agent) *Group {
	return &Group{agents: agents, killed: slices.Clone(agents)}
}

// holder returns the running agent whose link is MIRRORING, if any, and
// the first status any running agent answered.
func (g *Group) holder(ctx context.Context) (*Agent, link.Status, error) {
	var first link.Status
	var firstErr error
	answered := false
	for _, a := range g.agents {
		if slices.Contains(g.killed, a) {
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
func (g *Group) Kill() {
	g.mu.Lock()
	defer g.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a, _, _ := g.holder(ctx)
	if a == nil {
		for _, b := range g.agents {
			if !slices.Contains(g.killed, b) {
				a = b
				break
			}
		}
	}
	if a == nil {
		return
	}
	a.Kill()
	g.killed = append(g.killed, a)
	g.killedAt = time.Now()
}

// Start starts the agents Kill killed, once another agent holds the link
// (within 3 minutes; then anyway), or all of them the first time.
func (g *Group) Start() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.killed) < len(g.agents) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		for {
			if a, _, _ := g.holder(ctx); a != nil {
				g.takeovers = append(g.takeovers, time.Since(g.killedAt))
				g.holders = append(g.holders, a.cfg.Name)
				break
			}
			if backoff.Sleep(ctx, 100*time.Millisecond) != nil {
				break
			}
		}
	}
	var errs []error
	for _, a := range g.killed {
		if err := a.Start(); err != nil {
			errs = append(errs, fmt.Errorf("agent %s: %w", a.cfg.Name, err))
		}
	}
	g.killed = nil
	return errors.Join(errs...)
}

// WaitMirroring waits until an agent of the group mirrors.
func (g *Group) WaitMirroring(ctx context.Context, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		g.mu.Lock()
		a, st, err := g.holder(ctx)
		g.mu.Unlock()
		if a != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("no agent of the group mirrors within %s: %w", within, err)
			}
			return fmt.Errorf("no agent of the group mirrors within %s: state %s, last error %q", within, st.State, st.LastError)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Takeovers are the times from each kill until another agent held the
// link, and the agents that took it, in turn.
func (g *Group) Takeovers() ([]time.Duration, []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.takeovers), slices.Clone(g.holders)
}

// Stop stops every agent of the group (SIGTERM).
func (g *Group) Stop() {
	for _, a := range g.agents {
		a.Stop()
	}
}
