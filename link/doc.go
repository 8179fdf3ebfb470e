// Package link runs one mirroring link: the lifecycle of DESIGN §8, its
// sessions, the pipeline that moves batches from the source cluster to the
// destination, and the management of the destination topics.
//
// # Concept
//
// A Link runs sessions one after the other (lifecycle.go: Next, a pure
// function of state and Trigger). A session is PREPARING, then MIRRORING:
// it begins a state session (InitProducerId fences the previous one),
// replays the state topic, waits until the previous session's appends can
// no longer land, creates or grows the destination topics (topicplan.go
// decides, topics.go carries it out), and hands every partition to the
// Pipeline, which reconciles the destination tails, commits the
// MIRROR_PID_RESET barriers (package barrier) with the resume checkpoints,
// and then mirrors. The Pipeline (pipeline.go, partition.go, and its inputs
// and actions in pipeline_io.go) is pure: inputs in, actions out, no I/O,
// no clock of its own (DESIGN §12); it decides every batch with package
// twin, which reconciliation and offset translation share. session.go and
// run.go are the thin layer that carries inputs and actions between the
// pipeline and the fetcher, the appender, the committer and the workers
// (settle.go, tail.go, topics.go).
//
// Beside the sessions, a Link runs its failover.Mover (group offset sync
// and failover), which sees the link only through moverView (online.go):
// its state, whether the session here is the live one (MIRRORING, within
// its lease: group sync commits only then), a pause, the running session's
// anchors and translation (package translate). Each counter of the link is declared once, in
// counters.go, which drives the pipeline's counts, the metrics, the status
// JSON and the status page.
//
// A Link takes its own Config (Settings, and a Cluster for each side,
// which agent copies from package config) and never imports config; the
// clock (Deps.Now) and the randomness of collision salts (Deps.Rand) come
// in through Deps. The waits of settle (settle_delay, produce_timeout) run
// on real timers and so measure time with them.
//
// # Invariants (DESIGN §12)
//
//   - I1 Every committed source record reaches the destination once, in
//     source order per partition, or the link says which it could not
//     mirror: records lost at the source below the log start
//     (source_records_skipped, logged with offsets), partitions whose
//     source is gone (partitions_removed), and destination offsets
//     someone else wrote between its appends (destination_gap_offsets,
//     logged with offsets). The pipeline forwards a partition's batches in
//     fetch order, one at a time, and moves its source position only past
//     what the destination acknowledged or what it decided to skip.
//   - I2 A source batch is appended at most once: one batch in flight per
//     partition (Pipeline.submit is the only place that submits); an append
//     of unknown outcome is settled against the destination before
//     anything else is sent for the partition; a stop with appends
//     unresolved is recorded as unclean (statestore.LinkValue.Clean), so the
//     next session waits out the lease; and every new session waits until
//     the previous session's lease plus the clock-skew margin plus its
//     produce timeout has passed, the longest a Produce it wrote can stay in
//     a broker (a session of this process that left nothing unresolved hands
//     over at once).
//   - I3 Reconciliation reaches the decisions the pipeline reached: both
//     decide every source batch with twin.Decide, and the walk
//     (twin.Walker) starts from the producer state saved with the
//     checkpoint (CheckpointValue.Producers), so a duplicate the pipeline
//     skipped, an empty batch, a re-encoded batch or a salted PID is
//     matched as the pipeline handled it. The barrier then empties the
//     mirrored producer state: duplicate suppression starts afresh with
//     each session.
//   - I4 No append is written after the session's lease ended: the appender
//     sends every Produce with a context that ends with the lease
//     (statestore.Session.LeaseDeadline), which kgo checks right before it
//     writes, and a produce timeout within it.
//   - I5 A source partition is its topic ID: a checkpoint records it, and a
//     checkpoint of another topic ID (the topic was deleted and created
//     again) resumes the new partition from start_from, never from the old
//     offset (statestore.CheckpointValue.IsOf); a fetch that finds a new
//     topic ID removes the pair, and discovery adds the new topic as a new
//     partition.
//   - I6 A partition is removed only when the source confirms it gone: a
//     topic missing from a listing is asked about directly, and only
//     UNKNOWN_TOPIC_OR_PARTITION or another topic ID removes it.
//   - I7 Memory stays within max_buffered_bytes plus a stated constant: the
//     fetcher counts every fetch response whole while any batch of it is
//     held (fetcher.Pin), the pipeline releases each pin exactly once (the
//     pins of batches still queued when a session stops end with the
//     session's fetcher), and at most MaxReconciling partitions hold
//     destination tail chunks of up to 4 MiB each (32 MiB by default).
//
// # Goroutines
//
// Link.Run is the link's goroutine: it owns the lifecycle, the session and
// the pipeline, and steps the pipeline. Each session owns, in an errgroup
// that close cancels and waits for: fetcher.Run (which owns its own
// coordinator, broker loops and resolver), appender.Run (its resolver and
// senders), the committer (one state transaction at a time), and the
// workers the pipeline's actions start: a settle per partition of unknown
// outcome, a tail read and a source lookup per reconciling partition, one
// topic discovery or placement at a time. Workers hand their results to
// the link goroutine as inputs through a mailbox (internal/mailbox) and
// never touch the pipeline. Pause, Resume and Status are safe from any
// goroutine: commands go to Run over a channel, Status reads a snapshot
// under a mutex.
//
// Beside the lifecycle, Run starts and waits for the link's
// failover.Mover, which runs the group offset sync (with a groups block)
// and carries out failovers (package failover owns those goroutines), and,
// unless config_sync is off, the topic config sync's goroutine
// (configsync.go: one round at a time, only while the session here is the
// live one; its clients are its own and closed before it returns).
// Offset translation starts no goroutine: Link.Translate runs on the
// caller's, asks the link goroutine for a copy of the partition's Anchor
// (online.ask: a query its event loop answers between inputs) and reads
// both clusters through clients the session keeps for translations, so
// that they never queue behind the fetcher's long polls; with no session
// running it reads the state topic (translate.Offline).
package link
