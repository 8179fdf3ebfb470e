package link

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/appender"
	"github.com/seed83556561/mirrord/failover"
	"github.com/seed83556561/mirrord/fetcher"
	"github.com/seed83556561/mirrord/internal/backoff"
	"github.com/seed83556561/mirrord/internal/kafka/access"
	"github.com/seed83556561/mirrord/internal/topics"
	"github.com/seed83556561/mirrord/slots"
	"github.com/seed83556561/mirrord/statestore"
	"github.com/seed83556561/mirrord/transform"
)

// Config configures one link: its settings and its two clusters (agent
// copies them from package config, the one source of truth for every key
// the file sets), the share of agent.shutdown_timeout a stop may take, and
// the tunables the file does not expose.
type Config struct {
	Link        Settings
	Source      Cluster
	Destination Cluster
	// Agent is the agent's name (agent.name), which the link's state
	// records carry: a starting agent stands by while another agent's
	// session holds the link, and refuses settings that differ from that
	// agent's (Settings.Fingerprint). Empty: the link does neither.
	Agent string
	// ShutdownTimeout bounds the drain of in-flight appends when the link
	// stops, and then the final checkpoint.
	ShutdownTimeout time.Duration
	Tuning          Tuning
	// Slot is the slot this Link runs when Link.Slots is above 1 (package
	// slots): a session of its own (SlotSession names it: its lease, link
	// record, checkpoints and transactional.id) over the source
	// partitions slots.Of gives it. Slot 0 also does the link-wide work:
	// it creates and grows the destination topics of every slot, and runs
	// the config and ACL syncs over all of them; the other slots mirror a
	// partition once its destination exists. Ignored when Link.Slots is 0
	// or 1 (one session mirrors every partition, under the link's name).
	Slot int
}

// SlotSession is the session name of slot slot of link link: the name its
// state records carry and its transactional.id's suffix
// (statestore.TransactionalID), mirrord.<link>.<slot>. A link's name has no
// '.' (config's label rule), so no link is named like another's slot.
func SlotSession(link string, slot int) string { return fmt.Sprintf("%s.%d", link, slot) }

// Settings are the keys of a link block, as package config validated them
// (the file's key names are in the error messages of validate).
type Settings struct {
	Name string

	// Include and Exclude are anchored patterns (see internal/topics):
	// each matches whole topic names.
	Include, Exclude []*regexp.Regexp
	Rename           string    // destination topic template with {topic} and {source}
	StartFrom        StartFrom // where a partition without a checkpoint starts
	StateTopic       string    // on the destination cluster

	StateTopicPartitions        int32
	StateTopicReplicationFactor int16 // -1: the broker's default

	CheckpointInterval  time.Duration
	SessionTimeout      time.Duration
	ProducerStateExpiry time.Duration

	MaxBufferedBytes int64
	// CoalesceBytes: a run of a partition's consecutive batches waiting
	// to be appended (in preserve delivery, of one producer) is appended
	// as one batch while it holds at most this many bytes (coalesce.go);
	// 0: never.
	CoalesceBytes      int64
	OnOffsetOutOfRange fetcher.OutOfRange

	// ProduceTimeout is the timeout of every Produce the link sends; it
	// bounds how long an unanswered Produce can stay in a broker, so the
	// link waits that long (plus SettleDelay) before it settles one, and
	// a new session waits it past the previous session's lease.
	ProduceTimeout time.Duration
	// Delivery is how the link appends (DESIGN §14): preserve (the
	// zero value) or transactional; TransactionTimeout is a
	// transactional session's transaction timeout.
	Delivery           statestore.Delivery
	TransactionTimeout time.Duration
	// SkipUnattributed leaves batches without a producer ID out
	// (unattributed = "skip"); ReturnHome forwards batches whose producer
	// ID says they were first produced at the destination, which the
	// link otherwise skips (DESIGN §16).
	SkipUnattributed bool
	ReturnHome       bool
	// SharedDestination: the destination topics have producers of their
	// own (active-active); batches the link did not write there are
	// expected (counted apart, not logged as errors).
	SharedDestination bool
	// SettleDelay is the margin past ProduceTimeout before an append
	// that got no answer is settled against the destination.
	SettleDelay time.Duration
	// DiscoveryInterval is how often new source topics and partitions
	// are looked for while the link mirrors.
	DiscoveryInterval time.Duration
	// DestinationReplicationFactor is the replication factor of the
	// destination topics the link creates; -1: the broker's default.
	DestinationReplicationFactor int16
	// CheckCRCs validates the CRC of every fetched batch before it is
	// forwarded.
	CheckCRCs bool
	// Groups selects the source consumer groups whose committed offsets
	// the link translates and commits to the destination; nil: no group
	// offset sync. GroupSyncInterval is how often they are synced.
	Groups            GroupSelector
	GroupSyncInterval time.Duration
	// ShareGroups selects the source share groups whose share-partition
	// start offsets the link translates and sets at the destination (on
	// GroupSyncInterval too); nil: none.
	ShareGroups GroupSelector
	// ConfigSync says which settings of the source topics their mirrors
	// follow (configsync.go); ConfigSyncInterval is how often they are
	// synced.
	ConfigSync         ConfigSync
	ConfigSyncInterval time.Duration
	// ACLSync says whether the source's ACLs follow (aclsync.go);
	// ACLSyncInterval is how often they are synced.
	ACLSync         ACLSync
	ACLSyncInterval time.Duration
	// Slots is the number of slots the link's partitions are spread over
	// (package slots); 0 or 1: one session mirrors the whole link.
	Slots int
}

