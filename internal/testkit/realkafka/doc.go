// Package realkafka starts real Apache Kafka clusters for mirrord's second
// test tier and the bench (DESIGN §11): KRaft nodes in combined mode
// (process.roles=broker,controller), one JVM each, from the jars Maven
// Central serves — no distribution tarball, no Docker.
//
// # Switching the tier on
//
// The tier runs only when the environment asks for it:
//
//	MIRRORD_TEST_KAFKA=        (unset or empty) kfake only; real-tier tests skip with one line
//	MIRRORD_TEST_KAFKA=all     every pinned version (Kafka4, Kafka3)
//	MIRRORD_TEST_KAFKA=4.4.0   a comma-separated list of versions
//
// A test reads the selection with TestVersions (or Versions) and runs one
// subtest per version. It needs java (17 or later) and, until the jars of
// a version are cached, mvn on PATH: without them a test skips with one line
// that says what to install, or fails under CI=true.
//
// MIRRORD_KAFKA_CACHE moves the cache, by default $XDG_CACHE_HOME/mirrord or
// ~/.cache/mirrord, outside any repository. It holds maven/<name>-<hash>/
// (a resolved jar set: the throwaway pom, libs/, resolve.log and a
// .complete marker), cds/<version>-<hash>/ (the brokers' class-data
// archive, made by the first start of a version on a JDK build; see
// archive.go), javaclient/<hash>/ (the built Java client) and run/ (one pid
// file per running JVM).
//
// # Concepts
//
//   - Resolve turns a Spec (Maven artifacts) into a directory of jars, once
//     per machine: a file lock serialises test processes resolving the same
//     set and a marker file makes the next call run no Maven at all.
//     BrokerSpec is what a broker needs: kafka_2.13 with its runtime
//     dependencies plus the log4j2 backend and the SLF4J binding that
//     matches the slf4j-api the release brought (log4j-slf4j-impl for 1.x,
//     log4j-slf4j2-impl for 2.x). Spec.With adds artifacts (connect-mirror
//     for MirrorMaker 2). Cached is the same once-per-machine directory for
//     other builds (the javaclient package uses it).
//   - Start formats and starts a Cluster of 1, 3 or 5 nodes on free
//     loopback ports with the caller's cluster ID and static
//     controller.quorum.voters, and returns when a Metadata request to every
//     node lists every broker. Every node has a CONTROLLER and an INTERNAL
//     (inter-broker) listener, both PLAINTEXT, so brokers need no
//     credentials, plus the Config's client listeners: PLAINTEXT, SSL (with
//     certificates from NewCerts, as PEM keystores), SASL_PLAINTEXT and
//     SASL_SSL with PLAIN, SCRAM-SHA-256/512 or OAUTHBEARER. SCRAM users
//     are created by the test with kadm's AlterUserSCRAMs. Config.Advertise
//     chooses each node's advertised address per listener (a TCP proxy for
//     fault tests); Config.BrokerProps adds anything else (an authorizer
//     with super.users=User:ANONYMOUS, which is the principal of the
//     PLAINTEXT CONTROLLER and INTERNAL listeners).
//   - Cluster.Kill (SIGKILL), Stop (SIGTERM: controlled shutdown, bounded)
//     and Start (same directories and ports) act on one node; Close kills
//     every node and removes the directory the launcher made.
//   - ForTest starts a cluster for one test and keeps its directory, with
//     every node's log, when the test failed; Shared and Main start a
//     cluster once per test package and stop it after the tests.
//
// # Invariants
//
//   - Every JVM is the leader of its own process group and is signalled as
//     a group.
//   - No JVM outlives the process that started it for long: it is started
//     with Pdeathsig=SIGKILL from a goroutine locked to its OS thread for the
//     JVM's whole life (Pdeathsig fires when the forking thread exits,
//     golang/go#27505), so a test binary killed by go test -timeout takes
//     its brokers along; and each JVM has a pid file in run/ naming its
//     owner (pid and start time). Every Start first sweeps run/: a file
//     whose owner is gone has its JVM's process group killed, after
//     /proc/<pid>/cmdline confirms it is kafka.Kafka of that node directory.
//   - A node's stdout and stderr go to node-<id>/server.log through the
//     log4j2 configuration the launcher writes (node-<id>/log4j2.xml).
//
// # Goroutines
//
// Each running JVM has one goroutine, started by Start (or Cluster.Start)
// and owned by the Cluster: it starts the process, waits for it, removes
// its pid file and closes the node's done channel. Kill, Stop and Close
// wait for that channel, so when they return the goroutine is gone. A
// Cluster's mutable state (which process each node runs, closed, keep) is
// guarded by a mutex; its methods may be called from any goroutine.
package realkafka
