package failover

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the group offset sync's metrics, labelled by link. One set
// serves every link of a process; build it once per registry.
type Metrics struct {
	synced, translated, errors *prometheus.CounterVec
	age                        *prometheus.GaugeVec
}

// NewMetrics builds the metrics and registers them on reg (nil: not
// registered, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "mirrord", Name: name, Help: help}, []string{"link"})
	}
	m := &Metrics{
		synced:     counter("group_sync_groups_synced_total", "Consumer groups and share groups whose round of the group offset sync ended without an error (offsets committed, or nothing to move forward)."),
		translated: counter("group_sync_partitions_translated_total", "Committed offsets of source groups, and start offsets of source share groups, translated by the group offset sync."),
		errors:     counter("group_sync_translation_errors_total", "Group offset sync failures: offsets that could not be translated, and groups that could not be read or committed."),
		age: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "mirrord", Name: "group_sync_last_success_age_seconds",
			Help: "Seconds since the last round of the group offset sync in which every selected group synced without an error, refreshed every second (absent before the first)."}, []string{"link"}),
	}
	if reg != nil {
		reg.MustRegister(m.synced, m.translated, m.errors, m.age)
	}
	return m
}

// linkMetrics are one link's.
type linkMetrics struct {
	synced, translated, errors prometheus.Counter
	age                        *prometheus.GaugeVec
	link                       string
	lastSuccess                atomic.Int64 // unix nanoseconds; 0: none yet
}

func (m *Metrics) forLink(name string) *linkMetrics {
	return &linkMetrics{
		synced: m.synced.WithLabelValues(name), translated: m.translated.WithLabelValues(name), errors: m.errors.WithLabelValues(name),
		age: m.age, link: name,
	}
}

// refreshAge sets the age gauge from the last success, once there is one.
func (m *linkMetrics) refreshAge(now time.Time) {
	if last := m.lastSuccess.Load(); last != 0 {
		m.age.WithLabelValues(m.link).Set(now.Sub(time.Unix(0, last)).Seconds())
	}
}
