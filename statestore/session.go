package statestore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/internal/backoff"
)

// ErrFenced says a newer session of the same link took the link's
// transactional.id, so this session may never write again. Every Commit of
// a fenced session returns it, forever after.
var ErrFenced = errors.New("state session fenced by a newer session of the link")

// TransactionalID is the transactional.id of a link's sessions.
func TransactionalID(link string) string { return "mirrord." + link }

// isFencing reports whether a transactional error means that the session
// lost the transactional.id. Kafka answers a zombie's EndTxn and
// AddPartitionsToTxn with PRODUCER_FENCED and its Produce with
// INVALID_PRODUCER_EPOCH; INVALID_PRODUCER_ID_MAPPING follows when the new
// session's epoch bump ran out of epochs and the coordinator moved the
// transactional.id to a new producer ID. INVALID_TXN_STATE is what kfake
// (and a broker's KIP-890 retry check) answers the zombie's EndTxn when the
// fencer's InitProducerId aborted the transaction it had open: a session
// that began a transaction and did not end it learns that someone else
// ended it. TRANSACTIONAL_ID_AUTHORIZATION_FAILED is not fencing but an ACL
// problem that no new session fixes; it fails the session like any other
// error, without ErrFenced.
func isFencing(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) ||
		errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.InvalidProducerIDMapping) ||
		errors.Is(err, kerr.InvalidTxnState)
}

// SessionOpt sets an optional field of a session.
type SessionOpt func(*sessionOpts)

type sessionOpts struct {
	source, destination string
	agent, fingerprint  string
	appendTimeout       time.Duration
	onRetry             func(op string, err error)
}

// SourceCluster sets the source cluster ID that the session's link records
// carry.
func SourceCluster(id string) SessionOpt { return func(o *sessionOpts) { o.source = id } }

// DestinationCluster sets the destination cluster ID that the session's link
// records carry (a pinned cluster_id). Without it, Begin asks the
// destination for its cluster ID.
func DestinationCluster(id string) SessionOpt { return func(o *sessionOpts) { o.destination = id } }

// Agent sets the agent name and the link settings' fingerprint that the
// session's link records carry (LinkValue.Agent, Fingerprint).
func Agent(name, fingerprint string) SessionOpt {
	return func(o *sessionOpts) { o.agent, o.fingerprint = name, fingerprint }
}

// AppendTimeout sets the longest time a Produce of the session may stay
// inside a destination broker after it was written (the produce timeout);
// the session's link records carry it so that the next session waits that
// long past the lease (View.LeaseWait).
func AppendTimeout(d time.Duration) SessionOpt {
	return func(o *sessionOpts) { o.appendTimeout = d }
}

// OnCommitRetry sets a function the session calls with the failed step
// and its error each time it aborts a failed state transaction to commit
// it again (for a metric); it runs on the committing goroutine.
func OnCommitRetry(fn func(op string, err error)) SessionOpt {
	return func(o *sessionOpts) { o.onRetry = fn }
}

// Session is one link session's claim on the link's state (DESIGN §7): a
// transactional producer holding transactional.id mirrord.<link>. Begin's
// InitProducerId bumped the producer epoch, which fenced the previous
// session and aborted whatever transaction it had open. Every state write is
// one transaction that also carries the link record and so renews the lease.
//
// Commit and Close are for the one goroutine that owns the session (the
// link); LeaseValid may be called from any goroutine (the appenders).
//
// A kfake behaviour to know in tests (Apache Kafka does not do this): when
// a fenced session's Produce (KIP-890, Produce v12+) reaches kfake, kfake
// registers the partition in a transaction of the producer ID's current,
// newer epoch before it rejects the old epoch; if the new session then does
// not commit within its transaction timeout (the session timeout), kfake
// aborts that phantom transaction with an epoch bump and the new session is
// fenced in turn. A new session that commits within the session timeout of
// its Begin is not affected.
type Session struct {
	store   *Store
	link    string
	timeout time.Duration
	cl      *kgo.Client
	log     hclog.Logger
	now     func() time.Time

	producerID    int64
	epoch         int16
	source        string
	dest          string
	appendTimeout time.Duration
	agent         string
	fingerprint   string

	// base is the monotonic origin of lastSent.
	base time.Time
	// lastSent is when the last successful commit was sent, as
	// nanoseconds since base; -1 before the first commit and once the
	// session committed STOPPED.
	lastSent atomic.Int64
	// dead is set once the session failed, was fenced or was closed.
	dead atomic.Bool

	mu     sync.Mutex // serializes Commit and Close
	err    error      // the failure that ended the session; sticky
	fenced bool
	open   bool // a transaction was begun and not ended
	closed bool

	// onRetry, when set, is told of each failed attempt of a commit
	// that is retried.
	onRetry func(op string, err error)
	// testBeforeEnd, when set, runs between an attempt's produce and
	// its EndTxn.
	testBeforeEnd func()
}

