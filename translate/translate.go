package translate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/internal/backoff"
	"github.com/seed83556561/mirrord/internal/kafka/leaders"
	"github.com/seed83556561/mirrord/internal/kafka/rawfetch"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/statestore"
	"github.com/seed83556561/mirrord/transform"
	"github.com/seed83556561/mirrord/twin"
)

// Errors of offset translation, matched with errors.Is; each comes wrapped
// with the partition and offsets it concerns.
var (
	// ErrNotMirrored: the link does not mirror that partition (its topic
	// is not selected, the partition does not exist, or the link has not
	// mirrored it yet).
	ErrNotMirrored = errors.New("not a partition the link mirrors")
	// ErrBelowDestinationStart: the records at and after the position are
	// no longer, or never were, at the destination: destination retention
	// deleted them, or the link began mirroring after them.
	ErrBelowDestinationStart = errors.New("below the destination's log start")
	// ErrAheadOfLink: the source holds committed records between the
	// link's position and the position asked for; the link has not
	// mirrored them yet (or they are not yet stable at the source).
	ErrAheadOfLink = errors.New("past the link's position")
	// ErrPastSourceEnd: the position is past the source partition's high
	// watermark.
	ErrPastSourceEnd = errors.New("past the source partition's end")
	// ErrUntranslatable: no destination batch that mirrors the source
	// batch was found within the translation's budget, or no exact
	// answer exists.
	ErrUntranslatable = errors.New("no mirror of the source batch found")
	// ErrInexact comes with ErrUntranslatable where the logs no longer
	// hold what an exact answer needs: the source's cleaner removed
	// records of a batch the link had re-encoded, around the position
	// (README, "When the logs change after mirroring").
	ErrInexact = errors.New("no exact answer exists")
)

// Result is where a consumer at source position SourceOffset resumes at the
// destination.
type Result struct {
	SourceTopic       string `json:"source_topic"`
	DestinationTopic  string `json:"destination_topic"`
	Partition         int32  `json:"partition"`
	SourceOffset      int64  `json:"source_offset"`
	DestinationOffset int64  `json:"destination_offset"`
	// Via says how it was found: head, window, checkpoint or timestamp,
	// or origin: the first source batch from SourceOffset on started at
	// the destination, and the answer is its original there. Where both
	// clusters are written (a link in the other direction copies the
	// destination's records into the source), reverse or
	// reverse-checkpoint: the answer was lowered to the original of the
	// first such copy from SourceOffset on, or to that link's last
	// checkpoint at the destination, so that a group at SourceOffset
	// re-reads records rather than skips the destination's it had not
	// read (job.unread).
	Via string `json:"via"`
	// SourceLogStart is set when SourceOffset lay below the source's log
	// start: the translation is the log start's.
	SourceLogStart int64 `json:"source_log_start,omitempty"`
	// SourceBatch and DestinationBatch are the base offsets of the first
	// mirrored source batch with a record at or after SourceOffset and of
	// its twin; -1 for a head translation.
	SourceBatch      int64 `json:"source_batch_offset"`
	DestinationBatch int64 `json:"destination_batch_offset"`
	// Requests and Bytes are what the translation cost: Kafka requests
	// sent and record bytes read, both clusters together.
	Requests int   `json:"requests"`
	Bytes    int64 `json:"bytes_read"`
}

// Bounds of one translation.
const (
	// translateChunk is the partition limit of a translation's fetches
	// (a broker returns a larger first batch whole, KIP-74).
	translateChunk = 1 << 20
	// translateBudget is the most a translation reads from each cluster.
	translateBudget = 16 << 20
	// abortedBudgetFactor: a Stamped translation reads up to this many
	// budgets of aborted transactions at the destination besides its
	// budget (a crashed session leaves up to 64 MiB, txnCommitBytes).
	abortedBudgetFactor = 8
	// translateAttempts bounds the tries of one request that fails
	// retriably (a leader moved, a connection dropped).
	translateAttempts = 6
)

var translateRetry = backoff.Policy{First: 50 * time.Millisecond, Max: time.Second}

// Logs reads the two logs of a link's partitions, the source's and the
// destination's, and translates positions with what an Anchor says: one
// request at a time, one partition per request. It keeps nothing between
// translations but the leader caches of its Clusters, and is safe for
// concurrent use (each translation has its own re-encoder and producer
// state).
type Logs struct {
	Source, Destination *Cluster
	// From is the source cluster as the link maps its producers.
	From twin.Source
	// Now is the clock the walks' producer-state commits read (nil:
	// time.Now).
	Now func() time.Time
	// Budget is what one translation may read from each cluster (0:
	// translateBudget).
	Budget int64
	// Stamped: the link delivers transactionally (DESIGN §14), so its
	// batches carry its sessions' producer IDs, epochs and sequences,
	// not the source's. Batches are then compared by content alone:
	// both sides are read with their producer fields stripped
	// (transform.Unstamp), which makes every batch one without a
	// producer ID, whose copies the search tells apart by their order;
	// and the destination is read as a read_committed consumer reads
	// it, so that the data of an aborted session's transaction is never
	// taken for a mirror.
	Stamped bool
	// Reverse, when set, returns the last checkpoint of the partition by a
	// link in the other direction (statestore.Origins.Reverse): with
	// both clusters written, a translation then also bounds its answer
	// by the records of the destination that had not reached the source
	// (job.unread).
	Reverse func(ctx context.Context, src, dst tp.Partition) (statestore.Reverse, bool, error)
}

// Cluster is one cluster as translations read it: raw fetches and
// ListOffsets sent to each partition's leader, following leader moves.
type Cluster struct {
	cl      *kgo.Client
	leaders *leaders.Cache
	// screen, when set, sees the headers of every batch a translation
	// fetched from this cluster before they are decided (Screened).
	screen func(ctx context.Context, hs []transform.Header) error
}

// Screened returns c reading the same way, with fn called on the headers
// of every batch fetched through it before the batches are decided (the
// link learns the origins of transactional producer IDs there,
// statestore.Origins.Learn). An error of fn fails the read.
func (c *Cluster) Screened(fn func(ctx context.Context, hs []transform.Header) error) *Cluster {
	cc := *c
	cc.screen = fn
	return &cc
}

// NewCluster reads through cl, which the caller owns and closes.
func NewCluster(cl *kgo.Client) *Cluster {
	return &Cluster{cl: cl, leaders: leaders.New(cl, 0)}
}

// Translate translates source position p of the partition a describes.
func (lg *Logs) Translate(ctx context.Context, a Anchor, p int64) (Result, error) {
	x := &job{
		Logs:     lg,
		a:        a,
		src:      twin.Source{Cluster: lg.From.Cluster, Region: lg.From.Region},
		reenc:    transform.NewReencoder(),
		psm:      saltedPSM(a.Salts),
		dstStart: -1,
		out: Result{
			SourceTopic: a.Src.Topic, DestinationTopic: a.Dst.Topic, Partition: a.Src.Partition,
			SourceOffset: p, SourceBatch: -1, DestinationBatch: -1,
		},
	}
	if x.budget = lg.Budget; x.budget <= 0 {
		x.budget = translateBudget
	}
	if x.now = lg.Now; x.now == nil {
		x.now = time.Now
	}
	err := x.run(ctx, p)
	if err == nil {
		err = x.unread(ctx, x.out.SourceOffset)
	}
	if err == nil {
		// An answer below the destination's log start (the pair above
		// or the head, when the destination deleted past it) is no
		// place to resume: the mirrors up to there are gone.
		if start, serr := x.destinationStart(ctx); serr != nil {
			err = serr
		} else if x.out.DestinationOffset < start {
			err = fmt.Errorf("%w: the translation is destination offset %d, and the destination's log starts at %d",
				ErrBelowDestinationStart, x.out.DestinationOffset, start)
		}
	}
	x.out.Bytes = x.srcRead + x.dstRead + x.dstSkipped
	if errors.Is(err, errBudget) {
		err = fmt.Errorf("%w: %w", ErrUntranslatable, err)
	}
	if err != nil {
		return x.out, fmt.Errorf("translate %s offset %d: %w", a.Src, p, err)
	}
	return x.out, nil
}

// saltedPSM is a producer state that maps producers as the partition's
// does and holds no producer: decide on it forwards every batch.
func saltedPSM(salts map[transform.Origin]int64) *transform.PSM {
	psm := transform.NewPSM(transform.PSMConfig{})
	for o, s := range salts {
		psm.AddSalt(o, s, time.Time{})
	}
	return psm
}

// job is one translation in progress.
type job struct {
	*Logs
	a Anchor
	// src is From without its Returns: committed leaves out the batches
	// the link does not send (DESIGN §16), deciding by their producer ID
	// before a Stamped read strips it, so the rest decides as forwarded.
	src    twin.Source
	budget int64
	now    func() time.Time
	reenc  *transform.Reencoder
	psm    *transform.PSM // salts only: decide, never commit
	out    Result

	srcRead, dstRead int64
	dstSkipped       int64 // destination bytes of aborted transactions read past (Stamped)
	dstStart         int64 // the destination's log start as a fetch reported it; -1 unknown
	// byContent: destination reads are read as a Stamped link's are
	// (committed only, producer identity stripped), for origin's search
	// of the original of a transactional link's copy.
	byContent bool
	// passed is how many destination batches with records the last
	// scanFor went past, after the predecessor's mirror, without taking
	// them for a candidate's mirror.
	passed int

	last    *read // the last source read, at lastPos: reading the same position twice costs nothing
	lastPos int64
	// parts are the source batches decoded for looking for them in runs
	// (Stamped), by base offset.
	parts map[int64]*twin.Part
}

// cut is a pair of positions: every batch the link mirrored from below s is
// below d at the destination, and every one from s on is at d or later.
type cut struct {
	s, d      int64
	producers []transform.ProducerEntry // the producer state at the cut, if known
	known     bool
}

func (x *job) run(ctx context.Context, p int64) error {
	a := x.a
	if p < 0 {
		return fmt.Errorf("source offset %d is negative", p)
	}
	if a.Head && p > a.SrcNext {
		return x.head(ctx, p, a.SrcNext, a.DstNext)
	}
	// A position below the source's log start is the log start's.
	if _, err := x.committed(ctx, p); err != nil {
		var re *rangeError
		switch {
		case !errors.As(err, &re):
			return err
		case p > re.end:
			return fmt.Errorf("%w: the source's high watermark is %d", ErrPastSourceEnd, re.end)
		case p >= re.start:
			return err
		}
		x.out.SourceLogStart = re.start
		p = re.start
	}
	// Before the head too: at the link's position, the next batch may be
	// one that started at the destination, which the link will skip, and
	// whose original lies before the head at the destination.
	if done, err := x.viaOrigin(ctx, p); done {
		return err
	}
	if a.Head && p >= a.SrcNext {
		return x.head(ctx, p, a.SrcNext, a.DstNext)
	}
	if n := len(a.Spans); n > 0 && a.Head && p >= a.Spans[0].From {
		err := x.viaWindow(ctx, p)
		if !errors.Is(err, errWindowStale) {
			return err
		}
	}
	if lo := x.lower(p); lo.known {
		err := x.viaWalk(ctx, lo, x.upper(p), p)
		if !errors.Is(err, errWalkLost) {
			return err
		}
	} else if !a.Head && a.CkSrc < 0 {
		return fmt.Errorf("%w: the link has no checkpoint of %s yet", ErrNotMirrored, a.Src)
	}
	return x.viaTimestamp(ctx, p, x.upper(p))
}

// errWindowStale: the destination no longer holds a span's batch where the
// window says; errWalkLost: a walk met a batch it cannot place. Both hand
// the translation to the timestamp search.
var (
	errWindowStale = errors.New("the destination does not hold the window's batch")
	errWalkLost    = errors.New("the walk met a destination batch it cannot place")
)

