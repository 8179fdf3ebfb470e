// Package harness drives the benchmark of mirrord against other mirrors: a
// record-level mirror written with kgo (bench/peer) and, against real Kafka,
// MirrorMaker 2 in dedicated mode with and without exactly-once. It builds
// the programs, starts a source and a destination cluster each in its own
// process — kfake (bench/cmd/kfakeserver, the default backend) or a
// one-broker Apache Kafka cluster (internal/testkit/realkafka, the kafka
// backend) — loads the source once (bench/load), then mirrors each codec's
// topic with every side in turns, each run in its own process and into
// fresh destination topics, and reports wall time, throughput, CPU time per
// GB and peak RSS of the mirror processes, for the whole run and for its
// steady part (without the mirror's start). The latency profile instead
// writes at a steady rate into a fresh topic per run and reports p50 and
// p99 from the source append to visibility at the destination.
//
// A run starts when the mirror process is started and ends when the
// destination holds every source record: its end offsets equal the
// source's for every partition, or, for MirrorMaker with exactly-once
// (whose destination holds transaction markers), its committed Connect
// offsets cover every record. The process is then sent SIGTERM and waited
// for, so its rusage CPU time includes its start and its clean stop.
//
// Goroutines: each child process has one waiter goroutine and one RSS
// sampler, which end when the process does; a latency run has one producer
// goroutine, which ends before the run returns. Run stops every process it
// started before it returns; a child also gets SIGKILL if the harness dies
// (Pdeathsig), and the brokers are the realkafka launcher's, which has its
// own guarantees.
package harness
