package link

import (
	"encoding/json"
	"strconv"
	"sync/atomic"
)

// A link's running totals: each is declared once, in counterTable, and that
// one line drives everything else: the pipeline's Stats and the driver's
// increments, the Prometheus counter mirrord_<name>_total (when it has
// one), the key in the status JSON (Status.Counters) and the row on the
// status page (agent serves CounterTable to it).

// Counter names one of a link's running totals; its value indexes Counts.
type Counter int

// CounterInfo is what the table says of one counter.
type CounterInfo struct {
	// Name is the key in the status JSON and, with "_total", the name of
	// the Prometheus counter (mirrord_<name>_total).
	Name string `json:"key"`
	// Label is how the status page names it.
	Label string `json:"label"`
	// Alarm: a non-zero value deserves an operator's look (the page
	// marks it; the README's Operations section alerts on it).
	Alarm bool `json:"alarm,omitempty"`
	// Headline: the page shows it as a figure of its own, not in the
	// card's list.
	Headline bool `json:"headline,omitempty"`
	// Help is the Prometheus help text.
	Help string `json:"help"`
}

// The counters, in the order the status page lists them. Adding a counter
// is one line here and its increments.
var (
	RecordsMirrored            = counter(CounterInfo{Name: "records_mirrored", Label: "records mirrored", Headline: true, Help: "Records appended to the destination (counted from batch headers; records are not decoded)."})
	BytesMirrored              = counter(CounterInfo{Name: "bytes_mirrored", Label: "bytes mirrored", Headline: true, Help: "Bytes of record batches appended to the destination."})
	Checkpoints                = counter(CounterInfo{Name: "checkpoints", Label: "checkpoints", Help: "State transactions committed with checkpoints (each also renews the session's lease)."})
	BatchesMirrored            = counter(CounterInfo{Name: "batches_mirrored", Label: "batches mirrored", Help: "Record batches appended to the destination."})
	BatchesCoalesced           = counter(CounterInfo{Name: "batches_coalesced", Label: "batches coalesced", Help: "Destination batches that joined a run of several consecutive small source batches of a partition with a backlog (coalesce_bytes; in preserve delivery, one producer's batches with consecutive sequences)."})
	SourceBatchesCoalesced     = counter(CounterInfo{Name: "source_batches_coalesced", Label: "source batches coalesced", Help: "Source batches appended as part of the batches counted by mirrord_batches_coalesced_total: the ratio of the two is the source batches per coalesced destination batch."})
	BatchesReencoded           = counter(CounterInfo{Name: "batches_reencoded", Label: "batches re-encoded", Help: "Batches with offset gaps (compacted at the source) that were decompressed and re-encoded densely: the one slow path."})
	CollisionsResolved         = counter(CounterInfo{Name: "collisions_resolved", Label: "collisions resolved", Help: "Producer-ID collisions resolved with a salt committed to the state topic."})
	CollisionsUnresolvable     = counter(CounterInfo{Name: "collisions_unresolvable", Label: "collisions unresolvable", Alarm: true, Help: "Batches appended under a mapped PID that another origin holds, because both carry forwarded negative PIDs."})
	BatchesReturnedHome        = counter(CounterInfo{Name: "batches_returned_home", Label: "batches not sent home", Help: "Source batches not forwarded because their producer ID says they were first produced at the destination cluster (a reverse link or an upstream mirror brought them): sending them back would duplicate their records there (DESIGN §16)."})
	RecordsReturnedHome        = counter(CounterInfo{Name: "records_returned_home", Label: "records not sent home", Help: "Records of the batches counted by mirrord_batches_returned_home_total (from batch headers)."})
	BatchesUnattributedSkipped = counter(CounterInfo{Name: "batches_unattributed_skipped", Label: "unattributed batches skipped", Help: "Source batches without a producer ID (producers with enable.idempotence off) not forwarded because the link's unattributed policy is skip."})
	RecordsUnattributedSkipped = counter(CounterInfo{Name: "records_unattributed_skipped", Label: "unattributed records skipped", Help: "Records of the batches counted by mirrord_batches_unattributed_skipped_total (from batch headers)."})
	OriginReads                = counter(CounterInfo{Name: "origin_reads", Label: "origin look-ups", Help: "Reads of the state topic at the source to learn which producer IDs started at the destination though their region does not say so (a transactional link's sessions, salted mappings; active-active): one per fetched transactional batch, or batch under a mapped PID of another region, whose producer ID was not looked up before."})
	DuplicatesSkipped          = counter(CounterInfo{Name: "duplicates_skipped", Label: "duplicates skipped", Help: "Source batches skipped because the same producer already appended that sequence range in that epoch."})
	SequenceGaps               = counter(CounterInfo{Name: "sequence_gaps", Label: "sequence gaps", Help: "Batches whose sequence does not follow the producer's last one (expected on compacted topics)."})
	LowerEpochBatches          = counter(CounterInfo{Name: "lower_epoch_batches", Label: "lower-epoch batches", Help: "Batches appended with an epoch below the producer's current one."})
	BarriersEmitted            = counter(CounterInfo{Name: "barriers_emitted", Label: "barriers emitted", Help: "MIRROR_PID_RESET barrier records committed to the state topic (one per destination partition and session)."})
	ReconciledBatches          = counter(CounterInfo{Name: "reconciled_batches", Label: "reconciled batches", Help: "Destination batches past a checkpoint recognised as this link's own during reconciliation (not appended again)."})
	ForeignBatches             = counter(CounterInfo{Name: "foreign_batches", Label: "foreign batches", Alarm: true, Help: "Destination batches found during reconciliation that this link did not write (the link expects to own its destination topics)."})
	UnknownOutcomes            = counter(CounterInfo{Name: "unknown_outcomes", Label: "unknown outcomes", Help: "Appends whose outcome was unknown (a timeout, a lost connection, NOT_LEADER_OR_FOLLOWER after a leader move) and were settled by reading the destination."})
	BatchesOvertaken           = counter(CounterInfo{Name: "batches_overtaken", Label: "batches overtaken", Help: "Transactional delivery: batches that reached the destination broker before an earlier batch of their partition still in flight (answered OUT_OF_ORDER_SEQUENCE_NUMBER or UNKNOWN_PRODUCER_ID) and were sent again once it was appended, as Kafka's idempotent producer retries."})
	DestinationLocalOffsets    = counter(CounterInfo{Name: "destination_local_offsets", Label: "destination offsets written locally", Help: "With shared_destination: destination offsets written by others (the destination cluster's own producers) between two of the link's appends; without it they count as destination_gap_offsets."})
	DestinationLocalBatches    = counter(CounterInfo{Name: "destination_local_batches", Label: "destination batches written locally", Help: "With shared_destination: destination batches past a checkpoint that the link did not write, passed over during reconciliation; without it they count as foreign_batches."})
	CorruptRefetches           = counter(CounterInfo{Name: "corrupt_refetches", Label: "corrupt refetches", Help: "Batches the destination refused as corrupt and that were fetched again from the source."})
	SessionsFenced             = counter(CounterInfo{Name: "sessions_fenced", Label: "sessions fenced", Alarm: true, Help: "Link sessions that found themselves fenced by a newer session of the same link."})
	TakeoversLost              = counter(CounterInfo{Name: "takeovers_lost", Label: "takeovers lost", Help: "Takeovers this agent began as a standby (the holder stopped or its lease lapsed) and lost to another standby that took the link at the same moment: fenced before mirroring, it stands by again. Not counted in sessions_fenced."})
	StateCommitRetries         = counter(CounterInfo{Name: "state_commit_retries", Label: "state commit retries", Help: "State transactions that failed (the state topic's leader or the transaction coordinator moving, a broker unreachable) and were aborted and committed again within the session's lease."})
	DestinationGapOffsets      = counter(CounterInfo{Name: "destination_gap_offsets", Label: "destination gap offsets", Alarm: true, Help: "Destination offsets written by someone else between two of the link's appends (another producer on the destination topic, or an append of an earlier session that landed late); each occurrence is logged at ERROR with the offsets."})
	SourceRecordsSkipped       = counter(CounterInfo{Name: "source_records_skipped", Label: "source records skipped", Alarm: true, Help: "Source records deleted below the source's log start before they were mirrored (on_offset_out_of_range = earliest): those the fetcher skipped while mirroring (mirrord_fetch_skipped_records_total counts these too) and those reconciliation found deleted past the checkpoint and not at the destination."})
	PartitionsRemoved          = counter(CounterInfo{Name: "partitions_removed", Label: "partitions removed", Help: "Partitions the link stopped mirroring because the source confirmed them gone (topic deleted or recreated)."})
	ProducersExpired           = counter(CounterInfo{Name: "producers_expired", Label: "producers expired", Help: "Producer entries dropped after producer_state_expiry without an append."})
	SaltsExpired               = counter(CounterInfo{Name: "salts_expired", Label: "salts expired", Help: "Collision salts tombstoned after producer_state_expiry without use."})
	ConfigSyncRounds           = counter(CounterInfo{Name: "config_sync_rounds", Label: "config sync rounds", Help: "Rounds of topic config sync that ran (only in the agent whose session holds the link)."})
	ConfigsSet                 = counter(CounterInfo{Name: "config_sync_configs_set", Label: "topic settings set", Help: "Destination topic settings config sync set: a source setting that is new or changed, or a pinned setting (compression.type, message.timestamp.type) put back."})
	ConfigsDeleted             = counter(CounterInfo{Name: "config_sync_configs_deleted", Label: "topic overrides deleted", Help: "Destination topic overrides config sync deleted because the source topic no longer sets them."})
	ACLSyncRounds              = counter(CounterInfo{Name: "acl_sync_rounds", Label: "ACL sync rounds", Help: "Rounds of ACL sync that ran (only in the agent whose session holds the link)."})
	ACLsCreated                = counter(CounterInfo{Name: "acl_sync_acls_created", Label: "ACLs created", Help: "ACL bindings ACL sync created at the destination (each recorded in the state topic first, as the link's)."})
	ACLsDeleted                = counter(CounterInfo{Name: "acl_sync_acls_deleted", Label: "ACLs deleted", Help: "ACL bindings the link had created that ACL sync deleted because the source no longer calls for them (a binding deleted at the source, a topic or group no longer mirrored)."})
	ACLSyncErrors              = counter(CounterInfo{Name: "acl_sync_errors", Label: "ACL sync errors", Alarm: true, Help: "ACL sync rounds that failed (a missing permission, a cluster without an authorizer, an unreachable cluster) and bindings the destination refused to create or delete; each is in the status's acl_sync section and logged."})
	ConfigSyncErrors           = counter(CounterInfo{Name: "config_sync_errors", Label: "config sync errors", Alarm: true, Help: "Topics whose settings config sync could not read or change in a round (a missing permission, a value the destination refuses), and rounds that could not read the topics at all; each is in the status's config_sync section and logged."})
)

