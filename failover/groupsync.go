package failover

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/internal/backoff"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/translate"
)

// Group offset sync (DESIGN §13). For each source consumer group the link's
// groups block selects, every group_sync_interval: its committed offsets on
// the partitions the link mirrors are translated (package translate) and
// committed to the group of the same ID at the destination, on the
// destination topic the link mirrors into, with the committed metadata.
// Three rules keep it from harming consumers:
//
//   - it commits only while this agent's session of the link is the live
//     one (Link.Live: MIRRORING, holding its lease): a standby agent, a
//     fenced session that has not noticed yet, and a paused or failed link
//     commit nothing, so that two agents never sync the same groups;
//   - a group with active members at the destination is left alone (its
//     consumers commit for themselves; a commit from outside would race
//     them), and so is one whose state the destination does not report as
//     Empty or Dead, or does not report at all (a group missing from the
//     answer, or answered with an error, is unknown, not inactive);
//   - an offset is committed only if it moves the destination group
//     forward: one that read past the translation at the destination by
//     itself, or was synced from a source commit later reset back, keeps
//     its offset. Kafka has no conditional offset commit: an offset that
//     someone else commits to the inactive destination group between a
//     round's fetch of its offsets and the round's commit can still be
//     overwritten by that commit.
//
// A group coordinator that is not available, has moved or is loading
// (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS:
// a cluster that has just started creates __consumer_offsets on the first
// request for a group, a rolling restart moves coordinators) is asked again
// within the round, with backoff, for up to coordinatorPatience; kgo does
// not retry a FindCoordinator answer inside DescribeGroups or OffsetFetch.
// Only an answer that persists fails the group, and its status says so.
//
// The decisions are planGroup, a pure function; groupSync does the I/O. Its
// goroutine (run) is started and waited for by Mover.Run, which also closes
// its clients; rounds are serialised by a mutex, so that the final sync of
// a failover (Mover.SyncGroups) never runs beside a periodic one.

// GroupSyncStatus is the group offset sync's part of a link's status.
type GroupSyncStatus struct {
	Interval time.Duration `json:"interval"`
	// LastRound is when the last round ended; LastSuccess when the last
	// round in which every selected group synced without an error ended.
	LastRound   time.Time `json:"last_round,omitzero"`
	LastSuccess time.Time `json:"last_success,omitzero"`
	LastError   string    `json:"last_error,omitempty"`
	// Idle says why no round runs now: this agent's session of the link
	// is not the live one (see Link.Live). Empty while rounds run.
	Idle   string        `json:"idle,omitempty"`
	Groups []GroupStatus `json:"groups"`
}

// GroupStatus is one group after the last round.
type GroupStatus struct {
	Group string `json:"group"`
	// Type is the group's kind: consumer (a consumer group, its
	// committed offsets) or share (a share group, its start offsets).
	Type string `json:"type"`
	// State: synced (offsets committed this round), up_to_date (nothing
	// to move forward), active (members at the destination, or a state
	// other than Empty or Dead: left alone), failed (see Error; partitions
	// that translated may still have been committed; a group the
	// destination did not describe is failed and left alone).
	State      string               `json:"state"`
	Error      string               `json:"error,omitempty"`
	Partitions []GroupPartitionSync `json:"partitions"`
	At         time.Time            `json:"at"`
	Members    int                  `json:"destination_members"`
	DstState   string               `json:"destination_state,omitempty"`
}

// Group states.
const (
	GroupSynced   = "synced"
	GroupUpToDate = "up_to_date"
	GroupActive   = "active"
	GroupFailed   = "failed"
)

// GroupPartitionSync is one partition of a group after a round.
type GroupPartitionSync struct {
	SourceTopic      string `json:"source_topic"`
	DestinationTopic string `json:"destination_topic"`
	Partition        int32  `json:"partition"`
	// SourceCommitted is the source group's committed offset;
	// Translation its translation (-1: none, see Error).
	SourceCommitted int64 `json:"source_committed_offset"`
	Translation     int64 `json:"translated_offset"`
	// DestinationCommitted is the destination group's offset after the
	// round (-1: none).
	DestinationCommitted int64 `json:"destination_committed_offset"`
	// Action: committed, kept (the destination group is at or past the
	// translation), skipped (the group is active at the destination),
	// failed.
	Action string `json:"action"`
	Error  string `json:"error,omitempty"`
}

