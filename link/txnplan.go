package link

import (
	"fmt"
	"slices"
	"time"

	"github.com/seed83556561/mirrord/fetcher"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/statestore"
	"github.com/seed83556561/mirrord/transform"
	"github.com/seed83556561/mirrord/translate"
)

// txnPlan is the pure core of a transactional-delivery session (DESIGN
// §14): every partition's queue of fetched batches and its positions, and
// when the session's transaction commits. It does no I/O: txnSession feeds
// it what the fetcher, the appends and the commits report, and carries out
// the txnDo actions it returns.
//
// The rules:
//   - A partition's batches are appended in source order, up to
//     txnMaxInFlight at once: the session reserves their sequences in the
//     order the plan starts them (txnSession.apply, on the link
//     goroutine), so the broker checks the order, and the plan applies
//     their answers in that order whatever order they arrive in. A
//     re-encoded batch (whose sequence count is known only after the
//     re-encode) goes alone: it starts with nothing of its partition in
//     flight, and nothing starts behind it until it is answered. So does
//     a partition's first append in each transaction: a partition leader
//     that holds no state of the producer yet accepts any sequence as its
//     first (Kafka 3.9.2, ProducerAppendInfo.checkSequence; 4.x and kfake
//     refuse it), so a batch that overtook the first would be appended
//     and the first refused (TestTxnNewProducerSequence).
//   - A partition's source position moves past a batch only once the batch
//     is appended (or, for a batch with nothing to append, once every batch
//     before it is): the checkpoint's SourceNextOffset is a batch boundary
//     (or the end of what a fetch consumed: aborted data and markers), and
//     everything below it is in the destination transaction.
//   - A commit starts only with no append in flight, and while it runs no
//     append starts: the checkpoint records in the transaction describe
//     exactly the data in it. A commit is due every checkpoint interval, or
//     sooner once txnCommitBytes were appended since the last one, and
//     after a partition's first append in the session and after the
//     append that first catches it up with the source (a takeover shows
//     every partition's data, its backlog included, at once).
//   - A failed append or commit fails the session: the next session's
//     InitProducerId aborts the open transaction, and it resumes at the
//     last committed checkpoints. Nothing of an aborted transaction counts
//     as mirrored.
type txnPlan struct {
	link string
	// srcID, dstID are the clusters' IDs, for the link record.
	srcID, dstID string
	epoch        int16 // the session's producer epoch when it began
	lease        time.Duration
	// returns says which source batches are not appended (DESIGN §16).
	returns transform.Returns
	// agent and fingerprint go into the link record (standBy).
	agent, fingerprint string
	// coalesce bounds a run of batches appended as one (coalesce.go);
	// 0: every batch alone.
	coalesce int64

	parts map[tp.Key]*txnPart // by source partition
	order []tp.Key
	gen   uint64

	commit    txnCommitState
	final     bool // the commit pending or running is the final one
	stopping  bool
	stopState statestore.LinkState
	finished  bool
	// appendedBytes since the last commit started.
	appendedBytes int64
	// lastCommit is when the last commit started (the lease it renewed);
	// committedAt when the last one that succeeded did.
	lastCommit, committedAt time.Time
	// extra are state records the next commit carries besides the
	// checkpoints.
	extra []statestore.Record

	counts Counts
}

// txnCommitState is where the session's next commit is.
type txnCommitState int8

const (
	commitNone    txnCommitState = iota
	commitPending                // due: no append starts, the commit waits for those in flight
	commitRunning                // sent to the committer
)

// txnCommitBytes starts a commit early once this much was appended since
// the last one: it bounds what an abort throws away.
const txnCommitBytes = 64 << 20

