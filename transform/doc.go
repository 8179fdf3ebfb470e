// Package transform is the pure heart of mirrord: everything that decides
// how a forwarded record batch looks at the destination, with no I/O.
//
//   - Region selector (region.go): a Kafka cluster ID folds to a 32-bit region.
//   - PID mapping (pid.go): a source producer ID becomes a negative mapped PID
//     that carries the source region, so that producers from different
//     clusters never share a PID at the destination, also across chains
//     A→B→C. Negative PIDs pass through unchanged.
//   - Producer state (psm.go): per destination partition, which origin holds
//     each mapped PID, collision detection and salts, duplicate and sequence
//     checks, idle expiry and the MIRROR_PID_RESET reset. The PSM decides; the
//     caller persists salts and appends.
//   - Batch codec (batch.go, crc.go, reencode.go): splitting a fetched buffer
//     into record batches (format v2), header access, validation, the in-place
//     producer-ID rewrite with an incremental CRC-32C update, and the one slow
//     path, re-encoding a batch that compaction left with offset gaps.
//
// Invariants: a mapped PID is always negative; mapping is idempotent; the
// rewrite never allocates and never touches record bytes; records are only
// decompressed by the re-encode fallback.
//
// The package starts no goroutines. A PSM is not safe for concurrent use: one
// goroutine (the owner of the destination partition's pipeline) drives it.
package transform
