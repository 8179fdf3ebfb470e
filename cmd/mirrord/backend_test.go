package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/internal/testkit/mirrortest"
)

// `mirrord verify` and `mirrord state dump` on each backend (real Kafka
// too, issue 9): after a link mirrored two topics and stopped, verify says
// the mirror is exact; after someone writes into the mirror it names the
// partition and offset and exits 1; the state dump shows the link record
// STOPPED and a checkpoint per partition at the source's end, version 1 with
// the source topic ID, and a barrier per partition.
func TestVerifyAndStateDumpOnEachBackend(t *testing.T) {
	mirrortest.Each(t, func(t *testing.T, b mirrortest.Backend) {
		n := mirrortest.NamesFor(t, b)
		src := mirrortest.NewCluster(t, b, "src", kafkatest.SourceClusterID)
		dst := mirrortest.NewCluster(t, b, "dst", kafkatest.DestClusterID)
		orders, events := n.Of("orders"), n.Of("events")
		src.CreateTopic(t, orders, 2, nil)
		src.CreateTopic(t, events, 2, nil)
		cl := src.NewClient(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
		ends := map[string]map[int32]int64{
			orders: produceTo(t, cl, orders, 2, "a", 30),
			events: produceTo(t, cl, events, 2, "a", 12),
		}
		cfg := writeFile(t, "mirrord.hcl", killHCL(src, dst, n.StateTopic(), n.Include("orders", "events")))
		mirrorOnce(t, cfg, ends)

		code, out, errOut := runVerifyCmd("--config", cfg, "--link", "l")
		if code != exitOK || !strings.Contains(out, "ok: 84 records in 4 partitions are equal; the destination is the mirror of the source") {
			t.Fatalf("verify of an exact mirror: exit %d, stdout:\n%s\nstderr: %s", code, out, errOut)
		}

		dcl := dst.NewClient(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if err := dcl.ProduceSync(ctx, &kgo.Record{Topic: events, Partition: 1, Key: []byte("intruder")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		code, out, _ = runVerifyCmd("--config", cfg, "--link", "l")
		if code != exitError || !strings.Contains(out, "DIFFERENT: "+events+"[1] -> "+events+"[1]: extra record in destination at source offset none, destination offset 12") {
			t.Fatalf("verify of a tampered mirror: exit %d, stdout:\n%s", code, out)
		}

		var dumpOut, dumpErr bytes.Buffer
		code = dispatch([]string{"state", "dump", "--config", cfg, "--link", "l"}, &dumpOut, &dumpErr)
		dump, errOut := dumpOut.String(), dumpErr.String()
		if code != exitOK {
			t.Fatalf("state dump: exit %d, stderr:\n%s", code, errOut)
		}
		type line struct {
			Type  string          `json:"type"`
			State string          `json:"state"`
			Key   json.RawMessage `json:"key"`
			Value json.RawMessage `json:"value"`
		}
		var last line
		checkpoints := map[string]struct {
			SourceTopic      string
			SourcePartition  int32
			SourceNextOffset int64
			SourceTopicID    string `json:"SourceTopicId"`
		}{}
		barriers := 0
		sc := bufio.NewScanner(strings.NewReader(dump))
		for sc.Scan() {
			var l line
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatalf("dump line %q: %v", sc.Text(), err)
			}
			switch l.Type {
			case "MirrorLink":
				last = l
			case "MirrorCheckpoint":
				var v struct {
					SourceTopic      string
					SourcePartition  int32
					SourceNextOffset int64
					SourceTopicID    string `json:"SourceTopicId"`
				}
				if err := json.Unmarshal(l.Value, &v); err != nil {
					t.Fatal(err)
				}
				checkpoints[string(l.Key)] = v
			case "MirrorPidReset":
				barriers++
			}
		}
		if last.State != "STOPPED" {
			t.Errorf("the last link record says %q, want STOPPED", last.State)
		}
		if len(checkpoints) != 4 || barriers < 4 {
			t.Fatalf("dump holds %d checkpointed partitions and %d barriers, want 4 and at least 4:\n%s", len(checkpoints), barriers, dump)
		}
		for _, ck := range checkpoints {
			if want := ends[ck.SourceTopic][ck.SourcePartition]; ck.SourceNextOffset != want || ck.SourceTopicID == "AAAAAAAAAAAAAAAAAAAAAA" {
				t.Errorf("checkpoint %+v: want source offset %d and the source topic's ID", ck, want)
			}
		}
	})
}
