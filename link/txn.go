package link

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/sync/errgroup"

	"github.com/seed83556561/mirrord/appender"
	"github.com/seed83556561/mirrord/internal/kafka/leaders"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/internal/mailbox"
	"github.com/seed83556561/mirrord/statestore"
	"github.com/seed83556561/mirrord/transform"
)

// txnSession is one session of a link in transactional delivery (DESIGN
// §14): the session's transactional producer at the destination appends
// every fetched batch stamped with its own producer ID, epoch and sequence,
// and commits the data with the checkpoints in one transaction every
// checkpoint interval. Its InitProducerId fences the previous session,
// whose open transaction the coordinator aborts: a new session resumes at
// the committed checkpoints at once, with no lease to wait out and no
// destination to reconcile (unless the previous session was a preserve
// one, whose appends no broker fences).
//
// Its goroutines, in the embedded session's errgroup: the fetcher, the
// committer (one commit at a time), and one append worker per partition
// in flight (up to txnMaxInFlight per partition: txnPlan); they
// report to the link goroutine through inputs, one entry per outstanding
// append, commit, discovery or placement.
type txnSession struct {
	*session
	txnCl   *kgo.Client // the transactional producer's (versions capped under transaction.version 1)
	txn     *appender.Txn
	txnLs   *leaders.Cache
	version appender.TxnVersion

	stateTopic tp.Partition // the state topic (partition unset)
	stateParts int32

	plan     *txnPlan
	inputs   *mailbox.Box[any]
	commits  chan txnDoCommit
	appendTo appender.TxnAppendConfig
	// overtaken is the producer's Overtaken as last reported.
	overtaken int64
	// recordedPID is the producer ID whose MirrorTxnProducer record a
	// transaction of this session committed (-1: none yet).
	recordedPID int64
	// reencoders are the append workers' Reencoders, kept between
	// joins: a Reencoder's compressors (a zstd encoder is megabytes) and
	// scratch buffers would otherwise be made anew for every run. At most
	// GOMAXPROCS are kept (joining is CPU work, and a worker holds one
	// only while it joins); a sync.Pool lost them at every other garbage
	// collection, which at 1,000 partitions was most joins.
	reencoders chan *transform.Reencoder
}

// reencoder takes a kept Reencoder, or makes one.
func (s *txnSession) reencoder() *transform.Reencoder {
	select {
	case r := <-s.reencoders:
		return r
	default:
		return transform.NewReencoder()
	}
}

// keep gives r back, or drops it when GOMAXPROCS are kept already.
func (s *txnSession) keep(r *transform.Reencoder) {
	select {
	case s.reencoders <- r:
	default:
	}
}

