package link

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/failover"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/internal/testkit/javaclient"
	"github.com/seed83556561/mirrord/internal/testkit/mirrortest"
	"github.com/seed83556561/mirrord/statestore"
	"github.com/seed83556561/mirrord/verify"
)

// readGroup reads topics as a member of group until stop says so, then
// commits what it polled and leaves the group. It returns the records read,
// by topic and partition, in order.
func readGroup(t *testing.T, c *cluster, group string, topics []string, stop func(n int, got map[tp.Key][]*kgo.Record) bool) map[tp.Key][]*kgo.Record {
	t.Helper()
	cl := c.NewClient(t, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topics...), kgo.DisableAutoCommit(),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond), kgo.FetchMaxPartitionBytes(2<<10))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got := map[tp.Key][]*kgo.Record{}
	n := 0
	for !stop(n, got) {
		pctx, pcancel := context.WithTimeout(ctx, 300*time.Millisecond)
		fs := cl.PollRecords(pctx, 7)
		pcancel()
		if ctx.Err() != nil {
			t.Fatalf("group %s: read %d records and gave up", group, n)
		}
		fs.EachRecord(func(r *kgo.Record) {
			k := tp.Key{Topic: r.Topic, Partition: r.Partition}
			got[k] = append(got[k], r)
			n++
		})
	}
	if err := cl.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("group %s: commit: %v", group, err)
	}
	cl.Close()
	return got
}

// groupConsumer reads topics as a member of a consumer group, commits the
// offset after the last record it returned of each partition and leaves
// the group; it returns the records read, by topic and partition, in
// order. kgoGroup is franz-go's consumer; javaGroup the Java client's.
type groupConsumer interface {
	// readSome reads at least n records, and one of every partition in
	// parts.
	readSome(t *testing.T, c *cluster, group string, topics []string, parts []tp.Key, n int) map[tp.Key][]*kgo.Record
	// readRest reads from the group's committed offsets, start, up to
	// ends.
	readRest(t *testing.T, c *cluster, group string, topics []string, start, ends map[tp.Key]int64) map[tp.Key][]*kgo.Record
}

// kgoGroup is franz-go's group consumer (readGroup).
type kgoGroup struct{}

func (kgoGroup) readSome(t *testing.T, c *cluster, group string, topics []string, parts []tp.Key, n int) map[tp.Key][]*kgo.Record {
	return readGroup(t, c, group, topics, func(got int, rs map[tp.Key][]*kgo.Record) bool {
		for _, k := range parts {
			if len(rs[k]) == 0 {
				return false
			}
		}
		return got >= n
	})
}

func (kgoGroup) readRest(t *testing.T, c *cluster, group string, topics []string, start, ends map[tp.Key]int64) map[tp.Key][]*kgo.Record {
	return readGroup(t, c, group, topics, func(_ int, got map[tp.Key][]*kgo.Record) bool {
		for k, end := range ends {
			if rs := got[k]; start[k] < end && (len(rs) == 0 || rs[len(rs)-1].Offset+1 < end) {
				return false
			}
		}
		return true
	})
}

// javaGroup is the Java client's group consumer (javaclient, with
// group.id): it reads what kgoGroup reads, polling seven records at a time.
type javaGroup struct{ jc *javaclient.Client }

func (j javaGroup) read(t *testing.T, c *cluster, cfg javaclient.ConsumeConfig) map[tp.Key][]*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg.Bootstrap = c.Addrs()
	cfg.Props = map[string]string{"max.poll.records": "7", "max.partition.fetch.bytes": "2048"}
	rs, err := j.jc.Consume(ctx, cfg)
	if err != nil {
		t.Fatalf("java consumer of group %s: %v", cfg.Group, err)
	}
	out := map[tp.Key][]*kgo.Record{}
	for _, r := range rs {
		k := tp.Key{Topic: r.Topic, Partition: r.Partition}
		out[k] = append(out[k], &kgo.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value})
	}
	return out
}

func (j javaGroup) readSome(t *testing.T, c *cluster, group string, topics []string, parts []tp.Key, n int) map[tp.Key][]*kgo.Record {
	got := j.read(t, c, javaclient.ConsumeConfig{Topics: topics, Group: group, Max: n})
	for _, k := range parts {
		if len(got[k]) == 0 {
			t.Fatalf("java consumer of group %s read nothing of %s[%d]", group, k.Topic, k.Partition)
		}
	}
	return got
}

