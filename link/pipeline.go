package link

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/seed83556561/mirrord/appender"
	"github.com/seed83556561/mirrord/barrier"
	"github.com/seed83556561/mirrord/fetcher"
	"github.com/seed83556561/mirrord/internal/kafka/leaders"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/statestore"
	"github.com/seed83556561/mirrord/transform"
	"github.com/seed83556561/mirrord/translate"
	"github.com/seed83556561/mirrord/twin"
)

// PipelineConfig configures a Pipeline.
type PipelineConfig struct {
	Link          string
	SourceCluster string
	Region        transform.Region // of SourceCluster
	// Returns says which batches are not sent to the destination: those
	// that started there, and, by the link's policy, those without a
	// producer ID (DESIGN §16).
	Returns transform.Returns
	// SharedDestination: the destination topics have producers of their
	// own (active-active): batches the link did not write are expected,
	// counted apart and not logged as errors.
	SharedDestination bool
	// ProducerStateExpiry is producer_state_expiry; Rand draws collision
	// salts (nil: math/rand).
	ProducerStateExpiry time.Duration
	Rand                func() int64
	// ProduceTimeout and SettleDelay: an append that got no answer may
	// be inside a broker until it was sent plus its produce timeout (and
	// a broker's queueing, which SettleDelay covers): it is settled only
	// after that. One the broker answered is settled at once.
	ProduceTimeout time.Duration
	SettleDelay    time.Duration
	// OnOutOfRange is on_offset_out_of_range: what reconciliation does
	// with source records deleted below the log start that the link
	// cannot show it mirrored (fail, the default; earliest: skip and
	// count them).
	OnOutOfRange fetcher.OutOfRange
	// ExhaustGrace is how long a reconciling partition's source must show
	// nothing committed past the walk's position before the rest of the
	// destination tail is called foreign. Default 3s.
	ExhaustGrace time.Duration
	// MaxReconciling bounds the partitions that reconcile at once, and so
	// the destination tail chunks held (each up to tailChunkBytes).
	// Default 8.
	MaxReconciling int
	// CoalesceBytes is coalesce_bytes: a run of one producer's batches
	// of a partition with a backlog is appended as one batch of at most
	// this many bytes (coalesce.go); 0: never. The join itself is the
	// driver's (DoJoin), off the pipeline's goroutine.
	CoalesceBytes int64
}

// Defaults of PipelineConfig.
const (
	DefaultExhaustGrace   = 3 * time.Second
	DefaultMaxReconciling = 8
	// sourceEndRetry is how often a reconciling partition that waits for
	// its source asks for its last stable offset again.
	sourceEndRetry = time.Second
)

// Pipeline is one link session's pipeline as a pure state machine (DESIGN
// §12): Step takes an event and the current time and returns the actions
// to carry out. It owns every partition's phase, queue, positions and
// producer state; it performs no I/O, reads no clock and starts no
// goroutines, so that every interleaving of faults can be replayed from a
// script (link/testdata). One goroutine steps it.
//
// What it guarantees, by construction:
//   - one batch in flight per destination partition: submit is the only
//     place that emits DoSubmit, and only from phaseIdle (I2);
//   - a batch is appended only after its collision salt committed, and a
//     partition only after its barrier committed (DESIGN §4, §8);
//   - an append of unknown outcome is settled before the partition sends
//     anything else (I2);
//   - reconciliation decides every source batch with twin.Decide, as the
//     pipeline does (I3);
//   - a partition is removed only when the source confirmed it gone (I6);
//   - every fetch result's pin is released exactly once (I7).
type Pipeline struct {
	cfg   PipelineConfig
	src   twin.Source
	reenc *transform.Reencoder

	parts []*partition
	byDst map[key]*partition
	bySrc map[key]*partition

	now time.Time
	out []Action

	gen, tags uint64 // the last fetcher generation and append tag given
	counts    Counts // the counters since the pipeline was built (counters.go)
	// joins are the source batches of each joined batch appended since
	// TakeJoins last took them (the session takes them after each step,
	// which acknowledges at most one append).
	joins []int
	// discoveryFailures counts failed topic discoveries (and placements),
	// which the driver reports as errors of kind discovery.
	discoveryFailures int64

	// State transactions: one in flight at a time.
	commitID      uint64
	committing    *commit
	checkpointDue bool
	salts         []saltReq
	// records are state records to commit with the next transaction
	// (the destination topics a discovery created).
	records []statestore.Record

	initialLeft int  // initial partitions still reconciling
	initialOpen bool // the initial set has not been admitted yet
	mirroring   bool // DoEnterMirroring was emitted
	discovering bool // an DoDiscover or DoPlace is outstanding
	// discoverAgain: a discovery was asked for while one ran (its listing
	// may predate what the asker knows of); it runs once that one ended.
	discoverAgain bool

	stopping      bool
	stopState     State
	drainTimedOut bool
	stopped       bool
	failed        bool
}

// ckPos is a checkpoint a commit records for a partition: its positions and
// the producer state saved with them.
type ckPos struct {
	src, dst  int64
	producers []transform.ProducerEntry
}

// commit is the state transaction in flight and what its success means.
type commit struct {
	id       uint64
	final    bool
	clean    bool
	initial  bool // it admits the initial set (which may be empty)
	admitted []*partition
	salts    []saltReq
	at       map[*partition]ckPos // checkpointed positions
}

// saltReq is a collision salt waiting to be committed.
type saltReq struct {
	p    *partition
	salt transform.Salt
}

// NewPipeline returns a pipeline with no partitions.
func NewPipeline(cfg PipelineConfig) *Pipeline {
	if cfg.ExhaustGrace <= 0 {
		cfg.ExhaustGrace = DefaultExhaustGrace
	}
	if cfg.MaxReconciling <= 0 {
		cfg.MaxReconciling = DefaultMaxReconciling
	}
	return &Pipeline{
		cfg:   cfg,
		src:   twin.Source{Cluster: cfg.SourceCluster, Region: cfg.Region, Returns: cfg.Returns},
		reenc: transform.NewReencoder(),
		byDst: make(map[key]*partition),
		bySrc: make(map[key]*partition),
	}
}

// Step applies one event at time now and returns the actions it calls for,
// in order. The driver carries them out before the next Step.
func (pl *Pipeline) Step(now time.Time, ev Input) []Action {
	pl.now = now
	pl.out = nil
	if pl.failed || pl.stopped {
		// A finished session only gives fetch pins back.
		if e, ok := ev.(InFetched); ok {
			pl.release(e.Result.Pin)
		}
		return pl.out
	}
	switch e := ev.(type) {
	case InAdd:
		pl.add(e.Parts, e.Initial)
	case InFetched:
		pl.fetched(e.Result)
	case InTailRead:
		pl.tailRead(e)
	case InSourceEnd:
		pl.sourceEnd(e)
	case InAppended:
		pl.appended(e.Result)
	case InSettled:
		pl.settled(e)
	case InJoined:
		pl.joined(e)
	case InCommitted:
		pl.committed(e)
	case InDiscovered:
		pl.discovered(e)
	case InPlaced:
		pl.placed(e)
	case InCheckpointDue:
		pl.checkpointDue = true
	case InDiscoveryDue:
		pl.discover()
	case InTick:
		pl.tick()
	case InStop:
		pl.stop(e.State)
	case InDrainTimeout:
		pl.drainTimedOut = true
	default:
		panic(fmt.Sprintf("link: pipeline input %T", ev))
	}
	if !pl.failed {
		pl.startReconciles()
		pl.flushCommits()
	}
	return pl.out
}

