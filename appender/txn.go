package appender

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	backoffpkg "github.com/seed83556561/mirrord/internal/backoff"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
)

// Transactional delivery (DESIGN §14): a session is a transactional
// producer at the destination, on the link's transactional.id. Its
// InitProducerId bumps the producer epoch: the coordinator aborts what the
// previous session left open, and every broker refuses the previous epoch
// from then on (a Produce with INVALID_PRODUCER_EPOCH or PRODUCER_FENCED,
// an EndTxn with PRODUCER_FENCED). The session stamps each forwarded batch
// with its producer ID, epoch and the partition's next sequence
// (transform.Stamp), so the broker also checks the order of the batches
// and recognises a retry of a batch it already appended (it keeps the last
// five batches of a producer per partition and answers a duplicate with
// the first append's offset: ProducerStateEntry.findDuplicateBatch in
// Apache Kafka's storage module). What a session appends becomes visible
// to read_committed consumers only when its transaction commits, together
// with the checkpoint records committed in the same transaction.
//
// Two versions of the transaction protocol are in use:
//   - transaction.version 1 (Kafka 3.x, and 4.x clusters that did not
//     finalize version 2): the producer adds each partition to the
//     transaction with AddPartitionsToTxn (v3 and below, the clients'
//     versions) before it produces to it; EndTxn (v4 and below) keeps the
//     epoch, and sequences run on across transactions.
//   - transaction.version 2 (KIP-890 part 2; Kafka 4.0+ with the feature
//     finalized, the default of a fresh 4.x cluster): Produce v12+ adds
//     the partition to the transaction itself, and EndTxn v5+ bumps the
//     epoch at every commit or abort and answers with it, so sequences
//     start again at 0 in each transaction and a Produce that outlived its
//     transaction is refused by epoch.
//
// A session picks the version once (TxnVersionOf) and its clients keep to
// it (TxnClientOpts): a version 1 session must not send the version 2
// requests, which a 4.x broker accepts whatever the finalized feature.

// TxnVersion is the transaction protocol a session's transactions run.
type TxnVersion int8

// The transaction protocol versions.
const (
	TxnV1 TxnVersion = 1
	TxnV2 TxnVersion = 2
)

func (v TxnVersion) String() string { return fmt.Sprintf("transaction.version %d", v) }

// Errors of a transactional producer. Compare with errors.Is.
var (
	// ErrTxnFenced: a newer producer of the transactional.id (the next
	// session) bumped the epoch, or the coordinator aborted the
	// transaction when it outlived transaction_timeout, which bumps the
	// epoch too. The transaction's appends will never be visible; the
	// producer may not write again.
	ErrTxnFenced = errors.New("transactional producer fenced")
	// ErrTxnAborted: the transaction cannot commit (the broker answered
	// TRANSACTION_ABORTABLE, or an append failed for good); the caller
	// aborts it and resumes at its last committed checkpoint.
	ErrTxnAborted = errors.New("transaction must be aborted")
	// ErrTxnTimedOut: the transaction has been open longer than
	// transaction_timeout while its appends or its EndTxn kept getting
	// answers that would otherwise be retried (a destination that stalls,
	// loses leaders or cannot reach min.insync.replicas). The coordinator
	// aborts such a transaction and bumps the epoch, so retrying in it is
	// futile: the producer ends, and the session resumes at its last
	// committed checkpoint under a new InitProducerId. It wraps
	// ErrTxnAborted, never ErrTxnFenced: no newer session took over.
	ErrTxnTimedOut = errors.New("transaction outlived transaction_timeout")
)

