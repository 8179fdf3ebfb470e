package link

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Failover (DESIGN §13): an operator moves consumers to the destination in
// one step. The link waits until it has mirrored every partition up to the
// source's last stable offset (the operator has stopped or fenced the
// source producers, or accepts the lag it reports), runs a final group
// sync, and pauses itself (drain, final checkpoint committed clean): it
// mirrors nothing more until an operator resumes it. If it does not catch
// up within the timeout (and lag is not allowed), or the final sync fails,
// the link is left as it was, mirroring.
//
// StartFailover hands the request to a goroutine that Link.Run starts and
// waits for (runFailovers); the outcome and the report are in the link's
// status (Status.Failover) while it runs and after.

// FailoverOptions are a failover's parameters.
type FailoverOptions struct {
	// Timeout bounds the wait for the link to catch up (default 5m).
	Timeout time.Duration
	// AllowLag fails over after Timeout even if the link has not caught
	// up, reporting the lag.
	AllowLag bool
}

// DefaultFailoverTimeout is FailoverOptions.Timeout's default.
const DefaultFailoverTimeout = 5 * time.Minute

// Failover outcomes.
const (
	FailoverRunning     = "running"
	FailoverDone        = "done"          // caught up, synced, paused
	FailoverDoneWithLag = "done_with_lag" // with AllowLag: synced and paused behind the source
	FailoverNotCaughtUp = "not_caught_up" // the link was left mirroring
	FailoverFailed      = "failed"        // see Error; the link was left as it was
)

// FailoverStatus is a link's last failover.
type FailoverStatus struct {
	Started  time.Time     `json:"started"`
	Ended    time.Time     `json:"ended,omitzero"`
	Timeout  time.Duration `json:"timeout"`
	AllowLag bool          `json:"allow_lag"`
	Outcome  string        `json:"outcome"`
	Error    string        `json:"error,omitempty"`
	// Lag is the committed source records not mirrored when the
	// failover ended, over every partition.
	Lag        int64               `json:"lag_records"`
	Partitions []FailoverPartition `json:"partitions"`
	// Groups is the final group sync's outcome, per group and partition.
	Groups []GroupStatus `json:"groups"`
}

// FailoverPartition is one mirrored partition at the end of a failover.
type FailoverPartition struct {
	SourceTopic      string `json:"source_topic"`
	DestinationTopic string `json:"destination_topic"`
	Partition        int32  `json:"partition"`
	// SourceLastStable is the source's last stable offset; SourceNext the
	// link's position and DestinationNext the destination offset the
	// source's last stable offset translates to (-1 while behind).
	SourceLastStable int64 `json:"source_last_stable_offset"`
	SourceNext       int64 `json:"source_next_offset"`
	DestinationNext  int64 `json:"destination_offset"`
	CaughtUp         bool  `json:"caught_up"`
	Lag              int64 `json:"lag_records"`
}

// Errors of StartFailover.
var (
	ErrNotMirroring    = errors.New("the link is not mirroring")
	ErrFailoverRunning = errors.New("a failover of the link is running")
)

// StartFailover starts a failover of the link and returns at once; its
// progress and outcome are in Status().Failover.
func (l *Link) StartFailover(o FailoverOptions) error {
	if o.Timeout <= 0 {
		o.Timeout = DefaultFailoverTimeout
	}
	if st := l.Status().State; st != Mirroring {
		return fmt.Errorf("%w (it is %s): a failover starts from MIRRORING", ErrNotMirroring, st)
	}
	if !l.failing.CompareAndSwap(false, true) {
		return ErrFailoverRunning
	}
	l.setStatus(func(s *Status) {
		s.Failover = &FailoverStatus{Started: l.deps.Now(), Timeout: o.Timeout, AllowLag: o.AllowLag, Outcome: FailoverRunning,
			Partitions: []FailoverPartition{}, Groups: []GroupStatus{}}
	})
	select {
	case l.failovers <- o:
		return nil
	default: // cannot happen: failing admits one request at a time
		l.failing.Store(false)
		return ErrFailoverRunning
	}
}

// runFailovers carries out failover requests until ctx ends.
func (l *Link) runFailovers(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			if l.failing.Load() {
				l.endFailover(func(f *FailoverStatus) { f.Outcome, f.Error = FailoverFailed, "the agent stopped during the failover" })
			}
			return
		case o := <-l.failovers:
			l.failover(ctx, o)
		}
	}
}

func (l *Link) endFailover(fn func(*FailoverStatus)) {
	l.setStatus(func(s *Status) {
		f := FailoverStatus{}
		if s.Failover != nil {
			f = *s.Failover
		}
		fn(&f)
		f.Ended = l.deps.Now()
		s.Failover = &f
	})
	l.failing.Store(false)
}

