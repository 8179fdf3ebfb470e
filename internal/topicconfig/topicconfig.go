// Package topicconfig is the one definition of which settings of a source
// topic its mirror follows, shared by package config (which validates a
// link's config_sync block against it) and package link (which creates
// destination topics and syncs their settings, and must not import
// config). Plan decides a sync from two DescribeConfigs answers; it is a
// pure function. The package holds no state, does no I/O and runs no
// goroutines.
//
// The settings fall into four kinds:
//
//   - pinned (Pinned): compression.type=producer and
//     message.timestamp.type=CreateTime, which mirroring needs at the
//     destination whatever the source says; a sync sets them back when
//     they differ, and no include can make them follow the source;
//   - followed by value (ByValue): cleanup.policy, retention.ms,
//     retention.bytes and max.message.bytes, which decide how long data
//     lives and how large a batch may be; the destination follows the
//     source topic's effective value, also when the source takes it from
//     its broker's defaults (a source broker with log.cleanup.policy=compact
//     must not have its mirror deleted by the destination's default
//     retention), and holds it as an override;
//   - excluded by default (DefaultExcluded): settings tied to the source
//     cluster (its brokers, racks, replication, tiered storage), to when a
//     record arrives, or to a broker version; a link's config_sync include
//     re-enables any of them by name;
//   - everything else: followed as an override, and only when the source
//     sets it on the topic (DYNAMIC_TOPIC_CONFIG); an override the
//     destination has that the source no longer has is deleted, so that
//     the destination's broker default applies, as the source's does.
//
// The topic-level settings of Apache Kafka 4.x are listed at
// https://kafka.apache.org/40/configuration/topic-level-configs and in the
// TopicConfig class (https://kafka.apache.org/44/javadoc/org/apache/kafka/common/config/TopicConfig.html).
package topicconfig

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Pinned are the settings a mirror always has, whatever its source has.
// mirrord forwards each source batch unchanged (it rewrites 8 header bytes
// and the CRC, DESIGN §5): with compression.type other than producer the
// destination broker would decompress and recompress every batch, which
// changes its bytes (reconciliation and offset translation recognise a
// mirrored batch by them) and costs the destination CPU; with
// LogAppendTime the destination broker would overwrite every batch's
// timestamps with its own clock, so that consumers of the mirror would see
// the time the link appended a record, not when its producer wrote it.
var Pinned = map[string]string{
	"compression.type":       "producer",
	"message.timestamp.type": "CreateTime",
}

// ByValue are the settings whose effective source value the mirror takes
// (see the package doc), in the order they are documented.
var ByValue = []string{"cleanup.policy", "retention.ms", "retention.bytes", "max.message.bytes"}

// Exclusion is a setting, or a family of settings, that a mirror does not
// follow by default, and why.
type Exclusion struct {
	// Pattern matches whole setting names (anchored, as Pattern compiles
	// it).
	Pattern string
	Why     string
}

// DefaultExcluded are the settings that do not follow by default. A link's
// config_sync include names any that should (each name must match one of
// these).
var DefaultExcluded = []Exclusion{
	{`min\.insync\.replicas`, "depends on the destination's replication factor and brokers; a source value above the mirror's replication factor would refuse every append"},
	{`unclean\.leader\.election\.enable`, "the destination cluster's availability and durability policy"},
	{`leader\.replication\.throttled\.replicas`, "names partition:broker pairs of the source cluster"},
	{`follower\.replication\.throttled\.replicas`, "names partition:broker pairs of the source cluster"},
	{`confluent\..*`, "Confluent Server settings (placement constraints naming the source's racks, tiered storage, schema validation against the source's registry); Apache Kafka refuses them"},
	{`remote\..*`, "tiered storage (remote.storage.enable, remote.log.copy.disable, remote.log.delete.on.disable, remote.copy.lag.ms, remote.copy.lag.bytes), which the destination cluster may not have set up"},
	{`local\.retention\.ms`, "tiered storage: how long the source keeps data on its brokers' disks"},
	{`local\.retention\.bytes`, "tiered storage: how much the source keeps on its brokers' disks"},
	{`errors\.deadletterqueue\.group\.enable`, "lets the source cluster's share groups use the topic as their dead-letter queue (KIP-1191, Kafka 4.2+)"},
	{`message\.timestamp\.before\.max\.ms`, "checked against the broker's clock when a record arrives, which is later at the destination: a lagging link's batches would be refused (INVALID_TIMESTAMP)"},
	{`message\.timestamp\.after\.max\.ms`, "checked against the broker's clock when a record arrives, which is later at the destination"},
	{`message\.timestamp\.difference\.max\.ms`, "checked against the broker's clock when a record arrives (removed in Kafka 4.0)"},
	{`message\.format\.version`, "a broker protocol version, removed in Kafka 4.0"},
	{`message\.downconversion\.enable`, "serves the source's old consumers; a no-op since Kafka 4.0"},
}

// Name is how documentation and messages spell the exclusion: the setting's
// name, or a family's prefix with a *.
func (e Exclusion) Name() string {
	return strings.ReplaceAll(strings.ReplaceAll(e.Pattern, `\.`, "."), "..*", ".*")
}

