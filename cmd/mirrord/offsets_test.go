package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/translate"
)

// produceTxns writes three transactions of a transactional producer to
// topic[0]: 5 records committed (offsets 0-4, marker 5), 3 aborted (6-8,
// marker 9), 4 committed (10-13, marker 14). Their mirror holds the
// committed 9 at offsets 0-8.
func produceTxns(t *testing.T, c *kfake.Cluster, topic string) {
	t.Helper()
	cl := kafkatest.Client(t, c, kgo.TransactionalID("txn-"+topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	for i, n := range []int{5, 3, 4} {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for j := range n {
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "t%d-%d", i, j), Value: []byte("v")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(i != 1)); err != nil {
			t.Fatal(err)
		}
	}
}

// mirrorUntil runs an agent in this process until the destination holds n
// records of topic[0] and the link's status shows it, then stops it.
func mirrorUntil(t *testing.T, cfgPath string, dst *kfake.Cluster, topic string, n int64) {
	t.Helper()
	_, _, stop := runAgent(t, cfgPath)
	defer stop()
	ctx := t.Context()
	adm := kadm.NewClient(kafkatest.Client(t, dst))
	deadline := time.Now().Add(waitLimit)
	for {
		ends, err := adm.ListEndOffsets(ctx, topic)
		if o, ok := ends.Lookup(topic, 0); err == nil && ok && o.Offset == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the destination does not hold %d records of %s", n, topic)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestOffsetsTranslateCommand guards `mirrord offsets translate`: one
// position and a source group's committed offsets translate exactly
// (across an aborted transaction and its markers) from the configuration
// alone, with the agent stopped; a partition the link does not mirror is
// exit 1 with the reason; usage errors are exit 2.
func TestOffsetsTranslateCommand(t *testing.T) {
	srcC, dstC := kafkatest.Pair(t)
	srcCl := manualProducer(t, srcC)
	createTopics(t, srcCl, 1, "orders", "private")
	produceTxns(t, srcC, "orders")
	produceTo(t, srcCl, "private", 1, "a", 3)
	cfgPath := writeFile(t, "mirrord.hcl", linkHCL(srcC, dstC, ""))
	mirrorUntil(t, cfgPath, dstC, "orders", 9)

	// A source group that read up to offset 7 of orders (inside the
	// aborted transaction) and 2 of private.
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "orders", Partition: 0, At: 7, LeaderEpoch: -1, Metadata: "meta-7"})
	offs.Add(kadm.Offset{Topic: "private", Partition: 0, At: 2, LeaderEpoch: -1})
	if r, err := kadm.NewClient(srcCl).CommitOffsets(ctx, "g", offs); err != nil || r.Error() != nil {
		t.Fatalf("commit: %v %v", err, r.Error())
	}

	for _, c := range []struct{ offset, want int64 }{{0, 0}, {4, 4}, {5, 5}, {7, 5}, {9, 5}, {10, 5}, {12, 7}, {14, 9}, {15, 9}} {
		code, out, errs := runCmd("offsets", "translate", "--config", cfgPath, "--link", "l", "--topic", "orders", "--partition", "0", "--offset", fmt.Sprint(c.offset))
		var tr translate.Result
		if err := json.Unmarshal([]byte(out), &tr); code != exitOK || err != nil {
			t.Fatalf("offset %d: exit %d: %v\n%s%s", c.offset, code, err, out, errs)
		}
		if tr.DestinationOffset != c.want || tr.SourceOffset != c.offset || tr.DestinationTopic != "orders" || tr.Via == "" {
			t.Errorf("offset %d: %+v, want destination offset %d", c.offset, tr, c.want)
		}
	}

	code, out, errs := runCmd("offsets", "translate", "--config", cfgPath, "--link", "l", "--group", "g")
	var gt translate.GroupOffsets
	if err := json.Unmarshal([]byte(out), &gt); code != exitOK || err != nil {
		t.Fatalf("--group: exit %d: %v\n%s%s", code, err, out, errs)
	}
	if len(gt.Partitions) != 1 || gt.Group != "g" {
		t.Fatalf("--group g: %s, want orders[0] only (private is not mirrored)", out)
	}
	if p := gt.Partitions[0]; p.SourceTopic != "orders" || p.Partition != 0 || p.SourceOffset != 7 || p.DestinationOffset != 5 || p.Metadata != "meta-7" || p.Error != "" {
		t.Errorf("--group g: %+v, want orders[0] 7 -> 5 with metadata meta-7", p)
	}

	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"not mirrored", []string{"--link", "l", "--topic", "private", "--partition", "0", "--offset", "1"}, exitError, `not a partition the link mirrors: link l does not select topic "private"`},
		{"no partition", []string{"--link", "l", "--topic", "orders", "--partition", "3", "--offset", "1"}, exitError, "not a partition the link mirrors: the source has no partition orders[3]"},
		{"past the end", []string{"--link", "l", "--topic", "orders", "--partition", "0", "--offset", "16"}, exitError, "past the source partition's end"},
		{"no link", []string{"--link", "x", "--group", "g"}, exitUsage, `has no link "x"`},
		{"no position", []string{"--link", "l", "--topic", "orders"}, exitUsage, "need --topic, --partition and --offset"},
		{"both", []string{"--link", "l", "--group", "g", "--topic", "orders"}, exitUsage, "use either --group or --topic"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runCmd(append([]string{"offsets", "translate", "--config", cfgPath}, tc.args...)...)
			if code != tc.code || out != "" || !strings.Contains(errs, tc.stderr) {
				t.Errorf("exit %d, want %d; stdout %q; stderr %q, want it to contain %q", code, tc.code, out, errs, tc.stderr)
			}
		})
	}
}
