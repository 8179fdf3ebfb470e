package fetcher

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/seed83556561/mirrord/internal/kafka/access"
	"github.com/seed83556561/mirrord/internal/kafka/leaders"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/transform"
)

// pstate is where a partition is in its fetch cycle:
//
//	needLeader → resolving → ready (queued for a grant) → granted → inFlight
//	  → ready → ..., or → pending (maxQueued results wait for the consumer)
//	  → ready → ...
//
// with backoff after a retriable error and failed after a fatal one.
type pstate int

const (
	stNeedLeader pstate = iota
	stResolving
	stBackoff
	stReady
	stGranted
	stInFlight
	stPending
	stFailed
)

// cursor is the coordinator's fetch cursor of one assigned partition:
// where it fetches next, from which leader, and its state.
type cursor struct {
	p      tp.Partition
	gen    uint64
	offset int64 // next fetch offset
	state  pstate
	dead   bool // unassigned or replaced by a newer generation
	queued bool // in the wait queue
	leader leaders.Leader
	known  bool // leader is valid
	// maxBytes is the partition fetch limit that starvation grew it to,
	// 0 until then: the limit is then limit's share.
	maxBytes int32
	reserved int64 // budget reserved while granted
	queuedN  int   // results queued and not yet taken by the consumer
	attempts int   // consecutive failed attempts
	retryAt  time.Time
	// corruptAt is the offset at which a malformed batch was seen once,
	// -1 if none: a second failure there fails the partition.
	corruptAt int64
	// starved: the last fetch held no complete batch although data was
	// there; the partition goes first in its next request, where brokers
	// return at least one batch whatever its size (KIP-74).
	starved bool
	// reconciling: assigned with AssignReconciling: an offset below the
	// log start is passed and reported unjudged.
	reconciling bool
}

// coord is Run's state, owned by the goroutine that runs Run.
type coord struct {
	f   *Fetcher
	ctx context.Context
	wg  *sync.WaitGroup

	cursors map[tp.Key]*cursor
	waitq   []*cursor // ready partitions in grant order (FIFO); stale entries skipped
	granted []*cursor // granted partitions in grant order, waiting for their broker's loop
	pending []queued

	buffered int64 // bytes of the responses that delivered or queued results pin
	reserved int64 // bytes the requests granted or in flight may return
	// garbage is the bytes of responses that no result pins any more and
	// that a garbage collection may not have reclaimed yet: they are still
	// in the process's heap, so they count against the buffer until a
	// collection that began after they were let go has ended (reclaim).
	// waste holds them by release, oldest first.
	garbage   int64
	waste     []garbageRun
	seq       uint64      // of the last garbageRun
	collectCh chan uint64 // to the collector: the last garbageRun's seq; capacity 1
	doneCh    chan uint64 // from the collector: that seq, all collected up to it
	// collecting: a collection was asked for and has not reported.
	collecting bool

	loops    map[int32]*loop
	outcomes chan *outcome

	// pin is the pin of the response being applied (applyOutcome).
	pin *pinned

	resolveCh    chan []resolveReq
	resolvedCh   chan []resolved
	resolverBusy bool
	// loopsCheck says that stopIdleLoops should look at the loops again.
	loopsCheck bool

	timer *time.Timer
}

// garbageRun is garbage let go of while the process had completed cycle
// collections: the collection after the next one began after it, so it is
// reclaimed once cycle+2 have completed.
type garbageRun struct {
	seq, cycle uint64
	bytes      int64
}

type queued struct {
	r  Result
	pt *cursor
}

// loop is one broker's fetch loop as the coordinator sees it.
type loop struct {
	work chan *fetchReq // capacity 1; sent to only when idle
	busy bool
}

type resolveReq struct {
	key tp.Key
	gen uint64
}

type resolved struct {
	resolveReq
	leader leaders.Leader
	err    error
}

