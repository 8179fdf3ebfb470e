// Package harness drives the benchmark of mirrord against a record-level
// mirror (bench/peer): it builds the programs, starts a source and a
// destination kfake cluster each in its own process (bench/cmd/kfakeserver),
// loads the source once (bench/load), then mirrors each codec's topic with
// `mirrord run --config` and with bench/cmd/peermirror in turns, each run in
// its own process and into fresh destination topics, and reports wall time,
// throughput, CPU time per GB and peak RSS of the mirror processes from
// their rusage.
//
// A run starts when the mirror process is started and ends when the
// destination's end offsets equal the source's for every partition (the
// harness polls them); the process is then sent SIGTERM and waited for, so
// its CPU time includes its start and its clean stop.
//
// Goroutines: each child process has one waiter goroutine, which ends when
// the process does; Run stops every process it started before it returns.
package harness
