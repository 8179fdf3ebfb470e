package transform

import "sync"

// Returns is the rule that keeps a link from sending a batch back to the
// cluster where it was first produced (DESIGN §16). The region of a mapped
// producer ID names the cluster that first produced the batch: every mirror
// maps a source PID into its source's region, and a mapped (negative) PID
// passes through every later hop unchanged. With links in both directions
// over the same topic names (active-active, failback), a batch that the
// link B→A appended to A carries B's region; the link A→B must not append
// it to B again, where it started.
//
// A batch without a producer ID (-1: a producer with enable.idempotence
// off) carries no origin; the link's unattributed policy decides.
//
// A link that delivers transactionally appends under its session's
// producer ID, not the origin's, and a collision salt moves a mapped ID out
// of its origin's region: Sessions, when set, holds such producer IDs of
// batches that started at the destination (learnt from the source's state
// topic, where the links from the destination record them).
//
// The zero value forwards everything.
type Returns struct {
	// Home is the destination cluster's (unsalted) region; it is only
	// looked at when Check is set. A link whose source and destination
	// are the same cluster does not check: both ends are home.
	Home  Region
	Check bool
	// SkipUnattributed: batches with producer ID -1 are not forwarded
	// (unattributed = "skip", for active-active links).
	SkipUnattributed bool
	// Sessions are the producer IDs at the source of batches that started
	// at the destination though their region does not say so
	// (transactional sessions' IDs, salted mappings); nil: none are
	// known. Only looked at when Check is set.
	Sessions *Sessions
}

// Return is what Returns says of one batch.
type Return uint8

const (
	// Away: the batch did not start at the destination; it is forwarded.
	Away Return = iota
	// Home: the batch's producer ID is a mapping into the destination's
	// region: it was first produced at the destination.
	Home
	// Unattributed: the batch has no producer ID and the link skips those.
	Unattributed
)

// Of is what r says of a batch with producer ID pid.
//
// A salted mapping of a destination producer (a collision the reverse
// link resolved with a salt, DESIGN §4) carries the destination's region
// plus the salt, and a batch that a transactional link from the
// destination appended carries its session's producer ID: both are
// recognised by r.Sessions, which the caller must have brought up to date
// with the batch's producer ID before it asks (statestore.Origins.Learn).
func (r Returns) Of(pid int64) Return {
	if pid == -1 {
		if r.SkipUnattributed {
			return Unattributed
		}
		return Away
	}
	if !r.Check {
		return Away
	}
	if reg, _, ok := DecodePID(pid); ok && reg == r.Home {
		return Home
	}
	if r.Sessions.Has(pid) {
		return Home
	}
	return Away
}

// ReturnsOf is the rule of a link from cluster srcID to cluster dstID:
// batches that started at the destination are not sent back unless
// returnHome is set (a destination rebuilt under its old cluster ID that
// should get its own records back), and none are when both ends are the
// same cluster; skipUnattributed is the unattributed = "skip" policy.
func ReturnsOf(srcID, dstID string, returnHome, skipUnattributed bool) Returns {
	home, _ := RegionOf(dstID)
	return Returns{Home: home, Check: srcID != dstID && !returnHome, SkipUnattributed: skipUnattributed}
}

// Sessions is a set of producer IDs under which links appended at a
// cluster without their origin's region: their transactional sessions'
// IDs and salted mapped IDs (statestore's MirrorTxnProducer and
// MirrorSaltedPid records, read by the link in the other direction). It
// only grows: a cluster allocates a producer ID once, and a salt is chosen
// clear of the mapped IDs its partition holds, so an ID found not to be
// one of these when a batch under it was seen does not become one, and a
// decision about a batch does not change once its producer ID was looked
// up. Safe for concurrent use; the nil *Sessions is empty.
type Sessions struct {
	mu  sync.RWMutex
	ids map[int64]struct{}
}

// NewSessions returns an empty set.
func NewSessions() *Sessions { return &Sessions{ids: make(map[int64]struct{})} }

// Has reports whether pid is in the set.
func (s *Sessions) Has(pid int64) bool {
	if s == nil {
		return false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.ids[pid]
	return ok
}

// Add puts pid in the set.
func (s *Sessions) Add(pid int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids[pid] = struct{}{}
}

// Len is the number of producer IDs in the set.
func (s *Sessions) Len() int {
	if s == nil {
		return 0
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.ids)
}