func (pl *Pipeline) emit(a Action) { pl.out = append(pl.out, a) }

func (pl *Pipeline) log(level hclog.Level, msg string, args ...any) {
	pl.emit(DoLog{Level: level, Msg: msg, Args: args})
}

// fail ends the session with err, once.
func (pl *Pipeline) fail(err error) {
	if pl.failed {
		return
	}
	pl.failed = true
	pl.emit(DoFail{Err: err})
}

func (pl *Pipeline) release(pin fetcher.Pin) {
	if pin.Bytes() > 0 {
		pl.emit(DoRelease{Pin: pin})
	}
}

// assign (re)starts fetching p at its source position; a reconciling
// partition is fetched so that offsets below the source's log start are
// passed and reported, not judged lost (reconciliation judges).
func (pl *Pipeline) assign(p *partition) {
	pl.dropQueue(p)
	pl.gen++
	p.gen = pl.gen
	pl.emit(DoAssign{Src: p.Src, Offset: p.srcNext, Gen: p.gen, Reconciling: p.phase == phaseReconciling})
}

// unassign stops fetching p and drops its queue.
func (pl *Pipeline) unassign(p *partition) {
	pl.dropQueue(p)
	if p.gen != 0 {
		p.gen = 0
		pl.emit(DoUnassign{Src: p.Src})
	}
}

func (pl *Pipeline) dropQueue(p *partition) {
	for p.pending() > 0 {
		pl.release(p.pop())
	}
}

// ---- partitions joining ----

func (pl *Pipeline) add(parts []Placement, initial bool) {
	if initial {
		pl.initialOpen = true
	}
	for _, pc := range parts {
		if old := pl.byDst[pc.Dst.Key()]; old != nil {
			pl.log(hclog.Warn, "partition added twice; keeping the one the session has", "destination", pc.Dst.String(), "source", pc.Src.String())
			continue
		}
		p := pl.join(pc)
		p.initial = initial
		pl.parts = append(pl.parts, p)
		pl.byDst[p.Dst.Key()] = p
		pl.bySrc[p.Src.Key()] = p
		if pc.DstEnd > p.dstNext {
			p.phase = phaseReconciling
			p.rc = &recon{
				w:      twin.NewWalker(p.psm, pl.src, pl.reenc, p.srcNext, p.dstNext),
				dstPos: p.dstNext,
				dstEnd: pc.DstEnd,
				place:  pc,
				hole:   p.ckDst >= 0 && p.dstNext > p.ckDst,
			}
			p.rc.w.HoleAtGaps() // the tail reader hands it every batch
			if !pc.Compacted {
				// A session may have joined a producer's batches
				// (coalesce.go); never those of a compacted topic,
				// whose batches the walk leaves to twin.Same as
				// before (kfake's cleaner shortens a batch's offset
				// range, which would look like a run's first part).
				p.rc.w.ProducerRuns()
			}
			if p.rc.hole {
				p.rc.w.Hole()
			}
			if initial {
				pl.initialLeft++
			}
			pl.log(hclog.Info, "reconciling destination tail", "destination", p.Dst.String(), "from", p.dstNext, "to", pc.DstEnd,
				"source", p.Src.String(), "source_from", p.srcNext)
			continue
		}
		p.phase = phaseAdmitting
	}
}

// join makes the pipeline state of a joining partition and decides where
// it resumes: its checkpoint if the checkpoint is of this very source
// partition (same topic ID, I5), otherwise start_from at the source.
func (pl *Pipeline) join(pc Placement) *partition {
	p := newPartition(pc.Pair, pl.psmOf(pc))
	p.limit = joinLimit(pl.cfg.CoalesceBytes, pc.Compacted, pc.MaxMessageBytes)
	ck := pc.Checkpoint
	switch {
	case ck != nil && ck.IsOf(pc.Src):
		p.srcNext, p.dstNext = ck.SourceNextOffset, ck.DestNextOffset
		p.ckSrc, p.ckDst, p.ckProducers = p.srcNext, p.dstNext, statestore.ProducerEntries(ck.Producers)
		if pc.DstStart > p.dstNext {
			// DeleteRecords or retention at the destination: with a
			// tail left, reconciliation finds the source batch its
			// first batch mirrors (twin.Walker.Hole).
			pl.log(hclog.Warn, "destination log starts past the checkpoint: records this link appended were deleted at the destination (DeleteRecords or retention); they are not appended again",
				"destination", pc.Dst.String(), "checkpoint_destination_offset", p.dstNext, "destination_log_start", pc.DstStart, "destination_end", pc.DstEnd)
			if pc.DstEnd <= pc.DstStart {
				pl.log(hclog.Error, "the destination deleted everything this link appended past the checkpoint: nothing tells which source records it held, so the link resumes at the checkpoint and appends them again",
					"destination", pc.Dst.String(), "source", pc.Src.String(), "resume_source_offset", p.srcNext, "destination_log_start", pc.DstStart)
			}
			p.dstNext = pc.DstStart
		}
	case ck != nil:
		p.srcNext = pc.StartOffset
		p.dstNext = max(ck.DestNextOffset, pc.DstStart)
		pl.log(hclog.Warn, "the checkpointed source partition is not this one (the source topic was deleted and created again): mirroring the new one from start_from; the destination keeps what the old one mirrored",
			"destination", pc.Dst.String(), "source", pc.Src.String(), "source_topic_id", statestore.UUID(pc.Src.ID).String(),
			"checkpoint_source", fmt.Sprintf("%s[%d]", ck.SourceTopic, ck.SourcePartition), "checkpoint_source_topic_id", ck.SourceTopicID.String(),
			"source_offset", p.srcNext, "destination_offset", p.dstNext)
	default:
		p.srcNext, p.dstNext = pc.StartOffset, pc.DstStart
		pl.log(hclog.Info, "partition has no checkpoint; starting", "source", pc.Src.String(), "destination", pc.Dst.String(),
			"source_offset", p.srcNext, "destination_offset", p.dstNext)
	}
	return p
}

// psmOf is the producer state a partition joining with pc starts from: its
// salts, and the producers its checkpoint saved if that is of this very
// source partition.
func (pl *Pipeline) psmOf(pc Placement) *transform.PSM {
	psm := transform.NewPSM(transform.PSMConfig{Expiry: pl.cfg.ProducerStateExpiry, Rand: pl.cfg.Rand})
	for _, s := range pc.Salts {
		psm.AddSalt(s.Origin, s.Salt, s.At)
	}
	if ck := pc.Checkpoint; ck != nil && ck.IsOf(pc.Src) {
		psm.Restore(statestore.ProducerEntries(ck.Producers))
	}
	return psm
}

// ---- fetch results ----