func (j javaGroup) readRest(t *testing.T, c *cluster, group string, topics []string, _, ends map[tp.Key]int64) map[tp.Key][]*kgo.Record {
	got := j.read(t, c, javaclient.ConsumeConfig{Topics: topics, Group: group})
	for k, end := range ends {
		if rs := got[k]; len(rs) > 0 && rs[len(rs)-1].Offset+1 != end {
			t.Fatalf("java consumer of group %s stopped %s[%d] at %d, want %d", group, k.Topic, k.Partition, rs[len(rs)-1].Offset+1, end)
		}
	}
	return got
}

// groupMove is a consumer group's move from the source to the destination.
type groupMove struct {
	rd     groupConsumer
	group  string
	parts  []tp.Key // source partitions
	truth  map[tp.Key]logTruth
	atSrc  map[tp.Key][]*kgo.Record
	rename func(string) string
}

// check reads the rest of every partition at the destination as the same
// group and checks that what was read at the source and what is read now
// are exactly the committed source records, each once, in order.
func (m *groupMove) check(t *testing.T, dst *cluster) {
	t.Helper()
	var topics []string
	ends := map[tp.Key]int64{}
	for _, k := range m.parts {
		topics = append(topics, m.rename(k.Topic))
		ends[tp.Key{Topic: m.rename(k.Topic), Partition: k.Partition}] = m.truth[k].dstRecordsEnd()
	}
	slices.Sort(topics)
	topics = slices.Compact(topics)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	committed, err := dst.Admin.FetchOffsets(ctx, m.group)
	if err != nil {
		t.Fatal(err)
	}
	start := map[tp.Key]int64{}
	for dk := range ends {
		o, ok := committed.Lookup(dk.Topic, dk.Partition)
		if !ok || o.At < 0 {
			t.Fatalf("group %s has no committed offset on %s[%d] at the destination: %+v", m.group, dk.Topic, dk.Partition, committed)
		}
		start[dk] = o.At
	}
	atDst := m.rd.readRest(t, dst, m.group, topics, start, ends)
	for _, k := range m.parts {
		dk := tp.Key{Topic: m.rename(k.Topic), Partition: k.Partition}
		read := append(slices.Clone(m.atSrc[k]), atDst[dk]...)
		want := m.truth[k].src
		if len(read) != len(want) {
			t.Errorf("group %s, %s[%d]: %d records read at the source and %d at the destination (from offset %d); the source committed %d",
				m.group, k.Topic, k.Partition, len(m.atSrc[k]), len(atDst[dk]), start[dk], len(want))
		}
		for i := range min(len(read), len(want)) {
			if string(read[i].Key) != string(want[i].Key) || string(read[i].Value) != string(want[i].Value) {
				t.Errorf("group %s, %s[%d]: record %d read is %q (offset %d), want %q (source offset %d): re-read or skipped",
					m.group, k.Topic, k.Partition, i, read[i].Key, read[i].Offset, want[i].Key, want[i].Offset)
				break
			}
		}
	}
}

// The consumers move with the mirror: a kgo consumer group reads part of a
// transactional topic with aborts, a compacted topic and a plain topic at
// the source, commits and stops; after the link's group offset sync, and
// after a failover, the same group at the destination reads the rest.
// What it read at both is exactly the committed source records, each once,
// in order per partition. A group active at the destination is left alone,
// and a destination group ahead of the translation is not moved back.
// Guards against translations or commits that make a consumer re-read or
// skip after it moved.
func TestGroupsMoveWithTheMirror(t *testing.T) {
	scenario(t, func(t *testing.T, e *env) { testGroupsMove(t, e, kgoGroup{}, false) })
}

// The same move with the Java client's consumer (real tier only): a
// consumer other than franz-go's reads what the sync committed.
func TestJavaGroupsMoveWithTheMirror(t *testing.T) {
	mirrortest.RealOnly(t, func(t *testing.T, b mirrortest.Backend) {
		testGroupsMove(t, &env{b: b, n: mirrortest.NamesFor(t, b)}, javaGroup{jc: javaclient.ForTest(t)}, false)
	})
}

