package topicconfig

import (
	"regexp"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	override    = kmsg.ConfigSourceDynamicTopicConfig
	brokerDflt  = kmsg.ConfigSourceDefaultConfig
	brokerSet   = kmsg.ConfigSourceStaticBrokerConfig
	dynamicBrkr = kmsg.ConfigSourceDynamicBrokerConfig
)

func cfg(key, value string, src kmsg.ConfigSource) kadm.Config {
	return kadm.Config{Key: key, Value: new(value), Source: src}
}

// mirrorOK is a destination that has the pins and the ByValue settings
// the link created it with, and nothing else of its own.
func mirrorOK(extra ...kadm.Config) []kadm.Config {
	out := []kadm.Config{
		cfg("compression.type", "producer", override),
		cfg("message.timestamp.type", "CreateTime", override),
		cfg("cleanup.policy", "delete", override),
		cfg("retention.ms", "604800000", override),
		cfg("retention.bytes", "-1", override),
		cfg("max.message.bytes", "1048588", override),
		cfg("segment.ms", "604800000", brokerDflt),
		cfg("min.insync.replicas", "1", brokerDflt),
	}
	return append(out, extra...)
}

// sourceDefaults is a source topic without overrides: every value from its
// broker.
func sourceDefaults(extra ...kadm.Config) []kadm.Config {
	out := []kadm.Config{
		cfg("compression.type", "producer", brokerDflt),
		cfg("message.timestamp.type", "CreateTime", brokerDflt),
		cfg("cleanup.policy", "delete", brokerDflt),
		cfg("retention.ms", "604800000", brokerDflt),
		cfg("retention.bytes", "-1", brokerDflt),
		cfg("max.message.bytes", "1048588", brokerDflt),
		cfg("segment.ms", "604800000", brokerDflt),
		cfg("min.insync.replicas", "1", brokerDflt),
	}
	// A later entry of the same key replaces the earlier one, as an
	// override replaces its default in a DescribeConfigs answer.
	for _, e := range extra {
		replaced := false
		for i := range out {
			if out[i].Key == e.Key {
				out[i], replaced = e, true
			}
		}
		if !replaced {
			out = append(out, e)
		}
	}
	return out
}

