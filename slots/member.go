package slots

import (
	"cmp"
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
)

// DefaultSessionTimeout is the group session timeout when Config leaves it
// zero: how long the coordinator waits for a crashed member's heartbeat
// before it gives the member's slots to others (Apache Kafka's brokers
// accept 6 s to 30 min by default: group.min.session.timeout.ms and
// group.max.session.timeout.ms).
const DefaultSessionTimeout = 10 * time.Second

// Config configures a Member.
type Config struct {
	// Group is the consumer group the link's agents share, and Topic the
	// slots topic (one partition per slot), both on the cluster that
	// holds the link's state.
	Group, Topic string
	// Slots is the number of slots (at least 1): the slots topic's
	// partition count. Join creates the topic with it, and refuses a
	// topic that has another.
	Slots int
	// ReplicationFactor of the slots topic when Join creates it; -1 (or
	// 0): the broker's default.
	ReplicationFactor int16
	// SessionTimeout is the group session timeout (DefaultSessionTimeout
	// when zero).
	SessionTimeout time.Duration
	// Logger gets the member's INFO lines (joins, moves, losses).
	Logger hclog.Logger
	// Fingerprint is the digest of the link's settings and Agent the
	// agent's name, both in the member's metadata: the group gives slots
	// only to the members whose settings are the group's (balancer). An
	// empty Fingerprint says nothing, and the member is given slots.
	Fingerprint, Agent string
}

// Handler hears what a Member owns. Its methods run on the kgo client's
// group goroutine, one at a time.
type Handler interface {
	// Assigned: the member now owns slots too.
	Assigned(ctx context.Context, slots []int)
	// Revoked: a rebalance moves slots to another member: stop them
	// cleanly (final checkpoint) and return when they are stopped. ctx
	// ends when the member's client closes.
	Revoked(ctx context.Context, slots []int)
	// Lost: the membership ended (session expired, coordinator out of
	// reach, fenced): another member may own slots already; stop them at
	// once.
	Lost(slots []int)
}

// Member is one agent's membership of a link's slots group.
type Member struct {
	cfg  Config
	h    Handler
	log  hclog.Logger
	opts []kgo.Opt
	stop chan struct{} // closed by Leave: the run goroutine leaves
	done chan struct{} // closed when the run goroutine returned

	leaveCtx context.Context // Leave's, for the run goroutine's last leave
	leaveErr error

	// cb serialises the Handler's calls: kgo's callbacks and the
	// watchdog's Lost.
	cb sync.Mutex

	mu sync.Mutex
	// gen counts the member's clients: a client the watchdog gave up
	// on is closed and the member joins again with a new one (a new
	// member ID); callbacks of an older client are ignored.
	gen        int
	owned      map[int]bool
	rebalances int64
	losses     int64
	left       bool
	// proof is when the current client wrote the last group request
	// (Heartbeat, JoinGroup, SyncGroup) the coordinator answered: the
	// member's session at the coordinator lasts at least until then
	// plus the session timeout.
	proof time.Time
}

// Join creates the slots topic when it is missing (refusing one with
// another partition count), joins the group with opts (the cluster's
// connection options) and returns the member; what it owns arrives
// through h. The caller must Leave.
func Join(ctx context.Context, cfg Config, opts []kgo.Opt, h Handler) (*Member, error) {
	if cfg.Slots < 1 {
		return nil, fmt.Errorf("slots: %d slots; a link needs at least 1", cfg.Slots)
	}
	if cfg.Group == "" || cfg.Topic == "" {
		return nil, errors.New("slots: a group and a topic are required")
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if err := ensureTopic(ctx, cfg, opts); err != nil {
		return nil, err
	}
	m := &Member{cfg: cfg, h: h, log: cfg.Logger, opts: slices.Clone(opts), owned: map[int]bool{},
		stop: make(chan struct{}), done: make(chan struct{})}
	cl, err := m.newClient()
	if err != nil {
		return nil, err
	}
	go m.run(cl)
	m.log.Info("joined the slots group", "group", cfg.Group, "topic", cfg.Topic, "slots", cfg.Slots, "session_timeout", cfg.SessionTimeout)
	return m, nil
}

// newClient starts the member's next client (generation m.gen+1), which
// joins the group.
func (m *Member) newClient() (*kgo.Client, error) {
	m.mu.Lock()
	m.gen++
	gen := m.gen
	m.proof = time.Now()
	m.mu.Unlock()
	st := m.cfg.SessionTimeout
	cl, err := kgo.NewClient(append(slices.Clone(m.opts),
		kgo.ConsumerGroup(m.cfg.Group),
		kgo.ConsumeTopics(m.cfg.Topic),
		kgo.Balancers(newBalancer(m.cfg)),
		kgo.SessionTimeout(st),
		kgo.HeartbeatInterval(st/5),
		kgo.RebalanceTimeout(max(st, time.Minute)),
		kgo.DisableAutoCommit(),
		// A heartbeat is retried for half the session timeout at most,
		// and one request waits a fifth of it for its answer (kgo's
		// defaults: the whole session timeout, and 10 s), so that kgo
		// itself calls the slots lost early; the watchdog (run) covers
		// what it does not.
		kgo.RetryTimeoutFn(func(key int16) time.Duration {
			if key == keyHeartbeat {
				return st / 2
			}
			return 30 * time.Second
		}),
		kgo.RequestTimeoutOverhead(st/5),
		kgo.FetchMaxWait(st/10),
		// No fetch sessions: the topic is empty, and kgo v1.22.3's
		// Close reads a fetch session's ID without the lock under
		// which a fetch in flight writes it (a data race, seen in CI);
		// without sessions it is never written.
		kgo.DisableFetchSessions(),
		kgo.WithHooks(proofHook{m, gen}),
		kgo.OnPartitionsAssigned(func(ctx context.Context, _ *kgo.Client, ps map[string][]int32) { m.assigned(ctx, gen, ps) }),
		kgo.OnPartitionsRevoked(func(ctx context.Context, _ *kgo.Client, ps map[string][]int32) { m.revoked(ctx, gen, ps) }),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) { m.lost(gen, ps) }),
	)...)
	if err != nil {
		return nil, fmt.Errorf("slots: group %s: %w", m.cfg.Group, err)
	}
	return cl, nil
}