// lower is the greatest pair of positions at or below p that a walk can
// start from: the checkpoint, or a reconciling partition's position.
func (x *job) lower(p int64) cut {
	a := x.a
	var c cut
	if a.CkSrc >= 0 && a.CkSrc <= p {
		c = cut{s: a.CkSrc, d: a.CkDst, producers: a.Producers, known: true}
	}
	if !a.Head && a.SrcNext >= 0 && a.SrcNext <= p && (!c.known || a.SrcNext > c.s) {
		c = cut{s: a.SrcNext, d: a.DstNext, known: true}
	}
	return c
}

// upper is the least pair of positions above p: the window's first span,
// the head, or the checkpoint. Without one (known false) the destination's
// high watermark bounds the reads.
func (x *job) upper(p int64) cut {
	a := x.a
	var c cut
	consider := func(s, d int64) {
		if s > p && (!c.known || s < c.s) {
			c = cut{s: s, d: d, known: true}
		}
	}
	if len(a.Spans) > 0 && a.Head {
		consider(a.Spans[0].From, a.Spans[0].DstBase)
	}
	if a.Head {
		consider(a.SrcNext, a.DstNext)
	}
	if a.CkSrc >= 0 {
		consider(a.CkSrc, a.CkDst)
	}
	return c
}

// head translates p at or past the pair (s, d) beyond which the destination
// holds nothing of the link's: d, if the source has no committed record from
// s up to p.
func (x *job) head(ctx context.Context, p, s, d int64) error {
	x.out.Via = "head"
	for pos := s; pos < p; {
		r, err := x.committed(ctx, pos)
		if err != nil {
			var re *rangeError
			if errors.As(err, &re) && pos > re.end {
				return fmt.Errorf("%w: the source's high watermark is %d", ErrPastSourceEnd, re.end)
			}
			return err
		}
		for _, c := range r.batches {
			if o := c.firstFrom(pos); o >= 0 && o < p {
				return fmt.Errorf("%w: the link has mirrored %s up to offset %d, and the source holds committed records from offset %d on",
					ErrAheadOfLink, x.a.Src, s, o)
			}
		}
		if r.next > pos {
			pos = r.next
			continue
		}
		if p > r.hw {
			return fmt.Errorf("%w: the source's high watermark is %d", ErrPastSourceEnd, r.hw)
		}
		if p > r.lso {
			return fmt.Errorf("%w: the source's records from its last stable offset %d up to %d are not decided yet (an open transaction)",
				ErrAheadOfLink, r.lso, p)
		}
		break
	}
	x.out.DestinationOffset = d
	return nil
}

// viaWindow translates p inside the window: the first committed source
// batch from p with a span is the first mirrored one (the pipeline made a
// span of every batch it appended), and its twin must be where the span
// says.
func (x *job) viaWindow(ctx context.Context, p int64) error {
	x.out.Via = "window"
	spans := x.a.Spans
	for pos := p; pos < x.a.SrcNext; {
		r, err := x.committed(ctx, pos)
		if err != nil {
			return err
		}
		for _, c := range r.batches {
			if c.h.NextOffset() > x.a.SrcNext {
				// Not mirrored yet: nothing between p and the head is.
				x.out.DestinationOffset = x.a.DstNext
				return nil
			}
			i, found := slices.BinarySearchFunc(spans, c.h.BaseOffset, func(sp Span, base int64) int { return cmp.Compare(sp.Base, base) })
			if !found {
				continue // a batch the pipeline skipped (a duplicate)
			}
			sp := spans[i]
			ds, err := x.dstBatches(ctx, sp.DstBase)
			if err != nil {
				return err
			}
			if len(ds) == 0 {
				return errWindowStale
			}
			dh, _ := transform.ParseHeader(ds[0])
			if dh.BaseOffset <= sp.DstBase && (dh.BaseOffset < sp.DstBase || dh.NextOffset() > sp.DstEnd) {
				// A part of a run the link appended as one batch
				// (coalescing): the span says where c's records
				// begin inside it.
				ok := sp.From == c.h.BaseOffset && c.h.Dense() && sp.DstEnd-sp.DstBase == int64(c.h.LastOffsetDelta)+1 && sp.DstEnd <= dh.NextOffset() &&
					x.producerPart(c, dh, sp.DstBase-dh.BaseOffset)
				if ok {
					if ok, err = twin.Within(x.reenc, c.raw, c.h, sp.From, ds[0], int(sp.DstBase-dh.BaseOffset)); err != nil {
						return err
					}
				}
				if !ok {
					return errWindowStale
				}
				return x.found(c, sp.From, ds[0], sp.DstBase, p)
			}
			ok, err := x.mirror(c, sp.From, ds[0])
			if err != nil {
				return err
			}
			if dh.BaseOffset != sp.DstBase || !ok {
				return errWindowStale
			}
			return x.found(c, sp.From, ds[0], sp.DstBase, p)
		}
		if r.next <= pos {
			break
		}
		pos = r.next
	}
	x.out.DestinationOffset = x.a.DstNext
	return nil
}

// found ends a translation at d, the batch the link appended for source
// batch c (mirrored from from), at destination offset base: the
// destination offset of d's first record whose source offset is at least
// p (twin.Place), which is exact even after the source's cleaner cut
// records out of c, unless p falls between records it cut from a batch the
// link had already re-encoded: then ErrUntranslatable.
func (x *job) found(c srcBatch, from int64, d []byte, base, p int64) error {
	var t int64
	dh, err := transform.ParseHeader(d)
	if err == nil && x.partOf(c, from, dh, base) {
		// A part of a run the link appended as one batch (coalescing):
		// the records of c, dense and whole, from base on, one per
		// source offset.
		t = base + max(p-c.h.BaseOffset, 0)
		x.out.SourceBatch, x.out.DestinationBatch, x.out.DestinationOffset = c.h.BaseOffset, dh.BaseOffset, t
		if x.dstStart >= 0 && t < x.dstStart {
			return fmt.Errorf("%w: the mirror of source offset %d is destination offset %d, and the destination's log starts at %d",
				ErrBelowDestinationStart, max(p, from), t, x.dstStart)
		}
		return nil
	}
	if err == nil && !x.Stamped && from == c.h.BaseOffset && dh.NumRecords < c.h.NumRecords {
		// A mirror the destination's cleaner cut (twin.CutAtDestination):
		// it keeps the offsets the link appended the batch's records at,
		// the source batch's i-th record at base+i (its offset delta; its
		// index where the link re-encoded a batch with gaps). A record it
		// removed leaves its offset, from which a consumer reads the next
		// record it kept.
		before := int64(0)
		for _, o := range c.offsets {
			if o < p {
				before++
			}
		}
		x.out.SourceBatch, x.out.DestinationBatch = c.h.BaseOffset, base
		x.out.DestinationOffset = base + before
		return nil
	}
	i, exact, err := twin.Place(x.reenc, c.raw, c.h, from, d, p)
	if err != nil {
		return err
	}
	t = base + int64(i)
	x.out.SourceBatch, x.out.DestinationBatch, x.out.DestinationOffset = c.h.BaseOffset, base, t
	if !exact {
		return fmt.Errorf("%w: %w: the source's cleaner removed records of the batch at source offset %d around offset %d after the link mirrored it (as destination batch %d, re-encoded), and which of its records came from before offset %d is no longer known",
			ErrUntranslatable, ErrInexact, c.h.BaseOffset, p, base, p)
	}
	if x.dstStart >= 0 && t < x.dstStart {
		return fmt.Errorf("%w: the mirror of source offset %d is destination offset %d, and the destination's log starts at %d",
			ErrBelowDestinationStart, max(p, from), t, x.dstStart)
	}
	return nil
}

// partOf reports whether the destination batch dh holds source batch c
// (mirrored from from) as a part of a run, from destination offset base
// on, as a link coalesces (twin.Run): base inside the batch, or the batch
// holding more records than c has offsets. The caller checked the records
// (and, in preserve delivery, the producer's identity: producerPart).
func (x *job) partOf(c srcBatch, from int64, dh transform.Header, base int64) bool {
	return c.h.Dense() && from <= c.h.BaseOffset &&
		(base != dh.BaseOffset || int64(dh.NumRecords) > int64(c.h.LastOffsetDelta)+1)
}

// producerPart reports whether, by its producer's identity, source batch c
// may be the part of destination batch dh that begins at its record at:
// always for a Stamped link (its batches carry its sessions' identity,
// and content tells the parts); in preserve delivery, which joins only a
// producer's consecutive batches (link/coalesce.go), dh must carry c's
// mapped producer ID and epoch, and c's base sequence must be dh's plus
// at, the records of the run before c.
func (x *job) producerPart(c srcBatch, dh transform.Header, at int64) bool {
	if x.Stamped {
		return true
	}
	if c.h.ProducerID == -1 || c.h.BaseSequence < 0 || dh.BaseSequence < 0 || dh.ProducerEpoch != c.h.ProducerEpoch ||
		int64(dh.BaseSequence)+at != int64(c.h.BaseSequence) {
		return false
	}
	d := x.psm.Decide(transform.InfoOf(c.h, x.src.Cluster, x.src.Region))
	return d.Mapped == dh.ProducerID
}

// mirror reports whether destination batch d is the batch the link
// appended for source batch c, fetched from position from (twin.Same: also
// after the source log changed), deciding c as the pipeline does, with the
// partition's salts. Stamped, a batch of c's codec with more records
// than dense c has offsets is c's only where c's records are its first
// ones, each at its offset delta (the first part of a run): Same's cut,
// which finds c's records anywhere in it in order, would otherwise take a
// run's later part for c's mirror. A c with gaps, or of another codec
// (the source's cleaner cut it since, and kfake's cleaner also shrinks a
// cut batch's offset range and writes it uncompressed, so that its mirror
// may hold more records than it has offsets), is left to Same's cut as
// before: a session joins no batch of a compacted topic
// (link/coalesce.go), so such a c is a batch the link appended alone.
func (x *job) mirror(c srcBatch, from int64, d []byte) (bool, error) {
	same, _, err := twin.Same(x.psm, x.src, x.reenc, c.raw, c.h, from, d)
	if err == nil && same != twin.NotSame && same != twin.Twin && same != twin.Whole {
		if dh, _ := transform.ParseHeader(d); int64(dh.NumRecords) > int64(c.h.LastOffsetDelta)+1 && c.h.Dense() && dh.Compression() == c.h.Compression() {
			if !x.producerPart(c, dh, 0) {
				return false, nil
			}
			return twin.Within(x.reenc, c.raw, c.h, c.h.BaseOffset, d, 0)
		}
	}
	if err != nil || same != twin.NotSame {
		return same != twin.NotSame, err
	}
	if psm := x.expiredSalt(c, d); psm != nil {
		same, _, err = twin.Same(psm, x.src, x.reenc, c.raw, c.h, from, d)
	}
	return same != twin.NotSame, err
}

// expiredSalt is the partition's producer state with the salt d's producer
// ID says the link used for c's producer when that is not the salt the
// partition holds for it now, or nil: producer_state_expiry tombstoned the
// salt the link appended c under (its producer fell silent), and the source
// still holds c. Nothing else maps c's producer ID to that salted one (the
// same low bits under the region plus the salt, transform.SaltOf), and
// Same still compares everything after the producer ID.
func (x *job) expiredSalt(c srcBatch, d []byte) *transform.PSM {
	dh, err := transform.ParseHeader(d)
	if err != nil {
		return nil
	}
	salt, ok := transform.SaltOf(c.h.ProducerID, x.src.Region, dh.ProducerID)
	o := transform.Origin{Cluster: x.src.Cluster, PID: c.h.ProducerID}
	if held, has := x.a.Salts[o]; !ok || has && held == salt {
		return nil
	}
	salts := maps.Clone(x.a.Salts)
	if salts == nil {
		salts = map[transform.Origin]int64{}
	}
	salts[o] = salt
	return saltedPSM(salts)
}