// TxnVersionOf asks the destination which transaction protocol a new
// session's transactions run: version 2 when the cluster finalized
// transaction.version 2 or higher and the broker offers Produce v12 and
// EndTxn v5, version 1 otherwise.
func TxnVersionOf(ctx context.Context, cl *kgo.Client) (TxnVersion, error) {
	req := kmsg.NewPtrApiVersionsRequest()
	req.ClientSoftwareName, req.ClientSoftwareVersion = "mirrord", "1"
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, fmt.Errorf("ask the destination for its API versions: %w", err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return 0, fmt.Errorf("ask the destination for its API versions: %w", err)
	}
	vs := kversion.FromApiVersionsResponse(resp)
	produce, _ := vs.LookupMaxKeyVersion(int16(kmsg.Produce))
	endTxn, _ := vs.LookupMaxKeyVersion(int16(kmsg.EndTxn))
	level := int16(0)
	vs.EachFinalizedFeature(func(name string, l int16) {
		if name == "transaction.version" {
			level = l
		}
	})
	if level >= 2 && produce >= 12 && endTxn >= 5 {
		return TxnV2, nil
	}
	return TxnV1, nil
}

// TxnClientOpts are the kgo options a session's destination clients need
// for v: under version 1 they cap Produce at v11, EndTxn at v4 and
// AddPartitionsToTxn at v3, the last versions without KIP-890 part 2.
func TxnClientOpts(v TxnVersion) []kgo.Opt {
	gate := kgo.WithHooks(newSendGate())
	if v == TxnV2 {
		return []kgo.Opt{gate}
	}
	vs := kversion.Stable()
	vs.SetMaxKeyVersion(int16(kmsg.Produce), 11)
	vs.SetMaxKeyVersion(int16(kmsg.EndTxn), 4)
	vs.SetMaxKeyVersion(int16(kmsg.AddPartitionsToTxn), 3)
	return []kgo.Opt{gate, kgo.MaxVersions(vs)}
}

// TxnConfig configures a transactional producer.
type TxnConfig struct {
	// TransactionalID is the session's transactional.id.
	TransactionalID string
	// Timeout is the transaction timeout the coordinator enforces: a
	// transaction open longer is aborted (and the producer fenced).
	// Default 60s; the broker caps it at transaction.max.timeout.ms.
	Timeout time.Duration
	// Version is the transaction protocol (TxnVersionOf).
	Version TxnVersion
	// RetryBackoff is the first wait before a coordinator request is
	// repeated after a retriable answer. Default 100ms.
	RetryBackoff time.Duration
	// Now is the clock a transaction's age is measured with. Default
	// time.Now.
	Now func() time.Time
	// Metrics receive the appends' metrics (append latency, Produce
	// requests, errors by kind), labelled Link, like the preserve-mode
	// appender's. Default: unregistered.
	Metrics *Metrics
	Link    string
}

// DefaultTxnTimeout is TxnConfig.Timeout's default.
const DefaultTxnTimeout = 60 * time.Second

// Txn is one session's transactional producer: the coordinator's half of
// the protocol (InitProducerId, AddPartitionsToTxn, EndTxn) and the
// partitions' sequences. Its methods are safe for concurrent use; Begin,
// Add and End are for the one goroutine that runs the session's
// transactions; Reserve, AppendReserved and Abandon may be called by the
// appending goroutines.
type Txn struct {
	cfg TxnConfig
	cl  *kgo.Client
	log hclog.Logger
	m   linkMetrics
	// gate orders the Produce requests per broker (nil: unordered).
	gate *sendGate
	// lanes share Produce requests among partitions (txnlane.go).
	lanes lanes

	mu    sync.Mutex
	id    int64
	epoch int16
	// seq is each partition's next base sequence under (id, epoch).
	seq map[tp.Key]int32
	// inflight is each partition's reservations not yet settled, in the
	// order they were made; broken marks the partitions of the current
	// transaction with a reservation settled unappended.
	inflight map[tp.Key][]*Reservation
	broken   map[tp.Key]bool
	// added is the current transaction's partitions (version 1: those
	// AddPartitionsToTxn added; version 2: those the session produced to).
	added map[tp.Key]bool
	// began is when the current transaction got its first partition
	// (zero: none open); the coordinator's transaction timeout runs from
	// about then (it starts at the first AddPartitionsToTxn, or the first
	// Produce under version 2, which come later).
	began time.Time
	// err is set once the producer is fenced: every later call returns it.
	err error
	// adding is set while a caller of Add sends AddPartitionsToTxn;
	// addNext collects what other callers ask for meanwhile.
	adding  bool
	addNext *addBatch
	// addRequests counts AddPartitionsToTxn requests.
	addRequests atomic.Int64
	// outOfOrder counts batches sent again because they overtook an
	// earlier batch of their partition.
	outOfOrder atomic.Int64
}

