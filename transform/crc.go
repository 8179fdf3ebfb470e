package transform

import (
	"encoding/binary"
	"math/bits"
)

// Incremental CRC-32C.
//
// Let raw(c, D) be the CRC register after feeding D into a register holding c,
// with no pre- or post-inversion; crc(D) = ^raw(^0, D). raw is linear over
// GF(2) in both c and D, so for D and D' of equal length
//
//	crc(D') = crc(D) ^ raw(0, D ^ D').
//
// Rewrite changes only the attributes (CRC'd bytes 0-1) and the producer ID
// (bytes 22-29), so D ^ D' is zero after its first 30 bytes. Feeding n zero
// bytes into a register multiplies it by x^(8n) mod P; that map is linear in
// the register, and crcShift applies it with one table per power of two of n
// (zlib's crc32_combine idea, with the 32x32 matrix of each power stored as
// nibble lookup tables). The cost depends on the number of set bits of n, at
// most 31 for a batch, and never on the batch's bytes.

const crcPolyReflected = 0x82F63B78 // CRC-32C (Castagnoli), reflected

// crcByteTable is the bytewise table of the raw CRC-32C register.
var crcByteTable = func() (t [256]uint32) {
	for i := range t {
		c := uint32(i)
		for range 8 {
			if c&1 != 0 {
				c = c>>1 ^ crcPolyReflected
			} else {
				c >>= 1
			}
		}
		t[i] = c
	}
	return t
}()

// crcUpdateByte feeds one byte into a raw register.
func crcUpdateByte(c uint32, b byte) uint32 {
	return crcByteTable[byte(c)^b] ^ c>>8
}

// crcOp is a linear map on a raw CRC register, stored as eight nibble
// tables: op[i][v] is the image of v<<(4i).
type crcOp [8][16]uint32

func (op *crcOp) apply(c uint32) uint32 {
	return op[0][c&15] ^ op[1][c>>4&15] ^ op[2][c>>8&15] ^ op[3][c>>12&15] ^
		op[4][c>>16&15] ^ op[5][c>>20&15] ^ op[6][c>>24&15] ^ op[7][c>>28]
}

func makeCRCOp(f func(uint32) uint32) (op crcOp) {
	for i := range op {
		for v := range op[i] {
			op[i][v] = f(uint32(v) << (4 * i))
		}
	}
	return op
}

// crcZeros[k] feeds 2^k zero bytes into a raw register. 64 levels cover any
// int length; a batch needs at most 31 (16 KiB of tables, built at init in
// about 100µs).
var crcZeros = func() (ops [64]crcOp) {
	ops[0] = makeCRCOp(func(c uint32) uint32 { return crcUpdateByte(c, 0) })
	for k := 1; k < len(ops); k++ {
		prev := &ops[k-1]
		ops[k] = makeCRCOp(func(c uint32) uint32 { return prev.apply(prev.apply(c)) })
	}
	return ops
}()

// crcShift returns the raw register c after n zero bytes: c·x^(8n) mod P.
func crcShift(c uint32, n uint64) uint32 {
	for n != 0 && c != 0 {
		c = crcZeros[bits.TrailingZeros64(n)&63].apply(c)
		n &= n - 1
	}
	return c
}

// crcTxnFlip is raw(0, D ^ D') over the 22 bytes from the attributes up to
// the producer ID when the transactional bit differs: the attributes differ
// in 0x0010, the 20 bytes after them not at all.
var crcTxnFlip = func() uint32 {
	c := crcUpdateByte(0, 0)
	c = crcUpdateByte(c, AttrTransactional)
	return crcShift(c, PosProducerID-PosAttributes-2)
}()