// txnPart is one mirrored partition of a transactional session.
type txnPart struct {
	pair Pair
	gen  uint64
	// from is where the partition was assigned: a batch that begins before
	// it is trimmed to it (re-encoded).
	from int64
	// queue holds fetched batches not yet appended, in source order;
	// the first sent of them were started (answered or not: an answer
	// is applied only once every batch before it is).
	queue []txnQueued
	sent  int
	// nextID numbers the partition's appends, in the order they start.
	nextID uint64
	// acked: an append of the partition was answered in the current
	// transaction (the leader holds the producer's state).
	acked bool
	// src and dst are the positions after the last appended batch (this
	// transaction's appends included); ckSrc and ckDst as last committed.
	src, dst     int64
	ckSrc, ckDst int64
	hasCk        bool
	dirty        bool // appended to since the last commit
	// appended: the session appended to it; shown: a commit of the
	// session covered an append of it; shownCaughtUp: one covered its
	// position when it had caught up with the source.
	appended, shown, shownCaughtUp bool
	hw                             int64
	// lastTS is the max timestamp of the last batch appended, for lag in
	// seconds.
	lastTS int64
	// win is the window of the partition's last committed appends (its
	// anchor's spans); pend the spans of the open transaction's appends,
	// which join it when the transaction commits (at most the last
	// WindowSpans of them are kept).
	win  window
	pend []translate.Span
	// err is set once an answer contradicts the positions: the session
	// fails.
	err error
	// compacted: the source topic is compacted; none of its batches are
	// joined (coalesce.go). maxBytes: the destination topic's
	// max.message.bytes, a joined batch's limit (0: not known).
	compacted bool
	maxBytes  int64
}

// caughtUp reports whether the partition has appended everything up to the
// source's high watermark as last fetched.
func (pt *txnPart) caughtUp() bool { return pt.hw >= 0 && pt.src >= pt.hw }

// txnQueued is one fetched batch, or an empty step (raw nil) that only
// moves the source position (aborted batches and markers a fetch
// consumed, a batch without records).
type txnQueued struct {
	raw []byte
	hdr transform.Header
	end int64       // the source position after it
	pin fetcher.Pin // released once it is done (set on a result's last entry)
	// reencode: the batch began before the partition's start or has
	// offset gaps, and is re-encoded from offset from (densely).
	reencode bool
	from     int64
	// id is the append's number once it started (sent), and res its
	// answer once it came.
	id   uint64
	sent bool
	res  *txnInAppended
	// run: the append this batch starts joins it with the run-1 batches
	// after it in the queue (coalesce.go), which are sent with it and
	// have joined set; 0 or 1: it goes as it is.
	run    int
	joined bool
}

// txnMaxInFlight is how many appends of a partition may be in flight at
// once, as Kafka's idempotent producer allows
// (max.in.flight.requests.per.connection at most 5): a partition leader
// remembers the last five batches of each producer
// (ProducerStateEntry.NUM_BATCHES_TO_RETAIN), so a batch sent again after
// an open answer is recognised as a duplicate only while at most four
// batches were appended after it. Counted from the oldest batch not yet
// applied, answered or not.
const txnMaxInFlight = 5

// Inputs of a txnPlan.
type (
	txnInFetched struct{ r fetcher.Result }
	// txnInAppended: append id of partition p ended: at base in the
	// destination, n offsets long, or err. bases: an append of a run
	// of batches says where each batch's first record went (the run
	// joined into one batch, or, when the joined batch came out too
	// large, appended one by one); merged: it went as one batch.
	txnInAppended struct {
		p        tp.Key
		id       uint64
		base     int64
		n        int64
		bases    []int64
		merged   bool
		reencode bool
		// empty: the re-encode left no record (none at or after the
		// partition's start); only the position moves.
		empty bool
		err   error
	}
	txnInCommitDue struct{ now time.Time }
	txnInCommitted struct{ err error }
	txnInAdd       struct{ parts []Placement }
	// txnInRecords are state records to commit with the next transaction
	// (the destination topics discovery created).
	txnInRecords struct{ recs []statestore.Record }
	txnInStop    struct{ state statestore.LinkState }
)

