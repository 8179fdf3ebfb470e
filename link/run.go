package link

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/seed83556561/mirrord/appender"
	"github.com/seed83556561/mirrord/barrier"
	"github.com/seed83556561/mirrord/fetcher"
	"github.com/seed83556561/mirrord/internal/kafka/leaders"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/statestore"
	"github.com/seed83556561/mirrord/transform"
)

// run is one session of a link: from PREPARING until the link leaves
// MIRRORING. It owns the clients, the state-topic session, the fetcher and
// the appender, and the per-partition pipeline state. Its goroutines
// (fetcher, appender, committer, discovery and settle workers) run in g and
// end when the run closes; everything else runs on the link's goroutine.
type run struct {
	l   *Link
	log hclog.Logger

	ctx    context.Context // the run's context: canceled by close
	cancel context.CancelFunc
	g      *errgroup.Group

	src, dst               *kgo.Client
	srcAdm, dstAdm         *kadm.Client
	srcLeaders, dstLeaders *leaders.Cache
	srcID, dstID           string
	region                 transform.Region
	sameCluster            bool

	store *statestore.Store
	sess  *statestore.Session
	fetch *fetcher.Fetcher
	app   *appender.Appender
	reenc *transform.Reencoder

	parts        []*part
	bySrc, byDst map[tp.Key]*part
	maxPending   int // the appender's bound on batches and results; at least one per partition

	commits   chan commitReq // to the committer
	committed chan commitRes // from the committer
	workDone  chan func()    // results of discovery and settle workers, run on the link goroutine

	pump pump

	errMu sync.Mutex
	gErr  error // first error a run goroutine returned

	closed bool
	gen    uint64 // the last fetcher generation given
}

// goRun starts a goroutine of the run; its error, if any, fails the run.
func (r *run) goRun(fn func() error) {
	r.g.Go(func() error {
		err := fn()
		if err != nil {
			r.errMu.Lock()
			if r.gErr == nil {
				r.gErr = err
			}
			r.errMu.Unlock()
		}
		return err
	})
}

// runErr is why the run's context ended.
func (r *run) runErr() error {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	if r.gErr != nil {
		return r.gErr
	}
	return errClosed
}

// deliver hands fn to the link goroutine, unless the run ends first.
func (r *run) deliver(fn func()) {
	select {
	case r.workDone <- fn:
	case <-r.ctx.Done():
	}
}