// OpenTxn begins a session's transactional producer with InitProducerId,
// which fences every earlier producer of cfg.TransactionalID and aborts the
// transaction it left open. It retries what a coordinator answers while it
// loads or while it completes the previous transaction, until ctx ends.
func OpenTxn(ctx context.Context, cl *kgo.Client, cfg TxnConfig, log hclog.Logger) (*Txn, error) {
	if cfg.TransactionalID == "" {
		return nil, errors.New("transactional producer: no transactional.id")
	}
	if cfg.Version != TxnV1 && cfg.Version != TxnV2 {
		return nil, fmt.Errorf("transactional producer %s: unknown transaction protocol version %d", cfg.TransactionalID, cfg.Version)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTxnTimeout
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = DefaultRetryBackoff
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	t := &Txn{cfg: cfg, cl: cl, log: log, gate: gateOf(cl), m: cfg.Metrics.forLink(cfg.Link), seq: make(map[tp.Key]int32), added: make(map[tp.Key]bool),
		inflight: make(map[tp.Key][]*Reservation), broken: make(map[tp.Key]bool)}
	err := t.retry(ctx, "InitProducerId", func() (int16, error) {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.TransactionalID = &cfg.TransactionalID
		req.TransactionTimeoutMillis = int32(min(cfg.Timeout.Milliseconds(), math.MaxInt32))
		req.ProducerID, req.ProducerEpoch = -1, -1
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return 0, err
		}
		if resp.ErrorCode == 0 {
			t.id, t.epoch = resp.ProducerID, resp.ProducerEpoch
		}
		return resp.ErrorCode, nil
	})
	if err != nil {
		return nil, err
	}
	log.Info("began transactional producer", "transactional_id", cfg.TransactionalID,
		"producer_id", t.id, "epoch", t.epoch, "protocol", cfg.Version.String())
	return t, nil
}

// Producer returns the producer ID and epoch the current transaction's
// batches carry.
func (t *Txn) Producer() (int64, int16) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.id, t.epoch
}

// Version is the transaction protocol the producer runs.
func (t *Txn) Version() TxnVersion { return t.cfg.Version }

// Err is the error that ended the producer, nil while it may write.
func (t *Txn) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// Stamp is what one batch carries: the producer and its base sequence.
type Stamp struct {
	ProducerID int64
	Epoch      int16
	Sequence   int32
}

// Reservation is one batch's place in its partition's chain of sequences:
// the stamp it carries, and, once it is settled, whether it was appended.
type Reservation struct {
	Stamp
	p    tp.Key
	done chan struct{}
	ok   bool // set before done closes
	// issued is closed once the batch's first request holds its
	// broker's gate (or the reservation is settled): the partition's
	// next batch is sent only after it.
	issued     chan struct{}
	issuedOnce sync.Once
}

func (r *Reservation) markIssued() { r.issuedOnce.Do(func() { close(r.issued) }) }

