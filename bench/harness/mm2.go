package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/internal/testkit/realkafka"
	"github.com/seed83556561/mirrord/statestore"
)

// MM2Version is the MirrorMaker 2 of the kafka backend: the newest
// org.apache.kafka:connect-mirror that Maven Central serves (it publishes
// no connect-mirror 4.4.0, the brokers' version; 4.3.1 clients speak to
// 4.4.0 brokers as any client one minor version older does).
const MM2Version = "4.3.1"

// DefaultMM2Heap is the heap (-Xms and -Xmx) of the MirrorMaker 2 JVM.
const DefaultMM2Heap = "1g"

// MM2Spec is what MirrorMaker 2 in dedicated mode needs on its classpath:
// connect-mirror with its runtime dependencies (connect-runtime with Jetty
// and Jersey for the internal REST server, connect-mirror-client,
// kafka-clients, ...) and the log4j2 backend with the SLF4J binding that
// brokers get (realkafka.BrokerSpec's Extra).
func MM2Spec(version string) realkafka.Spec {
	return realkafka.Spec{
		Name:      "mirrormaker-" + version,
		Artifacts: []realkafka.Artifact{{Group: "org.apache.kafka", Name: "connect-mirror", Version: version}},
		Extra:     realkafka.BrokerSpec(version).Extra,
	}
}

// MM2MainClass is what bin/connect-mirror-maker.sh runs.
const MM2MainClass = "org.apache.kafka.connect.mirror.MirrorMaker"

// MM2Link is one MirrorMaker 2 run: one replication flow from the source
// to the target cluster over one topic.
type MM2Link struct {
	// SourceAlias and TargetAlias are the cluster aliases, fresh per run:
	// they name MirrorMaker's internal topics (mm2-offsets.<source>.internal
	// and the like) and its Connect group, so that no run resumes from
	// another's offsets.
	SourceAlias, TargetAlias string
	Source, Target           []string // bootstrap servers
	Topic                    string   // the source topic; IdentityReplicationPolicy keeps its name
	Codec                    string   // the producer's compression.type: the source topic's codec
	Tasks                    int      // tasks.max
	// ExactlyOnce turns on exactly.once.source.support for the target and
	// the internal REST server it needs in dedicated mode (KIP-710),
	// listening on RESTPort.
	ExactlyOnce bool
	RESTPort    int
	// Extra are more properties, written last (they override the above):
	// "d1.producer.batch.size", say, or with the alias left out,
	// "producer.batch.size", which MM2Config prefixes with the target alias
	// for producer.* and the source alias for consumer.*.
	Extra map[string]string
}

// OffsetsTopic is the Connect offsets topic of the run's worker, on the
// target cluster.
func (l MM2Link) OffsetsTopic() string { return "mm2-offsets." + l.SourceAlias + ".internal" }

// InternalTopics are the topics MirrorMaker creates for the run: the
// worker's three topics on the target and the offset-syncs topic on the
// source.
func (l MM2Link) InternalTopics() (target, source []string) {
	return []string{l.OffsetsTopic(), "mm2-status." + l.SourceAlias + ".internal", "mm2-configs." + l.SourceAlias + ".internal"},
		[]string{"mm2-offset-syncs." + l.TargetAlias + ".internal"}
}

// MM2Config is the connect-mirror-maker.properties of l. MirrorMaker runs
// with its defaults except for what a run needs: the flow and its topic,
// IdentityReplicationPolicy, replication factor 1 (one broker per
// cluster), read_committed at the source, the source topic's codec at the
// target, tasks.max, and exactly-once when asked. Heartbeats and
// checkpoints are off: no consumer group is translated (mirrord and the kgo
// peer translate none either), and only the data flow is measured; the
// source task still emits its offset syncs, as it does by default.
func MM2Config(l MM2Link) string {
	p := map[string]string{
		"clusters":                                        l.SourceAlias + ", " + l.TargetAlias,
		l.SourceAlias + ".bootstrap.servers":              strings.Join(l.Source, ","),
		l.TargetAlias + ".bootstrap.servers":              strings.Join(l.Target, ","),
		l.SourceAlias + "->" + l.TargetAlias + ".enabled": "true",
		l.SourceAlias + "->" + l.TargetAlias + ".topics":  regexp.QuoteMeta(l.Topic),
		"replication.policy.class":                        "org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
		"emit.heartbeats.enabled":                         "false",
		"emit.checkpoints.enabled":                        "false",
		"sync.group.offsets.enabled":                      "false",
		"sync.topic.acls.enabled":                         "false",
		"tasks.max":                                       fmt.Sprint(max(l.Tasks, 1)),
		"replication.factor":                              "1",
		"offset-syncs.topic.replication.factor":           "1",
		"checkpoints.topic.replication.factor":            "1",
		"heartbeats.topic.replication.factor":             "1",
		"offset.storage.replication.factor":               "1",
		"status.storage.replication.factor":               "1",
		"config.storage.replication.factor":               "1",
		l.SourceAlias + ".consumer.isolation.level":       "read_committed",
		l.TargetAlias + ".producer.compression.type":      l.Codec,
	}
	if l.ExactlyOnce {
		p[l.TargetAlias+".exactly.once.source.support"] = "enabled"
		p["dedicated.mode.enable.internal.rest"] = "true"
		p["listeners"] = fmt.Sprintf("http://127.0.0.1:%d", l.RESTPort)
	}
	for k, v := range l.Extra {
		switch {
		case strings.HasPrefix(k, "producer."):
			k = l.TargetAlias + "." + k
		case strings.HasPrefix(k, "consumer."):
			k = l.SourceAlias + "." + k
		}
		p[k] = v
	}
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("# connect-mirror-maker.properties written by mirrord's bench\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "%s = %s\n", k, propEscape(p[k]))
	}
	return b.String()
}