// prepare is PREPARING (DESIGN §8): connect, resolve cluster IDs and
// regions, begin the session (fencing the previous one), replay the state
// topic, wait out the previous lease, create or grow destination topics,
// reconcile destination tails, commit the barrier with the resume
// checkpoints, reset the producer state, and start fetching. On error the
// run is closed.
func (l *Link) prepare(ctx context.Context, standby bool) (_ *run, err error) {
	r := &run{
		l:         l,
		log:       l.log,
		bySrc:     make(map[tp.Key]*part),
		byDst:     make(map[tp.Key]*part),
		commits:   make(chan commitReq, 16),
		committed: make(chan commitRes, 16),
		workDone:  make(chan func(), 16),
		reenc:     transform.NewReencoder(),
	}
	// The run's goroutines outlive ctx: when the agent stops, in-flight
	// appends drain and a final checkpoint is committed before close
	// cancels them.
	r.ctx, r.cancel = context.WithCancel(context.WithoutCancel(ctx))
	r.g, r.ctx = errgroup.WithContext(r.ctx)
	defer func() {
		if err != nil {
			r.close()
		}
	}()

	if r.src, err = kgo.NewClient(l.deps.SourceOpts...); err != nil {
		return nil, fmt.Errorf("source cluster %s client: %w", l.cfg.Source.Name, err)
	}
	if r.dst, err = kgo.NewClient(l.deps.DestinationOpts...); err != nil {
		return nil, fmt.Errorf("destination cluster %s client: %w", l.cfg.Destination.Name, err)
	}
	r.srcAdm, r.dstAdm = kadm.NewClient(r.src), kadm.NewClient(r.dst)
	r.srcLeaders, r.dstLeaders = leaders.New(r.src, 0), leaders.New(r.dst, 0)

	if r.srcID, err = clusterID(ctx, r.srcAdm, l.cfg.Source.Name, l.cfg.Source.ClusterID); err != nil {
		return nil, err
	}
	if r.dstID, err = clusterID(ctx, r.dstAdm, l.cfg.Destination.Name, l.cfg.Destination.ClusterID); err != nil {
		return nil, err
	}
	r.sameCluster = r.srcID == r.dstID
	var hashed bool
	r.region, hashed = transform.RegionOf(r.srcID)
	if hashed {
		r.log.Warn("source cluster ID is not a UUID; its region is derived from its SHA-256. Pin cluster_id in the cluster block if this cluster's ID can change",
			"cluster", l.cfg.Source.Name, "cluster_id", r.srcID, "region", uint32(r.region))
	}
	r.log = l.log.With("source_cluster_id", r.srcID)
	l.setStatus(func(s *Status) { s.SourceClusterID, s.DestinationClusterID = r.srcID, r.dstID })

	r.store, err = statestore.New(statestore.Config{
		Topic:             l.cfg.Link.StateTopic,
		Partitions:        l.cfg.Link.StateTopicPartitions,
		ReplicationFactor: l.cfg.Link.StateTopicReplicationFactor,
	}, statestore.Deps{ClientOpts: l.deps.DestinationOpts, Logger: l.deps.Logger, Now: l.deps.Now})
	if err != nil {
		return nil, err
	}
	if err := r.store.Ensure(ctx); err != nil {
		return nil, err
	}
	if standby {
		if err := r.standBy(ctx); err != nil {
			return nil, err
		}
	}
	r.sess, err = r.store.Begin(ctx, l.cfg.Link.Name, l.cfg.Link.SessionTimeout,
		statestore.SourceCluster(r.srcID), statestore.DestinationCluster(r.dstID))
	if err != nil {
		return nil, fmt.Errorf("begin state session: %w", err)
	}
	l.setStatus(func(s *Status) { s.SessionEpoch = r.sess.Epoch() })
	view, err := r.store.Replay(ctx)
	if err != nil {
		return nil, err
	}
	wait := view.LeaseWait(l.cfg.Link.Name, l.deps.Now(), l.cfg.LeaseSkew, l.cfg.RequestTimeout)
	// The session commits at once and then at least every third of its
	// timeout while it prepares: a state transaction is the session's
	// lease, and kfake (unlike Kafka) opens a transaction under the new
	// epoch when a fenced zombie produces, then fences the new session
	// if nothing commits within the transaction timeout.
	if err := r.keepalive(ctx); err != nil {
		return nil, err
	}
	if wait > 0 {
		r.log.Info("waiting out the previous session's lease before reconciling", "wait", wait.Round(time.Millisecond))
		for wait > 0 {
			step := min(wait, l.cfg.Link.SessionTimeout/3)
			if err := l.pausableSleep(ctx, step); err != nil {
				return nil, err
			}
			wait -= step
			if err := r.keepalive(ctx); err != nil {
				return nil, err
			}
		}
	}

	pairs, err := r.discover(ctx)
	if err != nil {
		return nil, err
	}
	for _, pr := range pairs {
		r.addPart(r.newPart(pr))
	}
	r.replaySalts(view, r.parts)
	if err := r.positions(ctx, view, r.parts); err != nil {
		return nil, err
	}

	if r.fetch, err = fetcher.New(fetcher.Config{
		Link:             l.cfg.Link.Name,
		MaxWait:          l.cfg.FetchMaxWait,
		MaxBufferedBytes: l.cfg.Link.MaxBufferedBytes,
		OnOutOfRange:     l.cfg.Link.OnOffsetOutOfRange,
		CheckCRCs:        l.cfg.CheckCRCs,
	}, fetcher.Deps{Client: r.src, Leaders: r.srcLeaders, Logger: l.deps.Logger, Metrics: l.deps.FetcherMetrics}); err != nil {
		return nil, err
	}
	r.maxPending = max(appender.DefaultMaxPending, 2*len(r.parts))
	if r.app, err = appender.New(appender.Config{
		Link:           l.cfg.Link.Name,
		RequestTimeout: l.cfg.RequestTimeout,
		MaxPending:     r.maxPending,
	}, appender.Deps{
		Client: r.dst, Leaders: r.dstLeaders, Logger: l.deps.Logger, Metrics: l.deps.AppenderMetrics, Now: l.deps.Now,
		MaySend: func() bool { return r.sess.LeaseValid(l.deps.Now()) },
	}); err != nil {
		return nil, err
	}
	r.goRun(func() error { return r.fetch.Run(r.ctx) })
	r.goRun(func() error { return r.app.Run(r.ctx) })
	r.goRun(r.committer)

	if err := r.reconcile(ctx, r.parts); err != nil {
		return nil, err
	}
	if err := r.emitBarriers(ctx, r.parts); err != nil {
		return nil, err
	}
	for _, p := range r.parts {
		p.gen = r.assign(p.src, p.srcNext)
	}
	r.publish()
	return r, nil
}