var defaultExcluded = func() []*regexp.Regexp {
	out := make([]*regexp.Regexp, len(DefaultExcluded))
	for i, e := range DefaultExcluded {
		out[i] = regexp.MustCompile(`^(?:` + e.Pattern + `)$`)
	}
	return out
}()

// Pattern compiles a config_sync exclude pattern: Go RE2 syntax, anchored,
// so that it matches whole setting names ("retention.ms" does not exclude
// "local.retention.ms").
func Pattern(expr string) (*regexp.Regexp, error) {
	return regexp.Compile(`^(?:` + expr + `)$`)
}

// DefaultExclusion returns the default exclusion that covers key, if one
// does.
func DefaultExclusion(key string) (Exclusion, bool) {
	for i, re := range defaultExcluded {
		if re.MatchString(key) {
			return DefaultExcluded[i], true
		}
	}
	return Exclusion{}, false
}

// Rules are a link's choices over the defaults (its config_sync block).
type Rules struct {
	// Exclude adds settings that never follow: anchored patterns, which
	// win over Include.
	Exclude []*regexp.Regexp
	// Include names settings of DefaultExcluded that follow after all
	// (exact names).
	Include []string
}

// Synced reports whether the mirror follows key from its source (a pinned
// key is not synced: it is set, see Plan).
func (r Rules) Synced(key string) bool {
	if _, ok := Pinned[key]; ok {
		return false
	}
	for _, re := range r.Exclude {
		if re.MatchString(key) {
			return false
		}
	}
	if slices.Contains(r.Include, key) {
		return true
	}
	_, excluded := DefaultExclusion(key)
	return !excluded
}

// Plan decides what brings a mirror's settings in line with its source's,
// from the DescribeConfigs answers for both topics: the incremental
// AlterConfigs operations, in key order, each pinned setting first.
//
//   - a pinned setting whose destination value differs is SET to its pin;
//   - a synced setting the source sets on the topic (an override), and a
//     ByValue setting the source has at all, is SET at the destination
//     unless the destination has the same value as an override of its own;
//   - an override the destination has for a synced setting that the
//     source does not set is DELETEd (never a ByValue one: the source
//     always has a value for those, and an answer that left it out says
//     nothing);
//   - anything else (an excluded setting, a sensitive one whose value is
//     not shown) is left as it is.
func Plan(src, dst []kadm.Config, r Rules) []kadm.AlterConfig {
	want := map[string]string{}
	for _, c := range src {
		if c.Value == nil || c.Sensitive || !r.Synced(c.Key) {
			continue
		}
		if c.Source == kmsg.ConfigSourceDynamicTopicConfig || slices.Contains(ByValue, c.Key) {
			want[c.Key] = *c.Value
		}
	}
	have := map[string]string{}     // the destination's overrides
	current := map[string]*string{} // the destination's values, whatever their source
	for _, c := range dst {
		current[c.Key] = c.Value
		if c.Source == kmsg.ConfigSourceDynamicTopicConfig && c.Value != nil && !c.Sensitive {
			have[c.Key] = *c.Value
		}
	}

	var out []kadm.AlterConfig
	for _, k := range slices.Sorted(maps.Keys(Pinned)) {
		if v := current[k]; v == nil || *v != Pinned[k] {
			out = append(out, kadm.AlterConfig{Op: kadm.SetConfig, Name: k, Value: new(Pinned[k])})
		}
	}
	keys := slices.Collect(maps.Keys(want))
	for k := range have {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		v, wanted := want[k]
		cur, had := have[k]
		switch {
		case wanted && (!had || cur != v):
			out = append(out, kadm.AlterConfig{Op: kadm.SetConfig, Name: k, Value: new(v)})
		case !wanted && r.Synced(k) && !slices.Contains(ByValue, k):
			out = append(out, kadm.AlterConfig{Op: kadm.DeleteConfig, Name: k})
		}
	}
	return out
}

// CreateConfigs are the settings of a destination topic the link creates,
// from its source's DescribeConfigs answer: the pinned ones and the
// ByValue ones the link syncs. The other overrides follow with the first
// sync, right after: a value the destination refuses (INVALID_CONFIG, say
// a setting a newer Kafka bounds more tightly) is then that topic's sync
// error, while a refused CreateTopics would stop the link.
func CreateConfigs(src []kadm.Config, r Rules) map[string]*string {
	out := map[string]*string{}
	for k, v := range Pinned {
		out[k] = new(v)
	}
	for _, c := range src {
		if c.Value != nil && !c.Sensitive && slices.Contains(ByValue, c.Key) && r.Synced(c.Key) {
			out[c.Key] = new(*c.Value)
		}
	}
	return out
}

// Describe spells operations for logs and the status: key=value for a SET,
// -key for a DELETE.
func Describe(ops []kadm.AlterConfig) string {
	parts := make([]string, len(ops))
	for i, op := range ops {
		switch op.Op {
		case kadm.DeleteConfig:
			parts[i] = "-" + op.Name
		default:
			v := ""
			if op.Value != nil {
				v = *op.Value
			}
			parts[i] = fmt.Sprintf("%s=%s", op.Name, v)
		}
	}
	return strings.Join(parts, " ")
}
