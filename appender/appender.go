package appender

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	backoffpkg "github.com/seed83556561/mirrord/internal/backoff"
	"github.com/seed83556561/mirrord/internal/kafka/leaders"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/internal/mailbox"
	"github.com/seed83556561/mirrord/transform"
)

// Defaults of Config.
const (
	DefaultRequestTimeout       = 30 * time.Second
	DefaultMaxRequestBytes      = 16 << 20
	DefaultMaxRequestBatches    = 256
	DefaultMaxInflightPerBroker = 4
	DefaultRetryBackoff         = 100 * time.Millisecond

	// MaxRetryBackoff caps the exponential backoff between attempts.
	MaxRetryBackoff = 5 * time.Second
	// warnInterval: a partition whose batch keeps waiting is logged at
	// WARN at most once per interval.
	warnInterval = 30 * time.Second
)

// Errors of Submit, and of Result.Err. Compare with errors.Is; the errors
// themselves name the partition, the broker and the broker's error code.
var (
	// ErrBusy: Submit for a partition that already has a batch in the
	// appender (pending or in flight, until its Result is delivered).
	ErrBusy = errors.New("partition already has a batch in the appender")
	// ErrClosed: Submit after Run has returned, or Run called twice.
	ErrClosed = errors.New("appender is closed")
	// ErrInvalidBatch: Submit of a batch that is not ready for a
	// destination broker (not exactly one v2 batch, base offset not 0,
	// transactional or control bit set, producer ID not negative). The
	// caller's rewrite is wrong; nothing was sent.
	ErrInvalidBatch = errors.New("batch is not ready for the destination")

	// ErrUnknownOutcome: the broker may or may not have appended the batch
	// (REQUEST_TIMED_OUT, NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS_AFTER_APPEND,
	// KAFKA_STORAGE_ERROR, UNKNOWN_SERVER_ERROR, a lost connection, a
	// canceled request...). The broker does not deduplicate destination
	// batches (their producer ID is negative), so the caller must settle
	// the partition by reconciliation (DESIGN §6) before it submits
	// anything for it again.
	ErrUnknownOutcome = errors.New("outcome of the append is unknown")
	// ErrCorrupt: CORRUPT_MESSAGE, the destination broker's check of the
	// batch (its CRC) failed; nothing was appended. The caller refetches
	// the batch from the source.
	ErrCorrupt = errors.New("destination broker refused the batch as corrupt")
	// ErrTooLarge: MESSAGE_TOO_LARGE or RECORD_LIST_TOO_LARGE; nothing was
	// appended and sending again cannot help: fatal for the partition.
	// The message names the destination topic's max.message.bytes.
	ErrTooLarge = errors.New("batch is too large for the destination topic")
	// ErrLeaseExpired: the session's lease (Deps.Lease) had ended, or had
	// too little left for the produce timeout, right before the send; the
	// batch was not sent.
	ErrLeaseExpired = errors.New("session lease expired, batch not sent")
	// ErrFatal: any other refusal that proves nothing was appended and
	// that sending again cannot cure (authorization, INVALID_RECORD,
	// INVALID_TIMESTAMP, a recreated destination topic...). The error
	// wraps the kerr error too.
	ErrFatal = errors.New("destination refused the batch")
	// ErrStopped: Run's context ended before the batch was sent, or while
	// it waited to be sent again after an answer that proved it was not
	// appended. Nothing was appended.
	ErrStopped = errors.New("appender stopped before the batch was appended")
)

// Config of one link's appender. Zero values take the defaults.
type Config struct {
	// Link names the link in metric labels and logs.
	Link string
	// RequestTimeout is the Produce request's TimeoutMillis: how long the
	// leader waits for the in-sync replicas. Default 30s.
	RequestTimeout time.Duration
	// MaxRequestBytes bounds a Produce request's size (estimated from its
	// batches and framing). A request always carries at least one batch,
	// so a batch larger than this goes alone. Default 16 MiB; at most the
	// client's BrokerMaxWriteBytes.
	MaxRequestBytes int32
	// MaxRequestBatches bounds the batches (partitions) of a Produce
	// request. A broker appends a request's batches one after another and
	// serves one request per connection at a time, and its time per batch
	// hardly depends on the batch's size: 16 MiB of 1 KiB batches took a
	// broker here longer than kgo waits for an answer (the requests behind
	// it on the connection timed out, their outcomes unknown). Default 256.
	MaxRequestBatches int
	// MaxInflightPerBroker bounds the Produce requests in flight to one
	// broker. A partition is in at most one request regardless. Default 4.
	MaxInflightPerBroker int
	// RetryBackoff is the first wait before a batch is sent again after an
	// answer that proved it was not appended, or before a leader lookup is
	// repeated. It doubles with every attempt, up to MaxRetryBackoff.
	// Default 100ms.
	RetryBackoff time.Duration
}