// assign (re)starts fetching p at offset under a new generation.
func (r *run) assign(p tp.Partition, offset int64) uint64 {
	r.gen++
	r.fetch.Assign(p, offset, r.gen)
	return r.gen
}

// keepalive commits the link record (state PREPARING), renewing the lease.
func (r *run) keepalive(ctx context.Context) error {
	if err := r.sess.Commit(ctx, Preparing); err != nil {
		return fmt.Errorf("commit PREPARING: %w", err)
	}
	return nil
}

// clusterID is the cluster's ID as the cluster reports it, unless the
// configuration pins one.
func clusterID(ctx context.Context, adm *kadm.Client, name, pinned string) (string, error) {
	if pinned != "" {
		return pinned, nil
	}
	md, err := adm.Metadata(ctx)
	if err != nil {
		return "", fmt.Errorf("cluster %s: read cluster ID: %w", name, err)
	}
	if md.Cluster == "" {
		return "", fmt.Errorf("cluster %s reports no cluster ID (Kafka before 0.10.1?): set cluster_id in its cluster block", name)
	}
	return md.Cluster, nil
}

// newPart makes the pipeline state of a partition pair.
func (r *run) newPart(pr pair) *part {
	return &part{
		src:         pr.src,
		dst:         pr.dst,
		psm:         transform.NewPSM(transform.PSMConfig{Expiry: r.l.cfg.Link.ProducerStateExpiry, Rand: r.l.deps.Rand}),
		refetchedAt: -1,
	}
}

// addPart adds a partition to the run.
func (r *run) addPart(p *part) {
	r.parts = append(r.parts, p)
	r.bySrc[p.src.Key()] = p
	r.byDst[p.dst.Key()] = p
	r.l.met.partitions.Set(float64(len(r.parts)))
}

// replaySalts applies the replayed barriers and salts, in log order, to the
// partitions' producer state.
func (r *run) replaySalts(view *statestore.View, parts []*part) {
	byID := make(map[barrier.Partition]*transform.PSM, len(parts))
	for _, p := range parts {
		byID[p.barrierPartition()] = p.psm
	}
	// Replayed barriers reset fresh PSMs, which hold nothing yet: no
	// line per historical barrier, one summary.
	st := barrier.Replay(view.Records, func(bp barrier.Partition) *transform.PSM { return byID[bp] }, hclog.NewNullLogger())
	if st.Salts > 0 || st.SaltTombstones > 0 {
		r.log.Info("replayed collision salts", "salts", st.Salts, "tombstones", st.SaltTombstones, "barriers", st.Barriers)
	}
}

func (p *part) barrierPartition() barrier.Partition {
	return barrier.Partition{TopicID: statestore.UUID(p.dst.ID), Partition: p.dst.Partition}
}

// positions sets where each partition resumes: its checkpoint, or for a
// partition the link never checkpointed, start_from at the source and the
// log start at the destination (reconciliation then recognises anything a
// crashed first session appended).
func (r *run) positions(ctx context.Context, view *statestore.View, parts []*part) error {
	var fresh []*part
	for _, p := range parts {
		ck, ok := view.Checkpoints[statestore.CheckpointKey{LinkName: r.l.cfg.Link.Name, TopicID: statestore.UUID(p.dst.ID), Partition: p.dst.Partition}]
		if ok && ck.SourceTopic == p.src.Topic && ck.SourcePartition == p.src.Partition {
			p.srcNext, p.dstNext = ck.SourceNextOffset, ck.DestNextOffset
			p.ckSrc, p.ckDst = p.srcNext, p.dstNext
			continue
		}
		fresh = append(fresh, p)
	}
	if len(fresh) == 0 {
		return nil
	}
	var srcTopics, dstTopics []string
	for _, p := range fresh {
		srcTopics = append(srcTopics, p.src.Topic)
		dstTopics = append(dstTopics, p.dst.Topic)
	}
	srcTopics, dstTopics = uniq(srcTopics), uniq(dstTopics)
	var (
		srcOffs kadm.ListedOffsets
		err     error
	)
	if r.l.cfg.Link.StartFrom == "latest" {
		srcOffs, err = r.srcAdm.ListCommittedOffsets(ctx, srcTopics...)
	} else {
		srcOffs, err = r.srcAdm.ListStartOffsets(ctx, srcTopics...)
	}
	if err != nil {
		return fmt.Errorf("list source offsets: %w", err)
	}
	dstOffs, err := r.dstAdm.ListStartOffsets(ctx, dstTopics...)
	if err != nil {
		return fmt.Errorf("list destination start offsets: %w", err)
	}
	for _, p := range fresh {
		so, ok := srcOffs.Lookup(p.src.Topic, p.src.Partition)
		if !ok || so.Err != nil {
			return fmt.Errorf("source %s: start offset: %v", p.src, so.Err)
		}
		do, ok := dstOffs.Lookup(p.dst.Topic, p.dst.Partition)
		if !ok || do.Err != nil {
			return fmt.Errorf("destination %s: start offset: %v", p.dst, do.Err)
		}
		p.srcNext, p.dstNext = so.Offset, do.Offset
		p.ckSrc, p.ckDst = -1, -1
		r.log.Info("partition has no checkpoint; starting", "source", p.src, "destination", p.dst,
			"start_from", r.l.cfg.Link.StartFrom, "source_offset", p.srcNext, "destination_offset", p.dstNext)
	}
	return nil
}