// GroupSelector says which consumer groups a link syncs (the config's
// groups block: anchored include and exclude patterns).
type GroupSelector = failover.GroupSelector

// StartFrom is where a partition without a checkpoint starts.
type StartFrom string

// The values of StartFrom (start_from in the file).
const (
	StartEarliest StartFrom = "earliest"
	StartLatest   StartFrom = "latest"
)

// Selects reports whether the link mirrors topic (internal/topics).
func (s *Settings) Selects(topic string) bool {
	return topics.Selects(topic, s.StateTopic, s.Include, s.Exclude)
}

// DestinationTopic names the mirror of a source topic of the cluster
// labelled sourceCluster.
func (s *Settings) DestinationTopic(sourceTopic, sourceCluster string) string {
	return topics.Rename(s.Rename, sourceTopic, sourceCluster)
}

// Cluster is what a link knows of one of its clusters; its clients reach
// it with Deps.SourceOpts or Deps.DestinationOpts.
type Cluster struct {
	Name             string // the cluster block's label
	BootstrapServers []string
	ClusterID        string // pins the cluster ID used for the region selector; "" = ask the cluster
	// Principal is the Kafka principal the link's credentials
	// authenticate as (internal/kafka/dial.Principal), named in ACL
	// errors.
	Principal string
}

// Tuning holds what the configuration file does not set; zero values take
// the defaults below. Tests and the bench shorten them.
type Tuning struct {
	// BackoffBase and BackoffMax bound the wait in FAILED.
	BackoffBase, BackoffMax time.Duration
	// LeaseSkew is the clock-skew margin added to a previous session's
	// lease before a new session reconciles (DESIGN §7).
	LeaseSkew time.Duration
	// FetchMaxWait is the long-poll time of source fetches.
	FetchMaxWait time.Duration
	// ExhaustGrace and MaxReconciling: see PipelineConfig.
	ExhaustGrace   time.Duration
	MaxReconciling int
}

// Defaults of Tuning.
const (
	DefaultBackoffBase = time.Second
	DefaultBackoffMax  = 2 * time.Minute
	DefaultLeaseSkew   = 5 * time.Second
)