// validate fills the defaults and reports every problem at once.
func (c *Config) validate() error {
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if c.MaxRequestBatches == 0 {
		c.MaxRequestBatches = DefaultMaxRequestBatches
	}
	if c.MaxInflightPerBroker == 0 {
		c.MaxInflightPerBroker = DefaultMaxInflightPerBroker
	}
	if c.RetryBackoff == 0 {
		c.RetryBackoff = DefaultRetryBackoff
	}
	var errs []error
	if c.RequestTimeout < time.Millisecond || c.RequestTimeout > math.MaxInt32*time.Millisecond {
		errs = append(errs, fmt.Errorf("RequestTimeout: %v is out of range; use 1ms to %v", c.RequestTimeout, math.MaxInt32*time.Millisecond))
	}
	if c.MaxRequestBytes < 1<<10 {
		errs = append(errs, fmt.Errorf("MaxRequestBytes: %d is too small; use at least 1024", c.MaxRequestBytes))
	}
	if c.MaxRequestBatches < 1 {
		errs = append(errs, fmt.Errorf("MaxRequestBatches: %d; use 1 or more", c.MaxRequestBatches))
	}
	if c.MaxInflightPerBroker < 1 {
		errs = append(errs, fmt.Errorf("MaxInflightPerBroker: %d; use 1 or more", c.MaxInflightPerBroker))
	}
	if c.RetryBackoff < 0 || c.RetryBackoff > MaxRetryBackoff {
		errs = append(errs, fmt.Errorf("RetryBackoff: %v is out of range; use up to %v", c.RetryBackoff, MaxRetryBackoff))
	}
	return errors.Join(errs...)
}

// Deps are the appender's collaborators.
type Deps struct {
	// Client reaches the destination cluster. It must keep kgo's default
	// RequiredAcks(AllISRAcks()): kgo sets every raw ProduceRequest's Acks
	// to the client's, and New refuses any other. Required.
	Client *kgo.Client
	// Leaders caches the destination cluster's partition leaders; the
	// appender invalidates an entry when a broker's answer says it is
	// wrong. Required.
	Leaders *leaders.Cache
	// Logger gets the appender's logs. Default: discard.
	Logger hclog.Logger
	// Metrics receives the appender's metrics. Default: unregistered.
	Metrics *Metrics
	// Lease returns when the session's lease ends (DESIGN §7), and false if
	// the session may not append at all. It is asked immediately before
	// every Produce request is built: the request goes out only with a
	// context whose deadline is that instant, so kgo never writes it to a
	// connection after the lease ended (kgo checks the context just before
	// the write; I4), and with a produce timeout that ends before it. It
	// is called from the sender goroutines, concurrently. Required.
	Lease func() (time.Time, bool)
	// Now is the clock of Result.Latency and of the WARN rate limit.
	// Default time.Now. Backoff waits run on real timers.
	Now func() time.Time
}

// Request is one batch for one destination partition.
type Request struct {
	// Partition is the destination partition. ID is the destination topic
	// ID; if it is zero, the ID the destination's metadata reports is used.
	// If it is not zero and the metadata reports another, the topic was
	// recreated and the batch fails with ErrFatal.
	Partition tp.Partition
	// Batch is one record batch as transform.Rewrite leaves it. The
	// appender only reads it, until the batch's Result is delivered.
	Batch []byte
	// Tag is the caller's, returned in the Result.
	Tag uint64
}