// mirrorFrom is mirror trying c whole and, failing that, trimmed to the
// records d holds (the link began mirroring inside c); it returns the
// position it was decided from.
func (x *job) mirrorFrom(c srcBatch, d []byte) (from int64, ok bool, err error) {
	if ok, err := x.mirror(c, c.h.BaseOffset, d); ok || err != nil {
		return c.h.BaseOffset, ok, err
	}
	dh, err := transform.ParseHeader(d)
	if err != nil {
		return 0, false, err
	}
	if n := int(dh.NumRecords); n > 0 && n < len(c.offsets) {
		from = c.offsets[len(c.offsets)-n]
		ok, err = x.mirror(c, from, d)
		return from, ok, err
	}
	return 0, false, nil
}

// viaWalk walks from the pair lo up to p, source and destination in step,
// as reconciliation does (walker), with the producer state saved at lo:
// the first matched source batch with a record at or after p gives the
// translation. A destination batch the walk cannot place (the link owns
// its destination, so this means the walk's producer state is not the
// pipeline's) hands the translation to the timestamp search.
func (x *job) viaWalk(ctx context.Context, lo, hi cut, p int64) error {
	x.out.Via = "checkpoint"
	psm := saltedPSM(x.a.Salts)
	psm.Restore(lo.producers)
	w := twin.NewWalker(psm, x.src, x.reenc, lo.s, lo.d)
	// A session coalesces runs of source batches (issue 23): any batches
	// in transactional delivery, a producer's in preserve delivery.
	if x.Stamped {
		w.Runs()
	} else {
		w.ProducerRuns()
	}
	var (
		srcQ             []srcBatch
		dstQ             [][]byte
		srcPos, dstPos   = lo.s, lo.d
		srcDone, dstDone bool
		// lost: the source no longer holds the records from lo.s up to
		// its log start (retention, DeleteRecords, or kfake's cleaner
		// moving the log start): the destination batches before the
		// first match mirror them, and are passed over.
		lost    bool
		matched bool
	)
	for {
		if len(dstQ) == 0 && !dstDone {
			if hi.known && dstPos >= hi.d {
				dstDone = true
			} else {
				ds, err := x.dstBatches(ctx, dstPos)
				if err != nil {
					return err
				}
				for _, b := range ds {
					h, _ := transform.ParseHeader(b)
					if hi.known && h.BaseOffset >= hi.d {
						break
					}
					dstQ = append(dstQ, b)
					dstPos = h.NextOffset()
				}
				dstDone = len(dstQ) == 0
			}
		}
		if len(dstQ) == 0 {
			break
		}
		if len(srcQ) == 0 && !srcDone {
			r, err := x.committed(ctx, srcPos)
			var re *rangeError
			if errors.As(err, &re) && srcPos < re.start && !matched {
				srcPos, lost = re.start, true
				w.Pass(re.start)
				continue
			}
			if err != nil {
				return err
			}
			srcQ = r.batches
			srcDone = r.next <= srcPos
			srcPos = r.next
		}
		if len(srcQ) == 0 {
			if srcDone {
				// The source holds no committed batch the link sends
				// past the walk: the destination batches left mirror
				// nothing of it (a shared destination's own records,
				// or, in active-active, the copies the link skipped
				// came from there), and p lies past everything the
				// walk matched.
				break
			}
			continue
		}
		c := srcQ[0]
		from := max(c.from, lo.s)
		at := w.RunAt() // where c's records begin in dstQ[0]
		st, err := w.Compare(c.raw, c.h, from, dstQ[0], x.now())
		if err != nil {
			return err
		}
		switch st {
		case twin.StepMatch, twin.StepPart:
			if c.h.NextOffset() > p {
				dh, _ := transform.ParseHeader(dstQ[0])
				return x.found(c, from, dstQ[0], dh.BaseOffset+int64(at), p)
			}
			srcQ, matched = srcQ[1:], true
			if st == twin.StepMatch {
				dstQ = dstQ[1:]
			}
		case twin.StepSkip:
			srcQ = srcQ[1:]
		case twin.StepEmptied:
			dstQ = dstQ[1:] // the mirror of a batch the cleaner emptied since
		case twin.StepForeign:
			if !lost || matched {
				return errWalkLost
			}
			dstQ = dstQ[1:] // the mirror of records the source no longer holds
		default:
			return errWalkLost
		}
	}
	if w.RunAt() > 0 {
		// The source ends inside a destination batch the walk took
		// for a run: the rest of it is not placed.
		return errWalkLost
	}
	// The destination holds nothing more of the link's below the upper
	// pair (or its high watermark): p lies where nothing was mirrored.
	if hi.known {
		x.out.DestinationOffset = hi.d
		return nil
	}
	if w.SrcNext() > p {
		x.out.DestinationOffset = w.DstNext()
		return nil
	}
	err := x.head(ctx, p, w.SrcNext(), w.DstNext())
	x.out.Via = "checkpoint"
	return err
}

// viaTimestamp finds the mirror of the first committed source batch with a
// record at or after p by its create times: the destination's first offset
// at or after the batch's earliest create time lies at or before its mirror
// (which holds the same records with the same timestamps), so a scan from
// there meets it first, before the mirror of any later batch.
//
// Duplicates are told apart by their order, never by the first equal
// candidate: the scan also looks for the mirror of the source batch just
// before the candidates (a retried batch, or a chain source's copy, is
// adjacent to its original), which claims a destination batch both match.
// A later candidate met before an earlier one means the earlier one was not
// mirrored: that is accepted only for a batch the pipeline skips, a
// duplicate of the batch before it (same producer, epoch and sequence
// range); anything else may be a batch the search did not recognise, and
// the answer is ErrUntranslatable, never a guess that skips records. A
// search that meets nothing from the destination's log start on says what
// was not found lies below it.
func (x *job) viaTimestamp(ctx context.Context, p int64, hi cut) error {
	x.out.Via = "timestamp"
	var cands []srcBatch
	for pos := p; len(cands) == 0; {
		if hi.known && pos >= hi.s {
			x.out.DestinationOffset = hi.d // nothing committed from p up to the pair above
			return nil
		}
		r, err := x.committed(ctx, pos)
		if err != nil {
			return err
		}
		for _, c := range r.batches {
			if hi.known && c.h.BaseOffset >= hi.s {
				break
			}
			cands = append(cands, c)
		}
		if r.next <= pos {
			if len(cands) == 0 {
				if hi.known {
					x.out.DestinationOffset = hi.d
					return nil
				}
				return fmt.Errorf("%w: the source holds no committed record at or after offset %d", ErrUntranslatable, p)
			}
			break
		}
		pos = r.next
	}
	pred, err := x.predecessor(ctx, min(p, cands[0].h.BaseOffset))
	if err != nil {
		return err
	}
	if pred != nil && pred.h.ProducerID == -1 {
		// A plain copy of the first candidate (a retry) claims nothing
		// it could tell from the candidate's mirror: the copies are
		// placed by lastOfRun.
		if same, err := x.copies(pred.raw, cands[0].raw); err != nil {
			return err
		} else if same {
			pred = nil
		}
	}
	first := cands[:1]
	if pred != nil {
		first = append([]srcBatch{*pred}, first...)
	}
	least, err := x.earliest(first)
	if err != nil {
		return err
	}
	for pass := 0; ; pass++ {
		r, err := x.offsetAfter(ctx, least)
		if err != nil {
			return err
		}
		j, from, d, base, claimed, err := x.scan(ctx, pred, cands, r, hi, true)
		if err == nil && j < 0 && pred != nil && !claimed {
			// The batch before the candidates has no mirror (the
			// link skipped it, or the destination deleted it): any
			// mirror of a candidate counts.
			j, from, d, base, _, err = x.scan(ctx, pred, cands, r, hi, false)
		}
		if err != nil {
			return err
		}
		if j < 0 && allDuplicates(cands, pred) {
			// Every candidate is a copy the pipeline skipped (a chain
			// source's second copy of the batch before): nothing from p
			// to after them was mirrored, and the answer is that of the
			// position after them.
			return x.viaTimestamp(ctx, cands[len(cands)-1].h.NextOffset(), hi)
		}
		if j < 0 && pass == 0 && len(cands) > 1 {
			// No candidate met from the first's create time: a later
			// candidate created earlier (a plain producer's retry that
			// landed late) has its mirror before the scan's start.
			// Search again from the earliest create time of all.
			if l, err := x.earliest(cands); err != nil {
				return err
			} else if l < least {
				least = l
				continue
			}
		}
		if j < 0 {
			// Every batch mirrored from below hi is below hi.d: one not
			// found from the destination's log start on is below it.
			if start, err := x.destinationStart(ctx); err != nil {
				return err
			} else if hi.known && r <= start {
				return fmt.Errorf("%w: no destination batch from its log start %d up to %s mirrors the source batches from offset %d to %d (destination retention deleted them, or the link began mirroring after them)",
					ErrBelowDestinationStart, start, x.bound(hi), cands[0].h.BaseOffset, cands[len(cands)-1].h.NextOffset())
			}
			return fmt.Errorf("%w: no destination batch from offset %d (the first with a timestamp at or after %d) up to %s mirrors the source batches from offset %d to %d (destination log start %d)",
				ErrUntranslatable, r, least, x.bound(hi), cands[0].h.BaseOffset, cands[len(cands)-1].h.NextOffset(), x.dstStart)
		}
		if j > 0 && pass == 0 {
			// Candidates before j were not met: search again from the
			// earliest create time of all of them.
			if l, err := x.earliest(cands[:j+1]); err != nil {
				return err
			} else if l < least {
				least = l
				continue
			}
		}
		removed := false
		if j > 0 {
			removed = x.removedMirrors(ctx, cands[:j])
		}
		for i := range j {
			if duplicateOf(cands[i], pred, cands[:i]) {
				continue // skipped by the pipeline: not mirrored
			}
			if removed {
				continue // appended, and removed since by the destination's cleaner
			}
			held, err := x.heldBefore(ctx, cands[i], r, base)
			if err != nil {
				return err
			}
			if r <= x.dstStart && !held {
				return fmt.Errorf("%w: the source's committed records from offset %d on are not at the destination, whose log starts at %d with the mirror of source offset %d (destination retention deleted them, or the link began mirroring after them)",
					ErrBelowDestinationStart, cands[i].firstFrom(p), x.dstStart, cands[j].h.BaseOffset)
			}
			return fmt.Errorf("%w: the mirror of the source batch at offset %d comes before that of the batch at offset %d, which is not a duplicate the link would have skipped: it may be a batch the source changed beyond recognition, or one whose mirror the destination's cleaner removed (a compacted destination topic)",
				ErrUntranslatable, cands[j].h.BaseOffset, cands[i].h.BaseOffset)
		}
		if x.Stamped {
			if err := x.sameOrdinal(ctx, cands[j], base); err != nil {
				return err
			}
		}
		return x.found(cands[j], from, d, base, p)
	}
}