// The same move with the link in transactional delivery (issue 22): group
// sync and failover translate by content over the destination's committed
// transactions, and the groups at the destination read read_committed;
// the Java client's consumer reads at the destination (real tier only).
func TestTxnGroupsMoveWithTheMirror(t *testing.T) {
	// Real tier only: under the race detector on kfake it took minutes of
	// CI's budget, and what it adds to TestGroupsMoveWithTheMirror on
	// kfake (the same group sync over transactional translation) the
	// kfake tier covers with TestTxnTranslateProperty.
	mirrortest.RealOnly(t, func(t *testing.T, b mirrortest.Backend) {
		testGroupsMove(t, &env{b: b, n: mirrortest.NamesFor(t, b)}, javaGroup{jc: javaclient.ForTest(t)}, true)
	})
}

func testGroupsMove(t *testing.T, e *env, rd groupConsumer, txnMode bool) {
	fx := e.mirrored(t, "groups", srcTopic("txn", 2), srcTopic("kv", 1).with(compactedConfig), srcTopic("plain", 2))
	// The test compacts the source only: config sync would give the
	// destination the source's quick cleaner settings, and the
	// destination's cleaner would compact the mirror too.
	fx.cfg.Link.ConfigSync.Enabled = false
	readTruth := readTruth
	waitMirrored := waitMirrored
	if txnMode {
		fx.cfg.Link.Delivery = statestore.DeliveryTransactional
		fx.cfg.Link.TransactionTimeout = 30 * time.Second
		fx.cfg.Link.CheckpointInterval = 300 * time.Millisecond
		readTruth = func(t *testing.T, src, dst *cluster, srcTopic, dstTopic string, part int32, _ ...[2]int64) logTruth {
			return readTruthTxn(t, src, dst, srcTopic, dstTopic, part)
		}
		waitMirrored = func(t *testing.T, src, dst *cluster, stateTopic string, topics map[string]string, within time.Duration) verify.Report {
			return mirrortest.WaitMirroredMode(t, src, dst, stateTopic, topics, within, true)
		}
	}
	src, dst := fx.src, fx.dst
	txn, kv, plainT := fx.topic("txn"), fx.topic("kv"), fx.topic("plain")
	fx.load(transactional, 3, "t1", 180, "txn")
	fx.load(transactional, 0, "t2", 60, "txn")
	// The whole scenario's requests; each wait inside has its own bound.
	// CI's loaded machine took 5.5 min for it on Kafka 3.9.2.
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	produceRound := func(round int) {
		cl := src.NewClient(t)
		var recs []*kgo.Record
		for i := range 15 {
			recs = append(recs, &kgo.Record{Topic: kv, Key: fmt.Appendf(nil, "k%02d", (i*3+round*5)%19), Value: fmt.Appendf(nil, "r%d-%d", round, i)})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		cl.Close()
	}
	for round := range 6 {
		produceRound(round)
	}
	compactSource(t, src, kv, 1, func() { time.Sleep(300 * time.Millisecond); produceRound(6) })
	fx.load(plain, 1, "p1", 120, "plain")

	fx.cfg.Link.Rename = "{source}.{topic}"
	rename := func(s string) string { return src.Name + "." + s }
	group := e.topic // group IDs are unique on a shared cluster like topics
	fx.cfg.Link.Groups = &config.Groups{
		Include: []*regexp.Regexp{regexp.MustCompile(`^(?:` + regexp.QuoteMeta(group("app")) + `.*)$`)},
		Exclude: []*regexp.Regexp{regexp.MustCompile(`^(?:` + regexp.QuoteMeta(group("app-skip")) + `)$`)},
	}
	fx.cfg.Link.GroupSyncInterval = 300 * time.Millisecond
	topics := []string{txn, kv, plainT}
	parts := []tp.Key{{Topic: txn, Partition: 0}, {Topic: txn, Partition: 1}, {Topic: kv, Partition: 0}, {Topic: plainT, Partition: 0}, {Topic: plainT, Partition: 1}}
	reg := prometheus.NewRegistry()
	l := fx.startWith(Deps{Metrics: NewMetrics(reg)})
	mirrored := map[string]string{}
	for _, tpc := range topics {
		mirrored[tpc] = rename(tpc)
	}
	waitMirrored(t, src, dst, e.stateTopic(), mirrored, 90*time.Second)
	truth := func() map[tp.Key]logTruth {
		m := map[tp.Key]logTruth{}
		for _, k := range parts {
			m[k] = readTruth(t, src, dst, k.Topic, rename(k.Topic), k.Partition)
		}
		return m
	}
	tr := truth()
	var total int
	for _, lt := range tr {
		total += len(lt.src)
	}
	readPart := func(group string, frac float64) map[tp.Key][]*kgo.Record {
		// One of every partition: each has a committed offset to move.
		return rd.readSome(t, src, group, topics, parts, int(float64(total)*frac))
	}

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("gave up waiting for %s; group sync status: %+v", what, l.Status().GroupSync)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// app-active's member joins at the destination before the group
	// commits at the source: a sync round between the two would rightly
	// commit to the group while it is still empty there.
	member := dst.NewClient(t, kgo.ConsumerGroup(group("app-active")), kgo.ConsumeTopics(rename(plainT)), kgo.DisableAutoCommit())
	waitFor("app-active to have a member at the destination", func() bool {
		d, err := dst.Admin.DescribeGroups(ctx, group("app-active"))
		return err == nil && len(d[group("app-active")].Members) > 0 && d[group("app-active")].State == "Stable"
	})
	_ = member.PollFetches(ctx) // joined

	// Groups at the source: "app" moves; "app-active" has a member at the
	// destination; "app-ahead" has read further at the destination by
	// itself; "app-skip" is excluded.
	// app-ahead's destination commit comes first, like app-active's
	// member: Kafka has no conditional commit, so a round that fetched the
	// destination's offsets just before it would overwrite it.
	aheadAt := tr[parts[0]].dstEnd
	ahead := kadm.Offsets{}
	ahead.Add(kadm.Offset{Topic: rename(txn), Partition: 0, At: aheadAt, LeaderEpoch: -1})
	if r, err := dst.Admin.CommitOffsets(ctx, group("app-ahead"), ahead); err != nil || r.Error() != nil {
		t.Fatalf("commit app-ahead at the destination: %v %v", err, r.Error())
	}
	app := &groupMove{rd: rd, group: group("app"), parts: parts, truth: tr, rename: rename, atSrc: readPart(group("app"), 0.4)}
	readPart(group("app-active"), 0.3)
	readPart(group("app-ahead"), 0.3)
	readPart(group("app-skip"), 0.3)

	// A sync round that saw every group.
	byGroup := func() map[string]failover.GroupStatus { // by group ID without the scenario's prefix
		m := map[string]failover.GroupStatus{}
		if gs := l.Status().GroupSync; gs != nil {
			for _, g := range gs.Groups {
				for _, base := range []string{"app", "app-active", "app-ahead", "app-skip", "app-late"} {
					if g.Group == group(base) {
						m[base] = g
					}
				}
			}
		}
		return m
	}
	waitFor("a round that synced app and saw app-active active", func() bool {
		m := byGroup()
		return m["app"].State == failover.GroupUpToDate && committedAll(m["app"], app.atSrc) && m["app-active"].State == failover.GroupActive && m["app-ahead"].At.After(time.Time{})
	})
	m := byGroup()
	if _, ok := m["app-skip"]; ok {
		t.Error("the excluded group app-skip was synced")
	}
	for _, p := range m["app"].Partitions {
		k := tp.Key{Topic: p.SourceTopic, Partition: p.Partition}
		if want := tr[k].want(p.SourceCommitted); tr[k].canon(p.DestinationCommitted) != want || tr[k].canon(p.Translation) != want || p.DestinationTopic != rename(p.SourceTopic) {
			t.Errorf("app %s[%d]: %+v, want destination committed %d", p.SourceTopic, p.Partition, p, want)
		}
	}
	if len(m["app"].Partitions) != len(parts) {
		t.Errorf("app: %d partitions synced, want %d", len(m["app"].Partitions), len(parts))
	}
	if st := l.Status().GroupSync; st.LastSuccess.IsZero() || st.LastError != "" {
		t.Errorf("group sync status %+v, want a success and no error", st)
	}
	metric := func(name string) float64 { return linkMetric(t, reg, name, l.Name()) }
	if synced, translated, errs, age := metric("mirrord_group_sync_groups_synced_total"), metric("mirrord_group_sync_partitions_translated_total"),
		metric("mirrord_group_sync_translation_errors_total"), metric("mirrord_group_sync_last_success_age_seconds"); synced < 2 || translated < float64(len(parts)) || age < 0 || age > 5 {
		t.Errorf("metrics: %v groups synced, %v partitions translated, last success %vs ago; want groups and partitions and a recent success",
			synced, translated, age)
	} else {
		// Rounds that met a group mid-rebalance count errors; the last
		// one succeeded.
		t.Logf("metrics: %v groups synced, %v partitions translated, %v errors", synced, translated, errs)
	}
	offs, err := dst.Admin.FetchOffsets(ctx, group("app-active"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(offs); n != 0 {
		t.Errorf("the group active at the destination got offsets committed: %+v", offs)
	}
	member.Close()
	offs, err = dst.Admin.FetchOffsets(ctx, group("app-ahead"))
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := offs.Lookup(rename(txn), 0); o.At != aheadAt {
		t.Errorf("app-ahead at the destination: %s[0] at %d, want %d (never moved back)", rename(txn), o.At, aheadAt)
	}
	if o, _ := offs.Lookup(rename(txn), 1); o.At < 0 {
		t.Errorf("app-ahead at the destination: %s[1] not synced", rename(txn))
	}
	app.check(t, dst)

	// Failover: more data while a second group reads part of it, then the
	// failover waits for the link, syncs, pauses and reports.
	fx.load(transactional, 2, "t3", 70, "txn")
	fx.load(plain, 4, "p2", 50, "plain")
	waitMirrored(t, src, dst, e.stateTopic(), mirrored, 90*time.Second)
	tr = truth()
	total = 0
	for _, lt := range tr {
		total += len(lt.src)
	}
	late := &groupMove{rd: rd, group: group("app-late"), parts: parts, truth: tr, rename: rename, atSrc: readPart(group("app-late"), 0.7)}
	fx.load(plain, 0, "p3", 30, "plain") // the link has more to mirror when the failover starts
	if err := l.StartFailover(failover.Options{Timeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := l.StartFailover(failover.Options{Timeout: time.Minute}); err == nil {
		t.Error("a second failover started while one runs")
	}
	waitFor("the failover to end", func() bool { f := l.Status().Failover; return f != nil && f.Outcome != failover.Running })
	f := l.Status().Failover
	if f.Outcome != failover.Done || f.Lag != 0 || l.Status().State != Paused {
		t.Fatalf("failover %+v, link %s; want done, no lag, PAUSED", f, l.Status().State)
	}
	tr = truth()
	late.truth = tr
	for _, fp := range f.Partitions {
		k := tp.Key{Topic: fp.SourceTopic, Partition: fp.Partition}
		if !fp.CaughtUp || tr[k].canon(fp.DestinationNext) != tr[k].dstEnd {
			t.Errorf("failover %s[%d]: %+v, want caught up at destination offset %d", fp.SourceTopic, fp.Partition, fp, tr[k].dstEnd)
		}
	}
	var reported bool
	for _, g := range f.Groups {
		if g.Group != group("app-late") {
			continue
		}
		reported = len(g.Partitions) == len(parts)
		for _, gp := range g.Partitions {
			k := tp.Key{Topic: gp.SourceTopic, Partition: gp.Partition}
			if want := tr[k].want(gp.SourceCommitted); tr[k].canon(gp.DestinationCommitted) != want {
				t.Errorf("failover report, app-late %s[%d]: %+v, want destination committed %d", gp.SourceTopic, gp.Partition, gp, want)
			}
		}
	}
	if !reported {
		t.Errorf("the failover's report does not show app-late's %d partitions: %+v", len(parts), f.Groups)
	}
	late.check(t, dst)
	if err := l.StartFailover(failover.Options{}); err == nil {
		t.Error("a failover started on a paused link")
	}
}

// linkMetric is the value of the metric name with label link=link in reg;
// the test fails if reg has none.
func linkMetric(t *testing.T, reg *prometheus.Registry, name, link string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "link" && lp.GetValue() == link {
					if c := m.GetCounter(); c != nil {
						return c.GetValue()
					}
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no metric %s{link=%q}", name, link)
	return 0
}