// Result is the outcome of one submitted batch.
type Result struct {
	Partition tp.Partition
	Tag       uint64
	// BaseOffset is the destination offset of the batch's first record;
	// valid when Err is nil.
	BaseOffset int64
	// Latency is the time from Submit to the result.
	Latency time.Duration
	// Err is nil when the batch was appended (acks=all), or wraps one of
	// ErrUnknownOutcome, ErrCorrupt, ErrTooLarge, ErrLeaseExpired,
	// ErrFatal, ErrStopped.
	Err error
	// For ErrUnknownOutcome: Answered is true when a broker answered the
	// request (with an error code that leaves the append possible), so
	// that the request is no longer in any broker; false when no answer
	// came (a lost connection, a canceled read), so that the request may
	// still be inside a broker until Sent plus ProduceTimeout (the
	// request's TimeoutMillis, DelayedProduce's bound) and whatever it
	// waited in the broker's queue before that.
	Answered       bool
	Sent           time.Time
	ProduceTimeout time.Duration
	// Leader is the leader the request was sent to (broker and leader
	// epoch, as the leader cache had them), for ErrUnknownOutcome: once
	// another broker leads the partition under a newer epoch, a request
	// the old leader may still hold can no longer reach the partition's
	// log (see link's settle).
	Leader leaders.Leader
}

// Appender appends batches to destination partition leaders. Build it with
// New, run it with Run.
type Appender struct {
	cfg  Config
	deps Deps
	log  hclog.Logger
	m    linkMetrics

	// submitted carries accepted batches to Run, results carries Run's
	// results to the caller: both hold at most one entry per destination
	// partition, since a partition has at most one batch in the appender
	// from Submit until its result is taken (busy).
	submitted *mailbox.Box[*batch]
	results   *mailbox.Box[Result]
	stopped   chan struct{} // closed when Run returns

	mu    sync.Mutex
	state int                 // stateNew, stateRunning, stateStopped
	busy  map[tp.Key]struct{} // partitions with a batch in the appender

	// leaderReuse is how long Run uses a leader a lookup found before it
	// asks Deps.Leaders again (knownLeaderAge; tests set 0 to always ask).
	leaderReuse time.Duration
}

const (
	stateNew = iota
	stateRunning
	stateStopped
)

