package transform

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// DefaultProducerStateExpiry is how long a producer entry or a salt may stay
// idle before it expires (producer_state_expiry).
const DefaultProducerStateExpiry = 24 * time.Hour

// maxSaltDraws bounds the salt search. With 2^32 regions a free slot is found
// on the first draw unless the partition holds billions of producers; running
// out means the random source is broken, which is an invariant violation.
const maxSaltDraws = 1 << 16

// Origin identifies a producer at the source of a link: the source cluster's
// ID and the producer ID its batches carry there (which may itself be a PID
// mapped by an upstream mirror).
type Origin struct {
	Cluster string
	PID     int64
}

func (o Origin) String() string { return fmt.Sprintf("%s/%d", o.Cluster, o.PID) }

// BatchInfo is what the PSM needs to know about a forwarded batch.
type BatchInfo struct {
	Origin          Origin
	Region          Region // region of Origin.Cluster
	Epoch           int16
	BaseSequence    int32 // -1 when the producer is not idempotent
	LastOffsetDelta int32
}

// InfoOf builds the BatchInfo of a batch fetched from sourceCluster.
func InfoOf(h Header, sourceCluster string, r Region) BatchInfo {
	return BatchInfo{
		Origin:          Origin{Cluster: sourceCluster, PID: h.ProducerID},
		Region:          r,
		Epoch:           h.ProducerEpoch,
		BaseSequence:    h.BaseSequence,
		LastOffsetDelta: h.LastOffsetDelta,
	}
}

func (b BatchInfo) lastSequence() int32 {
	if b.BaseSequence < 0 {
		return -1
	}
	return addSeq(b.BaseSequence, b.LastOffsetDelta)
}

// Kind classifies a batch.
type Kind uint8

const (
	// KindAppend: append under Decision.Mapped.
	KindAppend Kind = iota
	// KindDuplicate: the same origin already appended this sequence range
	// in this epoch; skip the batch (count it).
	KindDuplicate
	// KindSequenceGap: append; the sequence does not follow the last one
	// (compaction removes batches, so this is expected on compacted
	// topics; count it).
	KindSequenceGap
	// KindLowerEpoch: append; the batch's epoch is below the origin's
	// current one (WARN and count).
	KindLowerEpoch
	// KindCollision: the mapped PID is held by a different origin. Commit
	// Decision.Salt to the state topic, call AddSalt, then Decide again.
	// Nothing may be appended for this batch before the salt is committed.
	KindCollision
	// KindUnresolvable: the mapped PID is held by a different origin and
	// neither can be remapped, because both carry negative PIDs that an
	// upstream mirror already mapped. Append (WARN and count).
	KindUnresolvable
)

