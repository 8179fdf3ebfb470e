package link

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/failover"
	"github.com/seed83556561/mirrord/internal/aclsync"
	"github.com/seed83556561/mirrord/internal/kafka/dial"
	"github.com/seed83556561/mirrord/internal/testkit/mirrortest"
	"github.com/seed83556561/mirrord/statestore"
)

// ACL sync (issue 25, item 3; internal/aclsync has the rules). The source
// holds bindings of every kind a link meets: literal, prefixed and
// wildcard ones on a mirrored topic, ALLOW WRITE and ALLOW ALL (held back
// without write), DENY, bindings on a topic the link does not mirror and
// on a group it does not sync, and a binding an operator made at the
// destination as well. The destination must then hold exactly the
// bindings the rules call for, and the link's records in the state topic
// exactly those it created; a binding deleted at the source is deleted at
// the destination if the link created it, and kept if the operator did; a
// failover's grant creates WRITE and ALLOW ALL and deletes ALL's split;
// a restarted link changes nothing.
//
// On Kafka (StandardAuthorizer, KRaft; both versions) each principal is a
// SCRAM user and the authorizer is the referee: the reader consumes every
// record of the mirror with the synced group, the writer is refused until
// the grant and accepted after it, and the banned principal (a wildcard
// ALLOW and a DENY) is refused. On kfake, which keeps ACLs but enforces
// none on these clusters, the bindings are checked alone.
func TestACLSync(t *testing.T) {
	mirrortest.Each(t, func(t *testing.T, b mirrortest.Backend) {
		e := &env{b: b, n: mirrortest.NamesFor(t, b)}
		var f *fixture
		var srcA, dstA *aclCluster
		if b.Real() {
			srcA, dstA = aclClusters(t, b)
			f = e.mirroredBetween(t, srcA.cluster, dstA.cluster, "acls", srcTopic("ta", 2), srcTopic("tb", 1).unmirrored())
		} else {
			f = e.mirrored(t, "acls", srcTopic("ta", 2), srcTopic("tb", 1).unmirrored())
		}
		testACLSync(t, e, f, srcA, dstA)
	})
}

// The same in transactional delivery (kfake): the topics come from the
// transactional session, and the records are written beside its
// transactions.
func TestACLSyncTransactional(t *testing.T) {
	e := onKfake(t)
	f := e.mirrored(t, "aclstxn", srcTopic("ta", 2), srcTopic("tb", 1).unmirrored())
	f.cfg.Link.Delivery = statestore.DeliveryTransactional
	testACLSync(t, e, f, nil, nil)
}

