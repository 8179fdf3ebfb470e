package link

import (
	"context"
	"fmt"
	"time"

	"github.com/seed83556561/mirrord/internal/kafka/tp"
)

// recon is the reconciliation of one partition in progress.
type recon struct {
	p            *part
	w            *walker
	tail         *tailReader
	src, dst     [][]byte // batches waiting to be compared
	srcExhausted bool     // the source has nothing committed beyond what src holds
	dstDone      bool     // the destination tail has been read to its end
}

// reconcile walks, for every partition whose destination holds batches past
// its checkpoint, that tail against the source (DESIGN §6), and moves the
// partition's positions to where mirroring resumes. The source is read by
// the run's fetcher; the caller re-assigns every partition afterwards.
func (r *run) reconcile(ctx context.Context, parts []*part) error {
	if len(parts) == 0 {
		return nil
	}
	var dstTopics, srcTopics []string
	for _, p := range parts {
		dstTopics = append(dstTopics, p.dst.Topic)
		srcTopics = append(srcTopics, p.src.Topic)
	}
	ends, err := r.dstAdm.ListEndOffsets(ctx, uniq(dstTopics)...)
	if err != nil {
		return fmt.Errorf("list destination end offsets: %w", err)
	}
	lsos, err := r.srcAdm.ListCommittedOffsets(ctx, uniq(srcTopics)...)
	if err != nil {
		return fmt.Errorf("list source committed offsets: %w", err)
	}
	work := make(map[tp.Key]*recon)
	for _, p := range parts {
		end, ok := ends.Lookup(p.dst.Topic, p.dst.Partition)
		if !ok || end.Err != nil {
			return fmt.Errorf("destination %s: end offset: %v", p.dst, end.Err)
		}
		if end.Offset <= p.dstNext {
			continue
		}
		rc := &recon{
			p:    p,
			w:    newWalker(p.psm, r.srcID, r.region, r.reenc, p.srcNext, p.dstNext, r.l.deps.Now),
			tail: &tailReader{cl: r.dst, leaders: r.dstLeaders, p: p.dst, pos: p.dstNext, end: end.Offset},
		}
		if lso, ok := lsos.Lookup(p.src.Topic, p.src.Partition); ok && lso.Err == nil && lso.Offset <= p.srcNext {
			rc.srcExhausted = true
		}
		r.log.Info("reconciling destination tail", "destination", p.dst, "from", p.dstNext, "to", end.Offset, "source", p.src, "source_from", p.srcNext)
		work[p.src.Key()] = rc
		p.gen = r.assign(p.src, p.srcNext)
	}
	finish := func(rc *recon) {
		delete(work, rc.p.src.Key())
		r.fetch.Unassign(rc.p.src)
		p, w := rc.p, rc.w
		p.srcNext, p.dstNext = w.srcNext, w.dstNext
		r.l.met.reconciled.Add(float64(w.matched))
		r.l.met.foreign.Add(float64(w.foreign))
		if w.foreign > 0 {
			r.log.Error("destination partition holds batches this link did not write; the link expects to own its destination topics",
				"destination", p.dst, "foreign_batches", w.foreign, "resume_source_offset", p.srcNext)
		}
		r.log.Info("reconciled", "destination", p.dst, "matched_batches", w.matched, "foreign_batches", w.foreign,
			"resume_source_offset", p.srcNext, "resume_destination_offset", p.dstNext)
	}
	for _, rc := range work {
		done, err := r.advance(ctx, rc)
		if err != nil {
			return err
		}
		if done {
			finish(rc)
		}
	}
	keep := time.NewTicker(r.l.cfg.Link.CheckpointInterval)
	defer keep.Stop()
	for len(work) > 0 {
		var res fetchResult
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-r.ctx.Done():
			return r.runErr()
		case <-keep.C:
			if err := r.keepalive(ctx); err != nil {
				return err
			}
			continue
		case res = <-r.fetch.Results():
		}
		rc := work[res.Partition.Key()]
		if rc == nil || res.Gen != rc.p.gen {
			r.fetch.Release(res.Pin)
			continue
		}
		r.fetch.Release(res.Pin) // the walker holds the batches only until it compared them
		if res.Err != nil {
			return fmt.Errorf("reconcile %s: %w", rc.p.dst, res.Err)
		}
		for _, b := range res.Batches {
			rc.src = append(rc.src, b.Raw)
		}
		if res.End >= res.LastStableOffset {
			rc.srcExhausted = true
		}
		done, err := r.advance(ctx, rc)
		if err != nil {
			return err
		}
		if done {
			finish(rc)
		}
	}
	return nil
}

// advance compares as far as the batches at hand allow; done is true once
// the destination tail is exhausted.
func (r *run) advance(ctx context.Context, rc *recon) (done bool, err error) {
	for {
		if len(rc.dst) == 0 && !rc.dstDone {
			rc.dst, err = rc.tail.next(ctx)
			if err != nil {
				return false, err
			}
			rc.dstDone = len(rc.dst) == 0
		}
		if len(rc.dst) == 0 {
			return true, nil
		}
		if len(rc.src) == 0 || rc.w.stopped {
			if !rc.srcExhausted && !rc.w.stopped {
				return false, nil // wait for the fetcher
			}
			if err := rc.w.foreignRest(rc.dst[0]); err != nil {
				return false, err
			}
			rc.dst = rc.dst[1:]
			continue
		}
		st, err := rc.w.compare(rc.src[0], rc.dst[0])
		if err != nil {
			return false, fmt.Errorf("reconcile %s: %w", rc.p.dst, err)
		}
		switch st {
		case stepMatch:
			rc.src, rc.dst = rc.src[1:], rc.dst[1:]
		case stepSkip:
			rc.src = rc.src[1:]
		case stepForeign, stepStop:
			rc.dst = rc.dst[1:]
		}
	}
}
