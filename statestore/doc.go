// Package statestore keeps mirrord's durable state in a compacted topic on
// the destination cluster (DESIGN §7–9): per link a link record (state,
// session epoch, lease), per destination partition a checkpoint, the latest
// MIRROR_PID_RESET barrier and the collision salts of spec 000, and per
// destination topic a link created a record that says so (config sync
// manages those topics' settings).
//
// Records use Kafka's coordinator-record encoding (record.go): the key is an
// int16 record type and non-flexible fields, the value an int16 version and
// flexible fields (compact strings, a tagged-field section). A nil value is
// a tombstone. Records of an unknown type or version are skipped with a
// warning, so that an older agent can replay a topic a newer one wrote; a
// record that does not decode stops the replay with its partition and
// offset.
//
// A Store creates the topic (Ensure), reads it back (Scan, Replay into a
// View) and begins sessions. A Session is a transactional producer with
// transactional.id mirrord.<link>; beginning one fences the previous
// session of the link (spec 001), and each Commit is one transaction that
// also renews the session's lease.
//
// Invariants:
//   - The topic is compacted and nothing else: retention must never remove
//     the only copy of a value still in use (Ensure refuses other policies).
//   - Every write is a transaction that carries the link record, so a
//     fenced session cannot write anything, and readers (read_committed)
//     never see half of a state change.
//   - A session that has been fenced or has failed never writes again; its
//     LeaseValid is false from that moment, and from the moment it starts
//     to commit STOPPED.
//   - A session's lease counts from the moment its last successful commit
//     was sent, on the monotonic clock; the record says the same instant
//     plus the session timeout in wall-clock milliseconds.
//
// Goroutines: the package starts none of its own. The kgo clients it builds
// run theirs and stop them in Close: the Store's read client is closed by
// Store.Close, each session's client by Session.Close, both called by the
// owner of the Store or Session (the link). A Store is safe for concurrent
// use; a Session's Commit and Close belong to one goroutine, while
// LeaseValid may be called from any.
package statestore