func (t *Tuning) defaults() {
	set := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	set(&t.BackoffBase, DefaultBackoffBase)
	set(&t.BackoffMax, DefaultBackoffMax)
	set(&t.LeaseSkew, DefaultLeaseSkew)
	set(&t.FetchMaxWait, fetcher.DefaultMaxWait)
	set(&t.ExhaustGrace, DefaultExhaustGrace)
	if t.MaxReconciling <= 0 {
		t.MaxReconciling = DefaultMaxReconciling
	}
}

// validate checks what the link itself relies on; config.Validate has
// checked the file.
func (c *Config) validate() error {
	var errs []error
	l := &c.Link
	if l.Name == "" {
		errs = append(errs, errors.New("link: name is empty"))
	}
	if len(c.Source.BootstrapServers) == 0 {
		errs = append(errs, fmt.Errorf("link %s: source cluster %q has no bootstrap servers", l.Name, c.Source.Name))
	}
	if len(c.Destination.BootstrapServers) == 0 {
		errs = append(errs, fmt.Errorf("link %s: destination cluster %q has no bootstrap servers", l.Name, c.Destination.Name))
	}
	if l.CheckpointInterval <= 0 || l.SessionTimeout <= 0 || l.CheckpointInterval > l.SessionTimeout/3 {
		errs = append(errs, fmt.Errorf("link %s: checkpoint_interval (%s) must be positive and at most a third of session_timeout (%s), so that a checkpoint renews the lease in time",
			l.Name, l.CheckpointInterval, l.SessionTimeout))
	}
	if l.MaxBufferedBytes <= 0 {
		errs = append(errs, fmt.Errorf("link %s: max_buffered_bytes must be positive", l.Name))
	}
	if l.StateTopic == "" {
		errs = append(errs, fmt.Errorf("link %s: state_topic is empty", l.Name))
	}
	if l.SettleDelay <= 0 || l.DiscoveryInterval <= 0 || l.ProduceTimeout <= 0 {
		errs = append(errs, fmt.Errorf("link %s: settle_delay (%s), discovery_interval (%s) and produce_timeout (%s) must be positive",
			l.Name, l.SettleDelay, l.DiscoveryInterval, l.ProduceTimeout))
	}
	if l.ACLSync.Enabled && l.ACLSyncInterval <= 0 {
		errs = append(errs, fmt.Errorf("link %s: acl_sync_interval (%s) must be positive", l.Name, l.ACLSyncInterval))
	}
	if l.ConfigSync.Enabled && l.ConfigSyncInterval <= 0 {
		errs = append(errs, fmt.Errorf("link %s: config_sync_interval (%s) must be positive", l.Name, l.ConfigSyncInterval))
	}
	if l.Slots > 1 {
		if c.Slot < 0 || c.Slot >= l.Slots {
			errs = append(errs, fmt.Errorf("link %s: slot %d is not one of its %d slots (0 to %d)", l.Name, c.Slot, l.Slots, l.Slots-1))
		}
	}
	if c.ShutdownTimeout <= 0 {
		errs = append(errs, fmt.Errorf("link %s: shutdown timeout %s is not positive", l.Name, c.ShutdownTimeout))
	}
	switch l.StartFrom {
	case StartEarliest, StartLatest:
	default:
		errs = append(errs, fmt.Errorf("link %s: start_from %q is not %q or %q", l.Name, l.StartFrom, StartEarliest, StartLatest))
	}
	switch l.OnOffsetOutOfRange {
	case fetcher.OutOfRangeFail, fetcher.OutOfRangeEarliest:
	default:
		errs = append(errs, fmt.Errorf("link %s: on_offset_out_of_range %q is not %q or %q", l.Name, l.OnOffsetOutOfRange, fetcher.OutOfRangeFail, fetcher.OutOfRangeEarliest))
	}
	return errors.Join(errs...)
}

