package link

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/failover"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/internal/testkit/javaclient"
)

// shareGroupsOffered reports whether the scenario's Kafka offers share
// groups to tests: kfake does, and Apache Kafka from 4.2 on (KIP-932,
// production-ready in 4.2; 3.x has no share groups).
func shareGroupsOffered(e *env) bool {
	if !e.b.Real() {
		return true
	}
	major, minor, _ := strings.Cut(e.b.Kafka, ".")
	mj, _ := strconv.Atoi(major)
	mn, _ := strconv.Atoi(strings.Split(minor, ".")[0])
	return mj > 4 || mj == 4 && mn >= 2
}

// setShareConfigs sets a share group's configs on cluster c (group
// configs, IncrementalAlterConfigs on resource type GROUP).
func setShareConfigs(t *testing.T, c *cluster, group string, kv ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	r := kmsg.NewIncrementalAlterConfigsRequestResource()
	r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	for i := 0; i+1 < len(kv); i += 2 {
		cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		cfg.Name, cfg.Value, cfg.Op = kv[i], new(kv[i+1]), kmsg.IncrementalAlterConfigOpSet
		r.Configs = append(r.Configs, cfg)
	}
	req.Resources = append(req.Resources, r)
	resp, err := req.RequestWith(ctx, c.Client)
	if err == nil && len(resp.Resources) == 1 {
		err = kerrFor(resp.Resources[0].ErrorCode, resp.Resources[0].ErrorMessage)
	}
	if err != nil {
		t.Fatalf("set configs %v of share group %s: %v", kv, group, err)
	}
}

func kerrFor(code int16, msg *string) error {
	if code == 0 {
		return nil
	}
	m := ""
	if msg != nil {
		m = *msg
	}
	return fmt.Errorf("error code %d: %s", code, m)
}

// shareRead is what one share consumer got: each record by topic,
// partition and offset, with how often it was delivered.
type shareRead map[tp.Key]map[int64]int

// readShare consumes topics as a member of share group group at cluster c
// until done says so (polled after every fetch with what was read), and
// acknowledges each record as ack says (accept, release or reject); then
// it flushes the acknowledgements and leaves the group.
func readShare(t *testing.T, c *cluster, group string, topics []string, ack func(*kgo.Record) kgo.AckStatus, done func(shareRead) bool) shareRead {
	t.Helper()
	cl := c.NewClient(t, kgo.ShareGroup(group), kgo.ConsumeTopics(topics...), kgo.FetchMaxWait(200*time.Millisecond))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	got := shareRead{}
	for !done(got) {
		pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fs := cl.PollFetches(pctx)
		pcancel()
		if ctx.Err() != nil {
			t.Fatalf("share group %s: gave up after reading %v", group, got)
		}
		fs.EachRecord(func(r *kgo.Record) {
			k := tp.Key{Topic: r.Topic, Partition: r.Partition}
			if got[k] == nil {
				got[k] = map[int64]int{}
			}
			got[k][r.Offset]++
			r.Ack(ack(r))
		})
	}
	if err := cl.FlushAcks(ctx); err != nil {
		t.Fatalf("share group %s: flush acknowledgements: %v", group, err)
	}
	return got
}

// shareStarts is a share group's start offsets at cluster c (-1: none).
func shareStarts(t *testing.T, c *cluster, group string) map[tp.Key]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	all, err := c.Admin.DescribeShareGroupOffsets(ctx, group)
	if err != nil {
		t.Fatalf("describe the start offsets of share group %s: %v", group, err)
	}
	out := map[tp.Key]int64{}
	for topic, ps := range all[group].Offsets {
		for p, o := range ps {
			out[tp.Key{Topic: topic, Partition: p}] = o.StartOffset
		}
	}
	return out
}

// Share groups move with the mirror (issue 25): a share group at the
// source reads part of a topic with a transaction aborted in it,
// accepting every record below a cut in each partition and, above it,
// accepting some and releasing the others. Its start offsets at the source
// are then the cuts. The link's share-group sync sets the destination's
// share group of the same ID at the translations of the cuts (read from
// both logs in full), and never backwards; a share consumer of the group
// at the destination then gets every record at or above the cut and none
// below it (the records above it that were accepted at the source come
// again: the broker exposes only the start offset). A failover's report
// shows the share group. On the real tier the Java client's
// KafkaShareConsumer reads at the destination (the referee), kgo's on
// kfake. Share groups need Kafka 4.2 or later on the real
// tier; kfake offers them.
func TestShareGroupsMoveWithTheMirror(t *testing.T) {
	scenario(t, func(t *testing.T, e *env) {
		if !shareGroupsOffered(e) {
			t.Skipf("Kafka %s has no share groups (KIP-932: 4.2 or later)", e.b.Kafka)
		}
		testShareGroupsMove(t, e)
	})
}

