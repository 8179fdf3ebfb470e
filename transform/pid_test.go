package transform

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"testing"
)

// uuidWithRegion builds a 22-character cluster ID whose region is r; salt
// varies the bytes so that different clusters fold to the same region.
func uuidWithRegion(r Region, salt uint64) string {
	var u [16]byte
	msb := salt<<32 | 0x1234_0000_0000_0000
	lsb := msb ^ uint64(r)
	binary.BigEndian.PutUint64(u[:8], msb)
	binary.BigEndian.PutUint64(u[8:], lsb)
	return base64.RawURLEncoding.EncodeToString(u[:])
}

// Guards the bit layout against the worked example of spec 000 (cid-hash 42
// and 99, PID 5), written out bit for bit as the spec draws it.
func TestMapPIDSpecExample(t *testing.T) {
	for _, tc := range []struct {
		region Region
		bits   string
	}{
		{42, "1" + "00000000000000000000000000101010" + "0000000000000000000000000000101"},
		{99, "1" + "00000000000000000000000001100011" + "0000000000000000000000000000101"},
	} {
		got := fmt.Sprintf("%064b", uint64(MapPID(5, tc.region)))
		if got != tc.bits {
			t.Errorf("MapPID(5, %d) = %s, spec says %s", tc.region, got, tc.bits)
		}
	}
	if got, want := MapPID(5, 42), int64(-9223371946660462587); got != want {
		t.Errorf("MapPID(5, 42) = %d, want %d", got, want)
	}
}

// Guards idempotency: -1 and already-mapped PIDs pass through, so a chain
// never maps a PID twice.
func TestMapPIDIdempotent(t *testing.T) {
	for _, pid := range []int64{-1, math.MinInt64, MapPID(5, 42), MapPID(math.MaxInt64, 0xFFFFFFFF)} {
		for _, r := range []Region{0, 42, 0xFFFFFFFF} {
			if got := MapPID(pid, r); got != pid {
				t.Errorf("MapPID(%d, %d) = %d, want it unchanged", pid, r, got)
			}
		}
	}
	m := MapPID(5, 42)
	if MapPID(m, 99) != m {
		t.Error("mapping a mapped PID changed it")
	}
}

// Guards the "chained with local producer" scenario of spec 000: A→B→C→D
// with a local producer of PID 5 on A, B and C gives D three distinct PIDs.
func TestChainedWithLocalProducer(t *testing.T) {
	const rA, rB, rC = 42, 99, 17
	// Each hop maps what it forwards with the region of its source.
	atB := []int64{MapPID(5, rA)}      // A's 5
	atC := []int64{MapPID(atB[0], rB)} // A's 5 forwarded by B→C
	atC = append(atC, MapPID(5, rB))   // B's local 5
	var atD []int64
	for _, pid := range atC {
		atD = append(atD, MapPID(pid, rC))
	}
	atD = append(atD, MapPID(5, rC)) // C's local 5
	want := []int64{MapPID(5, rA), MapPID(5, rB), MapPID(5, rC)}
	if fmt.Sprint(atD) != fmt.Sprint(want) {
		t.Fatalf("at D: %v, want F(42,5) F(99,5) F(17,5) = %v", atD, want)
	}
	seen := map[int64]bool{}
	for _, pid := range atD {
		if seen[pid] {
			t.Fatalf("PID %d appears twice at D: %v", pid, atD)
		}
		seen[pid] = true
	}
}

// Guards the "source cluster reassignment" scenario of spec 000: C mirrors
// from A, then B, then A again; A's PID 5 maps the same in phases 1 and 3.
func TestSourceClusterReassignment(t *testing.T) {
	phase1 := MapPID(5, 42)
	phase2 := MapPID(5, 99)
	phase3 := MapPID(5, 42)
	if phase1 != phase3 {
		t.Errorf("A's PID 5 maps to %d in phase 1 and %d in phase 3", phase1, phase3)
	}
	if phase1 == phase2 {
		t.Errorf("A's and B's PID 5 share the mapped PID %d", phase1)
	}
}

// Guards the inverse used by `mirrord pid decode`.
func TestDecodePID(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pid    int64
		region Region
		low    int32
		ok     bool
	}{
		{"spec example", MapPID(5, 42), 42, 5, true},
		{"max region and low bits", MapPID(math.MaxInt32-1, 0xFFFFFFFF), 0xFFFFFFFF, math.MaxInt32 - 1, true},
		{"masked high bits", MapPID(1<<40|77, 7), 7, 77, true},
		{"minus one is no producer", -1, 0, 0, false},
		{"zero", 0, 0, 0, false},
		{"positive", 12345, 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, low, ok := DecodePID(tc.pid)
			if r != tc.region || low != tc.low || ok != tc.ok {
				t.Errorf("DecodePID(%d) = (%d, %d, %v), want (%d, %d, %v)", tc.pid, r, low, ok, tc.region, tc.low, tc.ok)
			}
		})
	}
}

// Guards the salted region arithmetic: region + salt mod 2^32.
func TestSalted(t *testing.T) {
	for _, tc := range []struct {
		r    Region
		salt int64
		want Region
	}{
		{42, 1, 43},
		{0xFFFFFFFF, 1, 0},
		{42, -1, 41},
		{42, 1 << 32, 42},
		{42, math.MinInt64, 42},
	} {
		if got := tc.r.Salted(tc.salt); got != tc.want {
			t.Errorf("Region(%d).Salted(%d) = %d, want %d", tc.r, tc.salt, got, tc.want)
		}
	}
	if MapPIDSalted(5, 42, 57) != MapPID(5, 99) {
		t.Error("MapPIDSalted(5, 42, 57) != MapPID(5, 99)")
	}
}