// heldBefore reports, for a Stamped link, whether a destination batch from
// offset r up to offset end holds the records c still holds inside it, at
// their offset deltas (twin.Run.Find), after its first record: a run the
// link coalesced c into, which the search could not place (the source's
// cleaner cut c since). Its mirror is then not below the destination's log
// start, only not placed.
func (x *job) heldBefore(ctx context.Context, c srcBatch, r, end int64) (bool, error) {
	if !x.Stamped {
		return false, nil
	}
	part, err := x.part(c)
	if err != nil {
		return false, err
	}
	for pos := r; pos < end; {
		ds, err := x.dstBatches(ctx, pos)
		if errors.Is(err, errBudget) || err == nil && len(ds) == 0 {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		for _, d := range ds {
			dh, _ := transform.ParseHeader(d)
			if dh.BaseOffset >= end {
				return false, nil
			}
			pos = dh.NextOffset()
			if dh.Control() || int64(dh.NumRecords) <= int64(c.h.LastOffsetDelta)+1 {
				continue
			}
			run, err := twin.NewRun(x.reenc, d)
			if err != nil {
				return false, err
			}
			if run.Find(part, c.h.BaseOffset, 1) >= 0 {
				return true, nil
			}
		}
	}
	return false, nil
}

// removedMirrors reports whether the mirrors of source batches cs, which
// the scan did not meet before a later candidate's, were removed whole by
// the destination's cleaner: the link appended them (they lie below its
// checkpoint or acknowledged head), the destination topic is compacted,
// and the scan went past no destination batch with records it could not
// place, so that no record of theirs survives between where it began (the
// first offset with their create time) and the later mirror: a consumer
// reads from the later mirror what it would have read from theirs.
// Preserve delivery only, and batches with a producer ID: a Stamped or a
// plain batch's mirror is told by content alone. Any doubt (a batch passed,
// the topic's configuration not readable) keeps the refusal.
func (x *job) removedMirrors(ctx context.Context, cs []srcBatch) bool {
	if x.Stamped || x.passed > 0 {
		return false
	}
	appended := x.a.CkSrc
	if x.a.Head {
		appended = max(appended, x.a.SrcNext)
	}
	for _, c := range cs {
		if c.h.ProducerID == -1 || c.h.NextOffset() > appended {
			return false
		}
	}
	return x.dstCompacted(ctx)
}

// dstCompacted reports whether the destination topic's cleanup.policy
// compacts; false when the cluster does not say (a refused
// DescribeConfigs, an error).
func (x *job) dstCompacted(ctx context.Context) bool {
	req := kmsg.NewPtrDescribeConfigsRequest()
	res := kmsg.NewDescribeConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeTopic
	res.ResourceName = x.a.Dst.Topic
	res.ConfigNames = []string{"cleanup.policy"}
	req.Resources = append(req.Resources, res)
	x.out.Requests++
	resp, err := req.RequestWith(ctx, x.Destination.cl)
	if err != nil {
		return false
	}
	for _, r := range resp.Resources {
		if r.ErrorCode != 0 {
			return false
		}
		for _, c := range r.Configs {
			if c.Name == "cleanup.policy" && c.Value != nil && strings.Contains(*c.Value, "compact") {
				return true
			}
		}
	}
	return false
}

// sameOrdinal checks, for a Stamped link, the mirror the timestamp search
// found for source batch c, whose records begin at destination offset base
// (a batch of its own, or a part of a run the link coalesced), by counting
// from the front: every run of records with c's records and timestamps (a
// copy: a replay, a retry, an upstream's second delivery) lies, at the
// source, at or after the first source offset with a timestamp at or after
// c's earliest, and its mirror, at the destination, at or after the first
// destination offset with one; a transactional link mirrors every
// committed record once and in order, so c's mirror is the mirror after as
// many copies as c has before it. Copies are counted record by record in
// the committed records of both logs, wherever they begin (a copy's mirror
// may be a part of a run, and the records of a copy may straddle batches
// on either side), so that both counts are of the same thing. The search
// aligns copies at their ends instead (lastOfRun, which allows for copies
// either log lost from its front, and looks runLookahead batches ahead):
// where the two disagree, as in a range of batches the source holds twice,
// longer than the lookahead, no answer is exact and the translation says
// so.
func (x *job) sameOrdinal(ctx context.Context, c srcBatch, base int64) error {
	least, err := x.earliest([]srcBatch{c})
	if err != nil {
		return err
	}
	pat, err := x.reenc.Records(c.raw)
	if err != nil {
		return fmt.Errorf("source batch at offset %d: %w", c.h.BaseOffset, err)
	}
	srcFrom, err := x.listOffset(ctx, true, least)
	if err != nil {
		return err
	}
	// The source's committed records from srcFrom through c: copies of c
	// before it begin before c's first record.
	var srcRecs []transform.Record
	for pos := max(srcFrom, 0); pos < c.h.NextOffset(); {
		r, err := x.committed(ctx, pos)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrUntranslatable, err)
		}
		for _, b := range r.batches {
			if b.h.BaseOffset > c.h.BaseOffset {
				break
			}
			if srcRecs, err = x.appendRecords(srcRecs, b.raw, pos); err != nil {
				return err
			}
		}
		if r.next <= pos {
			break
		}
		pos = r.next
	}
	dstFrom, err := x.offsetAfter(ctx, least)
	if err != nil {
		return err
	}
	// The destination's committed records from dstFrom through the batch
	// that holds base.
	var dstRecs []transform.Record
	for pos := dstFrom; pos <= base; {
		ds, err := x.dstBatches(ctx, pos)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrUntranslatable, err)
		}
		was := pos
		for _, e := range ds {
			eh, _ := transform.ParseHeader(e)
			if eh.BaseOffset > base {
				break
			}
			if dstRecs, err = x.appendRecords(dstRecs, e, was); err != nil {
				return err
			}
			pos = eh.NextOffset()
		}
		if pos == was {
			break
		}
	}
	before := occurrences(srcRecs, pat, c.h.BaseOffset) // copies of c before it at the source
	mirrors := occurrences(dstRecs, pat, base)          // mirrors of c's records before base at the destination
	if mirrors != before {
		return fmt.Errorf("%w: %w: the source holds %d copies of the records of the batch at offset %d before it (from offset %d), and the destination %d before the mirror the search found at offset %d (from offset %d): which mirror is the batch's cannot be told",
			ErrUntranslatable, ErrInexact, before, c.h.BaseOffset, srcFrom, mirrors, base, dstFrom)
	}
	return nil
}

// appendRecords appends the records of batch b at or after offset pos to
// recs.
func (x *job) appendRecords(recs []transform.Record, b []byte, pos int64) ([]transform.Record, error) {
	h, err := transform.ParseHeader(b)
	if err != nil {
		return nil, err
	}
	if h.Control() || h.NumRecords == 0 {
		return recs, nil
	}
	if err := transform.Validate(b); err != nil {
		return nil, fmt.Errorf("batch at offset %d: %w", h.BaseOffset, err)
	}
	rs, err := x.reenc.Records(b)
	if err != nil {
		return nil, fmt.Errorf("batch at offset %d: %w", h.BaseOffset, err)
	}
	for _, r := range rs {
		if r.Offset >= pos {
			recs = append(recs, r)
		}
	}
	return recs, nil
}

// occurrences counts the places in recs, beginning below offset before,
// where the records of pat follow one another, the same in content.
func occurrences(recs, pat []transform.Record, before int64) int {
	n := 0
	for i := 0; i+len(pat) <= len(recs) && recs[i].Offset < before; i++ {
		j := 0
		for j < len(pat) && recs[i+j].Same(pat[j]) {
			j++
		}
		if j == len(pat) && len(pat) > 0 {
			n++
		}
	}
	return n
}

// allDuplicates reports whether every one of cands is a duplicate of pred
// or of a candidate before it (duplicateOf).
func allDuplicates(cands []srcBatch, pred *srcBatch) bool {
	for i, c := range cands {
		if !duplicateOf(c, pred, cands[:i]) {
			return false
		}
	}
	return len(cands) > 0
}

// duplicateOf reports whether the pipeline skips source batch c as a
// duplicate of pred or of one of before: a batch of the same producer (a
// producer ID at all), epoch and sequence range.
func duplicateOf(c srcBatch, pred *srcBatch, before []srcBatch) bool {
	if c.h.ProducerID == -1 {
		return false // without a producer ID nothing is a duplicate
	}
	same := func(o srcBatch) bool {
		return o.h.ProducerID == c.h.ProducerID && o.h.ProducerEpoch == c.h.ProducerEpoch &&
			o.h.BaseSequence == c.h.BaseSequence && o.h.LastOffsetDelta == c.h.LastOffsetDelta
	}
	if pred != nil && same(*pred) {
		return true
	}
	return slices.ContainsFunc(before, same)
}

// predecessor is the committed source batch that holds offset pos-1, or nil
// if that offset holds none (a transaction marker, an aborted record, the
// log start) or pos is 0.
func (x *job) predecessor(ctx context.Context, pos int64) (*srcBatch, error) {
	if pos <= 0 {
		return nil, nil
	}
	r, err := x.committed(ctx, pos-1)
	if _, below := errors.AsType[*rangeError](err); below {
		return nil, nil // below the log start
	}
	if err != nil {
		return nil, err
	}
	for _, c := range r.batches {
		if c.h.BaseOffset <= pos-1 && pos-1 < c.h.NextOffset() && slices.Contains(c.offsets, pos-1) {
			return &c, nil
		}
	}
	return nil, nil
}

// destinationStart is the destination partition's log start.
func (x *job) destinationStart(ctx context.Context) (int64, error) {
	if x.dstStart >= 0 {
		return x.dstStart, nil
	}
	start, err := x.listOffset(ctx, false, -2)
	if err == nil {
		x.dstStart = start
	}
	return start, err
}

func (x *job) bound(hi cut) string {
	if hi.known {
		return fmt.Sprintf("offset %d (the mirror of source offset %d)", hi.d, hi.s)
	}
	return "the high watermark"
}

// earliest is the least create time of the records of cs.
func (x *job) earliest(cs []srcBatch) (int64, error) {
	least := int64(math.MaxInt64)
	for _, c := range cs {
		if err := transform.Validate(c.raw); err != nil {
			return 0, fmt.Errorf("source batch at offset %d: %w", c.h.BaseOffset, err)
		}
		ts, err := x.reenc.MinTimestamp(c.raw)
		if err != nil {
			return 0, fmt.Errorf("source batch at offset %d: %w", c.h.BaseOffset, err)
		}
		least = min(least, ts)
	}
	return least, nil
}

// scan reads the destination from offset r up to hi for the first batch
// that is the mirror of one of cands, skipping the one pred (the batch just
// before them) claims, and with after set, looking at candidates only past
// it (the link appends in source order: a candidate's mirror before pred's
// is the mirror of an earlier copy, a plain producer's retry): the
// candidate's index, the position it was mirrored from, the destination
// batch and its base offset, -1 when none is within the budget; claimed
// reports whether pred's mirror was met. A plain candidate met is then
// aligned within its run of copies (lastOfRun).
func (x *job) scan(ctx context.Context, pred *srcBatch, cands []srcBatch, r int64, hi cut, after bool) (j int, from int64, d []byte, base int64, claimed bool, err error) {
	j, from, d, base, claimed, err = x.scanFor(ctx, pred, cands, r, hi, after)
	if err != nil || j < 0 {
		return j, from, d, base, claimed, err
	}
	d, base, err = x.lastOfRun(ctx, cands[j], d, base, hi)
	return j, from, d, base, claimed, err
}