// Actions of a txnPlan.
type (
	txnDoAssign struct {
		src    tp.Partition
		offset int64
		gen    uint64
	}
	txnDoUnassign struct{ src tp.Partition }
	txnDoRelease  struct{ pin fetcher.Pin }
	// txnDoAppend appends one batch of pair's source partition to its
	// destination partition, as the partition's append id. offsets is the
	// batch's offset count (LastOffsetDelta+1), whose sequences the
	// session reserves before the next action: not with reencode, whose
	// count the re-encode decides (the batch goes alone). With run, the
	// batches that follow raw in the source are joined to it
	// (coalesce.go), and offsets counts them all; limit is the most
	// bytes the joined batch may have.
	txnDoAppend struct {
		pair     Pair
		id       uint64
		raw      []byte
		run      [][]byte
		limit    int64
		offsets  int32
		reencode bool  // re-encode from source offset from first
		from     int64 // with reencode
	}
	// txnDoCommit commits the transaction with these state records (the
	// link record last); final: the session ends with it.
	txnDoCommit struct {
		records []statestore.Record
		final   bool
	}
	txnDoFinish struct{}
	txnDoFail   struct{ err error }
)

func newTxnPlan(link, srcID, dstID string, epoch int16, lease time.Duration, now time.Time) *txnPlan {
	return &txnPlan{link: link, srcID: srcID, dstID: dstID, epoch: epoch, lease: lease,
		parts: make(map[tp.Key]*txnPart), lastCommit: now}
}

// step applies one input and returns the actions to carry out, in order.
func (p *txnPlan) step(now time.Time, in any) []any {
	var out []any
	switch e := in.(type) {
	case txnInAdd:
		for _, pc := range e.parts {
			out = append(out, p.add(pc)...)
		}
	case txnInFetched:
		out = append(out, p.fetched(e.r)...)
	case txnInRecords:
		p.extra = append(p.extra, e.recs...)
		if p.commit == commitNone && !p.stopping {
			p.commit = commitPending
		}
	case txnInAppended:
		acts, err := p.appended(e)
		out = append(out, acts...)
		if err != nil {
			return append(out, txnDoFail{err: err})
		}
		if pt := p.parts[e.p]; pt != nil && (!pt.shown || pt.caughtUp() && !pt.shownCaughtUp) && p.commit == commitNone && !p.stopping {
			// The partition's first append in this session, or the one
			// that caught it up with the source for the first time:
			// commit at once, so that after a takeover each partition's
			// data, the backlog included, shows without waiting a
			// checkpoint_interval.
			p.commit = commitPending
		}
	case txnInCommitDue:
		if p.commit == commitNone && !p.stopping && (p.dirty() || now.Sub(p.lastCommit) >= p.lease/3) {
			p.commit = commitPending
		}
	case txnInCommitted:
		if e.err != nil {
			return append(out, txnDoFail(e))
		}
		p.commit = commitNone
		p.committedAt = p.lastCommit
		p.counts.Add(Checkpoints, 1)
		for _, k := range p.order {
			pt := p.parts[k]
			pt.acked = false // the next transaction's first append goes alone
			for _, sp := range pt.pend {
				pt.win.add(sp)
			}
			pt.pend = pt.pend[:0]
			if pt.dirty {
				pt.ckSrc, pt.ckDst, pt.hasCk, pt.dirty = pt.src, pt.dst, true, false
				pt.shown = pt.shown || pt.appended
				pt.shownCaughtUp = pt.shownCaughtUp || pt.appended && pt.caughtUp()
			}
		}
		if p.final {
			p.finished = true
			return append(out, txnDoFinish{})
		}
	case txnInStop:
		if p.stopping {
			return nil
		}
		p.stopping, p.stopState = true, e.state
		for _, k := range p.order {
			pt := p.parts[k]
			out = append(out, txnDoUnassign{src: pt.pair.Src})
			keep := 0
			for i, q := range pt.queue {
				if q.sent {
					keep = i + 1 // the batches in flight: their answers move the position
				}
			}
			for _, q := range pt.queue[keep:] {
				if q.pin != (fetcher.Pin{}) {
					out = append(out, txnDoRelease{pin: q.pin})
				}
			}
			clear(pt.queue[keep:]) // see drain
			pt.queue = pt.queue[:keep]
		}
	default:
		panic(fmt.Sprintf("link: transactional plan input %T", in))
	}
	if p.appendedBytes >= txnCommitBytes && p.commit == commitNone && !p.stopping {
		p.commit = commitPending
	}
	return append(out, p.next(now)...)
}