// Reserve reserves the sequences of a batch of offsets records (its
// LastOffsetDelta+1) for partition p, after those reserved before. The
// order of the reservations is the order the broker appends the batches
// in, whatever order their requests arrive in. The batch must be appended
// with AppendReserved, or the reservation given up with Abandon and the
// transaction aborted: a sequence reserved and never appended makes the
// partition's next batch out of order.
func (t *Txn) Reserve(p tp.Key, offsets int32) (*Reservation, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return nil, t.err
	}
	r := &Reservation{Stamp: Stamp{ProducerID: t.id, Epoch: t.epoch, Sequence: t.seq[p]}, p: p, done: make(chan struct{}), issued: make(chan struct{})}
	t.seq[p] = nextSequence(r.Sequence, offsets)
	t.inflight[p] = append(t.inflight[p], r)
	return r, nil
}

// Split divides reservation r, whose batch was not sent, into reservations
// of consecutive parts of its sequences, counts[i] offsets each (summing to
// what r reserved), in r's place in the partition's order: a run of
// batches reserved as one, to be joined into one batch, that is sent as
// its batches one by one after all (the joined batch came out too large).
// r itself is then no longer to be used.
func (t *Txn) Split(r *Reservation, counts []int32) ([]*Reservation, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return nil, t.err
	}
	rs := t.inflight[r.p]
	i := slices.Index(rs, r)
	select {
	case <-r.issued:
		i = -1
	default:
	}
	if i < 0 {
		return nil, fmt.Errorf("%s[%d]: %w: split a reservation that was sent or settled", r.p.Topic, r.p.Partition, ErrInvalidBatch)
	}
	parts := make([]*Reservation, len(counts))
	seq := r.Sequence
	for j, n := range counts {
		parts[j] = &Reservation{Stamp: Stamp{ProducerID: r.ProducerID, Epoch: r.Epoch, Sequence: seq}, p: r.p, done: make(chan struct{}), issued: make(chan struct{})}
		seq = nextSequence(seq, n)
	}
	end := t.seq[r.p] // where the reservation after r begins
	if i+1 < len(rs) {
		end = rs[i+1].Sequence
	}
	if seq != end {
		return nil, fmt.Errorf("%s[%d]: %w: the parts' sequences end at %d, the reservation's at %d", r.p.Topic, r.p.Partition, ErrInvalidBatch, seq, end)
	}
	t.inflight[r.p] = slices.Insert(slices.Delete(rs, i, i+1), i, parts...)
	// An append of a later reservation may already wait for r (issued,
	// done): it wakes, finds r replaced by the parts, and waits for
	// them instead (previous and before are read again). r counts as
	// neither appended nor given up: the partition is not broken.
	r.markIssued()
	close(r.done)
	return parts, nil
}

// Abandon settles a reservation whose batch was not sent (the
// transaction must abort): the partition's later batches then fail
// instead of waiting for it.
func (t *Txn) Abandon(r *Reservation) { t.settle(r, false) }

// settle ends a reservation: appended (ok) or given up.
func (t *Txn) settle(r *Reservation, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	select {
	case <-r.done:
		return
	default:
	}
	rs := t.inflight[r.p]
	if i := slices.Index(rs, r); i >= 0 {
		rs = slices.Delete(rs, i, i+1)
	}
	if len(rs) == 0 {
		delete(t.inflight, r.p)
	} else {
		t.inflight[r.p] = rs
	}
	r.ok = ok
	r.markIssued()
	if !ok {
		t.broken[r.p] = true
	}
	close(r.done)
}

