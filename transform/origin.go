package transform

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
// plus the salt and is not recognised here; nor is a batch that a
// transactional link appended under its session's producer ID. README,
// "Active-active and failback", states both limits.
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
