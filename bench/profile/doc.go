// Package profile runs mirrord's agent in the benchmark's own process, so
// that a CPU profile shows where mirrord spends its time while the two
// kfake clusters run in their own processes and stay out of the profile:
//
//	go test -run='^$' -bench=MirrordRun -benchtime=3x ./bench/profile \
//	    -args -profile.size=256MiB -profile.cpuprofile=/tmp/mirrord.cpu
//	go tool pprof -top /tmp/mirrord.cpu
//
// -profile.delivery=transactional profiles a transactional link (its
// progress read from the checkpoints it commits with the data);
// -profile.partitions=1000 the many-partitions case, -profile.load-batch-
// bytes=4096 -profile.load-linger=-1ns the small-batches one.
//
// -profile.memprofile writes the heap profile of the collection that left
// the most live heap during the mirroring (go tool pprof -sample_index=
// inuse_space); run it with GOMEMLIMIT set as `mirrord run` would.
//
// The profile covers only the mirroring (not the build, the clusters'
// start or the load), which is why the package has its own flag instead of
// go test's -cpuprofile. The agent is built from the same generated HCL
// that `mirrord run --config` reads in the benchmark (bench/harness).
//
// Goroutines: the benchmark runs the agent's Run on one goroutine it
// starts and waits for before it checks the result; the clusters are
// other processes (bench/harness).
package profile
