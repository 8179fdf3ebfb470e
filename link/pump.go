package link

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/seed83556561/mirrord/appender"
	"github.com/seed83556561/mirrord/barrier"
	"github.com/seed83556561/mirrord/fetcher"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/statestore"
	"github.com/seed83556561/mirrord/transform"
)

type fetchResult = fetcher.Result

// item is one entry of a partition's queue: a fetched batch, or (raw nil) a
// position past batches the fetcher consumed without forwarding (control
// batches, aborted transactions).
type item struct {
	raw     []byte
	hdr     transform.Header
	from    int64         // the fetch position: records of the batch before it are not forwarded
	end     int64         // source offset after this item
	release []fetcher.Pin // fetch responses to release once this item is done
}

// part is the pipeline state of one destination partition. The link
// goroutine owns it.
type part struct {
	src, dst tp.Partition
	psm      *transform.PSM
	gen      uint64 // fetcher assignment generation

	queue []item
	head  int

	inflight    bool // a batch is with the appender (or being settled)
	waitingSalt bool // a collision salt is being committed
	settling    bool // an append of unknown outcome is being settled
	removed     bool // the source partition went away
	dec         transform.Decision
	out         []byte // the bytes handed to the appender
	tag         uint64
	refetchedAt int64 // source offset of the last batch refetched after CORRUPT_MESSAGE; -1 none

	srcNext, dstNext int64 // acknowledged positions: everything below srcNext is at the destination below dstNext
	ckSrc, ckDst     int64 // as last committed
	hw               int64 // source high watermark, for lag
}

func (p *part) pending() int { return len(p.queue) - p.head }

// commitReq is one state transaction for the committer; done runs on the
// link goroutine with the outcome.
type commitReq struct {
	state State
	recs  []statestore.Record
	done  func(error)
}

type commitRes struct {
	done func(error)
	err  error
}

// saltReq is a collision salt waiting to be committed.
type saltReq struct {
	p    *part
	salt transform.Salt
}

// pump is the MIRRORING loop's state beyond the partitions.
type pump struct {
	commitBusy    bool
	checkpointDue bool
	salts         []saltReq
	discovering   bool
	adopting      []*part // new partitions whose barrier is to be committed
	draining      bool
	err           error // set by a handler: the link fails with it
	errOnce       sync.Once
}

// committer runs state transactions one at a time (a transactional
// producer has one transaction open at most).
func (r *run) committer() error {
	for {
		select {
		case <-r.ctx.Done():
			return nil
		case req := <-r.commits:
			err := r.sess.Commit(r.ctx, req.state, req.recs...)
			select {
			case r.committed <- commitRes{req.done, err}:
			case <-r.ctx.Done():
				return nil
			}
		}
	}
}

// mirror is MIRRORING: it moves batches until ctx ends (EvStop), an
// operator pauses (EvPause), the partition set needs a new PREPARING
// (EvReprepare) or something fails (EvFail with the error).
func (r *run) mirror(ctx context.Context) (Event, error) {
	l := r.l
	ck := time.NewTicker(l.cfg.Link.CheckpointInterval)
	defer ck.Stop()
	disc := time.NewTicker(l.cfg.DiscoveryInterval)
	defer disc.Stop()
	stat := time.NewTicker(time.Second)
	defer stat.Stop()

	for _, p := range r.parts {
		r.try(p)
	}
	for {
		select {
		case <-ctx.Done():
			r.stop(Stopped)
			return EvStop, nil
		case c := <-l.ctl:
			if c == ctlPause {
				r.stop(Paused)
				return EvPause, nil
			}
		case <-r.ctx.Done():
			return EvFail, r.runErr()
		case res := <-r.fetch.Results():
			r.onFetch(res)
		case res := <-r.app.Results():
			r.onAppend(res)
		case res := <-r.committed:
			r.pump.commitBusy = false
			res.done(res.err)
			r.flushCommits()
		case fn := <-r.workDone:
			fn()
		case <-ck.C:
			r.pump.checkpointDue = true
			r.flushCommits()
		case <-disc.C:
			r.startDiscovery()
		case <-stat.C:
			r.publish()
		}
		if r.pump.err != nil {
			return r.failEvent(r.pump.err)
		}
	}
}

// errReprepare asks for a new PREPARING: the partition set changed in a way
// that needs reconciliation.
var errReprepare = errors.New("partition set changed; preparing again")

func (r *run) failEvent(err error) (Event, error) {
	if errors.Is(err, errReprepare) {
		r.stop(Mirroring)
		return EvReprepare, nil
	}
	return EvFail, err
}

// fail records the first error of the run; mirror returns it.
func (r *run) fail(err error) {
	r.pump.errOnce.Do(func() { r.pump.err = err })
}