func (x *job) scanFor(ctx context.Context, pred *srcBatch, cands []srcBatch, r int64, hi cut, after bool) (j int, from int64, d []byte, base int64, claimed bool, err error) {
	// Each candidate is decided once, whole, and compared with every
	// destination batch (Match rejects a batch of another length at
	// once); the slower Same (a batch the source changed since) only
	// for a destination batch of the candidate's producer batch, and the
	// trimmed decision of mirrorFrom only for a batch of fewer records.
	whole := make([][]byte, len(cands))
	for i, c := range cands {
		dec, err := twin.Decide(x.psm, x.src, x.reenc, nil, c.raw, c.h, c.h.BaseOffset, true)
		if err != nil {
			return -1, 0, nil, 0, claimed, err
		}
		if dec.Verdict == twin.Forward {
			whole[i] = dec.Out
		}
	}
	claimed = pred == nil // the predecessor claims at most one batch
	x.passed = 0
	var (
		pending *found // a later candidate's mirror met first
		looked  int    // destination batches looked at since
	)
	for pos := r; !hi.known || pos < hi.d; {
		ds, err := x.dstBatches(ctx, pos)
		if errors.Is(err, errBudget) {
			break
		}
		if err != nil {
			return -1, 0, nil, 0, claimed, err
		}
		if len(ds) == 0 {
			break
		}
		end := false
		for _, d := range ds {
			dh, _ := transform.ParseHeader(d)
			if hi.known && dh.BaseOffset >= hi.d {
				end = true
				break
			}
			pos = dh.NextOffset()
			// A run the link appended as one batch (coalescing) holds
			// the predecessor and candidates as parts: told by the
			// source range it mirrors, not batch by batch.
			run, err := x.runAround(ctx, pred, claimed, cands, d, dh)
			if err != nil {
				return -1, 0, nil, 0, claimed, err
			}
			if !claimed {
				var ok int64
				if run != nil {
					ok = run.from(*pred)
				} else if ok, err = x.mirrorOf(*pred, whole[:0], -1, d, dh); err != nil {
					return -1, 0, nil, 0, claimed, err
				}
				if ok >= 0 {
					claimed = true
					if run == nil {
						continue
					}
					// The candidates may follow pred in the same run.
				} else if after {
					continue // not past pred's mirror yet
				}
			}
			limit := len(cands)
			if pending != nil {
				limit = pending.j
				if looked++; looked > runLookahead {
					return pending.j, pending.from, pending.d, pending.base, claimed, nil
				}
			}
			matched := false
			for i, c := range cands[:limit] {
				var from int64
				base := dh.BaseOffset
				if run != nil {
					from, base = run.from(c), run.baseOf(c)
				} else if from, err = x.mirrorOf(c, whole, i, d, dh); err != nil {
					return -1, 0, nil, 0, claimed, err
				}
				if from < 0 {
					continue
				}
				matched = true
				if i == 0 || c.h.ProducerID != -1 {
					return i, from, d, base, claimed, nil
				}
				// A plain candidate met before an earlier one: maybe the
				// mirror of an earlier copy of it (a retry) whose source
				// copy is gone; the earlier candidate's mirror, if it
				// comes within runLookahead batches, wins.
				pending = &found{j: i, from: from, d: d, base: base}
				break
			}
			if !matched && !dh.Control() && dh.NumRecords > 0 {
				x.passed++
			}
		}
		if end {
			break
		}
	}
	if pending != nil {
		return pending.j, pending.from, pending.d, pending.base, claimed, nil
	}
	return -1, 0, nil, 0, claimed, nil
}

// runSpan is a destination batch, at dst, that holds the run of the
// source's committed batches from offset s up to e, each a part of it at
// its offset's place.
type runSpan struct {
	s, e, dst int64
}

// from is the position source batch c was mirrored from if the run holds
// it, else -1.
func (r *runSpan) from(c srcBatch) int64 {
	if c.h.BaseOffset >= r.s && c.h.NextOffset() <= r.e {
		return c.h.BaseOffset
	}
	return -1
}

// baseOf is where c's records begin in the run's batch.
func (r *runSpan) baseOf(c srcBatch) int64 { return r.dst + c.h.BaseOffset - r.s }

// runAround reports whether destination batch d (header dh) is a run the
// link appended as one batch (coalescing, issue 23) that holds the
// predecessor (unless already claimed) or one of the candidates as a part:
// nil when it is not. A part found by content (twin.Run.Find; in preserve
// delivery, by its producer's sequence: producerPart) only proposes where
// the run begins at the source; the run is then checked whole against the
// source from there (verifyRun): every record of d is, in order, a record
// of the source's committed, dense, contiguous batches from that offset
// on, which end where d ends. Only a batch with more records than the part
// has offsets is looked into: one of as many is a batch's mirror alone,
// which the other ways tell.
func (x *job) runAround(ctx context.Context, pred *srcBatch, claimed bool, cands []srcBatch, d []byte, dh transform.Header) (*runSpan, error) {
	if dh.Control() || dh.NumRecords < 2 || !x.Stamped && dh.ProducerID == -1 {
		return nil, nil
	}
	probes := cands
	if !claimed {
		probes = append([]srcBatch{*pred}, cands...)
	}
	var run *twin.Run
	for _, b := range probes {
		if !b.h.Dense() || int64(dh.NumRecords) <= int64(b.h.LastOffsetDelta)+1 {
			continue
		}
		// One producer's run (preserve delivery): the sequence says
		// where b lies in it, and the identity whether it may, before
		// anything is decoded.
		at := int64(b.h.BaseSequence) - int64(dh.BaseSequence)
		if !x.Stamped && (at < 0 || !x.producerPart(b, dh, at)) {
			continue
		}
		if run == nil {
			var err error
			if run, err = twin.NewRun(x.reenc, d); err != nil {
				return nil, err
			}
		}
		part, err := x.part(b)
		if err != nil {
			return nil, err
		}
		if !x.Stamped {
			if !run.Holds(part, b.h.BaseOffset, int(at)) {
				continue
			}
			s := b.h.BaseOffset - at
			if ok, err := x.verifyRun(ctx, run, s); err != nil {
				return nil, err
			} else if ok {
				return &runSpan{s: s, e: s + int64(run.Len()), dst: dh.BaseOffset}, nil
			}
			continue
		}
		for at := run.Find(part, b.h.BaseOffset, 0); at >= 0; at = run.Find(part, b.h.BaseOffset, at+1) {
			s := b.h.BaseOffset - int64(at)
			if ok, err := x.verifyRun(ctx, run, s); err != nil {
				return nil, err
			} else if ok {
				return &runSpan{s: s, e: s + int64(run.Len()), dst: dh.BaseOffset}, nil
			}
		}
	}
	return nil, nil
}