// beginTxn is PREPARING of a transactional session: connect, fence the
// previous session (InitProducerId), wait out a preserve session's lease if
// one ran last, discover and place the partitions, and start the fetcher
// and the committer.
func (l *Link) beginTxn(ctx context.Context, standby standbyMode) (_ *txnSession, err error) {
	s := &txnSession{session: &session{l: l, log: l.log, queries: make(chan query)}, inputs: mailbox.New[any](), commits: make(chan txnDoCommit, 1), recordedPID: -1,
		reencoders: make(chan *transform.Reencoder, runtime.GOMAXPROCS(0))}
	base, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	s.cancel = cancel
	s.g, s.ctx = errgroup.WithContext(base)
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	if err := s.connect(ctx); err != nil {
		return nil, err
	}
	for {
		if err := s.standBy(ctx, standby); err != nil {
			return nil, err
		}
		view, err := s.checkOthers(ctx)
		if err != nil {
			return nil, err
		}
		version, err := appender.TxnVersionOf(ctx, s.dst)
		if err != nil {
			return nil, fmt.Errorf("destination cluster %s: %w", l.cfg.Destination.Name, err)
		}
		if s.txnCl == nil || version != s.version {
			if s.txnCl != nil {
				s.txnCl.Close()
			}
			opts := append(append([]kgo.Opt(nil), l.deps.DestinationOpts...), appender.TxnClientOpts(version)...)
			if s.txnCl, err = kgo.NewClient(opts...); err != nil {
				return nil, fmt.Errorf("destination cluster %s client: %w", l.cfg.Destination.Name, err)
			}
		}
		s.version = version
		// The claim is checked last, right before OpenTxn's
		// InitProducerId, through the same client: its answer comes from
		// the transactional.id's coordinator, over the connection the
		// InitProducerId then takes at once. A check through another
		// client left a new client's connection and coordinator lookup
		// between the check and the fencing, long enough for another
		// standby to begin and mirror (kfake reaches MIRRORING 5 ms after
		// its InitProducerId), which the InitProducerId then fenced
		// (TestThreeAgents in CI's kfake tier, all agents restarted).
		if !s.claimedMeanwhile(ctx, view, s.txnCl) {
			break
		}
	}
	s.txnLs = leaders.New(s.txnCl, 0)
	s.appendTo = appender.TxnAppendConfig{RequestTimeout: l.cfg.Link.ProduceTimeout}
	if s.txn, err = appender.OpenTxn(ctx, s.txnCl, appender.TxnConfig{
		TransactionalID: statestore.TransactionalID(l.sess),
		Timeout:         l.cfg.Link.TransactionTimeout,
		Version:         s.version,
		Metrics:         l.deps.AppenderMetrics,
		Link:            l.sess,
	}, l.log); err != nil {
		return nil, s.explain(err)
	}
	id, epoch := s.txn.Producer()
	l.setStatus(func(st *Status) { st.SessionEpoch = epoch })
	s.log.Info("began transactional session", "producer_id", id, "epoch", epoch, "protocol", s.version.String())

	if err := s.stateTopicInfo(ctx); err != nil {
		return nil, err
	}
	s.plan = newTxnPlan(l.sess, s.srcID, s.dstID, epoch, l.cfg.Link.SessionTimeout, l.deps.Now())
	s.plan.returns = s.returns
	s.plan.agent, s.plan.fingerprint = l.cfg.Agent, l.cfg.Link.Fingerprint(s.srcID, s.dstID)
	s.plan.coalesce = l.cfg.Link.CoalesceBytes
	// The previous session's link record, read before this session's
	// first commit replaces it: whether it ran in preserve delivery, and
	// whether it stopped cleanly.
	prior, err := s.store.Replay(ctx)
	if err != nil {
		return nil, err
	}
	// The first commit claims the link at once (PREPARING), so that a
	// standby agent sees a live session, and renews it while this one
	// waits for a preserve session's appends.
	// It also records the destination topics an earlier session of this
	// process created and could not record (config sync manages them).
	if err := s.keepaliveTxn(ctx, l.owned.merge(l.cfg.Link.Name, prior)...); err != nil {
		return nil, err
	}
	if err := s.waitPreserve(ctx, prior); err != nil {
		return nil, err
	}
	view, err := s.store.Replay(ctx)
	if err != nil {
		return nil, err
	}
	pairs, created, fresh, err := s.discoverFresh(ctx)
	if len(created) > 0 {
		// The record that the link created them commits before
		// anything else of the session.
		if cerr := s.commitRecords(ctx, append(created, s.plan.linkRecord(l.deps.Now(), statestore.Preparing))); cerr != nil {
			return nil, errors.Join(err, cerr)
		}
	}
	if err != nil {
		return nil, err
	}
	s.fresh = fresh
	parts, later, err := s.place(ctx, view, pairs, fresh)
	if err != nil {
		return nil, err
	}
	s.deferPlacement(later)
	if err := preserveTail(prior, l.sess, l.cfg.Link.Name, parts); err != nil {
		return nil, err
	}
	if s.fetch, err = s.newFetcher(); err != nil {
		return nil, err
	}
	s.goRun(func() error { return s.fetch.Run(s.ctx) })
	s.goRun(s.txnCommitter)
	s.inputs.Put(txnInAdd{parts: parts})
	return s, nil
}