// Run fetches until ctx is done, then waits for every goroutine it started
// and returns nil. It runs once; a second call returns ErrRunning.
func (f *Fetcher) Run(ctx context.Context) error {
	if !f.ran.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer close(f.results)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	c := &coord{
		f:          f,
		ctx:        ctx,
		wg:         &wg,
		cursors:    make(map[tp.Key]*cursor),
		loops:      make(map[int32]*loop),
		outcomes:   make(chan *outcome),
		resolveCh:  make(chan []resolveReq, 1),
		resolvedCh: make(chan []resolved),
		collectCh:  make(chan uint64, 1),
		doneCh:     make(chan uint64),
		timer:      time.NewTimer(time.Hour),
	}
	defer c.timer.Stop()
	wg.Go(func() { f.resolver(ctx, c.resolveCh, c.resolvedCh) })
	wg.Go(func() { f.collector(ctx, c.collectCh, c.doneCh) })
	c.loop()
	return nil
}

func (c *coord) loop() {
	for {
		c.step()
		var (
			out  chan<- Result
			head Result
		)
		if len(c.pending) > 0 {
			out, head = c.f.results, c.pending[0].r
		}
		select {
		case <-c.ctx.Done():
			return
		case <-c.f.cmds.Wake():
			c.apply(c.f.cmds.Take())
		case o := <-c.outcomes:
			c.applyOutcome(o)
		case rs := <-c.resolvedCh:
			c.applyResolved(rs)
		case seq := <-c.doneCh:
			c.collecting = false
			c.reclaim(func(g garbageRun) bool { return g.seq <= seq })
		case out <- head:
			c.delivered()
		case <-c.timer.C:
		}
	}
}

// step moves partitions along: backoffs that ended, leader lookups, grants,
// requests to idle broker loops; stops idle loops that lead nothing; and arms
// the timer for the next backoff.
func (c *coord) step() {
	now := c.f.now()
	var next time.Time
	var lookups []resolveReq
	for key, pt := range c.cursors {
		if pt.state == stBackoff {
			if now.Before(pt.retryAt) {
				if next.IsZero() || pt.retryAt.Before(next) {
					next = pt.retryAt
				}
				continue
			}
			if pt.known {
				c.ready(pt)
			} else {
				pt.state = stNeedLeader
			}
		}
		if pt.state == stNeedLeader && !c.resolverBusy {
			pt.state = stResolving
			lookups = append(lookups, resolveReq{key: key, gen: pt.gen})
		}
	}
	if len(lookups) > 0 {
		c.resolverBusy = true
		c.resolveCh <- lookups // capacity 1 and the resolver is idle
	}
	c.grant()
	c.dispatch()
	c.stopIdleLoops()
	c.f.m.buffered.Set(float64(c.buffered))

	if !c.timer.Stop() {
		select {
		case <-c.timer.C:
		default:
		}
	}
	if !next.IsZero() {
		c.timer.Reset(next.Sub(now))
	}
}

// ready queues pt for a grant.
func (c *coord) ready(pt *cursor) {
	pt.state = stReady
	if !pt.queued {
		pt.queued = true
		c.waitq = append(c.waitq, pt)
	}
}

// grant reserves budget for ready partitions in FIFO order. The fair share
// rule: grants go strictly in the order partitions became ready; when the
// head does not fit, nobody behind it is granted, so a partition with a
// large fetch size is not overtaken forever by small ones, and a partition
// that just got data queues behind every partition that was waiting. A
// partition fits if the bytes delivered and not released, plus those
// released and not yet collected, plus those reserved by granted and
// in-flight fetches, plus its own maximum stay within MaxBufferedBytes, or
// if there are none of the three. When it does not fit, a collection is
// asked for (collect).
func (c *coord) grant() {
	if len(c.waste) > 0 {
		// What the process's own collections reclaimed since.
		n := c.f.gcCycles()
		c.reclaim(func(g garbageRun) bool { return g.cycle+2 <= n })
	}
	for len(c.waitq) > 0 {
		pt := c.waitq[0]
		if pt.dead || pt.state != stReady {
			pt.queued = false
			c.waitq = c.waitq[1:]
			continue
		}
		used := c.buffered + c.reserved + c.garbage
		lim := int64(c.limit(pt))
		if used > 0 && used+lim > c.f.cfg.MaxBufferedBytes {
			c.collect()
			return
		}
		pt.queued = false
		c.waitq = c.waitq[1:]
		pt.state = stGranted
		pt.reserved = lim
		c.reserved += pt.reserved
		c.granted = append(c.granted, pt)
	}
	if len(c.waitq) == 0 {
		c.waitq = nil // let the backing array go
	}
}