func (pl *Pipeline) fetched(r fetcher.Result) {
	p := pl.bySrc[r.Partition.Key()]
	if p == nil || p.gen == 0 || r.Gen != p.gen {
		pl.release(r.Pin) // of an earlier assignment
		return
	}
	if r.Err != nil {
		pl.release(r.Pin)
		if errors.Is(r.Err, fetcher.ErrTopicRecreated) {
			// The topic this pair mirrors is gone; discovery finds
			// the new one and places it as a new partition (I5).
			pl.markGone(p, r.Err.Error())
			return
		}
		pl.fail(fmt.Errorf("source %s: %w", p.Src, r.Err))
		return
	}
	p.hw, p.lso = r.HighWatermark, r.LastStableOffset
	if r.SkippedRecords > 0 && !r.Unjudged {
		pl.counts.Add(SourceRecordsSkipped, r.SkippedRecords)
	}
	n := len(p.queue)
	pos := r.Start
	for _, b := range r.Batches {
		p.queue = append(p.queue, item{raw: b.Raw, hdr: b.Header, from: r.Start, end: b.Header.NextOffset()})
		pos = b.Header.NextOffset()
	}
	if r.End > pos || len(p.queue) == n {
		// Unjudged: offsets below the log start, passed while
		// reconciling; the walk judges whether they were mirrored.
		p.queue = append(p.queue, item{from: r.Start, end: r.End, lost: r.Unjudged})
	}
	p.queue[len(p.queue)-1].pin = r.Pin
	if p.rc != nil {
		p.rc.emptySince = time.Time{}
	}
	pl.advance(p)
}

// advance moves p forward as far as it can without waiting.
func (pl *Pipeline) advance(p *partition) {
	switch p.phase {
	case phaseReconciling:
		pl.reconcileStep(p)
	case phaseIdle:
		pl.next(p)
	}
}

// next decides p's head batches until one is submitted or something else
// must happen first.
func (pl *Pipeline) next(p *partition) {
	for p.phase == phaseIdle {
		if p.gone {
			pl.remove(p)
			return
		}
		if pl.stopping || p.pending() == 0 {
			return
		}
		it := &p.queue[p.head]
		if it.raw == nil {
			pl.finishHead(p)
			continue
		}
		if p.expiryWanted || p.expiring != 0 {
			// Held for producer-state expiry: the next checkpoint
			// expires it, and the partition goes on once that commit
			// succeeded.
			pl.checkpointDue = pl.checkpointDue || p.expiryWanted
			return
		}
		d, err := twin.Decide(p.psm, pl.src, pl.reenc, nil, it.raw, it.hdr, it.from, false)
		if err != nil {
			pl.fail(fmt.Errorf("source %s: %w", p.Src, err))
			return
		}
		switch d.Verdict {
		case twin.SkipEmpty:
			pl.finishHead(p)
		case twin.SkipDuplicate:
			p.psm.Commit(d.PSM, pl.now)
			pl.counts.Inc(DuplicatesSkipped)
			pl.finishHead(p)
		case twin.SkipHome:
			pl.counts.Inc(BatchesReturnedHome)
			pl.counts.Add(RecordsReturnedHome, int64(it.hdr.NumRecords))
			pl.finishHead(p)
		case twin.SkipUnattributed:
			pl.counts.Inc(BatchesUnattributedSkipped)
			pl.counts.Add(RecordsUnattributedSkipped, int64(it.hdr.NumRecords))
			pl.finishHead(p)
		case twin.NeedSalt:
			p.phase = phaseSalting
			pl.salts = append(pl.salts, saltReq{p, *d.PSM.Salt})
			pl.log(hclog.Info, "producer ID collision; committing a salt before the batch is appended",
				"destination", p.Dst.String(), "source_offset", it.hdr.BaseOffset, "origin", d.PSM.Salt.Origin.String(),
				"holder", d.PSM.Holder.String(), "salt", d.PSM.Salt.Salt, "mapped_pid", d.PSM.Salt.Mapped)
		default:
			switch d.PSM.Kind {
			case transform.KindLowerEpoch:
				pl.log(hclog.Warn, "batch with an epoch below its producer's current one; appended",
					"destination", p.Dst.String(), "source_offset", it.hdr.BaseOffset, "producer_id", it.hdr.ProducerID, "epoch", it.hdr.ProducerEpoch)
			case transform.KindUnresolvable:
				pl.log(hclog.Warn, "mapped producer ID held by another origin and neither can move (both forwarded by upstream mirrors); appended under the shared PID",
					"destination", p.Dst.String(), "source_offset", it.hdr.BaseOffset, "pid", d.PSM.Mapped, "holder", d.PSM.Holder.String())
			}
			if n := producerRun(p.queue[p.head:], d, p.limit); n > 1 && pl.joinRun(p, d, n) {
				return
			}
			pl.submit(p, d, 1)
		}
	}
}

// finishHead finishes p's head item: the source position moves past it and
// its pin, if it carries one, is released.
func (pl *Pipeline) finishHead(p *partition) {
	p.srcNext = p.queue[p.head].end
	p.doneAt = recordTime(p.queue[p.head].hdr)
	pl.release(p.pop())
}

// submit is the one place that hands a batch to the appender, and so the one
// place that keeps a partition to one batch in flight (I2).
func (pl *Pipeline) submit(p *partition, d twin.Decision, run int) {
	if p.phase != phaseIdle {
		panic(fmt.Sprintf("link: submit for %s in phase %s", p.Dst, p.phase))
	}
	pl.tags++
	p.tag, p.dec, p.phase = pl.tags, d, phaseAppending
	p.run = run
	pl.emit(DoSubmit{Request: appender.Request{Partition: p.Dst, Batch: d.Out, Tag: p.tag}})
}

// joinRun asks for the first n queued batches of p, of one producer and its
// head decided d, joined into one batch (coalesce.go: producerRun): the
// batch that producer would have sent with a longer linger, under the
// run's producer-state decision. The driver joins them off the pipeline's
// goroutine (DoJoin), and the partition waits in phaseJoining for the
// answer (joined). It reports false, and asks for nothing, when the
// producer state decides the run otherwise than its head: the head then
// goes alone.
func (pl *Pipeline) joinRun(p *partition, d twin.Decision, n int) bool {
	items := p.queue[p.head : p.head+n]
	h := items[0].hdr
	run := h
	run.LastOffsetDelta = int32(items[n-1].hdr.NextOffset() - h.BaseOffset - 1)
	run.NumRecords = run.LastOffsetDelta + 1
	rd := p.psm.Decide(transform.InfoOf(run, pl.src.Cluster, pl.src.Region))
	if rd.Kind != d.PSM.Kind || rd.Mapped != d.PSM.Mapped {
		return false
	}
	bs := make([][]byte, n)
	for i := range items {
		bs[i] = items[i].raw
	}
	pl.tags++
	p.tag, p.dec, p.joinDec, p.run, p.phase = pl.tags, d, rd, n, phaseJoining
	pl.emit(DoJoin{Dst: p.Dst, Tag: p.tag, Batches: bs,
		Header: transform.MergeHeader{ProducerID: rd.Mapped, ProducerEpoch: h.ProducerEpoch, BaseSequence: h.BaseSequence}})
	return true
}

