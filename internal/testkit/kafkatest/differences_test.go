package kafkatest_test

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/internal/testkit/batchtest"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
)

// The tests here pin down where kfake differs from Apache Kafka in ways
// mirrord's tests meet (docs/kafka-differences.md). Each asserts kfake's
// behaviour as it is: when kfake changes, the test fails and the document
// and the tests that work around the difference are due for a look.

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// LogAppendTime: Kafka stamps a batch by the topic's
// message.timestamp.type, rewrites only the max timestamp and the type bit
// and recomputes the CRC, so the records keep their create times
// (LogValidator). kfake stamps by the batch's own type bit, ignoring the
// topic config; overwrites the first timestamp too (losing the create
// times); and keeps the CRC the producer sent, which no longer matches,
// so a consumer that checks CRCs rejects the batch. Scenarios with a
// LogAppendTime source therefore run on real Kafka only.
func TestKfakeLogAppendTime(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := kafkatest.NewCluster(t, kafkatest.SourceClusterID)
	cl := kafkatest.Client(t, c)
	adm := kadm.NewClient(cl)
	lat := "LogAppendTime"
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"message.timestamp.type": &lat}, "stamped"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "plain"); err != nil {
		t.Fatal(err)
	}

	// The topic config: a plain batch stays CreateTime.
	created := time.UnixMilli(1_700_000_000_000)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "stamped", Value: []byte("v"), Timestamp: created}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	b := fetchFirst(ctx, t, cl, "stamped", 0)
	if b.Attributes&0x08 != 0 || b.FirstTimestamp != created.UnixMilli() {
		t.Errorf("kfake now honours message.timestamp.type=LogAppendTime (attributes %#x, first timestamp %d)", b.Attributes, b.FirstTimestamp)
	}

	// The type bit: kfake stamps, overwriting the first timestamp, and
	// the CRC goes stale.
	raw := batchtest.Build(batchtest.Spec{PID: -1, Epoch: -1, BaseSequence: -1, FirstTimestamp: created.UnixMilli(), LogAppendTime: 1,
		Records: []batchtest.Record{{Value: []byte("a"), OffsetDelta: -1}, {Value: []byte("b"), TimestampDelta: 5, OffsetDelta: -1}}})
	produceRaw(ctx, t, cl, "plain", raw)
	b = fetchFirst(ctx, t, cl, "plain", 0)
	if b.Attributes&0x08 == 0 {
		t.Fatalf("kfake did not stamp a batch with the LogAppendTime bit (attributes %#x)", b.Attributes)
	}
	if b.FirstTimestamp == created.UnixMilli() {
		t.Errorf("kfake now keeps the first timestamp of a LogAppendTime batch, as Kafka does")
	}
	enc := b.AppendTo(nil)
	if b.CRC == int32(crc32.Checksum(enc[21:], crc32c)) {
		t.Errorf("kfake now recomputes the CRC of a batch it stamps, as Kafka does")
	}
}

// produceRaw appends one raw batch (acks=all).
func produceRaw(ctx context.Context, t *testing.T, cl *kgo.Client, topic string, batch []byte) {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 10_000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic, rt.TopicID = topic, topicID(ctx, t, cl, topic)
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if err := kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode); err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
}

// fetchFirst returns the first batch of a partition, as stored.
func fetchFirst(ctx context.Context, t *testing.T, cl *kgo.Client, topic string, p int32) kmsg.RecordBatch {
	t.Helper()
	return fetchFrom(ctx, t, cl, topic, p, 0)
}

// fetchFrom returns the batch of a partition that holds offset, as stored.
func fetchFrom(ctx context.Context, t *testing.T, cl *kgo.Client, topic string, p int32, offset int64) kmsg.RecordBatch {
	t.Helper()
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID, req.MaxWaitMillis, req.MaxBytes, req.SessionEpoch = -1, 100, 1<<20, -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = topic, topicID(ctx, t, cl, topic)
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.PartitionMaxBytes, rp.FetchOffset = p, 1<<20, offset
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	part := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(part.ErrorCode); err != nil {
		t.Fatalf("fetch %s[%d]: %v", topic, p, err)
	}
	if len(part.RecordBatches) < 12 {
		t.Fatalf("fetch %s[%d]: no batch", topic, p)
	}
	n := int(binary.BigEndian.Uint32(part.RecordBatches[8:])) + 12
	var b kmsg.RecordBatch
	if err := b.ReadFrom(part.RecordBatches[:n]); err != nil {
		t.Fatal(err)
	}
	return b
}

// topicID is a topic's ID: the newest Produce and Fetch versions name
// topics by ID.
func topicID(ctx context.Context, t *testing.T, cl *kgo.Client, topic string) [16]byte {
	t.Helper()
	td, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	return td[topic].ID
}

