package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/statestore"
)

var dumpTopicID = statestore.UUID{0xaa, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}

// writeState commits two state transactions to topic on c with a fixed
// clock.
func writeState(t *testing.T, c *kfake.Cluster, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	now := time.UnixMilli(1_700_000_000_000)
	s, err := statestore.New(statestore.Config{Topic: topic}, statestore.Deps{
		ClientOpts: []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)},
		Now:        func() time.Time { return now },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	sess, err := s.Begin(ctx, "l1", 30*time.Second, statestore.SourceCluster(kafkatest.SourceClusterID))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close(ctx)
	salt := statestore.PIDCollisionKey{TopicID: dumpTopicID, Partition: 2, SourceClusterID: kafkatest.ThirdClusterID, OriginalPID: 5}
	if err := sess.Commit(ctx, statestore.Preparing,
		statestore.Record{Key: statestore.CheckpointKey{LinkName: "l1", TopicID: dumpTopicID, Partition: 2}, Value: statestore.CheckpointValue{SourceTopic: "orders", SourcePartition: 2, SourceNextOffset: 10, DestNextOffset: 12, TimestampMs: 7}},
		statestore.Record{Key: salt, Value: statestore.PIDCollisionValue{Salt: -3, CollidingClusterID: kafkatest.SourceClusterID, TimestampMs: 8}},
	); err != nil {
		t.Fatal(err)
	}
	if err := sess.Commit(ctx, statestore.Mirroring,
		statestore.Record{Key: salt}, // tombstone
		statestore.Record{Key: statestore.PIDResetKey{TopicID: dumpTopicID, Partition: 2}, Value: statestore.PIDResetValue{SourceClusterID: kafkatest.SourceClusterID, TimestampMs: 9}},
	); err != nil {
		t.Fatal(err)
	}
}

var timestampRE = regexp.MustCompile(`"timestamp_ms":\d+`)

// runDump runs the command and returns its output with the record
// timestamps (the producer's clock) masked.
func runDump(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = dispatch(append([]string{"state", "dump"}, args...), &out, &errb)
	return code, timestampRE.ReplaceAllString(out.String(), `"timestamp_ms":T`), errb.String()
}

// TestStateDump guards the operator's view of the state topic: one JSON line
// per committed record with its position, type, key and value (null for a
// tombstone), unknown records shown rather than hidden, and a non-zero exit
// for a record that does not decode.
func TestStateDump(t *testing.T) {
	_, dst := kafkatest.Pair(t)
	writeState(t, dst, statestore.DefaultTopic)
	cl := kafkatest.Client(t, dst)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: statestore.DefaultTopic, Key: []byte{0x00, 0x63}, Value: []byte{0x01}}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := runDump(t, "--bootstrap-servers", strings.Join(dst.ListenAddrs(), ","))
	if code != exitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	// Offsets 3 and 7 are the transactions' commit markers.
	want := `{"partition":0,"offset":0,"timestamp_ms":T,"type":"MirrorCheckpoint","key":{"LinkName":"l1","TopicId":"qgECAwQFBgcICQoLDA0ODw","Partition":2},"value":{"SourceTopic":"orders","SourcePartition":2,"SourceNextOffset":10,"DestNextOffset":12,"TimestampMs":7,"SourceTopicId":"AAAAAAAAAAAAAAAAAAAAAA"}}
{"partition":0,"offset":1,"timestamp_ms":T,"type":"MirrorPidCollision","key":{"TopicId":"qgECAwQFBgcICQoLDA0ODw","Partition":2,"SourceClusterId":"pBtcCqUjQEuSJ4rWvgX2Ow","OriginalPid":5},"value":{"Salt":-3,"CollidingClusterId":"MkU3OEVBNTcwNTJENDM2Qg","TimestampMs":8}}
{"partition":0,"offset":2,"timestamp_ms":T,"type":"MirrorLink","state":"PREPARING","key":{"LinkName":"l1"},"value":{"State":"PREPARING","SessionEpoch":0,"SourceClusterId":"MkU3OEVBNTcwNTJENDM2Qg","DestinationClusterId":"LqsXsMnTTYq0dBuyEJh1_A","LeaseExpiresMs":1700000030000,"TimestampMs":1700000000000,"AppendTimeoutMs":0,"UnresolvedAppends":0}}
{"partition":0,"offset":4,"timestamp_ms":T,"type":"MirrorPidCollision","key":{"TopicId":"qgECAwQFBgcICQoLDA0ODw","Partition":2,"SourceClusterId":"pBtcCqUjQEuSJ4rWvgX2Ow","OriginalPid":5},"value":null}
{"partition":0,"offset":5,"timestamp_ms":T,"type":"MirrorPidReset","key":{"TopicId":"qgECAwQFBgcICQoLDA0ODw","Partition":2},"value":{"SourceClusterId":"MkU3OEVBNTcwNTJENDM2Qg","TimestampMs":9}}
{"partition":0,"offset":6,"timestamp_ms":T,"type":"MirrorLink","state":"MIRRORING","key":{"LinkName":"l1"},"value":{"State":"MIRRORING","SessionEpoch":0,"SourceClusterId":"MkU3OEVBNTcwNTJENDM2Qg","DestinationClusterId":"LqsXsMnTTYq0dBuyEJh1_A","LeaseExpiresMs":1700000030000,"TimestampMs":1700000000000,"AppendTimeoutMs":0,"UnresolvedAppends":0}}
{"partition":0,"offset":8,"timestamp_ms":T,"type":"unknown","value":null,"error":"key record type 99: unknown state record type or version","key_hex":"0063","value_hex":"01"}
`
	if out != want {
		t.Fatalf("dump\n got:\n%s\nwant:\n%s", out, want)
	}

	// A corrupt record is shown and fails the command.
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: statestore.DefaultTopic, Key: []byte{0x00, 0x00, 0x00}, Value: []byte{}}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runDump(t, "--bootstrap-servers", strings.Join(dst.ListenAddrs(), ","))
	wantLast := `{"partition":0,"offset":9,"timestamp_ms":T,"type":"corrupt","value":null,"error":"MirrorLink key of 3 bytes is truncated: corrupt state record","key_hex":"000000"}` + "\n"
	if code != exitError || !strings.HasSuffix(out, wantLast) {
		t.Errorf("exit %d, output ends\n%s\nwant it to end\n%s", code, out[strings.LastIndex(out[:len(out)-1], "\n")+1:], wantLast)
	}
	if want := "mirrord state dump: 1 records of topic \"__mirror_state\" do not decode (see their \"error\")\n"; errOut != want {
		t.Errorf("stderr %q, want %q", errOut, want)
	}
}

