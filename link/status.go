package link

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/seed83556561/mirrord/failover"
)

// Status is a snapshot of a link for operators (GET /v1/links).
type Status struct {
	Name        string    `json:"name"`
	Source      string    `json:"source"`
	Destination string    `json:"destination"`
	State       State     `json:"state"`
	Since       time.Time `json:"since"`
	// Slot is the slot this status is of, for a link with slots (the
	// agent runs one Link per slot it owns); nil without slots.
	Slot *int `json:"slot,omitempty"`

	SourceClusterID      string `json:"source_cluster_id,omitempty"`
	DestinationClusterID string `json:"destination_cluster_id,omitempty"`
	SessionEpoch         int16  `json:"session_epoch"`
	// Delivery is the link's delivery mode: preserve or transactional.
	Delivery string `json:"delivery"`

	Lag int64 `json:"lag_records"`
	// LagSeconds is the largest of the partitions' LagSeconds; nil when
	// no partition's is known.
	LagSeconds *float64          `json:"lag_seconds,omitempty"`
	Partitions []PartitionStatus `json:"partitions"`

	LastError   string    `json:"last_error,omitempty"`
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
	// StandingBy is set while the link stands by in PREPARING for
	// another session that holds it: that session's agent.name, or
	// "another session" when it has none. /readyz counts such a link as
	// ready: it is a hot standby.
	StandingBy string `json:"standing_by,omitempty"`

	// Counters are the link's totals since the process started, the
	// values of its mirrord_* counters (counters.go).
	Counters Counts `json:"counters"`

	// GroupSync is the group offset sync's last round (nil: the link has
	// no groups block); Failover the last failover (nil: none).
	GroupSync *failover.GroupSyncStatus `json:"group_sync,omitempty"`
	Failover  *failover.Status          `json:"failover,omitempty"`
	// ConfigSync is the topic config sync's last round (nil: config_sync
	// is off).
	ConfigSync *ConfigSyncStatus `json:"config_sync,omitempty"`
	// ACLSync is the ACL sync's last round (nil: acl_sync is off).
	ACLSync *ACLSyncStatus `json:"acl_sync,omitempty"`
}

// PartitionStatus is one destination partition of a link.
type PartitionStatus struct {
	SourceTopic      string `json:"source_topic"`
	DestinationTopic string `json:"destination_topic"`
	Partition        int32  `json:"partition"`
	Phase            string `json:"phase"`              // reconciling, admitting, idle, salting, appending, settling
	SourceNextOffset int64  `json:"source_next_offset"` // next source offset to mirror (everything below is at the destination)
	DestNextOffset   int64  `json:"destination_next_offset"`
	HighWatermark    int64  `json:"source_high_watermark"`
	Lag              int64  `json:"lag_records"`
	// LagSeconds is how far behind the partition is in time: 0 when
	// caught up, else the age of the oldest record fetched and not yet
	// mirrored, or, before it is fetched, of the last record mirrored (an
	// upper bound); by the source records' timestamps (create time:
	// the producers' clocks; LogAppendTime: the source broker's). Nil
	// while unknown (nothing fetched since the session began).
	LagSeconds       *float64 `json:"lag_seconds,omitempty"`
	CheckpointSource int64    `json:"checkpoint_source_offset"` // as last committed to the state topic
	CheckpointDest   int64    `json:"checkpoint_destination_offset"`
}

// Status returns a snapshot of the link.
func (l *Link) Status() Status {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.status
	s.Partitions = slices.Clone(s.Partitions)
	if l.linkWide() { // with slots, slot 0's Link alone runs the Mover
		s.GroupSync, s.Failover = l.mover.GroupSync(), l.mover.Failover()
	}
	s.Counters = l.met.counts()
	return s
}

// State is the link's lifecycle state.
func (l *Link) State() State {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.status.State
}

// StartFailover starts a failover of the link (package failover) and
// returns at once; its progress and outcome are in Status().Failover.
//
// An agent that stands by for another refuses it, naming the agent that
// holds the link, which is the one to ask.
func (l *Link) StartFailover(o failover.Options) error {
	if holder := l.Status().StandingBy; holder != "" {
		return fmt.Errorf("%w: this agent stands by for agent %q, whose session holds link %s: send the failover to that agent (mirrord failover --addr <its agent.listen>)",
			failover.ErrNotMirroring, holder, l.Name())
	}
	return l.mover.Start(o)
}

// SyncGroups runs one round of the group offset sync now and returns each
// group's outcome (failover.ErrNoGroupSync without a groups block).
func (l *Link) SyncGroups(ctx context.Context) ([]failover.GroupStatus, error) {
	gs, err := l.mover.SyncGroups(ctx)
	if err != nil {
		return gs, fmt.Errorf("link %s: %w", l.Name(), err)
	}
	return gs, nil
}

func (l *Link) setStatus(fn func(*Status)) {
	l.mu.Lock()
	fn(&l.status)
	l.mu.Unlock()
}

// report adds the pipeline's new counts to the link's totals and metrics.
func (s *session) report() {
	m := s.l.met
	s.reportCounts(s.pipe.Count)
	for _, n := range s.pipe.TakeJoins() {
		m.joinedRun(n)
	}
	for ; s.reportedDiscovery < s.pipe.DiscoveryFailures(); s.reportedDiscovery++ {
		m.error("discovery")
	}
}

// reportCounts adds what count says beyond what was reported already to
// the link's totals and metrics, for either delivery mode's session.
func (s *session) reportCounts(count func(Counter) int64) {
	for i := range counterTable {
		c := Counter(i)
		if now := count(c); now != s.reported.Get(c) {
			s.l.met.add(c, now-s.reported.Get(c))
			s.reported.Add(c, now-s.reported.Get(c))
		}
	}
}

// publish refreshes the status snapshot and the lag gauges.
func (s *session) publish() { s.publishPartitions(s.pipe.Partitions(s.l.deps.Now())) }

// publishPartitions publishes ps, in either delivery mode.
func (s *session) publishPartitions(ps []PartitionStatus) {
	var total int64
	var lagSeconds *float64
	for _, p := range ps {
		total += p.Lag
		if len(ps) <= MaxPartitionLagSeries {
			s.l.met.partitionLag(p.SourceTopic, p.Partition, p.Lag)
		}
		if p.LagSeconds != nil && (lagSeconds == nil || *p.LagSeconds > *lagSeconds) {
			lagSeconds = p.LagSeconds
		}
	}
	s.l.met.lag.Set(float64(total))
	if lagSeconds != nil {
		s.l.met.lagSeconds.Set(*lagSeconds)
	}
	s.l.met.partitions.Set(float64(len(ps)))
	s.l.setStatus(func(st *Status) {
		st.Partitions = ps
		st.Lag = total
		st.LagSeconds = lagSeconds
	})
	s.published = len(ps)
}