// Deps are the link's collaborators.
type Deps struct {
	Logger          hclog.Logger
	Metrics         *Metrics          // nil: an unregistered set
	FetcherMetrics  *fetcher.Metrics  // nil: an unregistered set
	AppenderMetrics *appender.Metrics // nil: an unregistered set
	// SourceOpts and DestinationOpts are the kgo options that reach each
	// cluster (seed brokers, TLS, SASL); see internal/kafka/dial.
	SourceOpts, DestinationOpts []kgo.Opt
	Now                         func() time.Time
	Rand                        func() int64 // collision salts
}

// Link runs one link until its context ends. Its lifecycle goroutine (Run)
// owns all of its state; Pause, Resume and Status talk to it.
type Link struct {
	cfg  Config
	deps Deps
	log  hclog.Logger
	met  *linkMetrics

	// sess names the link's sessions: the link's name, or with slots
	// SlotSession's (what state records and the transactional.id carry).
	sess string

	cmd commands // operator commands (pause, resume) to the Run goroutine
	// acl names the link's clusters in the errors for permissions they
	// refuse (package access).
	acl struct{ src, dst access.Cluster }

	mu     sync.Mutex // guards status
	status Status

	// crash, set by tests, makes the next stop abrupt: no drain, no
	// final checkpoint, as if the process died.
	crash func() bool
	// beforeClaimCheck, set by tests, runs when a standby has decided to
	// take the link over, before checkOthers' replay and claimedMeanwhile
	// check that no other session claimed it meanwhile.
	beforeClaimCheck func()
	// joinedLimit, set by tests, replaces coalesce_bytes as the most
	// bytes a joined batch may have once joined (appendRun), so that
	// the sending of a run one by one can be made to happen.
	joinedLimit int64
	// prepared counts PREPARING → MIRRORING transitions (tests: each one
	// leaves a barrier per partition).
	prepared atomic.Int64
	// tookOver: the session that is beginning took over a free link (its
	// holder stopped cleanly or its lease lapsed: another agent's session,
	// or this agent's own before a restart; standBy); read and written by
	// Run's goroutine only.
	tookOver bool
	// online is the running session's offer to other goroutines (offset
	// translation), nil while no session's event loop runs.
	online atomic.Pointer[online]
	// txnTopics are the topics a running transactional session mirrors
	// (config sync's list; a preserve session answers through online),
	// nil while no transactional session's event loop runs.
	txnTopics atomic.Pointer[[]mirrored]
	// wideTopics are every topic of the link, over all its slots, as the
	// running session of slot 0 last discovered them (the config and ACL
	// syncs' list when the link has slots), nil while none runs.
	wideTopics atomic.Pointer[[]mirrored]
	// mover moves the link's consumers to the mirror: group offset sync
	// and failover (package failover), through a view of the link that
	// offers only what it needs (moverView).
	mover *failover.Mover
	// owned are the destination topics the link created (configsync.go);
	// syncNow asks the config sync for a round now (a buffer of one).
	owned   ownedTopics
	syncNow chan struct{}
	// aclNow asks the ACL sync for a round now (a buffer of one);
	// aclGrants carries a failover's request to grant WRITE.
	aclNow    chan struct{}
	aclGrants chan aclGrant
}

// commands is how an operator's pause and resume reach the link
// goroutine. Only the last command given counts (pause holds it): a
// command never blocks and is never lost, one given while the goroutine is
// busy replaces the one before it, and wake, a buffer of one, tells the
// goroutine that a command came. The goroutine reads pause when woken and
// again wherever it starts to wait for a command (a session's start, a
// backoff, PAUSED), so that one it read while it could not act on it (a
// resume during a pause's drain, a pause during a stop) still applies
// once it can. Before, a bounded channel carried the commands and dropped
// those sent while it was full: a failover's pause lost that way left the
// failover waiting for PAUSED forever.
type commands struct {
	pause atomic.Bool // the last command was a pause
	wake  chan struct{}
}