// New validates cfg and deps and returns an Appender. It does no I/O and
// starts nothing.
func New(cfg Config, deps Deps) (*Appender, error) {
	var errs []error
	if err := cfg.validate(); err != nil {
		errs = append(errs, err)
	}
	if deps.Client == nil {
		errs = append(errs, errors.New("Deps.Client is nil"))
	} else {
		if err := checkAcks(deps.Client); err != nil {
			errs = append(errs, err)
		}
		if v := deps.Client.OptValues(kgo.BrokerMaxWriteBytes); len(v) == 1 {
			if limit, ok := v[0].(int32); ok && cfg.MaxRequestBytes > limit {
				errs = append(errs, fmt.Errorf("MaxRequestBytes: %d is more than the client's BrokerMaxWriteBytes %d", cfg.MaxRequestBytes, limit))
			}
		}
	}
	if deps.Leaders == nil {
		errs = append(errs, errors.New("Deps.Leaders is nil"))
	}
	if deps.Lease == nil {
		errs = append(errs, errors.New("Deps.Lease is nil; it must report when the session's lease ends"))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("appender for link %q: %w", cfg.Link, errors.Join(errs...))
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
	return &Appender{
		cfg:       cfg,
		deps:      deps,
		log:       deps.Logger.Named("appender").With("link", cfg.Link),
		m:         deps.Metrics.forLink(cfg.Link),
		submitted: mailbox.New[*batch](),
		results:   mailbox.New[Result](),
		stopped:   make(chan struct{}),
		busy:      make(map[tp.Key]struct{}),

		leaderReuse: knownLeaderAge,
	}, nil
}

// checkAcks refuses a client whose produce acks are not all-ISR: kgo would
// send every raw ProduceRequest with those acks.
func checkAcks(cl *kgo.Client) error {
	v := cl.OptValues(kgo.RequiredAcks)
	if len(v) != 1 {
		return errors.New("Deps.Client: cannot read its RequiredAcks option")
	}
	acks, ok := v[0].(kgo.Acks)
	if !ok {
		return fmt.Errorf("Deps.Client: its RequiredAcks option is a %T, not kgo.Acks", v[0])
	}
	switch acks {
	case kgo.AllISRAcks():
		return nil
	case kgo.LeaderAck():
		return errors.New("Deps.Client uses RequiredAcks(LeaderAck()); the appender needs kgo's default AllISRAcks (acks=all), since kgo sends raw Produce requests with the client's acks")
	case kgo.NoAck():
		return errors.New("Deps.Client uses RequiredAcks(NoAck()); the appender needs kgo's default AllISRAcks (acks=all), since kgo sends raw Produce requests with the client's acks")
	default:
		return fmt.Errorf("Deps.Client uses RequiredAcks %v; the appender needs kgo's default AllISRAcks (acks=all)", acks)
	}
}

// batch is a submitted batch and its state, owned by Run's goroutine (or by
// the one resolver or sender goroutine Run handed it to).
type batch struct {
	req Request
	key tp.Key
	at  time.Time // Submit, on Deps.Now

	attempts int       // answers that proved the batch was not appended
	due      time.Time // end of the current backoff, on the monotonic clock

	leader    leaders.Leader // from the last lookup
	lookupErr error
	topicID   [16]byte // what the request names the topic by
}

// Submit hands a batch to the appender. It does not block. It fails with
// ErrBusy if the partition already has a batch in the appender (until its
// result is delivered), ErrClosed after Run returned, and ErrInvalidBatch if
// the batch is not ready for a destination broker. Submit may be called
// before Run; the batch waits for it.
func (a *Appender) Submit(r Request) error {
	if err := checkBatch(r); err != nil {
		return err
	}
	b := &batch{req: r, key: r.Partition.Key(), at: a.deps.Now()}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.state == stateStopped {
		return fmt.Errorf("%s: %w", r.Partition, ErrClosed)
	}
	if _, ok := a.busy[b.key]; ok {
		return fmt.Errorf("%s: %w", r.Partition, ErrBusy)
	}
	a.busy[b.key] = struct{}{}
	a.submitted.Put(b)
	return nil
}

// checkBatch checks what a destination broker needs of a client batch and
// the rewrite must have done; it reads the header only.
func checkBatch(r Request) error {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%s: %w: %s", r.Partition, ErrInvalidBatch, fmt.Sprintf(format, args...))
	}
	if r.Partition.Topic == "" || r.Partition.Partition < 0 {
		return invalid("no destination topic or a negative partition")
	}
	h, err := transform.ParseHeader(r.Batch)
	if err != nil {
		return fmt.Errorf("%s: %w: %w", r.Partition, ErrInvalidBatch, err)
	}
	switch {
	case int64(h.Length) != int64(len(r.Batch))-12:
		return invalid("length field is %d but %d bytes follow it: the request must hold exactly one batch", h.Length, len(r.Batch)-12)
	case h.BaseOffset != 0:
		return invalid("base offset is %d; brokers require 0 (transform.Rewrite sets it)", h.BaseOffset)
	case h.Control():
		return invalid("control batch; control batches are consumed, never forwarded")
	case h.Transactional():
		return invalid("transactional bit set; transform.Rewrite clears it")
	case h.ProducerID >= 0:
		return invalid("producer ID %d is not negative; a broker would apply idempotence to it (mapped producer IDs are negative)", h.ProducerID)
	}
	return nil
}

// Results holds the results, one per accepted batch, for the caller to
// Take when it Wakes. A partition's result is in it before the partition may
// be submitted again; by the time Stopped is closed every result is in it.
func (a *Appender) Results() *mailbox.Box[Result] { return a.results }

// Stopped is closed when Run has returned, after the last result.
func (a *Appender) Stopped() <-chan struct{} { return a.stopped }

// Run appends submitted batches until ctx ends. It returns nil after every
// goroutine it started has exited, every accepted batch's Result has been
// delivered and Results is closed: batches in flight when ctx ended are
// ErrUnknownOutcome unless their answer came first, batches not sent are
// ErrStopped. Run may be called once.
func (a *Appender) Run(ctx context.Context) error {
	a.mu.Lock()
	if a.state != stateNew {
		a.mu.Unlock()
		return fmt.Errorf("appender for link %q: Run called twice: %w", a.cfg.Link, ErrClosed)
	}
	a.state = stateRunning
	a.mu.Unlock()

	r := &runner{
		a:        a,
		ctx:      ctx,
		resolved: make(chan []*batch, 1),
		sent:     make(chan sendResult),
		brokers:  make(map[int32]*brokerQueue),
		known:    make(map[tp.Key]knownLeader),
		lastWarn: make(map[tp.Key]time.Time),
		timer:    time.NewTimer(time.Hour),
	}
	r.timer.Stop()
	r.loop()
	r.shutdown()
	return nil
}