// stateTopicInfo looks up the state topic's ID and partition count: the
// session appends its checkpoint records to it itself.
func (s *txnSession) stateTopicInfo(ctx context.Context) error {
	topic := s.l.cfg.Link.StateTopic
	md, err := leaders.Metadata(ctx, s.txnCl, topic)
	if err != nil {
		return fmt.Errorf("state topic %s: %w", topic, err)
	}
	if len(md.Topics) != 1 || md.Topics[0].ErrorCode != 0 || len(md.Topics[0].Partitions) == 0 {
		return fmt.Errorf("state topic %s: the destination does not describe it", topic)
	}
	s.stateTopic = tp.Partition{Topic: topic, ID: md.Topics[0].TopicID}
	s.stateParts = int32(len(md.Topics[0].Partitions))
	return nil
}

// keepaliveTxn commits a transaction holding only the link record
// (PREPARING), renewing the session's lease.
func (s *txnSession) keepaliveTxn(ctx context.Context, extra ...statestore.Record) error {
	now := s.l.deps.Now()
	if err := s.commitRecords(ctx, append(extra, s.plan.linkRecord(now, statestore.Preparing))); err != nil {
		return fmt.Errorf("commit PREPARING: %w", err)
	}
	s.plan.lastCommit = now
	return nil
}

// waitPreserve waits out the lease and produce timeout of a preserve-mode
// session that did not stop cleanly: its appends carry no epoch a broker
// checks, so only time ends them (DESIGN §7). A transactional session's
// appends are fenced by this session's InitProducerId. view is the state
// as it was before this session's first commit (which replaces the link
// record: read after it, the wait was never taken).
func (s *txnSession) waitPreserve(ctx context.Context, view *statestore.View) error {
	cfg := s.l.cfg
	lv, ok := view.Links[s.l.sess]
	if !ok || lv.Delivery == statestore.DeliveryTransactional {
		return nil
	}
	wait := view.LeaseWait(s.l.sess, s.l.deps.Now(), cfg.Tuning.LeaseSkew, cfg.Link.ProduceTimeout)
	if wait <= 0 {
		return nil
	}
	s.log.Info("the previous session was a preserve-delivery session that did not stop cleanly; waiting out its lease and produce timeout", "wait", wait.Round(time.Millisecond))
	for wait > 0 {
		step := min(wait, cfg.Link.SessionTimeout/3)
		if err := s.l.pausableSleep(ctx, step); err != nil {
			return err
		}
		wait -= step
		if err := s.keepaliveTxn(ctx); err != nil {
			return err
		}
	}
	return nil
}

// preserveTail refuses to resume partitions whose destination holds
// batches past their checkpoint when the previous session ran in preserve
// delivery (prior's link record, before this session's first commit): a
// preserve session that did not stop cleanly appended batches its last
// checkpoint does not cover, and only its reconciliation (the walk that
// matches destination batches with source batches by producer identity,
// which a transactional session replaces) can tell which; resuming at the
// checkpoint would append them again. After a clean preserve stop the final
// checkpoint covers every append (a tail past it is not the link's, and
// preserve delivery would resume past it too), and nothing is refused. The
// previous session of a partition is the one whose checkpoint it resumes
// from (Placement.CheckpointOf; sess, this session's name, without one);
// link is the link's name, for the error.
func preserveTail(prior *statestore.View, sess, link string, parts []Placement) error {
	for _, pc := range parts {
		ck, of := pc.Checkpoint, sess
		if pc.CheckpointOf != "" {
			of = pc.CheckpointOf // a partition that moved between the link's sessions
		}
		lv, ok := prior.Links[of]
		if !ok || lv.Delivery != statestore.DeliveryPreserve || lv.Clean() {
			continue
		}
		if ck == nil || pc.DstEnd <= ck.DestNextOffset {
			continue
		}
		return fmt.Errorf("destination %s holds offsets %d to %d past the checkpoint of the previous session (%s), which ran in preserve delivery and did not stop cleanly: "+
			"only preserve delivery can reconcile those appends, and resuming at the checkpoint in transactional delivery would append them again. "+
			"Run link %q once more with delivery = \"preserve\" until it is MIRRORING, stop it cleanly (SIGTERM or mirrord pause), then switch it to transactional delivery",
			pc.Dst, ck.DestNextOffset, pc.DstEnd-1, of, link)
	}
	return nil
}

