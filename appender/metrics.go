package appender

import "github.com/prometheus/client_golang/prometheus"

// Kinds of the append_errors_total counter: one per way an attempt to
// append a batch can fail.
const (
	KindRetriable      = "retriable"       // proven not appended; retried inside the appender
	KindUnknownOutcome = "unknown_outcome" // ErrUnknownOutcome
	KindCorrupt        = "corrupt"         // ErrCorrupt
	KindTooLarge       = "too_large"       // ErrTooLarge
	KindLeaseExpired   = "lease_expired"   // ErrLeaseExpired
	KindFatal          = "fatal"           // ErrFatal
	KindStopped        = "stopped"         // ErrStopped
	// KindTxnAborted: transactional delivery, an answer that ends the
	// transaction (the session fenced, the transaction timed out, a
	// sequence out of order with nothing earlier in flight).
	KindTxnAborted = "transaction_aborted"
)

var kinds = []string{KindRetriable, KindUnknownOutcome, KindCorrupt, KindTooLarge, KindLeaseExpired, KindFatal, KindStopped, KindTxnAborted}

// Metrics are the appender's Prometheus metrics, labelled by link. One
// Metrics serves every link of a process: build it once per registry.
type Metrics struct {
	latency  *prometheus.HistogramVec
	requests *prometheus.CounterVec
	batches  *prometheus.HistogramVec
	errors   *prometheus.CounterVec
}

// NewMetrics builds the appender's metrics and registers them with reg
// (nil: not registered). It panics if reg already holds them, as
// prometheus.MustRegister does.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "mirrord",
			Name:      "append_latency_seconds",
			Help:      "Time from Submit to the destination broker's acks=all acknowledgement of an appended batch.",
			Buckets:   prometheus.ExponentialBuckets(0.001, 2, 16), // 1ms to 33s
		}, []string{"link"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "mirrord",
			Name:      "produce_requests_total",
			Help:      "Produce requests sent to destination partition leaders.",
		}, []string{"link"}),
		batches: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "mirrord",
			Name:      "produce_request_batches",
			Help:      "Mirrored batches (one per partition) in each Produce request sent: how full requests are. State-topic batches are not counted.",
			Buckets:   prometheus.ExponentialBuckets(1, 2, 11), // 1 to 1024
		}, []string{"link"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "mirrord",
			Name:      "append_errors_total",
			Help:      "Failed attempts to append a batch, by kind: retriable (retried), unknown_outcome, corrupt, too_large, lease_expired, fatal, stopped, transaction_aborted (transactional delivery).",
		}, []string{"link", "kind"}),
	}
	if reg != nil {
		reg.MustRegister(m.latency, m.requests, m.batches, m.errors)
	}
	return m
}

// linkMetrics are Metrics curried with one link's label.
type linkMetrics struct {
	latency  prometheus.Observer
	requests prometheus.Counter
	batches  prometheus.Observer
	errors   map[string]prometheus.Counter
}

func (m *Metrics) forLink(link string) linkMetrics {
	lm := linkMetrics{
		latency:  m.latency.WithLabelValues(link),
		requests: m.requests.WithLabelValues(link),
		batches:  m.batches.WithLabelValues(link),
		errors:   make(map[string]prometheus.Counter, len(kinds)),
	}
	for _, k := range kinds {
		lm.errors[k] = m.errors.WithLabelValues(link, k) // present at 0 from the start
	}
	return lm
}