// runner is Run's state; only Run's goroutine touches it.
type runner struct {
	a   *Appender
	ctx context.Context
	wg  sync.WaitGroup // resolver and sender goroutines

	needLeader []*batch
	resolving  bool          // a resolver goroutine owns some batches
	resolved   chan []*batch // resolver → Run; capacity 1, one resolver at a time

	backoff []*batch // waiting for their due time
	timer   *time.Timer

	brokers  map[int32]*brokerQueue
	inflight int             // Produce requests in flight, all brokers
	sent     chan sendResult // sender → Run

	// known holds the leader each partition's last lookup found, for
	// at most knownLeaderAge: a partition's next batch, submitted right
	// after its previous one was answered, goes straight to that leader's
	// queue instead of through the resolver goroutine. That hop split the
	// burst of batches a link submits after one answer over several
	// requests (the resolver takes what waits when it starts, the rest
	// waits for its next round), and cost a goroutine round trip per
	// batch. Every invalidation of a partition's leader drops its entry.
	known map[tp.Key]knownLeader

	lastWarn map[tp.Key]time.Time
}

// knownLeader is a leader a lookup found, and when.
type knownLeader struct {
	leader leaders.Leader
	at     time.Time // monotonic
}

// knownLeaderAge bounds how long the appender uses a leader a lookup found
// without asking leaders.Cache again: far below the cache's own refresh age
// (30s by default), so that it adds at most this much to how stale a leader
// can be; a stale one is answered NOT_LEADER_OR_FOLLOWER as before.
const knownLeaderAge = time.Second

// brokerQueue holds the batches ready to go to one broker.
type brokerQueue struct {
	ready    []*batch
	inflight int
}

// sendResult is a sender goroutine's report: an outcome per batch.
type sendResult struct {
	node     int32
	batches  []*batch
	outcomes []outcome
}

func (r *runner) loop() {
	for {
		if r.ctx.Err() != nil {
			return
		}
		r.dispatch()
		select {
		case <-r.ctx.Done():
			return
		case <-r.a.submitted.Wake():
			r.takeSubmitted()
		case bs := <-r.resolved:
			r.resolving = false
			r.handleResolved(bs)
		case s := <-r.sent:
			r.handleSent(s)
		case <-r.timer.C:
			r.fireBackoff()
		}
	}
}

func (r *runner) takeSubmitted() {
	now := time.Now()
	for _, b := range r.a.submitted.Take() {
		if k, ok := r.known[b.key]; ok && now.Sub(k.at) < r.a.leaderReuse {
			b.leader = k.leader
			r.route(b)
			continue
		}
		r.needLeader = append(r.needLeader, b)
	}
}

// invalidate drops what the appender and the shared cache know of key's
// leader.
func (r *runner) invalidate(key tp.Key) {
	delete(r.known, key)
	r.a.deps.Leaders.Invalidate(key)
}

// dispatch starts a resolver for the batches that need a leader, if none
// runs, and a sender for every broker that has ready batches and room for
// another request.
func (r *runner) dispatch() {
	if !r.resolving && len(r.needLeader) > 0 {
		bs := r.needLeader
		r.needLeader = nil
		r.resolving = true
		r.wg.Add(1)
		go r.resolve(bs)
	}
	for node, q := range r.brokers {
		for len(q.ready) > 0 && q.inflight < r.a.cfg.MaxInflightPerBroker {
			bs := r.cut(q)
			q.inflight++
			r.inflight++
			r.wg.Add(1)
			go r.send(node, bs)
		}
		if len(q.ready) == 0 && q.inflight == 0 {
			delete(r.brokers, node)
		}
	}
}

// Framing of a Produce request around its batches, for the size estimate:
// the request header and fields, each topic's name, ID and array length,
// each partition's index and records length.
const (
	requestOverhead   = 64
	topicOverhead     = 2 + 16 + 4
	partitionOverhead = 4 + 4
)