// commitRecords appends state records to the state topic in the session's
// transaction and commits it.
func (s *txnSession) commitRecords(ctx context.Context, recs []statestore.Record) error {
	// The first transaction under a producer ID records it
	// (MirrorTxnProducer), so that a link in the other direction can tell
	// the batches under it from its destination's own (DESIGN §16). That
	// transaction holds no data at the session's start (the first commit
	// claims the link), and the first data under a new ID when transaction
	// protocol 2 gives the producer one at a commit; either way a reader
	// that saw a committed batch under the ID finds the record.
	id, _ := s.txn.Producer()
	if id != s.recordedPID {
		recs = append(slices.Clip(recs), statestore.Record{
			Key:   statestore.TxnProducerKey{LinkName: s.l.sess, ProducerID: id},
			Value: statestore.TxnProducerValue{SourceClusterID: s.srcID, DestinationClusterID: s.dstID, TimestampMs: s.l.deps.Now().UnixMilli()},
		})
	}
	if err := s.commitState(ctx, recs); err != nil {
		return err
	}
	s.recordedPID = id
	return nil
}

// commitState appends recs to the state topic in the session's
// transaction and commits it.
func (s *txnSession) commitState(ctx context.Context, recs []statestore.Record) error {
	batches, err := statestore.Batches(s.stateTopic.Topic, s.stateParts, recs, s.l.deps.Now())
	if err != nil {
		return err
	}
	keys := make([]tp.Key, 0, len(batches))
	for p := range batches {
		keys = append(keys, tp.Key{Topic: s.stateTopic.Topic, Partition: p})
	}
	const why = "transactional delivery commits the link's checkpoints in the session's transactions"
	if err := s.txn.Add(ctx, keys); err != nil {
		return s.explainTopic(err, s.stateTopic.Topic, why)
	}
	for p, b := range batches {
		sp := s.stateTopic
		sp.Partition = p
		state := s.appendTo
		state.Uncounted = true // the metrics count mirrored batches
		if _, err := s.txn.Append(ctx, state, s.txnLs, sp, b); err != nil {
			return s.explainTopic(err, s.stateTopic.Topic, why)
		}
	}
	return s.explain(s.txn.End(ctx, true))
}

// explain makes a fenced producer's error statestore.ErrFenced, which the
// lifecycle answers by standing by, and names the permission behind a
// refusal of the session's transactional requests, with the destination
// cluster and the principal: InitProducerId, AddPartitionsToTxn, Produce
// and EndTxn need Write on the link's transactional ID (which implies the
// Describe its FindCoordinator needs); Produce and AddPartitionsToTxn need
// Write on the topic (explainTopic). A transactional producer needs
// no IdempotentWrite on the cluster.
// An error explained once (a commit's, which the plan reports again) is
// not explained again.
func (s *txnSession) explain(err error) error {
	var done explained
	switch {
	case err == nil || errors.As(err, &done):
		return err
	case errors.Is(err, appender.ErrTxnFenced) && !errors.Is(err, statestore.ErrFenced):
		return fmt.Errorf("%w: %w", statestore.ErrFenced, err)
	case errors.Is(err, kerr.TransactionalIDAuthorizationFailed):
		return explained{s.l.acl.dst.Refused(kmsg.ACLOperationWrite, "TransactionalId:"+statestore.TransactionalID(s.l.sess),
			fmt.Sprintf("transactional delivery: each session of link %q takes it with InitProducerId, which fences the previous session, and appends and commits every transaction under it; Write implies the Describe that finding its coordinator needs", s.l.sess), err)}
	}
	return err
}

