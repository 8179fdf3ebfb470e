// Package appender is one link's writer to the destination cluster: it
// appends already rewritten record batches (DESIGN §5: base offset 0,
// producer ID mapped and negative, transactional bit cleared, CRC valid) to
// the leaders of their destination partitions with raw Produce requests
// (acks=all), and reports one Result per batch.
//
// # Invariants
//
//   - A partition has at most one batch in the appender, from Submit until
//     its Result is delivered; Submit refuses a second one (ErrBusy). So a
//     partition is in at most one Produce request at a time, and the order
//     of a partition's batches is the order the caller submits them in.
//   - A Produce request holds at most one batch per partition (a broker rule
//     for Produce v3+) and as many partitions led by the same broker as fit
//     in MaxRequestBytes and MaxRequestBatches; it always holds at least one
//     batch. At most MaxInflightPerBroker requests are in flight to one
//     broker.
//   - A batch is sent again only after an answer that proves the broker did
//     not append it (classify.go explains each case, with the Apache Kafka
//     code it relies on). Destination batches carry a negative producer ID,
//     which brokers treat as a plain non-idempotent batch: they do not
//     deduplicate a retry, so a retry after a possible append would
//     duplicate data. Every answer that leaves the append possible is
//     ErrUnknownOutcome, and the caller settles it by reconciliation
//     (DESIGN §6) before it submits anything for that partition again.
//   - The session's lease travels with every request (DESIGN §12 I4):
//     Deps.Lease is asked immediately before a request is built; with less
//     than minLeaseLeft of the lease left the request is not sent and its
//     batches fail with ErrLeaseExpired; otherwise it is sent with a
//     context whose deadline is the lease's end, which kgo checks right
//     before it writes the request, and with a produce timeout
//     (TimeoutMillis) of at most three quarters of the lease left, so that
//     the broker answers before the context ends. No request is written
//     after the lease ended, and none waits in a broker for replicas past
//     it.
//   - Every accepted batch gets exactly one Result, once Run runs (Submit
//     may come first; the batch waits). Submissions and results travel in
//     mailboxes (internal/mailbox) that hold at most one entry per
//     destination partition, since a partition has at most one batch in
//     the appender, so the appender never blocks on a slow receiver and Run
//     can deliver every result before it returns.
//
// # acks
//
// kgo overwrites the Acks of every raw ProduceRequest with the client's
// configured acks (kgo's broker.go: "r.Acks = b.cl.cfg.acks.val"). New reads
// the client's RequiredAcks option and refuses a client that is not
// configured with kgo's default, AllISRAcks (acks=all).
//
// # Goroutines
//
// New starts nothing. Run is the appender's one owner goroutine: it keeps
// every batch's state (waiting for a leader, backing off, queued for a
// broker, in flight) and is the only goroutine that puts Results. Run
// starts, and waits for before it returns:
//
//   - at most one resolver goroutine at a time, which looks up the leaders
//     of the batches waiting for one through Deps.Leaders (a cache miss is a
//     Metadata request, so it is kept off Run's goroutine). A batch of a
//     partition whose leader a lookup found less than a second ago skips
//     it and goes straight to that leader's queue: a link submits a
//     partition's next batch as soon as the previous one is answered, and
//     the resolver's round trip was a large part of that turnaround for
//     small batches (and split a burst of submissions over several
//     requests). Every invalidation of the partition's leader (an answer
//     that says it moved, a failed lookup) ends the shortcut at once;
//   - one sender goroutine per Produce request in flight (at most
//     MaxInflightPerBroker per broker), which asks Lease, sends the request
//     through kgo's connection to that broker, classifies every partition's
//     answer and hands the outcome back to Run.
//
// When Run's context is canceled, requests in flight are abandoned (kgo
// fails them with the context's error): their batches are reported as
// ErrUnknownOutcome, unless the answer arrived first. Batches that were not
// sent, or whose every attempt was proven not appended, are reported as
// ErrStopped. Run delivers all these results, closes Stopped and returns nil
// once every goroutine it started has exited. Submit after that returns
// ErrClosed.
//
// Submit and Results may be called from any goroutine.
//
// # Transactional delivery
//
// txn.go and txnappend.go are the writer of transactional delivery (DESIGN
// §14): Txn is a session's transactional producer (InitProducerId, which
// fences the previous session; AddPartitionsToTxn under transaction.version
// 1; EndTxn, which under version 2 bumps the epoch; each partition's
// sequences), and Txn.Append stamps a batch with the session's producer
// (transform.Stamp) and appends it, sending the same bytes again after any
// answer that leaves the outcome open, since the broker's sequence check
// turns a repeat into the first append's answer. txnlane.go shares each
// broker's Produce requests among the partitions it leads, as Run does for
// preserve delivery: at most DefaultMaxInflightPerBroker requests of a
// broker are unanswered, and the appends that come meanwhile go together in
// the next. They start no goroutines: Append runs on its caller's goroutine
// (calls for different partitions, and for the same one, may run at once;
// the append that opens a broker's next request sends it for all that
// joined it), the transaction calls on the one goroutine that runs the
// session's transactions (link's txnSession).
package appender