// cut takes the batches of the next request off q: in queue order, as many
// as fit in MaxRequestBytes and MaxRequestBatches, at least one. A queue
// never holds two batches of one partition, so neither does the request.
func (r *runner) cut(q *brokerQueue) []*batch {
	size := requestOverhead
	topics := make(map[string]bool)
	n := 0
	for ; n < len(q.ready) && n < r.a.cfg.MaxRequestBatches; n++ {
		b := q.ready[n]
		add := partitionOverhead + len(b.req.Batch)
		if !topics[b.key.Topic] {
			add += topicOverhead + len(b.key.Topic)
		}
		if n > 0 && size+add > int(r.a.cfg.MaxRequestBytes) {
			break
		}
		size += add
		topics[b.key.Topic] = true
	}
	bs := slices.Clone(q.ready[:n])
	q.ready = slices.Delete(q.ready, 0, n)
	return bs
}

// resolve looks up the leaders of bs; it runs on its own goroutine, since a
// lookup that misses the cache is a Metadata request.
func (r *runner) resolve(bs []*batch) {
	defer r.wg.Done()
	for _, b := range bs {
		b.leader, b.lookupErr = r.a.deps.Leaders.Lookup(r.ctx, b.key)
	}
	r.resolved <- bs
}

func (r *runner) handleResolved(bs []*batch) {
	now := time.Now()
	for _, b := range bs {
		err := b.lookupErr
		b.lookupErr = nil
		switch {
		case err == nil:
			r.known[b.key] = knownLeader{leader: b.leader, at: now}
			r.route(b)
		case r.ctx.Err() != nil:
			r.needLeader = append(r.needLeader, b) // shutdown reports it
		case permanent(err):
			r.deliver(b, Result{Err: fmt.Errorf("%s: %w: leader lookup: %w", b.req.Partition, ErrFatal, err)}, KindFatal)
		default:
			// No leader (an election), an unknown partition (a topic being
			// created), a failed Metadata request: drop what the cache
			// holds (meta caches a missing leader too), wait, look again.
			r.invalidate(b.key)
			r.a.m.errors[KindRetriable].Inc()
			r.retryLater(b, fmt.Errorf("leader lookup: %w", err))
		}
	}
}

// route queues b for its leader (b.leader), after checking that the leader
// leads the topic the batch is for.
func (r *runner) route(b *batch) {
	// The topic ID the batch is for: the Request's, or the one an
	// earlier attempt was sent with.
	id := b.req.Partition.ID
	if id == ([16]byte{}) {
		id = b.topicID
	}
	if id != ([16]byte{}) && b.leader.ID != ([16]byte{}) && id != b.leader.ID {
		r.deliver(b, Result{Err: fmt.Errorf("%s: %w: the destination topic's ID is now %x, the batch is for topic ID %x: the topic was deleted and recreated",
			b.req.Partition, ErrFatal, b.leader.ID, id)}, KindFatal)
		return
	}
	if id == ([16]byte{}) {
		id = b.leader.ID
	}
	b.topicID = id
	q := r.brokers[b.leader.Broker]
	if q == nil {
		q = &brokerQueue{}
		r.brokers[b.leader.Broker] = q
	}
	q.ready = append(q.ready, b)
}

// permanent reports a lookup error that waiting cannot cure: a Kafka error
// that Kafka itself calls non-retriable, such as TOPIC_AUTHORIZATION_FAILED.
func permanent(err error) bool {
	var ke *kerr.Error
	return errors.As(err, &ke) && !ke.Retriable
}

// send runs one Produce request on its own goroutine and reports the
// outcomes to Run.
func (r *runner) send(node int32, bs []*batch) {
	defer r.wg.Done()
	r.sent <- sendResult{node: node, batches: bs, outcomes: r.a.produce(r.ctx, node, bs)}
}

func (r *runner) handleSent(s sendResult) {
	if q := r.brokers[s.node]; q != nil {
		q.inflight--
	}
	r.inflight--
	for i, b := range s.batches {
		o := s.outcomes[i]
		if o.invalidate {
			r.invalidate(b.key)
		}
		switch o.verdict {
		case verdictAppended:
			r.deliver(b, Result{BaseOffset: o.baseOffset}, "")
		case verdictRetry:
			r.a.m.errors[o.kind].Inc()
			if r.ctx.Err() != nil {
				r.needLeader = append(r.needLeader, b) // shutdown reports it
				continue
			}
			r.retryLater(b, o.err)
		default:
			r.deliver(b, Result{Err: o.err, Answered: o.answered, Sent: o.sent, ProduceTimeout: o.timeout, Leader: b.leader}, o.kind)
		}
	}
}

