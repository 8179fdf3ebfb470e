package link

import (
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/seed83556561/mirrord/failover"
)

// Metrics are the link pipeline's metrics, all labelled by link. One set
// serves every link of a process; build it once per registry.
type Metrics struct {
	records, bytes, batches, reencoded   *prometheus.CounterVec
	state                                *prometheus.GaugeVec
	collisions, unresolvable             *prometheus.CounterVec
	barriers, duplicates, gaps, lowEpoch *prometheus.CounterVec
	fenced, errors, foreign, reconciled  *prometheus.CounterVec
	unknown, refetches, checkpoints      *prometheus.CounterVec
	commitRetries                        *prometheus.CounterVec
	expired, saltsExpired                *prometheus.CounterVec
	destinationGaps, skipped, removed    *prometheus.CounterVec
	lag, lagSeconds, partitions          *prometheus.GaugeVec
	partitionLag                         *prometheus.GaugeVec
	groups                               *failover.Metrics
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
		records:      counter("records_mirrored_total", "Records appended to the destination (counted from batch headers; records are not decoded)."),
		bytes:        counter("bytes_mirrored_total", "Bytes of record batches appended to the destination."),
		batches:      counter("batches_mirrored_total", "Record batches appended to the destination."),
		reencoded:    counter("batches_reencoded_total", "Batches with offset gaps (compacted at the source) that were decompressed and re-encoded densely: the one slow path."),
		state:        gauge("link_state", "1 for the link's current lifecycle state, 0 for the others.", "state"),
		collisions:   counter("collisions_resolved_total", "Producer-ID collisions resolved with a salt committed to the state topic."),
		unresolvable: counter("collisions_unresolvable_total", "Batches appended under a mapped PID that another origin holds, because both carry forwarded negative PIDs."),
		barriers:     counter("barriers_emitted_total", "MIRROR_PID_RESET barrier records committed to the state topic (one per destination partition and session)."),
		duplicates:   counter("duplicates_skipped_total", "Source batches skipped because the same producer already appended that sequence range in that epoch."),
		gaps:         counter("sequence_gaps_total", "Batches whose sequence does not follow the producer's last one (expected on compacted topics)."),
		lowEpoch:     counter("lower_epoch_batches_total", "Batches appended with an epoch below the producer's current one."),
		fenced:       counter("sessions_fenced_total", "Link sessions that found themselves fenced by a newer session of the same link."),
		errors:       counter("errors_total", "Errors that failed the link (fenced, lease_expired, offset_out_of_range, corrupt, too_large, authorization, timeout, other) or a topic discovery (discovery, retried at the next interval), by kind.", "kind"),
		foreign:      counter("foreign_batches_total", "Destination batches found during reconciliation that this link did not write (the link expects to own its destination topics)."),
		reconciled:   counter("reconciled_batches_total", "Destination batches past a checkpoint recognised as this link's own during reconciliation (not appended again)."),
		unknown:      counter("unknown_outcomes_total", "Appends whose outcome was unknown (a timeout, a lost connection, NOT_LEADER_OR_FOLLOWER after a leader move) and were settled by reading the destination."),
		refetches:    counter("corrupt_refetches_total", "Batches the destination refused as corrupt and that were fetched again from the source."),
		checkpoints:  counter("checkpoints_total", "State transactions committed with checkpoints (each also renews the session's lease)."),
		commitRetries: counter("state_commit_retries_total",
			"State transactions that failed (the state topic's leader or the transaction coordinator moving, a broker unreachable) and were aborted and committed again within the session's lease."),
		expired:      counter("producers_expired_total", "Producer entries dropped after producer_state_expiry without an append."),
		saltsExpired: counter("salts_expired_total", "Collision salts tombstoned after producer_state_expiry without use."),
		destinationGaps: counter("destination_gap_offsets_total",
			"Destination offsets written by someone else between two of the link's appends (another producer on the destination topic, or an append of an earlier session that landed late); each occurrence is logged at ERROR with the offsets."),
		removed: counter("partitions_removed_total", "Partitions the link stopped mirroring because the source confirmed them gone (topic deleted or recreated)."),
		lag:     gauge("lag_records", "Source high watermark minus the next source offset to mirror, summed over the link's partitions."),
		lagSeconds: gauge("lag_seconds",
			"How far behind the link is in time, its most lagging partition's: 0 when caught up, else the age of the oldest record fetched and not yet mirrored (before it is fetched, of the last record mirrored, an upper bound), by the source records' timestamps."),
		partitions:   gauge("link_partitions", "Destination partitions the link mirrors into."),
		partitionLag: gauge("partition_lag_records", "Source high watermark minus the next offset to mirror, per partition; only for links with at most 256 partitions.", "topic", "partition"),
	}
	m.groups = failover.NewMetrics(reg)
	if reg != nil {
		for _, c := range []prometheus.Collector{
			m.records, m.bytes, m.batches, m.reencoded, m.state, m.collisions, m.unresolvable,
			m.barriers, m.duplicates, m.gaps, m.lowEpoch, m.fenced, m.errors, m.foreign, m.reconciled,
			m.unknown, m.refetches, m.checkpoints, m.commitRetries, m.expired, m.saltsExpired, m.destinationGaps, m.removed,
			m.lag, m.lagSeconds, m.partitions, m.partitionLag,
		} {
			reg.MustRegister(c)
		}
	}
	return m
}