// collect asks the collector for a garbage collection when responses let
// go of are what keeps a grant from fitting, and none is under way. A
// response is one allocation of its whole size (kgo reads it so), and
// without this a thousand partitions' response arrived while the last one
// was still garbage: the heap held both and reached 148 MB with a 64 MiB
// buffer (bench, many-partitions; 112 MB with it).
func (c *coord) collect() {
	if c.collecting || len(c.waste) == 0 {
		return
	}
	c.collecting = true
	c.collectCh <- c.seq // capacity 1 and the collector is idle
}

// discard counts a response let go of as garbage.
func (c *coord) discard(bytes int64) {
	if bytes == 0 {
		return
	}
	c.seq++
	c.garbage += bytes
	cycle := c.f.gcCycles()
	if n := len(c.waste); n > 0 && c.waste[n-1].cycle == cycle {
		c.waste[n-1].seq = c.seq
		c.waste[n-1].bytes += bytes
		return
	}
	c.waste = append(c.waste, garbageRun{seq: c.seq, cycle: cycle, bytes: bytes})
}

// reclaim forgets the oldest garbage runs for which collected holds.
func (c *coord) reclaim(collected func(garbageRun) bool) {
	i := 0
	for ; i < len(c.waste) && collected(c.waste[i]); i++ {
		c.garbage -= c.waste[i].bytes
	}
	c.waste = c.waste[i:]
	if len(c.waste) == 0 {
		c.waste = nil // let the backing array go
	}
}

// MinPartitionShare is the smallest partition fetch limit the share of the
// buffer gives a partition (limit).
const MinPartitionShare = int32(64 << 10)

// limit is pt's partition fetch limit: the one starvation grew it to, or
// else PartitionMaxBytes, or an equal share of MaxBufferedBytes over the
// assigned partitions when that is smaller, but at least
// MinPartitionShare (and never above PartitionMaxBytes). A grant reserves
// the limit whole, so with PartitionMaxBytes alone 64 MiB would let only 64
// partitions be fetched at once; a thousand partitions, each with a little
// data, then waited for their turn while those 64 appended their batches
// one round trip at a time. With the share, all of them are fetched, and
// appended, at once; a partition whose next batch is above its share
// starves once and doubles its limit.
func (c *coord) limit(pt *cursor) int32 {
	if pt.maxBytes > 0 {
		return pt.maxBytes
	}
	lim := int64(c.f.cfg.PartitionMaxBytes)
	if n := int64(len(c.cursors)); n > 0 {
		lim = min(lim, max(c.f.cfg.MaxBufferedBytes/n, int64(MinPartitionShare)))
	}
	return int32(lim)
}