// Begin starts a session of link: it builds a transactional client with
// transactional.id mirrord.<link> and a transaction timeout of
// sessionTimeout, and calls InitProducerId, which fences the previous
// session of the link and aborts its open transaction. The caller replays
// the state topic after Begin (so that it sees the fenced session's last
// commit) and waits View.LeaseWait before appending.
func (s *Store) Begin(ctx context.Context, link string, sessionTimeout time.Duration, opts ...SessionOpt) (*Session, error) {
	if link == "" {
		return nil, errors.New("begin state session: empty link name")
	}
	if sessionTimeout < time.Millisecond {
		return nil, fmt.Errorf("begin state session of link %q: session timeout %v is below 1ms", link, sessionTimeout)
	}
	if err := checkString("link name", link); err != nil {
		return nil, fmt.Errorf("begin state session: %w", err)
	}
	var o sessionOpts
	for _, opt := range opts {
		opt(&o)
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("begin state session of link %q: state store %w", link, ErrClosed)
	}

	copts := append(append([]kgo.Opt{}, s.deps.ClientOpts...),
		kgo.TransactionalID(TransactionalID(link)),
		kgo.TransactionTimeout(sessionTimeout),
		kgo.DefaultProduceTopic(s.cfg.Topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// The key partitioner keeps every key in one partition, as
		// compaction needs; it hashes like Kafka's Java client.
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
	)
	if o.destination == "" {
		rc, err := s.client()
		if err != nil {
			return nil, fmt.Errorf("begin state session of link %q: %w", link, err)
		}
		md, err := kadm.NewClient(rc).BrokerMetadata(ctx)
		if err != nil {
			return nil, fmt.Errorf("begin state session of link %q: destination cluster ID: %w", link, err)
		}
		o.destination = md.Cluster
	}
	// InitProducerId: the epoch bump that fences the previous session.
	// It fails while the transaction coordinator's broker is down or
	// moving; it is asked again, for at most one session timeout, before
	// the link has to back off and prepare again.
	cl, id, epoch, err := s.initProducerID(ctx, copts, link, sessionTimeout)
	if err != nil {
		return nil, fmt.Errorf("begin state session of link %q: init producer id for transactional.id %s: %w", link, TransactionalID(link), s.explain(link, err))
	}
	now := s.deps.Now()
	sess := &Session{
		store:         s,
		link:          link,
		timeout:       sessionTimeout,
		cl:            cl,
		log:           s.log.With("link", link),
		now:           s.deps.Now,
		producerID:    id,
		epoch:         epoch,
		source:        o.source,
		dest:          o.destination,
		agent:         o.agent,
		fingerprint:   o.fingerprint,
		appendTimeout: o.appendTimeout,
		onRetry:       o.onRetry,
		base:          now,
	}
	sess.lastSent.Store(-1)
	sess.log.Info("began state session", "transactional_id", TransactionalID(link), "producer_id", id, "epoch", epoch)
	return sess, nil
}

// initProducerID builds the session's transactional client and runs
// InitProducerId, asking again after a retriable failure until it works or
// within has passed. Each attempt gets a new client: kgo keeps a failed
// InitProducerId's error for good when the broker's answer was not
// retriable (UNKNOWN_SERVER_ERROR, say).
func (s *Store) initProducerID(ctx context.Context, copts []kgo.Opt, link string, within time.Duration) (*kgo.Client, int64, int16, error) {
	start := s.deps.Now()
	for attempt := 1; ; attempt++ {
		cl, err := kgo.NewClient(copts...)
		if err != nil {
			return nil, 0, 0, fmt.Errorf("client: %w", err)
		}
		id, epoch, err := cl.ProducerID(ctx)
		if err == nil {
			return cl, id, epoch, nil
		}
		cl.Close()
		wait := commitBackoff.Wait(attempt)
		if !retriable(err) || ctx.Err() != nil || s.deps.Now().Add(wait).Sub(start) >= within {
			return nil, 0, 0, err
		}
		s.log.Warn("init producer id of a new state session failed; asking again", "link", link,
			"transactional_id", TransactionalID(link), "attempt", attempt, "retry_in", wait, "error", err)
		if err := backoff.Sleep(ctx, wait); err != nil {
			return nil, 0, 0, err
		}
	}
}

// Link is the session's link name.
func (s *Session) Link() string { return s.link }

// Epoch is the producer epoch InitProducerId gave the session; it is the
// SessionEpoch of the session's link records.
func (s *Session) Epoch() int16 { return s.epoch }

// LeaseValid reports whether the session may still append at now: it has
// committed at least once, it was not fenced, did not fail and did not
// commit STOPPED, and less than the session timeout has passed since its
// last successful commit was sent. The times are compared on the monotonic
// clock when both carry a reading.
func (s *Session) LeaseValid(now time.Time) bool {
	if s.dead.Load() {
		return false
	}
	sent := s.lastSent.Load()
	if sent < 0 {
		return false
	}
	return now.Sub(s.base)-time.Duration(sent) < s.timeout
}

// LeaseDeadline is when the session's lease ends, on the monotonic clock of
// Begin's time source, and false if the session may not append at all. An
// append is written to a broker only before this instant (DESIGN §12 I4):
// the appender gives every Produce a context with this deadline.
func (s *Session) LeaseDeadline() (time.Time, bool) {
	if s.dead.Load() {
		return time.Time{}, false
	}
	sent := s.lastSent.Load()
	if sent < 0 {
		return time.Time{}, false
	}
	return s.base.Add(time.Duration(sent) + s.timeout), true
}

// Commit writes recs and the link record {state, session epoch, cluster IDs,
// LeaseExpiresMs = send time + session timeout, TimestampMs = send time} in
// one transaction. On success the lease counts from the send time. A record
// that does not encode fails the call before anything is sent and leaves
// the session usable. A transaction that fails otherwise is aborted and
// committed again, after a backoff of 100 ms doubling to 2 s, for as long
// as the lease lasts (OnCommitRetry is told of each); when the abort could
// not tell whether the failed attempt had committed, committing the same
// records again is harmless. A fenced session, an authorization refusal,
// records the topic refuses, or the lease running out end the session: a
// fenced session returns an error wrapping ErrFenced, then and on every
// later call; otherwise the link begins a new session. Committing STOPPED
// or PAUSED is CommitStop with nothing unresolved.
func (s *Session) Commit(ctx context.Context, state LinkState, recs ...Record) error {
	return s.commit(ctx, state, 0, recs)
}

// CommitStop is the final commit of a session that stops appending: it
// gives the lease up before the commit is sent, and records state (STOPPED
// or PAUSED) with the number of appends still unresolved (in flight, or of
// unknown outcome). Only a record with none is a clean stop that the next
// session need not wait for (LinkValue.Clean); with some, the next session
// waits out the lease as after a crash.
func (s *Session) CommitStop(ctx context.Context, state LinkState, unresolved int, recs ...Record) error {
	if state != Stopped && state != Paused {
		return fmt.Errorf("state commit of link %q: CommitStop with state %s, want STOPPED or PAUSED", s.link, state)
	}
	return s.commit(ctx, state, max(int32(min(unresolved, math.MaxInt32)), 0), recs)
}

func (s *Session) commit(ctx context.Context, state LinkState, unresolved int32, recs []Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return err
	}
	krecs, err := s.encode(recs)
	if err != nil {
		return err
	}
	// A failed attempt is aborted and the same records are committed
	// again in a new transaction while the lease lasts: the leadership of
	// the state topic or of the transaction coordinator moving in a
	// rolling restart fails a transaction now and then. Committing the
	// same records twice is harmless: the state topic is compacted by key
	// and each record states the same thing again.
	deadline := s.retryDeadline()
	for attempt := 1; ; attempt++ {
		op, err := s.attempt(ctx, state, unresolved, krecs)
		if err == nil {
			return nil
		}
		wait := commitBackoff.Wait(attempt)
		if !retriable(err) || ctx.Err() != nil || !s.now().Add(wait).Before(deadline) {
			return s.fail(op, err)
		}
		s.store.retries.Add(1)
		s.log.Warn("state commit failed; aborting it and committing again while the lease lasts",
			"step", op, "attempt", attempt, "retry_in", wait, "lease_left", deadline.Sub(s.now()).Round(time.Millisecond), "error", err)
		if s.onRetry != nil {
			s.onRetry(op, err)
		}
		if err := s.abort(ctx); err != nil {
			if !retriable(err) {
				return s.fail("abort the failed transaction", err)
			}
			// The next attempt's BeginTransaction finds the
			// transaction still open and fails; that attempt is
			// aborted again.
			s.log.Warn("aborting the failed state transaction failed; trying again", "error", err)
		}
		if err := backoff.Sleep(ctx, wait); err != nil {
			return s.fail(op, err)
		}
	}
}