// explainTopic is explain for a request that writes topic: a topic
// refusal names Write on it, and why.
func (s *txnSession) explainTopic(err error, topic, why string) error {
	var done explained
	if errors.Is(err, kerr.TopicAuthorizationFailed) && !errors.As(err, &done) {
		return explained{s.l.acl.dst.RefusedTopic(kmsg.ACLOperationWrite, topic, why, err)}
	}
	return s.explain(err)
}

// explained is an error explain named the permission of.
type explained struct{ error }

func (e explained) Unwrap() error { return e.error }

// txnCommitter runs the session's commits one at a time; the final one gets
// its own deadline, as it runs after the agent's context ended.
func (s *txnSession) txnCommitter() error {
	for {
		select {
		case <-s.ctx.Done():
			return nil
		case c := <-s.commits:
			ctx, cancel := s.ctx, context.CancelFunc(func() {})
			if c.final {
				ctx, cancel = context.WithTimeout(s.ctx, s.l.cfg.ShutdownTimeout)
			}
			began := time.Now()
			err := s.commitRecords(ctx, c.records)
			cancel()
			s.log.Debug("committed the session's transaction", "records", len(c.records), "final", c.final, "took", time.Since(began), "error", err)
			s.inputs.Put(txnInCommitted{err: err})
		}
	}
}

// run steps the plan with what the fetcher, the appends, the committer and
// the workers report, and carries out its actions, until the session ends:
// ctx ends (a final commit with STOPPED), an operator pauses (PAUSED), or
// it fails. mirroring is called once the initial partitions are assigned.
func (s *txnSession) run(ctx context.Context, mirroring func() error) (Trigger, error) {
	l := s.l
	s.publishTopics()
	defer l.txnTopics.Store(nil)
	ck := time.NewTicker(l.cfg.Link.CheckpointInterval)
	defer ck.Stop()
	disc := time.NewTicker(l.cfg.Link.DiscoveryInterval)
	defer disc.Stop()
	tick := time.NewTicker(tickInterval)
	defer tick.Stop()
	drainTimer := time.NewTimer(time.Hour)
	drainTimer.Stop()
	defer drainTimer.Stop()
	var (
		drain       <-chan time.Time
		stopping    = OnStop
		stopped     bool
		entered     bool
		discovering bool
	)
	// Offset translation, group sync and failover read the plan's
	// committed positions through queries, as a preserve session's
	// pipeline; the session is live while the lease of its last
	// successful commit holds (moverView.Live says how long a fenced
	// one may still seem live).
	var leaseEnd atomic.Int64
	o := &online{queries: s.queries, done: make(chan struct{}), logs: s.logs, discover: make(chan struct{}, 1),
		leaseValid: func(now time.Time) bool { return now.UnixMilli() < leaseEnd.Load() }}
	l.online.Store(o)
	defer func() {
		l.online.Store(nil)
		close(o.done)
	}()
	apply := func(in any) (bool, error) {
		end, err := s.apply(in)
		if t := s.plan.leaseEnd(); !t.IsZero() {
			leaseEnd.Store(t.UnixMilli())
		}
		return end, err
	}
	// discover starts a topic discovery unless one runs or the session
	// stops (on the interval, or asked for by a failover).
	discover := func() {
		if discovering || stopped {
			return
		}
		discovering = true
		known := s.plan.known()
		s.txnWork(func(ctx context.Context) any { return s.discoverAll(ctx, known) })
	}
	stop := func(ev Trigger, state statestore.LinkState) (bool, error) {
		if stopped {
			return false, nil
		}
		stopped, stopping = true, ev
		drainTimer.Reset(l.cfg.ShutdownTimeout)
		drain = drainTimer.C
		return apply(txnInStop{state: state})
	}
	done := ctx.Done()
	if l.pausing() {
		if end, err := stop(OnPause, statestore.Paused); end || err != nil {
			return s.result(stopping, err)
		}
	}
	for {
		var in any
		select {
		case <-done:
			done = nil
			if l.crash != nil && l.crash() {
				return OnStop, nil
			}
			if end, err := stop(OnStop, statestore.Stopped); end || err != nil {
				return s.result(stopping, err)
			}
			continue
		case <-l.cmd.wake:
			if l.pausing() {
				if end, err := stop(OnPause, statestore.Paused); end || err != nil {
					return s.result(stopping, err)
				}
			}
			continue
		case <-s.ctx.Done():
			return OnFail, context.Cause(s.ctx)
		case r := <-s.fetch.Results():
			in = txnInFetched{r: r}
		case <-s.inputs.Wake():
			for _, e := range s.inputs.Take() {
				switch e := e.(type) {
				case InDiscovered:
					discovering = false
					if len(e.Created) > 0 {
						if end, err := apply(txnInRecords{recs: e.Created}); end || err != nil {
							return s.result(stopping, err)
						}
					}
					if e.Err != nil {
						l.met.error("discovery")
						s.log.Warn("topic discovery failed; the link keeps mirroring what it has", "error", e.Err)
						continue
					}
					if len(e.Gone) > 0 {
						return OnFail, fmt.Errorf("source partitions %v are gone (topic deleted or recreated): the session starts again without them", e.Gone)
					}
					var fresh []Pair
					for _, pr := range e.Pairs {
						if _, ok := s.plan.parts[pr.Src.Key()]; !ok {
							fresh = append(fresh, pr)
						}
					}
					if len(fresh) > 0 {
						discovering = true
						s.txnWork(func(ctx context.Context) any { return s.placeNew(ctx, fresh) })
					}
					continue
				case InPlaced:
					discovering = false
					if e.Err != nil {
						l.met.error("discovery")
						s.log.Warn("placing new partitions failed; retried at the next discovery", "error", e.Err)
						continue
					}
					e2 := txnInAdd{parts: e.Parts}
					if end, err := apply(e2); end || err != nil {
						return s.result(stopping, err)
					}
					s.placedSome(e)
					continue
				}
				if end, err := apply(e); end || err != nil {
					return s.result(stopping, err)
				}
			}
			if !entered {
				entered = true
				if err := mirroring(); err != nil {
					return OnFail, err
				}
				s.askDiscovery(o)
			}
			continue
		case <-ck.C:
			in = txnInCommitDue{now: l.deps.Now()}
		case q := <-s.queries:
			q.fn(s.plan)
			close(q.done)
			continue
		case <-o.discover:
			discover()
			continue
		case <-disc.C:
			discover()
			continue
		case <-tick.C:
			s.publishTxn()
			if entered {
				s.askDiscovery(o)
			}
			continue
		case <-drain:
			s.log.Warn("the final commit did not complete within the shutdown timeout; the next session aborts the open transaction and resumes at the last checkpoint")
			return stopping, nil
		}
		if end, err := apply(in); end || err != nil {
			return s.result(stopping, err)
		}
	}
}