// verifyRun reports whether run holds the source's committed batches from
// offset s on as a link coalesces them: each dense, contiguous with the
// one before (no aborted data, marker or gap between), a part of run at
// its offset's place (twin.Run.Holds: the run's codec, no LogAppendTime,
// the same records; in preserve delivery also the run's producer at the
// part's sequence: producerPart), the first one's first timestamp the
// run's, and the last one ending where the run ends.
func (x *job) verifyRun(ctx context.Context, run *twin.Run, s int64) (bool, error) {
	at := 0
	for pos := s; at < run.Len(); {
		r, err := x.committed(ctx, pos)
		if re, outside := errors.AsType[*rangeError](err); outside && pos == s && re.start > s && re.start < s+int64(run.Len()) {
			// The source's log start moved into the run after the
			// link appended it (retention, DeleteRecords): its
			// records before the log start are gone, and the run is
			// checked from the batch that holds the log start, which
			// the source returns whole (twin.Walker.Lost).
			if r, err = x.committed(ctx, re.start); err == nil && (len(r.batches) == 0 || r.batches[0].h.BaseOffset < s || r.batches[0].h.BaseOffset > re.start) {
				return false, nil
			}
			if err == nil {
				at = int(r.batches[0].h.BaseOffset - s)
			}
		}
		if _, outside := errors.AsType[*rangeError](err); outside {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		for _, b := range r.batches {
			if b.h.BaseOffset != s+int64(at) || !b.h.Dense() || b.h.BaseOffset == s && b.h.FirstTimestamp != run.Header().FirstTimestamp {
				return false, nil
			}
			if !x.producerPart(b, run.Header(), int64(at)) {
				return false, nil
			}
			part, err := x.part(b)
			if err != nil || !run.Holds(part, b.h.BaseOffset, at) {
				return false, err
			}
			if at += int(b.h.LastOffsetDelta) + 1; at == run.Len() {
				return true, nil
			}
		}
		if r.next <= pos {
			return false, nil
		}
		pos = r.next
	}
	return false, nil
}

// part is source batch c decoded for looking for it in runs, once per
// translation (a scan looks for each candidate in every batch it reads).
func (x *job) part(c srcBatch) (*twin.Part, error) {
	if p, ok := x.parts[c.h.BaseOffset]; ok {
		return p, nil
	}
	p, err := twin.NewPart(x.reenc, c.raw, c.h)
	if err != nil {
		return nil, err
	}
	if x.parts == nil {
		x.parts = make(map[int64]*twin.Part)
	}
	x.parts[c.h.BaseOffset] = p
	return p, nil
}

// found is a candidate's mirror a scan met.
type found struct {
	j    int
	from int64
	d    []byte
	base int64
}

// runLookahead is how many source batches after a plain batch lastOfRun
// looks through for copies of it, and runLookaheadBytes how many bytes of
// them at most: a retry lands within a few batches of its original, and 32
// batches of 1 MiB would spend the translation's whole budget (in
// transactional delivery, where every batch is read as a plain one, a
// translation among large batches failed so).
const (
	runLookahead      = 32
	runLookaheadBytes = 4 << 20
)

// lastOfRun places the mirror of a plain source batch c among the copies of
// it the destination holds, d (at base) being the first the scan met: a
// plain producer's retry leaves its batch twice or more (in a row, or with
// other batches between when the retry landed late), and the link mirrors
// every copy (without a producer ID nothing tells them apart). Both logs
// lose copies from the front only (the cleaner keeps the last record of a
// key, DeleteRecords cuts a prefix), so the copies align at their ends: the
// source batches after c up to L, the runLookahead-th (or the last below hi)
// that is not a copy of c, hold A copies of c; the destination from d up to
// L's mirror holds the mirrors of those and of any earlier copies the source
// lost; c's mirror is the A-th from the last of them. Fewer: c's mirror was
// deleted at the destination (ErrBelowDestinationStart) or cannot be told
// (ErrUntranslatable). A copy later than the lookahead is not seen: the
// residual risk docs/guarantees.md states.
func (x *job) lastOfRun(ctx context.Context, c srcBatch, d []byte, base int64, hi cut) ([]byte, int64, error) {
	if c.h.ProducerID != -1 {
		return d, base, nil // copies with a producer ID are skipped, not mirrored
	}
	if dh, _ := transform.ParseHeader(d); x.partOf(c, c.h.BaseOffset, dh, base) {
		// A part of a run, placed by the source range the run mirrors:
		// copies of c are not batches of their own at the destination,
		// and sameOrdinal counts them by their records.
		return d, base, nil
	}
	a, seen, bytes := 0, 0, 0
	var last *srcBatch // L: the last batch looked at, after every copy of c; nil: the lookahead ended in copies (or at hi)
	for pos := c.h.NextOffset(); !hi.known || pos < hi.s; {
		r, err := x.committed(ctx, pos)
		if err != nil {
			return nil, 0, err
		}
		done := false
		for _, b := range r.batches {
			if hi.known && b.h.BaseOffset >= hi.s {
				done = true
				break
			}
			ok, err := x.copies(c.raw, b.raw)
			if err != nil {
				return nil, 0, err
			}
			seen++
			bytes += len(b.raw)
			if ok {
				a++
				last = nil // L comes after every copy counted
				continue
			}
			last = &b
			if seen >= runLookahead || bytes >= runLookaheadBytes {
				done = true
				break
			}
		}
		if done || r.next <= pos {
			break
		}
		pos = r.next
	}
	run := [][]byte{d} // d and its copies before L's mirror, in order
	for pos := mustNext(d); !hi.known || pos < hi.d; {
		ds, err := x.dstBatches(ctx, pos)
		if errors.Is(err, errBudget) {
			return nil, 0, fmt.Errorf("%w: %w", ErrUntranslatable, err)
		}
		if err != nil {
			return nil, 0, err
		}
		if len(ds) == 0 {
			break
		}
		done := false
		for _, e := range ds {
			eh, _ := transform.ParseHeader(e)
			if hi.known && eh.BaseOffset >= hi.d {
				done = true
				break
			}
			pos = eh.NextOffset()
			ok, err := x.copies(d, e)
			if err != nil {
				return nil, 0, err
			}
			if ok {
				run = append(run, e)
				continue
			}
			if last != nil {
				if from, err := x.mirrorOf(*last, nil, -1, e, eh); err != nil {
					return nil, 0, err
				} else if from >= 0 {
					done = true
					break
				}
				if int64(eh.NumRecords) > int64(last.h.LastOffsetDelta)+1 {
					// L may be a part of a run (coalescing). Taken by
					// content alone: a run taken for L's too early
					// shortens the copies counted, which refuses
					// rather than misplaces (and sameOrdinal checks).
					run, err := twin.NewRun(x.reenc, e)
					if err != nil {
						return nil, 0, err
					}
					part, err := x.part(*last)
					if err != nil {
						return nil, 0, err
					}
					if run.Find(part, last.h.BaseOffset, 0) >= 0 {
						done = true
						break
					}
				}
			}
		}
		if done {
			break
		}
	}
	if len(run) <= a && x.dstStart >= 0 && base <= x.dstStart {
		// The destination lost the front of the copies: c's mirror
		// was among them.
		return nil, 0, fmt.Errorf("%w: the destination's log starts at %d, in the mirror of a later copy of the source batch at offset %d (%d more copies follow it at the source)",
			ErrBelowDestinationStart, x.dstStart, c.h.BaseOffset, a)
	}
	if len(run) <= a {
		return nil, 0, fmt.Errorf("%w: the source holds %d more copies of the batch at source offset %d after it, the destination %d after its first mirror at offset %d",
			ErrUntranslatable, a, c.h.BaseOffset, len(run)-1, base)
	}
	m := run[len(run)-1-a]
	mh, _ := transform.ParseHeader(m)
	return m, mh.BaseOffset, nil
}

// copies reports whether plain batches a and b are copies of one batch: the
// records of one are, in order, records of the other, the same in content
// (a cleaner may have cut either since).
func (x *job) copies(a, b []byte) (bool, error) {
	if twin.Match(a, b) {
		return true, nil
	}
	ha, err := transform.ParseHeader(a)
	if err != nil {
		return false, err
	}
	hb, err := transform.ParseHeader(b)
	if err != nil {
		return false, err
	}
	if ha.ProducerID != -1 || hb.ProducerID != -1 {
		return false, nil
	}
	var recs [2][]transform.Record
	for i, raw := range [2][]byte{a, b} {
		if err := transform.Validate(raw); err != nil {
			return false, err
		}
		rs, err := x.reenc.Records(raw)
		if err != nil && !errors.Is(err, transform.ErrEmptyBatch) {
			return false, err
		}
		recs[i] = rs
	}
	short, long := recs[0], recs[1]
	if len(short) > len(long) {
		short, long = long, short
	}
	if len(short) == 0 {
		return false, nil
	}
	i := 0
	for _, r := range long {
		if i < len(short) && short[i].Same(r) {
			i++
		}
	}
	return i == len(short), nil
}

// mustNext is the offset after the batch b (a destination batch read and
// parsed before).
func mustNext(b []byte) int64 {
	h, _ := transform.ParseHeader(b)
	return h.NextOffset()
}

// mirrorOf reports whether destination batch d (header dh) is the batch the
// link appended for source batch c, whose whole decision is whole[i] (i -1:
// not decided yet): the position it was mirrored from, or -1.
func (x *job) mirrorOf(c srcBatch, whole [][]byte, i int, d []byte, dh transform.Header) (int64, error) {
	if i >= 0 && whole[i] != nil && twin.Match(whole[i], d) {
		return c.h.BaseOffset, nil
	}
	if dh.ProducerEpoch == c.h.ProducerEpoch && dh.BaseSequence == c.h.BaseSequence && dh.NumRecords >= c.h.NumRecords {
		// The same producer batch, maybe changed at the source since.
		ok, err := x.mirror(c, c.h.BaseOffset, d)

		if err != nil || ok {
			return c.h.BaseOffset, err
		}
	}
	if int(dh.NumRecords) < len(c.offsets) {
		from, ok, err := x.mirrorFrom(c, d)
		if err != nil || ok {
			return from, err
		}
	}
	if !x.Stamped && dh.NumRecords < c.h.NumRecords && dh.ProducerEpoch == c.h.ProducerEpoch && dh.BaseSequence == c.h.BaseSequence {
		// The destination's cleaner cut the mirror since.
		if ok, err := twin.CutAtDestination(x.psm, x.src, x.reenc, c.raw, c.h, d); err != nil || ok {
			return c.h.BaseOffset, err
		}
	}
	return -1, nil
}

// ---- reading ----

// srcBatch is a committed source batch: one a read_committed consumer gets
// records of.
type srcBatch struct {
	raw     []byte
	h       transform.Header
	from    int64   // the read's position if the batch begins before it, else its base offset
	offsets []int64 // the offsets of its records, in order
	pid     int64   // its producer ID as the source holds it (a Stamped read strips h's)
}

// firstFrom is the first record offset of c at or after pos, or -1.
func (c srcBatch) firstFrom(pos int64) int64 {
	for _, o := range c.offsets {
		if o >= pos {
			return o
		}
	}
	return -1
}

// read is one read of the source.
type read struct {
	batches []srcBatch // committed data batches with a record at or after the position
	homes   []srcBatch // those of them that started at the destination, which the link does not send
	plains  []srcBatch // those without a producer ID, which the link skips (unattributed = "skip")
	next    int64      // the offset after the last batch examined (control and aborted ones too)
	lso, hw int64      // last stable offset and high watermark, as the fetch reported them
}

// rangeError is a fetch at an offset outside the partition's log.
type rangeError struct {
	side       string
	offset     int64
	start, end int64
}

func (e *rangeError) Error() string {
	return fmt.Sprintf("%s offset %d is outside the log (log start %d, high watermark %d)", e.side, e.offset, e.start, e.end)
}

func (e *rangeError) Unwrap() error { return kerr.OffsetOutOfRange }

// errBudget: a translation read translateBudget from one cluster.
var errBudget = errors.New("translation read budget spent")

// committed reads the source from pos with READ_COMMITTED and returns the
// committed data batches, as a read_committed consumer finds them: which
// batches are committed is decided by kgo.ProcessFetchPartition, the code
// kgo's own consumer runs, over the fetch response's aborted transactions
// (DESIGN §1). Batches that hold no committed record (aborted ones,
// transaction markers, batches compaction emptied) are not returned.
func (x *job) committed(ctx context.Context, pos int64) (read, error) {
	if x.last != nil && x.lastPos == pos {
		return *x.last, nil
	}
	rp, err := x.fetch(ctx, true, pos)
	if err != nil {
		return read{}, err
	}
	r := read{next: pos, lso: rp.LastStableOffset, hw: rp.HighWatermark}
	raws, _, err := transform.Split(rp.RecordBatches, nil)
	if err != nil {
		return read{}, fmt.Errorf("source %s at offset %d: %w", x.a.Src, pos, err)
	}
	// A batch that is neither transactional nor a marker is never
	// aborted, and a dense one holds every offset of its range: only the
	// others need kgo to decide and decode them (an abort is decided by
	// the producer's transactional batches and markers alone).
	hs := make([]transform.Header, len(raws))
	var hard []byte
	for i, raw := range raws {
		if hs[i], err = transform.ParseHeader(raw); err != nil {
			return read{}, fmt.Errorf("source %s at offset %d: %w", x.a.Src, pos, err)
		}
		if !plainDense(hs[i]) {
			hard = append(hard, raw...)
		}
	}
	var recs []*kgo.Record
	if len(hard) > 0 {
		sub := *rp
		sub.RecordBatches = hard
		fp, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
			IsolationLevel: kgo.ReadCommitted(), Topic: x.a.Src.Topic, Partition: x.a.Src.Partition,
		}, &sub, kgo.DefaultDecompressor(), nil)
		if fp.Err != nil && len(fp.Records) == 0 {
			return read{}, fmt.Errorf("source %s at offset %d: %w", x.a.Src, pos, fp.Err)
		}
		recs = fp.Records
	}
	for i, raw := range raws {
		h := hs[i]
		var offs []int64
		if plainDense(h) {
			for o := h.BaseOffset; o < h.NextOffset(); o++ {
				offs = append(offs, o)
			}
		}
		for len(recs) > 0 && recs[0].Offset < h.BaseOffset {
			recs = recs[1:]
		}
		for len(recs) > 0 && recs[0].Offset < h.NextOffset() {
			offs = append(offs, recs[0].Offset)
			recs = recs[1:]
		}
		if h.NextOffset() <= pos {
			continue
		}
		r.next = max(r.next, h.NextOffset())
		if len(offs) == 0 || offs[len(offs)-1] < pos {
			continue
		}
		pid := h.ProducerID
		switch x.From.Returns.Of(pid) {
		case transform.Unattributed:
			// Not sent. It may be the reverse link's copy of a
			// destination batch without a producer ID (viaOrigin
			// looks for its original), or the source's own.
			if !x.Stamped {
				r.plains = append(r.plains, srcBatch{raw: raw, h: h, from: max(pos, h.BaseOffset), offsets: offs, pid: pid})
			}
			continue
		case transform.Home:
			if x.Stamped {
				transform.Unstamp(raw)
				if h, err = transform.ParseHeader(raw); err != nil {
					return read{}, fmt.Errorf("source %s at offset %d: %w", x.a.Src, pos, err)
				}
			}
			r.homes = append(r.homes, srcBatch{raw: raw, h: h, from: max(pos, h.BaseOffset), offsets: offs, pid: pid})
			continue
		}
		if x.Stamped {
			transform.Unstamp(raw) // kgo decided on a copy (hard)
			if h, err = transform.ParseHeader(raw); err != nil {
				return read{}, fmt.Errorf("source %s at offset %d: %w", x.a.Src, pos, err)
			}
		}
		r.batches = append(r.batches, srcBatch{raw: raw, h: h, from: max(pos, h.BaseOffset), offsets: offs})
	}
	x.last, x.lastPos = &r, pos
	return r, nil
}

// plainDense reports whether a batch holds committed records at every
// offset of its range: data, not transactional, no offset gaps.
func plainDense(h transform.Header) bool {
	return !h.Transactional() && !h.Control() && h.NumRecords > 0 && h.Dense()
}

// dstBatches reads the destination from pos: its batches with offsets at
// or after pos, in order. A position below the log start reads from the log
// start. In preserve delivery the destination is read READ_UNCOMMITTED (the
// link's batches are not transactional); Stamped, it is read as a
// read_committed consumer reads it (abortedTxns), and a read that holds
// only aborted data and markers reads on past them, so that nothing but
// the log's end returns no batch.
func (x *job) dstBatches(ctx context.Context, pos int64) ([][]byte, error) {
	for {
		out, next, err := x.dstRead1(ctx, pos)
		if err != nil || len(out) > 0 || next <= pos {
			return out, err
		}
		pos = next
	}
}

