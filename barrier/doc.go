// Package barrier is the MIRROR_PID_RESET barrier of spec 000 as mirrord
// runs it against stock brokers (DESIGN §8).
//
// When a link enters MIRRORING (after PREPARING, also after PAUSED or
// FAILED) no mirrored producer can be active at its destination partitions:
// the previous session is fenced and its lease waited out. Every negative
// (mapped) PID in those partitions' producer state is therefore stale. The
// barrier says so durably: Emit commits one MirrorPidReset state record per
// destination partition, together with the resume checkpoints, in one
// transaction of the link's state session; then Apply drops the negative
// PIDs from each partition's PSM (transform.PSM.ResetMirrored) and logs the
// count at INFO; only then may the partition's appender start. Replay
// applies barriers and collision salts from a replayed state topic in log
// order, so that a restarted agent's producer state equals the live one's.
//
// The spec also defines the barrier as a control batch in the data
// partition. Stock brokers refuse control batches from clients
// (INVALID_RECORD), so mirrord never sends one, but EncodeBatch and
// DecodeBatch define that wire form exactly, with the state record's value
// as the control record's value.
//
// Invariants: a barrier is committed before it is applied, and applied
// before anything is appended to its partition; Apply removes producer
// entries and never salts; the barrier's value bytes are the same in the
// state topic and in the control batch (one codec, package statestore).
//
// The package starts no goroutines and holds no state. Emit blocks on the
// state transaction; Apply and Replay run on the goroutine that owns the
// PSMs (the link's).
package barrier