// give records a command and wakes the link goroutine.
func (c *commands) give(pause bool) {
	c.pause.Store(pause)
	select {
	case c.wake <- struct{}{}:
	default: // a wake is pending: the goroutine reads the command then
	}
}

// New builds a link. It does no I/O and starts no goroutine.
func New(cfg Config, deps Deps) (*Link, error) {
	cfg.Tuning.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if deps.Logger == nil {
		deps.Logger = hclog.NewNullLogger()
	}
	if deps.Metrics == nil {
		deps.Metrics = NewMetrics(nil)
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if deps.Rand == nil {
		deps.Rand = rand.Int64
	}
	sess, log := cfg.Link.Name, deps.Logger.Named("link").With("link", cfg.Link.Name)
	if cfg.Link.Slots > 1 {
		sess, log = SlotSession(cfg.Link.Name, cfg.Slot), log.With("slot", cfg.Slot)
	}
	l := &Link{
		cfg:  cfg,
		deps: deps,
		sess: sess,
		log:  log,
		// A slot's metrics are its session's: the agents that share a
		// link each export the slots they own.
		met: deps.Metrics.forLink(sess),
		cmd: commands{wake: make(chan struct{}, 1)},

		owned:   ownedTopics{ids: map[[16]byte]statestore.TopicValue{}},
		syncNow: make(chan struct{}, 1),

		aclNow:    make(chan struct{}, 1),
		aclGrants: make(chan aclGrant),
	}
	l.acl.src = access.Cluster{Role: "source", Name: cfg.Source.Name, Principal: cfg.Source.Principal}
	l.acl.dst = access.Cluster{Role: "destination", Name: cfg.Destination.Name, Principal: cfg.Destination.Principal}
	l.mover = l.newMover(moverView{l})
	l.status = Status{Name: cfg.Link.Name, State: Stopped, Source: cfg.Source.Name, Destination: cfg.Destination.Name, Delivery: cfg.Link.Delivery.String()}
	if l.slotted() {
		slot := cfg.Slot
		l.status.Slot = &slot
	}
	if l.cfg.Link.ConfigSync.Enabled && l.linkWide() {
		l.status.ConfigSync = &ConfigSyncStatus{Interval: cfg.Link.ConfigSyncInterval, AllTopics: cfg.Link.ConfigSync.AllTopics, Topics: []TopicConfigStatus{}}
	}
	if l.cfg.Link.ACLSync.Enabled && l.linkWide() {
		l.status.ACLSync = &ACLSyncStatus{Interval: cfg.Link.ACLSyncInterval, Write: cfg.Link.ACLSync.Write}
	}
	return l, nil
}

// newMover builds the link's Mover, which sees the link through view (a
// moverView; tests wrap it to step in between the Mover and the link).
func (l *Link) newMover(view failover.Link) *failover.Mover {
	cfg, deps := l.cfg, l.deps
	return failover.New(failover.Config{
		Groups: cfg.Link.Groups, ShareGroups: cfg.Link.ShareGroups, GroupSyncInterval: cfg.Link.GroupSyncInterval, Selects: cfg.Link.Selects,
		// A pause drains for up to ShutdownTimeout, waits for a
		// state commit in flight (the lease bounds it) and commits
		// the final checkpoint within ShutdownTimeout.
		PauseTimeout:     2*cfg.ShutdownTimeout + cfg.Link.SessionTimeout,
		DestinationTopic: func(source string) string { return cfg.Link.DestinationTopic(source, cfg.Source.Name) },
		Source:           l.acl.src, Destination: l.acl.dst,
		SourceOpts: deps.SourceOpts, DestinationOpts: deps.DestinationOpts,
	}, view, failover.Deps{Logger: l.log, Metrics: deps.Metrics.groups, Link: cfg.Link.Name, Now: deps.Now})
}

// Name is the link's name.
func (l *Link) Name() string { return l.cfg.Link.Name }

// Session is the name of the link's sessions: the link's name, or for a
// slot of a link with slots, SlotSession's.
func (l *Link) Session() string { return l.sess }

// slotted reports whether the link runs one slot of several.
func (l *Link) slotted() bool { return l.cfg.Link.Slots > 1 }

// linkWide reports whether this Link does the link's link-wide work:
// creating and growing destination topics, the config and ACL syncs, group
// offset sync and failover. Without slots the one session does; with
// slots, slot 0's.
func (l *Link) linkWide() bool { return !l.slotted() || l.cfg.Slot == 0 }

// owns reports whether the link's sessions mirror partition partition of
// source topic topic: every one without slots, else those of its slot.
func (l *Link) owns(topic string, partition int32) bool {
	return !l.slotted() || slots.Of(topic, partition, l.cfg.Link.Slots) == l.cfg.Slot
}

// Pause asks the link to stop mirroring after a final checkpoint; it keeps
// its place until Resume. Pausing a paused link does nothing. It does not
// block, and the pause stands until a Resume replaces it (commands).
func (l *Link) Pause() { l.cmd.give(true) }

// Resume asks a paused link to prepare and mirror again; it replaces a
// pause given before that the link has not carried out yet.
func (l *Link) Resume() { l.cmd.give(false) }

// pausing reports whether the last command given was a pause: the link is
// PAUSED or on its way there.
func (l *Link) pausing() bool { return l.cmd.pause.Load() }

// handover is what a session of this process left for the next one: a
// session that ended with every append resolved hands over at once, one
// that left appends unresolved only after they can no longer land (I2). A
// new session checks that the state topic's link record is still the one
// its predecessor wrote; if another agent took the link meanwhile, the
// recorded lease applies.
type handover struct {
	epoch      int16     // the ended session's epoch
	unresolved int       // appends it left unresolved
	at         time.Time // when it ended, on Deps.Now
}

// Run drives the lifecycle until ctx ends, then stops the link (drain, final
// checkpoint) and returns nil. It returns an error only for a broken
// internal invariant. Beside the lifecycle it runs, and waits for, the
// link's Mover (group offset sync with a groups block, and failovers) and
// its topic config sync (unless config_sync is off) and its ACL sync (with
// acl_sync on): with slots, slot 0's Link only (linkWide).
func (l *Link) Run(ctx context.Context) error {
	aux, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	if !l.linkWide() {
		return l.lifecycle(ctx) // slot 0's Link does the link-wide work
	}
	wg.Go(func() {
		if err := l.mover.Run(aux); err != nil {
			l.log.Error("group offset sync and failover cannot run", "error", err)
			l.setStatus(func(s *Status) { s.LastError, s.LastErrorAt = err.Error(), l.deps.Now() })
		}
	})
	if l.cfg.Link.ConfigSync.Enabled {
		wg.Go(func() { l.runConfigSync(aux) })
	}
	if l.cfg.Link.ACLSync.Enabled {
		wg.Go(func() { l.runACLSync(aux) })
	}
	return l.lifecycle(ctx)
}

// lifecycle is the link goroutine's state loop.
func (l *Link) lifecycle(ctx context.Context) error {
	state := Stopped
	move := func(e Trigger, cause error) error {
		next, err := Next(state, e)
		if err != nil {
			return err
		}
		if next != state {
			l.log.Info("link state", "from", state, "to", next, "event", e)
		}
		state = next
		l.met.setState(state)
		l.setStatus(func(s *Status) {
			s.State = state
			s.Since = l.deps.Now()
			if cause != nil {
				s.LastError = cause.Error()
				s.LastErrorAt = l.deps.Now()
			}
			if state != Mirroring && state != Preparing {
				s.Partitions = nil
			}
		})
		return nil
	}
	if err := move(OnStart, nil); err != nil {
		return err
	}
	retry := backoff.Policy{First: l.cfg.Tuning.BackoffBase, Max: l.cfg.Tuning.BackoffMax}
	var (
		attempts int  // consecutive failures, for the backoff
		fenced   bool // the last session was fenced: stand by before taking over (standbyFenced)
		last     *handover
	)
	defer func() { _ = move(OnStop, nil) }()
	for {
		if ctx.Err() != nil {
			return nil
		}
		switch state {
		case Preparing:
			since := l.deps.Now()
			prepared := l.prepared.Load()
			l.tookOver = false
			var (
				ev  Trigger
				end sessionEnd
				s   *session
				err error
			)
			if l.cfg.Link.Delivery == statestore.DeliveryTransactional {
				var ts *txnSession
				if ts, err = l.beginTxn(ctx, l.standbyAs(fenced)); err == nil {
					ev, err = ts.run(ctx, func() error {
						l.prepared.Add(1)
						return move(OnPrepared, nil)
					})
					ts.close()
				}
				last = nil
			} else {
				s, err = l.begin(ctx, l.standbyAs(fenced), last)
			}
			if err == nil && s != nil {
				ev, end, err = s.run(ctx, func() error {
					l.prepared.Add(1)
					return move(OnPrepared, nil)
				})
				s.close()
				err = fencedFirst(err, s.state.Err())
				last = &handover{epoch: s.state.Epoch(), unresolved: end.unresolved, at: l.deps.Now()}
			} else if err != nil {
				ev = OnFail
				if errors.Is(err, errPaused) {
					ev, err = OnPause, nil
				}
			}
			l.wideTopics.Store(nil) // the session's list, gone with it
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, errInvariant) {
				return err
			}
			fenced = errors.Is(err, statestore.ErrFenced)
			switch ev {
			case OnFail:
				// Fenced before it mirrored, right after it took over a
				// free link: another standby took it at the same moment,
				// which is no fight over the link.
				l.fail(err, fenced && l.tookOver && l.prepared.Load() == prepared)
				// A link that mirrored for longer than the longest
				// backoff has recovered: its next failure starts the
				// backoff afresh. One that fails again soon keeps
				// doubling it.
				if l.deps.Now().Sub(since) > l.cfg.Tuning.BackoffMax {
					attempts = 0
				}
			default:
				attempts = 0
			}
			if state == Preparing && ev != OnFail && ev != OnPause {
				ev = OnStop
			}
			if err := move(ev, err); err != nil {
				return err
			}
		case Paused:
			if !l.waitResume(ctx) {
				return nil
			}
			attempts = 0
			if err := move(OnResume, nil); err != nil {
				return err
			}
		case Failed:
			if l.pausing() {
				// A pause stands (the session failed while it
				// carried it out, or before it could).
				if err := move(OnPause, nil); err != nil {
					return err
				}
				continue
			}
			attempts++
			wait := retry.Wait(attempts)
			l.log.Info("retrying after backoff", "wait", wait, "attempt", attempts)
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-l.cmd.wake:
				t.Stop()
				ev := OnRetry // a resume while failed retries at once
				if l.pausing() {
					ev = OnPause
				}
				if err := move(ev, nil); err != nil {
					return err
				}
			case <-t.C:
				if err := move(OnRetry, nil); err != nil {
					return err
				}
			}
		case Stopped:
			return nil
		default:
			return fmt.Errorf("%w: link %s: lifecycle reached state %s", errInvariant, l.Name(), state)
		}
	}
}