// dirty reports whether a position moved since the last commit.
func (p *txnPlan) dirty() bool {
	for _, k := range p.order {
		if p.parts[k].dirty {
			return true
		}
	}
	return false
}

// inFlight reports whether any append is running.
func (p *txnPlan) inFlight() bool {
	for _, k := range p.order {
		if p.parts[k].sent > 0 {
			return true
		}
	}
	return false
}

// next starts what may start now: a due commit once nothing is in flight
// (the final one once the session stops), else every idle partition's next
// append.
func (p *txnPlan) next(now time.Time) []any {
	if p.finished {
		return nil
	}
	if p.stopping && p.commit != commitRunning {
		p.commit, p.final = commitPending, true
	}
	switch p.commit {
	case commitRunning:
		return nil
	case commitPending:
		if p.inFlight() {
			return nil
		}
		p.commit = commitRunning
		p.appendedBytes, p.lastCommit = 0, now
		state := statestore.Mirroring
		if p.final {
			state = p.stopState
		}
		return []any{txnDoCommit{records: p.records(now, state), final: p.final}}
	}
	var out []any
	for _, k := range p.order {
		pt := p.parts[k]
		out = p.drain(pt, out)
		for i := 0; i < len(pt.queue) && pt.sent < txnMaxInFlight; i++ {
			q := &pt.queue[i]
			if q.sent && q.reencode && q.res == nil {
				break // a re-encoded batch in flight goes alone
			}
			if q.sent || q.raw == nil {
				continue // started, or nothing to append (drain moves past it in order)
			}
			if pt.sent > 0 && (q.reencode || !pt.acked) {
				break // it goes alone, or the transaction's first goes alone
			}
			pt.nextID++
			q.sent, q.id = true, pt.nextID
			pt.sent++
			a := txnDoAppend{pair: pt.pair, id: q.id, raw: q.raw, offsets: q.hdr.LastOffsetDelta + 1, reencode: q.reencode, from: q.from}
			limit := p.limitOf(pt)
			if n := runLength(pt.queue[i:], limit); n > 1 {
				q.run, a.limit = n, limit
				for j := i + 1; j < i+n; j++ {
					f := &pt.queue[j]
					f.sent, f.id, f.joined = true, q.id, true
					a.run = append(a.run, f.raw)
					a.offsets += f.hdr.LastOffsetDelta + 1
				}
				i += n - 1
			}
			out = append(out, a)
			if q.reencode || !pt.acked {
				break
			}
		}
	}
	return out
}

// drain applies the partition's queue from its head for as long as the head
// is done: an answered append, or a step with nothing to append (only the
// position moves).
func (p *txnPlan) drain(pt *txnPart, out []any) []any {
	for len(pt.queue) > 0 {
		q := pt.queue[0]
		switch {
		case q.raw == nil:
			if q.end > pt.src {
				pt.src, pt.dirty = q.end, true
			}
		case q.res != nil:
			n := max(q.run, 1)
			pt.sent--
			p.apply(pt, pt.queue[:n], *q.res)
			for _, f := range pt.queue[:n] {
				if f.pin != (fetcher.Pin{}) {
					out = append(out, txnDoRelease{pin: f.pin})
				}
			}
			// Cleared before the queue moves past them: the backing
			// array would otherwise keep their raw batches, and with
			// them the whole fetch responses they are part of, alive
			// after their pins went back to the fetcher (at 1,000
			// partitions 238 MB of fetch responses with a 64 MiB
			// max_buffered_bytes, and the collector working against
			// the memory limit for most of the CPU).
			clear(pt.queue[:n])
			pt.queue = pt.queue[n:]
			continue
		default:
			return out
		}
		pt.queue[0] = txnQueued{}
		pt.queue = pt.queue[1:]
		if q.pin != (fetcher.Pin{}) {
			out = append(out, txnDoRelease{pin: q.pin})
		}
	}
	return out
}