// commitBackoff spaces the attempts of one state commit.
var commitBackoff = backoff.Policy{First: 100 * time.Millisecond, Max: 2 * time.Second}

// retryDeadline is when a failed commit stops being retried: when the
// lease of the last successful commit ends, or, before the first, one
// session timeout after Begin. Past it nothing appends (LeaseValid) and a
// newer session may take the link, so the session fails and the link
// begins a new one.
func (s *Session) retryDeadline() time.Time {
	return s.base.Add(time.Duration(max(s.lastSent.Load(), 0)) + s.timeout)
}

// retriable reports whether a failed state transaction may be aborted and
// committed again, or a failed InitProducerId asked again: not when the
// session was fenced, not when the destination refuses the principal (an
// ACL no retry fixes), and not when the records are invalid or too large
// for the topic.
func retriable(err error) bool {
	switch {
	case isFencing(err),
		errors.Is(err, context.Canceled),
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed),
		errors.Is(err, kerr.TopicAuthorizationFailed),
		errors.Is(err, kerr.ClusterAuthorizationFailed),
		errors.Is(err, kerr.MessageTooLarge),
		errors.Is(err, kerr.RecordListTooLarge),
		errors.Is(err, kerr.InvalidRecord),
		errors.Is(err, kerr.InvalidTopicException),
		errors.Is(err, kerr.InvalidTransactionTimeout):
		return false
	}
	return true
}