// result is how run ends after apply said the session is over.
func (s *txnSession) result(stopping Trigger, err error) (Trigger, error) {
	s.publishTxn()
	if err != nil {
		return OnFail, err
	}
	return stopping, nil
}

// apply steps the plan with one input and carries out its actions. It
// reports whether the session is over, and the error that failed it.
func (s *txnSession) apply(in any) (bool, error) {
	var (
		end bool
		err error
	)
	for _, a := range s.plan.step(s.l.deps.Now(), in) {
		switch a := a.(type) {
		case txnDoAssign:
			s.fetch.Assign(a.src, a.offset, a.gen)
		case txnDoUnassign:
			s.fetch.Unassign(a.src)
		case txnDoRelease:
			s.fetch.Release(a.pin)
		case txnDoAppend:
			// The sequences are reserved here, in the order the plan
			// starts the partition's appends; a re-encoded batch
			// reserves its own once re-encoded (it goes alone).
			var r *appender.Reservation
			if !a.reencode {
				var rerr error
				if r, rerr = s.txn.Reserve(a.pair.Dst.Key(), a.offsets); rerr != nil {
					s.inputs.Put(txnInAppended{p: a.pair.Src.Key(), id: a.id, err: rerr})
					continue
				}
			}
			s.txnWork(func(ctx context.Context) any { return s.appendOne(ctx, a, r) })
		case txnDoCommit:
			select {
			case s.commits <- a:
			default:
				panic("link: a transactional commit while another is in flight")
			}
		case txnDoFinish:
			end = true
		case txnDoFail:
			end, err = true, s.explain(a.err)
		default:
			panic(fmt.Sprintf("link: transactional plan action %T", a))
		}
	}
	s.reportTxn()
	if n := len(s.plan.order); n != s.published {
		s.publishTxn()
	}
	return end, err
}