// joined submits the batch a DoJoin made. A run that could not be joined
// after all (its records do not decode) or came out above the partition's
// limit (a compressed run that compressed worse together) is not sent:
// its head goes alone, as decided before the join, and the next batches
// are decided again after it.
func (pl *Pipeline) joined(e InJoined) {
	p := pl.byDst[e.Dst]
	if p == nil || p.phase != phaseJoining || e.Tag != p.tag {
		return // of a join the pipeline gave up on (a stop, the partition gone)
	}
	p.phase = phaseIdle
	if e.Err != nil || int64(len(e.Out)) > p.limit {
		pl.submit(p, p.dec, 1)
		return
	}
	pl.submit(p, twin.Decision{Verdict: twin.Forward, PSM: p.joinDec, Out: e.Out}, p.run)
}

// ---- append results ----

func (pl *Pipeline) appended(res appender.Result) {
	p := pl.byDst[res.Partition.Key()]
	if p == nil || p.phase != phaseAppending || res.Tag != p.tag {
		return // of a batch the pipeline gave up on
	}
	h := p.queue[p.head].hdr
	switch {
	case res.Err == nil:
		pl.acked(p, res.BaseOffset)
	case errors.Is(res.Err, appender.ErrUnknownOutcome):
		pl.counts.Inc(UnknownOutcomes)
		p.phase = phaseSettling
		delay, early := pl.settleDelay(res)
		pl.log(hclog.Warn, "append outcome unknown; settling it against the destination before anything else is sent",
			"destination", p.Dst.String(), "source_offset", h.BaseOffset, "answered", res.Answered, "after", delay, "error", res.Err)
		a := DoSettle{Dst: p.Dst, From: p.dstNext, Want: p.dec.Out, Tag: p.tag, Delay: delay, EarlyAfter: early}
		if !res.Sent.IsZero() {
			ld := res.Leader
			a.SentTo = &ld
		}
		pl.emit(a)
	case errors.Is(res.Err, appender.ErrCorrupt):
		if p.refetchedAt == h.BaseOffset {
			pl.fail(fmt.Errorf("destination %s refused the batch from source %s offset %d as corrupt twice, also after fetching it again: %w",
				p.Dst, p.Src, h.BaseOffset, res.Err))
			return
		}
		p.refetchedAt = h.BaseOffset
		pl.counts.Inc(CorruptRefetches)
		pl.log(hclog.Warn, "destination refused a batch as corrupt; fetching it again from the source",
			"destination", p.Dst.String(), "source", p.Src.String(), "source_offset", h.BaseOffset)
		p.phase = phaseIdle
		pl.assign(p)
	case errors.Is(res.Err, appender.ErrStopped) && pl.stopping:
		p.phase = phaseIdle // proven not appended; nothing more is sent
		pl.next(p)
	default:
		pl.fail(fmt.Errorf("append to %s of the batch from source %s offset %d: %w", p.Dst, p.Src, h.BaseOffset, res.Err))
	}
}

// settleDelay is how long to wait before an append of unknown outcome is
// read back: none when a broker answered (the request is out of every
// broker: what its leader's log holds now decides, the settle reading waits
// for the high watermark to reach the log end; Kafka's ReplicaManager
// appends to the leader's log before DelayedProduce waits, and answers
// NOT_LEADER_OR_FOLLOWER or REQUEST_TIMED_OUT only after that wait ended);
// otherwise until produce_timeout, counted from when it was sent, plus
// SettleDelay, past which DelayedProduce has answered it (or the broker
// that held it is gone). A request sent with a shorter timeout (the
// appender caps it at three quarters of the lease left) waits as long: its
// timeout bounds DelayedProduce once a broker has it, not how long the
// network or a broker's request queue held it before (issue 21 case 8: a
// request held past its own timeout landed after it was settled as not
// landed, and its batch was at the destination twice). The same delay holds
// on pause and stop; a stop that cannot wait that long (shutdown_timeout)
// is recorded as unclean, and the next session waits and reconciles.
//
// early is when an unanswered append may be settled sooner, if by then
// another broker leads the partition under a newer leader epoch
// (leaderMoved): SettleDelay after it was sent, the margin for a request
// that waited in the old leader's queue. Past that, the old leader can no
// longer put the batch into the partition's log: Partition.
// appendRecordsToLeader appends only while its broker leads (leaderLogIfLocal),
// a broker that lost leadership answers NOT_LEADER_OR_FOLLOWER, and as a
// follower it truncates what it appended and did not replicate to the new
// leader's end offset for that epoch (AbstractFetcherThread.
// getOffsetTruncationState, KIP-101); the new leader's log grows only by
// its own appends. A dead leader (SIGKILL) is the common case: its
// partitions move once the controller fences it, and the settle needs no
// produce timeout.
func (pl *Pipeline) settleDelay(res appender.Result) (delay, early time.Duration) {
	if res.Answered {
		return 0, 0
	}
	timeout := max(res.ProduceTimeout, pl.cfg.ProduceTimeout)
	sent := res.Sent
	if sent.IsZero() {
		sent = pl.now
	}
	delay = max(sent.Add(timeout+pl.cfg.SettleDelay).Sub(pl.now), 0)
	early = min(max(sent.Add(pl.cfg.SettleDelay).Sub(pl.now), 0), delay)
	return delay, early
}

// leaderMoved reports whether a request sent to leader sent can no longer
// reach the partition's log now that now leads it: another broker, under
// a newer leader epoch (see settleDelay).
func leaderMoved(sent *leaders.Leader, now leaders.Leader) bool {
	return sent != nil && now.Broker != sent.Broker && now.Epoch > sent.Epoch
}

// acked records that p's head batch is at the destination from base.
func (pl *Pipeline) acked(p *partition, base int64) {
	d := p.dec
	oh, _ := transform.ParseHeader(d.Out)
	switch {
	case base > p.dstNext:
		// Someone else wrote between the link's appends: another
		// producer, or a batch an earlier session sent that landed after
		// this session read the tail. Say so; nothing can be undone.
		if pl.cfg.SharedDestination {
			pl.counts.Add(DestinationLocalOffsets, base-p.dstNext)
		} else {
			pl.counts.Add(DestinationGapOffsets, base-p.dstNext)
			pl.log(hclog.Error, "destination offsets this link did not write appeared before its append (another producer writes the destination topic, or an earlier session's append landed late)",
				"destination", p.Dst.String(), "from", p.dstNext, "to", base, "source_offset", p.queue[p.head].hdr.BaseOffset)
		}
	case base < p.dstNext:
		pl.log(hclog.Error, "append landed below the partition's known end; the destination was truncated or the topic recreated",
			"destination", p.Dst.String(), "offset", base, "expected", p.dstNext)
		p.win.reset()
	}
	p.psm.Commit(d.PSM, pl.now)
	p.dstNext = base + int64(oh.LastOffsetDelta) + 1
	first := p.queue[p.head].hdr.BaseOffset
	for i := range p.run {
		// A run's batches lie at the destination as at the source,
		// one offset per record from the run's base on (coalesce.go).
		it := &p.queue[p.head+i]
		at := base + (it.hdr.BaseOffset - first)
		p.win.add(translate.Span{From: max(it.from, it.hdr.BaseOffset), Base: it.hdr.BaseOffset, End: it.end, DstBase: at, DstEnd: min(at+int64(it.hdr.LastOffsetDelta)+1, p.dstNext)})
	}
	pl.counts.Add(RecordsMirrored, int64(oh.NumRecords)) // what was appended: a trimmed batch holds fewer than its source
	pl.counts.Add(BytesMirrored, int64(len(d.Out)))
	pl.counts.Add(BatchesMirrored, int64(p.run)) // source batches, as in transactional delivery
	if p.run > 1 {
		pl.counts.Inc(BatchesCoalesced)
		pl.counts.Add(SourceBatchesCoalesced, int64(p.run))
		pl.joins = append(pl.joins, p.run)
	}
	if d.Reencoded {
		pl.counts.Inc(BatchesReencoded)
	}
	// Counted once appended: a batch decided twice (fetched again after
	// CORRUPT_MESSAGE) counts once.
	switch d.PSM.Kind {
	case transform.KindSequenceGap:
		pl.counts.Inc(SequenceGaps)
	case transform.KindLowerEpoch:
		pl.counts.Inc(LowerEpochBatches)
	case transform.KindUnresolvable:
		pl.counts.Inc(CollisionsUnresolvable)
	}
	p.dec = twin.Decision{}
	p.phase = phaseIdle
	for range p.run {
		pl.finishHead(p)
	}
	p.run = 0
	pl.next(p)
}