func testShareGroupsMove(t *testing.T, e *env) {
	fx := e.mirrored(t, "shares", srcTopic("q", 2))
	src, dst := fx.src, fx.dst
	q := fx.topic("q")
	// The transactions first: their markers and aborted records lie
	// before the cuts, so that each cut's mirror is at another offset.
	fx.load(transactional, 3, "qt", 40, "q") // a third of its transactions aborted
	fx.load(idempotent, 1, "q1", 60, "q")
	fx.load(plain, 0, "q2", 30, "q")
	group := e.topic("sg")
	fx.cfg.Link.Rename = "{source}.{topic}"
	rename := func(s string) string { return src.Name + "." + s }
	fx.cfg.Link.ShareGroups = &config.Groups{Include: []*regexp.Regexp{regexp.MustCompile(`^(?:` + regexp.QuoteMeta(group) + `)$`)}}
	fx.cfg.Link.GroupSyncInterval = 300 * time.Millisecond
	l := fx.start("shares")
	waitMirrored(t, src, dst, e.stateTopic(), map[string]string{q: rename(q)}, 90*time.Second)
	l.waitState(t, Mirroring, 30*time.Second)
	parts := []tp.Key{{Topic: q, Partition: 0}, {Topic: q, Partition: 1}}
	tr := map[tp.Key]logTruth{}
	cuts := map[tp.Key]int64{}
	for _, k := range parts {
		tr[k] = readTruth(t, src, dst, q, rename(q), k.Partition)
		// The cut: the offset of a committed record about 40% in.
		cuts[k] = tr[k].src[len(tr[k].src)*2/5].Offset
		if tr[k].want(cuts[k]) == cuts[k] {
			t.Fatalf("%s[%d]: the cut %d is mirrored at the same offset: the test would not tell a translation from none", q, k.Partition, cuts[k])
		}
	}

	// At the source: every record below the cut accepted; above it,
	// the record at the cut and two of every three after it released
	// (available again, and released again whenever they come back),
	// the others accepted.
	// Both groups read from the start of a partition they have no start
	// offset for, read_committed (the default, read_uncommitted, gets
	// the aborted records too), and archive a record only after ten
	// deliveries (the released ones come back while the group reads on).
	shareConfigs := []string{"share.auto.offset.reset", "earliest", "share.isolation.level", "read_committed", "share.delivery.count.limit", "10"}
	setShareConfigs(t, src, group, shareConfigs...)
	setShareConfigs(t, dst, group, shareConfigs...)
	ack := func(r *kgo.Record) kgo.AckStatus {
		k := tp.Key{Topic: r.Topic, Partition: r.Partition}
		if r.Offset < cuts[k] || (r.Offset-cuts[k])%3 == 2 {
			return kgo.AckAccept
		}
		return kgo.AckRelease
	}
	readShare(t, src, group, []string{q}, ack, func(got shareRead) bool {
		// Until every record below the cut came, and some above it.
		for _, k := range parts {
			below, above := 0, 0
			for o := range got[k] {
				if o < cuts[k] {
					below++
				} else {
					above++
				}
			}
			if below < committedBelow(tr[k], cuts[k]) || above < 6 {
				return false
			}
		}
		return true
	})
	cuts = settledStarts(t, src, group, cuts, []string{q}, ack)

	// The link sets them at the destination, translated.
	var synced failover.GroupStatus
	waitFor(t, "a round that synced the share group", 60*time.Second, func() bool {
		st := l.Status().GroupSync
		if st == nil {
			return false
		}
		for _, g := range st.Groups {
			// A round that read the source's start offsets at the cuts
			// (an earlier one may have read them while the source
			// group was still reading).
			if g.Group == group && (g.State == failover.GroupSynced || g.State == failover.GroupUpToDate) && len(g.Partitions) == len(parts) && atCuts(g, cuts) {
				synced = g
				return true
			}
		}
		return false
	})
	if synced.Type != failover.TypeShare {
		t.Errorf("share group status type %q, want %q", synced.Type, failover.TypeShare)
	}
	dstStarts := shareStarts(t, dst, group)
	for _, p := range synced.Partitions {
		k := tp.Key{Topic: p.SourceTopic, Partition: p.Partition}
		want := tr[k].want(cuts[k])
		if p.SourceCommitted != cuts[k] || p.Translation != want || p.DestinationTopic != rename(q) {
			t.Errorf("share group %s[%d]: %+v, want source start %d translated to %d", p.SourceTopic, p.Partition, p, cuts[k], want)
		}
		if got := dstStarts[tp.Key{Topic: rename(q), Partition: p.Partition}]; got != want {
			t.Errorf("share group at the destination: %s[%d] starts at %d, want %d", rename(q), p.Partition, got, want)
		}
	}

	// Never backwards: a start offset set further at the destination
	// stays. Further than the translation: when the source's start
	// offset moved past the cut (records archived after their delivery
	// limit, on a loaded machine) the translation moves up too, and a
	// sync that moves the destination forward to it is right.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if aheadAt := max(tr[parts[0]].dstEnd-2, tr[parts[0]].want(cuts[parts[0]])+1); aheadAt > tr[parts[0]].dstEnd {
		t.Logf("%s[0]: the translation %d is the destination's end: no start offset lies ahead of it to keep", q, tr[parts[0]].want(cuts[parts[0]]))
	} else {
		ahead := kadm.Offsets{}
		ahead.Add(kadm.Offset{Topic: rename(q), Partition: 0, At: aheadAt})
		if r, err := dst.Admin.AlterShareGroupOffsets(ctx, group, ahead); err != nil || r.Error() != nil {
			t.Fatalf("set the destination share group ahead: %v %v", err, r.Error())
		}
		if _, err := l.SyncGroups(ctx); err != nil {
			t.Fatal(err)
		}
		if got := shareStarts(t, dst, group)[tp.Key{Topic: rename(q), Partition: 0}]; got != aheadAt {
			t.Errorf("the share group set ahead at the destination was moved to %d, want it kept at %d", got, aheadAt)
		}
	}
	back := kadm.Offsets{}
	back.Add(kadm.Offset{Topic: rename(q), Partition: 0, At: tr[parts[0]].want(cuts[parts[0]])})
	if r, err := dst.Admin.AlterShareGroupOffsets(ctx, group, back); err != nil || r.Error() != nil {
		t.Fatalf("set the destination share group back: %v %v", err, r.Error())
	}

	// Failover: more records, then the failover syncs the share group
	// last and reports it.
	fx.load(idempotent, 2, "q3", 30, "q")
	if err := l.StartFailover(failover.Options{Timeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the failover to end", 90*time.Second, func() bool { f := l.Status().Failover; return f != nil && f.Outcome != failover.Running })
	fo := l.Status().Failover
	if fo.Outcome != failover.Done {
		t.Fatalf("failover %+v", fo)
	}
	var reported bool
	for _, g := range fo.Groups {
		if g.Group == group && g.Type == failover.TypeShare && len(g.Partitions) == len(parts) && g.State != failover.GroupFailed {
			reported = true
			t.Logf("failover report: share group %s %s, %+v", g.Group, g.State, g.Partitions)
			if b, err := json.MarshalIndent(fo, "", "  "); err == nil {
				t.Logf("the failover's report as mirrord failover --json prints it:\n%s", b)
			}
		}
	}
	if !reported {
		t.Errorf("the failover's report does not show the share group: %+v", fo.Groups)
	}

	// At the destination the share group gets every committed record at
	// or above the cut (those accepted above it at the source again) and
	// none below.
	for _, k := range parts {
		tr[k] = readTruth(t, src, dst, q, rename(q), k.Partition)
	}
	want := map[tp.Key]map[int64]bool{}
	for _, k := range parts {
		dk := tp.Key{Topic: rename(q), Partition: k.Partition}
		want[dk] = map[int64]bool{}
		for i, r := range tr[k].src {
			if r.Offset >= cuts[k] {
				want[dk][tr[k].dst[i].Offset] = true
			}
		}
	}
	var got shareRead
	if e.b.Real() {
		// The Java client's KafkaShareConsumer as referee.
		n := 0
		for _, offs := range want {
			n += len(offs)
		}
		jc := javaclient.ForTest(t)
		jctx, jcancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer jcancel()
		recs, err := jc.ShareConsume(jctx, javaclient.ShareConsumeConfig{Bootstrap: dst.Addrs(), Topics: []string{rename(q)}, Group: group, Max: n, Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		got = shareRead{}
		for _, r := range recs {
			dk := tp.Key{Topic: r.Topic, Partition: r.Partition}
			if got[dk] == nil {
				got[dk] = map[int64]int{}
			}
			got[dk][r.Offset]++
		}
		for dk, offs := range want {
			for o := range offs {
				if got[dk][o] == 0 {
					t.Errorf("the Java share consumer at the destination did not get %s[%d] offset %d", dk.Topic, dk.Partition, o)
				}
			}
		}
	} else {
		got = readShare(t, dst, group, []string{rename(q)}, func(*kgo.Record) kgo.AckStatus { return kgo.AckAccept }, func(got shareRead) bool {
			for dk, offs := range want {
				for o := range offs {
					if got[dk][o] == 0 {
						return false
					}
				}
			}
			return true
		})
	}
	for dk, offs := range got {
		for o, n := range offs {
			if !want[dk][o] {
				t.Errorf("share group at the destination got %s[%d] offset %d (%d times), which the source group had accepted below its start offset", dk.Topic, dk.Partition, o, n)
			}
		}
	}
	t.Logf("share group at the destination: %d and %d records, every one at or above the cuts %v", len(got[tp.Key{Topic: rename(q), Partition: 0}]), len(got[tp.Key{Topic: rename(q), Partition: 1}]), cuts)
}

// settledStarts waits until share group group's start offsets at c are at
// or past the cuts on every partition (every record below a cut was
// accepted) and stay put for a second, and returns them: the cuts the rest
// of a test moves. A start offset past its cut is one whose released
// records the broker archived after share.delivery.count.limit deliveries
// (a loaded machine polls them back often while the consumer waits for
// the other partitions): the records up to it count as acknowledged.
//
// A start offset that stays below its cut means an acknowledgement the
// group sent did not apply: on a loaded machine a record's acquisition
// lock (30 s) can expire before its acceptance reaches the broker, which
// then makes the record available again. The group reads again, with the
// same ack rule (a function of the offset alone), until the start offsets
// reach the cuts; that happens once at most.
func settledStarts(t *testing.T, c *cluster, group string, cuts map[tp.Key]int64, topics []string, ack func(*kgo.Record) kgo.AckStatus) map[tp.Key]int64 {
	t.Helper()
	var last map[tp.Key]int64
	reached := func() bool {
		starts := shareStarts(t, c, group)
		for k, cut := range cuts {
			if starts[k] < cut {
				return false
			}
		}
		return true
	}
	reread := time.Now().Add(15 * time.Second)
	// A failure says where the start offsets were: below a cut (an
	// acknowledgement below it not applied) or still moving.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(time.Second) {
		starts := shareStarts(t, c, group)
		below := false
		for k, cut := range cuts {
			below = below || starts[k] < cut
		}
		if !below && maps.Equal(starts, last) {
			break
		}
		if below && !reread.IsZero() && time.Now().After(reread) {
			t.Logf("share group %s: start offsets %v below the cuts %v after 15 s; reading again to accept what the broker made available again", group, starts, cuts)
			readShare(t, c, group, topics, ack, func(shareRead) bool { return reached() })
			reread, deadline = time.Time{}, time.Now().Add(60*time.Second)
		}
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for the share group's start offsets at or past the cuts, settled: start offsets %v (the second before: %v), cuts %v", starts, last, cuts)
		}
		last = starts
	}
	out := map[tp.Key]int64{}
	for k, cut := range cuts {
		if last[k] != cut {
			t.Logf("%s[%d]: the start offset is %d, past the cut %d (released records archived after their delivery limit)", k.Topic, k.Partition, last[k], cut)
		}
		out[k] = last[k]
	}
	return out
}

// atCuts reports whether a group's round read every source start offset at
// its cut.
func atCuts(g failover.GroupStatus, cuts map[tp.Key]int64) bool {
	for _, p := range g.Partitions {
		if p.SourceCommitted != cuts[tp.Key{Topic: p.SourceTopic, Partition: p.Partition}] {
			return false
		}
	}
	return true
}

// committedBelow counts the committed source records of lt below offset o.
func committedBelow(lt logTruth, o int64) int {
	n := 0
	for _, r := range lt.src {
		if r.Offset < o {
			n++
		}
	}
	return n
}

// waitFor polls cond every 50 ms until it holds, failing the test after
// within.
func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}