// Partition actions.
const (
	ActionCommitted = "committed"
	ActionKept      = "kept"
	ActionSkipped   = "skipped"
	ActionFailed    = "failed"
)

// planGroup decides one group's round: from the source group's translated
// offsets gt, the destination group's committed offsets dst (by
// destination topic and partition) and whether the group is active at the
// destination, the offsets to commit and each partition's outcome. It
// does no I/O.
func planGroup(gt translate.GroupOffsets, dst map[tp.Key]int64, active bool) (commits []kadm.Offset, parts []GroupPartitionSync, state string) {
	state = GroupUpToDate
	if active {
		state = GroupActive
	}
	for _, g := range gt.Partitions {
		p := GroupPartitionSync{
			SourceTopic: g.SourceTopic, DestinationTopic: g.DestinationTopic, Partition: g.Partition,
			SourceCommitted: g.SourceOffset, Translation: -1, DestinationCommitted: -1,
		}
		if cur, ok := dst[tp.Key{Topic: g.DestinationTopic, Partition: g.Partition}]; ok && g.DestinationTopic != "" {
			p.DestinationCommitted = cur
		}
		switch {
		case g.Err != nil:
			p.Action, p.Error = ActionFailed, g.Err.Error()
			if !active {
				state = GroupFailed
			}
		case active:
			p.Translation, p.Action = g.DestinationOffset, ActionSkipped
		case p.DestinationCommitted >= g.DestinationOffset:
			p.Translation, p.Action = g.DestinationOffset, ActionKept
		default:
			p.Translation, p.Action, p.DestinationCommitted = g.DestinationOffset, ActionCommitted, g.DestinationOffset
			commits = append(commits, kadm.Offset{
				Topic: g.DestinationTopic, Partition: g.Partition, At: g.DestinationOffset,
				LeaderEpoch: -1, Metadata: g.Metadata,
			})
			if state == GroupUpToDate {
				state = GroupSynced
			}
		}
		parts = append(parts, p)
	}
	return commits, parts, state
}

// groupInactive reports whether a destination group may be committed to
// from outside: it was described without an error, has no members and its
// state is Empty or Dead (a group that does not exist is Dead). A group
// described without a state is unknown, and unknown is left alone.
func groupInactive(d kadm.DescribedGroup) bool {
	return d.Err == nil && len(d.Members) == 0 && (d.State == "Empty" || d.State == "Dead")
}

// errNotDescribed: the destination's DescribeGroups answer left the group
// out.
var errNotDescribed = errors.New("the destination's DescribeGroups answer did not include the group")

// ErrNotLive is a round's error when this agent's session of the link is
// not the live one (Link.Live): group sync commits nothing then.
var ErrNotLive = errors.New("this agent's session of the link is not the live one (not MIRRORING, or its lease lapsed): group sync commits only from the session that holds the link")

// coordinatorBusy reports whether err is a group coordinator's answer that
// passes: not available (yet), moved elsewhere, or loading its groups.
func coordinatorBusy(err error) bool {
	return errors.Is(err, kerr.CoordinatorNotAvailable) || errors.Is(err, kerr.NotCoordinator) ||
		errors.Is(err, kerr.CoordinatorLoadInProgress)
}

// Defaults of the coordinator retries of a round (Mover.coordinatorRetry
// and coordinatorPatience): a coordinator moves within seconds in a rolling
// restart, and a round that waits longer than one default
// group_sync_interval is better reported.
var (
	defaultCoordinatorRetry    = backoff.Policy{First: 100 * time.Millisecond, Max: 2 * time.Second}
	defaultCoordinatorPatience = 10 * time.Second
)

