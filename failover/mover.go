package failover

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/internal/backoff"
	"github.com/seed83556561/mirrord/internal/kafka/access"
	"github.com/seed83556561/mirrord/statestore"
	"github.com/seed83556561/mirrord/translate"
)

// Link is what a Mover needs of the link whose consumers it moves: its
// state, whether its session here is the live one, a pause, what its
// running session knows of each partition, and translation. A Mover never
// reaches further into the link.
type Link interface {
	// State is the link's lifecycle state.
	State() statestore.LinkState
	// Live reports whether this agent's session of the link is the live
	// one: MIRRORING and holding its lease. An agent that stands by for
	// another agent's session, a session fenced by a newer one (before it
	// noticed, its lease lapses first: the newer one waits it out), and a
	// paused, failed or preparing link are not live; group sync commits
	// only while it is.
	Live() bool
	// Pause asks the link to stop mirroring after a final checkpoint; it
	// does not wait. The pause is never lost: it stands until a later
	// command replaces it (an operator's resume; the last one wins).
	Pause()
	// Pausing reports whether the last command the link was given is a
	// pause: it is PAUSED or on its way there.
	Pausing() bool
	// Anchors returns what the running session knows of every partition
	// it mirrors, or an error when no session runs.
	Anchors(ctx context.Context) ([]translate.Anchor, error)
	// Translate translates one source position of a partition the link
	// mirrors.
	Translate(ctx context.Context, topic string, partition int32, offset int64) (translate.Result, error)
	// Discover asks the running session to look for new topics and
	// partitions now (a failover counts every partition the link's topics
	// select); it returns once asked.
	Discover(ctx context.Context) error
	// Translator returns how a round of many translations translates
	// (through the running session) and a function that releases what it
	// holds; an error when no session runs.
	Translator(ctx context.Context) (translate.Func, func(), error)
	// GrantACLWrite has the link's ACL sync grant WRITE at the
	// destination (Options.GrantWrite): the source's ALLOW WRITE on the
	// mirrored topics follows from now on. An error when the link has no
	// ACL sync, is not live, or the round fails.
	GrantACLWrite(ctx context.Context) (ACLGrant, error)
}

// ACLGrant is what a failover's grant of WRITE did: the bindings the ACL
// sync round created (WRITE among them), those it deleted (the topics'
// ALLOW ALL split without WRITE, replaced by ALLOW ALL), and how many
// bindings the link holds at the destination after it.
type ACLGrant struct {
	Created []string `json:"created"`
	Deleted []string `json:"deleted"`
	Managed int      `json:"managed"`
	// LeftAlone are the bindings the source calls for that the
	// destination held already, someone else's.
	LeftAlone int `json:"left_alone"`
	// Skipped are the source's DENY bindings not synced because they
	// would apply to the link's own principal at the destination.
	Skipped []string `json:"skipped,omitempty"`
}

// GroupSelector says which consumer groups a link syncs (the config's
// groups block: anchored include and exclude patterns).
type GroupSelector interface {
	Selects(group string) bool
}

// Config configures a Mover.
type Config struct {
	// Groups selects the source consumer groups whose committed offsets
	// are synced to the destination; nil: no group offset sync.
	// GroupSyncInterval is how often they are synced.
	Groups            GroupSelector
	GroupSyncInterval time.Duration
	// ShareGroups selects the source share groups whose start offsets
	// are synced to the destination, in the same rounds; nil: none.
	ShareGroups GroupSelector
	// PauseTimeout bounds the wait for PAUSED once a failover paused the
	// link: its drain, a state commit in flight and its final checkpoint
	// (default 1m).
	PauseTimeout time.Duration
	// Selects reports whether the link mirrors a source topic, and
	// DestinationTopic names its mirror.
	Selects          func(topic string) bool
	DestinationTopic func(source string) string
	// Source and Destination name the clusters in errors for permissions
	// they refuse; SourceOpts and DestinationOpts reach them.
	Source, Destination         access.Cluster
	SourceOpts, DestinationOpts []kgo.Opt
}

// Deps are a Mover's collaborators.
type Deps struct {
	Logger  hclog.Logger // nil: none
	Metrics *Metrics     // nil: an unregistered set
	Link    string       // the link's name, the metrics' label
	Now     func() time.Time
}