// awaitEarlier waits until every reservation of r's partition made before
// r is settled, and fails if one of them, or any earlier one of the
// transaction, was not appended: r's sequence then follows a gap.
func (t *Txn) awaitEarlier(ctx context.Context, r *Reservation) error {
	for {
		prev := t.before(r)
		if prev == nil {
			break
		}
		select {
		case <-prev.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.broken[r.p] {
		return errors.New("an earlier batch of the partition was not appended")
	}
	return nil
}

// previous is the reservation of r's partition made just before r and not
// yet settled, or nil.
func (t *Txn) previous(r *Reservation) *Reservation {
	t.mu.Lock()
	defer t.mu.Unlock()
	rs := t.inflight[r.p]
	if i := slices.Index(rs, r); i > 0 {
		return rs[i-1]
	}
	return nil
}

// before is the oldest reservation of r's partition made before r and
// not yet settled, or nil.
func (t *Txn) before(r *Reservation) *Reservation {
	t.mu.Lock()
	defer t.mu.Unlock()
	if rs := t.inflight[r.p]; len(rs) > 0 && rs[0] != r {
		return rs[0]
	}
	return nil
}

// nextSequence is the sequence after a batch of n offsets from seq,
// wrapping from MaxInt32 to 0 as Kafka's DefaultRecordBatch.incrementSequence
// does.
func nextSequence(seq, n int32) int32 {
	if seq > math.MaxInt32-n {
		return n - (math.MaxInt32 - seq) - 1
	}
	return seq + n
}

// Add puts partitions into the current transaction before anything is
// appended to them: AddPartitionsToTxn for those not yet in it under
// version 1; under version 2 the Produce adds its partition, and Add only
// notes it. The state topic's partition is added like any other.
//
// Under version 1 every AddPartitionsToTxn is a write to the coordinator's
// transaction log, so concurrent calls (one per partition's append) are
// coalesced: while one request is in flight, the partitions other calls
// ask for wait and go together in the next one, which the caller whose
// request finished sends on their behalf. A transaction that touches a
// thousand partitions takes a few requests, not a thousand.
func (t *Txn) Add(ctx context.Context, parts []tp.Key) error {
	t.mu.Lock()
	if t.err != nil {
		t.mu.Unlock()
		return t.err
	}
	var missing []tp.Key
	for _, p := range parts {
		if !t.added[p] {
			missing = append(missing, p)
		}
	}
	if len(t.added) == 0 && len(missing) > 0 && t.began.IsZero() {
		t.began = t.cfg.Now()
	}
	if t.cfg.Version == TxnV2 {
		for _, p := range missing {
			t.added[p] = true
		}
		missing = nil
	}
	if len(missing) == 0 {
		t.mu.Unlock()
		return nil
	}
	if t.adding {
		// A request is in flight: join the next one, which its sender
		// sends when it returns.
		b := t.addNext
		if b == nil {
			b = &addBatch{parts: map[tp.Key]bool{}, done: make(chan struct{})}
			t.addNext = b
		}
		for _, p := range missing {
			b.parts[p] = true
		}
		t.mu.Unlock()
		select {
		case <-b.done:
			return b.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	t.adding = true
	b := &addBatch{parts: map[tp.Key]bool{}, done: make(chan struct{})}
	for _, p := range missing {
		b.parts[p] = true
	}
	own := b
	for {
		id, epoch := t.id, t.epoch
		t.mu.Unlock()
		b.err = t.addPartitions(ctx, id, epoch, b.parts)
		t.mu.Lock()
		if b.err == nil {
			for p := range b.parts {
				t.added[p] = true
			}
		}
		close(b.done)
		if t.addNext == nil {
			t.adding = false
			t.mu.Unlock()
			return own.err
		}
		b, t.addNext = t.addNext, nil
	}
}

// addBatch is one coalesced AddPartitionsToTxn: the partitions it adds,
// and its outcome once done is closed.
type addBatch struct {
	parts map[tp.Key]bool
	done  chan struct{}
	err   error
}

// addPartitions sends one AddPartitionsToTxn for parts (version 1),
// retried as coordinator requests are.
func (t *Txn) addPartitions(ctx context.Context, id int64, epoch int16, parts map[tp.Key]bool) error {
	sorted := make([]tp.Key, 0, len(parts))
	for p := range parts {
		sorted = append(sorted, p)
	}
	sort.Slice(sorted, func(i, j int) bool {
		if sorted[i].Topic != sorted[j].Topic {
			return sorted[i].Topic < sorted[j].Topic
		}
		return sorted[i].Partition < sorted[j].Partition
	})
	return t.retry(ctx, "AddPartitionsToTxn", func() (int16, error) {
		t.addRequests.Add(1)
		req := kmsg.NewPtrAddPartitionsToTxnRequest()
		req.TransactionalID, req.ProducerID, req.ProducerEpoch = t.cfg.TransactionalID, id, epoch
		for _, p := range sorted {
			if n := len(req.Topics); n == 0 || req.Topics[n-1].Topic != p.Topic {
				rt := kmsg.NewAddPartitionsToTxnRequestTopic()
				rt.Topic = p.Topic
				req.Topics = append(req.Topics, rt)
			}
			req.Topics[len(req.Topics)-1].Partitions = append(req.Topics[len(req.Topics)-1].Partitions, p.Partition)
		}
		resp, err := req.RequestWith(ctx, t.cl)
		if err != nil {
			return 0, err
		}
		// The first error that is not OPERATION_NOT_ATTEMPTED (which the
		// coordinator answers for the partitions it did not try because
		// another one failed) says what went wrong.
		var code int16
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				if rp.ErrorCode != 0 && (code == 0 || code == kerr.OperationNotAttempted.Code) {
					code = rp.ErrorCode
					if code == kerr.TopicAuthorizationFailed.Code {
						return code, fmt.Errorf("topic %s: %w", rt.Topic, kerr.ErrorForCode(code))
					}
				}
			}
		}
		return code, nil
	})
}

// Overtaken counts the batches sent again because they reached the broker
// before an earlier batch of their partition that was still in flight.
func (t *Txn) Overtaken() int64 { return t.outOfOrder.Load() }

// AddRequests counts the AddPartitionsToTxn requests sent (attempts
// included), for tests and diagnostics.
func (t *Txn) AddRequests() int64 { return t.addRequests.Load() }

// Open reports whether the current transaction holds any partition.
func (t *Txn) Open() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.added) > 0
}