func (r *run) onFetch(res fetchResult) {
	p := r.bySrc[res.Partition.Key()]
	if p == nil || res.Gen != p.gen || p.removed {
		r.fetch.Release(res.Pin)
		return
	}
	if res.Err != nil {
		r.fetch.Release(res.Pin)
		r.fail(fmt.Errorf("source %s: %w", p.src, res.Err))
		return
	}
	p.hw = res.HighWatermark
	n := len(p.queue)
	pos := res.Start
	for _, b := range res.Batches {
		p.queue = append(p.queue, item{raw: b.Raw, hdr: b.Header, from: res.Start, end: b.Header.NextOffset()})
		pos = b.Header.NextOffset()
	}
	if res.End > pos {
		p.queue = append(p.queue, item{end: res.End})
	}
	if len(p.queue) > n {
		p.queue[len(p.queue)-1].release = append(p.queue[len(p.queue)-1].release, res.Pin)
	} else {
		r.fetch.Release(res.Pin)
	}
	r.try(p)
}

// done finishes the head item of p's queue.
func (r *run) done(p *part) {
	it := &p.queue[p.head]
	p.srcNext = it.end
	for _, pin := range it.release {
		r.fetch.Release(pin)
	}
	*it = item{}
	p.head++
	if p.head == len(p.queue) {
		p.queue, p.head = p.queue[:0], 0
	}
}

// try moves p's queue forward until a batch is with the appender or
// something else must happen first.
func (r *run) try(p *part) {
	for !p.inflight && !p.waitingSalt && !p.removed && !r.pump.draining && p.pending() > 0 {
		it := &p.queue[p.head]
		if it.raw == nil || it.hdr.NumRecords == 0 || it.end <= it.from {
			// Consumed at the source, nothing to forward (a batch that
			// compaction emptied carries nothing either).
			r.done(p)
			continue
		}
		h := it.hdr
		d := p.psm.Decide(transform.InfoOf(h, r.srcID, r.region))
		switch d.Kind {
		case transform.KindCollision:
			p.waitingSalt = true
			r.pump.salts = append(r.pump.salts, saltReq{p, *d.Salt})
			r.log.Info("producer ID collision; committing a salt before the batch is appended",
				"destination", p.dst, "source_offset", h.BaseOffset, "origin", d.Salt.Origin, "holder", d.Holder,
				"salt", d.Salt.Salt, "mapped_pid", d.Salt.Mapped)
			r.flushCommits()
			return
		case transform.KindDuplicate:
			p.psm.Commit(d, r.l.deps.Now())
			r.l.met.duplicates.Inc()
			r.done(p)
			continue
		case transform.KindLowerEpoch:
			r.log.Warn("batch with an epoch below its producer's current one; appended",
				"destination", p.dst, "source_offset", h.BaseOffset, "producer_id", h.ProducerID, "epoch", h.ProducerEpoch)
		case transform.KindUnresolvable:
			r.log.Warn("mapped producer ID held by another origin and neither can move (both forwarded by upstream mirrors); appended under the shared PID",
				"destination", p.dst, "source_offset", h.BaseOffset, "pid", d.Mapped, "holder", d.Holder)
		}
		out, reencoded, err := forward(r.reenc, nil, it.raw, h, d.Mapped, it.from, false)
		if errors.Is(err, transform.ErrEmptyBatch) {
			r.done(p) // every record is before the position
			continue
		}
		if err != nil {
			r.fail(fmt.Errorf("source %s offset %d: %w", p.src, h.BaseOffset, err))
			return
		}
		if reencoded {
			r.l.met.reencoded.Inc()
		}
		p.tag++
		if err := r.app.Submit(appender.Request{Partition: p.dst, Batch: out, Tag: p.tag}); err != nil {
			r.fail(fmt.Errorf("destination %s: submit: %w", p.dst, err))
			return
		}
		p.inflight, p.dec, p.out = true, d, out
	}
}

func (r *run) onAppend(res appender.Result) {
	p := r.byDst[res.Partition.Key()]
	if p == nil || !p.inflight || res.Tag != p.tag {
		return // a result of a batch the link already gave up on
	}
	it := p.queue[p.head]
	switch {
	case res.Err == nil:
		r.acked(p, res.BaseOffset)
	case errors.Is(res.Err, appender.ErrUnknownOutcome):
		r.l.met.unknown.Inc()
		r.log.Warn("append outcome unknown; settling it against the destination before any retry",
			"destination", p.dst, "source_offset", it.hdr.BaseOffset, "after", r.l.cfg.SettleDelay, "error", res.Err)
		r.settle(p)
	case errors.Is(res.Err, appender.ErrCorrupt):
		if p.refetchedAt == it.hdr.BaseOffset {
			r.l.met.error("corrupt")
			r.fail(fmt.Errorf("destination %s refused the batch from source %s offset %d as corrupt twice, also after fetching it again: %w",
				p.dst, p.src, it.hdr.BaseOffset, res.Err))
			return
		}
		p.refetchedAt = it.hdr.BaseOffset
		r.l.met.refetches.Inc()
		r.log.Warn("destination refused a batch as corrupt; fetching it again from the source",
			"destination", p.dst, "source", p.src, "source_offset", it.hdr.BaseOffset)
		r.reassign(p)
	default:
		r.fail(fmt.Errorf("append to %s of the batch from source %s offset %d: %w", p.dst, p.src, it.hdr.BaseOffset, res.Err))
	}
}

