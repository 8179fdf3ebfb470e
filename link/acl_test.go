package link

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/internal/kafka/dial"
	"github.com/seed83556561/mirrord/internal/testkit/mirrortest"
	"github.com/seed83556561/mirrord/internal/testkit/realkafka"
	"github.com/seed83556561/mirrord/statestore"
)

// The least-privilege tests (docs/acls.md): a source and a destination
// cluster with KRaft's StandardAuthorizer, no access for anyone without an
// ACL, the PLAINTEXT listeners (the launcher's CONTROLLER and INTERNAL, and
// the tests' own PLAINTEXT admin listener) as super user User:ANONYMOUS,
// and a SASL_PLAINTEXT listener with SCRAM-SHA-512 through which mirrord
// connects as a principal of its own, with exactly the ACLs docs/acls.md
// lists.

const aclPassword = "acl-test-pass-5e1f"

// aclBrokerProps switch the authorizer on.
var aclBrokerProps = map[string]string{
	"authorizer.class.name":            "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
	"super.users":                      "User:ANONYMOUS",
	"allow.everyone.if.no.acl.found":   "false",
	"group.initial.rebalance.delay.ms": "0",
	"transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}

// aclCluster is one cluster of the least-privilege tests: the embedded
// mirrortest cluster's clients use the PLAINTEXT listener (super user),
// secured are the addresses of the SCRAM listener mirrord uses.
type aclCluster = securedCluster

// aclClusters returns the package's source and destination cluster with an
// authorizer for version b.Kafka, started on first use.
func aclClusters(t *testing.T, b mirrortest.Backend) (src, dst *aclCluster) {
	t.Helper()
	return securedClusters(t, b, "acl", realkafka.Listener{
		Name: "SCRAM", Protocol: realkafka.SASLPlaintext, Mechanisms: []string{realkafka.ScramSHA512},
	}, aclBrokerProps)
}

// principalFor is a SCRAM user of the test's own on both clusters: every
// case of a test gets its own principal, so that ACLs of one case never
// help another.
func principalFor(t *testing.T, src, dst *aclCluster) string {
	t.Helper()
	sum := sha256.Sum256([]byte(t.Name()))
	user := "mirror-" + hex.EncodeToString(sum[:4])
	scramUser(t, src, dst, user)
	return user
}

// scramUser creates SCRAM user user on both clusters and waits until it
// can log in to each.
func scramUser(t *testing.T, src, dst *aclCluster, user string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range []*aclCluster{src, dst} {
		res, err := c.Admin.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: user, Mechanism: kadm.ScramSha512, Iterations: 4096, Password: aclPassword}})
		if err == nil {
			err = res.Error()
		}
		if err != nil {
			t.Fatalf("create SCRAM user %s on %s: %v", user, c.Name, err)
		}
	}
	for _, c := range []*aclCluster{src, dst} {
		cc := scramCluster(c, user)
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := pingOnce(ctx, &cc)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("SCRAM user %s cannot log in to %s: %v", user, c.Name, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

func pingOnce(ctx context.Context, c *config.Cluster) error {
	opts, err := dial.Options(c)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	return dial.Ping(ctx, cl)
}

// scramCluster is the cluster block mirrord uses for c as user.
func scramCluster(c *aclCluster, user string) config.Cluster {
	return config.Cluster{
		Name: c.Name, BootstrapServers: c.secured, ClientID: "mirrord",
		SASL: config.SASL{Mechanism: config.MechanismScramSHA512, Username: user, Password: aclPassword},
	}
}

// viaSCRAM points the fixture's link at the SCRAM listeners of src and dst,
// reached as user, and returns the cluster blocks its clients are dialled
// from.
func (f *fixture) viaSCRAM(src, dst *aclCluster, user string) scramBlocks {
	b := scramBlocks{src: scramCluster(src, user), dst: scramCluster(dst, user)}
	f.cfg.Source, f.cfg.Destination = clusterOf(&b.src), clusterOf(&b.dst)
	return b
}

// scramBlocks are the cluster blocks of a SCRAM link's two clusters.
type scramBlocks struct{ src, dst config.Cluster }

// grant is one ACL: an operation allowed to the principal on a resource
// (literal pattern, any host).
type grant struct {
	cluster string // "src" or "dst"
	typ     kmsg.ACLResourceType
	name    string
	op      kadm.ACLOperation
}

func (g grant) String() string {
	return fmt.Sprintf("%s %s:%s %s", g.cluster, g.typ, g.name, g.op)
}

// leastPrivilege are the ACLs of docs/acls.md for a link, by key: what a
// case leaves out or adds is named by the key.
//
//	source      Topic <each source topic>       Read, DescribeConfigs
//	destination Topic <each destination topic>  Create, Write, Read, Alter
//	destination Topic <state topic>             Create, Read, Write, DescribeConfigs
//	destination TransactionalId mirrord.<link>  Write
//
// Describe is implied by Read, Write (and Alter); nothing on the cluster
// resource is needed (no IdempotentWrite).
//
// With groups, the group offset sync's (under their own keys):
//
//	source      Group <each group>  Describe
//	destination Group <each group>  Read (it implies Describe)
func leastPrivilege(cfg Config, srcTopics []string, groups ...string) map[string][]grant {
	var dstTopics []string
	for _, st := range srcTopics {
		dstTopics = append(dstTopics, cfg.Link.DestinationTopic(st, cfg.Source.Name))
	}
	out := map[string][]grant{}
	add := func(key, cluster string, typ kmsg.ACLResourceType, names []string, op kadm.ACLOperation) {
		for _, n := range names {
			out[key] = append(out[key], grant{cluster, typ, n, op})
		}
	}
	topic, txn := kmsg.ACLResourceTypeTopic, kmsg.ACLResourceTypeTransactionalId
	add("src.topic.Read", "src", topic, srcTopics, kadm.OpRead)
	add("src.topic.DescribeConfigs", "src", topic, srcTopics, kadm.OpDescribeConfigs)
	add("dst.topic.Create", "dst", topic, dstTopics, kadm.OpCreate)
	add("dst.topic.Write", "dst", topic, dstTopics, kadm.OpWrite)
	add("dst.topic.Read", "dst", topic, dstTopics, kadm.OpRead)
	add("dst.topic.Alter", "dst", topic, dstTopics, kadm.OpAlter)
	state := []string{cfg.Link.StateTopic}
	add("dst.state.Create", "dst", topic, state, kadm.OpCreate)
	add("dst.state.Read", "dst", topic, state, kadm.OpRead)
	add("dst.state.Write", "dst", topic, state, kadm.OpWrite)
	add("dst.state.DescribeConfigs", "dst", topic, state, kadm.OpDescribeConfigs)
	add("dst.txn.Write", "dst", txn, []string{statestore.TransactionalID(cfg.Link.Name)}, kadm.OpWrite)
	group := kmsg.ACLResourceTypeGroup
	add("src.group.Describe", "src", group, groups, kadm.OpDescribe)
	add("dst.group.Read", "dst", group, groups, kadm.OpRead)
	// Not in the least set; cases add them.
	add("+dst.group.Describe", "dst", group, groups, kadm.OpDescribe)
	add("+src.topic.Describe", "src", topic, srcTopics, kadm.OpDescribe)
	add("+dst.txn.Describe", "dst", txn, []string{statestore.TransactionalID(cfg.Link.Name)}, kadm.OpDescribe)
	// Active-active: the state topic of the same name at the source.
	add("+src.state.Read", "src", topic, state, kadm.OpRead)
	return out
}

// grants returns the least set without the keys in drop, plus the keys in
// extra.
func grants(set map[string][]grant, drop []string, extra ...string) []grant {
	var out []grant
	for k, gs := range set {
		if strings.HasPrefix(k, "+") || slices.Contains(drop, k) {
			continue
		}
		out = append(out, gs...)
	}
	for _, k := range extra {
		if set[k] == nil {
			panic("no grant " + k)
		}
		out = append(out, set[k]...)
	}
	return out
}

// allow creates the ACLs for user and waits until each cluster's broker
// lists them (a StandardAuthorizer applies ACLs from the metadata log, a
// moment after CreateAcls answered).
func allow(t *testing.T, user string, src, dst *aclCluster, gs []grant) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	principal := "User:" + user
	want := map[string]int{}
	for _, g := range gs {
		c := src
		if g.cluster == "dst" {
			c = dst
		}
		b := kadm.NewACLs().Allow(principal).AllowHosts("*").Operations(g.op).ResourcePatternType(kadm.ACLPatternLiteral)
		switch g.typ {
		case kmsg.ACLResourceTypeTopic:
			b.Topics(g.name)
		case kmsg.ACLResourceTypeTransactionalId:
			b.TransactionalIDs(g.name)
		case kmsg.ACLResourceTypeCluster:
			b.Clusters()
		case kmsg.ACLResourceTypeGroup:
			b.Groups(g.name)
		default:
			t.Fatalf("grant %v: resource type not handled", g)
		}
		res, err := c.Admin.CreateACLs(ctx, b)
		if err == nil {
			for _, r := range res {
				err = errors.Join(err, r.Err)
			}
		}
		if err != nil {
			t.Fatalf("create ACL %v: %v", g, err)
		}
		want[g.cluster]++
	}
	t.Logf("ACLs of %s: %v", principal, gs)
	for name, c := range map[string]*aclCluster{"src": src, "dst": dst} {
		for {
			res, err := c.Admin.DescribeACLs(ctx, kadm.NewACLs().AnyResource().Allow(principal).AllowHosts().
				Operations(kadm.OpAny).ResourcePatternType(kadm.ACLPatternAny))
			n := 0
			if err == nil {
				for _, r := range res {
					n += len(r.Described)
				}
			}
			if err == nil && n >= want[name] {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("ACLs of %s on %s: %d of %d listed (%v)", principal, name, n, want[name], err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// logTap keeps what a link logs, and passes it to the test log.
type logTap struct {
	t  *testing.T
	mu sync.Mutex
	b  strings.Builder
}

func (w *logTap) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.b.Write(p)
	w.mu.Unlock()
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func (w *logTap) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// startSCRAMLink runs a link whose clients are built by dial from the
// configuration's cluster blocks, as the agent builds them, and whose log
// is kept.
func startSCRAMLink(t *testing.T, cfg Config, b scramBlocks, name string) (*testLink, *logTap) {
	t.Helper()
	srcOpts, dstOpts := dialed(t, &b.src), dialed(t, &b.dst)
	tap := &logTap{t: t}
	lg := hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Info, Output: tap, DisableTime: true})
	return startLinkWith(t, cfg, Deps{Logger: lg, SourceOpts: srcOpts, DestinationOpts: dstOpts}), tap
}

// Guards that mirrord runs with exactly the ACLs docs/acls.md lists, and no
// more: a link of two topics (one with retention settings to copy), three
// kinds of producers, a source topic that grows while the link mirrors
// (Alter at the destination), and a crash and restart (replay of a state
// topic that holds records, its cleanup.policy checked, reconciliation
// reading the destination, a new session fencing the old one), checked
// record by record.
func TestLeastPrivilegeACLs(t *testing.T) {
	mirrortest.RealOnly(t, func(t *testing.T, b mirrortest.Backend) {
		defer logWallTime(t, b)()
		src, dst := aclClusters(t, b)
		e := &env{b: b, n: mirrortest.NamesFor(t, b)}
		f := e.mirroredBetween(t, src.cluster, dst.cluster, "acl", srcTopic("orders", 3), srcTopic("events", 1).with(map[string]*string{
			"retention.ms": new("86400000"), "max.message.bytes": new("2097152"),
		}))
		orders, events := f.topic("orders"), f.topic("events")
		user := principalFor(t, src, dst)
		blocks := f.viaSCRAM(src, dst, user)
		allow(t, user, src, dst, grants(leastPrivilege(f.cfg, []string{orders, events}), nil))

		f.load(idempotent, 3, "i1", 300, "orders", "events")
		f.load(transactional, 4, "t1", 210, "orders", "events")
		f.load(plain, 1, "p1", 120, "orders")

		l, _ := startSCRAMLink(t, f.cfg, blocks, "acl")
		l.waitState(t, Mirroring, 90*time.Second)
		f.waitMirrored(90 * time.Second)
		f.exactlyOnce()

		// The created destination topic copied the source's settings,
		// which took DescribeConfigs at the source.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		rcs, err := dst.Admin.DescribeTopicConfigs(ctx, events)
		if err != nil {
			t.Fatal(err)
		}
		rc, _ := rcs.On(events, nil)
		got := map[string]string{}
		for _, c := range rc.Configs {
			if c.Value != nil {
				got[c.Key] = *c.Value
			}
		}
		for k, v := range map[string]string{"retention.ms": "86400000", "max.message.bytes": "2097152", "compression.type": "producer", "message.timestamp.type": "CreateTime"} {
			if got[k] != v {
				t.Errorf("destination topic %s: %s=%q, want %q", events, k, got[k], v)
			}
		}

		// The source topic grows: the link adds the partition at the
		// destination (Alter) while it mirrors.
		if _, err := src.Admin.CreatePartitions(ctx, 1, orders); err != nil {
			t.Fatal(err)
		}
		src.WaitTopic(t, orders, 4)
		dst.WaitTopic(t, orders, 4)
		f.load(idempotent, 0, "i2", 200, "orders")
		f.waitMirrored(90 * time.Second)

		// A crash: the next session replays a state topic with records,
		// checks its cleanup.policy, fences the old session and reconciles
		// the destination tails.
		f.load(transactional, 2, "t2", 140, "orders", "events")
		l.stop(t, true)
		f.load(plain, 4, "p2", 100, "orders", "events")
		l2, _ := startSCRAMLink(t, f.cfg, blocks, "acl-2")
		l2.waitState(t, Mirroring, 90*time.Second)
		f.load(idempotent, 2, "i3", 100, "orders", "events")
		f.waitMirrored(90 * time.Second)
		n := f.exactlyOnce()
		for _, x := range []*testLink{l, l2} {
			if st := x.Status(); st.LastError != "" {
				t.Errorf("link %s failed on the way (the ACLs were not enough?): %s", st.Name, st.LastError)
			}
		}
		t.Logf("%d committed records mirrored with the least ACLs", n)
	})
}

// aclCase is one permission left out of the least set (or one case where
// the least set holds less than usual), and what the link must say.
type aclCase struct {
	name  string
	drop  []string // keys of leastPrivilege left out
	extra []string // keys added
	// setup prepares topics beyond the source topic (3 partitions), with
	// the case's names.
	setup func(t *testing.T, e *env, src, dst *aclCluster)
	// include replaces the link's topics pattern (a pattern that names
	// no topic, say).
	include string
	// want is what LastError and the log must contain, with {user},
	// {topic} (the source topic, also its destination's name),
	// {state} and {link} replaced. Empty: the link must mirror.
	want string
	// logOnly: the link cannot fail (the topic is invisible to it); want
	// is in its log and it mirrors nothing.
	logOnly bool
	// activeActive: the link skips unattributed batches and shares its
	// destination (an active-active link, which must read the state topic
	// at its source); its source holds transactional batches. With want,
	// the fetcher retries those partitions (want in the log, the link
	// MIRRORING, none of the transactional records at the destination).
	activeActive bool
	// txn runs the link in transactional delivery.
	txn bool
}

// Guards that a link with one permission of docs/acls.md left out says
// which permission on which resource is missing, in its status and its
// log, at once: not a retry loop, a silently skipped topic or a failure
// days later. Also guards the cases where a permission is not needed
// (topics created beforehand).
func TestMissingACLs(t *testing.T) {
	cases := []aclCase{
		{name: "source topic Read", drop: []string{"src.topic.Read"}, extra: []string{"+src.topic.Describe"},
			want: `source cluster "src" does not allow User:{user} Read on Topic:{topic} (mirrord fetches the topic's batches; it may Describe, DescribeConfigs; see docs/acls.md): TOPIC_AUTHORIZATION_FAILED`},
		{name: "source topic Describe, topic named", drop: []string{"src.topic.Read", "src.topic.DescribeConfigs"},
			want: `source cluster "src" does not allow User:{user} Describe on Topic:{topic} (the link's topics name it, and Kafka lists only the topics the principal may describe; Read implies Describe; see docs/acls.md): TOPIC_AUTHORIZATION_FAILED`},
		{name: "source topic Describe, topic matched by a pattern", drop: []string{"src.topic.Read", "src.topic.DescribeConfigs"},
			include: "{prefix}top.*", logOnly: true,
			want: `no source topic matches the link's topics among those the source lists: Kafka lists only the topics the principal may describe, so a topic without Describe (or Read, which implies it) is left out without a word (see docs/acls.md)`},
		{name: "source topic DescribeConfigs", drop: []string{"src.topic.DescribeConfigs"},
			want: `source cluster "src" does not allow User:{user} DescribeConfigs on Topic:{topic} (mirrord reads cleanup.policy, retention.ms, retention.bytes and max.message.bytes to create the destination topic with them; or create the destination topic beforehand; it may Describe, Read; see docs/acls.md): TOPIC_AUTHORIZATION_FAILED`},
		{name: "destination topic Create", drop: []string{"dst.topic.Create"},
			want: `destination cluster "dst" does not allow User:{user} Create on Topic:{topic} (mirrord creates a destination topic that does not exist; grant Create on the topic or on the cluster, or create the topic beforehand; see docs/acls.md): TOPIC_AUTHORIZATION_FAILED`},
		{name: "destination topic Write", drop: []string{"dst.topic.Write"},
			want: `destination cluster "dst" does not allow User:{user} Write on Topic:{topic} (mirrord appends the mirrored batches; it may Alter, Create, Describe, Read; see docs/acls.md): TOPIC_AUTHORIZATION_FAILED`},
		{name: "destination topic Read", drop: []string{"dst.topic.Read"},
			want: `destination cluster "dst" does not allow User:{user} Read on Topic:{topic} (mirrord reads the destination partitions to reconcile after a restart and to settle appends of unknown outcome; it may Alter, Create, Describe, Write; see docs/acls.md): TOPIC_AUTHORIZATION_FAILED`},
		{name: "destination topic Alter", drop: []string{"dst.topic.Alter"},
			setup: func(t *testing.T, e *env, src, dst *aclCluster) { dst.CreateTopic(t, e.topic("topic"), 1, nil) },
			want:  `destination cluster "dst" does not allow User:{user} Alter on Topic:{topic} (mirrord adds partitions to a destination topic when its source topic has more; it may Create, Describe, Read, Write; see docs/acls.md): TOPIC_AUTHORIZATION_FAILED`},
		{name: "state topic Create", drop: []string{"dst.state.Create"},
			want: `the destination cluster does not allow User:{user} Create on Topic:{state} (mirrord creates the state topic when it does not exist; grant Create on it or on the cluster, or create it beforehand with cleanup.policy=compact; see docs/acls.md): TOPIC_AUTHORIZATION_FAILED`},
		{name: "state topic Describe", drop: []string{"dst.state.Create", "dst.state.Read", "dst.state.Write", "dst.state.DescribeConfigs"},
			want: `the destination cluster does not allow User:{user} Describe on Topic:{state} (the link's state topic: mirrord needs Read, Write and DescribeConfigs on it, which imply Describe, and Create unless it exists; see docs/acls.md): TOPIC_AUTHORIZATION_FAILED`},
		{name: "state topic Read", drop: []string{"dst.state.Read"},
			want: `the destination cluster does not allow User:{user} Read on Topic:{state} (mirrord replays the state topic when a session begins and when partitions join; see docs/acls.md): TOPIC_AUTHORIZATION_FAILED`},
		{name: "state topic Write", drop: []string{"dst.state.Write"},
			want: `the destination cluster does not allow User:{user} Write on Topic:{state} (every state transaction (checkpoints, barriers, salts, the session's lease) writes it; see docs/acls.md): TOPIC_AUTHORIZATION_FAILED`},
		{name: "state topic DescribeConfigs", drop: []string{"dst.state.DescribeConfigs"},
			want: `the destination cluster does not allow User:{user} DescribeConfigs on Topic:{state} (mirrord checks that an existing state topic is compacted; see docs/acls.md): TOPIC_AUTHORIZATION_FAILED`},
		{name: "transactional ID Write and Describe", drop: []string{"dst.txn.Write"},
			want: `begin state session of link "{link}": init producer id for transactional.id mirrord.{link}: the destination cluster does not allow User:{user} Write on TransactionalId:mirrord.{link} (each session of link "{link}" takes it with InitProducerId, which fences the previous session, and commits every state transaction with it; Write implies the Describe that finding its coordinator needs; see docs/acls.md)`},
		{name: "transactional ID Write", drop: []string{"dst.txn.Write"}, extra: []string{"+dst.txn.Describe"},
			want: `begin state session of link "{link}": init producer id for transactional.id mirrord.{link}: the destination cluster does not allow User:{user} Write on TransactionalId:mirrord.{link} (each session of link "{link}" takes it with InitProducerId, which fences the previous session, and commits every state transaction with it; Write implies the Describe that finding its coordinator needs; see docs/acls.md)`},
		{name: "transactional delivery: transactional ID Write", drop: []string{"dst.txn.Write"}, extra: []string{"+dst.txn.Describe"}, txn: true,
			want: `destination cluster "dst" does not allow User:{user} Write on TransactionalId:mirrord.{link} (transactional delivery: each session of link "{link}" takes it with InitProducerId, which fences the previous session, and appends and commits every transaction under it; Write implies the Describe that finding its coordinator needs; see docs/acls.md)`},
		{name: "transactional delivery: destination topic Write", drop: []string{"dst.topic.Write"}, txn: true,
			want: `destination cluster "dst" does not allow User:{user} Write on Topic:{topic} (mirrord appends the mirrored batches; it may Alter, Create, Describe, Read; see docs/acls.md): TOPIC_AUTHORIZATION_FAILED`},
		{name: "transactional delivery: state topic Write", drop: []string{"dst.state.Write"}, txn: true,
			want: `the destination cluster does not allow User:{user} Write on Topic:{state} (every state transaction (checkpoints, barriers, salts, the session's lease) writes it; see docs/acls.md): TOPIC_AUTHORIZATION_FAILED`},
		{name: "transactional delivery needs no more than the least set", txn: true},
		{name: "active-active: state topic Read at the source", activeActive: true,
			want: `read state topic "{state}" at the source to tell the batches a link from the destination appended under its transactional sessions' or salted producer IDs, which must not be sent back: the source cluster does not allow User:{user} Describe on Topic:{state} (links in the other direction record there the producer IDs of batches that must not go back; mirrord needs Read on it, which implies Describe; see docs/acls.md): TOPIC_AUTHORIZATION_FAILED`},
		{name: "active-active needs Read on the state topic at the source", activeActive: true, extra: []string{"+src.state.Read"}},
		{name: "topics created beforehand need no Create and no DescribeConfigs",
			drop: []string{"src.topic.DescribeConfigs", "dst.topic.Create", "dst.state.Create"},
			setup: func(t *testing.T, e *env, src, dst *aclCluster) {
				dst.CreateTopic(t, e.topic("topic"), 3, nil)
				dst.CreateTopic(t, e.stateTopic(), 1, map[string]*string{"cleanup.policy": new("compact")})
			}},
	}
	mirrortest.RealOnly(t, func(t *testing.T, b mirrortest.Backend) {
		defer logWallTime(t, b)()
		src, dst := aclClusters(t, b)
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) { missingACL(t, b, src, dst, tc) })
		}
	})
}

func missingACL(t *testing.T, b mirrortest.Backend, src, dst *aclCluster, tc aclCase) {
	e := &env{b: b, n: mirrortest.NamesFor(t, b)}
	f := e.mirroredBetween(t, src.cluster, dst.cluster, "l", srcTopic("topic", 3))
	topic := f.topic("topic")
	if tc.setup != nil {
		tc.setup(t, e, src, dst)
	}
	user := principalFor(t, src, dst)
	blocks := f.viaSCRAM(src, dst, user)
	if tc.include != "" {
		re, err := config.TopicPattern(strings.ReplaceAll(tc.include, "{prefix}", regexp.QuoteMeta(e.n.Of(""))))
		if err != nil {
			t.Fatal(err)
		}
		f.cfg.Link.Include = []*regexp.Regexp{re}
	}
	if tc.txn {
		f.cfg.Link.Delivery = statestore.DeliveryTransactional
	}
	if tc.activeActive {
		f.cfg.Link.SkipUnattributed, f.cfg.Link.SharedDestination = true, true
	}
	allow(t, user, src, dst, grants(leastPrivilege(f.cfg, []string{topic}), tc.drop, tc.extra...))
	f.load(idempotent, 3, "i", 60)
	if tc.txn || tc.activeActive {
		f.load(transactional, 2, "t", 40)
	}
	if tc.activeActive && tc.want != "" {
		want := strings.NewReplacer("{user}", user, "{state}", e.stateTopic()).Replace(tc.want)
		l, tap := startSCRAMLink(t, f.cfg, blocks, tc.name)
		deadline := time.Now().Add(30 * time.Second)
		for !logSays(tap.String(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("state %s, last error %q; want the log to contain:\n%s", l.Status().State, l.Status().LastError, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if st := l.Status(); st.State != Mirroring {
			t.Errorf("link state %s, want MIRRORING (the fetcher retries the partitions)", st.State)
		}
		for _, r := range consumeAll(t, dst.cluster, false, topic) {
			if strings.HasPrefix(string(r.Key), "transactional-") {
				t.Fatalf("the destination holds %s: a transactional batch went through without its origin looked up", r.Key)
			}
		}
		return
	}

	l, tap := startSCRAMLink(t, f.cfg, blocks, tc.name)
	if tc.want == "" {
		l.waitState(t, Mirroring, 60*time.Second)
		if tc.txn {
			f.waitSameCommitted(60 * time.Second)
			f.exactlyOnceCommitted()
			return
		}
		f.waitMirrored(60 * time.Second)
		f.exactlyOnce()
		return
	}
	want := strings.NewReplacer("{user}", user, "{topic}", topic, "{state}", e.stateTopic(), "{link}", f.cfg.Link.Name).Replace(tc.want)
	began := time.Now()
	deadline := began.Add(30 * time.Second)
	for {
		st := l.Status()
		inLog := logSays(tap.String(), want)
		if tc.logOnly && inLog && st.State == Mirroring {
			if len(st.Partitions) != 0 || st.LastError != "" {
				t.Errorf("link mirrors %d partitions, last error %q; want none and none", len(st.Partitions), st.LastError)
			}
			break
		}
		if !tc.logOnly && inLog && strings.Contains(st.LastError, want) && strings.Contains(st.LastError, "AUTHORIZATION_FAILED") {
			if st.State != Failed && st.State != Preparing {
				t.Errorf("link state %s with last error %q, want FAILED (or PREPARING again after the backoff)", st.State, st.LastError)
			}
			if n := l.prepared.Load(); n != 0 {
				t.Errorf("the link reached MIRRORING %d times; a missing permission must stop it in PREPARING", n)
			}
			t.Logf("after %s: %s", time.Since(began).Round(time.Millisecond), st.LastError)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: state %s, last error:\n%s\nwant it (and the log) to contain:\n%s", time.Since(began).Round(time.Millisecond), st.State, st.LastError, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// logSays reports whether a link's log holds msg, as it is or as hclog
// quotes an error value.
func logSays(log, msg string) bool {
	q := strconv.Quote(msg)
	return strings.Contains(log, msg) || strings.Contains(log, q[1:len(q)-1])
}
