package fetcher

import "github.com/prometheus/client_golang/prometheus"

// Kinds of the fetch_errors_total counter: one per way a partition's fetch
// can fail. Leader and connection kinds are retried after a leader refresh;
// offset_out_of_range, corrupt, refused and topic_recreated can fail the
// partition.
const (
	KindNotLeader          = "not_leader"           // NOT_LEADER_OR_FOLLOWER
	KindFencedLeaderEpoch  = "fenced_leader_epoch"  // FENCED_LEADER_EPOCH
	KindUnknownLeaderEpoch = "unknown_leader_epoch" // UNKNOWN_LEADER_EPOCH
	KindLeaderNotAvailable = "leader_not_available" // LEADER_NOT_AVAILABLE
	KindUnknownTopic       = "unknown_topic"        // UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION, INCONSISTENT_TOPIC_ID
	KindReplicaNotAvail    = "replica_not_available"
	KindStorage            = "storage"    // KAFKA_STORAGE_ERROR
	KindConnection         = "connection" // the request failed: connection lost, timeout
	KindMetadata           = "metadata"   // the leader lookup or the log start/end lookup failed
	KindOutOfRange         = "offset_out_of_range"
	KindCorrupt            = "corrupt"         // a malformed batch or a CRC mismatch
	KindRefused            = "refused"         // a non-retriable broker error
	KindTopicRecreated     = "topic_recreated" // the topic ID changed
	KindOther              = "other"           // any other retriable error
)

var kinds = []string{
	KindNotLeader, KindFencedLeaderEpoch, KindUnknownLeaderEpoch, KindLeaderNotAvailable,
	KindUnknownTopic, KindReplicaNotAvail, KindStorage, KindConnection, KindMetadata,
	KindOutOfRange, KindCorrupt, KindRefused, KindTopicRecreated, KindOther,
}

// Metrics are the fetcher's Prometheus metrics, labelled by link. One Metrics
// serves every link of a process: build it once per registry.
type Metrics struct {
	requests *prometheus.CounterVec
	errors   *prometheus.CounterVec
	bytes    *prometheus.CounterVec
	aborted  *prometheus.CounterVec
	skipped  *prometheus.CounterVec
	buffered *prometheus.GaugeVec
	// collections counts the garbage collections the fetcher asked for.
	collections *prometheus.CounterVec
}

// NewMetrics builds the fetcher's metrics and registers them with reg (nil:
// not registered). It panics if reg already holds them, as
// prometheus.MustRegister does.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "mirrord",
			Name:      "fetch_requests_total",
			Help:      "Fetch requests sent to source partition leaders.",
		}, []string{"link"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "mirrord",
			Name:      "fetch_errors_total",
			Help:      "Failed partition fetches, by kind: not_leader, fenced_leader_epoch, unknown_leader_epoch, leader_not_available, unknown_topic, replica_not_available, storage, connection, metadata and other are retried; offset_out_of_range, corrupt, refused and topic_recreated may fail the partition.",
		}, []string{"link", "kind"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "mirrord",
			Name:      "fetched_bytes_total",
			Help:      "Bytes of committed data batches delivered by the fetcher.",
		}, []string{"link"}),
		aborted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "mirrord",
			Name:      "fetch_aborted_batches_total",
			Help:      "Batches of aborted transactions dropped by the fetcher.",
		}, []string{"link"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "mirrord",
			Name:      "fetch_skipped_records_total",
			Help:      "Records lost at the source and skipped under on_offset_out_of_range = \"earliest\".",
		}, []string{"link"}),
		buffered: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "mirrord",
			Name:      "fetch_buffered_bytes",
			Help:      "Bytes of fetched batches delivered (or queued for delivery) and not yet released by the consumer.",
		}, []string{"link"}),
		collections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "mirrord",
			Name:      "fetch_buffer_collections_total",
			Help:      "Garbage collections the fetcher ran because released fetch responses, not yet reclaimed, kept the next fetch out of max_buffered_bytes.",
		}, []string{"link"}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.errors, m.bytes, m.aborted, m.skipped, m.buffered, m.collections)
	}
	return m
}

// linkMetrics are Metrics curried with one link's label.
type linkMetrics struct {
	requests prometheus.Counter
	errors   map[string]prometheus.Counter
	bytes    prometheus.Counter
	aborted  prometheus.Counter
	skipped  prometheus.Counter
	buffered prometheus.Gauge

	collections prometheus.Counter
}

func (m *Metrics) forLink(link string) linkMetrics {
	lm := linkMetrics{
		requests: m.requests.WithLabelValues(link),
		errors:   make(map[string]prometheus.Counter, len(kinds)),
		bytes:    m.bytes.WithLabelValues(link),
		aborted:  m.aborted.WithLabelValues(link),
		skipped:  m.skipped.WithLabelValues(link),
		buffered: m.buffered.WithLabelValues(link),

		collections: m.collections.WithLabelValues(link),
	}
	for _, k := range kinds {
		lm.errors[k] = m.errors.WithLabelValues(link, k) // present at 0 from the start
	}
	return lm
}