// acked records that p's in-flight batch is at the destination from base.
func (r *run) acked(p *part, base int64) {
	oh, _ := transform.ParseHeader(p.out)
	p.psm.Commit(p.dec, r.l.deps.Now())
	p.dstNext = base + int64(oh.LastOffsetDelta) + 1
	m := r.l.met
	m.records.Add(float64(oh.NumRecords)) // what was appended: a trimmed batch holds fewer than its source
	m.bytes.Add(float64(len(p.out)))
	m.batches.Inc()
	// Counted once appended: a batch decided twice (fetched again after
	// CORRUPT_MESSAGE) counts once.
	switch p.dec.Kind {
	case transform.KindSequenceGap:
		m.gaps.Inc()
	case transform.KindLowerEpoch:
		m.lowEpoch.Inc()
	case transform.KindUnresolvable:
		m.unresolvable.Inc()
	}
	p.inflight, p.settling, p.out = false, false, nil
	r.done(p)
	r.try(p)
}

// reassign drops p's queue and fetches again from its acknowledged
// position.
func (r *run) reassign(p *part) {
	for p.pending() > 0 {
		it := &p.queue[p.head]
		it.end = p.srcNext // keep the position where it is
		r.done(p)
	}
	p.inflight, p.settling, p.out = false, false, nil
	p.gen = r.assign(p.src, p.srcNext)
}

// settle decides an append of unknown outcome (DESIGN §6): after the settle
// delay, the destination is read from the partition's acknowledged end; if
// the batch is there it counts as acknowledged, otherwise it is sent again.
func (r *run) settle(p *part) {
	p.settling = true
	want := append([]byte(nil), p.out...)
	from, tag := p.dstNext, p.tag
	r.goRun(func() error {
		found, err := r.find(r.ctx, p.dst, from, want)
		r.deliver(func() { r.settled(p, tag, found, err) })
		return nil
	})
}

func (r *run) find(ctx context.Context, dst tp.Partition, from int64, want []byte) (int64, error) {
	if !sleep(ctx, r.l.cfg.SettleDelay) {
		return -1, ctx.Err()
	}
	ends, err := r.dstAdm.ListEndOffsets(ctx, dst.Topic)
	if err != nil {
		return -1, err
	}
	end, ok := ends.Lookup(dst.Topic, dst.Partition)
	if !ok || end.Err != nil {
		return -1, fmt.Errorf("destination %s: end offset: %v", dst, end.Err)
	}
	tr := &tailReader{cl: r.dst, leaders: r.dstLeaders, p: dst, pos: from, end: end.Offset}
	for {
		batches, err := tr.next(ctx)
		if err != nil || len(batches) == 0 {
			return -1, err
		}
		for _, b := range batches {
			if sameBatch(want, b) {
				h, _ := transform.ParseHeader(b)
				return h.BaseOffset, nil
			}
		}
	}
}

func (r *run) settled(p *part, tag uint64, found int64, err error) {
	if !p.inflight || p.tag != tag {
		return
	}
	switch {
	case err != nil:
		r.fail(fmt.Errorf("settle append to %s: %w", p.dst, err))
	case found >= 0:
		r.log.Info("append settled: the batch had landed", "destination", p.dst, "offset", found)
		r.acked(p, found)
	default:
		r.log.Info("append settled: the batch had not landed; sending it again", "destination", p.dst)
		p.settling = false
		p.tag++
		if err := r.app.Submit(appender.Request{Partition: p.dst, Batch: p.out, Tag: p.tag}); err != nil {
			r.fail(fmt.Errorf("destination %s: submit: %w", p.dst, err))
		}
	}
}