func (pl *Pipeline) settled(e InSettled) {
	p := pl.byDst[e.Dst]
	if p == nil || p.phase != phaseSettling || p.tag != e.Tag {
		return
	}
	switch {
	case e.Err != nil:
		pl.fail(fmt.Errorf("settle append to %s: %w", p.Dst, e.Err))
	case e.Offset >= 0:
		pl.log(hclog.Info, "append settled: the batch had landed", "destination", p.Dst.String(), "offset", e.Offset)
		pl.acked(p, e.Offset)
	case pl.stopping:
		pl.log(hclog.Info, "append settled: the batch had not landed; the session stops before sending it again", "destination", p.Dst.String())
		p.phase = phaseIdle
		pl.next(p)
	default:
		pl.log(hclog.Info, "append settled: the batch had not landed; sending it again", "destination", p.Dst.String())
		p.phase = phaseIdle
		pl.submit(p, p.dec, p.run)
	}
}

// ---- reconciliation ----

// startReconciles activates waiting reconciliations while slots are free.
func (pl *Pipeline) startReconciles() {
	if pl.stopping {
		return
	}
	active := 0
	for _, p := range pl.parts {
		if p.rc != nil && p.rc.active {
			active++
		}
	}
	for _, p := range pl.parts {
		if active >= pl.cfg.MaxReconciling {
			return
		}
		if p.phase != phaseReconciling || p.rc.active {
			continue
		}
		p.rc.active = true
		active++
		pl.assign(p)
		pl.reconcileStep(p)
	}
}

func (pl *Pipeline) tailRead(e InTailRead) {
	p := pl.byDst[e.Dst]
	if p == nil || p.phase != phaseReconciling || !p.rc.reading {
		return
	}
	rc := p.rc
	rc.reading = false
	if e.Err != nil {
		pl.fail(fmt.Errorf("reconcile %s: read the destination from offset %d: %w", p.Dst, rc.dstPos, e.Err))
		return
	}
	if len(e.Batches) == 0 {
		rc.dstDone = true
	}
	for _, b := range e.Batches {
		h, err := transform.ParseHeader(b)
		if err != nil {
			pl.fail(fmt.Errorf("reconcile %s: destination batch after offset %d: %w", p.Dst, rc.dstPos, err))
			return
		}
		rc.dst = append(rc.dst, b)
		rc.dstPos = h.NextOffset()
	}
	if rc.dstPos >= rc.dstEnd {
		rc.dstDone = true
	}
	pl.reconcileStep(p)
}

func (pl *Pipeline) sourceEnd(e InSourceEnd) {
	p := pl.bySrc[e.Src]
	if p == nil || p.phase != phaseReconciling || !p.rc.asking {
		return
	}
	rc := p.rc
	rc.asking = false
	switch {
	case e.Err != nil:
		pl.log(hclog.Warn, "reconcile: looking up the source's last stable offset failed; asking again", "source", p.Src.String(), "error", e.Err)
	case e.LSO > rc.w.SrcNext():
		rc.emptySince = time.Time{} // more is committed; the fetcher brings it
	case rc.emptySince.IsZero():
		rc.emptySince = pl.now
	case pl.now.Sub(rc.emptySince) >= pl.cfg.ExhaustGrace:
		rc.exhausted = true
	}
	pl.reconcileStep(p)
}

func (pl *Pipeline) tick() {
	for _, p := range pl.parts {
		if rc := p.rc; rc != nil && rc.active && !rc.asking && !rc.exhausted && !rc.askedAt.IsZero() &&
			pl.now.Sub(rc.askedAt) >= sourceEndRetry && p.pending() == 0 && len(rc.dst) > 0 {
			pl.askSourceEnd(p)
		}
	}
}

func (pl *Pipeline) askSourceEnd(p *partition) {
	p.rc.asking = true
	p.rc.askedAt = pl.now
	pl.emit(DoLookupSourceEnd{Src: p.Src})
}

// reconcileStep compares as far as the batches at hand allow.
func (pl *Pipeline) reconcileStep(p *partition) {
	rc := p.rc
	if !rc.active {
		return
	}
	w := rc.w
	for !pl.failed {
		if len(rc.dst) == 0 {
			if rc.dstDone {
				pl.reconciled(p)
				return
			}
			if !rc.reading {
				rc.reading = true
				pl.emit(DoReadTail{Dst: p.Dst, From: rc.dstPos, End: rc.dstEnd})
			}
			return
		}
		if rc.exhausted && w.HoleOpen() {
			if err := pl.restartWalk(p); err != nil {
				pl.fail(fmt.Errorf("reconcile %s: %w", p.Dst, err))
			}
			return
		}
		if w.Stopped() || rc.exhausted {
			if err := w.ForeignRest(rc.dst[0]); err != nil {
				pl.fail(fmt.Errorf("reconcile %s: %w", p.Dst, err))
				return
			}
			rc.dst = rc.dst[1:]
			continue
		}
		if p.pending() == 0 {
			// The source must bring the twin of rc.dst[0], or say it
			// has nothing more.
			if !rc.asking && (rc.askedAt.IsZero() || pl.now.Sub(rc.askedAt) >= sourceEndRetry) {
				pl.askSourceEnd(p)
			}
			return
		}
		it := &p.queue[p.head]
		if it.raw == nil {
			if it.lost {
				w.Lost(it.end)
				rc.lost = append(rc.lost, [2]int64{it.from, it.end})
			} else {
				w.Pass(it.end)
			}
			pl.release(p.pop())
			continue
		}
		st, err := w.Compare(it.raw, it.hdr, it.from, rc.dst[0], pl.now)
		if err != nil {
			pl.fail(fmt.Errorf("reconcile %s: %w", p.Dst, err))
			return
		}
		switch st {
		case twin.StepMatch:
			pl.release(p.pop())
			rc.dst = rc.dst[1:]
		case twin.StepSkip, twin.StepDeleted, twin.StepPart:
			// StepPart: the destination batch holds more of a
			// producer's run after this source batch.
			pl.release(p.pop())
		default:
			rc.dst = rc.dst[1:]
		}
	}
}

