package link

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/internal/kafka/dial"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/internal/testkit/mirrortest"
	"github.com/seed83556561/mirrord/internal/testkit/realkafka"
	"github.com/seed83556561/mirrord/verify"
)

// fixture is where most of the package's scenarios start: a source and a
// destination cluster, topics created at the source, a link configured to
// mirror them, and the ledger of what the test's producers committed.
//
//	f := e.mirrored(t, "name", srcTopic("t", 1))
//	f.load(idempotent, 0, "before", 50)
//	f.cfg.Link.SessionTimeout = ... // before start, as the test needs
//	a := f.start("A")
//	f.waitMirrored(60 * time.Second)
//	f.exactlyOnce()
//
// Topics are named by their base names throughout (f.topic gives the
// scenario's full name). load, waitMirrored and exactlyOnce work on the
// topics named, or, when none is, on the mirrored topics the fixture
// created (in the order given). The embedded env gives topic, same,
// topics and stateTopic.
type fixture struct {
	*env
	t        *testing.T
	name     string // the link's name without the scenario's prefix; the log name of startWith
	src, dst *cluster
	cfg      Config    // what start and startWith run; a test changes it before it starts a link
	p        *produced // what load committed and aborted
	made     []string  // the mirrored topics created at the start, by base name
}

// topicSpec is one topic of a fixture: made by srcTopic or lateTopic.
type topicSpec struct {
	base       string
	partitions int32
	config     map[string]*string
	create     bool // created at the source when the fixture is made
	atDst      bool // created at the destination too, as it is at the source
	mirrored   bool // one of the link's topics
}

// srcTopic is a topic the fixture creates at the source with partitions
// partitions, and that the link mirrors.
func srcTopic(base string, partitions int32) topicSpec {
	return topicSpec{base: base, partitions: partitions, create: true, mirrored: true}
}

// lateTopic is a topic the link mirrors that the test creates later (or
// never).
func lateTopic(base string) topicSpec { return topicSpec{base: base, mirrored: true} }

// with gives the topic a topic configuration.
func (s topicSpec) with(config map[string]*string) topicSpec { s.config = config; return s }

// alsoAtDst creates the topic at the destination too (after the source's),
// with the same partitions and configuration.
func (s topicSpec) alsoAtDst() topicSpec { s.atDst = true; return s }

// unmirrored leaves the topic out of the link's topics: it is created and
// may be loaded, and must not arrive.
func (s topicSpec) unmirrored() topicSpec { s.mirrored = false; return s }

// mirrored makes the fixture on a fresh pair of the scenario's clusters:
// "src" (kafkatest.SourceClusterID) and "dst" (kafkatest.DestClusterID).
func (e *env) mirrored(t *testing.T, name string, topics ...topicSpec) *fixture {
	t.Helper()
	src := e.cluster(t, "src", kafkatest.SourceClusterID)
	dst := e.cluster(t, "dst", kafkatest.DestClusterID)
	return e.mirroredBetween(t, src, dst, name, topics...)
}

// mirroredBetween makes the fixture on clusters the test made: it creates
// the topics (in order) and configures link name (e.linkConfig) to mirror
// the mirrored ones.
func (e *env) mirroredBetween(t *testing.T, src, dst *cluster, name string, topics ...topicSpec) *fixture {
	t.Helper()
	f := &fixture{env: e, t: t, name: name, src: src, dst: dst, p: newProduced()}
	var mirrored []string
	for _, s := range topics {
		if s.create {
			src.CreateTopic(t, e.topic(s.base), s.partitions, s.config)
			if s.atDst {
				dst.CreateTopic(t, e.topic(s.base), s.partitions, s.config)
			}
		}
		if s.mirrored {
			mirrored = append(mirrored, s.base)
			if s.create {
				f.made = append(f.made, s.base)
			}
		}
	}
	f.cfg = e.linkConfig(name, src, dst, mirrored...)
	return f
}

// or is bases, or the fixture's mirrored topics when bases is empty; a
// check of no topic at all fails the test rather than pass unchecked.
func (f *fixture) or(bases []string) []string {
	f.t.Helper()
	if len(bases) == 0 {
		bases = f.made
	}
	if len(bases) == 0 {
		f.t.Fatal("fixture: no topics named and none created: name the topics")
	}
	return bases
}