// txnWork runs fn on a worker goroutine of the session and hands what it
// returns to the link goroutine.
func (s *txnSession) txnWork(fn func(ctx context.Context) any) {
	s.g.Go(func() error {
		if ev := fn(s.ctx); ev != nil && s.ctx.Err() == nil {
			s.inputs.Put(ev)
		}
		return nil
	})
}

// appendOne appends one batch (re-encoded first when it has offset gaps or
// begins before the partition's start) in the session's transaction, under
// the sequences r reserved (a re-encoded batch, with r nil, reserves its
// own).
func (s *txnSession) appendOne(ctx context.Context, a txnDoAppend, r *appender.Reservation) txnInAppended {
	if len(a.run) > 0 {
		return s.appendRun(ctx, a, r)
	}
	res := txnInAppended{p: a.pair.Src.Key(), id: a.id}
	raw := a.raw
	if a.reencode {
		re := s.reencoder()
		out, _, err := re.ReencodeFrom(nil, raw, -1, a.from) // into a buffer of its own
		s.keep(re)
		if errors.Is(err, transform.ErrEmptyBatch) {
			res.empty = true // no record at or after a.from: nothing to append
			return res
		}
		if err != nil {
			res.err = fmt.Errorf("source %s: re-encode the batch at offset %d: %w", a.pair.Src, a.from, err)
			return res
		}
		raw, res.reencode = out, true
	}
	h, err := transform.ParseHeader(raw)
	if err == nil && r == nil {
		r, err = s.txn.Reserve(a.pair.Dst.Key(), h.LastOffsetDelta+1)
	}
	if err != nil {
		if r != nil {
			s.txn.Abandon(r)
		}
		res.err = fmt.Errorf("source %s: %w", a.pair.Src, err)
		return res
	}
	const why = "mirrord appends the mirrored batches in the session's transactions"
	if err := s.txn.Add(ctx, []tp.Key{a.pair.Dst.Key()}); err != nil {
		s.txn.Abandon(r)
		res.err = s.explainTopic(err, a.pair.Dst.Topic, why)
		return res
	}
	res.base, err = s.txn.AppendReserved(ctx, s.appendTo, s.txnLs, a.pair.Dst, raw, r)
	res.err = s.explainTopic(err, a.pair.Dst.Topic, why)
	res.n = int64(h.LastOffsetDelta) + 1
	return res
}

