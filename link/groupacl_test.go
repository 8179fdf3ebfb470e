package link

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/failover"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/internal/testkit/mirrortest"
)

// Guards the Group permissions of docs/acls.md. A link that syncs a group
// runs with exactly the least set plus them (Describe on the group at the
// source, Read at the destination, which implies Describe there, as
// Kafka's authorizer has it): the group, having read part
// of the topic at the source, reads the rest at the destination after the
// sync, each committed record once, in order. With each one left out, the
// group sync says which permission on which group is missing (in the
// group's status and the log) while the mirror itself goes on exactly.
// (Leaving out only Describe at the destination changes nothing: Read
// implies it; real Kafka showed that the first version of this test had
// it wrong.)
func TestGroupSyncACLs(t *testing.T) {
	cases := []struct {
		name  string
		drop  []string
		extra []string
		// want is what the group's status and the log say ({user} and
		// {group} replaced); empty: the group is synced.
		want string
		// logOnly: the source does not list the group at all; want is in
		// the log and the group has no status.
		logOnly bool
	}{
		{name: "least privilege"},
		{name: "source group Describe", drop: []string{"src.group.Describe"}, logOnly: true,
			want: "group offset sync: no source group matches the link's groups among those the source lists: Kafka lists only the groups the principal may describe, so a group without Describe on it is left out without a word, as is a group that has not committed offsets yet (see docs/acls.md)"},
		{name: "destination group Read and Describe", drop: []string{"dst.group.Read"},
			want: `describe group "{group}" at the destination: destination cluster "dst" does not allow User:{user} Describe on Group:{group} (` + failover.WhyDstGroupDescribe + `; see docs/acls.md): GROUP_AUTHORIZATION_FAILED`},
		{name: "destination group Read", drop: []string{"dst.group.Read"}, extra: []string{"+dst.group.Describe"},
			want: `commit the offsets of group "{group}" at the destination: destination cluster "dst" does not allow User:{user} Read on Group:{group} (` + failover.WhyDstGroupRead + `; see docs/acls.md): GROUP_AUTHORIZATION_FAILED`},
	}
	mirrortest.RealOnly(t, func(t *testing.T, b mirrortest.Backend) {
		src, dst := aclClusters(t, b)
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				e := &env{b: b, n: mirrortest.NamesFor(t, b)}
				f := e.mirroredBetween(t, src.cluster, dst.cluster, "g", srcTopic("topic", 2))
				topic := f.topic("topic")
				group := e.topic("app") // unique on the shared cluster, like topics
				user := principalFor(t, src, dst)
				blocks := f.viaSCRAM(src, dst, user)
				f.cfg.Link.Groups = &config.Groups{Include: []*regexp.Regexp{regexp.MustCompile(`^(?:` + regexp.QuoteMeta(group) + `)$`)}}
				f.cfg.Link.GroupSyncInterval = 300 * time.Millisecond
				// The link must mirror on without an error (checked
				// at the end): linkConfig's 3 s lease lapses when a
				// loaded machine holds a state commit up that long,
				// a failure of another kind that the lease tests cover.
				f.cfg.Link.SessionTimeout = 30 * time.Second
				allow(t, user, src, dst, grants(leastPrivilege(f.cfg, []string{topic}, group), tc.drop, tc.extra...))

				f.load(idempotent, 2, "i", 120)
				parts := []tp.Key{{Topic: topic, Partition: 0}, {Topic: topic, Partition: 1}}
				l, tap := startSCRAMLink(t, f.cfg, blocks, tc.name)
				l.waitState(t, Mirroring, 90*time.Second)
				f.waitMirrored(90 * time.Second)
				f.exactlyOnce()
				truth := map[tp.Key]logTruth{}
				total := 0
				for _, k := range parts {
					truth[k] = readTruth(t, src.cluster, dst.cluster, topic, topic, k.Partition)
					total += len(truth[k].src)
				}
				// The group reads about half at the source and commits.
				m := &groupMove{rd: kgoGroup{}, group: group, parts: parts, truth: truth, rename: func(s string) string { return s },
					atSrc: kgoGroup{}.readSome(t, src.cluster, group, []string{topic}, parts, total/2)}

				deadline := time.Now().Add(60 * time.Second)
				if tc.want == "" {
					for {
						// A round that saw the source group's commits
						// on every partition: a round while the group
						// was still reading lists it with no committed
						// offsets, nothing to move and so up to date
						// (Kafka 3.9.2 in CI).
						gs := l.Status().GroupSync
						if gs != nil && len(gs.Groups) == 1 && gs.Groups[0].State == failover.GroupUpToDate && committedAll(gs.Groups[0], m.atSrc) {
							break
						}
						if time.Now().After(deadline) {
							t.Fatalf("group %s not synced after 60 s: %+v", group, gs)
						}
						time.Sleep(50 * time.Millisecond)
					}
					m.check(t, dst.cluster)
					return
				}
				want := strings.NewReplacer("{user}", user, "{group}", group).Replace(tc.want)
				for {
					gs := l.Status().GroupSync
					inLog := logSays(tap.String(), want)
					if tc.logOnly && inLog && gs != nil && !gs.LastRound.IsZero() {
						if len(gs.Groups) != 0 {
							t.Errorf("the source does not list the group, yet the status has %+v", gs.Groups)
						}
						break
					}
					if !tc.logOnly && inLog && gs != nil && len(gs.Groups) == 1 && gs.Groups[0].State == failover.GroupFailed && strings.Contains(gs.Groups[0].Error, want) {
						t.Logf("group status: %s", gs.Groups[0].Error)
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("after 60 s: group sync status %+v\nwant the group's error (and the log) to contain:\n%s", gs, want)
					}
					time.Sleep(50 * time.Millisecond)
				}
				// Group sync is beside the mirror: the link mirrors on.
				f.load(plain, 1, "p", 40)
				f.waitMirrored(90 * time.Second)
				f.exactlyOnce()
				if st := l.Status(); st.State != Mirroring || st.LastError != "" {
					t.Errorf("link %s, last error %q: a group sync refusal must not stop the mirror", st.State, st.LastError)
				}
			})
		}
	})
}

