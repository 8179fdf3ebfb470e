// Package twin is the one decision mirrord makes for a source batch and the
// relation by which it recognises that batch's mirror at the destination,
// its twin (DESIGN §6, §12, §13).
//
// # Concept
//
// Decide says what the destination gets for a fetched source batch: nothing
// (an empty batch, or a duplicate of what its producer already appended),
// nothing yet (a collision salt must be committed first), or the batch with
// its producer ID mapped, rewritten in place or, for a batch with offset
// gaps, re-encoded densely. Match says whether a batch read from the
// destination is the twin of the batch the link appended for a source
// batch: the same bytes but for what a destination broker assigns or
// rewrites. A Walker walks a destination tail and the source in step,
// deciding each source batch with Decide and matching with Match: the
// reconciliation of DESIGN §6, and the checkpoint walk of offset
// translation. A Run tells which source batches a destination batch holds
// when the link coalesced a run of them into one (issue 23), record by
// record; a Walker told so (Runs) walks through such a batch part by part.
//
// # Invariants
//
//   - I3: the pipeline (package link) and every walk (reconciliation,
//     translation) decide with the same Decide, so that a walk reaches the
//     decisions the pipeline reached for every batch, skipped ones
//     included.
//   - Decide never changes the producer state; the caller commits a
//     decision once it is carried out. A Walker commits matched and
//     skipped batches to the PSM it was given, as the pipeline did.
//   - A batch is validated before it is re-encoded: damaged bytes never get
//     a fresh CRC (DESIGN §5).
//
// The package is pure: it imports nothing of mirrord but transform, does no
// I/O, reads no clock and starts no goroutines. Its callers own the PSMs
// and re-encoders they pass in.
package twin