// appendRun appends a run of batches (coalesce.go) under the sequences r
// reserved for all of them: joined into one batch (transform.Merge) when
// that batch stays within the run's limit, else one by one, each under its
// part of r's sequences.
func (s *txnSession) appendRun(ctx context.Context, a txnDoAppend, r *appender.Reservation) txnInAppended {
	res := txnInAppended{p: a.pair.Src.Key(), id: a.id}
	bs := append([][]byte{a.raw}, a.run...)
	hs := make([]transform.Header, len(bs))
	counts := make([]int32, len(bs))
	for i, b := range bs {
		h, err := transform.ParseHeader(b)
		if err != nil {
			s.txn.Abandon(r)
			res.err = fmt.Errorf("source %s: batch %d of a run of %d to join: %w", a.pair.Src, i+1, len(bs), err)
			return res
		}
		hs[i], counts[i] = h, h.LastOffsetDelta+1
	}
	const why = "mirrord appends the mirrored batches in the session's transactions"
	if err := s.txn.Add(ctx, []tp.Key{a.pair.Dst.Key()}); err != nil {
		s.txn.Abandon(r)
		res.err = s.explainTopic(err, a.pair.Dst.Topic, why)
		return res
	}
	re := s.reencoder()
	start := time.Now()
	// joined is a buffer of its own (Join into nil), the append's until
	// the client is done with it: re goes back at once.
	joined, err := re.Join(nil, bs, transform.MergeHeader{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Transactional: true})
	took := time.Since(start)
	s.keep(re)
	if _, corrupt := errors.AsType[*transform.CorruptError](err); corrupt {
		s.txn.Abandon(r)
		res.err = fmt.Errorf("source %s: %w", a.pair.Src, err)
		return res
	}
	limit := a.limit
	if s.l.joinedLimit > 0 {
		limit = s.l.joinedLimit
	}
	merged := err == nil && int64(len(joined)) <= limit
	s.l.met.joined(took, hs[0].Compression(), len(bs), merged)
	if merged {
		res.base, err = s.txn.AppendReserved(ctx, s.appendTo, s.txnLs, a.pair.Dst, joined, r)
		if res.err = s.explainTopic(err, a.pair.Dst.Topic, why); res.err != nil {
			return res
		}
		res.merged = true
		for _, h := range hs {
			res.bases = append(res.bases, res.base+(h.BaseOffset-hs[0].BaseOffset))
		}
		last := hs[len(hs)-1]
		res.n = last.NextOffset() - hs[0].BaseOffset
		return res
	}
	// Not joinable after all (Merge's rules), or larger than the limit
	// once joined: one by one.
	rs, err := s.txn.Split(r, counts)
	if err != nil {
		s.txn.Abandon(r)
		res.err = fmt.Errorf("destination %s: send the run of source offsets %d-%d one batch at a time: %w", a.pair.Dst, hs[0].BaseOffset, hs[len(hs)-1].NextOffset()-1, err)
		return res
	}
	for i, b := range bs {
		base, err := s.txn.AppendReserved(ctx, s.appendTo, s.txnLs, a.pair.Dst, b, rs[i])
		if err != nil {
			for _, rest := range rs[i+1:] {
				s.txn.Abandon(rest)
			}
			res.err = s.explainTopic(err, a.pair.Dst.Topic, why)
			return res
		}
		res.bases = append(res.bases, base)
	}
	res.base = res.bases[0]
	res.n = res.bases[len(bs)-1] + int64(counts[len(bs)-1]) - res.base
	return res
}

// reportTxn adds the plan's new counts, and the producer's overtaken
// batches, to the link's totals and metrics.
func (s *txnSession) reportTxn() {
	if n := s.txn.Overtaken(); n > s.overtaken {
		s.plan.counts.Add(BatchesOvertaken, n-s.overtaken)
		s.overtaken = n
	}
	s.reportCounts(s.plan.counts.Get)
}

// publishTxn refreshes the status snapshot and the lag gauges.
func (s *txnSession) publishTxn() {
	s.publishPartitions(s.plan.partitions(s.l.deps.Now()))
	s.publishTopics()
}

// publishTopics offers config sync the topics the session mirrors, one
// entry per destination topic, in destination name order.
func (s *txnSession) publishTopics() {
	seen := map[string]bool{}
	out := []mirrored{}
	for _, k := range s.plan.order {
		pr := s.plan.parts[k].pair
		if !seen[pr.Dst.Topic] {
			seen[pr.Dst.Topic] = true
			out = append(out, mirrored{src: pr.Src.Topic, dst: pr.Dst.Topic, dstID: pr.Dst.ID})
		}
	}
	slices.SortFunc(out, func(a, b mirrored) int { return strings.Compare(a.dst, b.dst) })
	s.l.txnTopics.Store(&out)
}

// close ends the session's goroutines and releases its clients; the open
// transaction, if any, is left to the next session's InitProducerId (or
// the coordinator's timeout) to abort.
func (s *txnSession) close() {
	if s.closed {
		return
	}
	s.session.close()
	if s.txnCl != nil {
		s.txnCl.Close()
	}
	if s.plan != nil {
		for _, k := range s.plan.order {
			s.l.met.dropPartitionLag(k.Topic, k.Partition)
		}
	}
}