// Guards the decision of one sync round: what the mirror of a topic must
// be SET to and which of its overrides are DELETEd, for every kind of
// setting (pinned, followed by value, followed as an override, excluded by
// default, excluded or included by the link).
func TestPlan(t *testing.T) {
	for _, tc := range []struct {
		name     string
		src, dst []kadm.Config
		rules    Rules
		want     string // Describe of the operations
	}{
		{name: "in line: nothing to do", src: sourceDefaults(), dst: mirrorOK(), want: ""},
		{name: "new override at the source is set",
			src: sourceDefaults(cfg("segment.ms", "3600000", override)), dst: mirrorOK(),
			want: "segment.ms=3600000"},
		{name: "changed override follows",
			src: sourceDefaults(cfg("segment.ms", "3600000", override)), dst: mirrorOK(cfg("segment.ms", "7200000", override)),
			want: "segment.ms=3600000"},
		{name: "override deleted at the source is deleted at the destination",
			src: sourceDefaults(), dst: mirrorOK(cfg("segment.ms", "3600000", override)),
			want: "-segment.ms"},
		{name: "destination-only override on a synced key is deleted",
			src: sourceDefaults(), dst: mirrorOK(cfg("delete.retention.ms", "1000", override)),
			want: "-delete.retention.ms"},
		{name: "same override at both sides: nothing",
			src: sourceDefaults(cfg("segment.ms", "3600000", override)), dst: mirrorOK(cfg("segment.ms", "3600000", override)),
			want: ""},
		{name: "an override equal to the destination's default is still set as an override",
			src: sourceDefaults(cfg("segment.ms", "604800000", override)), dst: mirrorOK(),
			want: "segment.ms=604800000"},
		{name: "a source default of a non-ByValue key is not copied",
			src: sourceDefaults(cfg("segment.ms", "100", brokerSet)), dst: mirrorOK(),
			want: ""},
		{name: "ByValue setting follows the source's changed override",
			src: sourceDefaults(cfg("retention.ms", "3600000", override)), dst: mirrorOK(),
			want: "retention.ms=3600000"},
		{name: "ByValue setting follows the source broker's default, not the destination's",
			src:  sourceDefaults(cfg("cleanup.policy", "compact", brokerSet), cfg("retention.ms", "86400000", dynamicBrkr)),
			dst:  mirrorOK(),
			want: "cleanup.policy=compact retention.ms=86400000"},
		{name: "ByValue setting is set where the destination has it only as its default",
			src: sourceDefaults(),
			dst: []kadm.Config{
				cfg("compression.type", "producer", override), cfg("message.timestamp.type", "CreateTime", override),
				cfg("cleanup.policy", "delete", brokerDflt), cfg("retention.ms", "604800000", override),
				cfg("retention.bytes", "-1", override), cfg("max.message.bytes", "1048588", override),
			},
			want: "cleanup.policy=delete"},
		{name: "ByValue override is never deleted, even if the source's answer lacks the key",
			src:  []kadm.Config{cfg("compression.type", "producer", brokerDflt), cfg("message.timestamp.type", "CreateTime", brokerDflt)},
			dst:  mirrorOK(),
			want: ""},
		{name: "pinned: LogAppendTime at the source stays CreateTime",
			src: sourceDefaults(cfg("message.timestamp.type", "LogAppendTime", override)), dst: mirrorOK(),
			want: ""},
		{name: "pinned: compression at the source stays producer",
			src: sourceDefaults(cfg("compression.type", "zstd", override)), dst: mirrorOK(),
			want: ""},
		{name: "pinned: a destination that drifted is set back",
			src:  sourceDefaults(cfg("message.timestamp.type", "LogAppendTime", override)),
			dst:  mirrorOK(cfg("message.timestamp.type", "LogAppendTime", override), cfg("compression.type", "lz4", override)),
			want: "compression.type=producer message.timestamp.type=CreateTime"},
		{name: "pinned: a destination that lacks them gets them",
			src: sourceDefaults(), dst: mirrorOK()[2:],
			want: "compression.type=producer message.timestamp.type=CreateTime"},
		{name: "pinned: a destination broker default of producer is enough",
			src:  sourceDefaults(),
			dst:  append(mirrorOK()[2:], cfg("compression.type", "producer", brokerDflt), cfg("message.timestamp.type", "CreateTime", brokerSet)),
			want: ""},
		{name: "excluded by default: min.insync.replicas is not copied",
			src: sourceDefaults(cfg("min.insync.replicas", "2", override)), dst: mirrorOK(),
			want: ""},
		{name: "excluded by default: the destination's own override stays",
			src: sourceDefaults(), dst: mirrorOK(cfg("min.insync.replicas", "2", override), cfg("unclean.leader.election.enable", "true", override)),
			want: ""},
		{name: "excluded by default: throttles, placement, tiered storage and arrival-time bounds",
			src: sourceDefaults(
				cfg("leader.replication.throttled.replicas", "0:1", override),
				cfg("follower.replication.throttled.replicas", "0:2", override),
				cfg("confluent.placement.constraints", `{"version":1}`, override),
				cfg("remote.storage.enable", "true", override),
				cfg("local.retention.ms", "1000", override),
				cfg("local.retention.bytes", "1000", override),
				cfg("remote.log.copy.disable", "true", override),
				cfg("message.timestamp.before.max.ms", "3600000", override),
				cfg("message.timestamp.after.max.ms", "3600000", override),
				cfg("message.downconversion.enable", "false", override),
			),
			dst:  mirrorOK(),
			want: ""},
		{name: "include re-enables a default exclusion, with its delete",
			src:   sourceDefaults(cfg("min.insync.replicas", "2", override)),
			dst:   mirrorOK(cfg("unclean.leader.election.enable", "true", override)),
			rules: Rules{Include: []string{"min.insync.replicas", "unclean.leader.election.enable"}},
			want:  "min.insync.replicas=2 -unclean.leader.election.enable"},
		{name: "exclude stops a key: neither set nor deleted",
			src:   sourceDefaults(cfg("segment.ms", "3600000", override)),
			dst:   mirrorOK(cfg("delete.retention.ms", "1000", override)),
			rules: Rules{Exclude: []*regexp.Regexp{mustPattern(t, `segment\..*`), mustPattern(t, "delete.retention.ms")}},
			want:  ""},
		{name: "exclude wins over include",
			src:   sourceDefaults(cfg("min.insync.replicas", "2", override)),
			dst:   mirrorOK(),
			rules: Rules{Include: []string{"min.insync.replicas"}, Exclude: []*regexp.Regexp{mustPattern(t, "min.insync.replicas")}},
			want:  ""},
		{name: "exclude can stop a ByValue key",
			src:   sourceDefaults(cfg("retention.ms", "1", override)),
			dst:   mirrorOK(),
			rules: Rules{Exclude: []*regexp.Regexp{mustPattern(t, "retention.ms")}},
			want:  ""},
		{name: "exclude is anchored: retention.ms does not exclude local.retention.ms's neighbour retention.bytes",
			src:   sourceDefaults(cfg("retention.bytes", "1000", override)),
			dst:   mirrorOK(),
			rules: Rules{Exclude: []*regexp.Regexp{mustPattern(t, "retention.ms")}},
			want:  "retention.bytes=1000"},
		{name: "include cannot unpin",
			src:   sourceDefaults(cfg("compression.type", "zstd", override)),
			dst:   mirrorOK(),
			rules: Rules{Include: []string{"compression.type"}},
			want:  ""},
		{name: "a sensitive setting whose value is hidden is left alone",
			src:  sourceDefaults(kadm.Config{Key: "some.secret", Source: override, Sensitive: true}),
			dst:  mirrorOK(kadm.Config{Key: "other.secret", Source: override, Sensitive: true}),
			want: ""},
		{name: "several at once, in key order",
			src: sourceDefaults(
				cfg("retention.ms", "7200000", override), cfg("max.message.bytes", "2097152", override),
				cfg("min.compaction.lag.ms", "5000", override), cfg("min.insync.replicas", "2", override),
			),
			dst:  mirrorOK(cfg("segment.ms", "3600000", override), cfg("min.compaction.lag.ms", "10", override)),
			want: "max.message.bytes=2097152 min.compaction.lag.ms=5000 retention.ms=7200000 -segment.ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Describe(Plan(tc.src, tc.dst, tc.rules))
			if got != tc.want {
				t.Errorf("Plan:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// Guards that a plan applied to the destination leaves nothing for the next
// round: the sync converges in one round and does not flap.
func TestPlanConverges(t *testing.T) {
	src := sourceDefaults(
		cfg("retention.ms", "7200000", override), cfg("segment.ms", "3600000", override),
		cfg("message.timestamp.type", "LogAppendTime", override), cfg("min.insync.replicas", "2", override),
	)
	dst := mirrorOK(cfg("delete.retention.ms", "1", override), cfg("compression.type", "gzip", override))
	ops := Plan(src, dst, Rules{})
	byKey := map[string]kadm.Config{}
	for _, c := range dst {
		byKey[c.Key] = c
	}
	for _, op := range ops {
		if op.Op == kadm.DeleteConfig {
			delete(byKey, op.Name)
			continue
		}
		byKey[op.Name] = kadm.Config{Key: op.Name, Value: op.Value, Source: override}
	}
	var after []kadm.Config
	for _, c := range byKey {
		after = append(after, c)
	}
	if again := Plan(src, after, Rules{}); len(again) != 0 {
		t.Errorf("second round after %s: %s", Describe(ops), Describe(again))
	}
}

// Guards the settings of a topic the link creates: the pins and the
// source's ByValue values (its broker defaults too), none of the other
// overrides (they follow with the first sync, where a refusal is that
// topic's alone).
func TestCreateConfigs(t *testing.T) {
	src := sourceDefaults(
		cfg("cleanup.policy", "compact", brokerSet), cfg("retention.ms", "3600000", override),
		cfg("message.timestamp.type", "LogAppendTime", override), cfg("segment.ms", "1000", override),
		cfg("min.insync.replicas", "2", override),
	)
	got := CreateConfigs(src, Rules{Exclude: []*regexp.Regexp{mustPattern(t, "retention.bytes")}})
	want := map[string]string{
		"compression.type": "producer", "message.timestamp.type": "CreateTime",
		"cleanup.policy": "compact", "retention.ms": "3600000", "max.message.bytes": "1048588",
	}
	if len(got) != len(want) {
		t.Errorf("CreateConfigs: %d settings, want %d: %v", len(got), len(want), got)
	}
	for k, v := range want {
		if got[k] == nil || *got[k] != v {
			t.Errorf("CreateConfigs[%s] = %v, want %s", k, got[k], v)
		}
	}
}

// Guards the default exclusions' patterns: each is anchored and matches
// the settings it names, and none covers a setting that should follow.
func TestDefaultExclusion(t *testing.T) {
	for key, excluded := range map[string]bool{
		"min.insync.replicas": true, "unclean.leader.election.enable": true,
		"leader.replication.throttled.replicas": true, "follower.replication.throttled.replicas": true,
		"confluent.placement.constraints": true, "confluent.tier.enable": true,
		"remote.storage.enable": true, "local.retention.ms": true, "local.retention.bytes": true,
		"remote.log.copy.disable": true, "remote.log.delete.on.disable": true, "remote.copy.lag.ms": true, "remote.copy.lag.bytes": true,
		"errors.deadletterqueue.group.enable": true, "max.decompressed.message.bytes": false,
		"message.timestamp.before.max.ms": true, "message.timestamp.after.max.ms": true,
		"retention.ms": false, "retention.bytes": false, "segment.ms": false, "cleanup.policy": false,
		"min.compaction.lag.ms": false, "max.compaction.lag.ms": false, "delete.retention.ms": false,
		"xmin.insync.replicas": false, "min.insync.replicasx": false,
	} {
		if e, got := DefaultExclusion(key); got != excluded {
			t.Errorf("DefaultExclusion(%s) = %v, want %v", key, got, excluded)
		} else if got && e.Name() != key && e.Name() != "confluent.*" && e.Name() != "remote.*" {
			t.Errorf("DefaultExclusion(%s).Name() = %s", key, e.Name())
		}
		if got := (Rules{}).Synced(key); got == excluded {
			t.Errorf("Synced(%s) = %v, want %v", key, got, !excluded)
		}
	}
}

func mustPattern(t *testing.T, expr string) *regexp.Regexp {
	t.Helper()
	re, err := Pattern(expr)
	if err != nil {
		t.Fatal(err)
	}
	return re
}
