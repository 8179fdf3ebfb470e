package link

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/seed83556561/mirrord/appender"
	"github.com/seed83556561/mirrord/barrier"
	"github.com/seed83556561/mirrord/fetcher"
	"github.com/seed83556561/mirrord/internal/kafka/access"
	"github.com/seed83556561/mirrord/internal/kafka/describe"
	"github.com/seed83556561/mirrord/internal/kafka/leaders"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/internal/mailbox"
	"github.com/seed83556561/mirrord/statestore"
	"github.com/seed83556561/mirrord/transform"
	"github.com/seed83556561/mirrord/translate"
	"github.com/seed83556561/mirrord/twin"
)

// session is one session of a link: from PREPARING until the link leaves
// MIRRORING. It owns the clients, the state-topic session, the fetcher, the
// appender and the pipeline. Its goroutines (fetcher, appender, committer
// and the workers) run in g and end when the session closes; the pipeline
// is stepped on the link's goroutine only.
type session struct {
	l   *Link
	log hclog.Logger

	ctx    context.Context // the session's: canceled by close, or by the first goroutine that fails
	cancel context.CancelCauseFunc
	g      *errgroup.Group

	src, dst               *kgo.Client
	srcAdm, dstAdm         *kadm.Client
	srcLeaders, dstLeaders *leaders.Cache
	srcID, dstID           string
	region                 transform.Region
	// claimBase is the link's producer (LinkProducer) when this session's
	// standby began its stagger before it took the link over, nil when it
	// took the link without one: claimedMeanwhile compares it with the
	// producer right before the session's InitProducerId.
	claimBase *statestore.TxnProducer
	// claimRecord is the link's record this session's standby took the
	// link over from (a clean stop or a lapsed lease), nil when it took a
	// link without one: claimedMeanwhile compares it with the record
	// checkOthers' replay found.
	claimRecord *statestore.LinkValue
	// slotView is the replay takeSlot decided on, which checkOthers uses
	// instead of replaying the state topic again right after it.
	slotView *statestore.View
	// placeLater: PREPARING left partitions of topics it created
	// unplaced, which the destination did not serve yet (place): a
	// discovery places them as soon as the session mirrors
	// (askDiscovery). fresh names those topics; set in PREPARING, read
	// by placeNew's workers after.
	placeLater  bool
	fresh       map[string]bool
	returns     transform.Returns // what is not sent back (DESIGN §16)
	sameCluster bool

	store *statestore.Store
	state *statestore.Session
	fetch *fetcher.Fetcher
	app   *appender.Appender
	pipe  *Pipeline

	// inputs carries what the committer and the workers report to the
	// link goroutine, as the pipeline's inputs. It holds at most one per
	// outstanding action: one commit, one discovery or placement, one
	// settle per partition, one tail read and one source lookup per
	// reconciling partition.
	inputs  *mailbox.Box[Input]
	commits chan DoCommit // to the committer; the pipeline keeps one in flight
	// joiners are the Reencoders of the joins in preserve delivery
	// (DoJoin, join): a bounded pool that also bounds how many run.
	joiners chan *transform.Reencoder
	// queries are other goroutines' reads of the pipeline (online.ask),
	// run by the event loop; logs translates offsets over clients of the
	// session's own.
	queries      chan query
	logs         *translate.Logs // offset translations' readers
	trSrc, trDst *kgo.Client     // logs' clients
	// origins learns the producer IDs at the source of batches that
	// started at the destination though their region does not say so
	// (transactional links' sessions, salted mappings; nil when the link
	// checks no origin).
	origins *statestore.Origins

	reported Counts // the pipeline's counters already added to the link's totals
	// reportedDiscovery: the pipeline's discovery failures already counted.
	reportedDiscovery int64
	published         int // partitions in the last published status
	closed            bool
}