// encode encodes recs as records of the state topic.
func (s *Session) encode(recs []Record) ([]*kgo.Record, error) {
	krecs := make([]*kgo.Record, 0, len(recs))
	for i, r := range recs {
		k, v, err := r.encode()
		if err != nil {
			return nil, fmt.Errorf("state commit of link %q: record %d: %w", s.link, i, err)
		}
		krecs = append(krecs, &kgo.Record{Topic: s.store.cfg.Topic, Key: k, Value: v})
	}
	return krecs, nil
}

// attempt runs one state transaction: it begins it, produces krecs and the
// link record into it, and commits it. It returns the step that failed.
// Callers hold s.mu.
func (s *Session) attempt(ctx context.Context, state LinkState, unresolved int32, krecs []*kgo.Record) (string, error) {
	sent := s.now()
	lk, lv, err := Record{Key: LinkKey{LinkName: s.link}, Value: LinkValue{
		State:                state,
		SessionEpoch:         s.epoch,
		SourceClusterID:      s.source,
		DestinationClusterID: s.dest,
		LeaseExpiresMs:       sent.Add(s.timeout).UnixMilli(),
		TimestampMs:          sent.UnixMilli(),
		AppendTimeoutMs:      int32(min(s.appendTimeout.Milliseconds(), math.MaxInt32)),
		UnresolvedAppends:    unresolved,
		Agent:                s.agent,
		Fingerprint:          s.fingerprint,
	}}.encode()
	if err != nil {
		return "link record", fmt.Errorf("state commit of link %q: link record: %w", s.link, err)
	}
	stopping := state == Stopped || state == Paused
	if stopping {
		// A new session need not wait for a cleanly stopped session's
		// lease, so appending ends before the record is sent.
		s.lastSent.Store(-1)
	}
	if err := s.cl.BeginTransaction(); err != nil {
		return "begin transaction", err
	}
	s.open = true
	// kgo owns a record until its promise: each attempt produces copies.
	all := make([]*kgo.Record, 0, len(krecs)+1)
	for _, r := range krecs {
		all = append(all, &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value})
	}
	all = append(all, &kgo.Record{Topic: s.store.cfg.Topic, Key: lk, Value: lv})
	if err := s.cl.ProduceSync(ctx, all...).FirstErr(); err != nil {
		return "produce", err
	}
	if s.testBeforeEnd != nil {
		s.testBeforeEnd()
	}
	if err := s.cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return "end transaction", err
	}
	s.open = false
	if !stopping {
		s.lastSent.Store(int64(sent.Sub(s.base)))
	}
	s.store.commits.Add(1)
	return "", nil
}

