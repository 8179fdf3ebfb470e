package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/internal/backoff"
	"github.com/seed83556561/mirrord/link"
	"github.com/seed83556561/mirrord/slots"
)

// SlotsGroup names the consumer group of a link's slots (the slots key)
// on its destination cluster.
func SlotsGroup(linkName string) string { return "mirrord-slots-" + linkName }

// SlotsTopic names the topic of a link's slots group, one partition per
// slot, on its destination cluster. The name begins with "__", which a
// link never mirrors.
func SlotsTopic(linkName string) string { return "__mirror_slots_" + linkName }

// slotRunner runs the slots of one link with slots (slots above 1) that
// this agent owns: it is the agent's member of the link's slots group
// (slots.Member) and its Handler, and runs a link.Link per slot the group
// gives it, until the group takes the slot away or the agent stops.
type slotRunner struct {
	name string
	cfg  link.Config // each slot's, but for Slot
	deps link.Deps
	opts []kgo.Opt // the destination cluster's, for the group
	log  hclog.Logger
	met  *slotMetrics

	// ctx is Run's: the slot Links run under it; set before the member
	// joins, read by the Handler's calls.
	ctx context.Context
	// errs carries a slot Link's broken invariant to run (a buffer of
	// one: the first is enough to stop the agent).
	errs chan error

	mu      sync.Mutex
	joined  bool
	running map[int]*slotRun
}

// slotRun is one slot's Link and its goroutine.
type slotRun struct {
	l      *link.Link
	cancel context.CancelFunc
	done   chan struct{}
}

func newSlotRunner(cfg link.Config, deps link.Deps, opts []kgo.Opt, met *slotMetrics) *slotRunner {
	return &slotRunner{
		name: cfg.Link.Name, cfg: cfg, deps: deps, opts: opts, met: met,
		log:     deps.Logger.Named("slots").With("link", cfg.Link.Name),
		errs:    make(chan error, 1),
		running: map[int]*slotRun{},
	}
}