func testACLSync(t *testing.T, e *env, f *fixture, srcA, dstA *aclCluster) {
	onKafka := srcA != nil
	topic, other := f.topic("ta"), f.topic("tb")
	mirror := f.cfg.Link.DestinationTopic(topic, f.cfg.Source.Name)
	group, otherGroup := e.topic("app"), e.topic("other")
	// Principals, one SCRAM user each on Kafka.
	base := principalName(t)
	users := map[string]string{}
	for _, role := range []string{"reader", "writer", "pfx", "banned", "admin", "op"} {
		users[role] = base + "-" + role
		if onKafka {
			scramUser(t, srcA, dstA, users[role])
		}
	}
	p := func(role string) string { return "User:" + users[role] }
	const (
		topicT = kmsg.ACLResourceTypeTopic
		groupT = kmsg.ACLResourceTypeGroup
		lit    = kmsg.ACLResourcePatternTypeLiteral
		pre    = kmsg.ACLResourcePatternTypePrefixed
		allowP = kmsg.ACLPermissionTypeAllow
		denyP  = kmsg.ACLPermissionTypeDeny
	)
	bd := func(rt kmsg.ACLResourceType, name string, pt kmsg.ACLResourcePatternType, role string, op kmsg.ACLOperation, perm kmsg.ACLPermissionType) aclsync.Binding {
		return aclsync.Binding{Resource: rt, Name: name, Pattern: pt, Principal: p(role), Host: "*", Operation: op, Permission: perm}
	}
	read, write, describe, all := kmsg.ACLOperationRead, kmsg.ACLOperationWrite, kmsg.ACLOperationDescribe, kmsg.ACLOperationAll
	readerTopic := bd(topicT, topic, lit, "reader", read, allowP)
	opTopic := bd(topicT, topic, lit, "op", describe, allowP)
	source := []aclsync.Binding{
		readerTopic,
		bd(groupT, group, lit, "reader", read, allowP),
		bd(topicT, topic, lit, "writer", write, allowP),
		bd(topicT, topic[:len(topic)-1], pre, "pfx", describe, allowP), // covers ta and tb
		bd(topicT, "*", lit, "banned", read, allowP),
		bd(topicT, topic, lit, "banned", read, denyP),
		bd(topicT, other, lit, "reader", read, allowP),      // not mirrored
		bd(groupT, otherGroup, lit, "reader", read, allowP), // not synced
		bd(topicT, topic, lit, "admin", all, allowP),        // without write: all but WRITE
		opTopic, // also made at the destination by an operator
		bd(topicT, topic, lit, "writer", kmsg.ACLOperationAlter, denyP), // DENY follows
	}
	// DENY bindings that would refuse the link its own writes at the
	// destination: not synced, shown as skipped.
	linkDeny := aclsync.Binding{Resource: topicT, Name: topic, Pattern: lit, Principal: f.cfg.Destination.Principal, Host: "*", Operation: write, Permission: denyP}
	anyDeny := linkDeny
	anyDeny.Principal = "User:*"
	source = append(source, linkDeny, anyDeny)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	createBindings(ctx, t, f.src, source...)
	opAtDst := opTopic
	opAtDst.Name = mirror
	createBindings(ctx, t, f.dst, opAtDst)
	// The clusters are shared with other tests: the wildcard and prefixed
	// bindings must not outlive this one.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ours := map[string]bool{}
		for r := range users {
			ours[p(r)] = true
		}
		for _, c := range []*cluster{f.src, f.dst} {
			for b := range describeBindings(ctx, t, c, ours) {
				deleteBindings(ctx, t, c, b)
			}
		}
		deleteBindings(ctx, t, f.src, linkDeny, anyDeny)
	})

	at := func(b aclsync.Binding) aclsync.Binding { b.Name, b.Pattern = mirror, lit; return b }
	want := map[aclsync.Binding]bool{
		at(readerTopic): true,
		bd(groupT, group, lit, "reader", read, allowP):                      true,
		at(bd(topicT, topic, lit, "pfx", describe, allowP)):                 true,
		at(bd(topicT, topic, lit, "banned", read, allowP)):                  true,
		at(bd(topicT, topic, lit, "banned", read, denyP)):                   true,
		at(bd(topicT, topic, lit, "writer", kmsg.ACLOperationAlter, denyP)): true,
		opAtDst: true, // the operator's
	}
	for _, o := range []kmsg.ACLOperation{read, kmsg.ACLOperationCreate, kmsg.ACLOperationDelete, kmsg.ACLOperationAlter, describe, kmsg.ACLOperationDescribeConfigs, kmsg.ACLOperationAlterConfigs} {
		want[at(bd(topicT, topic, lit, "admin", o, allowP))] = true
	}

	f.cfg.Link.Groups = &config.Groups{Include: []*regexp.Regexp{regexp.MustCompile(`^(?:` + regexp.QuoteMeta(group) + `)$`)}}
	f.cfg.Link.ACLSync = ACLSync{Enabled: true}
	f.cfg.Link.ACLSyncInterval = 300 * time.Millisecond
	f.cfg.Link.SessionTimeout = 30 * time.Second
	f.load(idempotent, 2, "i", 200)
	l := f.start("acls")
	l.waitState(t, Mirroring, 90*time.Second)
	if f.cfg.Link.Delivery == statestore.DeliveryTransactional {
		// The batches carry the session's producer ID, and commit
		// markers sit between them: read_committed, the same records.
		f.waitSameCommitted(90 * time.Second)
	} else {
		f.waitMirrored(90 * time.Second)
		f.exactlyOnce()
	}

	// principals are ours: on a shared cluster other tests' bindings
	// are not compared.
	ours := map[string]bool{}
	for r := range users {
		ours[p(r)] = true
	}
	settled := func(managed int, write bool, wantDst map[aclsync.Binding]bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			st := l.Status().ACLSync
			got := describeBindings(ctx, t, f.dst, ours)
			if st != nil && !st.LastSuccess.IsZero() && st.LastSuccess.Equal(st.LastRound) &&
				st.Managed == managed && st.Write == write && maps.Equal(got, wantDst) {
				return
			}
			if time.Now().After(deadline) {
				var missing, extra []string
				for b := range wantDst {
					if !got[b] {
						missing = append(missing, b.String())
					}
				}
				for b := range got {
					if !wantDst[b] {
						extra = append(extra, b.String())
					}
				}
				t.Fatalf("after 60 s: status %+v (want %d managed, write %v)\nmissing at the destination: %s\nnot wanted there: %s",
					st, managed, write, strings.Join(missing, "; "), strings.Join(extra, "; "))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	settled(len(want)-1, false, want)
	if st := l.Status().ACLSync; st.WriteGrantedBy != "" || st.LeftAlone != 1 || len(st.Skipped) != 2 {
		t.Errorf("write granted by %q before any grant, %d bindings left alone (want the operator's one), skipped %v (want the two DENYs that would refuse the link)",
			st.WriteGrantedBy, st.LeftAlone, st.Skipped)
	}
	if got := describeBindings(ctx, t, f.dst, map[string]bool{linkDeny.Principal: true, anyDeny.Principal: true}); len(got) != 0 {
		t.Errorf("DENY bindings that would refuse the link are at the destination: %v", got)
	}
	recordsAre(ctx, t, f, want, opAtDst, nil)

	if onKafka {
		// The authorizer as referee: the reader reads every record of
		// the mirror with the synced group; the writer may not write,
		// the banned principal may not read.
		src := readAll(ctx, t, f.src, topic, 2)
		got := consumeAs(ctx, t, dstA, users["reader"], mirror, group, len(src))
		if len(got) != len(src) {
			t.Fatalf("reader consumed %d records at the destination, the source holds %d", len(got), len(src))
		}
		for i := range src {
			if got[i] != src[i] {
				t.Fatalf("reader's record %d at the destination: %q, source: %q", i, got[i], src[i])
			}
		}
		if err := produceAs(ctx, dstA, users["writer"], mirror); !errors.Is(err, kerr.TopicAuthorizationFailed) {
			t.Errorf("writer's produce to the mirror before the grant: %v, want TOPIC_AUTHORIZATION_FAILED", err)
		}
		if _, err := consumeOnce(ctx, dstA, users["banned"], mirror); !errors.Is(err, kerr.TopicAuthorizationFailed) {
			t.Errorf("banned principal's fetch of the mirror: %v, want TOPIC_AUTHORIZATION_FAILED", err)
		}
	}

	// Deleted at the source: the link's binding goes, the operator's
	// stays.
	deleteBindings(ctx, t, f.src, readerTopic, opTopic)
	delete(want, at(readerTopic))
	settled(len(want)-1, false, want)

	// A failover's grant: WRITE and ALL follow, ALL's split goes.
	g, err := l.GrantACLWrite(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []kmsg.ACLOperation{read, kmsg.ACLOperationCreate, kmsg.ACLOperationDelete, kmsg.ACLOperationAlter, describe, kmsg.ACLOperationDescribeConfigs, kmsg.ACLOperationAlterConfigs} {
		delete(want, at(bd(topicT, topic, lit, "admin", o, allowP)))
	}
	granted := []aclsync.Binding{at(bd(topicT, topic, lit, "writer", write, allowP)), at(bd(topicT, topic, lit, "admin", all, allowP))}
	for _, b := range granted {
		want[b] = true
	}
	if len(g.Created) != 2 || len(g.Deleted) != 7 || g.Managed != len(want)-1 {
		t.Errorf("grant: created %v, deleted %v, managed %d; want 2 created, 7 deleted, %d managed", g.Created, g.Deleted, g.Managed, len(want)-1)
	}
	settled(len(want)-1, true, want)
	if st := l.Status().ACLSync; st.WriteGrantedBy != "failover" {
		t.Errorf("write granted by %q, want failover", st.WriteGrantedBy)
	}
	recordsAre(ctx, t, f, want, opAtDst, granted)

	// A restarted link reads its records: nothing is created or
	// deleted, WRITE stays granted.
	l.stop(t, false)
	l = f.start("acls2")
	l.waitState(t, Mirroring, 90*time.Second)
	settled(len(want)-1, true, want)
	if st := l.Status().ACLSync; len(st.Created) != 0 || len(st.Deleted) != 0 {
		t.Errorf("after a restart: created %v, deleted %v; want nothing changed", st.Created, st.Deleted)
	}
	l.stop(t, false)
	if onKafka {
		if err := produceAs(ctx, dstA, users["writer"], mirror); err != nil {
			t.Errorf("writer's produce to the mirror after the grant: %v", err)
		}
	}
}

// recordsAre checks the link's ACL records in the state topic: every
// wanted binding but the operator's, those in failover marked so. The
// records are read read_committed, behind the session's open state
// transaction: the check is retried for a few commits.
func recordsAre(ctx context.Context, t *testing.T, f *fixture, want map[aclsync.Binding]bool, operators aclsync.Binding, failover []aclsync.Binding) {
	t.Helper()
	var problems []string
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		view, err := statestore.ReadView(ctx, f.cfg.Link.StateTopic, f.dst.Opts())
		if err != nil {
			t.Fatal(err)
		}
		got := map[aclsync.Binding]statestore.ACLValue{}
		for k, v := range view.ACLs {
			if k.LinkName == f.cfg.Link.Name {
				got[bindingOf(k)] = v
			}
		}
		problems = problems[:0]
		for b := range want {
			v, ok := got[b]
			switch {
			case b == operators && ok:
				problems = append(problems, fmt.Sprintf("the operator's binding %s is recorded as the link's", b))
			case b != operators && !ok:
				problems = append(problems, fmt.Sprintf("binding %s is not recorded as the link's", b))
			case ok && v.Failover != slices.Contains(failover, b):
				problems = append(problems, fmt.Sprintf("binding %s: recorded with Failover %v", b, v.Failover))
			}
		}
		for b := range got {
			if !want[b] {
				problems = append(problems, fmt.Sprintf("binding %s is recorded as the link's, and not wanted at the destination", b))
			}
		}
		if len(problems) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// principalName is a name unique to the test for its principals.
func principalName(t *testing.T) string {
	s := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, strings.ToLower(t.Name()))
	return "acl" + s[max(0, len(s)-24):]
}

func createBindings(ctx context.Context, t *testing.T, c *cluster, bs ...aclsync.Binding) {
	t.Helper()
	req := kmsg.NewPtrCreateACLsRequest()
	for _, b := range bs {
		cr := kmsg.NewCreateACLsRequestCreation()
		cr.ResourceType, cr.ResourceName, cr.ResourcePatternType = b.Resource, b.Name, b.Pattern
		cr.Principal, cr.Host, cr.Operation, cr.PermissionType = b.Principal, b.Host, b.Operation, b.Permission
		req.Creations = append(req.Creations, cr)
	}
	resp, err := req.RequestWith(ctx, c.Client)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range resp.Results {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			t.Fatalf("create %s on %s: %v", bs[i], c.Name, err)
		}
	}
}

func deleteBindings(ctx context.Context, t *testing.T, c *cluster, bs ...aclsync.Binding) {
	t.Helper()
	req := kmsg.NewPtrDeleteACLsRequest()
	for _, b := range bs {
		fl := kmsg.NewDeleteACLsRequestFilter()
		fl.ResourceType, fl.ResourceName, fl.ResourcePatternType = b.Resource, new(b.Name), b.Pattern
		fl.Principal, fl.Host, fl.Operation, fl.PermissionType = new(b.Principal), new(b.Host), b.Operation, b.Permission
		req.Filters = append(req.Filters, fl)
	}
	resp, err := req.RequestWith(ctx, c.Client)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range resp.Results {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil || len(r.MatchingACLs) != 1 {
			t.Fatalf("delete %s on %s: %v, %d matched", bs[i], c.Name, err, len(r.MatchingACLs))
		}
	}
}

// describeBindings are a cluster's bindings of the given principals.
func describeBindings(ctx context.Context, t *testing.T, c *cluster, principals map[string]bool) map[aclsync.Binding]bool {
	t.Helper()
	out := map[aclsync.Binding]bool{}
	for _, rt := range []kmsg.ACLResourceType{kmsg.ACLResourceTypeTopic, kmsg.ACLResourceTypeGroup} {
		req := kmsg.NewPtrDescribeACLsRequest()
		req.ResourceType, req.ResourcePatternType = rt, kmsg.ACLResourcePatternTypeAny
		req.Operation, req.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
		resp, err := req.RequestWith(ctx, c.Client)
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		if err != nil {
			t.Fatalf("describe ACLs of %s: %v", c.Name, err)
		}
		for _, r := range resp.Resources {
			for _, a := range r.ACLs {
				if principals[a.Principal] {
					out[aclsync.Binding{Resource: r.ResourceType, Name: r.ResourceName, Pattern: r.ResourcePatternType,
						Principal: a.Principal, Host: a.Host, Operation: a.Operation, Permission: a.PermissionType}] = true
				}
			}
		}
	}
	return out
}

// readAll is every committed value of topic's partitions, partition by
// partition in offset order.
func readAll(ctx context.Context, t *testing.T, c *cluster, topic string, partitions int32) []string {
	t.Helper()
	var out []string
	for p := range partitions {
		end := listEnd(ctx, t, c, topic, p)
		for _, r := range readPartition(t, c, topic, p, true, end) {
			out = append(out, string(r.Value))
		}
	}
	return out
}

func listEnd(ctx context.Context, t *testing.T, c *cluster, topic string, p int32) int64 {
	t.Helper()
	ends, err := c.Admin.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := ends.Lookup(topic, p)
	if !ok || o.Err != nil {
		t.Fatalf("end offset of %s[%d]: %v", topic, p, o.Err)
	}
	return o.Offset
}

// scramOpts are the options of a client of c as SCRAM user.
func scramOpts(t *testing.T, c *aclCluster, user string) []kgo.Opt {
	t.Helper()
	cc := scramCluster(c, user)
	opts, err := dial.Options(&cc)
	if err != nil {
		t.Fatal(err)
	}
	return opts
}

// consumeAs reads n records of topic with group as user, in partition
// and offset order.
func consumeAs(ctx context.Context, t *testing.T, c *aclCluster, user, topic, group string, n int) []string {
	t.Helper()
	cl, err := kgo.NewClient(append(scramOpts(t, c, user), kgo.ConsumeTopics(topic), kgo.ConsumerGroup(group),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	byPart := map[int32][]string{}
	count := 0
	for count < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%s consumed %d of %d records of %s: %v", user, count, n, topic, ctx.Err())
		}
		for _, fe := range fs.Errors() {
			t.Fatalf("%s consuming %s[%d]: %v", user, fe.Topic, fe.Partition, fe.Err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			byPart[r.Partition] = append(byPart[r.Partition], string(r.Value))
			count++
		})
	}
	var out []string
	for _, p := range slices.Sorted(maps.Keys(byPart)) {
		out = append(out, byPart[p]...)
	}
	return out
}

// consumeOnce fetches topic as user without a group and returns the first
// error (or records) a poll brings.
func consumeOnce(ctx context.Context, c *aclCluster, user, topic string) (int, error) {
	cc := scramCluster(c, user)
	opts, err := dial.Options(&cc)
	if err != nil {
		return 0, err
	}
	cl, err := kgo.NewClient(append(opts, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if err := fs.Err(); err != nil {
			return 0, err
		}
		if n := fs.NumRecords(); n > 0 {
			return n, nil
		}
	}
}

// produceAs produces one record to topic as user.
func produceAs(ctx context.Context, c *aclCluster, user, topic string) error {
	cc := scramCluster(c, user)
	opts, err := dial.Options(&cc)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append(opts, kgo.RecordRetries(2))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("written after the move")}).FirstErr()
}

