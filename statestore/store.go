package statestore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/internal/backoff"
	"github.com/seed83556561/mirrord/internal/kafka/access"
	"github.com/seed83556561/mirrord/internal/kafka/rawfetch"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
)

// DefaultTopic is the state topic's name unless the link says otherwise.
const DefaultTopic = "__mirror_state"

// Sentinel errors of the Store.
var (
	// ErrNotCompacted: the state topic exists and its cleanup.policy is
	// not exactly compact, so the broker would delete state that is
	// still in use.
	ErrNotCompacted = errors.New("state topic is not compacted")
	// ErrNoTopic: the state topic does not exist (Ensure creates it).
	ErrNoTopic = errors.New("state topic does not exist")
	// ErrClosed: the Store or Session was closed.
	ErrClosed = errors.New("closed")
)

// Fetch sizes of the replay. A replay fetches one partition per request, and
// the request's MaxBytes never binds (package rawfetch): a READ_COMMITTED fetch
// whose request-level limit binds partway through a partition comes back
// from kfake without that partition's aborted-transaction list (DESIGN §11),
// and the replay would then take aborted records for committed ones.
const (
	fetchPartitionMaxBytes = 1 << 20
	fetchMaxWaitMillis     = 500
	// fetchRetries bounds consecutive retriable errors of one partition
	// before the replay gives up.
	fetchRetries = 20
)

// Config says which topic holds the state and how to create it.
type Config struct {
	// Topic is the state topic. Default DefaultTopic.
	Topic string
	// Partitions is the partition count Ensure creates the topic with.
	// Default 1. An existing topic keeps its count.
	Partitions int32
	// ReplicationFactor is the replication factor Ensure creates the topic
	// with. Default -1: the broker's default.replication.factor.
	ReplicationFactor int16
	// Principal names the Kafka principal of the destination credentials
	// in errors about a missing ACL (dial.Principal). Default "the
	// link's principal".
	Principal string
	// OtherSide: the topic is the state topic of links in the other
	// direction, read at this link's source (Origins); errors about a
	// missing ACL name the source cluster and what the read is for.
	OtherSide bool
}

// validate fills defaults and reports every problem at once, each under the
// link's HCL key.
func (c *Config) validate() error {
	if c.Topic == "" {
		c.Topic = DefaultTopic
	}
	if c.Partitions == 0 {
		c.Partitions = 1
	}
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = -1
	}
	var errs []error
	if err := checkTopicName(c.Topic); err != nil {
		errs = append(errs, fmt.Errorf("state_topic: %w", err))
	}
	if c.Partitions < 0 {
		errs = append(errs, fmt.Errorf("state_topic_partitions: %d is negative; use 1 or more", c.Partitions))
	}
	if c.ReplicationFactor < -1 {
		errs = append(errs, fmt.Errorf("state_topic_replication_factor: %d is invalid; use -1 for the broker default or 1 or more", c.ReplicationFactor))
	}
	return errors.Join(errs...)
}

// checkTopicName applies Kafka's topic name rules.
func checkTopicName(t string) error {
	if t == "." || t == ".." {
		return fmt.Errorf("%q is not a legal topic name", t)
	}
	if len(t) > 249 {
		return fmt.Errorf("topic name is %d characters; Kafka allows at most 249", len(t))
	}
	for _, r := range t {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("topic name %q contains %q; Kafka allows only letters, digits, '.', '_' and '-'", t, r)
		}
	}
	return nil
}

// Deps are the Store's collaborators.
type Deps struct {
	// ClientOpts reach the destination cluster: seed brokers, TLS, SASL.
	// The Store adds its own options after these.
	ClientOpts []kgo.Opt
	// Logger gets the Store's and its sessions' logs. Default: discard.
	Logger hclog.Logger
	// Now is the clock of leases and timestamps. Default time.Now. Leases
	// are measured on its monotonic reading when it has one.
	Now func() time.Time
}

// Stats are the Store's counters, for the metrics package.
type Stats struct {
	Commits        int64 // state transactions committed
	CommitRetries  int64 // failed state transactions aborted and committed again
	FencedSessions int64 // sessions that learned they were fenced
	SkippedRecords int64 // replayed records of an unknown type or version
}