// dispatch sends one request to every idle broker loop with granted
// partitions, starting loops as needed.
func (c *coord) dispatch() {
	var byBroker map[int32][]*cursor
	keep := c.granted[:0]
	for _, pt := range c.granted {
		if pt.dead || pt.state != stGranted {
			continue
		}
		if l := c.loops[pt.leader.Broker]; l != nil && l.busy {
			keep = append(keep, pt)
			continue
		}
		if byBroker == nil {
			byBroker = make(map[int32][]*cursor)
		}
		byBroker[pt.leader.Broker] = append(byBroker[pt.leader.Broker], pt)
	}
	clear(c.granted[len(keep):])
	c.granted = keep
	for broker, pts := range byBroker {
		// Starved partitions first: brokers return a batch above the
		// partition limit only to the first partition with data.
		slices.SortStableFunc(pts, func(a, b *cursor) int {
			switch {
			case a.starved && !b.starved:
				return -1
			case b.starved && !a.starved:
				return 1
			}
			return 0
		})
		req := &fetchReq{broker: broker, items: make([]reqItem, len(pts))}
		for i, pt := range pts {
			req.items[i] = reqItem{
				p:        pt.p,
				gen:      pt.gen,
				offset:   pt.offset,
				maxBytes: int32(pt.reserved), // the limit granted
				epoch:    pt.leader.Epoch,
				reserved: pt.reserved,
			}
			pt.reserved = 0 // now carried by the request
			pt.state = stInFlight
		}
		l := c.loops[broker]
		if l == nil {
			l = &loop{work: make(chan *fetchReq, 1)}
			c.loops[broker] = l
			c.wg.Go(func() { c.f.brokerLoop(c.ctx, broker, l.work, c.outcomes) })
			c.f.log.Debug("started broker fetch loop", "broker", broker)
		}
		l.busy = true
		l.work <- req // capacity 1 and the loop is idle
	}
}

// stopIdleLoops ends the loops of brokers that lead no live partition. It
// looks only after an event that can leave a loop without work (loopsCheck:
// a fetch answered, a partition assigned, unassigned, failed or given a
// new leader), not after every step: with 1,000 partitions, scanning them
// all at every release of a result was a tenth of a link's CPU.
func (c *coord) stopIdleLoops() {
	if len(c.loops) == 0 || !c.loopsCheck {
		return
	}
	c.loopsCheck = false
	used := make(map[int32]bool, len(c.loops))
	for _, pt := range c.cursors {
		if pt.known && pt.state != stFailed {
			used[pt.leader.Broker] = true
		}
	}
	for broker, l := range c.loops {
		if !l.busy && !used[broker] {
			close(l.work)
			delete(c.loops, broker)
			c.f.log.Debug("stopped broker fetch loop", "broker", broker)
		}
	}
}

// apply runs the commands of Assign, Unassign and Release.
func (c *coord) apply(cmds []command) {
	for _, cmd := range cmds {
		switch cmd.kind {
		case cmdAssign:
			c.loopsCheck = true
			c.drop(cmd.p.Key())
			c.cursors[cmd.p.Key()] = &cursor{
				p:           cmd.p,
				gen:         cmd.gen,
				offset:      cmd.offset,
				state:       stNeedLeader,
				corruptAt:   -1,
				reconciling: cmd.reconciling,
			}
			c.f.log.Debug("assigned partition", "partition", cmd.p.String(), "offset", cmd.offset, "gen", cmd.gen)
		case cmdUnassign:
			c.loopsCheck = true
			c.drop(cmd.p.Key())
			delete(c.cursors, cmd.p.Key())
			c.f.log.Debug("unassigned partition", "partition", cmd.p.String())
		case cmdRelease:
			c.unpin(cmd.pin)
		}
	}
}

// unpin gives back one result's hold on its response.
func (c *coord) unpin(p Pin) {
	if p.p == nil {
		return
	}
	if p.p.refs <= 0 {
		c.f.log.Error("a fetch response was released more often than results pinned it; the buffer bound no longer holds", "bytes", p.p.bytes)
		return
	}
	p.p.refs--
	if p.p.refs == 0 {
		c.buffered -= p.p.bytes
		c.discard(p.p.bytes)
	}
}

