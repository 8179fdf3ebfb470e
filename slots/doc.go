// Package slots spreads a link's source partitions over slots, and slots
// over the agents that run the link, on Kafka's own group protocol (DESIGN
// §15, issue 24).
//
// # Concept
//
// A slot is a share of a link's partitions that one agent mirrors at a
// time, in a session of its own. Of gives a partition's slot: a rule of the
// topic's name, the partition number and the number of slots only, so a
// partition keeps its slot as topics grow and new topics appear (only a
// change of the number of slots moves partitions).
//
// A Member is one agent's membership: a Kafka consumer group (kgo,
// cooperative-sticky) on a slots topic with one partition per slot, on the
// cluster that holds the link's state. The partitions the group assigns the
// member are the slots it owns. Nothing is ever written to or committed on
// that topic: it exists for its partition count. The Handler hears every
// change: Assigned (start these slots), Revoked (a rebalance moves them:
// stop them cleanly, and return when stopped, so that the next owner finds
// a final checkpoint and need not wait out a lease) and Lost (the
// membership ended, the coordinator may already have given them to another
// agent: stop at once).
//
// # Invariants
//
//   - A revoked slot is stopped before the member's rebalance completes:
//     Revoked runs inside kgo's revoke callback, and the cooperative
//     protocol hands a revoked partition to another member only in a
//     rebalance after the one in which it was revoked.
//   - A member that cannot reach the group coordinator gives its slots up
//     (Lost) before the coordinator expires its session: a watchdog calls
//     them lost when no Heartbeat, JoinGroup or SyncGroup was answered
//     for half the session timeout (measured from when the last answered
//     one was written), and the member joins again with a new client.
//     kgo alone did not (a member cut off kept its slots for 40 s after
//     the coordinator had given them to others, in 1 of 6 runs of
//     TestMembers). Lost does not prove that nothing more was written:
//     the session's fencing (InitProducerId) and, in preserve delivery,
//     its lease do.
//   - The watchdog errs on the side of giving up: a JoinGroup that waits
//     longer than half the session timeout while the member owns slots (a
//     rebalance held up by a member that stopped answering) makes it give
//     its slots up and join again, a pause of those slots, never two
//     owners.
//   - Revoked and Lost are never called concurrently with each other or
//     with Assigned (kgo serialises its callbacks).
//
// # Goroutines
//
// A Member owns its kgo client (whose goroutines run the callbacks) and one
// goroutine that polls it and drains what it returns (errors are logged;
// the topic never holds records). Leave revokes every owned slot, leaves
// the group, closes the client and waits for that goroutine.
package slots
