package link

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/internal/testkit/mirrortest"
	"github.com/seed83556561/mirrord/internal/topicconfig"
	"github.com/seed83556561/mirrord/statestore"
)

// topicSettings are a topic's settings as DescribeConfigs answers them,
// by key.
type topicSettings map[string]kadm.Config

// override is the topic's own value of key ("" and false when it has
// none: the broker's default applies).
func (s topicSettings) override(key string) (string, bool) {
	c, ok := s[key]
	if !ok || c.Source != kmsg.ConfigSourceDynamicTopicConfig || c.Value == nil {
		return "", false
	}
	return *c.Value, true
}

// value is the topic's effective value of key.
func (s topicSettings) value(key string) string {
	if c, ok := s[key]; ok && c.Value != nil {
		return *c.Value
	}
	return ""
}

func describeSettings(t *testing.T, c *cluster, topic string) topicSettings {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rcs, err := c.Admin.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatalf("describe the configs of %s on %s: %v", topic, c.Name, err)
	}
	rc, err := rcs.On(topic, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		t.Fatalf("describe the configs of %s on %s: %v", topic, c.Name, err)
	}
	out := topicSettings{}
	for _, cfg := range rc.Configs {
		out[cfg.Key] = cfg
	}
	return out
}

// alterSettings changes a topic's settings (incrementally) as an operator
// would with kafka-configs.sh.
func alterSettings(t *testing.T, c *cluster, topic string, ops ...kadm.AlterConfig) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Admin.AlterTopicConfigs(ctx, ops, topic)
	if err == nil {
		var r kadm.AlterConfigsResponse
		r, err = resp.On(topic, nil)
		if err == nil {
			err = r.Err
		}
	}
	if err != nil {
		t.Fatalf("alter the configs of %s on %s: %v", topic, c.Name, err)
	}
}

func set(key, value string) kadm.AlterConfig {
	return kadm.AlterConfig{Op: kadm.SetConfig, Name: key, Value: new(value)}
}

func unset(key string) kadm.AlterConfig { return kadm.AlterConfig{Op: kadm.DeleteConfig, Name: key} }

