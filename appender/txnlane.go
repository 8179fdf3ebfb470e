package appender

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/internal/kafka/tp"
)

// Produce requests shared by partitions.
//
// A transactional producer's appends to partitions that one broker leads
// go out together: one Produce request carries a batch of each of several
// partitions, as the preserve-mode appender's requests do (run.go) and as
// Kafka's producer sends a broker whatever its accumulator holds for the
// broker's partitions. A broker's cost is per request as well as per
// batch (it parses, authorizes and answers each request, and under
// transaction.version 2 checks each partition's transaction), and at a
// thousand partitions with one batch per request the destination broker
// spent three times the CPU per GB of a kgo producer's.
//
// Each broker has a lane. At most DefaultMaxInflightPerBroker of its
// requests are unanswered at once; appends that come meanwhile collect in
// the lane's next request, which goes out as soon as one is answered. The
// append that finds no request collecting opens one and sends it (its
// sender: it waits for a free place, takes the broker's gate, sends the
// request and hands every append its answer); the others wait for the
// answer. A request holds at most one batch of a partition (a broker
// refuses more: "Produce requests with version 3 and above are only allowed
// to contain exactly one record batch" per partition), at most
// DefaultMaxRequestBatches batches and about DefaultMaxRequestBytes bytes
// (a larger batch goes alone): an append that does not fit waits for the
// next request. No goroutine runs beyond the appending ones.

// laneRequest is one Produce request of a lane: collecting appends until
// its sender takes it, then in flight until answered.
type laneRequest struct {
	appends []*laneAppend
	parts   map[tp.Key]bool
	bytes   int
	// taken is closed when the sender takes the request: it collects
	// nothing more.
	taken chan struct{}
	// done is closed once every append's answer (or err) is set.
	done chan struct{}
	// err is the whole request's failure: not sent, or no answer.
	err error
}

// laneAppend is one batch in a lane's request, and its answer.
type laneAppend struct {
	p       tp.Partition
	topicID [16]byte
	batch   []byte
	r       *Reservation
	timeout time.Duration
	counted bool
	ans     kmsg.ProduceResponseTopicPartition
	found   bool // ans is the broker's answer for p
}

// lane is one broker's Produce requests.
type lane struct {
	// places holds a token per request in flight.
	places chan struct{}
	next   *laneRequest
	// sent counts the appends in requests taken and not yet answered.
	sent int
}

// lanes are the producer's lanes by broker.
type lanes struct {
	mu sync.Mutex
	m  map[int32]*lane
}

// laneOf is broker's lane; the caller holds l.mu.
func (l *lanes) laneOf(broker int32) *lane {
	ln, ok := l.m[broker]
	if !ok {
		if l.m == nil {
			l.m = make(map[int32]*lane)
		}
		ln = &lane{places: make(chan struct{}, DefaultMaxInflightPerBroker)}
		l.m[broker] = ln
	}
	return ln
}

// fits reports whether a batch of n bytes of p may join req.
func (req *laneRequest) fits(p tp.Key, n int) bool {
	if req.parts[p] || len(req.appends) >= DefaultMaxRequestBatches {
		return false
	}
	return len(req.appends) == 0 || req.bytes+n <= DefaultMaxRequestBytes
}

// produceShared sends a's batch to broker in one of the broker's lane's
// requests and returns the broker's answer for a's partition, or the
// error that kept the request from being answered.
func (t *Txn) produceShared(ctx context.Context, broker int32, a *laneAppend) (kmsg.ProduceResponseTopicPartition, error) {
	req, sender, err := t.joinLane(ctx, broker, a)
	if err != nil {
		return kmsg.ProduceResponseTopicPartition{}, err
	}
	if sender {
		t.sendLane(ctx, broker, req)
	}
	select {
	case <-req.done:
	case <-ctx.Done():
		t.leaveLane(broker, req, a)
		return kmsg.ProduceResponseTopicPartition{}, ctx.Err()
	}
	if req.err != nil {
		return kmsg.ProduceResponseTopicPartition{}, req.err
	}
	if !a.found {
		return kmsg.ProduceResponseTopicPartition{}, fmt.Errorf("broker %d answered the produce request with no answer for the partition", broker)
	}
	return a.ans, nil
}

// joinLane puts a into broker's collecting request, opening one (and
// becoming its sender) if there is none; while a does not fit the
// collecting request it waits for that one to be taken.
func (t *Txn) joinLane(ctx context.Context, broker int32, a *laneAppend) (*laneRequest, bool, error) {
	for {
		t.lanes.mu.Lock()
		ln := t.lanes.laneOf(broker)
		req := ln.next
		if req != nil && !req.fits(a.p.Key(), len(a.batch)) {
			t.lanes.mu.Unlock()
			select {
			case <-req.taken:
				continue
			case <-ctx.Done():
				return nil, false, ctx.Err()
			}
		}
		sender := req == nil
		if sender {
			req = &laneRequest{parts: make(map[tp.Key]bool), taken: make(chan struct{}), done: make(chan struct{})}
			ln.next = req
		}
		req.appends = append(req.appends, a)
		req.parts[a.p.Key()] = true
		req.bytes += len(a.batch)
		t.lanes.mu.Unlock()
		return req, sender, nil
	}
}