// add places a partition: at its checkpoint when it has one for the same
// source topic, else where start_from puts it.
func (p *txnPlan) add(pc Placement) []any {
	k := pc.Src.Key()
	if _, ok := p.parts[k]; ok || p.stopping {
		return nil
	}
	p.gen++
	pt := &txnPart{pair: pc.Pair, gen: p.gen, src: pc.StartOffset, dst: pc.DstEnd, hw: -1, compacted: pc.Compacted, maxBytes: pc.MaxMessageBytes}
	if ck := pc.Checkpoint; ck != nil && ck.SourceTopic == pc.Src.Topic && ck.SourcePartition == pc.Src.Partition &&
		(ck.SourceTopicID == (statestore.UUID{}) || ck.SourceTopicID == statestore.UUID(pc.Src.ID)) {
		pt.src, pt.dst = ck.SourceNextOffset, ck.DestNextOffset
		pt.ckSrc, pt.ckDst, pt.hasCk = ck.SourceNextOffset, ck.DestNextOffset, true
	} else {
		// No checkpoint: the first commit records where it started.
		pt.dirty = true
	}
	pt.from = pt.src
	p.parts[k] = pt
	p.order = append(p.order, k)
	return []any{txnDoAssign{src: pc.Src, offset: pt.src, gen: pt.gen}}
}

// fetched queues a result's batches behind the partition's earlier ones.
func (p *txnPlan) fetched(r fetcher.Result) []any {
	pt, ok := p.parts[r.Partition.Key()]
	if !ok || r.Gen != pt.gen || p.stopping {
		if r.Pin != (fetcher.Pin{}) {
			return []any{txnDoRelease{pin: r.Pin}}
		}
		return nil
	}
	if r.Err != nil {
		return []any{txnDoFail{err: fmt.Errorf("source %s: %w", r.Partition, r.Err)}}
	}
	if r.HighWatermark >= 0 {
		pt.hw = r.HighWatermark
	}
	p.counts.Add(SourceRecordsSkipped, r.SkippedRecords)
	for i, b := range r.Batches {
		q := txnQueued{raw: b.Raw, hdr: b.Header, end: b.Header.NextOffset()}
		switch {
		case b.Header.NumRecords == 0 || b.Header.NextOffset() <= pt.from:
			// A batch compaction emptied (kept for its producer
			// state), or one wholly before where the partition
			// started: nothing to append.
			q.raw = nil
		case p.returns.Of(b.Header.ProducerID) == transform.Home:
			// It started at the destination (DESIGN §16).
			q.raw = nil
			p.counts.Inc(BatchesReturnedHome)
			p.counts.Add(RecordsReturnedHome, int64(b.Header.NumRecords))
		case p.returns.Of(b.Header.ProducerID) == transform.Unattributed:
			q.raw = nil
			p.counts.Inc(BatchesUnattributedSkipped)
			p.counts.Add(RecordsUnattributedSkipped, int64(b.Header.NumRecords))
		case b.Header.BaseOffset < pt.from:
			q.reencode, q.from = true, pt.from // began before the assigned offset
		case !b.Header.Dense():
			q.reencode, q.from = true, b.Header.BaseOffset // offset gaps (compacted): re-encode densely
		}
		if i == len(r.Batches)-1 {
			q.end = max(q.end, r.End)
			q.pin = r.Pin
		}
		pt.queue = append(pt.queue, q)
	}
	if len(r.Batches) == 0 && r.End > r.Start {
		pt.queue = append(pt.queue, txnQueued{end: r.End, pin: r.Pin})
	} else if len(r.Batches) == 0 && r.Pin != (fetcher.Pin{}) {
		return []any{txnDoRelease{pin: r.Pin}}
	}
	return nil
}