// maxHoleRestarts bounds how often a reconciliation with a hole at the
// destination (twin.Walker.Hole) starts its walk again: each start reads
// the source again from the checkpoint.
const maxHoleRestarts = 4

// restartWalk starts p's walk again from its checkpoint after the source
// ran out with a hole open: the first destination batch left matches no
// source batch from the checkpoint on, so it is foreign, and the source
// batches the walk took for deleted mirrors were only presumed so. The walk
// starts after that batch with the checkpoint's producer state, still
// presuming a hole; after maxHoleRestarts, without (every batch the walk
// cannot match is then foreign, and mirroring resumes where the matches
// end).
func (pl *Pipeline) restartWalk(p *partition) error {
	rc := p.rc
	dh, err := transform.ParseHeader(rc.dst[0])
	if err != nil {
		return fmt.Errorf("destination batch after offset %d: %w", rc.w.DstNext(), err)
	}
	rc.dst = rc.dst[1:]
	rc.foreign++
	rc.restarts++
	pl.log(hclog.Warn, "reconcile: the first destination batch past the deleted records matches no source batch from the checkpoint on: foreign; walking again from the checkpoint after it",
		"destination", p.Dst.String(), "destination_offset", dh.BaseOffset, "source", p.Src.String(), "checkpoint_source_offset", p.ckSrc, "restart", rc.restarts)
	pl.unassign(p)
	p.psm = pl.psmOf(rc.place)
	p.srcNext, p.dstNext = p.ckSrc, dh.NextOffset()
	rc.w = twin.NewWalker(p.psm, pl.src, pl.reenc, p.srcNext, p.dstNext)
	if !rc.place.Compacted {
		rc.w.ProducerRuns()
	}
	if rc.restarts < maxHoleRestarts {
		rc.w.Hole()
		rc.w.HoleAtGaps()
	}
	rc.exhausted, rc.emptySince, rc.askedAt, rc.lost = false, time.Time{}, time.Time{}, nil
	pl.assign(p)
	pl.reconcileStep(p)
	return nil
}

// reconciled ends p's reconciliation: its positions are where the walk
// ended, and it waits, unassigned, for its barrier.
func (pl *Pipeline) reconciled(p *partition) {
	w := p.rc.w
	n := w.Counts()
	if !pl.judgeLost(p) {
		return // failed
	}
	p.srcNext, p.dstNext = w.SrcNext(), w.DstNext()
	foreign := n.Foreign + p.rc.foreign
	pl.counts.Add(ReconciledBatches, int64(n.Matched+n.Passed))
	pl.counts.Add(BatchesReturnedHome, int64(n.Home))
	pl.counts.Add(RecordsReturnedHome, n.HomeRecords)
	pl.counts.Add(BatchesUnattributedSkipped, int64(n.Unattributed))
	pl.counts.Add(RecordsUnattributedSkipped, n.UnattributedRecords)
	switch {
	case pl.cfg.SharedDestination:
		pl.counts.Add(DestinationLocalBatches, int64(foreign))
	case foreign > 0:
		pl.counts.Add(ForeignBatches, int64(foreign))
		pl.log(hclog.Error, "destination partition holds batches this link did not write; the link expects to own its destination topics",
			"destination", p.Dst.String(), "foreign_batches", foreign, "resume_source_offset", p.srcNext)
	}
	if n.Deleted > 0 {
		pl.log(hclog.Warn, "reconcile: the destination no longer holds batches this link had appended past the checkpoint (DeleteRecords or retention, or its cleaner on a compacted topic); not appending them again",
			"destination", p.Dst.String(), "source", p.Src.String(), "source_batches", n.Deleted, "records", n.DeletedRecords)
	}
	pl.log(hclog.Info, "reconciled", "destination", p.Dst.String(), "matched_batches", n.Matched, "passed_batches", n.Passed, "foreign_batches", foreign,
		"skipped_source_batches", n.Skipped, "deleted_source_batches", n.Deleted, "resume_source_offset", p.srcNext, "resume_destination_offset", p.dstNext)
	p.rc = nil
	p.phase = phaseAdmitting
	pl.unassign(p)
	if p.initial {
		pl.initialLeft--
	}
}

// judgeLost judges the source offsets p's reconciliation found deleted
// below the log start (rc.lost): mirrored before the source deleted them
// when a match after them confirmed the destination batches between
// (Counts.Passed), else possibly lost: the records beyond what those
// destination batches hold, under on_offset_out_of_range (fail: the
// session fails; earliest: counted as skipped). It reports false if p's
// session failed.
func (pl *Pipeline) judgeLost(p *partition) bool {
	rc := p.rc
	if len(rc.lost) == 0 {
		return true
	}
	var offsets int64
	for _, r := range rc.lost {
		offsets += r[1] - r[0]
	}
	from, to := rc.lost[0][0], rc.lost[len(rc.lost)-1][1]
	batches, records, open := rc.w.LostOpen()
	if !open {
		pl.log(hclog.Info, "reconcile: the source deleted records the link had mirrored before (they are at the destination); none lost",
			"source", p.Src.String(), "from", from, "to", to, "mirrors", rc.w.Counts().Passed)
		return true
	}
	lost := max(offsets-records, 0)
	if lost == 0 {
		pl.log(hclog.Info, "reconcile: the source deleted records past the checkpoint; the destination holds as many records past it, taken for their mirrors",
			"source", p.Src.String(), "from", from, "to", to, "destination_batches", batches)
		return true
	}
	if pl.cfg.OnOutOfRange != fetcher.OutOfRangeEarliest {
		pl.fail(fmt.Errorf("%w: %s offsets %d to %d are below the log start offset %d: up to %d records were deleted at the source before they were mirrored (the destination holds %d records past the checkpoint); set on_offset_out_of_range = %q to skip them, or investigate (retention too short for the link's lag?)",
			fetcher.ErrOffsetOutOfRange, p.Src, from, to-1, to, lost, records, fetcher.OutOfRangeEarliest))
		return false
	}
	pl.counts.Add(SourceRecordsSkipped, lost)
	pl.log(hclog.Warn, "reconcile: records deleted at the source before they were mirrored; skipping them",
		"source", p.Src.String(), "from", from, "to", to, "skipped_records", lost, "destination_records_past_checkpoint", records)
	return true
}

// ---- topics appearing and going ----

// discover starts a topic discovery, or, with one running, has it run again
// once that one ended.
func (pl *Pipeline) discover() {
	if pl.stopping || !pl.mirroring {
		return
	}
	if pl.discovering {
		pl.discoverAgain = true
		return
	}
	pl.discovering, pl.discoverAgain = true, false
	known := make([]tp.Partition, 0, len(pl.parts))
	for _, p := range pl.parts {
		known = append(known, p.Src)
	}
	pl.emit(DoDiscover{Known: known})
}