// start runs the link as f.cfg says, with the fixture's clusters and a
// logger named logName (startLink).
func (f *fixture) start(logName string) *testLink {
	f.t.Helper()
	return startLink(f.t, f.cfg, f.src, f.dst, logName)
}

// startWith runs the link as f.cfg says with the collaborators given; a
// nil Logger is the test log's (named after the link), nil SourceOpts and
// DestinationOpts reach the fixture's clusters directly.
func (f *fixture) startWith(d Deps) *testLink {
	f.t.Helper()
	if d.Logger == nil {
		d.Logger = testLogger(f.t, f.name)
	}
	if d.SourceOpts == nil {
		d.SourceOpts = f.src.Opts()
	}
	if d.DestinationOpts == nil {
		d.DestinationOpts = f.dst.Opts()
	}
	return startLinkWith(f.t, f.cfg, d)
}

// load produces n records to the source's topics with one producer of the
// kind and codec, whose transactional ID (and key prefix) is txid, both
// named for the scenario; the ledger records them.
func (f *fixture) load(kind mirrortest.Kind, codec int, txid string, n int, bases ...string) {
	f.t.Helper()
	load(f.t, f.src, f.p, kind, codec, f.topic(txid), n, f.topics(f.or(bases)...)...)
}

// waitMirrored waits until verify finds each topic mirrored to the
// destination topic of the same name, exact up to the source's end.
func (f *fixture) waitMirrored(within time.Duration, bases ...string) verify.Report {
	f.t.Helper()
	return waitMirrored(f.t, f.src, f.dst, f.stateTopic(), f.same(f.or(bases)...), within)
}

// exactlyOnce checks the destination's topics against the ledger: every
// committed record once, in order, nothing aborted; it returns the
// number of committed records.
func (f *fixture) exactlyOnce(bases ...string) int {
	f.t.Helper()
	return exactlyOnce(f.t, f.dst, f.p, f.topics(f.or(bases)...)...)
}

// logWallTime starts a real-Kafka test's clock; the function it returns
// (deferred) logs how long the test took.
func logWallTime(t *testing.T, b mirrortest.Backend) func() {
	start := time.Now()
	return func() { t.Logf("wall time on Kafka %s: %s", b.Kafka, time.Since(start).Round(100*time.Millisecond)) }
}

// dialed are the kgo options mirrord reaches a cluster block with, as the
// agent dials it (dial.Options).
func dialed(t *testing.T, c *config.Cluster) []kgo.Opt {
	t.Helper()
	opts, err := dial.Options(c)
	if err != nil {
		t.Fatal(err)
	}
	return opts
}

// securedCluster is a cluster of a shared secured pair: the embedded
// cluster's clients (the test's own) use a PLAINTEXT listener, secured are
// the addresses of the listener mirrord uses.
type securedCluster struct {
	*cluster
	secured []string
}

// securedClusters returns the package's source and destination cluster of
// a kind ("acl", "oauth") for version b.Kafka, shared by the tests of that
// kind and started on first use: a PLAINTEXT listener for the test's own
// clients, and listener l, which mirrord uses, on brokers with props.
func securedClusters(t *testing.T, b mirrortest.Backend, kind string, l realkafka.Listener, props map[string]string) (src, dst *securedCluster) {
	t.Helper()
	mk := func(name, id string) *securedCluster {
		rc := realkafka.Shared(t, kind+"/"+b.Kafka+"/"+name, realkafka.Config{
			Version:     b.Kafka,
			ClusterID:   id,
			Listeners:   []realkafka.Listener{{Name: "PLAINTEXT", Protocol: realkafka.Plaintext}, l},
			BrokerProps: props,
		})
		return &securedCluster{cluster: mirrortest.Wrap(t, name, rc), secured: rc.ListenerAddrs(l.Name)}
	}
	return mk("src", kafkatest.SourceClusterID), mk("dst", kafkatest.DestClusterID)
}
