package link

import (
	"context"
	"fmt"
	"time"

	"github.com/seed83556561/mirrord/internal/kafka/access"
)

// sessionEnd is how a session ended, for the next one.
type sessionEnd struct {
	unresolved int // appends in flight or of unknown outcome when it ended
}

// tickInterval is how often the pipeline gets InTick and the status is
// published.
const tickInterval = time.Second

// run steps the pipeline with what the fetcher, the appender, the committer
// and the workers report, and carries out its actions, until the session
// ends: ctx ends (OnStop after the drain and final checkpoint), an operator
// pauses (OnPause, likewise), or the session fails (OnFail with the error).
// mirroring is called when the initial partitions are admitted.
func (s *session) run(ctx context.Context, mirroring func() error) (Trigger, sessionEnd, error) {
	l := s.l
	ck := time.NewTicker(l.cfg.Link.CheckpointInterval)
	defer ck.Stop()
	disc := time.NewTicker(l.cfg.Link.DiscoveryInterval)
	defer disc.Stop()
	tick := time.NewTicker(tickInterval)
	defer tick.Stop()
	var (
		drain    <-chan time.Time
		stopping = OnStop // how the session ends once its stop is done
		stopped  bool
		live     bool // MIRRORING entered
	)
	end := func() sessionEnd { return sessionEnd{unresolved: s.pipe.Unresolved()} }
	o := &online{queries: s.queries, done: make(chan struct{}), logs: s.logs, discover: make(chan struct{}, 1), leaseValid: s.state.LeaseValid}
	l.online.Store(o)
	defer func() {
		l.online.Store(nil)
		close(o.done)
	}()
	drainTimer := time.NewTimer(time.Hour)
	drainTimer.Stop()
	defer drainTimer.Stop()
	stop := func(ev Trigger, state State) stepped {
		if stopped {
			return stepped{}
		}
		stopped, stopping = true, ev
		drainTimer.Reset(l.cfg.ShutdownTimeout)
		drain = drainTimer.C
		return s.step(InStop{State: state})
	}
	done := ctx.Done()
	if l.pausing() {
		// Paused while the session began, and the wake was read
		// where the pause could not be carried out yet.
		if out := stop(OnPause, Paused); out.ended {
			return out.result(stopping, end())
		}
	}
	for {
		var ev Input
		select {
		case <-done:
			done = nil
			if l.crash != nil && l.crash() {
				return OnStop, end(), nil
			}
			if out := stop(OnStop, Stopped); out.ended {
				return out.result(stopping, end())
			}
			continue
		case <-l.cmd.wake:
			if l.pausing() {
				if out := stop(OnPause, Paused); out.ended {
					return out.result(stopping, end())
				}
			}
			continue
		case <-s.ctx.Done():
			return OnFail, end(), context.Cause(s.ctx)
		case r := <-s.fetch.Results():
			ev = InFetched{Result: r}
		case <-s.app.Results().Wake():
			for _, r := range s.app.Results().Take() {
				if out := s.step(InAppended{Result: r}); out.ended {
					return out.result(stopping, end())
				}
			}
			continue
		case <-s.inputs.Wake():
			for _, e := range s.inputs.Take() {
				out := s.step(e)
				if out.ended {
					return out.result(stopping, end())
				}
				if out.mirroring {
					if err := mirroring(); err != nil {
						return OnFail, end(), err
					}
					l.kickConfigSync() // the topics' settings, now that the session is live
					live = true
					s.askDiscovery(o)
				}
				if ip, ok := e.(InPlaced); ok {
					s.placedSome(ip)
				}
			}
			continue
		case q := <-s.queries:
			q.fn(s.pipe)
			close(q.done)
			continue
		case <-ck.C:
			ev = InCheckpointDue{}
		case <-disc.C:
			ev = InDiscoveryDue{}
		case <-o.discover:
			ev = InDiscoveryDue{}
		case <-tick.C:
			s.publish()
			if live {
				s.askDiscovery(o)
			}
			ev = InTick{}
		case <-drain:
			ev = InDrainTimeout{}
		}
		out := s.step(ev)
		if out.ended {
			return out.result(stopping, end())
		}
		if out.mirroring {
			if err := mirroring(); err != nil {
				return OnFail, end(), err
			}
			l.kickConfigSync()
			live = true
			s.askDiscovery(o)
		}
	}
}

