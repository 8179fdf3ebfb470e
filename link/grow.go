package link

import (
	"context"
	"fmt"

	"github.com/seed83556561/mirrord/barrier"
	"github.com/seed83556561/mirrord/statestore"
)

// While MIRRORING the link looks for new source topics and partitions every
// DiscoveryInterval. The listing and the offset lookups run in a worker; the
// link goroutine decides. A new partition is adopted only after a state
// transaction holding its barrier and its first checkpoint has committed
// (DESIGN §8: its own barrier before its first append). A new partition
// whose destination already holds data past its start position needs
// reconciliation, which PREPARING does: the link prepares again.

func (r *run) startDiscovery() {
	if r.pump.discovering || r.pump.draining {
		return
	}
	r.pump.discovering = true
	r.goRun(func() error {
		pairs, err := r.discover(r.ctx)
		r.deliver(func() { r.discovered(pairs, err) })
		return nil
	})
}

// discovered runs on the link goroutine with the worker's listing.
func (r *run) discovered(pairs []pair, err error) {
	if err != nil {
		r.pump.discovering = false
		r.l.met.error("discovery")
		r.log.Warn("topic discovery failed; retrying at the next interval", "error", err)
		return
	}
	listed := make(map[pair]bool, len(pairs))
	var fresh []*part
	for _, pr := range pairs {
		listed[pr] = true
		if r.byDst[pr.dst.Key()] == nil {
			fresh = append(fresh, r.newPart(pr))
		}
	}
	for _, p := range r.parts {
		if !p.removed && !listed[pair{p.src, p.dst}] {
			r.log.Warn("source partition no longer selected or gone; stopped mirroring it", "source", p.src, "destination", p.dst)
			p.removed = true
			r.fetch.Unassign(p.src)
		}
	}
	if len(fresh) == 0 {
		r.pump.discovering = false
		return
	}
	r.goRun(func() error {
		needsReconcile, err := r.place(r.ctx, fresh)
		r.deliver(func() { r.adopt(fresh, needsReconcile, err) })
		return nil
	})
}

// place finds where new partitions start (a checkpoint of an earlier
// session, or start_from), with their replayed salts, and reports whether
// any destination already holds data past that start.
func (r *run) place(ctx context.Context, parts []*part) (needsReconcile bool, err error) {
	view, err := r.store.Replay(ctx)
	if err != nil {
		return false, err
	}
	r.replaySalts(view, parts)
	if err := r.positions(ctx, view, parts); err != nil {
		return false, err
	}
	var topics []string
	for _, p := range parts {
		topics = append(topics, p.dst.Topic)
	}
	ends, err := r.dstAdm.ListEndOffsets(ctx, uniq(topics)...)
	if err != nil {
		return false, fmt.Errorf("list destination end offsets: %w", err)
	}
	for _, p := range parts {
		end, ok := ends.Lookup(p.dst.Topic, p.dst.Partition)
		if !ok || end.Err != nil {
			return false, fmt.Errorf("destination %s: end offset: %v", p.dst, end.Err)
		}
		if end.Offset > p.dstNext {
			return true, nil
		}
	}
	return false, nil
}

// adopt commits the new partitions' barriers and checkpoints, then starts
// mirroring them.
func (r *run) adopt(parts []*part, needsReconcile bool, err error) {
	switch {
	case err != nil:
		r.pump.discovering = false
		r.l.met.error("discovery")
		r.log.Warn("placing new partitions failed; retrying at the next discovery", "error", err)
		return
	case needsReconcile, len(r.parts)+len(parts) > r.maxPending:
		// Reconciliation happens in PREPARING, and so does sizing the
		// appender for more partitions.
		r.fail(errReprepare)
		return
	}
	r.pump.adopting = append(r.pump.adopting, parts...)
	r.flushCommits()
}

// barrierRecords are the state records that admit new partitions: a
// barrier and the first checkpoint of each.
func (r *run) barrierRecords(parts []*part) (bps []barrier.Partition, recs []statestore.Record) {
	now := r.l.deps.Now()
	for _, p := range parts {
		bp := p.barrierPartition()
		bps = append(bps, bp)
		recs = append(recs, barrier.Record(bp, r.srcID, now), r.checkpointRecord(p, now))
	}
	return bps, recs
}

// adopted runs once the barrier transaction of new partitions committed.
func (r *run) adopted(parts []*part, bps []barrier.Partition) {
	r.pump.discovering = false
	r.l.met.barriers.Add(float64(len(parts)))
	for i, p := range parts {
		p.ckSrc, p.ckDst = p.srcNext, p.dstNext
		barrier.Apply(p.psm, r.log, bps[i])
		r.addPart(p)
		p.gen = r.assign(p.src, p.srcNext)
		r.log.Info("mirroring new partition", "source", p.src, "destination", p.dst, "source_offset", p.srcNext)
	}
	r.publish()
}