// drop retires the current generation of a partition: its grant is
// returned and its queued results are dropped, their pins released. A fetch
// in flight returns its reservation when it completes.
func (c *coord) drop(key tp.Key) {
	pt := c.cursors[key]
	if pt == nil {
		return
	}
	pt.dead = true
	c.reserved -= pt.reserved
	pt.reserved = 0
	c.pending = slices.DeleteFunc(c.pending, func(q queued) bool {
		if q.pt == pt {
			c.unpin(q.r.Pin)
			return true
		}
		return false
	})
}

// delivered: the consumer took the head result.
func (c *coord) delivered() {
	q := c.pending[0]
	c.pending[0] = queued{}
	c.pending = c.pending[1:]
	if len(c.pending) == 0 {
		c.pending = nil
	}
	pt := q.pt
	pt.queuedN--
	if !pt.dead && pt.state == stPending {
		c.ready(pt)
	}
}

// maxQueued is how many results of one partition may wait for the consumer.
// Two lets a partition fetch ahead while its last result is handed over, so
// that its next fetch goes out with the response that brought that result
// rather than after the broker's next long poll; zero-byte results (only
// control or aborted batches) stay bounded by the number of partitions.
const maxQueued = 2

// deliver queues a result of pt and fetches ahead if pt may.
func (c *coord) deliver(pt *cursor, r Result) {
	r.Partition, r.Gen = pt.p, pt.gen
	c.pending = append(c.pending, queued{r: r, pt: pt})
	pt.queuedN++
	switch {
	case r.Err != nil:
		pt.state, c.loopsCheck = stFailed, true
	case pt.queuedN < maxQueued:
		c.ready(pt)
	default:
		pt.state = stPending
	}
}

// fail ends pt with err.
func (c *coord) fail(pt *cursor, kind string, err error) {
	c.f.m.errors[kind].Inc()
	c.deliver(pt, Result{
		Start: pt.offset, End: pt.offset,
		HighWatermark: -1, LastStableOffset: -1, LogStartOffset: -1,
		Err: err,
	})
}

// retry backs pt off after a retriable error; invalidate forgets its leader.
func (c *coord) retry(pt *cursor, kind string, err error, invalidate bool) {
	c.f.m.errors[kind].Inc()
	pt.attempts++
	d := c.f.backoff(pt.attempts)
	pt.state = stBackoff
	pt.retryAt = c.f.now().Add(d)
	if invalidate {
		pt.known, c.loopsCheck = false, true
		c.f.leaders.Invalidate(pt.p.Key())
	}
	args := []any{"partition", pt.p.String(), "offset", pt.offset, "kind", kind, "attempt", pt.attempts, "backoff", d, "error", err}
	if pt.attempts%10 == 5 {
		c.f.log.Warn("partition fetch keeps failing, retrying", args...)
	} else {
		c.f.log.Debug("partition fetch failed, retrying", args...)
	}
}

func (c *coord) applyResolved(rs []resolved) {
	c.resolverBusy = false
	for _, r := range rs {
		pt := c.cursors[r.key]
		if pt == nil || pt.gen != r.gen || pt.state != stResolving {
			continue
		}
		if r.err != nil {
			if ref := lookupRefused(pt, r.err); ref != nil {
				c.fail(pt, KindRefused, ref)
				continue
			}
			pt.state = stNeedLeader // retry below sets backoff
			c.retry(pt, KindMetadata, r.err, false)
			continue
		}
		switch {
		case pt.p.ID == [16]byte{}:
			pt.p.ID = r.leader.ID
		case r.leader.ID != [16]byte{} && r.leader.ID != pt.p.ID:
			c.fail(pt, KindTopicRecreated, fmt.Errorf(
				"%w: %s at offset %d: topic ID %x was assigned, the source now reports %x: the topic was deleted and created again and the mirrored data has no continuation there; investigate, then reassign the partition",
				ErrTopicRecreated, pt.p, pt.offset, pt.p.ID, r.leader.ID))
			continue
		}
		pt.leader, pt.known, c.loopsCheck = r.leader, true, true
		c.ready(pt)
	}
}