// Store is the state topic on the destination cluster. It creates the
// topic, replays it, and begins sessions, each of which writes through its
// own transactional client.
type Store struct {
	cfg  Config
	deps Deps
	log  hclog.Logger

	mu     sync.Mutex
	cl     *kgo.Client // reads and admin; built on first use, closed by Close
	closed bool

	commits atomic.Int64
	retries atomic.Int64
	fenced  atomic.Int64
	skipped atomic.Int64
}

// New validates cfg and returns a Store. It does no I/O and starts nothing.
func New(cfg Config, deps Deps) (*Store, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if deps.Logger == nil {
		deps.Logger = hclog.NewNullLogger()
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	return &Store{
		cfg:  cfg,
		deps: deps,
		log:  deps.Logger.Named("statestore").With("topic", cfg.Topic),
	}, nil
}

// Topic is the state topic's name.
func (s *Store) Topic() string { return s.cfg.Topic }

// Stats returns the counters.
func (s *Store) Stats() Stats {
	return Stats{Commits: s.commits.Load(), CommitRetries: s.retries.Load(), FencedSessions: s.fenced.Load(), SkippedRecords: s.skipped.Load()}
}

// client returns the shared read/admin client, building it on first use.
func (s *Store) client() (*kgo.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("state store: %w", ErrClosed)
	}
	if s.cl == nil {
		cl, err := kgo.NewClient(s.deps.ClientOpts...)
		if err != nil {
			return nil, fmt.Errorf("state store client: %w", err)
		}
		s.cl = cl
	}
	return s.cl, nil
}

// Close closes the shared client. Sessions are closed by their owners. It
// is idempotent.
func (s *Store) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	if s.cl != nil {
		s.cl.Close()
	}
}

// What a session needs on the state topic (docs/acls.md), checked by
// Ensure from the operations the destination reports for the principal
// (KIP-430), so that a permission needed only later (Read, for the replay
// of a topic that holds records; DescribeConfigs, at the next start) fails
// the first start already.
var (
	needRead            = need{kmsg.ACLOperationRead, "Read", "mirrord replays the state topic when a session begins and when partitions join"}
	needWrite           = need{kmsg.ACLOperationWrite, "Write", "every state transaction (checkpoints, barriers, salts, the session's lease) writes it"}
	needDescribeConfigs = need{kmsg.ACLOperationDescribeConfigs, "DescribeConfigs", "mirrord checks that an existing state topic is compacted"}
	needDescribe        = need{kmsg.ACLOperationDescribe, "Describe", "the link's state topic: mirrord needs Read, Write and DescribeConfigs on it, which imply Describe, and Create unless it exists"}
	needCreate          = need{kmsg.ACLOperationCreate, "Create", "mirrord creates the state topic when it does not exist; grant Create on it or on the cluster, or create it beforehand with cleanup.policy=compact"}
)

// need is an operation a session needs on the state topic, and why.
type need struct {
	op   kmsg.ACLOperation
	name string // as kafka-acls.sh --operation spells it
	why  string
}

// refused is the error for an operation the destination does not allow the
// principal on the state topic; it wraps cause.
func (s *Store) refused(n need, cause error) error {
	if s.cfg.OtherSide {
		return fmt.Errorf("the source cluster does not allow %s %s on Topic:%s (links in the other direction record there the producer IDs of batches that must not go back; mirrord needs Read on it, which implies Describe; see docs/acls.md): %w",
			s.principal(), n.name, s.cfg.Topic, cause)
	}
	return fmt.Errorf("the destination cluster does not allow %s %s on Topic:%s (%s; see docs/acls.md): %w",
		s.principal(), n.name, s.cfg.Topic, n.why, cause)
}

// principal is how errors name the principal.
func (s *Store) principal() string {
	if s.cfg.Principal == "" {
		return "the link's principal"
	}
	return s.cfg.Principal
}

// describe returns the state topic's metadata with the operations the
// principal may perform on it (empty when the broker does not say).
func (s *Store) describe(ctx context.Context, cl *kgo.Client) (kmsg.MetadataResponseTopic, error) {
	req := kmsg.NewPtrMetadataRequest()
	req.AllowAutoTopicCreation = false
	req.IncludeTopicAuthorizedOperations = true
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = new(s.cfg.Topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return kmsg.MetadataResponseTopic{}, fmt.Errorf("metadata of state topic %q: %w", s.cfg.Topic, err)
	}
	for _, t := range resp.Topics {
		if t.Topic != nil && *t.Topic == s.cfg.Topic {
			return t, nil
		}
	}
	return kmsg.MetadataResponseTopic{}, fmt.Errorf("metadata of state topic %q: the answer does not hold the topic", s.cfg.Topic)
}

