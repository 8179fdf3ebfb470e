package link

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/statestore"
)

// upgradeFixture is what the release before state records v1 left behind
// (link/testdata/upgrade: written by the link of commit 0c03490 on kfake,
// one clean stop and one crash): every raw batch of the source topic
// "orders" and of its mirror, and every record of the state topic
// __mirror_state of link "upgrade", version 0 throughout.
type upgradeFixture struct {
	Commit      string              `json:"commit"`
	Scenario    string              `json:"scenario"`
	Source      map[string][][]byte `json:"source"`
	Destination map[string][][]byte `json:"destination"`
	State       []struct {
		Key   []byte `json:"key"`
		Value []byte `json:"value"`
	} `json:"state"`
	DestTopicID [16]byte `json:"destination_topic_id"`
}

// A link resumes exactly from the state topic of the previous release
// (MirrorCheckpointValue v0: no source topic ID, no producer state; link
// record v0): after a clean stop it appends only what the source gained
// since; after a crash it recognises the batches the old session appended
// past its last checkpoint as its own, and appends none again. Its own
// commits are version 1.
func TestUpgradeFromV0State(t *testing.T) {
	for _, scenario := range []string{"clean", "crash"} {
		t.Run(scenario, func(t *testing.T) {
			raw, err := os.ReadFile("testdata/upgrade/v0-" + scenario + ".json")
			if err != nil {
				t.Fatal(err)
			}
			var fx upgradeFixture
			if err := json.Unmarshal(raw, &fx); err != nil {
				t.Fatal(err)
			}
			f := onKfake(t).mirrored(t, "upgrade", srcTopic("orders", 2))
			src, dst := f.src, f.dst
			dst.CreateTopic(t, "orders", 2, map[string]*string{"compression.type": new("producer")})
			dst.CreateTopic(t, "__mirror_state", 1, map[string]*string{"cleanup.policy": new("compact")})
			var oldBatches int
			for part := range int32(2) {
				k := fmt.Sprintf("orders/%d", part)
				// As a producer sends them: base offset 0 (the
				// broker assigns offsets; the CRC does not cover it).
				for _, b := range fx.Source[k] {
					clear(b[:8])
					produceRaw(t, src, "orders", part, b)
				}
				for _, b := range fx.Destination[k] {
					clear(b[:8])
					produceRaw(t, dst, "orders", part, b)
					oldBatches++
				}
			}
			// The old state names the destination partitions by the old
			// topic's ID; this cluster gave the topic another.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			tds, err := dst.Admin.ListTopics(ctx, "orders")
			if err != nil {
				t.Fatal(err)
			}
			newID := tds["orders"].ID
			var recs []*kgo.Record
			for _, r := range fx.State {
				rec := &kgo.Record{Topic: "__mirror_state", Key: bytes.ReplaceAll(r.Key, fx.DestTopicID[:], newID[:])}
				if r.Value != nil {
					rec.Value = bytes.ReplaceAll(r.Value, fx.DestTopicID[:], newID[:])
				}
				recs = append(recs, rec)
			}
			if err := dst.Client.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			old, err := replayState(ctx, dst, "__mirror_state")
			if err != nil {
				t.Fatal(err)
			}
			for k, ck := range old.Checkpoints {
				if ck.SourceTopicID != (statestore.UUID{}) || ck.Producers != nil {
					t.Fatalf("fixture checkpoint %v is not version 0: %+v", k, ck)
				}
			}
			if _, ok := old.Links["upgrade"]; len(old.Checkpoints) != 2 || !ok {
				t.Fatalf("fixture state: %d checkpoints, links %v; want 2 and link upgrade", len(old.Checkpoints), old.Links)
			}

			// More data after the upgrade, from every producer kind.
			f.load(idempotent, 1, "after", 120)
			f.load(transactional, 4, "after-txn", 90)
			f.load(plain, 2, "after", 40)
			newRecords := int64(0)
			for _, c := range f.p.Committed {
				newRecords += int64(c)
			}

			l := f.start("upgrade")
			rep := f.waitMirrored(60 * time.Second)
			c := l.Status().Counters
			if c.Get(ForeignBatches) != 0 || c.Get(RecordsMirrored) != newRecords {
				t.Errorf("counters %+v: want no foreign batch and exactly the %d records produced after the upgrade appended", c, newRecords)
			}
			if scenario == "crash" && c.Get(ReconciledBatches) == 0 {
				t.Errorf("the crash left batches past the checkpoint, but none was reconciled: %+v", c)
			}
			l.stop(t, false)
			view, err := replayState(ctx, dst, "__mirror_state")
			if err != nil {
				t.Fatal(err)
			}
			for k, ck := range view.Checkpoints {
				if ck.SourceTopicID == (statestore.UUID{}) {
					t.Errorf("checkpoint %v after the upgrade still has no source topic ID: %+v", k, ck)
				}
			}
			t.Logf("%s: %d old destination batches; verify compared %d records; the new session appended %d, reconciled %d batches",
				scenario, oldBatches, rep.Records, c.Get(RecordsMirrored), c.Get(ReconciledBatches))
		})
	}
}