func (c *coord) applyOutcome(o *outcome) {
	if l := c.loops[o.broker]; l != nil {
		l.busy, c.loopsCheck = false, true
	}
	c.f.m.requests.Inc()
	// Every partition's records are sub-slices of the one response: the
	// results that carry batches share a pin of all of it.
	pin := &pinned{}
	for i := range o.items {
		pin.bytes += int64(o.items[i].records)
	}
	c.pin = pin
	defer func() {
		c.pin = nil
		if pin.refs > 0 {
			c.buffered += pin.bytes
		} else {
			c.discard(pin.bytes) // nothing kept: garbage at once
		}
	}()
	for i := range o.items {
		it := &o.items[i]
		c.reserved -= it.reserved
		pt := c.cursors[it.p.Key()]
		if pt == nil || pt.gen != it.gen || pt.state != stInFlight {
			continue // unassigned or reassigned while in flight
		}
		switch {
		case o.err != nil:
			c.retry(pt, KindConnection, fmt.Errorf("fetch %s from broker %d: %w", pt.p, o.broker, o.err), true)
		case o.screenErr != nil:
			c.retry(pt, KindOther, fmt.Errorf("fetch %s at offset %d from broker %d: %w", pt.p, pt.offset, o.broker, o.screenErr), false)
		case it.missing:
			c.retry(pt, KindOther, fmt.Errorf("fetch %s from broker %d: the response does not hold the partition", pt.p, o.broker), false)
		case it.code == 0:
			c.applyData(pt, it)
		case it.code == kerr.OffsetOutOfRange.Code:
			c.applyOutOfRange(pt, it)
		default:
			err := kerr.ErrorForCode(it.code)
			kind, leaderErr := classify(err)
			switch {
			case leaderErr:
				c.retry(pt, kind, fmt.Errorf("fetch %s at offset %d from broker %d: %w", pt.p, pt.offset, o.broker, err), true)
			case kerr.IsRetriable(err):
				c.retry(pt, kind, fmt.Errorf("fetch %s at offset %d from broker %d: %w", pt.p, pt.offset, o.broker, err), false)
			case access.IsRefusal(err):
				c.fail(pt, KindRefused, fmt.Errorf("%w: %s at offset %d, broker %d: the source cluster does not allow the link's principal Read on Topic:%s (mirrord fetches the topic's batches; see docs/acls.md): %w",
					ErrRefused, pt.p, pt.offset, o.broker, pt.p.Topic, err))
			default:
				c.fail(pt, KindRefused, fmt.Errorf("%w: %s at offset %d, broker %d: %w; fix the cause, then reassign the partition",
					ErrRefused, pt.p, pt.offset, o.broker, err))
			}
		}
	}
}

// lookupRefused is the partition's failure for a leader lookup error that
// waiting cannot cure: an authorization refusal (the topic's metadata needs
// Describe) or another error Kafka calls non-retriable. It is nil for
// errors worth retrying: no leader yet, an unknown partition, a failed
// request.
func lookupRefused(pt *cursor, err error) error {
	var ke *kerr.Error
	switch {
	case access.IsRefusal(err):
		return fmt.Errorf("%w: %s at offset %d: leader lookup: the source cluster does not allow the link's principal Describe on Topic:%s (the partition's leader is looked up with a Metadata request; Read implies Describe; see docs/acls.md): %w",
			ErrRefused, pt.p, pt.offset, pt.p.Topic, err)
	case errors.As(err, &ke) && !ke.Retriable:
		return fmt.Errorf("%w: %s at offset %d: leader lookup: %w", ErrRefused, pt.p, pt.offset, err)
	}
	return nil
}