// The group requests whose answers prove the member's session.
const (
	keyJoinGroup = 11
	keyHeartbeat = 12
	keySyncGroup = 14
)

// proofHook records, for client generation gen, when the last group
// request that the coordinator answered was written.
type proofHook struct {
	m   *Member
	gen int
}

func (p proofHook) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e kgo.BrokerE2E) {
	if e.WriteErr != nil || e.ReadErr != nil || key != keyHeartbeat && key != keyJoinGroup && key != keySyncGroup {
		return
	}
	wrote := time.Now().Add(-e.DurationE2E())
	p.m.mu.Lock()
	if p.gen == p.m.gen && wrote.After(p.m.proof) {
		p.m.proof = wrote
	}
	p.m.mu.Unlock()
}

// ensureTopic creates the slots topic with one partition per slot, or
// checks the one that exists.
func ensureTopic(ctx context.Context, cfg Config, opts []kgo.Opt) error {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("slots: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	rf := cfg.ReplicationFactor
	if rf == 0 {
		rf = -1
	}
	resp, err := adm.CreateTopic(ctx, int32(cfg.Slots), rf, map[string]*string{"cleanup.policy": new("delete")}, cfg.Topic)
	if err == nil {
		err = resp.Err
	}
	switch {
	case err == nil:
		return nil
	case !errors.Is(err, kerr.TopicAlreadyExists):
		return fmt.Errorf("slots: create the slots topic %s (%d partitions): %w", cfg.Topic, cfg.Slots, err)
	}
	tds, err := adm.ListTopics(ctx, cfg.Topic)
	if err != nil {
		return fmt.Errorf("slots: describe the slots topic %s: %w", cfg.Topic, err)
	}
	td, ok := tds[cfg.Topic]
	if !ok || td.Err != nil {
		return fmt.Errorf("slots: describe the slots topic %s: %w", cfg.Topic, cmp.Or[error](td.Err, kerr.UnknownTopicOrPartition))
	}
	if n := len(td.Partitions); n != cfg.Slots {
		return fmt.Errorf("slots: the slots topic %s has %d partitions, but the link has %d slots: every agent of a link must have the same slots; to change them, stop every agent of the link, delete the topic, and start them with the new value", cfg.Topic, n, cfg.Slots)
	}
	return nil
}

// Owned returns the slots the member owns now, in order.
func (m *Member) Owned() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]int, 0, len(m.owned))
	for s := range m.owned {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// Rebalances counts the rebalances that gave the member slots or took
// some away.
func (m *Member) Rebalances() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rebalances
}

// Losses counts the times the member gave its slots up because the
// group coordinator did not answer (the watchdog) or kgo called them lost.
func (m *Member) Losses() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.losses
}

// Leave revokes every owned slot (Handler.Revoked), leaves the group,
// closes the client and waits for the member's goroutine.
func (m *Member) Leave(ctx context.Context) error {
	m.mu.Lock()
	if m.left {
		m.mu.Unlock()
		return nil
	}
	m.left = true
	m.leaveCtx = ctx
	m.mu.Unlock()
	close(m.stop)
	<-m.done
	if m.leaveErr != nil {
		return fmt.Errorf("slots: leave group %s: %w", m.cfg.Group, m.leaveErr)
	}
	m.log.Info("left the slots group", "group", m.cfg.Group)
	return nil
}

