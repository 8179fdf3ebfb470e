package link

import (
	"time"

	"github.com/seed83556561/mirrord/barrier"
	"github.com/seed83556561/mirrord/fetcher"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/statestore"
	"github.com/seed83556561/mirrord/transform"
	"github.com/seed83556561/mirrord/twin"
)

// phase is where one destination partition is in its session: one explicit
// phase instead of a set of flags (DESIGN §12).
//
//	reconciling ──▶ admitting ──▶ idle ⇄ appending ⇄ settling
//	                                 ⇅  ↘        ↗
//	                              salting joining
//	any ──▶ removed (the source confirmed the partition gone)
type phase uint8

const (
	// phaseReconciling: its destination tail is being walked against the
	// source (at most MaxReconciling partitions at once are active; the
	// others wait, unassigned).
	phaseReconciling phase = iota
	// phaseAdmitting: waits for the state transaction that commits its
	// MIRROR_PID_RESET barrier and first checkpoint (DESIGN §8); nothing
	// is fetched for it meanwhile.
	phaseAdmitting
	// phaseIdle: mirroring, and nothing of it is with the appender.
	phaseIdle
	// phaseSalting: its head batch waits for a collision salt to commit.
	phaseSalting
	// phaseJoining: a run of its batches from the head is being joined
	// into one (coalesce.go), off the pipeline's goroutine; nothing of it
	// is with the appender yet.
	phaseJoining
	// phaseAppending: its head batch is with the appender.
	phaseAppending
	// phaseSettling: its head batch's append outcome is unknown and is
	// being settled against the destination.
	phaseSettling
	// phaseRemoved: the source confirmed the partition gone.
	phaseRemoved
)

var phaseNames = [...]string{"reconciling", "admitting", "idle", "salting", "joining", "appending", "settling", "removed"}

func (p phase) String() string { return phaseNames[p] }

// mirroring reports whether the partition is past its barrier.
func (p phase) mirroring() bool { return p >= phaseIdle && p <= phaseSettling }

// inFlight reports whether an append of the partition is unresolved: with
// the appender, or of unknown outcome and being settled.
func (p phase) inFlight() bool { return p == phaseAppending || p == phaseSettling }

// item is one entry of a partition's queue: a fetched batch, or (raw nil) a
// position past what the fetcher consumed without forwarding (control
// batches, aborted transactions, records lost under "earliest").
type item struct {
	raw  []byte
	hdr  transform.Header
	from int64 // the fetch position: records of the batch before it are not forwarded
	end  int64 // source offset after this item
	// pin is the fetch result's hold on its response, carried by the
	// result's last item and released when that item is done (I7).
	pin fetcher.Pin
	// lost: the offsets of this item (raw nil) are below the source's log
	// start, passed while reconciling: maybe mirrored, maybe lost.
	lost bool
}

// partition is the pipeline state of one destination partition.
type partition struct {
	Pair
	phase phase
	psm   *transform.PSM
	gen   uint64 // fetcher generation; 0: not assigned

	queue []item
	head  int

	// The head batch while it is with the appender or being settled.
	// run is how many queued items from the head it holds: above 1 when
	// it joins a run of one producer's batches (coalesce.go). While the
	// run is joined (phaseJoining), dec is the head's decision alone and
	// joinDec the run's.
	dec         twin.Decision
	run         int
	joinDec     transform.Decision
	tag         uint64
	refetchedAt int64 // source offset of the last batch refetched after CORRUPT_MESSAGE; -1 none

	// srcNext and dstNext are the acknowledged positions: every forwarded
	// source batch below srcNext is at the destination below dstNext.
	srcNext, dstNext int64
	ckSrc, ckDst     int64 // as last committed; -1 before the first checkpoint
	// ckProducers is the producer state saved with that checkpoint, for
	// offset translation's walks from it (translate.Anchor.Producers).
	ckProducers []transform.ProducerEntry
	hw, lso     int64 // the source's, as the last fetch reported them
	// doneAt is the record time (recordTime) of the last batch the
	// partition finished (appended or found at the destination); 0 none.
	doneAt int64

	win window // the batches appended last, for offset translation (window.go)

	// Producer-state expiry (producer_state_expiry) changes how later
	// batches are decided, so it takes effect only at a checkpoint, with
	// nothing of the partition in flight, and nothing more is submitted
	// until that checkpoint committed: every batch past a checkpoint is
	// decided with the state it saves (I3). expiryWanted: an expiry is due
	// and waits for the partition's append in flight; expiring: the ID of
	// the commit that records the partition's expiry (0: none).
	expiryWanted bool
	expiring     uint64

	rc      *recon // phaseReconciling only
	initial bool   // one of the partitions PREPARING found
	// limit bounds a joined batch (coalesce.go: limitOf); 0: nothing of
	// the partition is joined.
	limit int64
	gone  bool // the source confirmed it gone: removed once nothing is in flight
}