// run joins the link's slots group (retrying until it can, or ctx ends),
// runs the slots it is given, and at the end leaves the group, which
// stops them cleanly. It returns a slot Link's broken invariant, after
// stopping every slot.
func (r *slotRunner) run(ctx context.Context) error {
	r.ctx = ctx
	retry := backoff.Policy{First: time.Second, Max: 30 * time.Second}
	var m *slots.Member
	for attempt := 1; m == nil; attempt++ {
		var err error
		m, err = slots.Join(ctx, slots.Config{
			Group: SlotsGroup(r.name), Topic: SlotsTopic(r.name), Slots: r.cfg.Link.Slots,
			ReplicationFactor: r.cfg.Link.StateTopicReplicationFactor,
			SessionTimeout:    r.cfg.Link.SessionTimeout,
			Logger:            r.log,
			// The settings without the clusters' IDs, which the slot
			// sessions resolve and check (takeSlot, checkOthers): the
			// agent joins before it reached the source.
			Fingerprint: r.cfg.Link.Fingerprint("", ""),
			Agent:       r.cfg.Agent,
		}, r.opts, r)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		wait := retry.Wait(attempt)
		r.log.Error("cannot join the link's slots group; retrying", "group", SlotsGroup(r.name), "topic", SlotsTopic(r.name), "error", err, "wait", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
	r.mu.Lock()
	r.joined = true
	r.mu.Unlock()
	var err error
	select {
	case <-ctx.Done():
	case err = <-r.errs:
	}
	// Leave revokes the slots (Revoked stops them cleanly) and leaves
	// the group, so that the other agents take them at once.
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*r.cfg.ShutdownTimeout+r.cfg.Link.SessionTimeout)
	defer cancel()
	if lerr := m.Leave(lctx); lerr != nil {
		r.log.Warn("leaving the slots group failed; the other agents take the slots when the group's session times out", "error", lerr)
	}
	r.mu.Lock()
	r.joined = false
	left := slices.Collect(maps.Keys(r.running))
	r.mu.Unlock()
	r.stop(left, "the agent stops")
	return err
}

// Assigned starts a Link for each slot.
func (r *slotRunner) Assigned(_ context.Context, ss []int) {
	r.met.rebalances.WithLabelValues(r.name, "assigned").Inc()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range ss {
		if r.running[s] != nil {
			continue
		}
		cfg := r.cfg
		cfg.Slot = s
		l, err := link.New(cfg, r.deps)
		if err != nil { // New validated the same configuration at start
			r.log.Error("cannot run an assigned slot", "slot", s, "error", err)
			continue
		}
		ctx, cancel := context.WithCancel(r.ctx)
		sr := &slotRun{l: l, cancel: cancel, done: make(chan struct{})}
		r.running[s] = sr
		go func() {
			defer close(sr.done)
			if err := l.Run(ctx); err != nil {
				select {
				case r.errs <- fmt.Errorf("link %s slot %d: %w", r.name, s, err):
				default:
				}
			}
		}()
	}
	r.log.Info("slots assigned", "slots", ss, "owned", r.ownedLocked())
	r.met.owned.WithLabelValues(r.name).Set(float64(len(r.running)))
}

// Revoked stops each slot cleanly (drain, final checkpoint) and returns
// when they stopped: their next owner then takes them without a wait.
func (r *slotRunner) Revoked(_ context.Context, ss []int) {
	r.met.rebalances.WithLabelValues(r.name, "revoked").Inc()
	r.stop(ss, "revoked by the slots group")
}

// Lost stops each slot as Revoked does: the group may have given it to
// another agent already, whose InitProducerId fences this one's session
// (a final checkpoint it still tries is refused), and which in preserve
// delivery waits out this session's lease and produce timeout before it
// appends (the watchdog of slots.Member gives the slots up half a session
// timeout before the coordinator can move them).
func (r *slotRunner) Lost(ss []int) {
	r.met.rebalances.WithLabelValues(r.name, "lost").Inc()
	r.stop(ss, "the agent lost its membership of the slots group")
}

// stop stops the Links of the slots given, all at once, and waits for
// them.
func (r *slotRunner) stop(ss []int, why string) {
	r.mu.Lock()
	var stopping []*slotRun
	for _, s := range ss {
		if sr := r.running[s]; sr != nil {
			sr.cancel()
			stopping = append(stopping, sr)
			delete(r.running, s)
		}
	}
	r.mu.Unlock()
	if len(stopping) == 0 {
		return
	}
	r.log.Info("stopping slots", "slots", ss, "cause", why)
	for _, sr := range stopping {
		<-sr.done
	}
	r.mu.Lock()
	r.log.Info("slots stopped", "slots", ss, "owned", r.ownedLocked())
	r.met.owned.WithLabelValues(r.name).Set(float64(len(r.running)))
	r.mu.Unlock()
}

// ownedLocked are the slots running, in order; r.mu held.
func (r *slotRunner) ownedLocked() []int {
	return slices.Sorted(maps.Keys(r.running))
}

// statuses are the statuses of the slots this agent runs, in slot order,
// and whether it is a member of the link's group.
func (r *slotRunner) statuses() ([]link.Status, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]link.Status, 0, len(r.running))
	for _, s := range r.ownedLocked() {
		out = append(out, r.running[s].l.Status())
	}
	return out, r.joined
}

// errSlotted: a per-link command on a link with slots.
var errSlotted = errors.New("link runs in slots")

// slotMetrics are the metrics of the agent's links with slots.
type slotMetrics struct {
	owned      *prometheus.GaugeVec
	rebalances *prometheus.CounterVec
}

func newSlotMetrics(reg prometheus.Registerer) *slotMetrics {
	m := &slotMetrics{
		owned: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mirrord_slots_owned",
			Help: "Slots of the link this agent owns and runs (links with slots above 1).",
		}, []string{"link"}),
		rebalances: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mirrord_slot_rebalances_total",
			Help: "Changes of the slots this agent owns, by event: assigned (the slots group gave it slots), revoked (a rebalance moved slots away; they stopped cleanly), lost (its membership ended: session expired or coordinator out of reach; they stopped, and whatever they still commit is fenced by their new owner).",
		}, []string{"link", "event"}),
	}
	reg.MustRegister(m.owned, m.rebalances)
	return m
}

// slotName is how a slot shows where a name is expected: <link>.<slot>.
func slotName(st link.Status) string {
	if st.Slot == nil {
		return st.Name
	}
	return st.Name + "." + strconv.Itoa(*st.Slot)
}