// retryCoordinator runs fn, and again while it fails with a coordinator's
// passing answer (coordinatorBusy), waiting the Mover's coordinator backoff
// in between, for up to its patience (counted from the first attempt, so
// that a request kgo already retried for long is not retried much longer).
// An answer that persists is returned saying how long it lasted; any other
// error, or nil, at once.
func (g *groupSync) retryCoordinator(ctx context.Context, fn func() error) error {
	start := g.m.now()
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || !coordinatorBusy(err) {
			return err
		}
		wait := g.m.coordinatorRetry.Wait(attempt)
		if elapsed := g.m.now().Sub(start); elapsed+wait > g.m.coordinatorPatience {
			return fmt.Errorf("%w (the coordinator's answer %d times over %s)", err, attempt, elapsed.Round(time.Millisecond))
		}
		if err := backoff.Sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// groupSync runs a link's group offset sync.
type groupSync struct {
	m        *Mover
	log      hclog.Logger
	src, dst *kgo.Client
	srcAdm   *kadm.Client
	dstAdm   *kadm.Client

	mu sync.Mutex // one round at a time
	// noneListed, noShareListed: the last round's source listing held no
	// selected group, share group (said once in the log until one
	// appears).
	noneListed, noShareListed bool
}

// Why group sync needs each Group permission (docs/acls.md).
const (
	WhyDstGroupDescribe = "group sync describes the group at the destination and fetches its offsets there, to commit only while the group has no active members and never behind what it committed; Read implies Describe"
	WhyDstGroupRead     = "group sync commits the translated offsets, and OffsetCommit needs Read on the group"
	WhySrcGroupDescribe = "group sync fetches the group's committed offsets at the source"
)

func newGroupSync(m *Mover) (*groupSync, error) {
	g := &groupSync{m: m, log: m.log.Named("groups")}
	var err error
	if g.src, err = kgo.NewClient(m.cfg.SourceOpts...); err != nil {
		return nil, fmt.Errorf("group sync: source cluster %s client: %w", m.cfg.Source.Name, err)
	}
	if g.dst, err = kgo.NewClient(m.cfg.DestinationOpts...); err != nil {
		g.src.Close()
		return nil, fmt.Errorf("group sync: destination cluster %s client: %w", m.cfg.Destination.Name, err)
	}
	g.srcAdm, g.dstAdm = kadm.NewClient(g.src), kadm.NewClient(g.dst)
	return g, nil
}

func (g *groupSync) close() {
	g.src.Close()
	g.dst.Close()
}

// run syncs every interval until ctx ends, and brings the age of the last
// successful round up to date every second. While this agent's session is
// not the live one no round runs, and the status says why (Idle).
func (g *groupSync) run(ctx context.Context) {
	t := time.NewTicker(g.m.cfg.GroupSyncInterval)
	defer t.Stop()
	age := time.NewTicker(time.Second)
	defer age.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-age.C:
			g.m.met.refreshAge(g.m.now())
			continue
		case <-t.C:
		}
		if _, err := g.round(ctx); err != nil && ctx.Err() == nil && !errors.Is(err, ErrNotLive) {
			g.log.Warn("group offset sync round failed", "error", err)
		}
	}
}

// idle records in the status that rounds wait for this agent's session to
// be the live one, keeping the last round's outcome.
func (g *groupSync) idle() {
	g.m.setGroups(func(c *GroupSyncStatus) { c.Idle = ErrNotLive.Error() })
}

// round syncs every selected group once; it returns ErrNotLive, and leaves
// the last round's outcome in the status as it was, if this agent's session
// of the link is not the live one.
func (g *groupSync) round(ctx context.Context) ([]GroupStatus, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.m.link.Live() {
		g.idle()
		return []GroupStatus{}, ErrNotLive
	}
	out, err := []GroupStatus{}, error(nil)
	if g.m.cfg.Groups != nil {
		out, err = g.sync(ctx)
	}
	if g.m.cfg.ShareGroups != nil && ctx.Err() == nil {
		shares, serr := g.syncShare(ctx)
		out, err = append(out, shares...), errors.Join(err, serr)
	}
	now := g.m.now()
	ok := err == nil
	for _, s := range out {
		ok = ok && s.State != GroupFailed
	}
	if ok {
		g.m.met.lastSuccess.Store(now.UnixNano())
	}
	g.m.met.refreshAge(now)
	g.m.setGroups(func(c *GroupSyncStatus) {
		c.LastRound, c.Groups, c.LastError, c.Idle = now, out, "", ""
		if ok {
			c.LastSuccess = now
		}
		if err != nil {
			c.LastError = err.Error()
		}
	})
	return out, err
}

