// Package faultproxy puts faults between Kafka clients and a cluster, for
// tests: a TCP proxy with one listener per broker that understands enough of
// the Kafka protocol to keep clients on the proxy and to let a test act on
// single requests and responses. It needs no cooperation from the brokers,
// so the same test runs against kfake and Apache Kafka.
//
// # What it does
//
// Start opens one listener per broker on a free 127.0.0.1 port. Each
// accepted connection is paired with one upstream connection to that
// broker, and frames (a 4-byte size, then the payload) are forwarded one at
// a time in each direction. The proxy reads request headers (v1, or v2 for
// flexible versions) and matches each response to its request: Kafka answers
// the requests of one connection in order, so the proxy queues what it
// forwarded and checks the correlation ID of every response against the head
// of the queue (a Produce with acks=0 has no response and is not queued).
//
// Endpoint rewriting keeps a client that bootstraps through the proxy going
// through it: the broker endpoints in Metadata, FindCoordinator (v0-v3
// single coordinator and v4+ Coordinators), DescribeCluster (broker
// endpoints; controller endpoints are left alone), and the KIP-951 leader
// hints of Produce (v10+) and Fetch (v16+) responses and of ShareFetch and
// ShareAcknowledge are decoded with kmsg and re-encoded with the proxy's
// address for each node ID. Every other response, and every response in
// which nothing changes, passes byte for byte. A node ID the proxy has no
// listener for is left as the broker said (and logged once): a client may
// then reach that broker directly.
//
// Faults, per node, switchable at any time from any goroutine: Stall and
// Resume (nothing is forwarded in either direction, on existing or new
// connections — a new one is still accepted and dialed — and nothing is
// lost: a middlebox that holds what it took), Cut (a Stall as a network
// partition: what a client connection sent during it is dropped if the
// client resets the connection, as the client's kernel would drop it;
// after a FIN it goes on at Resume), Drop (close every connection with a
// FIN), Reset (close with an RST), Refuse (accept new connections and close
// them at once), and Intercept: one function that sees every request before
// it is forwarded and every response before it is sent back, and answers
// Pass, DropConnection, ResetConnection, Replace(body) or Delay(d).
// Requests counts what each node was asked, per API key, and Connections
// what each listener accepted. Brokers reads the node map Start takes from a
// running cluster.
//
// # Invariants
//
//   - Every goroutine has an owner that waits for it. The Proxy owns one
//     accept goroutine per node and one goroutine per accepted connection,
//     which dials the broker, forwards requests itself and owns the one
//     goroutine that reads them from the client and the one that forwards
//     responses, and waits for both before it returns.
//     Close (also run by t.Cleanup) closes every listener and connection,
//     wakes every stalled or delayed forwarder and waits for all of them.
//   - Buffering per connection is bounded: the response direction holds at
//     most one frame (of at most MaxFrameBytes) and reads the next only
//     after it has written this one; the request direction reads at most
//     maxPending frames ahead of the one it forwards (so that it sees a
//     client's reset during a Cut). A stalled or delayed direction then
//     stops reading its source and TCP backpressure holds the bytes, in the
//     kernel's buffers and the peer's. The bodies of at most maxPending unanswered requests
//     are kept for the response's Frame; when that many are unanswered the
//     request direction waits, as a broker that reads one request at a time
//     would make it.
//   - A connection's two halves close together: when either side ends, or a
//     fault closes it, both the client's and the broker's sockets close.
//   - A fault takes effect at frame boundaries: a frame whose write had
//     begun when Stall was called is finished, the next one waits.
//   - A frame the proxy cannot parse (a size above MaxFrameBytes — a TLS
//     client, say — a truncated header, a response with no request or the
//     wrong correlation ID, a raw SASL exchange, a response the rewriting
//     cannot decode) fails the test with t.Errorf and closes the connection:
//     the proxy would otherwise forward what it does not understand.
//
// # Limits
//
// Plain TCP only: no TLS on either side. SASL over plaintext works, because
// SASL since KIP-152 travels in ordinary SaslHandshake v1 and
// SaslAuthenticate frames (kgo always uses them against brokers that
// support SaslHandshake v1: Kafka 1.0 and later, and kfake); SaslHandshake
// v0, after which raw SASL tokens without Kafka headers follow, is refused.
// Nodes are fixed at Start; brokers added to the cluster later are not
// proxied. The Interceptor runs on the connection's forwarding goroutine,
// concurrently for different connections; it must not keep or modify the
// slices of the Frame it is given, and must not call Close (which waits for
// it). The other faults may be switched from inside it.
package faultproxy
