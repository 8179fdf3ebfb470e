package transform

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// checkStamp runs Stamp and checks the result against a full CRC and the
// original bytes.
func checkStamp(t testing.TB, b []byte, pid int64, epoch int16, seq int32) {
	t.Helper()
	orig := bytes.Clone(b)
	Stamp(b, pid, epoch, seq)
	if err := Validate(b); err != nil {
		t.Fatalf("after Stamp of a %d-byte batch (attrs %#x) to pid %d epoch %d seq %d: %v", len(b), orig[22], pid, epoch, seq, err)
	}
	h := mustHeader(t, b)
	want := mustHeader(t, orig)
	want.BaseOffset, want.PartitionLeaderEpoch = 0, -1
	want.ProducerID, want.ProducerEpoch, want.BaseSequence = pid, epoch, seq
	want.Attributes |= AttrTransactional
	want.CRC = h.CRC
	if h != want {
		t.Fatalf("header after Stamp =\n%+v, want\n%+v", h, want)
	}
	// Magic, offset delta, timestamps, record count and the records are
	// untouched.
	for _, r := range [][2]int{{PosMagic, PosCRC}, {PosLastOffsetDelta, PosProducerID}, {PosNumRecords, len(b)}} {
		if !bytes.Equal(b[r[0]:r[1]], orig[r[0]:r[1]]) {
			t.Fatalf("Stamp changed bytes %d..%d", r[0], r[1])
		}
	}
}

func TestStamp(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, tc := range []struct {
		name  string
		size  int
		attrs int16
		pid   int64
		epoch int16
		seq   int32
	}{
		// Guards the smallest batch: the changed bytes end where the header ends.
		{"header only", BatchHeaderSize, 0, 1000, 0, 0},
		// Guards a batch that is transactional already (no attribute diff).
		{"transactional source", 4096, AttrTransactional | 2, 77, 3, 12345},
		// Guards a plain (PID -1) source batch under a session producer.
		{"plain source", 1 << 10, 4, 5, 1, 99},
		// Guards the largest values of each field.
		{"max fields", 16 << 10, 1, math.MaxInt64, math.MaxInt16, math.MaxInt32},
		// Guards the shift at 1 MiB.
		{"1MiB", 1 << 20, 3, 42, 7, 1 << 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := randomBatch(rng, tc.size, tc.attrs)
			checkStamp(t, b, tc.pid, tc.epoch, tc.seq)
			before := bytes.Clone(b)
			Stamp(b, tc.pid, tc.epoch, tc.seq)
			if !bytes.Equal(before, b) {
				t.Fatal("a second Stamp with the same producer changed the batch")
			}
			// A new epoch and sequence for a retry in a later
			// transaction (transaction.version 2 bumps the epoch).
			checkStamp(t, b, tc.pid, tc.epoch^1, tc.seq^0x55)
		})
	}
}

// Guards end-to-end integrity: damage from before Stamp still fails the CRC.
func TestStampKeepsDamage(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, at := range []int{PosAttributes + 1, PosProducerID + 3, PosBaseSequence, 500, 1023} {
		b := randomBatch(rng, 1024, 0)
		b[at] ^= 0x04
		Stamp(b, 9, 1, 0)
		if err := Validate(b); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "crc check failed") {
			t.Fatalf("damage at byte %d: Validate after Stamp = %v, want a crc failure", at, err)
		}
	}
}

// Guards the hot path's promise: no allocation at any size.
func TestStampAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	for _, size := range []int{BatchHeaderSize, 16 << 10, 1 << 20} {
		b := randomBatch(rng, size, AttrTransactional)
		seq := int32(0)
		if allocs := testing.AllocsPerRun(100, func() { seq += 7; Stamp(b, 1234, 2, seq) }); allocs != 0 {
			t.Fatalf("Stamp of %d bytes allocates %v times", size, allocs)
		}
		if err := Validate(b); err != nil {
			t.Fatalf("after 100 stamps: %v", err)
		}
	}
}

func FuzzStampCRC(f *testing.F) {
	f.Add([]byte{}, int16(0), int64(-1), int64(0), int16(0), int32(0), int64(0))
	f.Add([]byte("some records"), int16(AttrTransactional|3), int64(4242), int64(17), int16(4), int32(100), int64(12))
	f.Add(bytes.Repeat([]byte{0xFF}, 5000), int16(-1), int64(-1), int64(math.MaxInt64), int16(-1), int32(-1), int64(-7))
	f.Fuzz(func(t *testing.T, recs []byte, attrs int16, pid, newPID int64, epoch int16, seq int32, other int64) {
		b := encodeTestBatchRaw(Header{BaseOffset: other, PartitionLeaderEpoch: int32(other), Attributes: attrs,
			LastOffsetDelta: int32(other >> 8), FirstTimestamp: other * 3, MaxTimestamp: other ^ pid, ProducerID: pid,
			ProducerEpoch: int16(other), BaseSequence: int32(other >> 32), NumRecords: int32(len(recs))}, recs)
		checkStamp(t, b, newPID, epoch, seq)
		// A CRC error carries over unchanged.
		b[PosCRC] ^= 0x5A
		stored := binary.BigEndian.Uint32(b[PosCRC:])
		full := crc32.Checksum(b[PosAttributes:], crcTable)
		Stamp(b, ^newPID, ^epoch, ^seq)
		if got, want := binary.BigEndian.Uint32(b[PosCRC:])^crc32.Checksum(b[PosAttributes:], crcTable), stored^full; got != want {
			t.Fatalf("CRC error changed from %#x to %#x across Stamp", want, got)
		}
	})
}

// Guards translation of transactional delivery: Unstamp turns a source
// batch and the batch a session stamped for it into the same bytes but for
// the base offset and leader epoch, with a CRC that still validates, for
// every producer kind of the source.
func TestUnstamp(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	for _, tc := range []struct {
		name  string
		size  int
		attrs int16
	}{
		{"plain", BatchHeaderSize, 0},
		{"transactional", 4096, AttrTransactional | 2},
		{"idempotent compressed", 1 << 16, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := randomBatch(rng, tc.size, tc.attrs)
			binary.BigEndian.PutUint64(src[PosBaseOffset:], 1234)
			binary.BigEndian.PutUint32(src[PosLeaderEpoch:], 9)
			stamped := bytes.Clone(src)
			Stamp(stamped, 4242, 3, 777)
			for _, b := range [][]byte{src, stamped} {
				before := mustHeader(t, b)
				Unstamp(b)
				if err := Validate(b); err != nil {
					t.Fatalf("after Unstamp: %v", err)
				}
				h := mustHeader(t, b)
				want := before
				want.ProducerID, want.ProducerEpoch, want.BaseSequence = -1, -1, -1
				want.Attributes &^= AttrTransactional
				want.CRC = h.CRC
				if h != want {
					t.Fatalf("header after Unstamp =\n%+v, want\n%+v", h, want)
				}
			}
			if !bytes.Equal(src[PosAttributes:], stamped[PosAttributes:]) {
				t.Fatal("the unstamped source batch and the unstamped stamped batch differ after the attributes")
			}
		})
	}
}