// Mover moves a link's consumers to its mirror: the group offset sync on
// an interval, and the failover in one step. Run owns its goroutines;
// Start, SyncGroups and the status accessors are safe from any goroutine.
type Mover struct {
	cfg  Config
	link Link
	log  hclog.Logger
	met  *linkMetrics
	now  func() time.Time

	groups *groupSync // set by Run while it runs; nil without cfg.Groups

	requests chan Options // a failover request to the goroutine that runs it
	failing  atomic.Bool  // set while a failover runs

	// coordinatorRetry spaces a round's requests to a group coordinator
	// that is not available, moved or loading, for up to
	// coordinatorPatience (retryCoordinator); tests shorten them.
	coordinatorRetry    backoff.Policy
	coordinatorPatience time.Duration

	mu        sync.Mutex // guards groupStat and failover
	groupStat *GroupSyncStatus
	failover  *Status
}

// New builds a Mover for link. It does no I/O and starts no goroutine.
func New(cfg Config, link Link, deps Deps) *Mover {
	if deps.Logger == nil {
		deps.Logger = hclog.NewNullLogger()
	}
	if deps.Metrics == nil {
		deps.Metrics = NewMetrics(nil)
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if cfg.PauseTimeout <= 0 {
		cfg.PauseTimeout = DefaultPauseTimeout
	}
	m := &Mover{
		cfg: cfg, link: link, log: deps.Logger, met: deps.Metrics.forLink(deps.Link), now: deps.Now,
		requests:         make(chan Options, 1),
		coordinatorRetry: defaultCoordinatorRetry, coordinatorPatience: defaultCoordinatorPatience,
	}
	if m.syncs() {
		m.groupStat = &GroupSyncStatus{Interval: cfg.GroupSyncInterval, Groups: []GroupStatus{}}
	}
	return m
}

// syncs reports whether the link syncs any groups: consumer groups, share
// groups or both.
func (m *Mover) syncs() bool { return m.cfg.Groups != nil || m.cfg.ShareGroups != nil }

// Run runs the group offset sync (with a Groups or ShareGroups selector: a
// round every GroupSyncInterval) and carries out failovers, one at a time,
// until ctx ends; it waits for both and closes the sync's clients before
// it returns.
func (m *Mover) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	if m.syncs() {
		g, err := newGroupSync(m)
		if err != nil {
			return err
		}
		m.mu.Lock()
		m.groups = g
		m.mu.Unlock()
		defer func() {
			m.mu.Lock()
			m.groups = nil
			m.mu.Unlock()
			g.close()
		}()
		wg.Go(func() { g.run(ctx) })
	}
	m.failovers(ctx)
	return nil
}

// ErrNoGroupSync is SyncGroups' error when the link has no groups block, or
// its Mover does not run.
var ErrNoGroupSync = errors.New("the link syncs no groups (no groups or share_groups block)")

// SyncGroups runs one round of the group offset sync now and returns each
// group's outcome; ErrNoGroupSync-wrapped if there is no group sync
// running, ErrNotLive if this agent's session of the link is not the live
// one (nothing is committed then).
func (m *Mover) SyncGroups(ctx context.Context) ([]GroupStatus, error) {
	m.mu.Lock()
	g := m.groups
	m.mu.Unlock()
	if g == nil {
		return nil, fmt.Errorf("%w", ErrNoGroupSync)
	}
	return g.round(ctx)
}

// GroupSync returns the group offset sync's status, copied (nil without a
// Groups selector).
func (m *Mover) GroupSync() *GroupSyncStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.groupStat == nil {
		return nil
	}
	c := *m.groupStat
	return &c
}

// Failover returns the last failover's status, copied (nil: none yet).
func (m *Mover) Failover() *Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failover == nil {
		return nil
	}
	c := *m.failover
	return &c
}

// setGroups changes the group sync's status.
func (m *Mover) setGroups(fn func(*GroupSyncStatus)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := GroupSyncStatus{Interval: m.cfg.GroupSyncInterval}
	if m.groupStat != nil {
		c = *m.groupStat
	}
	fn(&c)
	m.groupStat = &c
}