// appended takes the answer of one of a partition's appends; it is applied
// once every append before it is (drain). A failure fails the session at
// once: its transaction is aborted whatever the other answers say.
func (p *txnPlan) appended(e txnInAppended) ([]any, error) {
	pt, ok := p.parts[e.p]
	var q *txnQueued
	if ok {
		for i := range pt.queue {
			if pt.queue[i].sent && pt.queue[i].id == e.id {
				q = &pt.queue[i]
				break
			}
		}
	}
	if q == nil || q.res != nil {
		return nil, fmt.Errorf("%w: a result of append %d of %s[%d], which is not in flight", errInvariant, e.id, e.p.Topic, e.p.Partition)
	}
	if e.err != nil {
		return nil, e.err
	}
	q.res = &e
	out := p.drain(pt, nil)
	return out, pt.err
}

// apply moves a partition's positions past an answered append of the
// batches qs (one, or a run that was joined), which drain takes in source
// order.
func (p *txnPlan) apply(pt *txnPart, qs []txnQueued, e txnInAppended) {
	if pt.err != nil {
		return
	}
	q, last := qs[0], qs[len(qs)-1]
	if e.empty {
		pt.src, pt.dirty = max(pt.src, q.end), true
		return
	}
	if e.base < pt.dst && pt.hasCk {
		// The destination answered an offset below where the last
		// append ended: it is not the log the checkpoints describe.
		pt.err = fmt.Errorf("destination %s: the batch of source offsets %d-%d (%d source batches) was appended at offset %d, below the end of the link's last append (%d): the destination partition was recreated or truncated",
			pt.pair.Dst, q.hdr.BaseOffset, last.end-1, len(qs), e.base, pt.dst)
		return
	}
	if len(qs) > 1 && !runAnswered(qs, e) {
		pt.err = fmt.Errorf("%w: the append of the %d batches of source offsets %d-%d of %s was answered for %d offsets at %v", errInvariant,
			len(qs), q.hdr.BaseOffset, last.end-1, pt.pair.Src, e.n, e.bases)
		return
	}
	pt.src, pt.dst, pt.dirty, pt.appended, pt.acked = max(pt.src, last.end), e.base+e.n, true, true, true
	for i, b := range qs {
		if len(pt.pend) == 2*WindowSpans {
			pt.pend = append(pt.pend[:0], pt.pend[WindowSpans:]...)
		}
		// One span per source batch, also inside a joined batch: the
		// translation of a position finds its batch's records there.
		sp := translate.Span{From: max(b.from, b.hdr.BaseOffset), Base: b.hdr.BaseOffset, End: b.end, DstBase: e.base, DstEnd: e.base + e.n}
		if len(qs) > 1 {
			sp.DstBase = e.bases[i]
			sp.DstEnd = sp.DstBase + int64(b.hdr.LastOffsetDelta) + 1
		}
		pt.pend = append(pt.pend, sp)
		p.appendedBytes += int64(len(b.raw))
		p.counts.Add(BatchesMirrored, 1)
		p.counts.Add(RecordsMirrored, int64(b.hdr.NumRecords))
		p.counts.Add(BytesMirrored, int64(len(b.raw)))
	}
	pt.lastTS = last.hdr.MaxTimestamp
	if e.reencode {
		p.counts.Add(BatchesReencoded, 1)
	}
	if e.merged {
		p.counts.Add(BatchesCoalesced, 1)
		p.counts.Add(SourceBatchesCoalesced, int64(len(qs)))
	}
}

// records are the state records of a commit: the checkpoint of every
// partition whose position moved since the last commit, and the link
// record last.
func (p *txnPlan) records(now time.Time, state statestore.LinkState) []statestore.Record {
	recs := p.extra
	p.extra = nil
	for _, k := range p.order {
		pt := p.parts[k]
		if !pt.dirty {
			continue
		}
		recs = append(recs, statestore.Record{
			Key: statestore.CheckpointKey{LinkName: p.link, TopicID: statestore.UUID(pt.pair.Dst.ID), Partition: pt.pair.Dst.Partition},
			Value: statestore.CheckpointValue{SourceTopic: pt.pair.Src.Topic, SourcePartition: pt.pair.Src.Partition,
				SourceNextOffset: pt.src, DestNextOffset: pt.dst, TimestampMs: now.UnixMilli(), SourceTopicID: statestore.UUID(pt.pair.Src.ID)},
		})
	}
	return append(recs, p.linkRecord(now, state))
}

