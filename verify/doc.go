// Package verify compares source topics with their mirrors and reports the
// first difference: the oracle of mirrord's integration tests and of
// `mirrord verify`.
//
// What it checks, per partition and in order (DESIGN §1, §3–5): the
// destination holds exactly the committed source records (aborted
// transactional records and control records are not mirrored, so offsets
// differ between the sides), each with the same key, value, headers and
// timestamp; the destination batch carries the source producer ID mapped by
// transform.MapPID into the source cluster's region (transform.MapPIDSalted
// for an origin with a collision salt; negative PIDs unchanged), the same
// producer epoch, the same compression codec, and no transactional bit; each
// record has the same sequence on both sides (its batch's base sequence plus
// its place among the batch's records: a batch the source's cleaner left
// with gaps is mirrored densely under the same base sequence); and every
// destination batch starts where a source batch starts.
//
// A source batch may start inside a destination batch only as the next part
// of a run that mirrord joined into one batch (coalescing): a run of one
// producer's consecutive batches becomes the batch that producer would have
// sent with a longer linger, under the first batch's base sequence. Such a
// source batch must directly follow the source record before it in the
// destination batch (contiguous offsets), come from the same producer and
// epoch, and its sequence must continue the destination batch's. Batches
// without a producer ID are never joined: for them both sides start batches
// at the same records. In transactional delivery (Config.Transactional) the
// session's producer fields replace the source's, and a run of any
// consecutive batches may be joined.
//
// A destination that holds a prefix of the source is behind, not different.
// A destination record that the source does not account for, a source record
// missing from the destination, records out of order and a missing
// destination partition are differences.
//
// Snapshot: Run lists the destination's high watermarks first and then the
// source's last stable offsets (read_committed), so that a mirror running
// meanwhile cannot put records in the destination snapshot that are beyond
// the source snapshot. Both sides are read from their log start offsets up to
// the snapshot.
//
// Reading: raw Fetch requests to partition leaders through the caller's
// clients (the source READ_COMMITTED, the destination READ_UNCOMMITTED), one
// partition per request, with the request byte limit above the partition
// limit (DESIGN §11). Records are decoded, and the source's aborted
// transactions dropped, by kgo.ProcessFetchPartition, the code kgo's own
// consumer runs; verify only adds the batch boundaries and base sequences it
// reads from the batch headers, and each record's place in its batch. Leader
// moves are followed by refreshing metadata.
//
// Goroutines: Run compares up to Config.Concurrency partitions at once
// (an errgroup it waits for). Each partition runs two readers, one per side,
// that fetch ahead by at most one chunk (a bounded channel), and the
// comparator in the partition's own goroutine; the partition waits for its
// readers before it returns. Nothing outlives Run.
package verify