// dstRead1 is one read of dstBatches; next is the offset after the last
// batch the read returned, kept or not.
func (x *job) dstRead1(ctx context.Context, pos int64) (out [][]byte, next int64, err error) {
	rp, err := x.fetch(ctx, false, pos)
	var re *rangeError
	if errors.As(err, &re) && pos < re.start {
		x.dstStart = re.start
		rp, err = x.fetch(ctx, false, re.start)
	}
	if err != nil {
		return nil, pos, err
	}
	x.dstStart = rp.LogStartOffset
	raws, _, err := transform.Split(rp.RecordBatches, nil)
	if err != nil {
		return nil, pos, fmt.Errorf("destination %s at offset %d: %w", x.a.Dst, pos, err)
	}
	next = pos
	var aborted *abortedTxns
	if x.Stamped || x.byContent {
		aborted = newAbortedTxns(rp.AbortedTransactions)
	}
	out = raws[:0]
	for _, b := range raws {
		h, err := transform.ParseHeader(b)
		if err != nil {
			return nil, pos, fmt.Errorf("destination %s at offset %d: %w", x.a.Dst, pos, err)
		}
		next = max(next, h.NextOffset())
		if aborted != nil && !aborted.committed(h) {
			// An aborted transaction (a crashed session's appends,
			// up to txnCommitBytes) is read past, not searched: its
			// bytes count against a budget of their own, so that one
			// crash does not spend the search's.
			x.dstRead -= int64(len(b))
			if x.dstSkipped += int64(len(b)); x.dstSkipped > abortedBudgetFactor*x.budget {
				return nil, pos, fmt.Errorf("%w: %d bytes of aborted transactions read from the destination", errBudget, x.dstSkipped)
			}
			continue
		}
		if h.NextOffset() > pos {
			if x.Stamped || x.byContent {
				transform.Unstamp(b)
			}
			out = append(out, b)
		}
	}
	return out, next, nil
}

// abortedTxns decides which batches of one read_committed fetch answer a
// read_committed consumer gets records of, as Kafka's consumers decide
// (KIP-98; the Java client's CompletedFetch, kgo's processRecordBatch):
// the answer lists each aborted transaction that overlaps the fetch by
// producer ID and first offset; a producer's transactional batches from
// that offset on are aborted until its next control batch (the abort
// marker). Control batches are never data.
type abortedTxns struct {
	pending []kmsg.FetchResponseTopicPartitionAbortedTransaction // by first offset
	open    map[int64]bool                                       // producers inside an aborted transaction
}

func newAbortedTxns(list []kmsg.FetchResponseTopicPartitionAbortedTransaction) *abortedTxns {
	a := &abortedTxns{pending: slices.Clone(list), open: map[int64]bool{}}
	slices.SortFunc(a.pending, func(x, y kmsg.FetchResponseTopicPartitionAbortedTransaction) int {
		return cmp.Compare(x.FirstOffset, y.FirstOffset)
	})
	return a
}

// committed reports whether batch h, the next of the answer in order, holds
// records a read_committed consumer gets.
func (a *abortedTxns) committed(h transform.Header) bool {
	last := h.NextOffset() - 1
	for len(a.pending) > 0 && a.pending[0].FirstOffset <= last {
		a.open[a.pending[0].ProducerID] = true
		a.pending = a.pending[1:]
	}
	if h.Control() {
		delete(a.open, h.ProducerID) // the marker ends the producer's transaction
		return false
	}
	return h.NumRecords > 0 && !(h.Transactional() && a.open[h.ProducerID])
}

// fetch is one raw fetch of the partition at pos from its leader,
// following leader moves; an offset outside the log is a *rangeError.
func (x *job) fetch(ctx context.Context, source bool, pos int64) (*kmsg.FetchResponseTopicPartition, error) {
	c, p, used, side := x.Destination, x.a.Dst, &x.dstRead, "destination"
	if source {
		c, p, used, side = x.Source, x.a.Src, &x.srcRead, "source"
	}
	cl, cache := c.cl, c.leaders
	if *used >= x.budget {
		return nil, fmt.Errorf("%w: %d bytes read from the %s", errBudget, *used, side)
	}
	var last error
	for attempt := range translateAttempts {
		if attempt > 0 && backoff.Sleep(ctx, translateRetry.Wait(attempt)) != nil {
			return nil, ctx.Err()
		}
		ld, err := cache.Lookup(ctx, p.Key())
		if err != nil {
			last = err
			continue
		}
		q := p
		q.ID = ld.ID
		x.out.Requests++
		rp, err := rawfetch.Do(ctx, cl, ld.Broker, rawfetch.Request{
			Partition: q, Offset: pos, LeaderEpoch: ld.Epoch, PartitionMaxBytes: translateChunk, ReadCommitted: source || x.Stamped || x.byContent,
		})
		if err == nil {
			err = kerr.ErrorForCode(rp.ErrorCode)
		}
		switch {
		case err == nil && c.screen != nil:
			if err := screen(ctx, c.screen, rp.RecordBatches); err != nil {
				return nil, fmt.Errorf("%s %s at offset %d: %w", side, p, pos, err)
			}
			*used += int64(len(rp.RecordBatches))
			return rp, nil
		case err == nil:
			*used += int64(len(rp.RecordBatches))
			return rp, nil
		case errors.Is(err, kerr.OffsetOutOfRange):
			// Kafka answers an offset out of range without the log's
			// bounds (-1): ask for them.
			start, err := x.listOffset(ctx, source, -2)
			if err != nil {
				return nil, err
			}
			end, err := x.listOffset(ctx, source, -1)
			if err != nil {
				return nil, err
			}
			return nil, &rangeError{side: side, offset: pos, start: start, end: end}
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.Is(err, kerr.UnknownTopicOrPartition) && attempt >= 2:
			return nil, fmt.Errorf("%w: %s %s: %w", ErrNotMirrored, side, p, err)
		}
		last = err
		cache.Invalidate(p.Key())
	}
	return nil, fmt.Errorf("fetch %s %s at offset %d: %w", p.String(), side, pos, last)
}

// offsetAfter is the destination's first offset whose timestamp is at or
// after ms, or its high watermark if there is none.
func (x *job) offsetAfter(ctx context.Context, ms int64) (int64, error) {
	o, err := x.listOffset(ctx, false, ms)
	if err == nil && o < 0 {
		return x.listOffset(ctx, false, -1)
	}
	return o, err
}

// listOffset sends ListOffsets for the partition to its leader: ts -2 is
// the log start, -1 the high watermark, else the first offset whose
// timestamp is at or after ts (-1 if there is none).
func (x *job) listOffset(ctx context.Context, source bool, ts int64) (int64, error) {
	c, p := x.Destination, x.a.Dst
	if source {
		c, p = x.Source, x.a.Src
	}
	cl, cache := c.cl, c.leaders
	var last error
	for attempt := range translateAttempts {
		if attempt > 0 && backoff.Sleep(ctx, translateRetry.Wait(attempt)) != nil {
			return 0, ctx.Err()
		}
		ld, err := cache.Lookup(ctx, p.Key())
		if err != nil {
			last = err
			continue
		}
		req := kmsg.NewPtrListOffsetsRequest()
		req.ReplicaID = -1
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = p.Topic
		rq := kmsg.NewListOffsetsRequestTopicPartition()
		rq.Partition = p.Partition
		rq.CurrentLeaderEpoch = ld.Epoch
		rq.Timestamp = ts
		rt.Partitions = append(rt.Partitions, rq)
		req.Topics = append(req.Topics, rt)
		x.out.Requests++
		kresp, err := cl.Broker(int(ld.Broker)).RetriableRequest(ctx, req)
		if err != nil {
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			last = err
			cache.Invalidate(p.Key())
			continue
		}
		last = errors.New("the answer does not hold the partition")
		for _, t := range kresp.(*kmsg.ListOffsetsResponse).Topics {
			for _, rp := range t.Partitions {
				if t.Topic != p.Topic || rp.Partition != p.Partition {
					continue
				}
				if last = kerr.ErrorForCode(rp.ErrorCode); last == nil {
					return rp.Offset, nil
				}
				cache.Invalidate(p.Key())
			}
		}
	}
	return 0, fmt.Errorf("list offsets of %s at timestamp %d: %w", p, ts, last)
}

// viaOrigin translates p when the first committed source batch with a
// record at or after p, among those the link sends and those that
// started at the destination, is one that started there (DESIGN §16: the
// reverse link's copy of a destination batch, which this link does not
// send back). Such a batch has no mirror: the destination holds its
// original, and a consumer that had not read the copy at the source must
// read the original. done is false when the first such batch is one the
// link sends (or there is none): the other ways translate p.
//
// This is what makes failback exact: after a failover from A to B and
// writes at B, the link B→A sends B's new records to A and skips the
// copies of A's; a group that had not finished A's records at B resumes
// at A at the original of the first copy it had not read. Where both
// clusters took writes at once (active-active), the two logs interleave
// differently and no single offset is exact (README, "Active-active and
// failback").
func (x *job) viaOrigin(ctx context.Context, p int64) (done bool, err error) {
	if x.From.Returns == (transform.Returns{}) {
		return false, nil
	}
	for pos := p; ; {
		r, err := x.committed(ctx, pos)
		if err != nil {
			return true, err
		}
		before := func(c srcBatch) bool { // c comes before every batch sent and every home
			return (len(r.batches) == 0 || c.h.BaseOffset < r.batches[0].h.BaseOffset) &&
				(len(r.homes) == 0 || c.h.BaseOffset < r.homes[0].h.BaseOffset)
		}
		for _, c := range r.plains {
			if !before(c) {
				break
			}
			if found, err := x.plainOrigin(ctx, c, p); found || err != nil {
				return true, err
			}
		}
		switch {
		case len(r.homes) > 0 && (len(r.batches) == 0 || r.homes[0].h.BaseOffset < r.batches[0].h.BaseOffset):
			return true, x.origin(ctx, r.homes[0], p)
		case len(r.batches) > 0 || r.next <= pos:
			return false, nil
		}
		pos = r.next
	}
}

// plainOrigin ends a translation at the original, at the destination, of
// source batch c, which has no producer ID and which the link skips
// (unattributed = "skip"), when the destination holds one: the first
// destination batch from the first offset with c's earliest create time on
// with c's bytes (a mirror forwards a batch without a producer ID as it
// is). That is the reverse link's copy of a destination batch: in a
// failback, a group whose next unread record at the source is the copy of
// a record a plain producer wrote at the destination before the failover
// must read its original there. Without one (the source's own record,
// never sent, or an original deleted at the destination since) found is
// false, and the translation goes on past c. The search reads the
// destination to its end, within the translation's budget (errBudget
// beyond it: loud, not a guess).
func (x *job) plainOrigin(ctx context.Context, c srcBatch, p int64) (found bool, err error) {
	r, _, err := x.searchFrom(ctx, c)
	if err != nil {
		return false, err
	}
	found, err = x.search(ctx, c, r, p, func(d []byte, dh transform.Header) (int, error) {
		if dh.ProducerID == -1 && !dh.Control() && twin.Match(c.raw, d) {
			return originWhole, nil
		}
		return originNone, nil
	})
	if found {
		x.out.Via = "origin"
	}
	return found, err
}

// searchFrom is where the search for the original of source batch c
// starts: the destination's first offset r with c's earliest create time
// (least) or later (its high watermark if there is none).
func (x *job) searchFrom(ctx context.Context, c srcBatch) (r, least int64, err error) {
	if least, err = x.earliest([]srcBatch{c}); err != nil {
		return 0, 0, err
	}
	r, err = x.offsetAfter(ctx, least)
	return r, least, err
}