// propEscape escapes a value for java.util.Properties: backslashes (a
// quoted regular expression has them) and line breaks.
func propEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`, "\r", `\r`).Replace(s)
}

// MM2Args is the java command line of MirrorMaker 2 in dedicated mode:
// kafka-run-class.sh's JVM options with heap, the log4j2 configuration and
// the properties file.
func MM2Args(jars *realkafka.Jars, heap, log4j, props string) []string {
	return []string{
		"-Xms" + heap, "-Xmx" + heap,
		"-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
		"-XX:+ExplicitGCInvokesConcurrent", "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
		"-Dlog4j2.configurationFile=" + log4j,
		"-cp", jars.Classpath(), MM2MainClass, props,
	}
}

// mm2Log4j is MirrorMaker's logging: everything at level to stdout, which
// the harness sends to the run's log file.
func mm2Log4j(level string) string {
	lv := map[string]string{"trace": "trace", "debug": "debug", "info": "info", "warn": "warn", "error": "error"}[strings.ToLower(level)]
	if lv == "" {
		lv = "info"
	}
	return `<?xml version="1.0" encoding="UTF-8"?>
<!-- written by mirrord's bench -->
<Configuration status="warn">
  <Appenders>
    <Console name="out" target="SYSTEM_OUT"><PatternLayout pattern="[%d{ISO8601}] %p %m (%c)%n"/></Console>
  </Appenders>
  <Loggers><Root level="` + lv + `"><AppenderRef ref="out"/></Root></Loggers>
</Configuration>
`
}

// connectOffsets follows a Connect offsets topic (read_committed) and keeps
// the last source offset MirrorSourceTask committed per source partition of
// one topic. With exactly-once, a task commits its source offsets in the
// same transaction as the records it produced, so a committed offset says
// that the records up to it are committed at the target; the destination's
// end offsets cannot say so, since they count the transaction markers.
type connectOffsets struct {
	cl    *kgo.Client
	alias string
	topic string
	last  map[int32]int64 // source partition -> last mirrored offset
	// parse reads one record: the source partition and its last
	// mirrored offset (parseConnectOffset unless set).
	parse func(key, value []byte) (int32, int64, bool)
}

// newCheckpointOffsets follows a mirrord-txn run's progress in its state
// topic: the checkpoints it commits in the same transaction as the data
// (read read_committed) say how far each source partition of topic is
// mirrored.
func newCheckpointOffsets(opts []kgo.Opt, stateTopic, topic string) (*connectOffsets, error) {
	o, err := newConnectOffsets(opts, stateTopic, "", topic)
	if err != nil {
		return nil, err
	}
	o.parse = func(key, value []byte) (int32, int64, bool) {
		r, err := statestore.Decode(key, value)
		if err != nil {
			return 0, 0, false
		}
		ck, ok := r.Value.(statestore.CheckpointValue)
		if !ok || ck.SourceTopic != topic {
			return 0, 0, false
		}
		return ck.SourcePartition, ck.SourceNextOffset - 1, true
	}
	return o, nil
}

func newConnectOffsets(opts []kgo.Opt, offsetsTopic, alias, topic string) (*connectOffsets, error) {
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), opts...),
		kgo.ConsumeTopics(offsetsTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.MetadataMinAge(DefaultPollInterval),
	)...)
	if err != nil {
		return nil, fmt.Errorf("connect offsets consumer: %w", err)
	}
	return &connectOffsets{cl: cl, alias: alias, topic: topic, last: map[int32]int64{}}, nil
}

func (o *connectOffsets) close() { o.cl.Close() }

// poll reads what has arrived within ctx.
func (o *connectOffsets) poll(ctx context.Context) {
	fs := o.cl.PollFetches(ctx)
	fs.EachRecord(func(r *kgo.Record) {
		var (
			part int32
			off  int64
			ok   bool
		)
		if o.parse != nil {
			part, off, ok = o.parse(r.Key, r.Value)
		} else {
			part, off, ok = parseConnectOffset(r.Key, r.Value, o.alias, o.topic)
		}
		if ok {
			o.last[part] = max(o.last[part], off)
		}
	})
}

// parseConnectOffset reads one record of a Connect offsets topic written
// by MirrorSourceTask: key ["<connector>",{"cluster":alias,"partition":N,
// "topic":topic}], value {"offset":M} (JsonConverter without schemas). It
// reports false for records of other connectors, clusters or topics, and
// for tombstones.
func parseConnectOffset(key, value []byte, alias, topic string) (int32, int64, bool) {
	var k []json.RawMessage
	if json.Unmarshal(key, &k) != nil || len(k) != 2 {
		return 0, 0, false
	}
	var sp struct {
		Cluster   string `json:"cluster"`
		Partition *int32 `json:"partition"`
		Topic     string `json:"topic"`
	}
	if json.Unmarshal(k[1], &sp) != nil || sp.Cluster != alias || sp.Topic != topic || sp.Partition == nil {
		return 0, 0, false
	}
	var v struct {
		Offset *int64 `json:"offset"`
	}
	if len(value) == 0 || json.Unmarshal(value, &v) != nil || v.Offset == nil {
		return 0, 0, false
	}
	return *sp.Partition, *v.Offset, true
}