// checkAccess returns the refusals among needs of the operations t reports.
func (s *Store) checkAccess(t kmsg.MetadataResponseTopic, needs ...need) error {
	ops := kadm.DecodeACLOperations(t.AuthorizedOperations)
	if len(ops) == 0 {
		return nil // not reported (Kafka before 2.3): the requests will say
	}
	var errs []error
	for _, n := range needs {
		if !slices.Contains(ops, n.op) {
			errs = append(errs, s.refused(n, kerr.TopicAuthorizationFailed))
		}
	}
	return errors.Join(errs...)
}

// Ensure creates the state topic with cleanup.policy=compact if it is
// missing, and checks that the destination lets the principal do what a
// session does with it: Read, Write and DescribeConfigs (Describe is
// implied), and Create only when the topic is missing, so that an operator
// may create it beforehand and grant no Create. A missing permission is an
// error that names it and the topic.
//
// If the topic exists, its cleanup.policy must be exactly compact:
// "delete" and "compact,delete" both let retention remove the only copy of
// a salt, checkpoint or link record that is still in use (a salt may stay
// in use for as long as its producer lives, far beyond any retention), so
// they are refused with ErrNotCompacted and an error that says how to fix
// the topic.
func (s *Store) Ensure(ctx context.Context) error {
	cl, err := s.client()
	if err != nil {
		return err
	}
	adm := kadm.NewClient(cl)
	t, err := s.describe(ctx, cl)
	if err != nil {
		return err
	}
	created := false
	switch err := kerr.ErrorForCode(t.ErrorCode); {
	case access.IsRefusal(err):
		return s.refused(needDescribe, err)
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		compact := "compact"
		_, err := adm.CreateTopic(ctx, s.cfg.Partitions, s.cfg.ReplicationFactor, map[string]*string{"cleanup.policy": &compact}, s.cfg.Topic)
		switch {
		case err == nil:
			s.log.Info("created state topic", "partitions", s.cfg.Partitions, "replication_factor", s.cfg.ReplicationFactor)
			created = true
		case errors.Is(err, kerr.TopicAlreadyExists): // another agent was first
		case access.IsRefusal(err):
			return s.refused(needCreate, err)
		default:
			return fmt.Errorf("create state topic %q: %w", s.cfg.Topic, err)
		}
		if t, err = s.waitCreated(ctx, cl); err != nil {
			return err
		}
		if err := kerr.ErrorForCode(t.ErrorCode); access.IsRefusal(err) {
			return s.refused(needDescribe, err)
		}
	case err != nil && !kerr.IsRetriable(err):
		return fmt.Errorf("metadata of state topic %q: %w", s.cfg.Topic, err)
	}
	if err := s.checkAccess(t, needRead, needWrite, needDescribeConfigs); err != nil {
		return err
	}
	if created {
		return nil
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, s.cfg.Topic)
	var rc kadm.ResourceConfig
	if err == nil {
		rc, err = rcs.On(s.cfg.Topic, nil)
		if err == nil {
			err = rc.Err
		}
	}
	if access.IsRefusal(err) {
		return s.refused(needDescribeConfigs, err)
	}
	if err != nil {
		return fmt.Errorf("describe state topic %q: %w", s.cfg.Topic, err)
	}
	policy := "delete" // Kafka's default when nothing is set
	for _, c := range rc.Configs {
		if c.Key == "cleanup.policy" && c.Value != nil {
			policy = *c.Value
		}
	}
	if normalizePolicy(policy) != "compact" {
		return fmt.Errorf("state topic %q has cleanup.policy=%s, but it must be exactly compact (retention would delete salts and checkpoints still in use): "+
			"run kafka-configs.sh --bootstrap-server <destination> --alter --entity-type topics --entity-name %s --add-config cleanup.policy=compact, "+
			"or set the link's state_topic to a new topic: %w", s.cfg.Topic, policy, s.cfg.Topic, ErrNotCompacted)
	}
	return nil
}

