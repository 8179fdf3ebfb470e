package link

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed83556561/mirrord/failover"
)

// Metrics are a link's metrics, all labelled by link: a counter for every
// entry of the counter table (counters.go) that has one, and the gauges.
// One set serves every link of a process; build it once per registry.
type Metrics struct {
	counters                    []*prometheus.CounterVec // by Counter; nil: no metric of its own
	state                       *prometheus.GaugeVec
	errors                      *prometheus.CounterVec
	lag, lagSeconds, partitions *prometheus.GaugeVec
	partitionLag                *prometheus.GaugeVec
	joinSeconds                 *prometheus.CounterVec
	joinSources                 *prometheus.HistogramVec
	groups                      *failover.Metrics
}

// MaxPartitionLagSeries bounds mirrord_partition_lag_records: a link with
// more destination partitions than this exports only its per-link lag, so
// that a link over thousands of partitions cannot flood Prometheus.
const MaxPartitionLagSeries = 256

// NewMetrics builds the metrics and registers them on reg (nil: not
// registered, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "mirrord", Name: name, Help: help}, append([]string{"link"}, labels...))
	}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "mirrord", Name: name, Help: help}, append([]string{"link"}, labels...))
	}
	m := &Metrics{
		counters: make([]*prometheus.CounterVec, len(counterTable)),
		state:    gauge("link_state", "1 for the link's current lifecycle state, 0 for the others.", "state"),
		errors:   counter("errors_total", "Errors that failed the link (fenced, lease_expired, transaction_timeout, offset_out_of_range, corrupt, too_large, authorization, timeout, other) or a topic discovery (discovery, retried at the next interval), by kind.", "kind"),
		lag:      gauge("lag_records", "Source high watermark minus the next source offset to mirror, summed over the link's partitions."),
		lagSeconds: gauge("lag_seconds",
			"How far behind the link is in time, its most lagging partition's: 0 when caught up, else the age of the oldest record fetched and not yet mirrored (before it is fetched, of the last record mirrored, an upper bound), by the source records' timestamps."),
		partitions:   gauge("link_partitions", "Destination partitions the link mirrors into."),
		partitionLag: gauge("partition_lag_records", "Source high watermark minus the next offset to mirror, per partition; only for links with at most 256 partitions.", "topic", "partition"),
		joinSeconds:  counter("coalesce_seconds_total", "Time spent joining runs of small batches into one (coalesce_bytes), by codec: re-framing the records of uncompressed batches, decompressing and compressing again compressed ones. It runs on one goroutine per append (transactional delivery) or on one of at most GOMAXPROCS join workers of the session (preserve delivery), so it is CPU time.", "codec"),
		joinSources: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "mirrord", Name: "coalesced_source_batches",
			Help:    "Source batches per destination batch that joined a run (coalesce_bytes; in preserve delivery one producer's consecutive batches); batches appended alone are not observed.",
			Buckets: []float64{2, 4, 8, 16, 32, 64, 128, 256, 512}}, []string{"link"}),
		groups: failover.NewMetrics(reg),
	}
	collectors := []prometheus.Collector{m.state, m.errors, m.lag, m.lagSeconds, m.partitions, m.partitionLag, m.joinSeconds, m.joinSources}
	for i, c := range counterTable {
		m.counters[i] = counter(c.Name+"_total", c.Help)
		collectors = append(collectors, m.counters[i])
	}
	if reg != nil {
		reg.MustRegister(collectors...)
	}
	return m
}

// linkMetrics are the metrics of one link, with the label bound, and its
// running totals for Status.
type linkMetrics struct {
	m    *Metrics
	name string

	counters                    []prometheus.Counter // by Counter; nil: no metric of its own
	totals                      *totals
	lag, lagSeconds, partitions prometheus.Gauge
}

func (m *Metrics) forLink(name string) *linkMetrics {
	lm := &linkMetrics{
		m: m, name: name,
		counters: make([]prometheus.Counter, len(counterTable)),
		totals:   newTotals(),
		lag:      m.lag.WithLabelValues(name), lagSeconds: m.lagSeconds.WithLabelValues(name),
		partitions: m.partitions.WithLabelValues(name),
	}
	for i, v := range m.counters {
		if v != nil {
			lm.counters[i] = v.WithLabelValues(name)
		}
	}
	lm.setState(Stopped)
	return lm
}

// add adds d to counter c: to the link's totals and to its metric.
func (lm *linkMetrics) add(c Counter, d int64) {
	if d == 0 {
		return
	}
	lm.totals.add(c, d)
	if pc := lm.counters[c]; pc != nil {
		pc.Add(float64(d))
	}
}

func (lm *linkMetrics) setState(s State) {
	for _, st := range States {
		v := 0.0
		if st == s {
			v = 1
		}
		lm.m.state.WithLabelValues(lm.name, st.String()).Set(v)
	}
}

func (lm *linkMetrics) error(kind string) { lm.m.errors.WithLabelValues(lm.name, kind).Inc() }

func (lm *linkMetrics) partitionLag(topic string, partition int32, lag int64) {
	lm.m.partitionLag.WithLabelValues(lm.name, topic, strconv.Itoa(int(partition))).Set(float64(lag))
}

func (lm *linkMetrics) dropPartitionLag(topic string, partition int32) {
	lm.m.partitionLag.DeleteLabelValues(lm.name, topic, strconv.Itoa(int(partition)))
}

// joined records one join of batches of codec c that took d, and, when the
// joined batch was appended (merged), the n source batches it holds
// (appendRun, on an append worker).
func (lm *linkMetrics) joined(d time.Duration, c int8, n int, merged bool) {
	lm.joinTime(d, c)
	if merged {
		lm.joinedRun(n)
	}
}

// joinedRun records a joined batch of n source batches that was appended
// (preserve delivery: the pipeline's, which Session.report hands over).
func (lm *linkMetrics) joinedRun(n int) {
	lm.m.joinSources.WithLabelValues(lm.name).Observe(float64(n))
}

// joinTime records one join of batches of codec c that took d (preserve
// delivery: a session's join worker, session.join).
func (lm *linkMetrics) joinTime(d time.Duration, c int8) {
	name := "unknown"
	if c >= 0 && int(c) < len(codecLabels) {
		name = codecLabels[c]
	}
	lm.m.joinSeconds.WithLabelValues(lm.name, name).Add(d.Seconds())
}

// codecLabels name the batch codecs by their attribute value.
var codecLabels = []string{"none", "gzip", "snappy", "lz4", "zstd"}

// counters reads the link's totals back, for Status.
func (lm *linkMetrics) counts() Counts { return lm.totals.snapshot() }