// search reads the destination from r to its end and ends the translation
// of p at the first batch d for which is(d) says it is the original of
// source batch c (originWhole), or the first original of the run of them
// c coalesces (originRun); found is false when none is.
func (x *job) search(ctx context.Context, c srcBatch, r, p int64, is func(d []byte, dh transform.Header) (int, error)) (found bool, err error) {
	for pos := r; ; {
		ds, err := x.dstBatches(ctx, pos)
		if err != nil {
			return false, err
		}
		if len(ds) == 0 {
			return false, nil
		}
		for _, d := range ds {
			dh, err := transform.ParseHeader(d)
			if err != nil {
				return false, fmt.Errorf("destination %s at offset %d: %w", x.a.Dst, pos, err)
			}
			pos = dh.NextOffset()
			switch kind, err := is(d, dh); {
			case err != nil:
				return false, err
			case kind == originWhole:
				return true, x.found(c, c.h.BaseOffset, d, dh.BaseOffset, p)
			case kind == originRun:
				// c holds the records of the destination's batches
				// from dh's base offset on, one per offset.
				t := dh.BaseOffset + max(p-c.h.BaseOffset, 0)
				x.out.SourceBatch, x.out.DestinationBatch, x.out.DestinationOffset = c.h.BaseOffset, dh.BaseOffset, t
				return true, nil
			}
		}
	}
}

// What search's is says of a destination batch.
const (
	originNone  = iota
	originWhole // the original of the source batch
	originRun   // the first of the originals of a run the source batch coalesces
)

// originRun reports whether destination batch d (header dh) is the first
// of the originals of source batch c, which a transactional link in the
// other direction appended as one batch for a run of them (coalescing,
// issue 23): the destination's committed batches from d on are, in
// order, parts of c (twin.Run.Holds), each dense and contiguous with the
// one before, ending where c ends; c is dense, as a run's batch is.
func (x *job) originRun(ctx context.Context, c srcBatch, d []byte, dh transform.Header) (bool, error) {
	if !c.h.Dense() || dh.Control() || dh.NumRecords <= 0 || int64(dh.LastOffsetDelta)+1 >= int64(c.h.NumRecords) {
		return false, nil
	}
	run, err := twin.NewRun(x.reenc, c.raw)
	if err != nil {
		return false, err
	}
	at := 0
	holds := func(e []byte, eh transform.Header) (bool, error) {
		if eh.BaseOffset != dh.BaseOffset+int64(at) || !eh.Dense() || at == 0 && eh.FirstTimestamp != c.h.FirstTimestamp {
			return false, nil
		}
		part, err := twin.NewPart(x.reenc, e, eh)
		if err != nil || !run.Holds(part, eh.BaseOffset, at) {
			return false, err
		}
		at += int(eh.LastOffsetDelta) + 1
		return true, nil
	}
	if ok, err := holds(d, dh); !ok || err != nil {
		return false, err
	}
	for pos := dh.NextOffset(); at < run.Len(); {
		es, err := x.dstBatches(ctx, pos)
		if err != nil || len(es) == 0 {
			return false, err
		}
		for _, e := range es {
			eh, _ := transform.ParseHeader(e)
			if ok, err := holds(e, eh); !ok || err != nil {
				return false, err
			}
			if pos = eh.NextOffset(); at == run.Len() {
				return true, nil
			}
		}
	}
	return at == run.Len(), nil
}

// origin ends a translation at the original, at the destination, of source
// batch c, which started there: the first destination batch from the first
// offset with c's earliest create time on that holds c's records under
// the producer ID c's maps (the same low 31 bits, epoch and sequence, and
// the same bytes after the producer ID). Stamped, or when c is a
// transactional link's copy (its producer ID is that link's session's,
// transform.Sessions, not the original's), by content alone: the same
// records, among the destination's committed batches.
func (x *job) origin(ctx context.Context, c srcBatch, p int64) error {
	x.out.Via = "origin"
	session := c.pid >= 0 // a mapped producer ID is negative
	if session && !x.Stamped {
		x.byContent = true
		defer func() { x.byContent = false }()
	}
	r, least, err := x.searchFrom(ctx, c)
	if err != nil {
		return err
	}
	_, low, _ := transform.DecodePID(c.pid)
	want := append([]byte(nil), c.raw...)
	if x.byContent {
		transform.Unstamp(want)
	}
	found, err := x.search(ctx, c, r, p, func(d []byte, dh transform.Header) (int, error) {
		if !x.Stamped && !x.byContent {
			if dh.ProducerID < 0 || dh.ProducerID&(1<<31-1) != int64(low) || dh.Control() {
				return originNone, nil
			}
			transform.Rewrite(want, dh.ProducerID)
			// A preserve mirror appends a committed transaction's
			// batches without the transactional bit (it sends no
			// markers); the original has it.
			want[transform.PosAttributes+1] = want[transform.PosAttributes+1]&^transform.AttrTransactional | d[transform.PosAttributes+1]&transform.AttrTransactional
		}
		if twin.Match(want, d) {
			return originWhole, nil
		}
		if session && (x.Stamped || x.byContent) {
			// A transactional link's copy may be a run of originals
			// it coalesced into one batch.
			if ok, err := x.originRun(ctx, c, d, dh); ok || err != nil {
				return originRun, err
			}
		}
		return originNone, nil
	})
	if found || err != nil {
		return err
	}
	if start, err := x.destinationStart(ctx); err != nil {
		return err
	} else if r <= start {
		return fmt.Errorf("%w: the source batch at offset %d started at the destination (%s), and its original is not there from the destination's log start %d on (retention deleted it)",
			ErrBelowDestinationStart, c.h.BaseOffset, why(c.pid), start)
	}
	return fmt.Errorf("%w: the source batch at offset %d started at the destination (%s), and no destination batch from offset %d (the first with a timestamp at or after %d) on is its original (compacted or deleted at the destination since)",
		ErrUntranslatable, c.h.BaseOffset, why(c.pid), r, least)
}

// unread lowers the answer where both clusters are written: a link in the
// other direction (R, from the destination into the source) copies the
// destination's own records into the source, in their order there but
// interleaved with the source's own records otherwise than at the
// destination, so the answer so far (the mirror of the first source record
// from p on that the link sends) may lie past destination records whose
// copies at the source are at or after p, which a group at p has not read.
// No single offset is exact then (README, "Active-active and failback");
// the answer is made one that re-reads rather than skips. A group at p has
// read every copy below p and none from p on, so the first destination
// record of its own that it has not read is
//
//   - the original of the first copy at or after p, when the source holds
//     one (Via "reverse");
//   - else one R has not copied yet, at or after R's position at the
//     destination, if R is live (not stopped or paused). R's last
//     checkpoint bounds that position from below (Via
//     "reverse-checkpoint"): the answer then re-reads what R copied since
//     that checkpoint and what the link mirrored after it.
//
// When the first batch from p is a copy, the answer is its original
// already: every source record after the copy was written after the copy,
// which was written after its original, so its mirror lies beyond the
// original. Without R (no checkpoint of it in the state topic at the
// source), nothing changes.
func (x *job) unread(ctx context.Context, p int64) error {
	if x.Reverse == nil || !x.From.Returns.Check || x.out.Via == "origin" {
		return nil
	}
	rev, ok, err := x.Reverse(ctx, x.a.Src, x.a.Dst)
	if err != nil || !ok {
		return err
	}
	p = max(p, x.out.SourceLogStart)
	// The search has a budget of its own: what the answer cost to find
	// says nothing of how far the next copy is.
	srcRead, dstRead := x.srcRead, x.dstRead
	x.srcRead, x.dstRead = 0, 0
	defer func() { x.srcRead, x.dstRead = x.srcRead+srcRead, x.dstRead+dstRead }()
	// A copy at or after R's checkpoint at the source has its original at
	// or after R's checkpoint at the destination: when that is not below
	// the answer, copies from there on cannot lower it, and the search
	// ends there (a group behind R reads no further than R's checkpoint;
	// with nothing written at the destination since, not at all).
	limit := int64(math.MaxInt64)
	if rev.SourceNext >= x.out.DestinationOffset {
		limit = rev.DestNext
	}
	home, q, err := x.firstHome(ctx, p, limit)
	switch {
	case home != nil:
		before := x.out
		if err := x.origin(ctx, *home, p); err != nil {
			return fmt.Errorf("both clusters are written (link %s mirrors the other way): %w", rev.Link, err)
		}
		if x.out.DestinationOffset < before.DestinationOffset {
			x.out.Via = "reverse"
			return nil
		}
		requests := x.out.Requests
		x.out = before
		x.out.Requests = requests
	case errors.Is(err, errBudget) && q < rev.DestNext:
		// An earlier checkpoint of R at or below q is a cut the
		// search passed: R's copies of destination records below its
		// position there are below q at the source, and, none being in
		// [p, q), below p: read.
		if c, ok := lastCutBelow(rev.Earlier, q); ok {
			if c.SourceNext < x.out.DestinationOffset {
				x.out.Via, x.out.DestinationOffset = "reverse-checkpoint", c.SourceNext
				x.out.SourceBatch, x.out.DestinationBatch = -1, -1
			}
			return nil
		}
		return fmt.Errorf("%w: both clusters are written (link %s mirrors the other way), and the source holds no copy of a destination record between offsets %d and %d, below that link's checkpoint at %d, and the state topic at the source holds no earlier checkpoint of it at or below %d: which destination records a group at offset %d has read is not known within the read budget (%w)",
			ErrUntranslatable, rev.Link, p, q, rev.DestNext, q, p, err)
	case err != nil && !errors.Is(err, errBudget):
		return err
	case rev.Live && rev.SourceNext >= 0 && rev.SourceNext < x.out.DestinationOffset:
		x.out.Via, x.out.DestinationOffset = "reverse-checkpoint", rev.SourceNext
		x.out.SourceBatch, x.out.DestinationBatch = -1, -1
	}
	return nil
}

// lastCutBelow is the last of cuts (oldest first) whose source position
// (DestNext, at the link's source) is at or below q.
func lastCutBelow(cuts []statestore.Cut, q int64) (statestore.Cut, bool) {
	for _, c := range slices.Backward(cuts) {
		if c.DestNext <= q {
			return c, true
		}
	}
	return statestore.Cut{}, false
}

// firstHome returns the first committed source batch from p on, below
// limit, that started at the destination (nil: none), and the offset the
// search reached: limit, the source's end, or where the read budget ran out
// (err errBudget).
func (x *job) firstHome(ctx context.Context, p, limit int64) (*srcBatch, int64, error) {
	for pos := p; ; {
		if pos >= limit {
			return nil, pos, nil
		}
		r, err := x.committed(ctx, pos)
		var re *rangeError
		switch {
		case errors.As(err, &re) && pos >= re.end:
			return nil, pos, nil
		case err != nil:
			return nil, pos, err
		case len(r.homes) > 0 && r.homes[0].h.BaseOffset < limit:
			return &r.homes[0], pos, nil
		case len(r.homes) > 0:
			return nil, limit, nil
		case r.next <= pos:
			return nil, pos, nil
		}
		pos = r.next
	}
}

// why says how a source batch with producer ID pid is known to have
// started at the destination.
func why(pid int64) string {
	if pid >= 0 {
		return fmt.Sprintf("a transactional link from the destination appended it under its session's producer ID %d", pid)
	}
	return fmt.Sprintf("its producer ID %d is a mapping of a destination producer's", pid)
}

// screen calls fn with the headers of the whole batches in raw (a partial
// batch at the end, as a fetch may return, is not one).
func screen(ctx context.Context, fn func(ctx context.Context, hs []transform.Header) error, raw []byte) error {
	var hs []transform.Header
	for len(raw) > 0 {
		b, rest, err := transform.NextBatch(raw)
		if err != nil {
			break // decided (and reported) where the batches are read
		}
		if h, err := transform.ParseHeader(b); err == nil {
			hs = append(hs, h)
		}
		raw = rest
	}
	if len(hs) == 0 {
		return nil
	}
	return fn(ctx, hs)
}