// waitCreated waits, a few seconds at most, until a state topic just
// created (here or by another agent) shows in the metadata; the topic's
// entry as last answered is returned either way.
func (s *Store) waitCreated(ctx context.Context, cl *kgo.Client) (kmsg.MetadataResponseTopic, error) {
	var t kmsg.MetadataResponseTopic
	for range 50 {
		var err error
		if t, err = s.describe(ctx, cl); err != nil {
			return t, err
		}
		if !errors.Is(kerr.ErrorForCode(t.ErrorCode), kerr.UnknownTopicOrPartition) {
			return t, nil
		}
		if err := backoff.Sleep(ctx, 100*time.Millisecond); err != nil {
			return t, fmt.Errorf("state topic %q: waiting for its metadata after creating it: %w", s.cfg.Topic, err)
		}
	}
	return t, nil
}

// normalizePolicy sorts and dedups a cleanup.policy list.
func normalizePolicy(p string) string {
	var parts []string
	for f := range strings.SplitSeq(p, ",") {
		if f = strings.TrimSpace(strings.ToLower(f)); f != "" {
			parts = append(parts, f)
		}
	}
	slices.Sort(parts)
	return strings.Join(slices.Compact(parts), ",")
}

// RawRecord is a record of the state topic as it is stored, not decoded.
type RawRecord struct {
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte // nil: tombstone
	Timestamp time.Time
}

// Scan reads the state topic with READ_COMMITTED isolation from the log
// start up to the high watermark each partition had when the scan began,
// and calls fn for each record, partition by partition in ascending order,
// each in offset order. Aborted records and control records are never
// passed. A transaction that was open at the start holds the scan at its
// first offset until the transaction ends (at most the writer's transaction
// timeout): only then can the scan tell whether its records count. An error
// from fn stops the scan and is returned as it is.
func (s *Store) Scan(ctx context.Context, fn func(RawRecord) error) error {
	return s.scan(ctx, "", fn)
}