// Guards docs/acls.md's ACL sync rows on Kafka's authorizer: the link as
// a principal with the least set for mirroring, plus some of the three
// cluster permissions ACL sync needs. Each left out is the round's error,
// naming the cluster, the principal, the operation and why, and the
// mirror goes on; with all three the round succeeds.
func TestACLSyncRefusals(t *testing.T) {
	cases := []struct {
		name  string
		extra []grant
		want  string // {user} replaced; empty: the round succeeds
	}{
		{name: "source Describe", want: `source cluster "src" does not allow User:{user} Describe on Cluster:kafka-cluster (` + whyACLSrcDescribe + `; see docs/acls.md): CLUSTER_AUTHORIZATION_FAILED`},
		{name: "destination Describe", extra: []grant{{"src", kmsg.ACLResourceTypeCluster, "kafka-cluster", kadm.OpDescribe}},
			want: `destination cluster "dst" does not allow User:{user} Describe on Cluster:kafka-cluster (` + whyACLDstDescribe + `; see docs/acls.md): CLUSTER_AUTHORIZATION_FAILED`},
		{name: "destination Alter", extra: []grant{{"src", kmsg.ACLResourceTypeCluster, "kafka-cluster", kadm.OpDescribe}, {"dst", kmsg.ACLResourceTypeCluster, "kafka-cluster", kadm.OpDescribe}},
			want: `destination cluster "dst" does not allow User:{user} Alter on Cluster:kafka-cluster (` + whyACLDstAlter + `; see docs/acls.md): CLUSTER_AUTHORIZATION_FAILED`},
		{name: "all three", extra: []grant{{"src", kmsg.ACLResourceTypeCluster, "kafka-cluster", kadm.OpDescribe}, {"dst", kmsg.ACLResourceTypeCluster, "kafka-cluster", kadm.OpDescribe},
			{"dst", kmsg.ACLResourceTypeCluster, "kafka-cluster", kadm.OpAlter}}},
	}
	mirrortest.RealOnly(t, func(t *testing.T, b mirrortest.Backend) {
		src, dst := aclClusters(t, b)
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				e := &env{b: b, n: mirrortest.NamesFor(t, b)}
				f := e.mirroredBetween(t, src.cluster, dst.cluster, "r", srcTopic("topic", 1))
				topic := f.topic("topic")
				user := principalFor(t, src, dst)
				blocks := f.viaSCRAM(src, dst, user)
				f.cfg.Link.ACLSync = ACLSync{Enabled: true}
				f.cfg.Link.ACLSyncInterval = 300 * time.Millisecond
				f.cfg.Link.SessionTimeout = 30 * time.Second
				allow(t, user, src, dst, append(grants(leastPrivilege(f.cfg, []string{topic}), nil), tc.extra...))
				reader := "User:" + principalName(t) + "-reader"
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				createBindings(ctx, t, src.cluster, aclsync.Binding{Resource: kmsg.ACLResourceTypeTopic, Name: topic, Pattern: kmsg.ACLResourcePatternTypeLiteral,
					Principal: reader, Host: "*", Operation: kmsg.ACLOperationRead, Permission: kmsg.ACLPermissionTypeAllow})

				f.load(idempotent, 2, "i", 60)
				l, tap := startSCRAMLink(t, f.cfg, blocks, tc.name)
				l.waitState(t, Mirroring, 90*time.Second)
				want := strings.ReplaceAll(tc.want, "{user}", user)
				deadline := time.Now().Add(60 * time.Second)
				for {
					st := l.Status().ACLSync
					// The source's bindings on the topic: the
					// reader's READ, and the link principal's own
					// READ and DESCRIBE_CONFIGS, of which the
					// destination holds READ already (the least
					// set): two created, one left alone.
					if tc.want == "" && st != nil && !st.LastSuccess.IsZero() && st.Managed == 2 && st.LeftAlone == 1 {
						break
					}
					if tc.want != "" && st != nil && strings.Contains(st.LastError, want) && logSays(tap.String(), want) {
						t.Logf("ACL sync status: %s", st.LastError)
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("after 60 s: ACL sync status %+v\nwant the error (and the log) to contain:\n%s", st, want)
					}
					time.Sleep(50 * time.Millisecond)
				}
				if tc.want != "" {
					// Nothing recorded as the link's that it did
					// not create: a refused creation's records are
					// removed again. The tombstones are read
					// read_committed, behind the session's open state
					// transaction: give them a few commits.
					var left []statestore.ACLKey
					for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
						view, err := statestore.ReadView(ctx, f.cfg.Link.StateTopic, f.dst.Opts())
						if err != nil {
							t.Fatal(err)
						}
						left = left[:0]
						for k := range view.ACLs {
							if k.LinkName == f.cfg.Link.Name {
								left = append(left, k)
							}
						}
						if len(left) == 0 || time.Now().After(deadline) {
							break
						}
					}
					for _, k := range left {
						t.Errorf("recorded as the link's, not created: %+v", k)
					}
				}
				// ACL sync is beside the mirror: the link mirrors on.
				f.load(plain, 1, "p", 40)
				f.waitMirrored(90 * time.Second)
				f.exactlyOnce()
				if st := l.Status(); st.State != Mirroring || st.LastError != "" {
					t.Errorf("link %s, last error %q: an ACL sync refusal must not stop the mirror", st.State, st.LastError)
				}
			})
		}
	})
}