// abort ends the open transaction of a failed attempt: it drops the records
// still buffered and aborts. After a commit of unconfirmed outcome, kgo's
// abort re-runs InitProducerId at the session's producer ID, which bumps
// the epoch and aborts the transaction if it was still open broker-side (a
// transaction that did commit stays committed). Callers hold s.mu.
func (s *Session) abort(ctx context.Context) error {
	if err := s.cl.AbortBufferedRecords(ctx); err != nil {
		return err
	}
	if err := s.cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		return err
	}
	s.open = false
	return nil
}

// usable returns the error that keeps the session from writing, if any.
func (s *Session) usable() error {
	switch {
	case s.err != nil:
		return s.err
	case s.closed:
		return fmt.Errorf("state session of link %q: %w", s.link, ErrClosed)
	}
	return nil
}

// fail ends the session with err and returns the sticky error.
func (s *Session) fail(op string, err error) error {
	s.dead.Store(true)
	if isFencing(err) {
		s.fenced = true
		s.store.fenced.Add(1)
		s.err = fmt.Errorf("state session of link %q (epoch %d): %s: %w: %w", s.link, s.epoch, op, ErrFenced, err)
		return s.err
	}
	s.err = fmt.Errorf("state session of link %q (epoch %d): %s: %w", s.link, s.epoch, op, s.store.explain(s.link, err))
	return s.err
}

// explain names the permission behind an authorization refusal of a
// session's transactional requests; other errors pass unchanged. The
// transactional producer's FindCoordinator needs Describe on the
// transactional ID, InitProducerId, AddPartitionsToTxn, Produce and EndTxn
// need Write on it (Write implies Describe), and its Produce needs Write on
// the state topic.
func (s *Store) explain(link string, err error) error {
	switch {
	case errors.Is(err, kerr.TransactionalIDAuthorizationFailed):
		return fmt.Errorf("the destination cluster does not allow %s Write on TransactionalId:%s (each session of link %q takes it with InitProducerId, which fences the previous session, and commits every state transaction with it; Write implies the Describe that finding its coordinator needs; see docs/acls.md): %w",
			s.principal(), TransactionalID(link), link, err)
	case errors.Is(err, kerr.TopicAuthorizationFailed):
		return s.refused(needWrite, err)
	case errors.Is(err, kerr.ClusterAuthorizationFailed):
		return fmt.Errorf("the destination cluster refused %s a cluster operation for the state session of link %q (see docs/acls.md): %w", s.principal(), link, err)
	}
	return err
}

// Err is the failure that ended the session, or nil.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close aborts the session's open transaction, if any, and closes its
// client; it waits for a Commit in progress. A fenced session aborts
// nothing: the fencer already did, and a zombie's transactional requests
// are pointless. Close is idempotent; it returns the abort's error.
func (s *Session) Close(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.dead.Store(true)
	var err error
	if s.open && !s.fenced {
		if e := s.cl.AbortBufferedRecords(ctx); e != nil {
			err = fmt.Errorf("close state session of link %q: drop buffered records: %w", s.link, e)
		} else if e := s.cl.EndTransaction(ctx, kgo.TryAbort); e != nil {
			err = fmt.Errorf("close state session of link %q: abort open transaction: %w", s.link, e)
		}
		s.open = false
	}
	s.cl.Close()
	return err
}