// retryLater puts b into backoff after an answer that proved it was not
// appended, or a failed lookup.
func (r *runner) retryLater(b *batch, reason error) {
	b.attempts++
	d := backoff(r.a.cfg.RetryBackoff, b.attempts)
	b.due = time.Now().Add(d)
	r.backoff = append(r.backoff, b)
	r.armTimer()

	now := r.a.deps.Now()
	if last, ok := r.lastWarn[b.key]; ok && now.Sub(last) < warnInterval {
		r.a.log.Debug("batch waits to be sent again", "partition", b.req.Partition.String(), "attempts", b.attempts, "backoff", d, "reason", reason)
		return
	}
	r.lastWarn[b.key] = now
	r.a.log.Warn("batch waits to be sent again; nothing was appended", "partition", b.req.Partition.String(), "attempts", b.attempts, "backoff", d, "reason", reason)
}

// backoff is first·2^(attempt-1), capped at MaxRetryBackoff.
func backoff(first time.Duration, attempt int) time.Duration {
	return backoffpkg.Policy{First: first, Max: MaxRetryBackoff}.Wait(attempt)
}

func (r *runner) armTimer() {
	if len(r.backoff) == 0 {
		r.timer.Stop()
		return
	}
	due := r.backoff[0].due
	for _, b := range r.backoff[1:] {
		if b.due.Before(due) {
			due = b.due
		}
	}
	r.timer.Reset(time.Until(due))
}

func (r *runner) fireBackoff() {
	now := time.Now()
	r.backoff = slices.DeleteFunc(r.backoff, func(b *batch) bool {
		if b.due.After(now) {
			return false
		}
		r.needLeader = append(r.needLeader, b)
		return true
	})
	r.armTimer()
}

// deliver reports b's result and frees its partition. It never blocks.
func (r *runner) deliver(b *batch, res Result, kind string) {
	a := r.a
	now := a.deps.Now()
	res.Partition = b.req.Partition
	res.Tag = b.req.Tag
	res.Latency = now.Sub(b.at)
	if res.Err == nil {
		a.m.latency.Observe(res.Latency.Seconds())
	} else {
		a.m.errors[kind].Inc()
	}
	if last, ok := r.lastWarn[b.key]; ok && now.Sub(last) >= warnInterval {
		delete(r.lastWarn, b.key)
	}

	// Free the partition before the caller can see the result, so that a
	// Submit for it right after taking the result is not refused.
	a.mu.Lock()
	delete(a.busy, b.key)
	a.mu.Unlock()
	a.results.Put(res)
}

// shutdown runs after ctx ended: it lets every goroutine finish, reports
// every batch, and closes Results.
func (r *runner) shutdown() {
	a := r.a
	a.mu.Lock()
	a.state = stateStopped
	a.mu.Unlock()
	r.needLeader = append(r.needLeader, a.submitted.Take()...)

	if r.resolving {
		r.needLeader = append(r.needLeader, <-r.resolved...)
		r.resolving = false
	}
	for r.inflight > 0 {
		r.handleSent(<-r.sent)
	}
	r.wg.Wait()
	r.timer.Stop()

	stop := func(bs []*batch) {
		for _, b := range bs {
			r.deliver(b, Result{Err: fmt.Errorf("%s: %w", b.req.Partition, ErrStopped)}, KindStopped)
		}
	}
	stop(r.needLeader)
	stop(r.backoff)
	for _, q := range r.brokers {
		stop(q.ready)
	}
	r.needLeader, r.backoff, r.brokers = nil, nil, nil
	close(a.stopped)
}