// End commits or aborts the current transaction. A transaction with no
// partition is not sent (version 1 refuses an empty EndTxn). Under version
// 2 the coordinator answers with the next epoch, which the next
// transaction's batches carry from sequence 0. A fenced producer returns
// ErrTxnFenced, and a commit the coordinator refuses because the
// transaction must abort returns ErrTxnAborted (abort it then).
func (t *Txn) End(ctx context.Context, commit bool) error {
	t.mu.Lock()
	if t.err != nil {
		t.mu.Unlock()
		return t.err
	}
	if len(t.added) == 0 {
		t.mu.Unlock()
		return nil
	}
	id, epoch := t.id, t.epoch
	t.mu.Unlock()
	var newID int64
	var newEpoch int16
	op := "EndTxn(abort)"
	if commit {
		op = "EndTxn(commit)"
	}
	err := t.retry(ctx, op, func() (int16, error) {
		req := kmsg.NewPtrEndTxnRequest()
		req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = t.cfg.TransactionalID, id, epoch, commit
		resp, err := req.RequestWith(ctx, t.cl)
		if err != nil {
			return 0, err
		}
		if resp.ErrorCode == 0 && resp.Version >= 5 {
			newID, newEpoch = resp.ProducerID, resp.ProducerEpoch
		}
		return resp.ErrorCode, nil
	})
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	clear(t.added)
	clear(t.broken)
	t.began = time.Time{}
	if t.cfg.Version == TxnV2 && newEpoch != 0 {
		if newID != t.id || newEpoch != t.epoch {
			clear(t.seq)
		}
		t.id, t.epoch = newID, newEpoch
	}
	return nil
}

