// Package barrier is the MIRROR_PID_RESET barrier of spec 000 as mirrord
// runs it against stock brokers (DESIGN §8), and the state records that
// carry a destination partition's producer-ID salts.
//
// When a link enters MIRRORING (after PREPARING, also after PAUSED or
// FAILED) no mirrored producer can be active at its destination partitions:
// the previous session is fenced and its lease waited out. Every negative
// (mapped) PID in those partitions' producer state is therefore stale. The
// barrier says so durably: the link's pipeline commits one Record per
// destination partition, together with the resume checkpoint, in one
// transaction of the link's state session; then it Applies the barrier to
// the partition's PSM (transform.PSM.ResetMirrored) and logs the count at
// INFO; only then is anything appended to the partition. A collision salt
// is committed (SaltRecord) before the batch it concerns is appended, and
// tombstoned (SaltTombstone) when the PSM expires it; a new session
// restores the salts of a replayed state topic (Salts), so that it maps
// every origin as the sessions before it did.
//
// Spec 000 also defines the barrier as a control batch in the data
// partition. Stock brokers refuse control batches from clients (Kafka's
// LogValidator: INVALID_RECORD; TestBrokerRefusesBarrierBatch), so mirrord
// writes the barrier to the state topic only.
//
// Invariants: a barrier is committed before it is applied, and applied
// before anything is appended to its partition; Apply removes producer
// entries and never salts.
//
// The package is pure: no I/O, no state, no goroutines. Its callers (the
// link's pipeline, its session's placement, offset translation) own the
// PSMs and the state session.
package barrier