// run owns the member's clients: it polls the current one (the slots
// topic holds no records; errors are logged) and watches the proof of its
// session. When the member owns slots and no group request was answered
// for half the session timeout, the coordinator may expire the session
// (and give the slots to others) before kgo hears of it: the member gives
// its slots up (Lost), closes the client and joins again with a new one.
// On Leave it leaves the group with the current client.
func (m *Member) run(cl *kgo.Client) {
	defer close(m.done)
	st := m.cfg.SessionTimeout
	for m.serve(cl, st) {
		// The watchdog gave the slots up: leave with a short
		// wait (the coordinator is out of reach), and join again.
		ctx, cancel := context.WithTimeout(context.Background(), st/5)
		_ = cl.LeaveGroupContext(ctx)
		cancel()
		cl.Close()
		select {
		case <-m.stop:
			return
		case <-time.After(st / 10):
		}
		next, err := m.newClient()
		if err != nil {
			// Only a configuration error fails NewClient, and the
			// first client had the same.
			m.log.Error("slots group: cannot start a new client; the member owns nothing until it leaves", "group", m.cfg.Group, "error", err)
			<-m.stop
			return
		}
		cl = next
	}
	m.leaveErr = cl.LeaveGroupContext(m.leaveCtx)
	cl.Close()
}

// serve polls cl until Leave (false) or until the watchdog gave the slots
// up (true).
func (m *Member) serve(cl *kgo.Client, st time.Duration) bool {
	for {
		select {
		case <-m.stop:
			return false
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), st/10)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachError(func(topic string, partition int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				m.log.Warn("slots group: fetch error", "topic", topic, "partition", partition, "error", err)
			}
		})
		if n := fs.NumRecords(); n > 0 {
			m.log.Warn("the slots topic holds records; nothing of mirrord writes it, so another program does: they are ignored", "topic", m.cfg.Topic, "records", n)
		}
		if m.watch(st) {
			return true
		}
	}
}

// watch gives the owned slots up (Lost) when the coordinator answered no
// group request for half the session timeout st, and reports whether it
// did.
func (m *Member) watch(st time.Duration) bool {
	m.cb.Lock()
	defer m.cb.Unlock()
	m.mu.Lock()
	silent := time.Since(m.proof)
	var owned []int
	if silent > st/2 {
		for s := range m.owned {
			owned = append(owned, s)
		}
		clear(m.owned)
	}
	if len(owned) > 0 {
		m.losses++
		m.rebalances++
	}
	m.mu.Unlock()
	if len(owned) == 0 {
		return false
	}
	slices.Sort(owned)
	m.log.Warn("slots lost: the group coordinator answered no group request for half the session timeout, so it may give them to another agent; stopping them at once and joining again",
		"group", m.cfg.Group, "slots", owned, "silent", silent.Round(time.Millisecond), "session_timeout", st)
	m.h.Lost(owned)
	return true
}

// slotsOf are the slots among assigned partitions; a partition beyond the
// slots (the topic grown by hand) is logged and left out.
func (m *Member) slotsOf(ps map[string][]int32) []int {
	var out []int
	for _, p := range ps[m.cfg.Topic] {
		if int(p) >= m.cfg.Slots {
			m.log.Error("the slots topic has more partitions than the link has slots; partition ignored", "topic", m.cfg.Topic, "partition", p, "slots", m.cfg.Slots)
			continue
		}
		out = append(out, int(p))
	}
	slices.Sort(out)
	return out
}

// current returns the slots of s the member owns under client generation
// gen, or, when gen is not the current client's, none.
func (m *Member) ownedOf(gen int, s []int) []int {
	if gen != m.gen {
		return nil
	}
	var out []int
	for _, x := range s {
		if m.owned[x] {
			out = append(out, x)
		}
	}
	return out
}

func (m *Member) assigned(ctx context.Context, gen int, ps map[string][]int32) {
	m.cb.Lock()
	defer m.cb.Unlock()
	s := m.slotsOf(ps)
	m.mu.Lock()
	if gen != m.gen || len(s) == 0 {
		m.mu.Unlock()
		return
	}
	for _, x := range s {
		m.owned[x] = true
	}
	m.rebalances++
	m.mu.Unlock()
	m.log.Info("slots assigned", "group", m.cfg.Group, "slots", s)
	m.h.Assigned(ctx, s)
}

func (m *Member) revoked(ctx context.Context, gen int, ps map[string][]int32) {
	m.cb.Lock()
	defer m.cb.Unlock()
	m.mu.Lock()
	s := m.ownedOf(gen, m.slotsOf(ps))
	m.mu.Unlock()
	if len(s) == 0 {
		return
	}
	m.log.Info("slots revoked; stopping them", "group", m.cfg.Group, "slots", s)
	m.h.Revoked(ctx, s)
	m.mu.Lock()
	for _, x := range s {
		delete(m.owned, x)
	}
	m.rebalances++
	m.mu.Unlock()
}

func (m *Member) lost(gen int, ps map[string][]int32) {
	m.cb.Lock()
	defer m.cb.Unlock()
	m.mu.Lock()
	s := m.ownedOf(gen, m.slotsOf(ps))
	for _, x := range s {
		delete(m.owned, x)
	}
	if len(s) > 0 {
		m.losses++
		m.rebalances++
	}
	m.mu.Unlock()
	if len(s) == 0 {
		return
	}
	m.log.Warn("slots lost: the group membership ended; stopping them at once", "group", m.cfg.Group, "slots", s)
	m.h.Lost(s)
}