// A failover with GrantWrite: after the final group sync the ACL sync
// grants WRITE (the source's ALLOW WRITE on the mirrored topic is created
// at the destination and recorded as the failover's), the report lists
// it, and the link pauses. Without acl_sync the same failover fails
// before the pause with an error that says what to do, and the link
// keeps mirroring. On Kafka the authorizer referees: the application's
// principal may not write to the mirror before the failover and may
// after it.
func TestFailoverGrantsWrite(t *testing.T) {
	mirrortest.Each(t, func(t *testing.T, b mirrortest.Backend) {
		for _, enabled := range []bool{true, false} {
			t.Run(map[bool]string{true: "acl_sync", false: "without acl_sync"}[enabled], func(t *testing.T) {
				testFailoverGrantsWrite(t, &env{b: b, n: mirrortest.NamesFor(t, b)}, enabled)
			})
		}
	})
}

func testFailoverGrantsWrite(t *testing.T, e *env, enabled bool) {
	var fx *fixture
	var srcA, dstA *aclCluster
	user := "app"
	if e.b.Real() {
		srcA, dstA = aclClusters(t, e.b)
		fx = e.mirroredBetween(t, srcA.cluster, dstA.cluster, "fogrant", srcTopic("t", 1))
		user = principalName(t) + "-app"
		scramUser(t, srcA, dstA, user)
	} else {
		fx = e.mirrored(t, "fogrant", srcTopic("t", 1))
	}
	topic := fx.topic("t")
	mirror := fx.cfg.Link.DestinationTopic(topic, fx.cfg.Source.Name)
	w := aclsync.Binding{Resource: kmsg.ACLResourceTypeTopic, Name: topic, Pattern: kmsg.ACLResourcePatternTypeLiteral,
		Principal: "User:" + user, Host: "*", Operation: kmsg.ACLOperationWrite, Permission: kmsg.ACLPermissionTypeAllow}
	r := w
	r.Operation = kmsg.ACLOperationRead
	wAt, rAt := w, r
	wAt.Name, rAt.Name = mirror, mirror
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createBindings(ctx, t, fx.src, w, r)
	// The clusters are shared with other tests on Kafka: the bindings of
	// the test's principal go with it.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, c := range []*cluster{fx.src, fx.dst} {
			for b := range describeBindings(ctx, t, c, map[string]bool{w.Principal: true}) {
				deleteBindings(ctx, t, c, b)
			}
		}
	})
	fx.cfg.Link.ACLSync = ACLSync{Enabled: enabled}
	fx.cfg.Link.ACLSyncInterval = 200 * time.Millisecond
	fx.load(idempotent, 0, "before", 30)
	l := fx.start("fogrant")
	fx.waitMirrored(60 * time.Second)
	if enabled {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if st := l.Status().ACLSync; st != nil && st.Managed == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("READ not synced: %+v", l.Status().ACLSync)
			}
		}
	}
	if dstA != nil {
		// Refused: with READ alone at the destination the principal may
		// not write anywhere there, so Kafka refuses its idempotent
		// producer's InitProducerId on the cluster first (KIP-679:
		// IdempotentWrite, or Write on some topic).
		if err := produceAs(ctx, dstA, user, mirror); !errors.Is(err, kerr.ClusterAuthorizationFailed) && !errors.Is(err, kerr.TopicAuthorizationFailed) {
			t.Fatalf("%s's produce to the mirror before the failover: %v, want CLUSTER_ or TOPIC_AUTHORIZATION_FAILED", w.Principal, err)
		}
	}
	if err := l.StartFailover(failover.Options{Timeout: 30 * time.Second, GrantWrite: true}); err != nil {
		t.Fatal(err)
	}
	f := failoverEnd(t, l, 60*time.Second)
	if !enabled {
		if f.Outcome != failover.Failed || !strings.Contains(f.Error, errACLSyncOff.Error()) || f.ACLs != nil {
			t.Fatalf("failover %+v, want failed with %q", f, errACLSyncOff)
		}
		time.Sleep(200 * time.Millisecond)
		if st := l.State(); st != Mirroring {
			t.Fatalf("link %s after the failed grant, want MIRRORING", st)
		}
		return
	}
	if f.Outcome != failover.Done || !f.GrantWrite || f.ACLs == nil || len(f.ACLs.Created) != 1 || f.ACLs.Managed != 2 {
		t.Fatalf("failover %+v (acls %+v), want done with WRITE created and 2 managed", f, f.ACLs)
	}
	if f.ACLs.Created[0] != wAt.String() {
		t.Errorf("created %q, want %q", f.ACLs.Created[0], wAt)
	}
	l.waitState(t, Paused, 30*time.Second)
	got := describeBindings(ctx, t, fx.dst, map[string]bool{w.Principal: true})
	if len(got) != 2 || !got[wAt] || !got[rAt] {
		t.Errorf("destination bindings %v, want READ and WRITE of %s", got, w.Principal)
	}
	recordsAre(ctx, t, fx, map[aclsync.Binding]bool{wAt: true, rAt: true}, aclsync.Binding{}, []aclsync.Binding{wAt})
	if dstA != nil {
		if err := produceAs(ctx, dstA, user, mirror); err != nil {
			t.Errorf("%s's produce to the mirror after the failover granted WRITE: %v", w.Principal, err)
		}
	}
}