// Guards the region selector on both accepted spellings of a cluster ID and
// the SHA-256 fallback for anything else.
func TestRegionOf(t *testing.T) {
	for _, tc := range []struct {
		name   string
		id     string
		want   Region
		hashed bool
	}{
		{"base64url region 42", "AAAAAAAAAAAAAAAAAAAAKg", 42, false},
		{"canonical hex region 42", "00000000-0000-0000-0000-00000000002a", 42, false},
		// msb = 0x0123456789abcdef, lsb = 0xfedcba9876543210: xor = 0xffffffffffffffff.
		{"hex fold", "01234567-89ab-cdef-fedc-ba9876543210", 0xFFFFFFFF, false},
		{"base64url fold", base64.RawURLEncoding.EncodeToString([]byte{1, 0, 0, 0, 0, 0, 0, 7, 2, 0, 0, 0, 0x10, 0, 0, 1}), 0x10000006, false},
		{"uppercase hex", "01234567-89AB-CDEF-FEDC-BA9876543210", 0xFFFFFFFF, false},
		{"kfake default", "kfake", shaRegion("kfake"), true},
		{"22 chars not base64", "!!!!!!!!!!!!!!!!!!!!!!", shaRegion("!!!!!!!!!!!!!!!!!!!!!!"), true},
		{"36 chars misplaced dashes", "0123456789ab-cdef-fedc-ba98-76543210", shaRegion("0123456789ab-cdef-fedc-ba98-76543210"), true},
		{"empty", "", shaRegion(""), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, hashed := RegionOf(tc.id)
			if got != tc.want || hashed != tc.hashed {
				t.Errorf("RegionOf(%q) = (%#x, %v), want (%#x, %v)", tc.id, got, hashed, tc.want, tc.hashed)
			}
		})
	}
}

// shaRegion computes the fallback independently of RegionOf.
func shaRegion(id string) Region {
	sum := sha256.Sum256([]byte(id))
	return Region(uint32(binary.BigEndian.Uint64(sum[:8]) ^ binary.BigEndian.Uint64(sum[8:16])))
}

// Guards that two different UUIDs built to fold to one region really do, so
// that the collision tests below test what they claim.
func TestUUIDWithRegion(t *testing.T) {
	a, b := uuidWithRegion(0xCAFE, 1), uuidWithRegion(0xCAFE, 2)
	if a == b {
		t.Fatal("same cluster ID twice")
	}
	for _, id := range []string{a, b} {
		if r, hashed := RegionOf(id); r != 0xCAFE || hashed {
			t.Errorf("RegionOf(%s) = (%#x, %v), want (0xcafe, false)", id, r, hashed)
		}
	}
}

// Property: for any cluster ID and PID, a non-negative PID maps to a negative
// one from which the region and the low 31 bits come back; a negative PID is
// unchanged.
func FuzzMapPID(f *testing.F) {
	f.Add([]byte("AAAAAAAAAAAAAAAAAAAAKg"), int64(5))
	f.Add(make([]byte, 16), int64(math.MaxInt64))
	f.Add([]byte{0xff, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, int64(-7))
	f.Fuzz(func(t *testing.T, raw []byte, pid int64) {
		var id string
		if len(raw) == 16 {
			id = base64.RawURLEncoding.EncodeToString(raw)
		} else {
			id = string(raw)
		}
		r, hashed := RegionOf(id)
		if len(raw) == 16 {
			if hashed {
				t.Fatalf("a 16-byte UUID %s was hashed", id)
			}
			if want := Region(uint32(binary.BigEndian.Uint64(raw[:8]) ^ binary.BigEndian.Uint64(raw[8:]))); r != want {
				t.Fatalf("RegionOf(%s) = %#x, want %#x", id, r, want)
			}
		}
		m := MapPID(pid, r)
		if pid < 0 {
			if m != pid {
				t.Fatalf("negative PID %d mapped to %d", pid, m)
			}
			return
		}
		if m >= 0 {
			t.Fatalf("MapPID(%d, %#x) = %d, not negative", pid, r, m)
		}
		if MapPID(m, r+1) != m {
			t.Fatalf("mapping is not idempotent for %d", m)
		}
		gr, low, ok := DecodePID(m)
		if m == -1 {
			// Region 0xFFFFFFFF with low bits all ones is -1; the
			// PSM treats that slot as taken.
			return
		}
		if !ok || gr != r || int64(low) != pid&pidLowMask {
			t.Fatalf("DecodePID(%d) = (%#x, %d, %v), want (%#x, %d, true)", m, gr, low, ok, r, pid&pidLowMask)
		}
	})
}

// Guards translation after a salt expired: the salt is recovered from the
// salted mapping, and from nothing else.
func TestSaltOf(t *testing.T) {
	const r = Region(42)
	for _, salt := range []int64{1, 9, 1 << 31, -5} {
		got, ok := SaltOf(5, r, MapPIDSalted(5, r, salt))
		if !ok || MapPIDSalted(5, r, got) != MapPIDSalted(5, r, salt) {
			t.Errorf("salt %d: SaltOf gives %d, %v", salt, got, ok)
		}
	}
	for _, c := range []struct {
		name   string
		pid    int64
		mapped int64
	}{
		{"unsalted", 5, MapPID(5, r)},
		{"another producer", 6, MapPIDSalted(5, r, 3)},
		{"not mapped", 5, 5},
		{"no producer ID", 5, -1},
		{"negative source PID", -7, MapPIDSalted(5, r, 3)},
	} {
		if s, ok := SaltOf(c.pid, r, c.mapped); ok {
			t.Errorf("%s: SaltOf gives salt %d", c.name, s)
		}
	}
}