// errInvariant marks a broken internal invariant; Run returns it.
var errInvariant = errors.New("link: broken invariant")

// fail logs an error that failed the link and counts it. lostTakeover:
// the session was fenced by another standby that took the link at the
// same moment (standBy), which is counted apart from sessions_fenced.
func (l *Link) fail(err error, lostTakeover bool) {
	kind := errorKind(err)
	if lostTakeover {
		l.met.add(TakeoversLost, 1)
		l.log.Info("another standby took the link at the same moment; standing by for it", "error", err)
		return
	}
	l.met.error(kind)
	if errors.Is(err, statestore.ErrFenced) {
		l.met.add(SessionsFenced, 1)
		l.log.Warn("link session fenced: another mirrord runs this link; standing by until its lease lapses", "error", err)
		return
	}
	l.log.Error("link failed", "kind", kind, "error", err)
}

// fencedFirst is the error a preserve session failed with: err, or the
// fencing of its state session where err is an append refused for want of
// a lease (ErrLeaseExpired) and the state session had died of a fencing.
// A fenced state session ends the lease at once, so the appender can
// refuse a batch before the pipeline hears the commit's answer; taken for
// a lapse, that failure would make this agent begin again at once and
// fence back the session that had just fenced it (TestTwoSessionsOfOneLink
// failed so on Kafka 3.9.2) instead of standing by for it.
func fencedFirst(err, stateErr error) error {
	if !errors.Is(err, appender.ErrLeaseExpired) || errors.Is(err, statestore.ErrFenced) || !errors.Is(stateErr, statestore.ErrFenced) {
		return err
	}
	return fmt.Errorf("%w (an append had found the lease ended: %v)", stateErr, err)
}