// waitSettings waits until check finds nothing wrong with the topic's
// settings at c (it returns what is wrong, or "").
func waitSettings(t *testing.T, c *cluster, topic string, within time.Duration, check func(topicSettings) string) topicSettings {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		s := describeSettings(t, c, topic)
		wrong := check(s)
		if wrong == "" {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("topic %s on %s after %s: %s", topic, c.Name, within, wrong)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// wants checks overrides: each key to its value, "-" for no override, and
// "=v" for the value v whatever its source (a broker default will do).
func wants(want map[string]string) func(topicSettings) string {
	return func(s topicSettings) string {
		var wrong []string
		for k, w := range want {
			got, ok := s.override(k)
			switch {
			case strings.HasPrefix(w, "="):
				if v := s.value(k); v != w[1:] {
					wrong = append(wrong, fmt.Sprintf("%s is %q, want %s", k, v, w[1:]))
				}
			case w == "-" && ok:
				wrong = append(wrong, fmt.Sprintf("%s has override %s, want none", k, got))
			case w != "-" && (!ok || got != w):
				wrong = append(wrong, fmt.Sprintf("%s override %q (set %v), want %s", k, got, ok, w))
			}
		}
		return strings.Join(wrong, "; ")
	}
}

func topicStatus(st Status, dst string) (TopicConfigStatus, bool) {
	if st.ConfigSync == nil {
		return TopicConfigStatus{}, false
	}
	for _, ts := range st.ConfigSync.Topics {
		if ts.DestinationTopic == dst {
			return ts, true
		}
	}
	return TopicConfigStatus{}, false
}

// Guards topic config sync end to end (issue 25, item 2): a mirror the link
// created takes its source's overrides and follows their later changes,
// additions and deletions within a round; LogAppendTime at the source stays
// CreateTime and compression.type stays producer at the destination;
// min.insync.replicas (tied to the cluster) is not copied; a destination
// topic an operator created beforehand is left alone; and a new agent
// process knows from the state topic which mirrors the link created.
func TestConfigSync(t *testing.T) {
	scenario(t, func(t *testing.T, e *env) { testConfigSync(t, e, false) })
}

// The same in transactional delivery (issue 22, item 5): the session
// offers config sync its topics, and records the topics it creates in its
// own transactions.
func TestConfigSyncTransactional(t *testing.T) {
	scenario(t, func(t *testing.T, e *env) { testConfigSync(t, e, true) })
}

func testConfigSync(t *testing.T, e *env, txn bool) {
	f := e.mirrored(t, "cfgsync",
		srcTopic("own", 2).with(map[string]*string{
			"retention.ms": new("3600000"), "segment.ms": new("7200000"), "min.insync.replicas": new("1"),
			"compression.type": new("zstd"),
		}),
		// kfake stamps LogAppendTime with a stale CRC
		// (TestLogAppendTimeSource): this topic carries no data.
		srcTopic("stamped", 1).with(map[string]*string{"message.timestamp.type": new("LogAppendTime")}),
		srcTopic("op", 1).with(map[string]*string{"retention.ms": new("7200000"), "segment.ms": new("3600000")}),
	)
	own, stamped, op := f.topic("own"), f.topic("stamped"), f.topic("op")
	// The operator's own destination topic, created beforehand.
	f.dst.CreateTopic(t, op, 1, map[string]*string{"retention.ms": new("1000000")})
	f.cfg.Link.ConfigSyncInterval = 300 * time.Millisecond
	if txn {
		f.cfg.Link.Delivery = statestore.DeliveryTransactional
	}
	f.load(idempotent, 0, "before", 40, "own", "op")

	l := f.start("cfgsync")
	l.waitState(t, Mirroring, 60*time.Second)
	const within = 30 * time.Second
	s := waitSettings(t, f.dst, own, within, wants(map[string]string{
		"retention.ms": "3600000", "segment.ms": "7200000", "min.insync.replicas": "-",
		"compression.type": "producer", "message.timestamp.type": "CreateTime",
	}))
	t.Logf("%s: mirror of %s after the first round: retention.ms=%s segment.ms=%s min.insync.replicas=%s (%v)", e.b, own,
		s.value("retention.ms"), s.value("segment.ms"), s.value("min.insync.replicas"), s["min.insync.replicas"].Source)
	waitSettings(t, f.dst, stamped, within, wants(map[string]string{"message.timestamp.type": "CreateTime", "compression.type": "producer"}))

	// Changed, added and deleted at the source: the mirror follows.
	alterSettings(t, f.src, own, set("retention.ms", "7200000"), set("max.message.bytes", "2097152"), unset("segment.ms"))
	alterSettings(t, f.src, stamped, set("delete.retention.ms", "3600000"))
	waitSettings(t, f.dst, own, within, wants(map[string]string{
		"retention.ms": "7200000", "max.message.bytes": "2097152", "segment.ms": "-", "min.insync.replicas": "-",
		"compression.type": "producer", "message.timestamp.type": "CreateTime",
	}))
	waitSettings(t, f.dst, stamped, within, wants(map[string]string{"delete.retention.ms": "3600000", "message.timestamp.type": "CreateTime"}))

	// The operator's topic keeps its own settings; the link still
	// mirrors into it.
	if s := describeSettings(t, f.dst, op); s.value("retention.ms") != "1000000" {
		t.Errorf("operator's topic %s: retention.ms %s, want its own 1000000", op, s.value("retention.ms"))
	} else if v, ok := s.override("segment.ms"); ok {
		t.Errorf("operator's topic %s got segment.ms=%s from its source", op, v)
	}
	if txn {
		f.waitSameCommitted(60*time.Second, "own", "op")
	} else {
		f.waitMirrored(60*time.Second, "own", "op")
	}

	st := l.Status()
	for dst, want := range map[string]string{op: TopicConfigLeftAlone, own: "", stamped: ""} {
		ts, ok := topicStatus(st, dst)
		switch {
		case !ok:
			t.Errorf("status config_sync has no topic %s: %+v", dst, st.ConfigSync)
		case want != "" && ts.State != want, want == "" && ts.State != TopicConfigSynced && ts.State != TopicConfigUpToDate:
			t.Errorf("status config_sync topic %s: %+v, want %s", dst, ts, want)
		}
	}
	c := st.Counters
	if c.Get(ConfigSyncRounds) == 0 || c.Get(ConfigsSet) < 4 || c.Get(ConfigsDeleted) < 1 || c.Get(ConfigSyncErrors) != 0 {
		t.Errorf("counters %s: want rounds, at least 4 settings set (segment.ms, retention.ms, max.message.bytes, delete.retention.ms), 1 deleted, no error", c)
	}
	if st.ConfigSync.LastSuccess.IsZero() || st.ConfigSync.LastError != "" || st.ConfigSync.Interval != 300*time.Millisecond {
		t.Errorf("config_sync status %+v", st.ConfigSync)
	}
	js, _ := json.Marshal(st)
	for _, k := range []string{`"config_sync":{`, `"config_sync_configs_set":`, `"config_sync_configs_deleted":`, `"config_sync_rounds":`, `"config_sync_errors":0`, `"state":"left_alone"`} {
		if !strings.Contains(string(js), k) {
			t.Errorf("status JSON lacks %s: %s", k, js)
		}
	}

	// The state topic records which mirrors the link created.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	view, err := replayState(ctx, f.dst, f.stateTopic())
	if err != nil {
		t.Fatal(err)
	}
	recorded := map[string]string{}
	for k, v := range view.Topics {
		if k.LinkName == f.cfg.Link.Name {
			recorded[v.Topic] = v.SourceTopic
		}
	}
	if len(recorded) != 2 || recorded[own] != own || recorded[stamped] != stamped {
		t.Errorf("state topic records created topics %v, want %s and %s (not the operator's %s)", recorded, own, stamped, op)
	}

	// A new process (the link's state in memory gone) knows its
	// mirrors from the state topic and keeps them in line.
	l.stop(t, false)
	alterSettings(t, f.src, own, set("retention.ms", "10800000"))
	alterSettings(t, f.src, op, set("retention.ms", "10800000"))
	l2 := f.start("cfgsync-2")
	l2.waitState(t, Mirroring, 60*time.Second)
	waitSettings(t, f.dst, own, within, wants(map[string]string{"retention.ms": "10800000", "max.message.bytes": "2097152"}))
	time.Sleep(3 * f.cfg.Link.ConfigSyncInterval) // rounds that would wrongly touch the operator's topic
	if v, _ := describeSettings(t, f.dst, op).override("retention.ms"); v != "1000000" {
		t.Errorf("operator's topic %s: retention.ms %s after a restart, want its own 1000000", op, v)
	}
}

// Guards the opt-in: with config_sync { all_topics = true } a destination
// topic the operator created beforehand is managed too: its overrides are
// replaced by its source's.
func TestConfigSyncAllTopics(t *testing.T) {
	f := onKfake(t).mirrored(t, "cfgall", srcTopic("op", 1).with(map[string]*string{"retention.ms": new("7200000")}))
	op := f.topic("op")
	f.dst.CreateTopic(t, op, 1, map[string]*string{"retention.ms": new("1000000"), "segment.ms": new("3600000")})
	f.cfg.Link.ConfigSyncInterval = 300 * time.Millisecond
	f.cfg.Link.ConfigSync.AllTopics = true
	l := f.start("cfgall")
	l.waitState(t, Mirroring, 30*time.Second)
	waitSettings(t, f.dst, op, 20*time.Second, wants(map[string]string{
		"retention.ms": "7200000", "segment.ms": "-", "compression.type": "=producer", "message.timestamp.type": "=CreateTime",
	}))
	if ts, ok := topicStatus(l.Status(), op); !ok || (ts.State != TopicConfigSynced && ts.State != TopicConfigUpToDate) {
		t.Errorf("status config_sync topic %s: %+v", op, ts)
	}
}

// Guards what a refused or invalid change does: the topic's error names the
// cluster, the principal, the operation and the topic (a refusal) or the
// settings and the broker's reason (INVALID_CONFIG); the other topics sync,
// the link keeps mirroring, and the error counter counts. Kafka answers
// both per topic; kfake validates no topic setting (docs/kafka-differences.md),
// so its request controls answer them here.
func TestConfigSyncRefused(t *testing.T) {
	f := onKfake(t).mirrored(t, "cfgref",
		srcTopic("denied", 1), srcTopic("invalid", 1), srcTopic("fine", 1))
	denied, invalid, fine := f.topic("denied"), f.topic("invalid"), f.topic("fine")
	f.cfg.Link.ConfigSyncInterval = 300 * time.Millisecond
	f.cfg.Destination.Principal = "User:mirror"
	f.dst.Fake.ControlKey(int16(kmsg.IncrementalAlterConfigs), func(req kmsg.Request) (kmsg.Response, error, bool) {
		f.dst.Fake.KeepControl()
		r := req.(*kmsg.IncrementalAlterConfigsRequest)
		resp := r.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
		handled := false
		for _, rr := range r.Resources {
			var (
				code int16
				msg  *string
			)
			switch rr.ResourceName {
			case denied:
				code = kerr.TopicAuthorizationFailed.Code
			case invalid:
				code, msg = kerr.InvalidConfig.Code, new("Invalid value 1 for configuration segment.bytes: Value must be at least 1048576")
			default:
				continue
			}
			handled = true
			rs := kmsg.NewIncrementalAlterConfigsResponseResource()
			rs.ResourceName, rs.ResourceType, rs.ErrorCode, rs.ErrorMessage = rr.ResourceName, rr.ResourceType, code, msg
			resp.Resources = append(resp.Resources, rs)
		}
		return resp, nil, handled
	})
	l := f.start("cfgref")
	l.waitState(t, Mirroring, 30*time.Second)
	for _, topic := range []string{denied, invalid, fine} {
		alterSettings(t, f.src, topic, set("segment.ms", "3600000"))
	}
	waitSettings(t, f.dst, fine, 20*time.Second, wants(map[string]string{"segment.ms": "3600000"}))
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := l.Status()
		d, _ := topicStatus(st, denied)
		i, _ := topicStatus(st, invalid)
		if d.State == TopicConfigFailed && i.State == TopicConfigFailed {
			wantD := fmt.Sprintf(`destination cluster "dst" does not allow User:mirror AlterConfigs on Topic:%s (config sync brings the source topic's settings to its mirror (IncrementalAlterConfigs); or turn it off with config_sync { enabled = false }`, denied)
			if !strings.Contains(d.Error, wantD) || !strings.Contains(d.Error, "TOPIC_AUTHORIZATION_FAILED") {
				t.Errorf("refused topic's error:\n%s\nwant it to contain\n%s", d.Error, wantD)
			}
			wantI := fmt.Sprintf(`destination cluster dst refuses segment.ms=3600000 on topic %s: INVALID_CONFIG`, invalid)
			if !strings.Contains(i.Error, wantI) || !strings.Contains(i.Error, "Value must be at least 1048576") {
				t.Errorf("invalid topic's error:\n%s\nwant it to contain\n%s and the broker's message", i.Error, wantI)
			}
			if st.State != Mirroring || st.LastError != "" {
				t.Errorf("link state %s, last error %q: config sync errors must not touch mirroring", st.State, st.LastError)
			}
			if st.Counters.Get(ConfigSyncErrors) < 2 {
				t.Errorf("config_sync_errors %d, want at least 2", st.Counters.Get(ConfigSyncErrors))
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("config sync did not report both topics failed: %+v", st.ConfigSync)
		}
		time.Sleep(100 * time.Millisecond)
	}
	f.load(idempotent, 0, "after", 20)
	f.waitMirrored(30 * time.Second)
}

// Guards that only the live session changes settings: a paused link's
// config sync is idle and changes nothing.
func TestConfigSyncOnlyWhileLive(t *testing.T) {
	for _, d := range []statestore.Delivery{statestore.DeliveryPreserve, statestore.DeliveryTransactional} {
		t.Run(d.String(), func(t *testing.T) { testConfigSyncOnlyWhileLive(t, d) })
	}
}

func testConfigSyncOnlyWhileLive(t *testing.T, d statestore.Delivery) {
	f := onKfake(t).mirrored(t, "cfglive", srcTopic("t", 1))
	topic := f.topic("t")
	f.cfg.Link.Delivery = d
	f.cfg.Link.ConfigSyncInterval = 200 * time.Millisecond
	l := f.start("cfglive")
	l.waitState(t, Mirroring, 30*time.Second)
	l.Pause()
	l.waitState(t, Paused, 30*time.Second)
	alterSettings(t, f.src, topic, set("segment.ms", "3600000"))
	deadline := time.Now().Add(10 * time.Second)
	for l.Status().ConfigSync.Idle == "" {
		if time.Now().After(deadline) {
			t.Fatalf("config sync of a paused link is not idle: %+v", l.Status().ConfigSync)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(5 * f.cfg.Link.ConfigSyncInterval)
	if v, ok := describeSettings(t, f.dst, topic).override("segment.ms"); ok {
		t.Fatalf("a paused link's config sync set segment.ms=%s", v)
	}
	l.Resume()
	l.waitState(t, Mirroring, 30*time.Second)
	waitSettings(t, f.dst, topic, 20*time.Second, wants(map[string]string{"segment.ms": "3600000"}))
}

// followed are the topic settings of Apache Kafka 3.9 and 4.x
// (https://kafka.apache.org/40/configuration/topic-level-configs) that
// follow as overrides: every other one is pinned, followed by value, or
// excluded by default (package topicconfig).
var followed = []string{
	"compression.gzip.level", "compression.lz4.level", "compression.zstd.level",
	"delete.retention.ms", "file.delete.delay.ms", "flush.messages", "flush.ms", "index.interval.bytes",
	"max.compaction.lag.ms", "max.decompressed.message.bytes", "min.cleanable.dirty.ratio", "min.compaction.lag.ms", "preallocate",
	"segment.bytes", "segment.index.bytes", "segment.jitter.ms", "segment.ms",
}

// Guards the classification against a Kafka release that adds a topic
// setting: every setting the broker describes for a topic is one that
// config sync was decided for (pinned, by value, excluded by default, or
// followed as an override). A new one fails here until it is placed.
func TestConfigSyncKnowsKafkaSettings(t *testing.T) {
	mirrortest.RealOnly(t, func(t *testing.T, b mirrortest.Backend) {
		e := &env{b: b, n: mirrortest.NamesFor(t, b)}
		c := e.cluster(t, "src", kafkatest.SourceClusterID)
		topic := e.topic("described")
		c.CreateTopic(t, topic, 1, nil)
		var unknown, keys []string
		for k := range describeSettings(t, c, topic) {
			keys = append(keys, k)
			_, pinned := topicconfig.Pinned[k]
			_, excluded := topicconfig.DefaultExclusion(k)
			if !pinned && !excluded && !slices.Contains(topicconfig.ByValue, k) && !slices.Contains(followed, k) {
				unknown = append(unknown, k)
			}
		}
		slices.Sort(keys)
		t.Logf("Kafka %s describes %d topic settings: %s", b.Kafka, len(keys), strings.Join(keys, " "))
		if len(unknown) > 0 {
			slices.Sort(unknown)
			t.Errorf("Kafka %s has topic settings config sync was not decided for: %s (place each in topicconfig: follow, exclude by default, or pin)", b.Kafka, strings.Join(unknown, ", "))
		}
	})
}