// stepped is what one step asked of the session beyond its actions.
type stepped struct {
	ended     bool  // the session is over: DoFinish, DoFail or a refused submit
	err       error // DoFail
	mirroring bool  // DoEnterMirroring
}

func (o stepped) result(stopping Trigger, end sessionEnd) (Trigger, sessionEnd, error) {
	if o.err != nil {
		return OnFail, end, o.err
	}
	return stopping, end, nil
}

// step applies one event and carries out the actions it returns.
func (s *session) step(ev Input) stepped {
	var out stepped
	s.noteRefusal(ev)
	if e, ok := ev.(InPlaced); ok && e.Err == nil && len(e.Parts) > 0 {
		s.l.kickConfigSync() // new topics' settings at once, not in a minute
	}
	for _, a := range s.pipe.Step(s.l.deps.Now(), ev) {
		switch a := a.(type) {
		case DoAssign:
			if a.Reconciling {
				s.fetch.AssignReconciling(a.Src, a.Offset, a.Gen)
			} else {
				s.fetch.Assign(a.Src, a.Offset, a.Gen)
			}
		case DoUnassign:
			s.fetch.Unassign(a.Src)
		case DoRelease:
			s.fetch.Release(a.Pin)
		case DoSubmit:
			if err := s.app.Submit(a.Request); err != nil {
				// The pipeline keeps one batch per partition in the
				// appender, and the batch passed decide: a refusal
				// is a bug or a closed appender.
				out.ended, out.err = true, fmt.Errorf("destination %s: submit: %w", a.Request.Partition, err)
			}
		case DoSettle:
			s.work(func(ctx context.Context) Input { return s.settle(ctx, a) })
		case DoJoin:
			s.work(func(ctx context.Context) Input { return s.join(ctx, a) })
		case DoReadTail:
			s.work(func(ctx context.Context) Input { return s.readTail(ctx, a) })
		case DoLookupSourceEnd:
			s.work(func(ctx context.Context) Input { return s.sourceEnd(ctx, a.Src) })
		case DoCommit:
			select {
			case s.commits <- a:
			default:
				panic("link: a state commit while another is in flight")
			}
		case DoDiscover:
			s.work(func(ctx context.Context) Input { return s.discoverAll(ctx, a.Known) })
		case DoPlace:
			s.work(func(ctx context.Context) Input { return s.placeNew(ctx, a.Pairs) })
		case DoEnterMirroring:
			out.mirroring = true
		case DoFail:
			out.ended, out.err = true, a.Err
		case DoFinish:
			out.ended = true
		case DoLog:
			s.log.Log(a.Level, a.Msg, a.Args...)
		default:
			panic(fmt.Sprintf("link: pipeline action %T", a))
		}
	}
	s.report()
	if n := s.pipe.Len(); n != s.published || out.mirroring {
		s.publish() // the partition set changed: show it at once
	}
	return out
}

// noteRefusal shows a missing ACL that discovery or placement met while the
// link mirrors in the link's last_error: the link keeps mirroring what it
// has (the pipeline retries at the next discovery), but an operator must
// grant the permission for the new topic or partitions to be mirrored.
func (s *session) noteRefusal(ev Input) {
	var err error
	switch e := ev.(type) {
	case InDiscovered:
		err = e.Err
	case InPlaced:
		err = e.Err
	}
	if err == nil || !access.IsRefusal(err) {
		return
	}
	now := s.l.deps.Now()
	s.l.setStatus(func(st *Status) { st.LastError, st.LastErrorAt = err.Error(), now })
}

// work runs fn on a worker goroutine of the session and hands its event to
// the link goroutine.
func (s *session) work(fn func(ctx context.Context) Input) {
	s.g.Go(func() error {
		if ev := fn(s.ctx); ev != nil && s.ctx.Err() == nil {
			s.inputs.Put(ev)
		}
		return nil
	})
}

// committer runs the state transactions one at a time (a transactional
// producer has at most one transaction open). The final commit gets its
// own deadline: it runs after the agent's context ended.
func (s *session) committer() error {
	for {
		select {
		case <-s.ctx.Done():
			return nil
		case c := <-s.commits:
			var err error
			if c.Final {
				ctx, cancel := context.WithTimeout(s.ctx, s.l.cfg.ShutdownTimeout)
				err = s.state.CommitStop(ctx, c.State, c.Unresolved, c.Records...)
				cancel()
			} else {
				err = s.state.Commit(s.ctx, c.State, c.Records...)
			}
			s.inputs.Put(InCommitted{ID: c.ID, Err: err})
		}
	}
}
