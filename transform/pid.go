package transform

// Bit layout of a mapped PID (spec 000): bit 63 is the sign bit, set; bits
// 62–31 are the region selector; bits 30–0 are the low 31 bits of the source
// producer ID.
const (
	pidLowBits  = 31
	pidLowMask  = 1<<pidLowBits - 1
	pidSignBit  = uint64(1) << 63
	regionShift = pidLowBits
)

// MapPID maps a source producer ID into the region's slice of the negative
// PID space. A negative PID passes through unchanged: -1 (no producer ID) and
// PIDs that an upstream mirror already mapped keep their identity, which is
// what makes chains A→B→C safe. A PID of 2^31 or more loses its high bits;
// the PSM's origin check turns a resulting clash into an ordinary collision.
func MapPID(pid int64, r Region) int64 {
	if pid < 0 {
		return pid
	}
	return int64(pidSignBit | uint64(r)<<regionShift | uint64(pid)&pidLowMask)
}

// Salted returns the region perturbed by a collision salt: region + salt
// (mod 2^32).
func (r Region) Salted(salt int64) Region {
	return r + Region(uint32(salt))
}

// MapPIDSalted maps pid with the region perturbed by salt.
func MapPIDSalted(pid int64, r Region, salt int64) int64 {
	return MapPID(pid, r.Salted(salt))
}

// DecodePID is the inverse of MapPID for operators: the region (possibly
// salted) and the low 31 bits of the original PID. ok is false for a PID that
// cannot be a mapped PID: -1 and every non-negative PID.
func DecodePID(mapped int64) (r Region, low int32, ok bool) {
	if mapped >= -1 {
		return 0, 0, false
	}
	u := uint64(mapped)
	return Region(uint32(u >> regionShift)), int32(u & pidLowMask), true
}

// SaltOf is the salt under which pid, of a cluster in region r, maps to
// mapped: what a mirror's producer ID says about the salt the link used for
// its batch, once the salt itself is gone (producer_state_expiry tombstoned
// it). ok is false when mapped is not a salted mapping of pid: another
// producer's, the unsalted mapping, or a PID that is not mapped at all.
func SaltOf(pid int64, r Region, mapped int64) (salt int64, ok bool) {
	mr, low, ok := DecodePID(mapped)
	if !ok || pid < 0 || uint64(low) != uint64(pid)&pidLowMask || mr == r {
		return 0, false
	}
	salt = int64(uint32(mr - r))
	return salt, MapPIDSalted(pid, r, salt) == mapped
}