// Rewrite turns a validated, non-control batch fetched from a source into one
// a destination broker accepts from a client, in place: the producer ID
// becomes pid, the transactional bit is cleared, the base offset becomes 0
// (brokers assign offsets) and the partition leader epoch -1 (brokers assign
// it), and the CRC is updated incrementally. It never allocates, never reads
// the records, and costs the same for any batch size. b must be exactly one
// batch, as NextBatch or Split returns it, of at least BatchHeaderSize bytes
// (a shorter b is a caller bug and panics).
//
// A batch whose CRC was wrong before stays wrong after, so damage on the way
// is still caught by the destination broker (CORRUPT_MESSAGE).
func Rewrite(b []byte, pid int64) {
	be := binary.BigEndian
	_ = b[BatchHeaderSize-1]

	attrs := be.Uint16(b[PosAttributes:])
	oldPID := be.Uint64(b[PosProducerID:])

	var diff uint32 // raw CRC of D ^ D' over the 30 bytes from the attributes
	if attrs&AttrTransactional != 0 {
		diff = crcTxnFlip
	}
	if d := oldPID ^ uint64(pid); d != 0 || diff != 0 {
		for shift := 56; shift >= 0; shift -= 8 {
			diff = crcUpdateByte(diff, byte(d>>shift))
		}
	}
	if diff != 0 {
		crc := be.Uint32(b[PosCRC:]) ^ crcShift(diff, uint64(len(b)-PosProducerEpoch))
		be.PutUint32(b[PosCRC:], crc)
	}

	be.PutUint64(b[PosBaseOffset:], 0)
	be.PutUint32(b[PosLeaderEpoch:], 0xFFFF_FFFF)
	be.PutUint16(b[PosAttributes:], attrs&^AttrTransactional)
	be.PutUint64(b[PosProducerID:], uint64(pid))
}

// Stamp turns a validated, non-control batch fetched from a source into one
// the destination broker accepts from a transactional producer, in place
// (transactional delivery, DESIGN §14): the producer ID, epoch and base
// sequence become the session's, the transactional bit is set, the base
// offset becomes 0 and the partition leader epoch -1 (brokers assign both),
// and the CRC is updated incrementally over the 36 changed header bytes. Like
// Rewrite it never allocates, never reads the records, and costs the same
// for any batch size; the broker checks the sequence (the batch's records
// take baseSeq to baseSeq+LastOffsetDelta) and the epoch. b must be exactly
// one batch of at least BatchHeaderSize bytes (a shorter b is a caller bug
// and panics).
func Stamp(b []byte, pid int64, epoch int16, baseSeq int32) {
	restamp(b, true, pid, epoch, baseSeq)
	binary.BigEndian.PutUint64(b[PosBaseOffset:], 0)
	binary.BigEndian.PutUint32(b[PosLeaderEpoch:], 0xFFFF_FFFF)
}

// Unstamp strips a batch of its producer identity, in place: the producer
// ID, epoch and base sequence become -1 (a batch without a producer) and
// the transactional bit is cleared, with the CRC updated as Stamp updates
// it; the base offset, the partition leader epoch and the records are
// kept. Offset translation of transactional delivery compares a source
// batch with the batch a session stamped for it by content alone: Unstamp
// makes both what a non-idempotent producer would have sent (package
// translate). Like Stamp it never allocates and never reads the records.
func Unstamp(b []byte) {
	restamp(b, false, -1, -1, -1)
}

// restamp sets the producer fields and the transactional bit (Stamp,
// Unstamp).
func restamp(b []byte, transactional bool, pid int64, epoch int16, baseSeq int32) {
	be := binary.BigEndian
	_ = b[BatchHeaderSize-1]

	var old, stamped [PosNumRecords - PosAttributes]byte
	copy(old[:], b[PosAttributes:PosNumRecords])
	stamped = old
	attrs := be.Uint16(old[:]) &^ AttrTransactional
	if transactional {
		attrs |= AttrTransactional
	}
	be.PutUint16(stamped[0:], attrs)
	be.PutUint64(stamped[PosProducerID-PosAttributes:], uint64(pid))
	be.PutUint16(stamped[PosProducerEpoch-PosAttributes:], uint16(epoch))
	be.PutUint32(stamped[PosBaseSequence-PosAttributes:], uint32(baseSeq))

	var diff uint32 // raw CRC of D ^ D' over the header bytes the CRC covers
	for i := range old {
		diff = crcUpdateByte(diff, old[i]^stamped[i])
	}
	if diff != 0 {
		crc := be.Uint32(b[PosCRC:]) ^ crcShift(diff, uint64(len(b)-PosNumRecords))
		be.PutUint32(b[PosCRC:], crc)
	}
	copy(b[PosAttributes:PosNumRecords], stamped[:])
}