// scan is Scan; with txnID set, a partition whose last stable offset is
// held by an open transaction of txnID is read up to that offset only
// (openOwn).
func (s *Store) scan(ctx context.Context, txnID string, fn func(RawRecord) error) error {
	cl, err := s.client()
	if err != nil {
		return err
	}
	adm := kadm.NewClient(cl)
	topic := s.cfg.Topic
	md, err := adm.Metadata(ctx, topic)
	if access.IsRefusal(err) {
		return s.refused(needDescribe, err)
	}
	if err != nil {
		return fmt.Errorf("metadata of state topic %q: %w", topic, err)
	}
	td, ok := md.Topics[topic]
	if !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
		return fmt.Errorf("state topic %q: %w", topic, ErrNoTopic)
	}
	if td.Err != nil {
		return fmt.Errorf("metadata of state topic %q: %w", topic, td.Err)
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if access.IsRefusal(err) {
		return s.refused(needDescribe, err)
	}
	if err != nil {
		return fmt.Errorf("start offsets of state topic %q: %w", topic, err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if access.IsRefusal(err) {
		return s.refused(needDescribe, err)
	}
	if err != nil {
		return fmt.Errorf("end offsets of state topic %q: %w", topic, err)
	}
	var stops map[int32]int64
	if txnID != "" {
		stops = s.openOwn(ctx, adm, topic, txnID, ends)
	}
	for _, p := range td.Partitions.Numbers() {
		start, _ := starts.Lookup(topic, p)
		end, _ := ends.Lookup(topic, p)
		if stop, ok := stops[p]; ok {
			end.Offset = stop
		}
		pr := partitionReader{s: s, cl: cl, adm: adm, topic: topic, id: td.ID, p: p, leader: td.Partitions[p].Leader}
		if err := pr.read(ctx, start.Offset, end.Offset, fn); err != nil {
			return err
		}
	}
	return nil
}

// partitionReader fetches one partition of the state topic from its leader.
type partitionReader struct {
	s      *Store
	cl     *kgo.Client
	adm    *kadm.Client
	topic  string
	id     kadm.TopicID
	p      int32
	leader int32
}

func (r *partitionReader) read(ctx context.Context, off, end int64, fn func(RawRecord) error) error {
	var retries int
	var waitLogged bool
	for off < end {
		if r.leader < 0 {
			if retries >= fetchRetries {
				return fmt.Errorf("read state topic %q partition %d: the partition has no leader", r.topic, r.p)
			}
			retries++
			if err := backoff.Sleep(ctx, 100*time.Millisecond); err != nil {
				return fmt.Errorf("read state topic %q partition %d: waiting for a leader: %w", r.topic, r.p, err)
			}
			if err := r.refreshLeader(ctx); err != nil {
				return err
			}
			continue
		}
		fp, next, err := r.fetch(ctx, off)
		if err != nil {
			return err
		}
		switch {
		case fp.Err == nil:
			retries = 0
		case errors.Is(fp.Err, kerr.OffsetOutOfRange) && fp.LogStartOffset > off:
			// Compaction or DeleteRecords moved the log start
			// past us while we read; what is gone is gone.
			off = fp.LogStartOffset
			continue
		case kerr.IsRetriable(fp.Err) && retries < fetchRetries:
			retries++
			if err := r.refreshLeader(ctx); err != nil {
				return err
			}
			if err := backoff.Sleep(ctx, 100*time.Millisecond); err != nil {
				return fmt.Errorf("read state topic %q partition %d at offset %d: %w", r.topic, r.p, off, err)
			}
			continue
		case access.IsRefusal(fp.Err):
			return fmt.Errorf("read state topic %q partition %d at offset %d: %w", r.topic, r.p, off, r.s.refused(needRead, fp.Err))
		default:
			return fmt.Errorf("read state topic %q partition %d at offset %d: %w", r.topic, r.p, off, fp.Err)
		}
		for _, rec := range fp.Records {
			if rec.Offset >= end {
				break
			}
			if err := fn(RawRecord{Partition: r.p, Offset: rec.Offset, Key: rec.Key, Value: rec.Value, Timestamp: rec.Timestamp}); err != nil {
				return err
			}
		}
		if next <= off && fp.LastStableOffset >= 0 && fp.LastStableOffset <= off && !waitLogged {
			// The broker held the fetch at an open transaction;
			// the next fetch long-polls until it ends.
			r.s.log.Info("state replay waits for an open transaction to end", "partition", r.p, "offset", off, "end", end)
			waitLogged = true
		}
		off = max(off, next)
	}
	return nil
}

// fetch issues one READ_COMMITTED fetch of the partition at off to its
// leader and processes the answer with kgo's own batch parser (aborted
// transactions dropped, control records skipped, CRCs checked).
func (r *partitionReader) fetch(ctx context.Context, off int64) (kgo.FetchPartition, int64, error) {
	return r.fetchWait(ctx, off, fetchMaxWaitMillis*time.Millisecond)
}

// fetchWait is fetch with the broker's MaxWait given.
func (r *partitionReader) fetchWait(ctx context.Context, off int64, wait time.Duration) (kgo.FetchPartition, int64, error) {
	rp, err := rawfetch.Do(ctx, r.cl, r.leader, rawfetch.Request{
		Partition:         tp.Partition{Topic: r.topic, ID: r.id, Partition: r.p},
		Offset:            off,
		LeaderEpoch:       -1,
		PartitionMaxBytes: fetchPartitionMaxBytes,
		ReadCommitted:     true,
		MaxWait:           max(wait, time.Millisecond),
		MinBytes:          1,
	})
	if err != nil {
		if ke, ok := errors.AsType[*kerr.Error](err); ok {
			return kgo.FetchPartition{Err: ke}, off, nil
		}
		return kgo.FetchPartition{}, 0, fmt.Errorf("state topic %q: %w", r.topic, err)
	}
	fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
		Offset:         off,
		IsolationLevel: kgo.ReadCommitted(),
		Topic:          r.topic,
		Partition:      r.p,
	}, rp, kgo.DefaultDecompressor(), nil)
	return fp, next, nil
}

func (r *partitionReader) refreshLeader(ctx context.Context) error {
	md, err := r.adm.Metadata(ctx, r.topic)
	if err != nil {
		return fmt.Errorf("metadata of state topic %q: %w", r.topic, err)
	}
	if pd, ok := md.Topics[r.topic].Partitions[r.p]; ok {
		r.leader = pd.Leader
	}
	return nil
}