// leaveLane takes a, whose append ended, out of req if req was not taken
// yet: its batch is then never sent.
func (t *Txn) leaveLane(broker int32, req *laneRequest, a *laneAppend) {
	t.lanes.mu.Lock()
	defer t.lanes.mu.Unlock()
	if t.lanes.m[broker].next != req {
		return
	}
	for i, b := range req.appends {
		if b == a {
			req.appends = append(req.appends[:i], req.appends[i+1:]...)
			delete(req.parts, a.p.Key())
			req.bytes -= len(a.batch)
			return
		}
	}
}

// take ends req's collecting; the caller holds t.lanes.mu.
func (t *Txn) take(broker int32, req *laneRequest) {
	if ln := t.lanes.m[broker]; ln.next == req {
		ln.next = nil
		close(req.taken)
	}
}

// sendLane is the sender's part: it waits for a place among broker's
// requests in flight and for the broker's gate, takes req, sends it and
// sets every append's answer. It fails req if ctx ends first.
func (t *Txn) sendLane(ctx context.Context, broker int32, req *laneRequest) {
	defer close(req.done)
	fail := func(err error) {
		t.lanes.mu.Lock()
		t.take(broker, req)
		t.lanes.mu.Unlock()
		req.err = fmt.Errorf("produce to broker %d: not sent: %w", broker, err)
	}
	t.lanes.mu.Lock()
	places := t.lanes.m[broker].places
	t.lanes.mu.Unlock()
	select {
	case places <- struct{}{}:
		defer func() { <-places }()
	case <-ctx.Done():
		fail(ctx.Err())
		return
	}
	if t.gate != nil {
		release, err := t.gate.acquire(ctx, broker)
		if err != nil {
			fail(err)
			return
		}
		defer release()
	}
	t.lanes.mu.Lock()
	t.take(broker, req)
	appends := req.appends
	t.lanes.m[broker].sent += len(appends)
	t.lanes.mu.Unlock()
	if len(appends) == 0 {
		return // every append left while it collected
	}
	defer func() {
		t.lanes.mu.Lock()
		t.lanes.m[broker].sent -= len(appends)
		t.lanes.mu.Unlock()
	}()

	pr := kmsg.NewPtrProduceRequest()
	pr.Acks = -1
	txid := t.cfg.TransactionalID
	pr.TransactionID = &txid
	var timeout time.Duration
	counted := 0
	topics := make(map[string]int)
	for _, a := range appends {
		timeout = max(timeout, a.timeout)
		if a.counted {
			counted++
		}
		i, ok := topics[a.p.Topic]
		if !ok {
			i = len(pr.Topics)
			topics[a.p.Topic] = i
			rt := kmsg.NewProduceRequestTopic()
			rt.Topic, rt.TopicID = a.p.Topic, a.topicID
			pr.Topics = append(pr.Topics, rt)
		}
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = a.p.Partition, a.batch
		pr.Topics[i].Partitions = append(pr.Topics[i].Partitions, rp)
		// The partition's next batch may now go, in a later request.
		a.r.markIssued()
	}
	pr.TimeoutMillis = int32(max(timeout/time.Millisecond, 1))
	if counted > 0 {
		// The mirrored batches: a commit's state batches that share the
		// request are not counted, as a request of only those is not.
		t.m.requests.Inc()
		t.m.batches.Observe(float64(counted))
	}
	kresp, err := t.cl.Broker(int(broker)).Request(ctx, pr)
	if err != nil {
		req.err = fmt.Errorf("produce to broker %d: %w", broker, err)
		return
	}
	resp, ok := kresp.(*kmsg.ProduceResponse)
	if !ok {
		req.err = fmt.Errorf("produce to broker %d: answered with %T", broker, kresp)
		return
	}
	// From Produce v13 the answer names its topics by ID only.
	byPart := make(map[tp.Key]*laneAppend, len(appends))
	names := make(map[[16]byte]string)
	for _, a := range appends {
		byPart[a.p.Key()] = a
		names[a.topicID] = a.p.Topic
	}
	for _, rt := range resp.Topics {
		topic := rt.Topic
		if topic == "" {
			topic = names[rt.TopicID]
		}
		for _, rp := range rt.Partitions {
			if a := byPart[tp.Key{Topic: topic, Partition: rp.Partition}]; a != nil {
				a.ans, a.found = rp, true
			}
		}
	}
}
