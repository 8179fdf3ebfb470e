// Package demo is `mirrord demo`: the whole agent against two embedded Kafka
// clusters, under a built-in load, ending with a proof that the destination
// holds exactly the committed source data.
//
// A run: two kfake clusters of three brokers each, with random UUID cluster
// IDs of distinct regions (StartClusters); the source topics of Topics,
// with different partition counts; an agent built from config.Default()
// with the clusters' addresses, the chosen listener and log level (the
// configuration is validated as a file's would be), running one link that
// mirrors every topic; the load of Producers — idempotent producers over
// every codec, transactional producers whose transactions of TxnRecords
// records span several partitions and topics with one in AbortEvery
// aborted, and a plain (non-idempotent) producer — paced to Config.Rate
// until Config.Duration passes, Config.Records are produced or Stop is
// called; a progress line per Config.ProgressInterval (records produced,
// mirrored and their rate from the link's metrics, lag and state from the
// link's Status); then the wait until the link's position in every source
// partition reaches the partition's end offset; then the agent stops (a
// clean stop with its final checkpoint) and package verify compares every
// topic with its mirror, with the link's collision salts read from its
// state topic. The figures and the verdict are printed, and the run is
// Verified only if verify found no difference, nothing behind, every
// partition, and exactly as many records as the load committed.
//
// Goroutines: Run starts the agent's Run and the load's producers (one
// goroutine each, in an errgroup of the load) and waits for all of them
// before it returns, on every path.
package demo