// waitResume blocks in PAUSED until a resume (true) or ctx ends (false).
// A resume given while the pause was carried out resumes at once.
func (l *Link) waitResume(ctx context.Context) bool {
	for l.pausing() {
		select {
		case <-ctx.Done():
			return false
		case <-l.cmd.wake:
		}
	}
	return ctx.Err() == nil
}

// errPaused ends a PREPARING that an operator paused before the pipeline
// ran.
var errPaused = errors.New("link paused")

// errorKind labels an error for mirrord_errors_total.
func errorKind(err error) string {
	switch {
	case errors.Is(err, statestore.ErrFenced):
		return "fenced"
	case errors.Is(err, appender.ErrLeaseExpired):
		return "lease_expired"
	case errors.Is(err, appender.ErrTxnTimedOut):
		return "transaction_timeout"
	case errors.Is(err, fetcher.ErrOffsetOutOfRange):
		return "offset_out_of_range"
	case errors.Is(err, transform.ErrCorrupt), errors.Is(err, fetcher.ErrCorrupt), errors.Is(err, appender.ErrCorrupt):
		return "corrupt"
	case errors.Is(err, appender.ErrTooLarge):
		return "too_large"
	case access.IsRefusal(err):
		return "authorization"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return "other"
}

// Fingerprint is a digest of the settings that agents running the same
// link must agree on: what it mirrors and under which names, how it
// delivers and what it does not send, and what follows the mirror. Timings
// and buffer sizes may differ between agents. srcID and dstID are the
// clusters' IDs.
func (s Settings) Fingerprint(srcID, dstID string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%q %q %v %v %q %q %q %s %v %v %v %v %v %v %v %+v %+v %d",
		srcID, dstID, s.Include, s.Exclude, s.Rename, s.StartFrom, s.StateTopic, s.Delivery, s.OnOffsetOutOfRange,
		s.SkipUnattributed, s.ReturnHome, s.SharedDestination, s.ProducerStateExpiry, s.Groups, s.ShareGroups,
		s.ConfigSync, s.ACLSync, s.DestinationReplicationFactor)
	if s.Slots > 1 {
		// Only then, so that a link's fingerprint stays what agents of
		// earlier versions computed.
		fmt.Fprintf(h, " slots %d", s.Slots)
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// standbyAs is how a session that begins stands by: a slot's session
// takes its slot (the slots group gave it); otherwise it stands by for the
// session that fenced this agent's last one, else for another agent's
// (standBy).
func (l *Link) standbyAs(fenced bool) standbyMode {
	switch {
	case l.slotted():
		return standbySlot
	case fenced:
		return standbyFenced
	}
	return standbyOther
}
