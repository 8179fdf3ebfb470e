package harness

import (
	"strings"
	"testing"

	"github.com/seed83556561/mirrord/bench/load"
)

// TestMM2Config guards the MirrorMaker configuration: the flow, the policy
// that keeps topic names, read_committed at the source, the codec at the
// target, and exactly-once only with the internal REST server it needs.
func TestMM2Config(t *testing.T) {
	l := MM2Link{SourceAlias: "s3", TargetAlias: "d3", Source: []string{"127.0.0.1:1"}, Target: []string{"127.0.0.1:2", "127.0.0.1:3"},
		Topic: "bench.lz4", Codec: "lz4", Tasks: 2, RESTPort: 8083}
	plain := MM2Config(l)
	for _, want := range []string{
		"clusters = s3, d3\n",
		"s3.bootstrap.servers = 127.0.0.1:1\n",
		"d3.bootstrap.servers = 127.0.0.1:2,127.0.0.1:3\n",
		"s3->d3.enabled = true\n",
		`s3->d3.topics = bench\\.lz4` + "\n",
		"replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy\n",
		"s3.consumer.isolation.level = read_committed\n",
		"d3.producer.compression.type = lz4\n",
		"tasks.max = 2\n",
	} {
		if !strings.Contains(plain, want) {
			t.Errorf("config lacks %q:\n%s", want, plain)
		}
	}
	if strings.Contains(plain, "exactly.once") || strings.Contains(plain, "internal.rest") {
		t.Errorf("config without exactly-once mentions it:\n%s", plain)
	}
	l.Extra = map[string]string{"producer.batch.size": "1048576", "consumer.fetch.max.bytes": "1", "tasks.max": "6"}
	tuned := MM2Config(l)
	for _, want := range []string{"d3.producer.batch.size = 1048576\n", "s3.consumer.fetch.max.bytes = 1\n", "tasks.max = 6\n"} {
		if !strings.Contains(tuned, want) {
			t.Errorf("tuned config lacks %q:\n%s", want, tuned)
		}
	}
	l.Extra = nil
	l.ExactlyOnce = true
	eos := MM2Config(l)
	for _, want := range []string{"d3.exactly.once.source.support = enabled\n", "dedicated.mode.enable.internal.rest = true\n", "listeners = http://127.0.0.1:8083\n"} {
		if !strings.Contains(eos, want) {
			t.Errorf("exactly-once config lacks %q:\n%s", want, eos)
		}
	}
}

// TestParseConnectOffset guards the reading of MirrorSourceTask's offsets:
// only the run's cluster alias and topic count, and tombstones are not
// offsets.
func TestParseConnectOffset(t *testing.T) {
	key := `["MirrorSourceConnector",{"cluster":"s3","partition":4,"topic":"bench.none"}]`
	for _, tc := range []struct {
		name       string
		key, value string
		part       int32
		off        int64
		ok         bool
	}{
		{"offset", key, `{"offset":1234}`, 4, 1234, true},
		{"tombstone", key, "", 0, 0, false},
		{"other alias", strings.Replace(key, "s3", "s9", 1), `{"offset":1}`, 0, 0, false},
		{"other topic", strings.Replace(key, "bench.none", "bench.lz4", 1), `{"offset":1}`, 0, 0, false},
		{"not an array", `{"cluster":"s3"}`, `{"offset":1}`, 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, o, ok := parseConnectOffset([]byte(tc.key), []byte(tc.value), "s3", load.TopicName(load.None))
			if p != tc.part || o != tc.off || ok != tc.ok {
				t.Errorf("parseConnectOffset = %d, %d, %v; want %d, %d, %v", p, o, ok, tc.part, tc.off, tc.ok)
			}
		})
	}
}

// TestConnectOffsetsProgress guards the end of an exactly-once run: done
// only when every non-empty partition's last offset is committed.
func TestConnectOffsetsProgress(t *testing.T) {
	top := SourceTopic{Ends: []int64{10, 0, 5}}
	o := &connectOffsets{last: map[int32]int64{0: 9}}
	if have, done := o.progress(top); have != 10 || done {
		t.Errorf("partition 2 missing: %d, %v; want 10, false", have, done)
	}
	o.last[2] = 3
	if have, done := o.progress(top); have != 14 || done {
		t.Errorf("partition 2 at 3: %d, %v; want 14, false", have, done)
	}
	o.last[2] = 4
	if have, done := o.progress(top); have != 15 || !done {
		t.Errorf("all committed: %d, %v; want 15, true", have, done)
	}
}