// failover runs one failover.
func (l *Link) failover(ctx context.Context, o FailoverOptions) {
	log := l.log.With("failover", true)
	log.Info("failover: waiting until the link has mirrored up to the source's last stable offsets", "timeout", o.Timeout, "allow_lag", o.AllowLag)
	cl, err := kgo.NewClient(l.deps.SourceOpts...)
	if err != nil {
		l.endFailover(func(f *FailoverStatus) { f.Outcome, f.Error = FailoverFailed, err.Error() })
		return
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	deadline := l.deps.Now().Add(o.Timeout)
	var (
		parts  []FailoverPartition
		lag    int64
		caught bool
	)
	for {
		parts, lag, caught, err = l.catchUp(ctx, adm)
		if ctx.Err() != nil {
			return // runFailovers records it
		}
		l.setStatus(func(s *Status) {
			if s.Failover != nil {
				f := *s.Failover
				f.Partitions, f.Lag = parts, lag
				if err != nil {
					f.Error = err.Error()
				}
				s.Failover = &f
			}
		})
		if caught || !l.deps.Now().Before(deadline) {
			break
		}
		if !sleep(ctx, 200*time.Millisecond) {
			return
		}
	}
	if !caught && !o.AllowLag {
		log.Warn("failover: the link did not catch up within the timeout; it keeps mirroring", "lag_records", lag, "error", err)
		l.endFailover(func(f *FailoverStatus) {
			f.Outcome, f.Partitions, f.Lag = FailoverNotCaughtUp, parts, lag
			if err != nil {
				f.Error = err.Error()
			}
		})
		return
	}
	groups := []GroupStatus{}
	if l.groups.Load() != nil {
		groups, err = l.SyncGroups(ctx)
		failed := err
		for _, g := range groups {
			if failed == nil && g.State == GroupFailed {
				failed = fmt.Errorf("group %q: %s", g.Group, g.Error)
			}
		}
		if failed != nil {
			log.Error("failover: the final group sync failed; the link keeps mirroring", "error", failed)
			l.endFailover(func(f *FailoverStatus) {
				f.Outcome, f.Error, f.Groups, f.Partitions, f.Lag = FailoverFailed, "final group sync: "+failed.Error(), groups, parts, lag
			})
			return
		}
	}
	l.Pause()
	for l.Status().State != Paused {
		if !sleep(ctx, 20*time.Millisecond) {
			return
		}
		if st := l.Status().State; st == Failed || st == Stopped {
			l.endFailover(func(f *FailoverStatus) {
				f.Outcome, f.Error, f.Groups, f.Partitions, f.Lag = FailoverFailed, fmt.Sprintf("the link became %s instead of PAUSED", st), groups, parts, lag
			})
			return
		}
	}
	outcome := FailoverDone
	if !caught {
		outcome = FailoverDoneWithLag
	}
	log.Info("failover: done; the link is paused", "outcome", outcome, "lag_records", lag, "groups", len(groups))
	l.endFailover(func(f *FailoverStatus) {
		f.Outcome, f.Groups, f.Partitions, f.Lag, f.Error = outcome, groups, parts, lag, ""
	})
}

// catchUp compares every partition the running session mirrors with the
// source's last stable offset: caught up when the source holds no
// committed record between the link's position and it (a head
// translation of it succeeds).
func (l *Link) catchUp(ctx context.Context, adm *kadm.Client) (parts []FailoverPartition, lag int64, caught bool, err error) {
	o := l.online.Load()
	if o == nil {
		return nil, 0, false, errors.New("the link runs no session")
	}
	var anchors []Anchor
	if err := o.ask(ctx, func(pl *Pipeline) {
		for _, pr := range pl.Pairs() {
			if a, ok := pl.Anchor(pr.Src.Key()); ok {
				anchors = append(anchors, a)
			}
		}
	}); err != nil {
		return nil, 0, false, err
	}
	if len(anchors) == 0 {
		return nil, 0, false, errors.New("the link mirrors no partition yet")
	}
	var topics []string
	for _, a := range anchors {
		topics = append(topics, a.Src.Topic)
	}
	slices.Sort(topics)
	lso, err := adm.ListCommittedOffsets(ctx, slices.Compact(topics)...)
	if err == nil {
		err = lso.Error()
	}
	if err != nil {
		return nil, 0, false, fmt.Errorf("list the source's last stable offsets: %w", err)
	}
	caught = true
	for _, a := range anchors {
		p := FailoverPartition{SourceTopic: a.Src.Topic, DestinationTopic: a.Dst.Topic, Partition: a.Src.Partition,
			SourceNext: a.SrcNext, DestinationNext: -1}
		lo, ok := lso.Lookup(a.Src.Topic, a.Src.Partition)
		if !ok {
			return nil, 0, false, fmt.Errorf("the source did not list %s", a.Src)
		}
		p.SourceLastStable = lo.Offset
		switch {
		case !a.Head:
			p.Lag = max(0, lo.Offset-a.SrcNext)
		case a.SrcNext >= lo.Offset:
			p.CaughtUp, p.DestinationNext = true, a.DstNext
		default:
			t, err := o.tr.translate(ctx, a, lo.Offset)
			switch {
			case err == nil:
				p.CaughtUp, p.DestinationNext = true, t.DestinationOffset
			case errors.Is(err, ErrAheadOfLink):
				p.Lag = lo.Offset - a.SrcNext
			default:
				return nil, 0, false, err
			}
		}
		caught = caught && p.CaughtUp
		lag += p.Lag
		parts = append(parts, p)
	}
	slices.SortFunc(parts, func(a, b FailoverPartition) int {
		if a.SourceTopic != b.SourceTopic {
			if a.SourceTopic < b.SourceTopic {
				return -1
			}
			return 1
		}
		return int(a.Partition - b.Partition)
	})
	return parts, lag, caught, nil
}