// counterTable holds every counter's CounterInfo, indexed by Counter.
var counterTable []CounterInfo

func counter(c CounterInfo) Counter {
	counterTable = append(counterTable, c)
	return Counter(len(counterTable) - 1)
}

// CounterTable returns every counter's CounterInfo, in order.
func CounterTable() []CounterInfo { return append([]CounterInfo(nil), counterTable...) }

// String is the counter's name.
func (c Counter) String() string { return counterTable[c].Name }

// Counts holds a value per counter, indexed by Counter. The zero value is
// all zeros.
type Counts struct{ v []int64 }

// Get is c's value.
func (n Counts) Get(c Counter) int64 {
	if int(c) >= len(n.v) {
		return 0
	}
	return n.v[c]
}

// Add adds d to c.
func (n *Counts) Add(c Counter, d int64) {
	if n.v == nil {
		n.v = make([]int64, len(counterTable))
	}
	n.v[c] += d
}

// Inc adds one to c.
func (n *Counts) Inc(c Counter) { n.Add(c, 1) }

// clone is a copy that shares nothing with n.
func (n Counts) clone() Counts { return Counts{v: append([]int64(nil), n.v...)} }

// MarshalJSON writes the counts as an object keyed by the counters' names,
// in the table's order, every counter present.
func (n Counts) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	for i, c := range counterTable {
		if i > 0 {
			b = append(b, ',')
		}
		k, err := json.Marshal(c.Name)
		if err != nil {
			return nil, err
		}
		b = append(b, k...)
		b = append(b, ':')
		v, _ := json.Marshal(n.Get(Counter(i)))
		b = append(b, v...)
	}
	return append(b, '}'), nil
}

