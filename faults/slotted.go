package faults

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/seed83556561/mirrord/link"
)

var _ Leaver = (*Slotted)(nil)

// Slotted is several named agents (AgentConfig.Name) that share one link
// with slots (AgentConfig.LinkExtra sets slots): the link's slots group
// gives each running agent some of them. Its Status is the link's as a
// whole: MIRRORING when every slot has exactly one MIRRORING owner. Kill
// SIGKILLs the owner of slot 0 (the link-wide work), or the first running
// agent when no agent owns it, and Leave stops it cleanly; Start starts it
// again only once the others own every slot, MIRRORING (so that what a
// kill or a leave exercises is the move of its slots, not the agent's own
// restart), and records how long that took, by cause.
type Slotted struct {
	turns
	slots int
	twice int // surveys that saw a slot run by two agents
}

// NewSlotted makes the agents of a link with slots slots; Start starts
// them all the first time.
func NewSlotted(slots int, agents ...*Agent) *Slotted {
	return &Slotted{turns: newTurns(agents), slots: slots}
}

// survey asks every running agent for its slots. owners maps each slot to
// the agent running it (the last one asked when two do, which twice
// counts); st is the link as a whole: the partitions of every slot, the
// largest lag in time (nil while any slot's is unknown), and MIRRORING only
// when every slot has one MIRRORING owner, else the state and last error
// of the first slot that has not (PREPARING for a slot nobody runs).
func (s *Slotted) survey(ctx context.Context) (owners map[int]*Agent, st link.Status, err error) {
	owners = map[int]*Agent{}
	bySlot := map[int]link.Status{}
	var errs []error
	answered := false
	for _, a := range s.agents {
		if !s.running(a) {
			continue
		}
		sts, err := a.Statuses(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("agent %s: %w", a.cfg.Name, err))
			continue
		}
		answered = true
		for _, ss := range sts {
			if ss.Slot == nil {
				return nil, link.Status{}, fmt.Errorf("agent %s: a status without a slot (is slots set?): %+v", a.cfg.Name, ss)
			}
			if _, dup := owners[*ss.Slot]; dup {
				s.twice++
			}
			owners[*ss.Slot], bySlot[*ss.Slot] = a, ss
		}
	}
	if !answered {
		if len(errs) == 0 {
			errs = append(errs, errors.New("no agent runs"))
		}
		return nil, link.Status{}, errors.Join(errs...)
	}
	st = link.Status{Name: LinkName, State: link.Mirroring}
	var lag float64
	lagKnown := true
	for slot := range s.slots {
		ss, ok := bySlot[slot]
		switch {
		case !ok && st.State == link.Mirroring:
			st.State, st.LastError = link.Preparing, fmt.Sprintf("slot %d has no owner", slot)
		case ok && ss.State != link.Mirroring && st.State == link.Mirroring:
			st.State, st.LastError = ss.State, fmt.Sprintf("slot %d at agent %s: %s", slot, owners[slot].cfg.Name, ss.LastError)
		}
		if !ok {
			continue
		}
		st.Partitions = append(st.Partitions, ss.Partitions...)
		if ss.LagSeconds == nil {
			lagKnown = false
		} else {
			lag = max(lag, *ss.LagSeconds)
		}
	}
	if lagKnown && st.State == link.Mirroring {
		st.LagSeconds = &lag
	}
	return owners, st, nil
}

// Status is the link's status as a whole (survey).
func (s *Slotted) Status(ctx context.Context) (link.Status, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, st, err := s.survey(ctx)
	return st, err
}

// Kill SIGKILLs the owner of slot 0, or the first running agent when none
// owns it.
func (s *Slotted) Kill() { s.end(false) }

// Leave stops the owner of slot 0 cleanly (SIGTERM: its slots stop with a
// final checkpoint and it leaves the slots group), or the first running
// agent when none owns it.
func (s *Slotted) Leave() { s.end(true) }

func (s *Slotted) end(clean bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	owners, _, _ := s.survey(ctx)
	s.kill(owners[0], clean)
}

// Start starts the agents Kill or Leave ended once the others own every slot,
// MIRRORING (within 3 minutes; then anyway), or all of them the first time.
func (s *Slotted) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.restart(s.taken)
}

// AwaitMove waits until the others own every slot, MIRRORING (Leaver).
func (s *Slotted) AwaitMove() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.await(s.taken)
}

// taken reports whether every slot has one MIRRORING owner.
func (s *Slotted) taken(ctx context.Context) bool {
	_, st, err := s.survey(ctx)
	return err == nil && st.State == link.Mirroring
}

// WaitMirroring waits until every slot has one MIRRORING owner.
func (s *Slotted) WaitMirroring(ctx context.Context, within time.Duration) error {
	return s.waitUntil(ctx, within, "the slots have no MIRRORING owner each", func(ctx context.Context) (bool, string, error) {
		_, st, err := s.survey(ctx)
		return err == nil && st.State == link.Mirroring, fmt.Sprintf("%s: %s", st.State, st.LastError), err
	})
}

// Moves are the times from each kill (CauseCrash) or clean stop
// (CauseLeave) until the other agents owned every slot, MIRRORING, and how
// many surveys saw a slot run by two agents.
func (s *Slotted) Moves() (map[string][]time.Duration, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.waits), s.twice
}