// Log compaction: Kafka's cleaner keeps a cut batch's codec and offset range
// (its last offset delta) and never moves the log start offset. kfake's
// Compact rewrites a cut batch uncompressed, shrinks its last offset delta
// to its last surviving record, drops emptied batches and moves the log
// start offset past them. Both leave the last batch alone (kfake: the
// partition's last batch, which it takes for the active segment). mirrord recognises its batches either way
// (twin.Same: identity by header, records by content; docs/
// kafka-differences.md #4).
func TestKfakeCompaction(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := kafkatest.NewCluster(t, kafkatest.SourceClusterID)
	cl := kafkatest.Client(t, c)
	adm := kadm.NewClient(cl)
	compact := "compact"
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": &compact}, "kv"); err != nil {
		t.Fatal(err)
	}
	batch := func(keys ...string) []byte {
		var rs []batchtest.Record
		for _, k := range keys {
			rs = append(rs, batchtest.Record{Key: []byte(k), Value: []byte("v-" + k), OffsetDelta: -1})
		}
		return batchtest.Build(batchtest.Spec{PID: -1, Epoch: -1, BaseSequence: -1, Codec: 3, FirstTimestamp: time.Now().UnixMilli(), Records: rs})
	}
	produceRaw(ctx, t, cl, "kv", batch("a", "b"))      // 0-1: emptied by the last batch
	produceRaw(ctx, t, cl, "kv", batch("c", "d", "a")) // 2-4: its last record overwritten
	produceRaw(ctx, t, cl, "kv", batch("a", "b"))      // 5-6
	produceRaw(ctx, t, cl, "kv", batch("z"))           // 7: the active batch, never cleaned
	c.Compact()

	starts, err := adm.ListStartOffsets(ctx, "kv")
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := starts.Lookup("kv", 0); s.Offset != 2 {
		t.Errorf("kfake's log start after compaction is %d; it moved it past the emptied batch to 2 (Kafka keeps 0)", s.Offset)
	}
	b := fetchFrom(ctx, t, cl, "kv", 0, 2)
	if b.FirstOffset != 2 || b.NumRecords != 2 {
		t.Fatalf("first batch after compaction: base %d, %d records; want the cut batch at 2 with 2 records", b.FirstOffset, b.NumRecords)
	}
	if b.Attributes&0x07 != 0 {
		t.Errorf("kfake now keeps the codec of a cut batch (attributes %#x), as Kafka does", b.Attributes)
	}
	if b.LastOffsetDelta != 1 {
		t.Errorf("kfake now keeps the last offset delta of a cut batch (%d), as Kafka does (2)", b.LastOffsetDelta)
	}
}

// Time retention: Kafka deletes whole segments from the oldest on, while
// the segment's largest timestamp is older than retention.ms, and stops at
// the first that is not. kfake applies retention.ms batch by batch (on
// ApplyRetention, on Compact and on its cleaner's ticker) and moves the log
// start past the last batch older than retention.ms, past newer batches
// before it too. Retention scenarios run on Kafka
// (docs/kafka-differences.md #5).
func TestKfakeRetention(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := kafkatest.NewCluster(t, kafkatest.SourceClusterID)
	cl := kafkatest.Client(t, c)
	adm := kadm.NewClient(cl)
	day := "86400000"
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"retention.ms": &day}, "r"); err != nil {
		t.Fatal(err)
	}
	at := func(ts int64) []byte {
		return batchtest.Build(batchtest.Spec{PID: -1, Epoch: -1, BaseSequence: -1, FirstTimestamp: ts, Records: []batchtest.Record{{Value: []byte("v"), OffsetDelta: -1}}})
	}
	now := time.Now().UnixMilli()
	produceRaw(ctx, t, cl, "r", at(now))              // 0: new
	produceRaw(ctx, t, cl, "r", at(now-2*86_400_000)) // 1: older than retention.ms
	produceRaw(ctx, t, cl, "r", at(now))              // 2: new
	c.ApplyRetention()
	starts, err := adm.ListStartOffsets(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := starts.Lookup("r", 0); s.Offset != 2 {
		t.Errorf("kfake's log start after retention is %d; it moved it past the old batch at 1, and the new one before it, to 2 (Kafka deletes from the oldest segment and stops at the first new one: 0)", s.Offset)
	}
}

// Topic settings: Kafka validates every key and value of an
// IncrementalAlterConfigs (an unknown key or a value out of range is
// INVALID_CONFIG for that topic; segment.bytes is at least 1 MiB since
// Kafka 4.0) and describes every topic setting it has (37 on 4.4.0). kfake
// accepts any key with any value and describes only the defaults of the
// eleven settings it knows, plus whatever was set. mirrord's config sync
// tests therefore answer INVALID_CONFIG through kfake's request controls
// (link TestConfigSyncRefused), and check the full list of settings on
// real Kafka only (link TestConfigSyncKnowsKafkaSettings).
func TestKfakeTopicConfigs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := kafkatest.NewCluster(t, kafkatest.SourceClusterID)
	adm := kadm.NewClient(kafkatest.Client(t, c))
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "cfg"); err != nil {
		t.Fatal(err)
	}
	resp, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{
		{Op: kadm.SetConfig, Name: "segment.bytes", Value: new("1")},
		{Op: kadm.SetConfig, Name: "no.such.setting", Value: new("x")},
	}, "cfg")
	if err == nil {
		err = resp[0].Err
	}
	if err != nil {
		t.Fatalf("kfake refused what it used to accept (Kafka refuses it with INVALID_CONFIG): %v", err)
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, "cfg")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]kadm.Config{}
	for _, cfg := range rcs[0].Configs {
		got[cfg.Key] = cfg
	}
	if v := got["no.such.setting"]; v.Value == nil || *v.Value != "x" || v.Source != kmsg.ConfigSourceDynamicTopicConfig {
		t.Errorf("no.such.setting: %+v, want the value kfake accepted, as an override", v)
	}
	if _, ok := got["segment.index.bytes"]; ok || len(got) > 14 {
		t.Errorf("kfake describes %d settings (segment.index.bytes among them: %v); it used to describe only the eleven it knows plus those set", len(got), ok)
	}
}