func uniq(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}

// emitBarriers commits, in one state transaction, a MIRROR_PID_RESET
// barrier and the resume checkpoint for each partition, then resets their
// producer state (DESIGN §8). Nothing is appended to a partition before
// this.
func (r *run) emitBarriers(ctx context.Context, parts []*part) error {
	if len(parts) == 0 {
		return r.sess.Commit(ctx, Mirroring)
	}
	bps := make([]barrier.Partition, 0, len(parts))
	cks := make([]statestore.Record, 0, len(parts))
	now := r.l.deps.Now()
	for _, p := range parts {
		bps = append(bps, p.barrierPartition())
		cks = append(cks, r.checkpointRecord(p, now))
	}
	if err := barrier.Emit(ctx, r.sess, bps, r.srcID, now, cks...); err != nil {
		return fmt.Errorf("commit barrier: %w", err)
	}
	r.l.met.barriers.Add(float64(len(parts)))
	r.l.met.checkpoints.Inc()
	for i, p := range parts {
		p.ckSrc, p.ckDst = p.srcNext, p.dstNext
		barrier.Apply(p.psm, r.log, bps[i])
	}
	return nil
}

func (r *run) checkpointRecord(p *part, now time.Time) statestore.Record {
	return statestore.Record{
		Key: statestore.CheckpointKey{LinkName: r.l.cfg.Link.Name, TopicID: statestore.UUID(p.dst.ID), Partition: p.dst.Partition},
		Value: statestore.CheckpointValue{
			SourceTopic:      p.src.Topic,
			SourcePartition:  p.src.Partition,
			SourceNextOffset: p.srcNext,
			DestNextOffset:   p.dstNext,
			TimestampMs:      now.UnixMilli(),
		},
	}
}

// standBy waits while another session of the link holds a live lease: the
// link was fenced by a newer agent, which is mirroring; taking the link
// back at once would fence it in turn. It returns when that lease lapses or
// the other session records a clean stop.
func (r *run) standBy(ctx context.Context) error {
	for {
		view, err := r.store.Replay(ctx)
		if err != nil {
			return err
		}
		lv, ok := view.Links[r.l.cfg.Link.Name]
		if !ok || lv.Clean() {
			return nil
		}
		left := time.UnixMilli(lv.LeaseExpiresMs).Sub(r.l.deps.Now())
		if left <= 0 {
			return nil
		}
		r.log.Info("standing by: another session holds the link", "session_epoch", lv.SessionEpoch, "lease_left", left.Round(time.Millisecond))
		if err := r.l.pausableSleep(ctx, min(left+10*time.Millisecond, r.l.cfg.Link.SessionTimeout/3)); err != nil {
			return err
		}
	}
}

// pausableSleep sleeps d unless ctx ends or an operator pauses the link.
func (l *Link) pausableSleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		case c := <-l.ctl:
			if c == ctlPause {
				return errPaused
			}
		}
	}
}

// close ends the run's goroutines and releases its clients. The session is
// closed without a final commit (mirror does the final checkpoint).
func (r *run) close() {
	if r.closed {
		return
	}
	r.closed = true
	r.cancel()
	if r.g != nil {
		_ = r.g.Wait()
	}
	if r.sess != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = r.sess.Close(ctx)
		cancel()
	}
	if r.store != nil {
		r.store.Close()
	}
	if r.src != nil {
		r.src.Close()
	}
	if r.dst != nil {
		r.dst.Close()
	}
	for _, p := range r.parts {
		r.l.met.dropPartitionLag(p.src.Topic, p.src.Partition)
	}
}

var errClosed = errors.New("run closed")