func (g *groupSync) sync(ctx context.Context) ([]GroupStatus, error) {
	var listed kadm.ListedGroups
	err := g.retryCoordinator(ctx, func() (err error) {
		listed, err = g.srcAdm.ListGroups(ctx)
		return err
	})
	if err != nil {
		return []GroupStatus{}, fmt.Errorf("list the source's groups: %w", err)
	}
	var names []string
	for _, l := range listed {
		// Share groups (KIP-932) have no committed offsets: the
		// share_groups block selects those (syncShare).
		if l.GroupType != TypeShare && g.m.cfg.Groups.Selects(l.Group) {
			names = append(names, l.Group)
		}
	}
	slices.Sort(names)
	out := []GroupStatus{}
	if len(names) == 0 {
		if !g.noneListed {
			// As with topics, Kafka leaves out of a listing what the
			// principal may not describe.
			g.log.Warn("group offset sync: no source group matches the link's groups among those the source lists: Kafka lists only the groups the principal may describe, so a group without Describe on it is left out without a word, as is a group that has not committed offsets yet (see docs/acls.md)",
				"source", g.m.cfg.Source.Name, "principal", g.m.cfg.Source.Principal, "listed", len(listed.Groups()))
			g.noneListed = true
		}
		return out, nil
	}
	g.noneListed = false
	tr, done, err := g.m.link.Translator(ctx)
	if err != nil {
		return out, fmt.Errorf("group sync: %w", err)
	}
	defer done()
	for _, name := range names {
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		out = append(out, g.group(ctx, name, tr))
	}
	return out, nil
}

// describe describes one group at the destination, asking again while its
// coordinator's answer passes (retryCoordinator). A group the answer
// leaves out, or answers with an error, comes back with that error
// (errNotDescribed when there is none): unknown, it is left alone. A group
// that does not exist is Dead. Each group is described on its own, so that
// an error in the answer (a refusal, a coordinator that does not answer) is
// that group's, never a neighbour's: kadm answers a request for several
// groups that one broker refused or failed with the groups it did
// describe and an error, and the others missing.
func (g *groupSync) describe(ctx context.Context, name string) kadm.DescribedGroup {
	var d kadm.DescribedGroup
	err := g.retryCoordinator(ctx, func() error {
		all, err := g.dstAdm.DescribeGroups(ctx, name)
		if se, ok := errors.AsType[*kadm.ShardErrors](err); ok && len(se.Errs) == 1 {
			// The one group's piece failed (its FindCoordinator was
			// refused, or not answered): that piece's error is the
			// group's.
			err = se.Errs[0].Err
		}
		if err != nil {
			return err
		}
		var ok bool
		if d, ok = all[name]; !ok {
			return errNotDescribed
		}
		return d.Err
	})
	switch {
	case errors.Is(err, kerr.GroupIDNotFound):
		return kadm.DescribedGroup{Group: name, State: "Dead"}
	case err != nil:
		d.Group, d.Err = name, err
	}
	return d
}