// begin is PREPARING up to the pipeline (DESIGN §8): connect, resolve
// cluster IDs and regions, begin the state session (fencing the previous
// one), replay the state topic, wait out the previous session's lease,
// create or grow destination topics and look up where every partition
// resumes. run then reconciles and commits the barriers. On error the
// session is closed.
func (l *Link) begin(ctx context.Context, standby standbyMode, last *handover) (_ *session, err error) {
	s := &session{
		l:       l,
		log:     l.log,
		inputs:  mailbox.New[Input](),
		commits: make(chan DoCommit, 1),
		queries: make(chan query),
		joiners: newJoiners(),
	}
	// The session's goroutines outlive ctx: when the agent stops, appends
	// in flight drain and a final checkpoint commits before close cancels
	// them.
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
		if !s.claimedMeanwhile(ctx, view, nil) {
			break
		}
	}
	s.state, err = s.store.Begin(ctx, l.sess, l.cfg.Link.SessionTimeout,
		statestore.SourceCluster(s.srcID), statestore.DestinationCluster(s.dstID),
		statestore.Agent(l.cfg.Agent, l.cfg.Link.Fingerprint(s.srcID, s.dstID)),
		statestore.AppendTimeout(l.cfg.Link.ProduceTimeout),
		statestore.OnCommitRetry(func(string, error) { l.met.add(StateCommitRetries, 1) }))
	if err != nil {
		return nil, err // it says "begin state session of link ..."
	}
	l.setStatus(func(st *Status) { st.SessionEpoch = s.state.Epoch() })
	view, err := s.store.Replay(ctx)
	if err != nil {
		return nil, err
	}
	// The session commits at once and then at least every third of its
	// timeout while it prepares: a state transaction is the session's
	// lease, and kfake (unlike Kafka) opens a transaction under the new
	// epoch when a fenced zombie produces, then fences the new session if
	// nothing commits within the transaction timeout. The first commit
	// also records the destination topics an earlier session of this
	// process created and could not record (it ended first).
	if err := s.keepalive(ctx, l.owned.merge(l.cfg.Link.Name, view)...); err != nil {
		return nil, err
	}
	if err := s.waitLease(ctx, view, last); err != nil {
		return nil, err
	}

	pairs, created, fresh, err := s.discoverFresh(ctx)
	if len(created) > 0 {
		// The record that the link created them commits before
		// anything else of the session.
		if cerr := s.keepalive(ctx, created...); cerr != nil {
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

	if s.fetch, err = s.newFetcher(); err != nil {
		return nil, err
	}
	if s.app, err = appender.New(appender.Config{
		Link:           l.sess,
		RequestTimeout: l.cfg.Link.ProduceTimeout,
	}, appender.Deps{
		Client: s.dst, Leaders: s.dstLeaders, Logger: l.deps.Logger, Metrics: l.deps.AppenderMetrics, Now: l.deps.Now,
		Lease: s.state.LeaseDeadline,
	}); err != nil {
		return nil, err
	}
	s.pipe = NewPipeline(PipelineConfig{
		OnOutOfRange:        l.cfg.Link.OnOffsetOutOfRange,
		Link:                l.sess,
		SourceCluster:       s.srcID,
		Region:              s.region,
		Returns:             s.returns,
		SharedDestination:   l.cfg.Link.SharedDestination,
		ProducerStateExpiry: l.cfg.Link.ProducerStateExpiry,
		Rand:                l.deps.Rand,
		ProduceTimeout:      l.cfg.Link.ProduceTimeout,
		SettleDelay:         l.cfg.Link.SettleDelay,
		ExhaustGrace:        l.cfg.Tuning.ExhaustGrace,
		MaxReconciling:      l.cfg.Tuning.MaxReconciling,
		CoalesceBytes:       l.cfg.Link.CoalesceBytes,
	})
	s.goRun(func() error { return s.fetch.Run(s.ctx) })
	s.goRun(func() error { return s.app.Run(s.ctx) })
	s.goRun(s.committer)
	s.inputs.Put(InAdd{Parts: parts, Initial: true})
	return s, nil
}

// connect is what both delivery modes' sessions begin with: the clients of
// both clusters (and the translations' own), the cluster IDs and the
// source's region, and the state topic, ensured.
func (s *session) connect(ctx context.Context) (err error) {
	l := s.l
	if s.src, err = kgo.NewClient(l.deps.SourceOpts...); err != nil {
		return fmt.Errorf("source cluster %s client: %w", l.cfg.Source.Name, err)
	}
	if s.dst, err = kgo.NewClient(l.deps.DestinationOpts...); err != nil {
		return fmt.Errorf("destination cluster %s client: %w", l.cfg.Destination.Name, err)
	}
	s.srcAdm, s.dstAdm = kadm.NewClient(s.src), kadm.NewClient(s.dst)
	s.srcLeaders, s.dstLeaders = leaders.New(s.src, 0), leaders.New(s.dst, 0)

	if s.srcID, err = leaders.ClusterID(ctx, s.src, l.cfg.Source.Name, l.cfg.Source.ClusterID); err != nil {
		return err
	}
	if s.dstID, err = leaders.ClusterID(ctx, s.dst, l.cfg.Destination.Name, l.cfg.Destination.ClusterID); err != nil {
		return err
	}
	s.sameCluster = s.srcID == s.dstID
	var hashed bool
	s.region, hashed = transform.RegionOf(s.srcID)
	// The destination's region is what the reverse link maps its
	// source's producers into: a batch carrying it started at the
	// destination and is not sent back (DESIGN §16). Both ends of a link
	// within one cluster are home: it checks nothing.
	s.returns = transform.ReturnsOf(s.srcID, s.dstID, l.cfg.Link.ReturnHome, l.cfg.Link.SkipUnattributed)
	if s.returns.Check {
		// Links from the destination into the source record, in their
		// state topic there, the producer IDs they appended under that
		// do not carry the destination's region: their transactional
		// sessions' and their salted mappings (DESIGN §16).
		if s.origins, err = statestore.NewOrigins(statestore.OriginsConfig{
			Topic: l.cfg.Link.StateTopic, SourceOpts: l.deps.SourceOpts,
			SourceClusterID: s.srcID, DestinationClusterID: s.dstID,
			Strict: l.cfg.Link.SkipUnattributed, Logger: l.log,
			OnRead: func() { l.met.add(OriginReads, 1) }, Principal: l.cfg.Source.Principal,
		}); err != nil {
			return err
		}
		s.returns.Sessions = s.origins.Sessions()
	}
	if hashed {
		s.log.Warn("source cluster ID is not a UUID; its region is derived from its SHA-256. Pin cluster_id in the cluster block if this cluster's ID can change",
			"cluster", l.cfg.Source.Name, "cluster_id", s.srcID, "region", uint32(s.region))
	}
	s.log = l.log.With("source_cluster_id", s.srcID)
	// Translations get clients of their own: on the session's, a fetch
	// would queue behind the fetcher's long polls on the same connection.
	if s.trSrc, err = kgo.NewClient(l.deps.SourceOpts...); err != nil {
		return fmt.Errorf("source cluster %s client: %w", l.cfg.Source.Name, err)
	}
	if s.trDst, err = kgo.NewClient(l.deps.DestinationOpts...); err != nil {
		return fmt.Errorf("destination cluster %s client: %w", l.cfg.Destination.Name, err)
	}
	srcLogs := translate.NewCluster(s.trSrc)
	if s.origins != nil {
		srcLogs = srcLogs.Screened(s.origins.Learn)
	}
	s.logs = &translate.Logs{Source: srcLogs, Destination: translate.NewCluster(s.trDst),
		From: twin.Source{Cluster: s.srcID, Region: s.region, Returns: s.returns}, Now: l.deps.Now,
		Stamped: l.cfg.Link.Delivery == statestore.DeliveryTransactional}
	if s.origins != nil {
		s.logs.Reverse = s.origins.Reverse
	}
	l.setStatus(func(st *Status) { st.SourceClusterID, st.DestinationClusterID = s.srcID, s.dstID })

	s.store, err = statestore.New(statestore.Config{
		Topic:             l.cfg.Link.StateTopic,
		Partitions:        l.cfg.Link.StateTopicPartitions,
		ReplicationFactor: l.cfg.Link.StateTopicReplicationFactor,
		Principal:         l.cfg.Destination.Principal,
	}, statestore.Deps{ClientOpts: l.deps.DestinationOpts, Logger: l.deps.Logger, Now: l.deps.Now})
	if err != nil {
		return err
	}
	if err := s.store.Ensure(ctx); err != nil {
		return err
	}
	return nil
}

// newFetcher is the session's reader of the source, in either delivery
// mode.
func (s *session) newFetcher() (*fetcher.Fetcher, error) {
	l := s.l
	return fetcher.New(fetcher.Config{
		Link:             l.sess,
		MaxWait:          l.cfg.Tuning.FetchMaxWait,
		MaxBufferedBytes: l.cfg.Link.MaxBufferedBytes,
		OnOutOfRange:     l.cfg.Link.OnOffsetOutOfRange,
		CheckCRCs:        l.cfg.Link.CheckCRCs,
	}, fetcher.Deps{Client: s.src, Leaders: s.srcLeaders, Logger: l.deps.Logger, Metrics: l.deps.FetcherMetrics, Screen: s.screen()})
}

// screen is the fetcher's Screen: the origins of producer IDs whose region
// does not tell are learnt before a fetched batch is decided (nil when the
// link checks no origin).
func (s *session) screen() func(ctx context.Context, hs []transform.Header) error {
	if s.origins == nil {
		return nil
	}
	return s.origins.Learn
}

// goRun starts a goroutine of the session; an error it returns ends the
// session with that error as the context's cause.
func (s *session) goRun(fn func() error) {
	s.g.Go(func() error {
		err := fn()
		if err != nil {
			s.cancel(err)
		}
		return err
	})
}

// keepalive commits the link record (state PREPARING), renewing the
// lease, and recs with it.
func (s *session) keepalive(ctx context.Context, recs ...statestore.Record) error {
	if err := s.state.Commit(ctx, Preparing, recs...); err != nil {
		return fmt.Errorf("commit PREPARING: %w", err)
	}
	return nil
}

// waitLease waits, renewing its own lease, until the previous session's
// appends can no longer land (DESIGN §7, §12 I2): until its recorded lease
// plus the clock-skew margin plus its produce timeout, unless it recorded a
// clean stop. When the previous session was this process's own and the
// link record is still the one it wrote, what it left unresolved decides:
// nothing at all, or its produce timeout from its end.
func (s *session) waitLease(ctx context.Context, view *statestore.View, last *handover) error {
	cfg := s.l.cfg
	now := s.l.deps.Now()
	wait := view.LeaseWait(s.l.sess, now, cfg.Tuning.LeaseSkew, cfg.Link.ProduceTimeout)
	if lv, ok := view.Links[s.l.sess]; ok && last != nil && lv.SessionEpoch == last.epoch && wait > 0 {
		own := time.Duration(0)
		if last.unresolved > 0 {
			own = max(last.at.Add(cfg.Link.ProduceTimeout+cfg.Link.SettleDelay).Sub(now), 0)
		}
		s.log.Info("the previous session was this process's own; waiting only for what it left unresolved",
			"unresolved_appends", last.unresolved, "wait", own.Round(time.Millisecond), "lease_wait", wait.Round(time.Millisecond))
		wait = min(wait, own)
	}
	if wait <= 0 {
		return nil
	}
	s.log.Info("waiting out the previous session's lease and produce timeout before reconciling", "wait", wait.Round(time.Millisecond))
	for wait > 0 {
		step := min(wait, cfg.Link.SessionTimeout/3)
		if err := s.l.pausableSleep(ctx, step); err != nil {
			return err
		}
		wait -= step
		if err := s.keepalive(ctx); err != nil {
			return err
		}
	}
	return nil
}

// place looks up where partitions joining the session resume: their
// checkpoints and salts in view, where start_from puts them at the source,
// and the destination's log start and end offsets. The pipeline decides
// from these (Pipeline.join).
//
// fresh names destination topics this session has just created: empty,
// with no checkpoint and nothing to reconcile. Their partitions that the
// destination does not serve yet, while others answer, are not waited
// for but returned in later, to be placed when a discovery finds them
// (placeLater); every other partition is waited for (listLed).
func (s *session) place(ctx context.Context, view *statestore.View, pairs []Pair, fresh map[string]bool) (_ []Placement, later []Pair, _ error) {
	if len(pairs) == 0 {
		return nil, nil, nil
	}
	var srcTopics, dstTopics []string
	for _, pr := range pairs {
		srcTopics = append(srcTopics, pr.Src.Topic)
		dstTopics = append(dstTopics, pr.Dst.Topic)
	}
	srcTopics, dstTopics = uniq(srcTopics), uniq(dstTopics)
	var (
		srcOffs kadm.ListedOffsets
		err     error
	)
	srcParts, dstParts := make([]tp.Partition, len(pairs)), make([]tp.Partition, len(pairs))
	for i, pr := range pairs {
		srcParts[i], dstParts[i] = pr.Src, pr.Dst
	}
	srcOffs, _, err = listLed(ctx, srcParts, nil, func() (kadm.ListedOffsets, error) {
		if s.l.cfg.Link.StartFrom == StartLatest {
			return s.srcAdm.ListCommittedOffsets(ctx, srcTopics...)
		}
		return s.srcAdm.ListStartOffsets(ctx, srcTopics...)
	})
	if err != nil {
		return nil, nil, fmt.Errorf("list source offsets: %w", err)
	}
	var isFresh func(tp.Partition) bool
	if len(fresh) > 0 {
		isFresh = func(p tp.Partition) bool { return fresh[p.Topic] }
	}
	listStarts := func() (kadm.ListedOffsets, error) { return s.dstAdm.ListStartOffsets(ctx, dstTopics...) }
	listEnds := func() (kadm.ListedOffsets, error) { return s.dstAdm.ListEndOffsets(ctx, dstTopics...) }
	if isFresh != nil {
		listStarts = func() (kadm.ListedOffsets, error) { return s.listServed(ctx, dstParts, -2) }
		listEnds = func() (kadm.ListedOffsets, error) { return s.listServed(ctx, dstParts, -1) }
	}
	dstStarts, notStarted, err := listLed(ctx, dstParts, isFresh, listStarts)
	if err != nil {
		return nil, nil, fmt.Errorf("list destination start offsets: %w", err)
	}
	dstEnds, notEnded, err := listLed(ctx, dstParts, isFresh, listEnds)
	if err != nil {
		return nil, nil, fmt.Errorf("list destination end offsets: %w", err)
	}
	salts := barrier.Salts(view)
	var compacted, dstCompacted map[string]bool
	var maxBytes map[string]int64
	if s.l.cfg.Link.CoalesceBytes > 0 {
		compacted, dstCompacted, maxBytes = s.joinSettings(ctx, srcTopics, dstTopics)
	}
	out := make([]Placement, 0, len(pairs))
	for _, pr := range pairs {
		if k := pr.Dst.Key(); notStarted[k] || notEnded[k] {
			later = append(later, pr)
			continue
		}
		pc := Placement{Pair: pr, Compacted: compacted[pr.Src.Topic] || dstCompacted[pr.Dst.Topic], MaxMessageBytes: maxBytes[pr.Dst.Topic]}
		if maxBytes != nil && maxBytes[pr.Dst.Topic] <= 0 {
			pc.Compacted = true // its limit is unknown: nothing is joined
		}
		if ck, of, ok := s.l.checkpoint(view, pr.Dst); ok {
			pc.Checkpoint, pc.CheckpointOf = &ck, of
		}
		if pc.StartOffset, err = offsetOf(srcOffs, pr.Src, "source start_from"); err != nil {
			return nil, nil, err
		}
		if pc.DstStart, err = offsetOf(dstStarts, pr.Dst, "destination start"); err != nil {
			return nil, nil, err
		}
		if pc.DstEnd, err = offsetOf(dstEnds, pr.Dst, "destination end"); err != nil {
			return nil, nil, err
		}
		pc.Salts = salts[barrier.Partition{TopicID: statestore.UUID(pr.Dst.ID), Partition: pr.Dst.Partition}]
		out = append(out, pc)
	}
	return out, later, nil
}

// join carries out a DoJoin off the event loop (on the session's work
// group): the run's batches joined into a new buffer, the append's until
// it is answered, with the time it took counted in
// mirrord_coalesce_seconds_total. At most GOMAXPROCS joins run at once,
// each with a Reencoder of the session's (joiners); the others wait for
// one.
func (s *session) join(ctx context.Context, a DoJoin) Input {
	var re *transform.Reencoder
	select {
	case re = <-s.joiners:
	case <-ctx.Done():
		return nil
	}
	defer func() { s.joiners <- re }()
	start := time.Now()
	out, err := re.Join(nil, a.Batches, a.Header)
	if h, herr := transform.ParseHeader(a.Batches[0]); herr == nil {
		s.l.met.joinTime(time.Since(start), h.Compression())
	}
	return InJoined{Dst: a.Dst.Key(), Tag: a.Tag, Out: out, Err: err}
}

// newJoiners is the session's pool of Reencoders for joins: GOMAXPROCS of
// them, which bounds how many joins run at once.
func newJoiners() chan *transform.Reencoder {
	n := runtime.GOMAXPROCS(0)
	ch := make(chan *transform.Reencoder, n)
	for range n {
		ch <- transform.NewReencoder()
	}
	return ch
}

// joinSettings reads what coalescing needs to know of the topics (a
// session joining a backlog's small batches, coalesce.go): which source
// topics and which destination topics are compacted (cleanup.policy holds
// compact), whose batches are never joined, and each destination topic's
// max.message.bytes (as the destination applies it, its broker's default
// included), which a joined batch must not exceed. A compacted
// destination's cleaner would cut joined batches, which reconciliation
// cannot place (it would take them for foreign). A topic whose settings
// cannot be read gets nothing joined, and the reason is logged.
func (s *session) joinSettings(ctx context.Context, srcTopics, dstTopics []string) (compacted, dstCompacted map[string]bool, maxBytes map[string]int64) {
	compacted, dstCompacted = make(map[string]bool, len(srcTopics)), make(map[string]bool, len(dstTopics))
	maxBytes = make(map[string]int64, len(dstTopics))
	read := func(cl *kgo.Client, side string, topics []string, take func(topic string, c kadm.Config)) {
		// Each topic's answer on its own: one topic refused leaves
		// the others joined (describe.TopicConfigs).
		rcs, err := describe.TopicConfigs(ctx, cl, topics...)
		for _, t := range topics {
			rc, onErr := rcs.On(t, nil)
			if err == nil && onErr == nil && rc.Err == nil {
				for _, c := range rc.Configs {
					take(t, c)
				}
				continue
			}
			why := err
			if why == nil {
				why = cmp.Or(onErr, rc.Err)
			}
			s.log.Warn("cannot read the topic's settings: its small batches are not joined (coalesce_bytes); grant DescribeConfigs on the topic",
				"cluster", side, "topic", t, "error", why)
			if side == "source" {
				compacted[t] = true
			}
		}
	}
	read(s.src, "source", srcTopics, func(t string, c kadm.Config) {
		if c.Key == "cleanup.policy" && c.Value != nil && strings.Contains(*c.Value, "compact") {
			compacted[t] = true
		}
	})
	read(s.dst, "destination", dstTopics, func(t string, c kadm.Config) {
		if c.Key == "max.message.bytes" && c.Value != nil {
			if v, err := strconv.ParseInt(*c.Value, 10, 64); err == nil {
				maxBytes[t] = v
			}
		}
		if c.Key == "cleanup.policy" && c.Value != nil && strings.Contains(*c.Value, "compact") {
			dstCompacted[t] = true
		}
	})
	return compacted, dstCompacted, maxBytes
}

// placeAttempts bounds how often placement lists offsets while partitions
// answer a retriable error: with metadataRetry's waits, about 20 s.
const placeAttempts = 10

// deferPlacement notes partitions PREPARING left to a discovery (place's
// later) and says so.
func (s *session) deferPlacement(later []Pair) {
	if len(later) == 0 {
		return
	}
	s.placeLater = true
	s.log.Info("partitions of topics this session created are not served by the destination yet; mirroring the others, and adding these once the destination serves them",
		"partitions", len(later), "first", later[0].Dst.String())
}

// askDiscovery starts the discovery that places what PREPARING left
// (deferPlacement), once the session mirrors, and again at a tick after
// each placement that left some of them (placedSome) until none is left:
// each places what the destination serves by then. A round in which
// none is served waits in listLed first.
func (s *session) askDiscovery(o *online) {
	if !s.placeLater {
		return
	}
	s.placeLater = false
	select {
	case o.discover <- struct{}{}:
	default: // one is asked for already
	}
}

// placedSome notes a placement (InPlaced) that left partitions for later:
// the session's next tick asks for the discovery that places them
// (askDiscovery), so that a round places what the destination took up in
// a second, not each partition alone (a round replays the state topic and
// commits barriers: at 1,000 partitions, rounds without a pause were 50 to
// 160, and cost preserve delivery four times its CPU per GB).
func (s *session) placedSome(e InPlaced) {
	if e.Err == nil && e.Later {
		s.placeLater = true
	}
}

// listLed runs list until every partition of parts has a leader that
// answers: a topic the link has just created answers NOT_LEADER_OR_FOLLOWER
// (or UNKNOWN_TOPIC_OR_PARTITION) for a while as its brokers take up the
// partitions, which is no reason to fail PREPARING. A retriable error left
// after placeAttempts is reported by offsetOf, naming the partition; any
// other error of a partition at once.
//
// A partition for which later says true need not wait: once some
// partition of parts answers, such partitions that still answer a
// retriable error are returned in notReady instead of waited for. A broker
// takes up a new topic's partitions one by one (120-190 a second on Kafka
// 4.4.0 while it also deleted a topic: bench/README.md), so that waiting
// for the last of 1,000 kept every other one from mirroring for seconds.
func listLed(ctx context.Context, parts []tp.Partition, later func(tp.Partition) bool, list func() (kadm.ListedOffsets, error)) (_ kadm.ListedOffsets, notReady map[tp.Key]bool, _ error) {
	var (
		offs    kadm.ListedOffsets
		listErr error // of the request as a whole, in the last attempt
	)
	err := metadataRetry.Retry(ctx, placeAttempts, func() error {
		if offs, listErr = list(); listErr != nil {
			return listErr
		}
		var waitErr error
		answered := false
		for _, p := range parts {
			o, ok := offs.Lookup(p.Topic, p.Partition)
			switch {
			case !ok:
			case o.Err == nil:
				answered = true
			case kerr.IsRetriable(o.Err) && (later == nil || !later(p)):
				return o.Err
			case kerr.IsRetriable(o.Err):
				waitErr = o.Err
			}
		}
		if !answered {
			return waitErr // nil when there is nothing to wait for
		}
		return nil
	}, access.IsRefusal)
	switch {
	case listErr != nil:
		return nil, nil, listErr
	case err != nil && ctx.Err() != nil:
		return nil, nil, err
	}
	if later != nil {
		for _, p := range parts {
			if o, ok := offs.Lookup(p.Topic, p.Partition); ok && o.Err != nil && kerr.IsRetriable(o.Err) && later(p) {
				if notReady == nil {
					notReady = make(map[tp.Key]bool)
				}
				notReady[p.Key()] = true
			}
		}
	}
	return offs, notReady, nil
}

// offsetOf is p's offset in a listing, or an error naming p.
func offsetOf(offs kadm.ListedOffsets, p tp.Partition, what string) (int64, error) {
	o, ok := offs.Lookup(p.Topic, p.Partition)
	switch {
	case !ok:
		return 0, fmt.Errorf("%s offset of %s: not in the answer", what, p)
	case o.Err != nil:
		return 0, fmt.Errorf("%s offset of %s: %w", what, p, o.Err)
	}
	return o.Offset, nil
}

func uniq(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}

// checkpoint is the checkpoint of destination partition dst to resume
// from, and the session of the link that wrote it: this session's own, or,
// when the partition moved between the link's sessions (slots turned on,
// off or changed), the latest (statestore.View.LatestCheckpoint;
// checkOthers makes the sessions of a partition take turns).
func (l *Link) checkpoint(view *statestore.View, dst tp.Partition) (statestore.CheckpointValue, string, bool) {
	return view.LatestCheckpoint(l.cfg.Link.Name, l.sess, statestore.UUID(dst.ID), dst.Partition)
}

// errOtherSessions: a session of the link with other settings may still
// append.
var errOtherSessions = errors.New("another session of the link with other settings may still append")

// checkOthers refuses to begin while a session of the link other than
// this one (the link without slots, or another slot), run with other
// settings (Settings.Fingerprint, which holds the number of slots), holds
// a lease or may still have appends in a broker: its partitions may be
// this session's, and two sessions of a partition would both append to
// it. Sessions of the same settings own disjoint partitions. The session
// retries with the link's backoff, so it starts once the other stopped
// cleanly or its lease and produce timeout passed.
func (s *session) checkOthers(ctx context.Context) (*statestore.View, error) {
	view := s.slotView
	s.slotView = nil
	if view == nil {
		var err error
		if view, err = s.store.ReplayCommitted(ctx, s.l.sess); err != nil {
			return nil, err
		}
	}
	fp := s.l.cfg.Link.Fingerprint(s.srcID, s.dstID)
	now := s.l.deps.Now()
	for _, name := range slices.Sorted(maps.Keys(view.Links)) {
		lv := view.Links[name]
		if name == s.l.sess || !statestore.SessionOf(s.l.cfg.Link.Name, name) || lv.Fingerprint == fp {
			continue
		}
		wait := view.LeaseWait(name, now, s.l.cfg.Tuning.LeaseSkew, s.l.cfg.Link.ProduceTimeout)
		if wait <= 0 {
			continue
		}
		agent := lv.Agent
		if agent == "" {
			agent = "an agent without a name"
		}
		return nil, fmt.Errorf("%w: session %s of link %q (%s, agent %s, settings fingerprint %s; this session's %s, %s) holds the link's lease or may have appends in a broker for %s more; "+
			"stop the agents that run the link with the other settings (a changed slots value needs every agent stopped, then started with the new value); this session starts once that session stopped cleanly or its lease lapsed",
			errOtherSessions, name, s.l.cfg.Link.Name, slotsOf(name, s.l.cfg.Link.Name), agent, lv.Fingerprint, s.l.sess, fp, wait.Round(time.Millisecond))
	}
	return view, nil
}

// slotsOf describes session name of link: the link without slots, or a
// slot.
func slotsOf(name, link string) string {
	if name == link {
		return "the link without slots"
	}
	return "slot " + strings.TrimPrefix(name, link+".")
}

// standbyMode says when a session that begins waits for another one.
type standbyMode uint8

const (
	// standbyOther: wait while another agent's session (by the agents'
	// names) holds a live lease: it is mirroring, and taking the link
	// from it would only move the link (a second replica starting, or
	// restarting, beside the one that mirrors). A session of this agent
	// (a restart) or of an agent without a name is taken over at once,
	// fencing it.
	standbyOther standbyMode = iota
	// standbyFenced: this agent's last session was fenced by a newer one,
	// which is mirroring: wait while any other session holds a live
	// lease; taking the link back at once would fence it in turn.
	standbyFenced
	// standbySlot: the session of one slot of a link with slots, which the
	// slots group gave this agent: it takes the slot at once (its
	// InitProducerId fences the slot's previous session; in preserve
	// delivery waitLease still waits out a lease that did not end
	// cleanly), after checking that the previous holder's settings are
	// this agent's.
	standbySlot
)

// errSettingsDiffer: another agent runs the link with other settings.
var errSettingsDiffer = errors.New("another agent runs the link with other settings")

// standBy waits, as mode says, while another session of the link holds a
// live lease. It returns when that lease lapses or the other session
// records a clean stop, and fails when the other session's agent runs the
// link with other settings (Settings.Fingerprint): the agents'
// configurations must agree before either may take the link from the
// other.
func (s *session) standBy(ctx context.Context, mode standbyMode) error {
	own, fp := s.l.cfg.Agent, s.l.cfg.Link.Fingerprint(s.srcID, s.dstID)
	if mode == standbyOther && own == "" {
		return nil // no name: nothing tells another agent's session from this one's
	}
	if mode == standbySlot {
		return s.takeSlot(ctx)
	}
	defer s.l.setStatus(func(st *Status) { st.StandingBy = "" })
	name := s.l.sess
	var (
		waited    string // the agent this one stood by for
		staggered bool   // waited its stagger since the holder's last record
		lv        statestore.LinkValue
		ok        bool
		fol       *statestore.Follower
	)
	for {
		if fol == nil {
			// Before this session's InitProducerId: a transaction its
			// last session left open is not waited for (that would take
			// the transaction timeout); the InitProducerId that follows
			// aborts it.
			view, err := s.store.ReplayCommitted(ctx, name)
			if err != nil {
				return err
			}
			lv, ok = view.Links[name]
			if p, next, found := view.LinkRecordAt(name); found && ok {
				// Follow the partition of the link's record: a clean stop
				// or a lease no longer renewed shows as soon as it is
				// committed, without a replay of the whole topic.
				if fol, err = s.store.Follow(ctx, p, next); err != nil {
					s.log.Debug("standby: cannot follow the link's record; replaying the state topic instead", "error", err)
					fol = nil
				}
			}
		}
		left := time.UnixMilli(lv.LeaseExpiresMs).Sub(s.l.deps.Now())
		other := own != "" && lv.Agent != "" && lv.Agent != own
		switch {
		case !ok:
			return nil
		case lv.Clean() || left <= 0:
			if (own != "" || waited != "") && fol != nil && !staggered {
				// Other standbys saw the same record at the same moment;
				// each waits a stagger of its own first, and stands by for
				// whichever claimed the link meanwhile instead of fencing
				// it (a spurious sessions_fenced for a normal takeover): a
				// claim shows as its commit, or, before that, as its
				// InitProducerId moving the link's producer. An agent that
				// restarted and finds its own session's record staggers
				// too: the standbys saw that record first and may be
				// taking the link (TestThreeAgents, all agents restarted).
				staggered = true
				before, berr := s.store.LinkProducer(ctx, name)
				s.claimBase = nil
				if berr == nil {
					s.claimBase = &before
				}
				changed, err := s.followLink(ctx, fol, standbyStagger(s.l.cfg.Link.SessionTimeout), &lv, &ok)
				if err != nil && (ctx.Err() != nil || errors.Is(err, errPaused)) {
					return err
				}
				if err != nil {
					fol = nil
				}
				if changed || err != nil {
					continue
				}
				if after, aerr := s.store.LinkProducer(ctx, name); berr == nil && aerr == nil && after != before && (after.ID != before.ID || after.Epoch != before.Epoch) {
					s.log.Info("another agent began a session of the link during this standby's stagger; standing by for its claim",
						"producer_id", after.ID, "epoch", after.Epoch)
					staggered = false // its claim commits, or this standby staggers again
					continue
				}
			}
			// The link moves to this agent: say why, for the operator who
			// reads how the agents handed it on.
			if other || waited != "" {
				cause := "its session stopped cleanly (" + lv.State.String() + ")"
				if !lv.Clean() {
					cause = fmt.Sprintf("its lease lapsed %s ago without a clean stop (a crash, or it lost the destination)", (-left).Round(time.Millisecond))
				}
				s.log.Info("taking over the link", "from_agent", lv.Agent, "session_epoch", lv.SessionEpoch, "cause", cause)
			}
			// A takeover of a free link, also this agent's own after a
			// restart (no stagger: it takes its link back at once): a
			// standby that takes it at the same moment fences this
			// session before its first commit, a takeover lost, not a
			// fight over the link (Link.fail).
			s.l.tookOver = true
			seen := lv
			s.claimRecord = &seen
			if f := s.l.beforeClaimCheck; f != nil {
				f()
			}
			return nil
		}
		if mode == standbyOther && !other {
			return nil
		}
		if other && lv.Fingerprint != "" && lv.Fingerprint != fp {
			return settingsDiffer(lv, name, fp)
		}
		holder := lv.Agent
		if holder == "" {
			holder = "another session"
		}
		if holder != waited {
			s.log.Info("standing by: another session holds the link", "agent", lv.Agent, "session_epoch", lv.SessionEpoch, "lease_left", left.Round(time.Millisecond))
		}
		waited, staggered = holder, false
		s.l.setStatus(func(st *Status) { st.StandingBy = holder })
		wait := min(left+10*time.Millisecond, s.l.cfg.Link.SessionTimeout/3)
		if fol == nil {
			if err := s.l.pausableSleep(ctx, wait); err != nil {
				return err
			}
			continue
		}
		if _, err := s.followLink(ctx, fol, wait, &lv, &ok); err != nil {
			if ctx.Err() != nil || errors.Is(err, errPaused) {
				return err
			}
			s.log.Debug("standby: following the link's record failed; replaying the state topic instead", "error", err)
			fol = nil
		}
	}
}

// settingsDiffer is the error for another agent's session of the link
// (named name) whose settings' fingerprint lv records is not fp.
func settingsDiffer(lv statestore.LinkValue, name, fp string) error {
	return fmt.Errorf("%w: agent %q runs link %q with settings whose fingerprint is %s, this agent's are %s; make the link's block equal in both agents' configurations (topics, rename, start_from, state_topic, delivery, on_offset_out_of_range, unattributed, return_home, shared_destination, producer_state_expiry, groups, share_groups, config_sync, acl_sync, destination_replication_factor, slots, and the clusters); until then this agent does not run the link",
		errSettingsDiffer, lv.Agent, name, lv.Fingerprint, fp)
}

// takeSlot is standBy for a slot's session (standbySlot): the slots group
// gave the slot to this agent, so it takes it at once, saying from whom and
// why. As standBy does, it refuses while the slot's holder ran the link with
// other settings and may still run it (its lease runs, no clean stop): two
// configurations of one link never run at once. A holder with other
// settings that stopped cleanly or whose lease lapsed is taken over, the
// change logged: a change of settings is every agent stopped and started
// again, and the slots group need not give a slot back to the agent that
// ran it.
func (s *session) takeSlot(ctx context.Context) error {
	own, fp := s.l.cfg.Agent, s.l.cfg.Link.Fingerprint(s.srcID, s.dstID)
	view, err := s.store.ReplayCommitted(ctx, s.l.sess)
	if err != nil {
		return err
	}
	s.slotView = view   // checkOthers, right after, needs no replay of its own
	s.l.tookOver = true // fenced before its first commit: the group moved the slot on meanwhile
	lv, ok := view.Links[s.l.sess]
	if !ok {
		return nil
	}
	other := own != "" && lv.Agent != "" && lv.Agent != own
	left := time.UnixMilli(lv.LeaseExpiresMs).Sub(s.l.deps.Now())
	differ := lv.Fingerprint != "" && lv.Fingerprint != fp
	if other && differ && !lv.Clean() && left > 0 {
		return settingsDiffer(lv, s.l.sess, fp)
	}
	cause := "its session stopped cleanly (" + lv.State.String() + ")"
	switch {
	case lv.Clean():
	case left <= 0:
		cause = fmt.Sprintf("its lease lapsed %s ago without a clean stop (a crash, or it lost the destination)", (-left).Round(time.Millisecond))
	default:
		cause = fmt.Sprintf("the slots group moved the slot while its lease has %s left (its agent left the group or lost it)", left.Round(time.Millisecond))
	}
	kv := []any{"from_agent", lv.Agent, "session_epoch", lv.SessionEpoch, "cause", cause}
	if differ {
		kv = append(kv, "settings_changed", fmt.Sprintf("the previous holder's fingerprint %s, this agent's %s", lv.Fingerprint, fp))
	}
	s.log.Info("taking over the slot", kv...)
	return nil
}

// claimedMeanwhile says whether another session of the link began since
// this session's standby decided to take the link over. It asks right
// before the session's InitProducerId, which would fence that session.
// Two signs of a claim are checked:
//   - the link's record in view (checkOthers' replay, after the standby's
//     decision) is no longer the one the standby took the link over from
//     (claimRecord): another session committed its claim. The producer
//     alone does not show this under transaction version 1 (Kafka 3.x, or
//     a cluster left at transaction.version 1), where a commit does not
//     move the epoch: a session whose InitProducerId came before this
//     standby's stagger began and whose first commit came after it ended
//     looked unchanged, and was fenced once it mirrored
//     (TestStandbyClaimCommittedAfterStagger);
//   - the link's producer moved since the standby's stagger began
//     (claimBase): another session's InitProducerId, before it commits.
//     Between the check at the end of the stagger and the InitProducerId
//     lie a replay of the state topic (checkOthers), a version lookup and
//     a new client, long enough for another standby that passed its
//     check meanwhile to begin and reach MIRRORING.
//
// A session that took the link without a record or without a stagger has
// nothing to compare. cl, when not nil, is the client whose InitProducerId
// follows (a transactional session's): the producer is asked through it.
func (s *session) claimedMeanwhile(ctx context.Context, view *statestore.View, cl *kgo.Client) bool {
	base, seen := s.claimBase, s.claimRecord
	s.claimBase, s.claimRecord = nil, nil
	if seen != nil && view != nil {
		if now, ok := view.Links[s.l.sess]; ok && now != *seen {
			s.log.Info("another agent claimed the link after this standby decided to take it; standing by for its claim",
				"agent", now.Agent, "session_epoch", now.SessionEpoch, "state", now.State.String())
			return true
		}
	}
	if base == nil {
		return false
	}
	var (
		now statestore.TxnProducer
		err error
	)
	if cl != nil {
		now, err = statestore.LinkProducerWith(ctx, cl, s.l.sess)
	} else {
		now, err = s.store.LinkProducer(ctx, s.l.sess)
	}
	if err != nil {
		// The check is an optimisation over fencing (a takeover lost at
		// worst), not a condition of it.
		s.log.Debug("standby: cannot check the link's producer again before taking the link; taking it", "error", err)
		return false
	}
	if now.ID == base.ID && now.Epoch == base.Epoch {
		return false
	}
	s.log.Info("another agent began a session of the link after this standby's claim check; standing by for its claim",
		"producer_id", now.ID, "epoch", now.Epoch)
	return true
}

// standbyStagger is how long a standby waits, once the holder stopped or
// its lease lapsed, before it takes the link: random, up to a tenth of
// the session timeout and at most 2 s, so that standbys that saw the
// same record mostly take turns. Two that still start together are
// resolved by fencing (a lost takeover, not counted as a fenced session).
func standbyStagger(sessionTimeout time.Duration) time.Duration {
	window := min(2*time.Second, sessionTimeout/10)
	if window <= 0 {
		return 0
	}
	return rand.N(window)
}

// followLink reads the partition of the link's record for at most wait,
// and returns once a record of the link arrived (applied to lv and ok:
// its newest value, or a deletion; changed), when wait has passed, or
// when the link is paused.
func (s *session) followLink(ctx context.Context, fol *statestore.Follower, wait time.Duration, lv *statestore.LinkValue, ok *bool) (changed bool, err error) {
	deadline := time.Now().Add(wait)
	for {
		if s.l.pausing() {
			return false, errPaused
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false, nil
		}
		recs, err := fol.Next(ctx, min(left, 500*time.Millisecond))
		if err != nil {
			return false, err
		}
		for _, raw := range recs {
			rec, err := statestore.Decode(raw.Key, raw.Value)
			if err != nil {
				continue // another link's or a newer agent's record; the replay logs those
			}
			if k, isLink := rec.Key.(statestore.LinkKey); isLink && k.LinkName == s.l.sess {
				v, isValue := rec.Value.(statestore.LinkValue)
				*lv, *ok, changed = v, isValue, true
			}
		}
		if changed {
			return true, nil
		}
	}
}

// pausableSleep sleeps d unless ctx ends or an operator pauses the link
// (or had paused it: a pause stands until a resume).
func (l *Link) pausableSleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		if l.pausing() {
			return errPaused
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		case <-l.cmd.wake:
		}
	}
}

// close ends the session's goroutines and releases its clients. The state
// session is closed without a final commit (the pipeline's stop does the
// final checkpoint).
func (s *session) close() {
	if s.closed {
		return
	}
	s.closed = true
	s.cancel(errClosed)
	_ = s.g.Wait()
	if s.state != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.state.Close(ctx)
		cancel()
	}
	if s.store != nil {
		s.store.Close()
	}
	if s.origins != nil {
		s.origins.Close()
	}
	if s.src != nil {
		s.src.Close()
	}
	if s.dst != nil {
		s.dst.Close()
	}
	for _, cl := range []*kgo.Client{s.trSrc, s.trDst} {
		if cl != nil {
			cl.Close()
		}
	}
	if s.pipe != nil {
		for _, p := range s.pipe.Partitions(s.l.deps.Now()) {
			s.l.met.dropPartitionLag(p.SourceTopic, p.Partition)
		}
	}
}

var errClosed = errors.New("session closed")
