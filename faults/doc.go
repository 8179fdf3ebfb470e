// Package faults runs mirrord against broker faults on real Apache Kafka
// (issue 11): two clusters of three KRaft nodes each (replication factor 3,
// min.insync.replicas 2), the mirrord binary as a real process between
// them, a mixed load (idempotent, transactional with aborts, plain; several
// codecs) on the source, and faults on either side while the load runs:
// SIGKILLed and restarted brokers, rolling restarts with controlled
// shutdown, leader moves by preferred-leader election and by reassignment,
// a destination below min.insync.replicas, the state topic's leader killed,
// the agent SIGKILLed alone and together with a broker. At the end the
// destination is checked record by record against the source (package
// verify) and key by key: nothing missing, nothing twice, order kept per
// partition, nothing aborted.
//
// While the faults run, a Watcher reads the agent's status every 100 ms and
// measures, for every destination partition whose leader a fault moved, how
// long it stopped appending while the source had more to mirror: the stall
// figures of docs/testing.md (the README's "Under broker faults" sums them up).
//
// The package is used by its own test (the short form CI runs, with a TCP
// fault proxy between the agent and the brokers as well) and by the soak
// command (faults/cmd/soak: half an hour or more of random faults). Tests
// of the agents' own faults only (kill, stop, start: TestThreeAgents) also
// run on two kfake clusters of three brokers in the test's process
// (StartKfakeEnv), which the agents reach over TCP as they reach Kafka.
//
// # Invariants
//
//   - Every process it starts (six broker JVMs, the agent) is stopped by
//     Env.Close and Agent.Kill; the JVMs also die with the process that
//     started them (realkafka's Pdeathsig), the agent likewise.
//   - Every goroutine has an owner that waits for it: Load.Stop waits for the
//     producers, Watcher.Stop for the poller, Agent for its log reader.
//   - Checks judge against the source log itself (read_committed), not
//     against what producers were told: a producer may see an error for a
//     record the broker committed, and the mirror must then have it too.
//     What producers were told is checked as well: every acknowledged record
//     is in the source, and no record of an aborted transaction reaches the
//     destination.
package faults