// produce sends one Produce request for bs to broker node and classifies
// every batch's answer. It runs on a sender goroutine.
func (a *Appender) produce(ctx context.Context, node int32, bs []*batch) []outcome {
	outs := make([]outcome, len(bs))
	all := func(o func(b *batch) outcome) []outcome {
		for i, b := range bs {
			outs[i] = o(b)
		}
		return outs
	}
	if ctx.Err() != nil {
		return all(func(b *batch) outcome {
			return outcome{verdict: verdictFinal, kind: KindStopped, err: fmt.Errorf("%s: %w", b.req.Partition, ErrStopped)}
		})
	}

	// The lease travels with the request (I4): its context ends when the
	// lease does, and kgo checks the context right before it writes, so
	// a request held up in kgo (a dial, a SASL handshake, a throttle, a
	// queue) is never written after the lease ended. The broker's own wait
	// for the in-sync replicas ends well before that, so that the answer,
	// not the context, ends a slow request.
	deadline, ok := a.deps.Lease()
	left := time.Duration(0)
	if ok {
		left = deadline.Sub(a.deps.Now())
	}
	if left < minLeaseLeft {
		return all(func(b *batch) outcome {
			return outcome{verdict: verdictFinal, kind: KindLeaseExpired,
				err: fmt.Errorf("%s: %w: the produce request to broker %d was not sent (lease left: %v)", b.req.Partition, ErrLeaseExpired, node, max(left, 0))}
		})
	}
	timeout := min(a.cfg.RequestTimeout, left*3/4)
	req := a.buildRequest(bs, timeout)
	ctx, cancel := context.WithTimeout(ctx, left)
	defer cancel()
	a.m.requests.Inc()
	a.m.batches.Observe(float64(len(bs)))
	sent := a.deps.Now()
	stamp := func(o outcome) outcome { o.sent, o.timeout = sent, timeout; return o }
	kresp, err := a.deps.Client.Broker(int(node)).Request(ctx, req)
	if err != nil {
		return all(func(b *batch) outcome { return stamp(classifyTransport(b.req.Partition, node, err, ctx)) })
	}
	resp, ok := kresp.(*kmsg.ProduceResponse)
	if !ok {
		err := fmt.Errorf("kgo returned a %T for a produce request", kresp)
		return all(func(b *batch) outcome { return stamp(classifyTransport(b.req.Partition, node, err, ctx)) })
	}

	// Produce v13 answers by topic ID only, older versions by name only.
	index := make(map[tp.Key]int, len(bs))
	names := make(map[[16]byte]string)
	for i, b := range bs {
		index[b.key] = i
		if b.topicID != ([16]byte{}) {
			names[b.topicID] = b.key.Topic
		}
	}
	answered := make([]bool, len(bs))
	for _, rt := range resp.Topics {
		name := rt.Topic
		if name == "" {
			name = names[rt.TopicID]
		}
		for _, rp := range rt.Partitions {
			i, ok := index[tp.Key{Topic: name, Partition: rp.Partition}]
			if !ok || answered[i] {
				a.log.Debug("produce response names a partition that was not sent, or twice", "broker", node, "topic", name, "topic_id", fmt.Sprintf("%x", rt.TopicID), "partition", rp.Partition)
				continue
			}
			answered[i] = true
			b := bs[i]
			outs[i] = stamp(classifyCode(b.req.Partition, node, rp.ErrorCode, rp.ErrorMessage, len(b.req.Batch)))
			outs[i].answered = true
			outs[i].baseOffset = rp.BaseOffset
		}
	}
	for i, b := range bs {
		if !answered[i] {
			// The broker answered the request, just not for this
			// partition: the request is out of the broker.
			outs[i] = stamp(outcome{verdict: verdictFinal, kind: KindUnknownOutcome, answered: true,
				err: fmt.Errorf("%s on broker %d: %w: the produce response does not mention the partition", b.req.Partition, node, ErrUnknownOutcome)})
		}
	}
	return outs
}

// minLeaseLeft is the least lease a Produce request is sent with.
const minLeaseLeft = 100 * time.Millisecond

// buildRequest builds the Produce request for bs: acks=all (kgo sets the
// client's acks, which New checked), the produce timeout given, no
// transactional ID, each topic by name and ID, one batch per partition.
func (a *Appender) buildRequest(bs []*batch, timeout time.Duration) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TimeoutMillis = int32(max(timeout/time.Millisecond, 1))
	req.TransactionID = nil // not transactional: the batches are plain
	type topicKey struct {
		name string
		id   [16]byte
	}
	at := make(map[topicKey]int)
	for _, b := range bs {
		k := topicKey{b.key.Topic, b.topicID}
		i, ok := at[k]
		if !ok {
			rt := kmsg.NewProduceRequestTopic()
			rt.Topic = b.key.Topic
			rt.TopicID = b.topicID
			req.Topics = append(req.Topics, rt)
			i = len(req.Topics) - 1
			at[k] = i
		}
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition = b.key.Partition
		rp.Records = b.req.Batch
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
	}
	return req
}