// linkMetrics are the metrics of one link, with the label bound.
type linkMetrics struct {
	m    *Metrics
	name string

	records, bytes, batches, reencoded   prometheus.Counter
	collisions, unresolvable             prometheus.Counter
	barriers, duplicates, gaps, lowEpoch prometheus.Counter
	fenced, foreign, reconciled          prometheus.Counter
	unknown, refetches, checkpoints      prometheus.Counter
	commitRetries                        prometheus.Counter
	expired, saltsExpired                prometheus.Counter
	destinationGaps, removed             prometheus.Counter
	lag, lagSeconds, partitions          prometheus.Gauge
	// skipped counts the source records the link's sessions skipped, for
	// Status; the metric is the fetcher's fetch_skipped_records_total,
	// which counts the same skips.
	skipped atomic.Int64
}

func (m *Metrics) forLink(name string) *linkMetrics {
	c := func(v *prometheus.CounterVec) prometheus.Counter { return v.WithLabelValues(name) }
	lm := &linkMetrics{
		m: m, name: name,
		records: c(m.records), bytes: c(m.bytes), batches: c(m.batches), reencoded: c(m.reencoded),
		collisions: c(m.collisions), unresolvable: c(m.unresolvable),
		barriers: c(m.barriers), duplicates: c(m.duplicates), gaps: c(m.gaps), lowEpoch: c(m.lowEpoch),
		fenced: c(m.fenced), foreign: c(m.foreign), reconciled: c(m.reconciled),
		unknown: c(m.unknown), refetches: c(m.refetches), checkpoints: c(m.checkpoints), commitRetries: c(m.commitRetries),
		expired: c(m.expired), saltsExpired: c(m.saltsExpired),
		destinationGaps: c(m.destinationGaps), removed: c(m.removed),
		lag: m.lag.WithLabelValues(name), lagSeconds: m.lagSeconds.WithLabelValues(name),
		partitions: m.partitions.WithLabelValues(name),
	}
	lm.setState(Stopped)
	return lm
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

// counters reads the link's counters back, for Status.
func (lm *linkMetrics) counters() Counters {
	v := func(c prometheus.Counter) int64 {
		var m dto.Metric
		if err := c.Write(&m); err != nil || m.Counter == nil {
			return 0
		}
		return int64(m.Counter.GetValue())
	}
	return Counters{
		Records: v(lm.records), Bytes: v(lm.bytes), Batches: v(lm.batches), Reencoded: v(lm.reencoded),
		Collisions: v(lm.collisions), Unresolvable: v(lm.unresolvable),
		DuplicatesSkipped: v(lm.duplicates), SequenceGaps: v(lm.gaps), LowerEpochBatches: v(lm.lowEpoch),
		Barriers: v(lm.barriers), Checkpoints: v(lm.checkpoints), StateCommitRetries: v(lm.commitRetries),
		ForeignBatches: v(lm.foreign), ReconciledBatches: v(lm.reconciled),
		UnknownOutcomes: v(lm.unknown), CorruptRefetches: v(lm.refetches), SessionsFenced: v(lm.fenced),
		DestinationGapOffsets: v(lm.destinationGaps), SourceRecordsSkipped: lm.skipped.Load(), PartitionsRemoved: v(lm.removed),
	}
}
