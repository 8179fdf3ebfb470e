// Package translate is offset translation (DESIGN §13): where a consumer
// that read a mirrored source partition up to a position resumes at the
// destination.
//
// # Concept
//
// A source position p of a mirrored
// partition (the next offset a consumer would read) translates to the
// destination offset of the first mirrored record whose source offset is at
// least p; when p is at or past the link's position and nothing lies
// between, to the destination offset the next mirrored record will get.
// Records the link does not mirror (aborted transactions, transaction
// markers, records compaction removed, duplicates) translate to the next
// mirrored one, so a consumer that moves neither re-reads nor skips a
// record.
//
// Every destination batch the link wrote is the twin (package twin) of one
// committed source batch. A translation reads the committed source batches
// from p (read_committed, the batches a consumer would get), finds the
// twin of the first one the link mirrored, and adds p's place among the
// records the twin holds. Where to look for the twin comes from the nearest
// pair of positions known, tried in this order:
//
//   - head: p at or past the link's position (the anchor's SrcNext with
//     Head): the destination offset the next record gets, after checking
//     that the source holds no committed record between the two;
//   - window: p inside the window of recently mirrored batches: the span of
//     the batch says where its twin is (one source and one destination
//     fetch);
//   - checkpoint: p at or past a checkpoint: a walk from the checkpoint's
//     pair, source and destination in step, as reconciliation walks (the
//     twin.Walker, with the producer state saved with the checkpoint);
//   - timestamp: anything else, and a walk that meets a batch it cannot
//     place: the destination's first offset at or after the earliest create
//     time of the source batch (ListOffsets), scanned forward for the twin.
//     Twins carry the source's create times, so nothing of the link's at
//     or after the twin lies before that offset.
//
// Cost, per translation: a head or window translation reads one chunk from
// each cluster (translateChunk, 1 MiB); a checkpoint walk reads what lies
// between the checkpoint and p; a timestamp translation makes one
// ListOffsets request and reads from there to the twin. No translation
// reads more than translateBudget (16 MiB) from either cluster: past it, it
// answers ErrUntranslatable.
//
// # Transactional delivery
//
// A link in transactional delivery (Logs.Stamped) appends every committed
// source batch under its session's producer ID, epoch and sequence, with
// the transactional bit: a mirror differs from its source batch in those
// header fields only (a re-encoded one as Decide re-encodes it), and the
// destination also holds the data of aborted
// transactions (a crashed session's appends, appended again by the next
// session) and the markers. Translation then reads both logs with the
// producer fields stripped (transform.Unstamp), so that each batch
// compares as one without a producer ID, by its records alone (copies with
// the same records and timestamps are told apart by their order, as a
// plain producer's retries are), and reads the destination as a
// read_committed consumer does: aborted transactions and markers are
// skipped by the fetch answer's aborted list, never matched. The session's
// anchor is its last committed checkpoint (its head); nothing of the open
// transaction counts, so a position the link appended but did not commit
// yet is ErrAheadOfLink. An answer is exact for read_committed consumers:
// the offset it gives may be a marker or aborted data before the mirror,
// which such a consumer skips. Content alone cannot tell copies apart
// where the source holds a range of batches twice with the same records
// and timestamps: the timestamp search checks its answer by counting
// copies from the front as well (sameOrdinal), and where the count and
// the search's alignment at the end disagree the answer is
// ErrUntranslatable with ErrInexact.
//
// A session coalesces (issue 23): it may append a run of consecutive,
// contiguous, dense source batches as one destination batch
// (transform.Merge), whose records map to the run's source offsets one by
// one. The window keeps a span per source batch, which may begin inside a
// destination batch: its records there are checked against the source
// batch's (twin.Run). The checkpoint walk keeps its place inside a
// destination batch across the source batches it holds (twin.Walker.Runs).
// The timestamp search takes a destination batch with more records than
// a candidate for a run only when the source's committed batches from the
// offset its records give hold, contiguous and dense, exactly its records
// to its end (verifyRun), and counts copies of the candidate record by
// record (sameOrdinal). A run whose first batches the source deleted since
// (retention, DeleteRecords) is checked from the batch that holds the
// source's log start, which the source returns whole. A run whose batches
// the source's cleaner cut since is not placed: positions in it are
// ErrUntranslatable. The session joins
// no batches of a compacted topic (link/coalesce.go), so only a topic that
// became compacted after the link mirrored it can hold such a run.
//
// # Coalescing in preserve delivery
//
// A preserve session joins only one producer's consecutive batches (same
// producer ID and epoch, consecutive sequences, contiguous offsets) into
// the batch that producer would have sent with a longer linger: its mapped
// producer ID, epoch and the run's first base sequence. The same three
// ways place a source batch inside such a batch, by its producer's
// identity as well as its records: the batch must carry the source
// batch's mapped producer ID and epoch, and the source batch's base
// sequence must be the batch's plus the records before it in the run
// (producerPart; twin.Walker.ProducerRuns for the checkpoint walk; the
// timestamp search proposes where the run begins by that sequence and
// checks the run whole against the source, verifyRun). A run appended
// under a collision salt that producer_state_expiry tombstoned since is not
// placed by its identity (the mapping is not the salt's any more).
//
// A position below the source's log start translates as the log start (a
// consumer there would be reset to it); one whose translation lies below
// the destination's log start is ErrBelowDestinationStart.
//
// # Inputs
//
// A translation knows nothing of a link but what it is handed: an Anchor
// (the pair of partitions, and what the link knows of it without reading
// either cluster: its head, its window of recently appended batches, its
// last checkpoint and producer state, its salts) and Logs, the readers of
// both clusters. A running link hands the Anchor of its pipeline; Offline
// builds one from the state topic's checkpoint while no session runs.
// Group translates a consumer group's committed offsets one by one.
//
// # Invariants
//
//   - A translation never answers a position a consumer would re-read or
//     skip from: where the twin of the first mirrored source batch at or
//     after the position cannot be found within the budget, the answer is
//     an error (ErrUntranslatable and the other sentinel errors), never a
//     guess.
//   - It decides source batches with twin.Decide and matches with
//     twin.Match, as the pipeline and reconciliation do (I3).
//
// # Goroutines
//
// None: a translation runs on its caller's goroutine. Logs and Offline are
// safe for concurrent use; their clients are closed by their owner
// (Offline.Close; a link closes the clients of its sessions' Logs).
package translate