// discoveryDone ends the discovery that ran, and starts the one asked for
// meanwhile.
func (pl *Pipeline) discoveryDone() {
	pl.discovering = false
	if pl.discoverAgain {
		pl.discover()
	}
}

func (pl *Pipeline) discovered(e InDiscovered) {
	pl.records = append(pl.records, e.Created...)
	if e.Err != nil {
		pl.discoveryFailures++
		pl.log(hclog.Warn, "topic discovery failed; retrying at the next interval", "error", e.Err)
		pl.discovering, pl.discoverAgain = false, false // whoever asked asks again
		return
	}
	for _, k := range e.Gone {
		if p := pl.bySrc[k]; p != nil {
			pl.markGone(p, "the source reports the topic deleted")
		}
	}
	var fresh []Pair
	for _, pr := range e.Pairs {
		p := pl.byDst[pr.Dst.Key()]
		switch {
		case p == nil:
			fresh = append(fresh, pr)
		case p.Src.ID != ([16]byte{}) && pr.Src.ID != ([16]byte{}) && p.Src.ID != pr.Src.ID:
			pl.markGone(p, fmt.Sprintf("the source topic was recreated (topic ID %s, now %s)", statestore.UUID(p.Src.ID), statestore.UUID(pr.Src.ID)))
		}
	}
	if len(fresh) == 0 || pl.stopping {
		pl.discoveryDone()
		return
	}
	pl.emit(DoPlace{Pairs: fresh})
}

func (pl *Pipeline) placed(e InPlaced) {
	if e.Err != nil {
		pl.discoveryFailures++
		pl.log(hclog.Warn, "placing new partitions failed; retrying at the next discovery", "error", e.Err)
		pl.discovering, pl.discoverAgain = false, false // whoever asked asks again
		return
	}
	for _, pc := range e.Parts {
		pl.log(hclog.Info, "new source partition; adding it to the session", "source", pc.Src.String(), "destination", pc.Dst.String())
	}
	pl.add(e.Parts, false)
	pl.discoveryDone()
}

// markGone removes p once nothing of it is in flight.
func (pl *Pipeline) markGone(p *partition, why string) {
	if p.gone {
		return
	}
	p.gone = true
	pl.log(hclog.Warn, "source partition gone; stopping its mirroring", "source", p.Src.String(), "destination", p.Dst.String(), "reason", why,
		"source_offset", p.srcNext)
	if !p.phase.inFlight() {
		pl.remove(p)
	}
}

func (pl *Pipeline) remove(p *partition) {
	pl.unassign(p)
	if p.phase == phaseReconciling && p.initial {
		pl.initialLeft--
	}
	pl.salts = slices.DeleteFunc(pl.salts, func(s saltReq) bool { return s.p == p })
	p.phase, p.rc = phaseRemoved, nil
	delete(pl.byDst, p.Dst.Key())
	delete(pl.bySrc, p.Src.Key())
	pl.parts = slices.DeleteFunc(pl.parts, func(q *partition) bool { return q == p })
	pl.counts.Inc(PartitionsRemoved)
}

// ---- state transactions ----

func (pl *Pipeline) committed(e InCommitted) {
	c := pl.committing
	if c == nil || e.ID != c.id {
		return
	}
	pl.committing = nil
	if e.Err != nil {
		if c.final {
			pl.log(hclog.Warn, "final checkpoint failed; the next session reconciles from the previous one", "error", e.Err)
			pl.stopped = true
			pl.emit(DoFinish{State: pl.stopState, Clean: false})
			return
		}
		pl.fail(fmt.Errorf("commit state transaction: %w", e.Err))
		return
	}
	pl.counts.Inc(Checkpoints)
	for p, at := range c.at {
		p.ckSrc, p.ckDst, p.ckProducers = at.src, at.dst, at.producers
	}
	var released []*partition // next may remove a partition from pl.parts
	for _, p := range pl.parts {
		if p.expiring == c.id {
			p.expiring = 0
			released = append(released, p)
		}
	}
	for _, p := range released {
		if p.phase == phaseIdle {
			pl.next(p)
		}
	}
	if len(c.admitted) > 0 || c.initial {
		pl.admitted(c.admitted, c.initial)
	}
	for _, s := range c.salts {
		s.p.psm.AddSalt(s.salt.Origin, s.salt.Salt, pl.now)
		pl.counts.Inc(CollisionsResolved)
		if s.p.phase == phaseSalting {
			s.p.phase = phaseIdle
			pl.next(s.p)
		}
	}
	if c.final {
		pl.stopped = true
		pl.log(hclog.Info, "final checkpoint committed", "state", pl.stopState.String(), "partitions", len(c.at), "clean", c.clean)
		pl.emit(DoFinish{State: pl.stopState, Clean: c.clean})
	}
}

// admitted starts mirroring partitions whose barrier committed; with
// initial, the link is MIRRORING.
func (pl *Pipeline) admitted(ps []*partition, initial bool) {
	pl.counts.Add(BarriersEmitted, int64(len(ps)))
	expired := 0
	for _, p := range ps {
		if p.phase != phaseAdmitting {
			continue // removed meanwhile
		}
		n := barrier.Apply(p.psm)
		expired += n
		pl.log(hclog.Debug, "MIRROR_PID_RESET applied", "destination", p.Dst.String(), "expired_producers", n)
		p.phase = phaseIdle
		pl.assign(p)
		if !p.initial {
			pl.log(hclog.Info, "mirroring new partition", "source", p.Src.String(), "destination", p.Dst.String(), "source_offset", p.srcNext)
		}
	}
	if len(ps) > 0 {
		pl.log(hclog.Info, "MIRROR_PID_RESET barriers committed; mirrored producer state reset", "partitions", len(ps), "expired_producers", expired)
	}
	if initial {
		pl.mirroring = true
		pl.emit(DoEnterMirroring{})
	}
}