// retry runs one coordinator request until it succeeds, fails for good or
// ctx ends. fn returns the answer's error code, or a transport error.
func (t *Txn) retry(ctx context.Context, op string, fn func() (int16, error)) error {
	policy := backoffpkg.Policy{First: t.cfg.RetryBackoff, Max: MaxRetryBackoff}
	for attempt := 0; ; attempt++ {
		code, err := fn()
		if err == nil && code == 0 {
			return nil
		}
		if err == nil {
			err = kerr.ErrorForCode(code)
		}
		switch {
		case code == kerr.ProducerFenced.Code, code == kerr.InvalidProducerEpoch.Code,
			code == kerr.InvalidProducerIDMapping.Code:
			return t.fence(op, err)
		case code == kerr.TransactionAbortable.Code:
			return fmt.Errorf("%s of transactional.id %s: %w: %w", op, t.cfg.TransactionalID, ErrTxnAborted, err)
		case code == kerr.ConcurrentTransactions.Code, code == kerr.CoordinatorLoadInProgress.Code,
			code == kerr.NotCoordinator.Code, code == kerr.CoordinatorNotAvailable.Code,
			code == kerr.OperationNotAttempted.Code, code == kerr.RequestTimedOut.Code,
			code == 0 && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded):
			// The coordinator is loading, moving, or still writing the
			// previous transaction's markers; or the request or its answer
			// was lost (coordinator requests are idempotent for the same
			// producer ID and epoch: a repeated EndTxn of a completed
			// transaction is answered as it was).
			if op != "InitProducerId" {
				if terr := t.timedOut(op, err); terr != nil {
					return terr
				}
			}
			if attempt > 0 && attempt%20 == 0 {
				t.log.Warn("transaction coordinator keeps answering with a retriable error", "op", op,
					"transactional_id", t.cfg.TransactionalID, "attempts", attempt, "error", err)
			}
			if err := backoffpkg.Sleep(ctx, policy.Wait(attempt)); err != nil {
				return fmt.Errorf("%s of transactional.id %s: %w (last answer: %w)", op, t.cfg.TransactionalID, err, kerr.ErrorForCode(code))
			}
		default:
			return fmt.Errorf("%s of transactional.id %s: %w", op, t.cfg.TransactionalID, err)
		}
	}
}

// timedOut ends the producer with ErrTxnTimedOut, and returns that error,
// when the current transaction has been open for transaction_timeout or
// longer; last is the retriable answer op just got. Otherwise it returns
// nil and the caller may retry.
func (t *Txn) timedOut(op string, last error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return t.err
	}
	if t.began.IsZero() {
		return nil
	}
	age := t.cfg.Now().Sub(t.began)
	if age < t.cfg.Timeout {
		return nil
	}
	t.err = fmt.Errorf("%s of transactional.id %s, producer %d epoch %d: %w: %w: the transaction has been open for %v, and transaction_timeout is %v: the coordinator aborts it, so the session gives it up and resumes at its last committed checkpoint with a new producer epoch (last answer: %w)",
		op, t.cfg.TransactionalID, t.id, t.epoch, ErrTxnAborted, ErrTxnTimedOut, age.Round(time.Millisecond), t.cfg.Timeout, last)
	return t.err
}

// fence records that the producer is fenced and returns the error. A
// fencing answer to a transaction older than transaction_timeout is the
// coordinator's abort, not a newer session's: it ends the producer with
// ErrTxnTimedOut instead.
func (t *Txn) fence(op string, cause error) error {
	t.mu.Lock()
	if t.err == nil && !t.began.IsZero() && t.cfg.Now().Sub(t.began) >= t.cfg.Timeout {
		t.mu.Unlock()
		return t.timedOut(op, cause)
	}
	defer t.mu.Unlock()
	if t.err == nil {
		t.err = fmt.Errorf("%s of transactional.id %s, producer %d epoch %d: %w: a newer session of the link took the transactional.id, or the coordinator aborted the transaction after transaction_timeout (%v): %w",
			op, t.cfg.TransactionalID, t.id, t.epoch, ErrTxnFenced, t.cfg.Timeout, cause)
	}
	return t.err
}
