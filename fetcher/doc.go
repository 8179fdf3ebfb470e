// Package fetcher is one link's reader of the source cluster: it sends raw
// READ_COMMITTED Fetch requests (kmsg through kgo's connection to each
// partition leader, cl.Broker(id).Request) and yields, per partition, the
// committed record batches as the bytes the source stored, never
// decompressed, never re-encoded.
//
// # Concept
//
// The link assigns source partitions with start offsets (Assign) and reads
// Results. A Result covers [Start, End) of one partition: the committed data
// batches in that range, in offset order, with control batches (transaction
// markers) consumed and batches of aborted transactions dropped, exactly as a
// Kafka consumer with isolation.level=read_committed drops them (filter.go
// follows Apache Kafka's CompletedFetch). End is the next fetch offset; a
// link that checkpoints End after the destination acknowledged the batches
// resumes without loss or duplicates.
//
// # Invariants
//
//   - Per partition, results are contiguous: each Start is the previous End
//     of the same generation, and End only moves forward. No error moves it:
//     leader changes, connection errors, a truncated trailing batch and a
//     first sighting of a malformed batch are fetched again from the same
//     offset. The only jump is OnOutOfRange = "earliest" from an offset below
//     the log start offset to the log start offset, which the result states
//     (SkippedRecords) and the fetcher logs and counts.
//   - No control batch and no aborted batch is ever in Batches.
//   - The buffer bound (DESIGN §12 I7): every batch of a Result is a
//     sub-slice of the fetch response it came in, so a response stays
//     allocated, aborted, control and cut-off bytes included, while any
//     result that carries its batches is held. The fetcher therefore
//     charges each response whole (its record bytes, all partitions) to
//     MaxBufferedBytes from its arrival until the last result pinning it is
//     released (Result.Pin, Release). A partition is only fetched while the
//     bytes pinned plus the partition limits of the fetches granted or in
//     flight stay within MaxBufferedBytes, so the bytes pinned never exceed
//     MaxBufferedBytes plus what brokers return above a partition limit:
//     one batch per request (KIP-74), at most one request in flight per
//     source broker. Results without batches pin nothing.
//   - Released is not free: a response whose last result was released
//     is garbage that stays in the heap until a collection reclaims it,
//     and kgo reads each response into one allocation of its whole size.
//     So released bytes keep counting against MaxBufferedBytes until a
//     garbage collection that began after their release has ended: when
//     they are what keeps a grant from fitting, the coordinator asks the
//     collector goroutine for one (runtime.GC) and grants again when it
//     reports. The process's own collections count too: two completed
//     since the release (the second began after it) reclaim it, so a
//     collection is forced only when they have not kept up. Pinned, reserved and uncollected bytes together stay within
//     MaxBufferedBytes, so the fetcher's share of the heap does too.
//   - Fair share: partitions are granted buffer space strictly in the order
//     they became ready to fetch (a partition that just got data queues
//     behind every waiting partition), and a partition that does not fit
//     blocks the grants behind it, so no partition starves another. With
//     the budget full, partitions take turns one fetch each.
//   - A partition's fetch limit is PartitionMaxBytes, or an equal share of
//     MaxBufferedBytes over the assigned partitions when that is smaller
//     (never below MinPartitionShare), so that many partitions can be
//     fetched at once within the buffer. The limit grows when a response
//     holds no complete batch for a partition although it has data (the
//     next batch is above the limit): it doubles, up to MaxPartitionMaxBytes
//     and MaxBufferedBytes, and the partition goes first in its next
//     request, where brokers return at least one batch whatever its size
//     (KIP-74).
//   - A partition FAILS (Result.Err; no longer fetched until assigned again)
//     on an offset out of range under "fail", an offset above the high
//     watermark (always), a batch that is malformed (or, with CheckCRCs,
//     fails its CRC) twice at the same offset, a topic ID that changed, a
//     legacy message format, or a non-retriable broker error. Errors of
//     leadership (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH,
//     UNKNOWN_LEADER_EPOCH, LEADER_NOT_AVAILABLE, UNKNOWN_TOPIC_ID,
//     UNKNOWN_TOPIC_OR_PARTITION, REPLICA_NOT_AVAILABLE, KAFKA_STORAGE_ERROR)
//     and connection errors invalidate the cached leader and retry after an
//     exponential backoff (capped), forever.
//
// Requests carry many partitions, READ_COMMITTED, ReplicaID -1, no fetch
// session, each partition's CurrentLeaderEpoch from leaders.Cache and both the
// topic name and the topic ID (v13+ sends only IDs). The request-level
// MaxBytes is the protocol maximum so that it never binds before the
// partition limits (see fetch in broker.go). Broker throttling (KIP-219) is
// waited out by kgo's connection before the next request.
//
// # Goroutines
//
// Run owns every goroutine and waits for all of them before it returns:
//
//   - the coordinator, the goroutine that called Run: it owns all partition
//     state, the budget and the queue of undelivered results (at most two
//     per partition), and hands results to the unbuffered Results channel;
//     Assign, Unassign and Release hand it commands through a mailbox
//     (internal/mailbox);
//   - one fetch loop per source broker that leads an assigned partition,
//     with at most one Fetch in flight; it also filters the response and,
//     after OFFSET_OUT_OF_RANGE, looks up the valid range (kadm). The
//     coordinator starts a loop when it first sends a request to a broker
//     and stops it when the broker leads no assigned partition;
//   - one leader resolver that runs leaders.Cache lookups, which may ask the
//     cluster, so that the coordinator never blocks on I/O;
//   - one collector that runs a garbage collection when the coordinator
//     asks (one at a time), so that the coordinator never blocks on it.
package fetcher