// TestStateDumpConfig guards the --config route: the link's destination
// cluster and its state_topic.
func TestStateDumpConfig(t *testing.T) {
	src, dst := kafkatest.Pair(t)
	writeState(t, dst, "orders_state")
	hcl := `cluster "src" {
  bootstrap_servers = ["` + src.ListenAddrs()[0] + `"]
}
cluster "dst" {
  bootstrap_servers = ["` + dst.ListenAddrs()[0] + `"]
}
link "l1" {
  source      = "src"
  destination = "dst"
  topics { include = ["orders"] }
  state_topic = "orders_state"
}
`
	path := filepath.Join(t.TempDir(), "mirrord.hcl")
	if err := os.WriteFile(path, []byte(hcl), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runDump(t, "--config", path, "--link", "l1")
	if code != exitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	if n := strings.Count(out, "\n"); n != 6 {
		t.Errorf("%d lines, want the 6 records of orders_state:\n%s", n, out)
	}
	if !strings.Contains(out, `"offset":6,"timestamp_ms":T,"type":"MirrorLink","state":"MIRRORING"`) {
		t.Errorf("the last link record is missing:\n%s", out)
	}

	code, _, errOut = runDump(t, "--config", path, "--link", "nope")
	if code != exitError || !strings.Contains(errOut, `has no link "nope"`) {
		t.Errorf("unknown link: exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = runDump(t, "--config", path, "--link", "l1", "--topic", "missing")
	if code != exitError || !strings.Contains(errOut, `state topic "missing": state topic does not exist`) {
		t.Errorf("missing topic: exit %d, stderr %q", code, errOut)
	}
}

// TestStateDumpUsage guards the flag rules and -h.
func TestStateDumpUsage(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		says string
	}{
		{"help", []string{"-h"}, exitOK, "Usage: mirrord state dump"},
		{"nothing", nil, exitUsage, "need --bootstrap-servers, or --config and --link"},
		{"both", []string{"--bootstrap-servers", "x:1", "--config", "f"}, exitUsage, "use either --bootstrap-servers or --config, not both"},
		{"config without link", []string{"--config", "f"}, exitUsage, "--config needs --link"},
		{"link without config", []string{"--bootstrap-servers", "x:1", "--link", "l"}, exitUsage, "--link needs --config"},
		{"argument", []string{"--bootstrap-servers", "x:1", "extra"}, exitUsage, `unexpected argument "extra"`},
		{"bad flag", []string{"--nope"}, exitUsage, "flag provided but not defined: -nope"},
		{"bad topic", []string{"--bootstrap-servers", "x:1", "--topic", "a b"}, exitUsage, `state_topic: topic name "a b" contains ' '`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runDump(t, tt.args...)
			if code != tt.code || !strings.Contains(errOut, tt.says) {
				t.Errorf("exit %d, stderr %q; want exit %d saying %q", code, errOut, tt.code, tt.says)
			}
			if out != "" {
				t.Errorf("stdout %q, want nothing", out)
			}
		})
	}
}