// linkRecord is the link record a commit at now carries: the state and the
// lease it renews.
func (p *txnPlan) linkRecord(now time.Time, state statestore.LinkState) statestore.Record {
	return statestore.Record{Key: statestore.LinkKey{LinkName: p.link}, Value: statestore.LinkValue{
		State: state, SessionEpoch: p.epoch, SourceClusterID: p.srcID, DestinationClusterID: p.dstID,
		LeaseExpiresMs: now.Add(p.lease).UnixMilli(), TimestampMs: now.UnixMilli(),
		Delivery: statestore.DeliveryTransactional, Agent: p.agent, Fingerprint: p.fingerprint,
	}}
}

// partitions is the status of every partition, in the order they joined.
func (p *txnPlan) partitions(now time.Time) []PartitionStatus {
	out := make([]PartitionStatus, 0, len(p.order))
	for _, k := range p.order {
		pt := p.parts[k]
		phase := "idle"
		switch {
		case p.commit != commitNone:
			phase = "committing"
		case pt.sent > 0 || len(pt.queue) > 0:
			phase = "appending"
		}
		ps := PartitionStatus{SourceTopic: pt.pair.Src.Topic, DestinationTopic: pt.pair.Dst.Topic, Partition: pt.pair.Src.Partition,
			Phase: phase, SourceNextOffset: pt.src, DestNextOffset: pt.dst, HighWatermark: pt.hw,
			CheckpointSource: -1, CheckpointDest: -1}
		if pt.hasCk {
			ps.CheckpointSource, ps.CheckpointDest = pt.ckSrc, pt.ckDst
		}
		if pt.hw >= 0 {
			ps.Lag = max(pt.hw-pt.src, 0)
			lag := 0.0
			if ps.Lag > 0 && pt.lastTS > 0 {
				lag = max(now.Sub(time.UnixMilli(pt.lastTS)).Seconds(), 0)
			}
			ps.LagSeconds = &lag
		}
		out = append(out, ps)
	}
	return out
}

// Anchor is what the session knows of source partition src for offset
// translation (translate.Anchor), copied; false if the session does not
// mirror it. Only what is committed counts: its head is the last committed
// checkpoint, not the position of the open transaction's appends, since
// an abort throws those away and the next session appends them again
// after the destination offsets they had (a consumer moved to such a
// position would skip the copies). Translation reads the destination as a
// read_committed consumer does (translate.Logs.Stamped). Its window is
// the partition's last committed appends. A partition without a committed
// checkpoint has nothing to translate yet.
func (p *txnPlan) Anchor(src tp.Key) (translate.Anchor, bool) {
	pt := p.parts[src]
	if pt == nil {
		return translate.Anchor{}, false
	}
	a := translate.Anchor{Pair: pt.pair, SrcNext: -1, DstNext: -1, CkSrc: -1, CkDst: -1}
	if pt.hasCk {
		a.Head = true
		a.SrcNext, a.DstNext, a.CkSrc, a.CkDst = pt.ckSrc, pt.ckDst, pt.ckSrc, pt.ckDst
		a.Spans = pt.win.list()
	}
	return a, true
}

// Pairs returns every partition the session mirrors, in the order they
// joined.
func (p *txnPlan) Pairs() []Pair {
	out := make([]Pair, 0, len(p.order))
	for _, k := range p.order {
		out = append(out, p.parts[k].pair)
	}
	return out
}

// leaseEnd is when the lease of the session's last successful commit ends
// (its link record's LeaseExpiresMs); the zero time before any.
func (p *txnPlan) leaseEnd() time.Time {
	if p.committedAt.IsZero() {
		return time.Time{}
	}
	return p.committedAt.Add(p.lease)
}

// known is every partition the session mirrors, for discovery.
func (p *txnPlan) known() []tp.Partition {
	out := make([]tp.Partition, 0, len(p.order))
	for _, k := range p.order {
		out = append(out, p.parts[k].pair.Src)
	}
	return slices.Clip(out)
}