// classify names the metric kind of a partition error and whether it means
// that the leader must be looked up again.
func classify(err error) (kind string, leaderErr bool) {
	switch {
	case errors.Is(err, kerr.NotLeaderForPartition):
		return KindNotLeader, true
	case errors.Is(err, kerr.FencedLeaderEpoch):
		return KindFencedLeaderEpoch, true
	case errors.Is(err, kerr.UnknownLeaderEpoch):
		return KindUnknownLeaderEpoch, true
	case errors.Is(err, kerr.LeaderNotAvailable):
		return KindLeaderNotAvailable, true
	case errors.Is(err, kerr.UnknownTopicID), errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.InconsistentTopicID):
		return KindUnknownTopic, true
	case errors.Is(err, kerr.ReplicaNotAvailable):
		return KindReplicaNotAvail, true
	case errors.Is(err, kerr.KafkaStorageError):
		return KindStorage, true
	}
	return KindOther, false
}

// applyData takes a partition's records: handles a malformed batch and a
// response without a complete batch, and queues the result, which pins the
// response (c.pin) when it carries batches.
func (c *coord) applyData(pt *cursor, it *itemOutcome) {
	fl := &it.f
	start := pt.offset
	end, aborted, badErr := fl.End, fl.Aborted, fl.Err

	n, bytes := len(fl.Batches), 0
	for _, b := range fl.Batches {
		bytes += len(b.Raw)
	}

	switch {
	case badErr != nil && end == start:
		// Nothing before the bad batch: refetch it once, then fail.
		if !errors.Is(badErr, transform.ErrCorrupt) {
			c.fail(pt, KindCorrupt, fmt.Errorf("%w: %s at offset %d: %w; the source partition holds a legacy message set: upgrade its message format (log.message.format.version 0.11 or later) or do not mirror it",
				ErrUnsupportedFormat, pt.p, start, badErr))
			return
		}
		if pt.corruptAt == start {
			c.fail(pt, KindCorrupt, fmt.Errorf("%w: %s at offset %d, fetched twice: %w; check the source broker's log for the partition, or reassign the partition past the damaged batch",
				ErrCorrupt, pt.p, start, badErr))
			return
		}
		c.f.m.errors[KindCorrupt].Inc()
		c.f.log.Warn("corrupt batch in fetch response, fetching it again", "partition", pt.p.String(), "offset", start, "error", badErr)
		pt.corruptAt = start
		c.ready(pt)
		return
	case badErr != nil:
		// The batches before it are good; the next fetch starts at
		// the bad one, and counts as its second look.
		c.f.m.errors[KindCorrupt].Inc()
		c.f.log.Warn("corrupt batch in fetch response, fetching it again", "partition", pt.p.String(), "offset", end, "error", badErr)
		pt.corruptAt = end
	case end > pt.corruptAt:
		pt.corruptAt = -1
	}

	if end == start {
		pt.attempts = 0
		if fl.Examined == 0 && (fl.Truncated > 0 || it.records == 0 && start < it.lso) {
			c.starve(pt, it)
		}
		c.ready(pt) // caught up: the next fetch long-polls
		return
	}
	pt.starved = false
	pt.attempts = 0
	pt.offset = end
	c.f.m.aborted.Add(float64(aborted))
	c.f.m.bytes.Add(float64(bytes))
	var p Pin
	if n > 0 {
		c.pin.refs++
		p = Pin{c.pin}
	}
	c.deliver(pt, Result{
		Batches:          fl.Batches[:n:n],
		Start:            start,
		End:              end,
		HighWatermark:    it.hw,
		LastStableOffset: it.lso,
		LogStartOffset:   it.logStart,
		AbortedBatches:   aborted,
		Bytes:            bytes,
		Pin:              p,
	})
}