// flushCommits sends the next state transaction if none is in flight:
// pending salts (each with its partition's checkpoint, so that
// reconciliation never walks back across a salt), the barriers and first
// checkpoints of admitted partitions, and, when due, the checkpoints of
// every partition that moved, the tombstones of expired salts and the link
// record that renews the lease; or, when the session stops and nothing is in
// flight any more, the final commit.
func (pl *Pipeline) flushCommits() {
	if pl.committing != nil || pl.stopped {
		return
	}
	if pl.stopping {
		pl.flushFinal()
		return
	}
	var admit []*partition
	if !pl.initialOpen || pl.initialLeft == 0 {
		for _, p := range pl.parts {
			if p.phase == phaseAdmitting && (p.initial || !pl.initialOpen) {
				admit = append(admit, p)
			}
		}
	}
	emptyInitial := pl.initialOpen && pl.initialLeft == 0 && len(admit) == 0
	if len(pl.salts) == 0 && !pl.checkpointDue && len(admit) == 0 && !emptyInitial && len(pl.records) == 0 {
		return
	}
	pl.commitID++
	c := &commit{id: pl.commitID, admitted: admit, salts: pl.salts, at: make(map[*partition]ckPos)}
	if pl.initialOpen && pl.initialLeft == 0 {
		c.initial = true
		pl.initialOpen = false
	}
	pl.salts = nil
	recs := pl.records
	pl.records = nil
	for _, p := range admit {
		// The checkpoint that goes with a barrier carries the producer
		// state as the barrier leaves it: no mirrored producer.
		recs = append(recs, barrier.Record(p.barrierKey(), pl.src.Cluster, pl.now), pl.checkpoint(c, p, nil))
	}
	for _, s := range c.salts {
		recs = append(recs, barrier.SaltRecord(s.p.barrierKey(), s.salt, pl.now), barrier.SaltedPIDRecord(s.salt, pl.now))
		if _, ok := c.at[s.p]; !ok {
			recs = append(recs, pl.checkpoint(c, s.p, s.p.psm.Snapshot()))
		}
	}
	if pl.checkpointDue {
		pl.checkpointDue = false
		for _, p := range pl.parts {
			if !p.phase.mirroring() {
				continue
			}
			expired, tombs := pl.expire(p, c)
			for _, o := range tombs {
				recs = append(recs, barrier.SaltTombstone(p.barrierKey(), o))
			}
			if _, ok := c.at[p]; !ok && (p.srcNext != p.ckSrc || p.dstNext != p.ckDst || expired > 0 || len(tombs) > 0) {
				recs = append(recs, pl.checkpoint(c, p, p.psm.Snapshot()))
			}
		}
	}
	state := Preparing
	if pl.mirroring {
		state = Mirroring
	}
	pl.committing = c
	pl.emit(DoCommit{ID: c.id, State: state, Records: recs})
}

// expire drops p's idle producer entries and salts (producer_state_expiry)
// in commit c, when it may: only with nothing of p in flight, so that no
// batch decided with the old state lands past the checkpoint that saves
// the new one; p then submits nothing until c committed (committed clears
// p.expiring). With an append in flight, p is held from its next
// submission (expiryWanted) and expires at the next checkpoint, which its
// going idle asks for.
func (pl *Pipeline) expire(p *partition, c *commit) (expired int, tombstones []transform.Origin) {
	if !p.psm.Expirable(pl.now) {
		p.expiryWanted = false
		return 0, nil
	}
	if p.phase != phaseIdle || p.expiring != 0 {
		p.expiryWanted = true
		return 0, nil
	}
	p.expiryWanted = false
	expired, tombstones = p.psm.Expire(pl.now)
	pl.counts.Add(ProducersExpired, int64(expired))
	pl.counts.Add(SaltsExpired, int64(len(tombstones)))
	p.expiring = c.id
	return expired, tombstones
}

// flushFinal sends the final commit once the drain is over: nothing in
// flight any more, or the drain timed out.
func (pl *Pipeline) flushFinal() {
	unresolved := 0
	for _, p := range pl.parts {
		if p.phase.inFlight() {
			unresolved++
		}
	}
	if unresolved > 0 && !pl.drainTimedOut {
		return
	}
	if unresolved > 0 {
		pl.log(hclog.Warn, "stop: appends still unresolved when the drain timed out; the stop is recorded as unclean, so the next session waits out this session's lease and reconciles",
			"unresolved", unresolved)
	}
	pl.commitID++
	c := &commit{id: pl.commitID, final: true, clean: unresolved == 0, at: make(map[*partition]ckPos)}
	recs := pl.records
	pl.records = nil
	for _, p := range pl.parts {
		if p.phase.mirroring() {
			recs = append(recs, pl.checkpoint(c, p, p.psm.Snapshot()))
		}
	}
	pl.committing = c
	pl.emit(DoCommit{ID: c.id, State: pl.stopState, Final: true, Unresolved: unresolved, Records: recs})
}

// checkpoint is p's checkpoint record at its acknowledged positions, with
// producer state ps, which commit c records for p.
func (pl *Pipeline) checkpoint(c *commit, p *partition, ps []transform.ProducerEntry) statestore.Record {
	c.at[p] = ckPos{src: p.srcNext, dst: p.dstNext, producers: ps}
	return statestore.Record{
		Key: statestore.CheckpointKey{LinkName: pl.cfg.Link, TopicID: statestore.UUID(p.Dst.ID), Partition: p.Dst.Partition},
		Value: statestore.CheckpointValue{
			SourceTopic:      p.Src.Topic,
			SourcePartition:  p.Src.Partition,
			SourceNextOffset: p.srcNext,
			DestNextOffset:   p.dstNext,
			TimestampMs:      pl.now.UnixMilli(),
			SourceTopicID:    statestore.UUID(p.Src.ID),
			Producers:        statestore.ProducerStates(ps),
		},
	}
}

// ---- stopping ----

func (pl *Pipeline) stop(state State) {
	if pl.stopping {
		return
	}
	pl.stopping, pl.stopState = true, state
	// Salts not yet sent and partitions not yet admitted are dropped:
	// nothing of them was appended, and their checkpoints stay as they
	// are. Reconciliations end where they are, unrecorded.
	pl.salts = nil
	for _, p := range pl.parts {
		switch p.phase {
		case phaseSalting, phaseJoining:
			// phaseJoining: the join's answer is ignored; nothing
			// of the run was sent.
			p.phase = phaseIdle
		case phaseReconciling:
			p.rc.active = false
			pl.unassign(p)
		}
	}
}

// ---- for the driver and tests ----

// Count is counter c's value since the pipeline was built.
func (pl *Pipeline) Count(c Counter) int64 { return pl.counts.Get(c) }

// Counts returns a copy of every counter.
func (pl *Pipeline) Counts() Counts { return pl.counts.clone() }

// DiscoveryFailures is how many topic discoveries and placements failed.
func (pl *Pipeline) DiscoveryFailures() int64 { return pl.discoveryFailures }

// Unresolved is the number of partitions whose append is in flight or of
// unknown outcome.
func (pl *Pipeline) Unresolved() int {
	n := 0
	for _, p := range pl.parts {
		if p.phase.inFlight() {
			n++
		}
	}
	return n
}

// Partitions reports every partition's positions at now, in the order they
// joined.
func (pl *Pipeline) Partitions(now time.Time) []PartitionStatus {
	out := make([]PartitionStatus, 0, len(pl.parts))
	for _, p := range pl.parts {
		lag := int64(0)
		if p.hw >= 0 {
			lag = max(p.hw-p.srcNext, 0)
		}
		ps := PartitionStatus{
			SourceTopic: p.Src.Topic, DestinationTopic: p.Dst.Topic, Partition: p.Dst.Partition,
			Phase:            p.phase.String(),
			SourceNextOffset: p.srcNext, DestNextOffset: p.dstNext, HighWatermark: p.hw, Lag: lag,
			CheckpointSource: p.ckSrc, CheckpointDest: p.ckDst,
		}
		if d, ok := p.timeLag(now, lag); ok {
			ps.LagSeconds = new(d.Seconds())
		}
		out = append(out, ps)
	}
	return out
}

// TakeJoins returns the source batches of each joined batch appended since
// it was last called, for the histogram mirrord_coalesced_source_batches.
func (pl *Pipeline) TakeJoins() []int {
	js := pl.joins
	pl.joins = nil
	return js
}

// Len is the number of partitions in the session.
func (pl *Pipeline) Len() int { return len(pl.parts) }