// Guards the share-group rows of docs/acls.md on Kafka's authorizer
// (StandardAuthorizer; Kafka 4.2 or later, which has share groups): with
// the least set plus Describe on the share group at the source and Read at
// the destination, the share group's start offsets are set at the
// destination at their translations; with each left out, the share group's
// status and the log name the permission and the group, and the mirror
// goes on.
func TestShareGroupSyncACLs(t *testing.T) {
	cases := []struct {
		name    string
		drop    []string
		extra   []string
		want    string
		logOnly bool
	}{
		{name: "least privilege"},
		{name: "source group Describe", drop: []string{"src.group.Describe"}, logOnly: true,
			want: "share-group sync: no source share group matches the link's share_groups among those the source lists"},
		{name: "destination group Read and Describe", drop: []string{"dst.group.Read"},
			want: `describe share group "{group}" at the destination: destination cluster "dst" does not allow User:{user} Describe on Group:{group} (` + failover.WhyDstShareDescribe + `; see docs/acls.md): GROUP_AUTHORIZATION_FAILED`},
		{name: "destination group Read", drop: []string{"dst.group.Read"}, extra: []string{"+dst.group.Describe"},
			want: `set the start offsets of share group "{group}" at the destination: destination cluster "dst" does not allow User:{user} Read on Group:{group} (` + failover.WhyDstShareRead + `; see docs/acls.md): GROUP_AUTHORIZATION_FAILED`},
	}
	mirrortest.RealOnly(t, func(t *testing.T, b mirrortest.Backend) {
		if !shareGroupsOffered(&env{b: b}) {
			t.Skipf("Kafka %s has no share groups (KIP-932: 4.2 or later)", b.Kafka)
		}
		src, dst := aclClusters(t, b)
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				e := &env{b: b, n: mirrortest.NamesFor(t, b)}
				f := e.mirroredBetween(t, src.cluster, dst.cluster, "sg", srcTopic("topic", 2))
				topic := f.topic("topic")
				group := e.topic("workers")
				user := principalFor(t, src, dst)
				blocks := f.viaSCRAM(src, dst, user)
				f.cfg.Link.ShareGroups = &config.Groups{Include: []*regexp.Regexp{regexp.MustCompile(`^(?:` + regexp.QuoteMeta(group) + `)$`)}}
				f.cfg.Link.GroupSyncInterval = 300 * time.Millisecond
				f.cfg.Link.SessionTimeout = 30 * time.Second
				allow(t, user, src, dst, grants(leastPrivilege(f.cfg, []string{topic}, group), tc.drop, tc.extra...))

				f.load(idempotent, 2, "i", 60)
				l, tap := startSCRAMLink(t, f.cfg, blocks, tc.name)
				l.waitState(t, Mirroring, 90*time.Second)
				f.waitMirrored(90 * time.Second)
				parts := []tp.Key{{Topic: topic, Partition: 0}, {Topic: topic, Partition: 1}}
				cuts := map[tp.Key]int64{}
				truth := map[tp.Key]logTruth{}
				for _, k := range parts {
					truth[k] = readTruth(t, src.cluster, dst.cluster, topic, topic, k.Partition)
					cuts[k] = truth[k].src[len(truth[k].src)/2].Offset
				}
				// The share group (as the super user) accepts every
				// record below the cuts and releases the rest.
				setShareConfigs(t, src.cluster, group, "share.auto.offset.reset", "earliest", "share.delivery.count.limit", "10")
				ack := func(r *kgo.Record) kgo.AckStatus {
					if r.Offset < cuts[tp.Key{Topic: r.Topic, Partition: r.Partition}] {
						return kgo.AckAccept
					}
					return kgo.AckRelease
				}
				readShare(t, src.cluster, group, []string{topic}, ack, func(got shareRead) bool {
					for _, k := range parts {
						if len(got[k]) < committedBelow(truth[k], cuts[k])+1 {
							return false
						}
					}
					return true
				})
				cuts = settledStarts(t, src.cluster, group, cuts, []string{topic}, ack)

				deadline := time.Now().Add(60 * time.Second)
				if tc.want == "" {
					for {
						// A round that read the source's start offsets at
						// the cuts (an earlier one may have read them
						// while the source group was still reading).
						gs := l.Status().GroupSync
						if gs != nil && len(gs.Groups) == 1 && gs.Groups[0].Type == failover.TypeShare && gs.Groups[0].State == failover.GroupUpToDate &&
							len(gs.Groups[0].Partitions) == len(parts) && atCuts(gs.Groups[0], cuts) {
							break
						}
						if time.Now().After(deadline) {
							t.Fatalf("share group %s not synced after 60 s: %+v", group, gs)
						}
						time.Sleep(50 * time.Millisecond)
					}
					starts := shareStarts(t, dst.cluster, group)
					for _, k := range parts {
						if want := truth[k].want(cuts[k]); starts[k] != want {
							t.Errorf("share group at the destination: %s[%d] starts at %d, want %d", k.Topic, k.Partition, starts[k], want)
						}
					}
					return
				}
				want := strings.NewReplacer("{user}", user, "{group}", group).Replace(tc.want)
				for {
					gs := l.Status().GroupSync
					inLog := logSays(tap.String(), want)
					if tc.logOnly && inLog && gs != nil && !gs.LastRound.IsZero() {
						if len(gs.Groups) != 0 {
							t.Errorf("the source does not list the share group, yet the status has %+v", gs.Groups)
						}
						break
					}
					if !tc.logOnly && inLog && gs != nil && len(gs.Groups) == 1 && gs.Groups[0].State == failover.GroupFailed && strings.Contains(gs.Groups[0].Error, want) {
						t.Logf("share group status: %s", gs.Groups[0].Error)
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("after 60 s: group sync status %+v\nwant the share group's error (and the log) to contain:\n%s", gs, want)
					}
					time.Sleep(50 * time.Millisecond)
				}
				f.load(plain, 1, "p", 20)
				f.waitMirrored(90 * time.Second)
				if st := l.Status(); st.State != Mirroring || st.LastError != "" {
					t.Errorf("link %s, last error %q: a share-group sync refusal must not stop the mirror", st.State, st.LastError)
				}
			})
		}
	})
}

// committedAll reports whether a group's status has every partition the
// group read at the source, each at or past the offset after the last
// record read there (what the reader committed: the Java consumer commits
// its position, which may be past control records).
func committedAll(g failover.GroupStatus, atSrc map[tp.Key][]*kgo.Record) bool {
	if len(g.Partitions) != len(atSrc) {
		return false
	}
	for _, p := range g.Partitions {
		rs := atSrc[tp.Key{Topic: p.SourceTopic, Partition: p.Partition}]
		if len(rs) == 0 || p.SourceCommitted < rs[len(rs)-1].Offset+1 {
			return false
		}
	}
	return true
}
