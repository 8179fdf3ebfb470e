// Package agent is the mirrord daemon: it runs every link of a validated
// configuration in one process and serves their metrics, health and admin
// API over HTTP on agent.listen.
//
// New builds one link.Link per link block, with the kgo options of its two
// clusters (internal/kafka/dial) plus the agent's own: franz-go client metrics
// (plugin/kprom) and a kgo logger. It registers the link, fetcher and
// appender metrics once on the registry and does no network I/O; it reads
// the TLS files the configuration names, so that a missing file is an
// error at start.
//
// # Goroutines
//
// Run owns every goroutine of the agent in one errgroup and waits for all of
// them before it returns: the HTTP server, one goroutine per link (link.Run,
// which owns the link's own goroutines), one start-up ping per cluster, the
// history sampler, and the stopper. The sampler (history.go) reads every
// link's Status once per HistoryConfig.Interval and pushes one sample per
// link into that link's ring; it stops when Run's context ends. When the context ends, the links stop first (in-flight
// appends drain and each link commits a final checkpoint), then the HTTP
// server shuts down, so that /v1/links and /metrics show the stop until it
// is done. A link drains for at most half of agent.shutdown_timeout and
// commits its final checkpoint within the other half.
//
// # Access and limits
//
// The HTTP handler is the routes behind a guard (admin.go) that applies
// agent.admin: with a token (token_env, or token_file read again when it
// changes), every request under /v1/ — every method, so endpoints added
// later are covered without a list to keep — and /metrics with
// protect_metrics need "Authorization: Bearer <token>": 401 with
// WWW-Authenticate: Bearer without one, 403 for a wrong one, compared in
// constant time. /healthz, /readyz and the status page at / stay open.
// Under /v1/ the path must be literal and canonical, at most
// MaxConcurrentAdminRequests are served at once (503 with Retry-After
// beyond), and a body is read in full up to MaxRequestBody (413 beyond)
// before the handler runs. The server has header, read, write and idle
// timeouts. With cert_file the listener serves TLS (the certificate read
// again when its files change), with client_ca_file it requires client
// certificates. Run warns at start about a listener that other hosts reach
// with insecure_no_auth, or with a token over plain HTTP.
//
// # Status page
//
// GET / serves a status page (ui.go, the files of ui/ embedded in the
// binary: HTML, CSS and ES modules, no build step, nothing from another
// host). It polls GET /v1/status (every link's status with its clusters'
// regions and the commands it accepts) and GET /v1/links/{name}/history,
// and sends POST /v1/links/{name}/pause|resume from its buttons. The
// history is bounded: a ring of HistoryConfig.Samples samples per link,
// SampleBytes each, allocated once (14,400 B per link by default).
//
// # Metrics
//
// Everything is registered on one registry under the namespace mirrord_:
// the link, fetcher and appender metrics (labelled by link),
// mirrord_build_info, mirrord_http_requests_refused_total{reason}, and the
// franz-go client metrics as
// mirrord_kafka_*{cluster, role}, one kprom.Metrics per cluster and role
// (source or destination) shared by every client of that role. kprom's
// buffered_* gauges read the first client of each role only; mirrord sends
// raw requests and buffers nothing in kgo, so they stay 0.
//
// # Limits
//
// Two links must not mirror into the same destination topic: each keeps its
// own producer state and checkpoints for the partitions it writes, so the
// two would see each other's batches as foreign. Whether two rename
// templates and topic selections can meet is not decided statically; the
// links' foreign-batch counters (mirrord_foreign_batches_total) show it.
package agent