// group syncs one group.
func (g *groupSync) group(ctx context.Context, name string, tr translate.Func) GroupStatus {
	d := g.describe(ctx, name)
	st := GroupStatus{Group: name, Type: TypeConsumer, At: g.m.now(), Members: len(d.Members), DstState: d.State, Partitions: []GroupPartitionSync{}}
	fail := func(err error) GroupStatus {
		st.State, st.Error = GroupFailed, err.Error()
		if ctx.Err() != nil {
			return st // the link stops: not a failure of the group
		}
		g.m.met.errors.Inc()
		g.log.Warn("group offset sync: group not synced this round", "group", name, "error", err)
		return st
	}
	if d.Err != nil {
		// Not knowing whether it is active, it is left alone.
		return fail(fmt.Errorf("describe group %q at the destination: %w; not knowing whether it is active there, group sync leaves it alone", name,
			g.m.cfg.Destination.RefusedGroup(kmsg.ACLOperationDescribe, name, WhyDstGroupDescribe, d.Err)))
	}
	active := !groupInactive(d)
	var gt translate.GroupOffsets
	err := g.retryCoordinator(ctx, func() (err error) {
		gt, err = translate.Group(ctx, g.srcAdm, name, g.m.cfg.Selects, tr)
		return err
	})
	if err != nil {
		return fail(g.m.cfg.Source.RefusedGroup(kmsg.ACLOperationDescribe, name, WhySrcGroupDescribe, err))
	}
	for _, p := range gt.Partitions {
		if p.Err != nil {
			g.m.met.errors.Inc()
		} else {
			g.m.met.translated.Inc()
		}
	}
	dst := map[tp.Key]int64{}
	if !active {
		var offs kadm.OffsetResponses
		err := g.retryCoordinator(ctx, func() (err error) {
			if offs, err = g.dstAdm.FetchOffsets(ctx, name); err == nil {
				err = offs.Error()
			}
			return err
		})
		if errors.Is(err, kerr.GroupIDNotFound) {
			offs, err = nil, nil // nothing committed there yet
		}
		if err != nil {
			return fail(fmt.Errorf("fetch the committed offsets of group %q at the destination: %w", name,
				g.m.cfg.Destination.RefusedGroup(kmsg.ACLOperationDescribe, name, WhyDstGroupDescribe, err)))
		}
		offs.Each(func(o kadm.OffsetResponse) {
			if o.At >= 0 {
				dst[tp.Key{Topic: o.Topic, Partition: o.Partition}] = o.At
			}
		})
	}
	commits, parts, state := planGroup(gt, dst, active)
	st.Partitions, st.State = parts, state
	for _, p := range parts {
		if p.Error != "" && st.Error == "" {
			st.Error = fmt.Sprintf("%s[%d]: %s", p.SourceTopic, p.Partition, p.Error)
		}
	}
	if len(commits) > 0 {
		os := kadm.Offsets{}
		for _, o := range commits {
			os.Add(o)
		}
		err := g.retryCoordinator(ctx, func() error {
			// The session may have stopped being the live one while
			// the group was read and translated (fenced by another
			// agent, paused, failed): then nothing is committed.
			if !g.m.link.Live() {
				return ErrNotLive
			}
			resp, err := g.dstAdm.CommitOffsets(ctx, name, os)
			if err == nil {
				err = resp.Error()
			}
			return err
		})
		if err != nil {
			// The group may have become active in between: the
			// coordinator refuses a commit from outside then.
			for i := range st.Partitions {
				if st.Partitions[i].Action == ActionCommitted {
					st.Partitions[i].Action, st.Partitions[i].Error = ActionFailed, err.Error()
					st.Partitions[i].DestinationCommitted = dst[tp.Key{Topic: st.Partitions[i].DestinationTopic, Partition: st.Partitions[i].Partition}]
					if _, ok := dst[tp.Key{Topic: st.Partitions[i].DestinationTopic, Partition: st.Partitions[i].Partition}]; !ok {
						st.Partitions[i].DestinationCommitted = -1
					}
				}
			}
			return fail(fmt.Errorf("commit the offsets of group %q at the destination: %w", name,
				g.m.cfg.Destination.RefusedGroup(kmsg.ACLOperationRead, name, WhyDstGroupRead, err)))
		}
		g.log.Info("group offsets synced", "group", name, "partitions", len(commits))
	}
	if st.State != GroupFailed {
		g.m.met.synced.Inc()
	}
	return st
}