// flushCommits sends the next state transaction if the committer is idle:
// pending salts (each with its partition's checkpoint, so that
// reconciliation never walks back across a salt) and, when due, the
// checkpoints of every partition that moved, the tombstones of expired
// salts, and the link record that renews the lease.
func (r *run) flushCommits() {
	if r.pump.commitBusy || (len(r.pump.salts) == 0 && !r.pump.checkpointDue && len(r.pump.adopting) == 0) {
		return
	}
	now := r.l.deps.Now()
	adopting := r.pump.adopting
	r.pump.adopting = nil
	bps, recs := r.barrierRecords(adopting)
	salts := r.pump.salts
	r.pump.salts = nil
	seen := make(map[*part]bool)
	for _, s := range salts {
		recs = append(recs, barrier.SaltRecord(s.p.barrierPartition(), s.salt, now))
		if !seen[s.p] {
			seen[s.p] = true
			recs = append(recs, r.checkpointRecord(s.p, now))
		}
	}
	var cks []*part
	if r.pump.checkpointDue {
		r.pump.checkpointDue = false
		for _, p := range r.parts {
			if p.srcNext != p.ckSrc || p.dstNext != p.ckDst {
				if !seen[p] {
					recs = append(recs, r.checkpointRecord(p, now))
				}
				cks = append(cks, p)
			}
			expired, tombs := p.psm.Expire(now)
			r.l.met.expired.Add(float64(expired))
			r.l.met.saltsExpired.Add(float64(len(tombs)))
			for _, o := range tombs {
				recs = append(recs, barrier.SaltTombstone(p.barrierPartition(), o))
			}
		}
	}
	type pos struct{ src, dst int64 }
	at := make(map[*part]pos, len(cks)+len(seen))
	for _, p := range cks {
		at[p] = pos{p.srcNext, p.dstNext}
	}
	for p := range seen {
		at[p] = pos{p.srcNext, p.dstNext}
	}
	r.pump.commitBusy = true
	req := commitReq{state: Mirroring, recs: recs, done: func(err error) {
		if err != nil {
			r.fail(fmt.Errorf("commit state transaction: %w", err))
			return
		}
		r.l.met.checkpoints.Inc()
		for p, ps := range at {
			p.ckSrc, p.ckDst = ps.src, ps.dst
		}
		if len(adopting) > 0 {
			r.adopted(adopting, bps)
		}
		for _, s := range salts {
			s.p.psm.AddSalt(s.salt.Origin, s.salt.Salt, now)
			s.p.waitingSalt = false
			r.l.met.collisions.Inc()
			r.try(s.p)
		}
	}}
	select {
	case r.commits <- req:
	default:
		// The committer takes one request at a time and commitBusy
		// guards the channel, so it always has room.
		panic("link: committer queue full")
	}
}

// stop ends MIRRORING: with a clean stop, in-flight appends drain (bounded
// by ShutdownTimeout) and a final checkpoint records state. A crash (tests)
// skips both, as a killed process would.
func (r *run) stop(state State) {
	if r.l.crash != nil && r.l.crash() {
		return
	}
	r.pump.draining = true
	deadline := time.NewTimer(r.l.cfg.ShutdownTimeout)
	defer deadline.Stop()
	inflight := func() bool {
		for _, p := range r.parts {
			if p.inflight && !p.settling {
				return true
			}
		}
		return r.pump.commitBusy
	}
drain:
	for inflight() {
		select {
		case <-deadline.C:
			r.log.Warn("stop: in-flight appends did not finish in time; the next session reconciles them", "timeout", r.l.cfg.ShutdownTimeout)
			break drain
		case res := <-r.app.Results():
			r.onAppend(res)
		case res := <-r.committed:
			r.pump.commitBusy = false
			res.done(res.err)
		case res := <-r.fetch.Results():
			r.fetch.Release(res.Pin)
		case <-r.ctx.Done():
			return
		}
	}
	now := r.l.deps.Now()
	var recs []statestore.Record
	for _, p := range r.parts {
		recs = append(recs, r.checkpointRecord(p, now))
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.l.cfg.ShutdownTimeout)
	defer cancel()
	if err := r.sess.Commit(ctx, state, recs...); err != nil {
		r.log.Warn("final checkpoint failed; the next session reconciles from the previous one", "error", err)
		return
	}
	r.l.met.checkpoints.Inc()
	r.log.Info("final checkpoint committed", "state", state, "partitions", len(r.parts))
}

// publish refreshes the status snapshot and the lag gauges.
func (r *run) publish() {
	var total int64
	ps := make([]PartitionStatus, 0, len(r.parts))
	for _, p := range r.parts {
		lag := max(p.hw-p.srcNext, 0)
		total += lag
		ps = append(ps, PartitionStatus{
			SourceTopic: p.src.Topic, DestinationTopic: p.dst.Topic, Partition: p.dst.Partition,
			SourceNextOffset: p.srcNext, DestNextOffset: p.dstNext, HighWatermark: p.hw, Lag: lag,
			CheckpointSource: p.ckSrc, CheckpointDest: p.ckDst,
		})
		if len(r.parts) <= MaxPartitionLagSeries {
			r.l.met.partitionLag(p.src.Topic, p.src.Partition, lag)
		}
	}
	r.l.met.lag.Set(float64(total))
	r.l.setStatus(func(s *Status) {
		s.Partitions = ps
		s.Lag = total
	})
}
