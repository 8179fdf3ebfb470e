package failover

import (
	"errors"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/translate"
)

// Guards the group sync's decisions: a group active at the destination is
// left alone; an offset moves the destination group only forward; the
// committed metadata goes with it; a partition that did not translate is
// reported and the rest still sync.
func TestPlanGroup(t *testing.T) {
	off := func(topic string, part int32, src, dst int64, meta string, err error) translate.GroupOffset {
		g := translate.GroupOffset{Result: translate.Result{SourceTopic: topic, DestinationTopic: "dc1." + topic, Partition: part, SourceOffset: src, DestinationOffset: dst},
			Metadata: meta, Err: err}
		return g
	}
	gt := translate.GroupOffsets{Group: "g", Partitions: []translate.GroupOffset{
		off("a", 0, 10, 7, "m0", nil),
		off("a", 1, 20, 15, "m1", nil),
		off("a", 2, 30, 25, "", nil),
		off("b", 0, 5, 0, "", errors.New("boom")),
	}}
	dst := map[tp.Key]int64{
		{Topic: "dc1.a", Partition: 1}: 15, // equal: kept
		{Topic: "dc1.a", Partition: 2}: 40, // ahead: kept, never moved back
	}
	for _, tc := range []struct {
		name    string
		active  bool
		gt      translate.GroupOffsets
		commits []kadm.Offset
		actions []string
		state   string
	}{
		{"inactive", false, gt, []kadm.Offset{{Topic: "dc1.a", Partition: 0, At: 7, LeaderEpoch: -1, Metadata: "m0"}},
			[]string{ActionCommitted, ActionKept, ActionKept, ActionFailed}, GroupFailed},
		{"active", true, gt, nil, []string{ActionSkipped, ActionSkipped, ActionSkipped, ActionFailed}, GroupActive},
		{"up to date", false, translate.GroupOffsets{Partitions: gt.Partitions[1:3]}, nil, []string{ActionKept, ActionKept}, GroupUpToDate},
		{"synced", false, translate.GroupOffsets{Partitions: gt.Partitions[:2]}, []kadm.Offset{{Topic: "dc1.a", Partition: 0, At: 7, LeaderEpoch: -1, Metadata: "m0"}},
			[]string{ActionCommitted, ActionKept}, GroupSynced},
	} {
		t.Run(tc.name, func(t *testing.T) {
			commits, parts, state := planGroup(tc.gt, dst, tc.active)
			if !slices.Equal(commits, tc.commits) || state != tc.state {
				t.Errorf("commits %+v, state %s; want %+v, %s", commits, state, tc.commits, tc.state)
			}
			var actions []string
			for _, p := range parts {
				actions = append(actions, p.Action)
				want := map[string]int64{ActionCommitted: p.Translation, ActionKept: dst[tp.Key{Topic: p.DestinationTopic, Partition: p.Partition}]}
				if w, ok := want[p.Action]; ok && p.DestinationCommitted != w {
					t.Errorf("%s[%d] %s: destination committed %d, want %d", p.SourceTopic, p.Partition, p.Action, p.DestinationCommitted, w)
				}
			}
			if !slices.Equal(actions, tc.actions) {
				t.Errorf("actions %v, want %v", actions, tc.actions)
			}
		})
	}
}