// starve handles a response that held data for pt but no complete batch: the
// partition's limit is below the size of its next batch. Its limit doubles
// (up to MaxPartitionMaxBytes and MaxBufferedBytes) and it goes first in its
// next request.
func (c *coord) starve(pt *cursor, it *itemOutcome) {
	pt.starved = true
	limit := int32(min(int64(MaxPartitionMaxBytes), c.f.cfg.MaxBufferedBytes))
	cur := max(it.maxBytes, c.limit(pt)) // the limit of this fetch
	if cur >= limit {
		c.f.log.Debug("no complete batch within the largest partition fetch size; asking first in the next request",
			"partition", pt.p.String(), "offset", pt.offset, "max_bytes", cur)
		return
	}
	next := min(limit, cur*2)
	c.f.log.Info("no complete batch within the partition fetch size, doubling it",
		"partition", pt.p.String(), "offset", pt.offset, "from", cur, "to", next, "truncated_bytes", it.f.Truncated)
	pt.maxBytes = next
}

// applyOutOfRange applies the out-of-range policy with the log start and end
// offsets looked up after the error.
func (c *coord) applyOutOfRange(pt *cursor, it *itemOutcome) {
	if it.rangeErr != nil && access.IsRefusal(it.rangeErr) {
		c.fail(pt, KindRefused, fmt.Errorf("%w: %s offset %d is out of range; looking up the valid range: the source cluster does not allow the link's principal Describe on Topic:%s (ListOffsets needs it; Read implies it; see docs/acls.md): %w",
			ErrRefused, pt.p, pt.offset, pt.p.Topic, it.rangeErr))
		return
	}
	if it.rangeErr != nil {
		c.retry(pt, KindMetadata, fmt.Errorf("%s offset %d is out of range; looking up the valid range: %w", pt.p, pt.offset, it.rangeErr), false)
		return
	}
	off, start, end := pt.offset, it.rangeStart, it.rangeEnd
	switch {
	case off > end:
		c.fail(pt, KindOutOfRange, fmt.Errorf(
			"%w: %s offset %d is above the high watermark %d (valid range [%d, %d]): the source partition was truncated or the topic recreated, so mirrored data may have no continuation; investigate, then reassign the partition from a valid offset",
			ErrOffsetOutOfRange, pt.p, off, end, start, end))
	case off < start && pt.reconciling:
		c.f.log.Info("fetch offset below the log start offset while reconciling; passing to the log start, the link judges whether the records had been mirrored",
			"partition", pt.p.String(), "offset", off, "log_start_offset", start, "high_watermark", end)
		pt.attempts = 0
		pt.offset = start
		c.deliver(pt, Result{
			Start: off, End: start,
			HighWatermark: end, LastStableOffset: it.lso, LogStartOffset: start,
			SkippedRecords: start - off, Unjudged: true,
		})
	case off < start && c.f.cfg.OnOutOfRange == OutOfRangeFail:
		c.fail(pt, KindOutOfRange, fmt.Errorf(
			"%w: %s offset %d is below the log start offset %d (valid range [%d, %d]): %d records were deleted at the source before they were mirrored; set on_offset_out_of_range = %q to skip them, or investigate (retention too short for the link's lag?)",
			ErrOffsetOutOfRange, pt.p, off, start, start, end, start-off, OutOfRangeEarliest))
	case off < start:
		skipped := start - off
		c.f.m.errors[KindOutOfRange].Inc()
		c.f.m.skipped.Add(float64(skipped))
		c.f.log.Warn("fetch offset below the log start offset; skipping records lost at the source",
			"partition", pt.p.String(), "offset", off, "log_start_offset", start, "high_watermark", end, "skipped_records", skipped)
		pt.attempts = 0
		pt.offset = start
		c.deliver(pt, Result{
			Start: off, End: start,
			HighWatermark: end, LastStableOffset: it.lso, LogStartOffset: start,
			SkippedRecords: skipped,
		})
	default:
		// In range again (the log start or the high watermark moved
		// since the fetch): fetch again.
		c.retry(pt, KindOutOfRange, fmt.Errorf("%s offset %d was out of range and is within [%d, %d] now", pt.p, off, start, end), false)
	}
}