// UnmarshalJSON reads what MarshalJSON wrote (clients of the admin API);
// unknown keys are ignored.
func (n *Counts) UnmarshalJSON(b []byte) error {
	var m map[string]int64
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	*n = Counts{}
	for i, c := range counterTable {
		if v, ok := m[c.Name]; ok {
			n.Add(Counter(i), v)
		}
	}
	return nil
}

// totals are a link's counts across its sessions, safe for concurrent use:
// the link goroutine adds, Status reads.
type totals struct{ v []atomic.Int64 }

func newTotals() *totals { return &totals{v: make([]atomic.Int64, len(counterTable))} }

func (t *totals) add(c Counter, d int64) { t.v[c].Add(d) }

func (t *totals) snapshot() Counts {
	var n Counts
	for i := range t.v {
		if v := t.v[i].Load(); v != 0 {
			n.Add(Counter(i), v)
		}
	}
	return n
}

// String lists the counters that are not zero, as name=value.
func (n Counts) String() string {
	var b []byte
	for i, c := range counterTable {
		if v := n.Get(Counter(i)); v != 0 {
			if len(b) > 0 {
				b = append(b, ' ')
			}
			b = append(b, c.Name...)
			b = append(b, '=')
			b = strconv.AppendInt(b, v, 10)
		}
	}
	return "{" + string(b) + "}"
}

// CountsOf is counts with the values given (tests, clients).
func CountsOf(vals map[Counter]int64) Counts {
	var n Counts
	for c, v := range vals {
		n.Add(c, v)
	}
	return n
}