func newPartition(pr Pair, psm *transform.PSM) *partition {
	return &partition{Pair: pr, psm: psm, refetchedAt: -1, ckSrc: -1, ckDst: -1, hw: -1, lso: -1}
}

func (p *partition) pending() int { return len(p.queue) - p.head }

// recordTime is the time, in Unix milliseconds, a consumer sees on the
// batch's earliest record: the broker's append time for LogAppendTime
// batches (every record carries the batch's max timestamp), else the
// first record's create time.
func recordTime(h transform.Header) int64 {
	if h.Attributes&transform.AttrTimestampLogAppend != 0 {
		return h.MaxTimestamp
	}
	return h.FirstTimestamp
}

// timeLag is how far behind the partition is in time at now: zero when
// nothing is pending; else now minus the record time of the oldest batch
// it holds and has not finished, or, when it holds none yet (the fetch is
// behind too), minus that of the last batch it finished, which makes it an
// upper bound. ok is false when neither is known (nothing fetched this
// session). The times are the source's records' (CreateTime: the
// producer's clock), so a future timestamp reads as 0.
func (p *partition) timeLag(now time.Time, lag int64) (d time.Duration, ok bool) {
	if lag <= 0 {
		return 0, true
	}
	at := p.doneAt
	if p.pending() > 0 {
		at = recordTime(p.queue[p.head].hdr)
	}
	if at <= 0 {
		return 0, false
	}
	return max(now.Sub(time.UnixMilli(at)), 0), true
}

// pop takes the head item off the queue and returns its pin.
func (p *partition) pop() fetcher.Pin {
	it := &p.queue[p.head]
	pin := it.pin
	*it = item{}
	p.head++
	if p.head == len(p.queue) {
		p.queue, p.head = p.queue[:0], 0
	}
	return pin
}

// barrierKey is the partition as the state topic's barrier and salt
// records name it.
func (p *partition) barrierKey() barrier.Partition {
	return barrier.Partition{TopicID: statestore.UUID(p.Dst.ID), Partition: p.Dst.Partition}
}

// recon is a reconciliation in progress (phaseReconciling).
type recon struct {
	w      *twin.Walker
	active bool // assigned and reading; otherwise waiting for a slot

	dst     [][]byte // destination batches read and not yet compared
	dstPos  int64    // next destination offset to read
	dstEnd  int64    // the destination end offset when the partition joined
	reading bool     // a tail read is outstanding
	dstDone bool     // the tail is read to dstEnd

	// The source side: whether it has anything committed past the
	// walker's position (DESIGN §12 case 9: a last stable offset can
	// regress briefly after a leader change, so "nothing more" must hold
	// for ExhaustGrace before the rest of the tail is called foreign).
	asking     bool      // an DoLookupSourceEnd is outstanding
	askedAt    time.Time // when it was last sent
	emptySince time.Time // the source has shown nothing past the position since; zero: not seen so
	exhausted  bool
	// lost are the source offset ranges [from, to) found deleted below
	// the log start during the walk (judgeLost).
	lost [][2]int64

	// A hole: the destination deleted records past the checkpoint
	// (twin.Walker.Hole). place rebuilds the checkpoint's producer state
	// when the walk starts again (restartWalk); foreign counts the
	// destination batches earlier walks found foreign.
	hole     bool
	place    Placement
	restarts int
	foreign  int
}

// key is a partition key, for maps.
type key = tp.Key