var kindNames = [...]string{"append", "duplicate", "sequence_gap", "lower_epoch", "collision", "unresolvable"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// Appends reports whether a batch of this kind is appended as it is decided.
func (k Kind) Appends() bool { return k != KindDuplicate && k != KindCollision }

// Salt is a collision salt to persist (MirrorPidCollisionKey/Value).
type Salt struct {
	Origin    Origin // the producer that is remapped
	Salt      int64
	Colliding string // cluster of the origin that held the slot
	Mapped    int64  // the origin's mapped PID with the salt
}

// Decision is the PSM's verdict on one batch. Pass it back to Commit once
// the batch is appended.
type Decision struct {
	Kind   Kind
	Mapped int64
	Salt   *Salt  // KindCollision only
	Holder Origin // KindCollision and KindUnresolvable: the origin that held the slot

	info BatchInfo
}

// producer is the state of one origin at one destination partition.
type producer struct {
	mapped     int64
	region     Region // unsalted region of the origin's cluster
	epoch      int16
	lastSeq    int32 // -1: no sequence seen
	lastAppend time.Time
}

type salt struct {
	value    int64
	lastUsed time.Time
}

// PSMConfig configures a PSM. The zero value is usable.
type PSMConfig struct {
	// Expiry is how long an idle producer entry or salt lives
	// (producer_state_expiry). Zero means DefaultProducerStateExpiry.
	Expiry time.Duration
	// Rand draws collision salts. Nil means math/rand/v2.
	Rand func() int64
}

// PSM is the producer state of one destination partition (DESIGN §4): for
// each origin its mapped PID, epoch, last sequence and last append time;
// which origin holds each mapped PID; and the collision salts.
//
// A PSM decides and never performs I/O. It is not safe for concurrent use.
type PSM struct {
	cfg       PSMConfig
	producers map[Origin]*producer
	holders   map[int64]Origin // mapped PID → origin that holds the slot
	salts     map[Origin]*salt
}

// NewPSM returns an empty PSM.
func NewPSM(cfg PSMConfig) *PSM {
	if cfg.Expiry <= 0 {
		cfg.Expiry = DefaultProducerStateExpiry
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Int64
	}
	return &PSM{
		cfg:       cfg,
		producers: make(map[Origin]*producer),
		holders:   make(map[int64]Origin),
		salts:     make(map[Origin]*salt),
	}
}

// mapOrigin is the mapped PID of an origin under its current salt.
func (p *PSM) mapOrigin(o Origin, r Region) int64 {
	if s, ok := p.salts[o]; ok && o.PID >= 0 {
		return MapPIDSalted(o.PID, r, s.value)
	}
	return MapPID(o.PID, r)
}

// taken reports whether mapped is unavailable to origin o: held by another
// origin, or -1, which is not a producer ID at all.
func (p *PSM) taken(mapped int64, o Origin) (holder Origin, ok bool) {
	if mapped == -1 {
		return Origin{}, true
	}
	h, held := p.holders[mapped]
	return h, held && h != o
}

// Decide classifies a batch. It does not change the PSM; Commit does, once
// the batch is appended. A batch without a producer ID (-1) is always
// appended unchanged.
func (p *PSM) Decide(b BatchInfo) Decision {
	if b.Origin.PID == -1 {
		return Decision{Kind: KindAppend, Mapped: -1, info: b}
	}
	o := b.Origin
	mapped := p.mapOrigin(o, b.Region)
	d := Decision{Kind: KindAppend, Mapped: mapped, info: b}

	if holder, clash := p.taken(mapped, o); clash {
		switch {
		case o.PID >= 0:
			// The batch's own origin can move: draw it a salt.
			d.Kind, d.Holder = KindCollision, holder
			d.Salt = p.drawSalt(o, b.Region, mapped, holder.Cluster)
			return d
		case holder.PID >= 0:
			// A forwarded PID keeps its identity; the holder's
			// positive PID can move instead. Salt the holder,
			// then this origin takes the slot. A mirror of this
			// partition sees the slot change hands once.
			d.Kind, d.Holder = KindCollision, holder
			d.Salt = p.drawSalt(holder, p.producers[holder].region, mapped, o.Cluster)
			return d
		default:
			d.Kind, d.Holder = KindUnresolvable, holder
			// Sequence checks below still run against this
			// origin's own entry: the kind reports the clash,
			// and a duplicate is still a duplicate.
			if k := p.sequenceKind(o, b); k == KindDuplicate {
				d.Kind = KindDuplicate
			}
			return d
		}
	}
	d.Kind = p.sequenceKind(o, b)
	return d
}

func (p *PSM) sequenceKind(o Origin, b BatchInfo) Kind {
	e, ok := p.producers[o]
	if !ok {
		return KindAppend
	}
	switch {
	case b.Epoch < e.epoch:
		return KindLowerEpoch
	case b.Epoch > e.epoch:
		return KindAppend // a new epoch restarts the sequence
	case b.BaseSequence < 0 || e.lastSeq < 0:
		return KindAppend
	case seqAtOrBefore(b.lastSequence(), e.lastSeq):
		return KindDuplicate
	case b.BaseSequence != addSeq(e.lastSeq, 1):
		return KindSequenceGap
	}
	return KindAppend
}

// drawSalt finds a salt that gives o a free mapped PID other than the
// contested one.
func (p *PSM) drawSalt(o Origin, r Region, contested int64, colliding string) *Salt {
	for range maxSaltDraws {
		s := p.cfg.Rand()
		m := MapPIDSalted(o.PID, r, s)
		if _, clash := p.taken(m, o); !clash && m != contested {
			return &Salt{Origin: o, Salt: s, Colliding: colliding, Mapped: m}
		}
	}
	panic("transform: no free salt in 65536 draws; the random source is broken")
}

// AddSalt records a salt: one that was just committed to the state topic, or
// one replayed from it. If the origin holds a slot under a different mapping,
// it gives the slot up; its next batch maps with the salt.
func (p *PSM) AddSalt(o Origin, s int64, at time.Time) {
	p.salts[o] = &salt{value: s, lastUsed: at}
	if e, ok := p.producers[o]; ok && e.mapped != MapPIDSalted(o.PID, e.region, s) {
		// The entry was made under another mapping; drop it so that
		// the origin starts afresh under its salted PID.
		p.dropProducer(o, e)
	}
}

// DeleteSalt forgets a salt (its record was tombstoned).
func (p *PSM) DeleteSalt(o Origin) { delete(p.salts, o) }

// Salt returns the salt of an origin.
func (p *PSM) Salt(o Origin) (int64, bool) {
	s, ok := p.salts[o]
	if !ok {
		return 0, false
	}
	return s.value, true
}

// Salts returns every salt the PSM holds, by origin: what a fresh PSM
// needs (AddSalt) to map the partition's producers as this one does.
func (p *PSM) Salts() map[Origin]int64 {
	out := make(map[Origin]int64, len(p.salts))
	for o, s := range p.salts {
		out[o] = s.value
	}
	return out
}

// Commit applies a decision whose batch was appended (or, for
// KindDuplicate, skipped) at time now.
func (p *PSM) Commit(d Decision, now time.Time) {
	b := d.info
	if b.Origin.PID == -1 || d.Kind == KindCollision {
		return
	}
	o := b.Origin
	if s, ok := p.salts[o]; ok {
		s.lastUsed = now
	}
	e, ok := p.producers[o]
	if !ok {
		e = &producer{mapped: d.Mapped, region: b.Region, epoch: b.Epoch, lastSeq: -1}
		p.producers[o] = e
	}
	e.lastAppend = now
	if _, held := p.holders[d.Mapped]; !held && d.Mapped != -1 {
		p.holders[d.Mapped] = o
	}
	switch d.Kind {
	case KindDuplicate, KindLowerEpoch:
		return // the origin's epoch and sequence stay as they were
	}
	if b.Epoch > e.epoch {
		e.epoch = b.Epoch
	}
	e.lastSeq = b.lastSequence()
}

func (p *PSM) dropProducer(o Origin, e *producer) {
	delete(p.producers, o)
	if p.holders[e.mapped] == o {
		delete(p.holders, e.mapped)
	}
}

// ResetMirrored applies a MIRROR_PID_RESET barrier: it drops every producer
// entry whose mapped PID is negative (all mirrored producers) and returns how
// many it dropped. Salts stay: they are persistent mappings, not state.
func (p *PSM) ResetMirrored() int {
	n := 0
	for o, e := range p.producers {
		if e.mapped < 0 {
			p.dropProducer(o, e)
			n++
		}
	}
	return n
}

// Expire drops producer entries and salts idle for longer than the expiry
// at now, and returns the salts to tombstone in the state topic.
func (p *PSM) Expire(now time.Time) (expired int, tombstones []Origin) {
	for o, e := range p.producers {
		if now.Sub(e.lastAppend) > p.cfg.Expiry {
			p.dropProducer(o, e)
			expired++
		}
	}
	for o, s := range p.salts {
		if _, active := p.producers[o]; !active && now.Sub(s.lastUsed) > p.cfg.Expiry {
			delete(p.salts, o)
			tombstones = append(tombstones, o)
		}
	}
	slices.SortFunc(tombstones, compareOrigins)
	return expired, tombstones
}

// Expirable reports whether Expire at now would drop anything. It changes
// nothing.
func (p *PSM) Expirable(now time.Time) bool {
	for _, e := range p.producers {
		if now.Sub(e.lastAppend) > p.cfg.Expiry {
			return true
		}
	}
	for o, s := range p.salts {
		if e, active := p.producers[o]; (!active || now.Sub(e.lastAppend) > p.cfg.Expiry) && now.Sub(s.lastUsed) > p.cfg.Expiry {
			return true
		}
	}
	return false
}

// compareOrigins orders origins by cluster, then PID.
func compareOrigins(a, b Origin) int {
	return cmp.Or(strings.Compare(a.Cluster, b.Cluster), cmp.Compare(a.PID, b.PID))
}

// ProducerEntry is one producer entry of a PSM, as Snapshot gives it and
// Restore takes it back: a checkpoint saves the entries so that
// reconciliation reaches the decisions the pipeline reached (DESIGN §12 I3).
type ProducerEntry struct {
	Origin     Origin
	Mapped     int64
	Region     Region // the unsalted region of Origin.Cluster
	Epoch      int16
	LastSeq    int32 // -1: no sequence seen
	LastAppend time.Time
}

// Snapshot returns every producer entry, ordered by origin (cluster, then
// PID), so that equal states give equal snapshots.
func (p *PSM) Snapshot() []ProducerEntry {
	if len(p.producers) == 0 {
		return nil
	}
	out := make([]ProducerEntry, 0, len(p.producers))
	for o, e := range p.producers {
		out = append(out, ProducerEntry{Origin: o, Mapped: e.mapped, Region: e.region, Epoch: e.epoch, LastSeq: e.lastSeq, LastAppend: e.lastAppend})
	}
	slices.SortFunc(out, func(a, b ProducerEntry) int { return compareOrigins(a.Origin, b.Origin) })
	return out
}

// Restore adds the entries of a snapshot, each replacing an entry of the
// same origin, and makes each the holder of its mapped PID unless another
// origin holds it already. Salts are not part of a snapshot: they are
// replayed from their own records (AddSalt).
func (p *PSM) Restore(entries []ProducerEntry) {
	for _, e := range entries {
		if old, ok := p.producers[e.Origin]; ok {
			p.dropProducer(e.Origin, old)
		}
		p.producers[e.Origin] = &producer{mapped: e.Mapped, region: e.Region, epoch: e.Epoch, lastSeq: e.LastSeq, lastAppend: e.LastAppend}
		if _, held := p.holders[e.Mapped]; !held && e.Mapped != -1 {
			p.holders[e.Mapped] = e.Origin
		}
	}
}

// Len is the number of producer entries held.
func (p *PSM) Len() int { return len(p.producers) }

// Mapped returns the mapped PID the origin holds, if it has an entry.
func (p *PSM) Mapped(o Origin) (int64, bool) {
	e, ok := p.producers[o]
	if !ok {
		return 0, false
	}
	return e.mapped, true
}

// addSeq adds n to a sequence number with Kafka's wrap from MaxInt32 to 0.
func addSeq(seq, n int32) int32 {
	s := int64(seq) + int64(n)
	if s > math.MaxInt32 {
		s -= math.MaxInt32 + 1
	}
	return int32(s)
}

// seqAtOrBefore reports whether a is at or before b on the sequence circle,
// looking back at most half of it.
func seqAtOrBefore(a, b int32) bool {
	d := (int64(b) - int64(a)) & math.MaxInt32
	return d < 1<<30
}