// openOwn finds the partitions of the state topic whose last stable offset
// is where an open transaction of txnID began, and returns that offset for
// each. A link's session writes its state records in transactions of the
// link's transactional.id; one that crashed leaves its last transaction
// open until the next session's InitProducerId aborts it, or the
// coordinator after the transaction timeout. Records of the link past such
// an offset cannot be committed: a later transaction of txnID needs this
// one ended, and any other session of the link would have aborted it with
// its InitProducerId. So reading up to it gives the link's committed state
// whole (other links' records past it are left out). Whatever cannot be
// proven that way (another producer's transaction holds the offset, txnID's
// transaction is not Ongoing, the cluster answers no DescribeProducers or
// DescribeTransactions: Kafka 2.8 and later answer both, with Read on the
// topic and Describe on the transactional.id, which the link has) is read
// up to the high watermark, waiting as Scan does.
func (s *Store) openOwn(ctx context.Context, adm *kadm.Client, topic, txnID string, ends kadm.ListedOffsets) map[int32]int64 {
	stable, err := adm.ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = stable.Error()
	}
	if err != nil {
		s.log.Debug("state replay: no last stable offsets; an open transaction is waited for", "error", err)
		return nil
	}
	held := map[int32]int64{}
	stable.Each(func(o kadm.ListedOffset) {
		if end, ok := ends.Lookup(topic, o.Partition); ok && o.Offset >= 0 && o.Offset < end.Offset {
			held[o.Partition] = o.Offset
		}
	})
	if len(held) == 0 {
		return nil
	}
	txns, err := adm.DescribeTransactions(ctx, txnID)
	if err != nil {
		s.log.Debug("state replay: transactional.id not described; an open transaction is waited for", "transactional_id", txnID, "error", err)
		return nil
	}
	txn, ok := txns[txnID]
	if !ok || txn.Err != nil || txn.State != "Ongoing" {
		return nil
	}
	set := kadm.TopicsSet{}
	for p := range held {
		set.Add(topic, p)
	}
	producers, err := adm.DescribeProducers(ctx, set)
	if err != nil {
		s.log.Debug("state replay: producers not described; an open transaction is waited for", "error", err)
		return nil
	}
	stops := map[int32]int64{}
	producers.EachPartition(func(dp kadm.DescribedProducersPartition) {
		at, ok := held[dp.Partition]
		if !ok || dp.Topic != topic || dp.Err != nil {
			return
		}
		for _, pr := range dp.ActiveProducers {
			if pr.CurrentTxnStartOffset == at && pr.ProducerID == txn.ProducerID {
				stops[dp.Partition] = at
				s.log.Info("state replay leaves out the open transaction of the link's last session; the next InitProducerId aborts it",
					"transactional_id", txnID, "producer_id", txn.ProducerID, "partition", dp.Partition, "offset", at)
			}
		}
	})
	return stops
}

// ReplayCommitted is Replay for the decisions about link that come before
// its session's InitProducerId (whether another agent holds it): an open
// transaction of the link's own transactional.id is not waited for
// (openOwn), so the view holds the link's committed state whole, and other
// links' records only up to where such a transaction began.
func (s *Store) ReplayCommitted(ctx context.Context, link string) (*View, error) {
	return s.replay(ctx, TransactionalID(link))
}

// Replay reads the whole state topic (see Scan) into a View. A record of an
// unknown type or version is logged at WARN and skipped; a record that does
// not decode stops the replay with an error that names its partition and
// offset and wraps ErrCorrupt.
func (s *Store) Replay(ctx context.Context) (*View, error) {
	return s.replay(ctx, "")
}

func (s *Store) replay(ctx context.Context, txnID string) (*View, error) {
	v := NewView()
	err := s.scan(ctx, txnID, func(raw RawRecord) error {
		rec, err := Decode(raw.Key, raw.Value)
		switch {
		case errors.Is(err, ErrUnknownRecord):
			s.log.Warn("skipping state record written by a newer agent", "partition", raw.Partition, "offset", raw.Offset, "error", err)
			v.Skipped++
			s.skipped.Add(1)
			return nil
		case err != nil:
			return fmt.Errorf("replay state topic %q: partition %d offset %d: %w", s.cfg.Topic, raw.Partition, raw.Offset, err)
		}
		rec.Partition, rec.Offset = raw.Partition, raw.Offset
		v.Records = append(v.Records, rec)
		v.Apply(rec)
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.log.Debug("replayed state topic", "records", len(v.Records), "skipped", v.Skipped)
	return v, nil
}

// ReadView replays a state topic once, for readers that are not a link
// session (verification, operators' tools, tests): a Store is made on the
// cluster reached with opts, replayed and closed.
func ReadView(ctx context.Context, topic string, opts []kgo.Opt) (*View, error) {
	s, err := New(Config{Topic: topic}, Deps{ClientOpts: opts})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.Replay(ctx)
}
