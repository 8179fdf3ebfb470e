package link

import (
	"context"
	"os"
	"reflect"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/internal/kafka/dial"
	"github.com/seed83556561/mirrord/internal/testkit/mirrortest"
	"github.com/seed83556561/mirrord/statestore"
	"github.com/seed83556561/mirrord/transform"
	"github.com/seed83556561/mirrord/verify"
)

// The link's scenarios run on every backend mirrortest offers: kfake, and
// real Kafka when MIRRORD_TEST_KAFKA selects versions. Real clusters are
// shared by the package (Main stops them).
func TestMain(m *testing.M) { os.Exit(mirrortest.Main(m)) }

type cluster = mirrortest.Cluster

// env is one scenario's backend and the names it uses there.
type env struct {
	b mirrortest.Backend
	n mirrortest.Names
}

// scenario runs fn once per backend.
func scenario(t *testing.T, fn func(t *testing.T, e *env)) {
	mirrortest.Each(t, func(t *testing.T, b mirrortest.Backend) {
		fn(t, &env{b: b, n: mirrortest.NamesFor(t, b)})
	})
}

// onKfake is the env of a scenario that needs kfake's request controls.
func onKfake(t *testing.T) *env { return &env{} }

func (e *env) cluster(t *testing.T, name, id string) *cluster {
	return mirrortest.NewCluster(t, e.b, name, id)
}

func (e *env) topic(base string) string { return e.n.Of(base) }

func (e *env) stateTopic() string { return e.n.StateTopic() }

// same maps each topic to itself, by the scenario's names.
func (e *env) same(bases ...string) map[string]string {
	m := map[string]string{}
	for _, b := range bases {
		m[e.topic(b)] = e.topic(b)
	}
	return m
}

func (e *env) topics(bases ...string) []string {
	out := make([]string, len(bases))
	for i, b := range bases {
		out[i] = e.topic(b)
	}
	return out
}

// testLink is a link running in a test, on its own goroutine.
type testLink struct {
	*Link
	cancel context.CancelFunc
	done   chan error
	crash  atomic.Bool
}

// settingsOf copies a config link block into Settings field by field of
// the same name, as agent's linkSettings does, so that tests start from
// config's defaults without a copy of agent's mapping to keep in step.
func settingsOf(l *config.Link) Settings {
	var s Settings
	dst, src := reflect.ValueOf(&s).Elem(), reflect.ValueOf(l).Elem()
	for i := range dst.NumField() {
		if dst.Type().Field(i).Name == "SkipUnattributed" {
			s.SkipUnattributed = l.Unattributed == config.UnattributedSkip
			continue
		}
		f := src.FieldByName(dst.Type().Field(i).Name)
		if !f.IsValid() {
			panic("config.Link has no field " + dst.Type().Field(i).Name)
		}
		if f.Kind() == reflect.Pointer && f.IsNil() && dst.Field(i).Kind() == reflect.Interface {
			continue // a nil block (groups, share_groups) is no selector
		}
		if d, ok := reflect.TypeAssert[config.Delivery](f); ok {
			if d == config.DeliveryTransactional {
				s.Delivery = statestore.DeliveryTransactional
			}
			continue
		}
		dst.Field(i).Set(f.Convert(dst.Field(i).Type()))
	}
	return s
}

// clusterOf is what the link is told of a cluster block, as agent tells it.
func clusterOf(c *config.Cluster) Cluster {
	return Cluster{Name: c.Name, BootstrapServers: c.BootstrapServers, ClusterID: c.ClusterID, Principal: dial.Principal(c)}
}

// linkConfig is a link from src to dst that mirrors the topics named
// (without the scenario's prefix) with timings short enough for tests: every
// key the file sets starts from config's defaults.
func (e *env) linkConfig(name string, src, dst *cluster, topics ...string) Config {
	re, err := config.TopicPattern(e.n.Include(topics...))
	if err != nil {
		panic(err)
	}
	l := settingsOf(config.Default().Links[0])
	l.Name = e.topic(name)
	l.Include = []*regexp.Regexp{re}
	l.StateTopic = e.stateTopic()
	l.StateTopicReplicationFactor = 1
	// A session timeout that a starved -race run on two cores does not
	// miss; a missed lease fails the link (correctly) and costs a retry.
	l.CheckpointInterval, l.SessionTimeout, l.ProducerStateExpiry = 200*time.Millisecond, 3*time.Second, time.Hour
	l.MaxBufferedBytes = 8 << 20
	l.SettleDelay = 100 * time.Millisecond
	l.ProduceTimeout = 2 * time.Second
	l.DiscoveryInterval = 300 * time.Millisecond
	l.DestinationReplicationFactor = 1
	l.CheckCRCs = true
	return Config{
		Link:            l,
		Source:          Cluster{Name: src.Name, BootstrapServers: src.Addrs(), Principal: "User:ANONYMOUS"},
		Destination:     Cluster{Name: dst.Name, BootstrapServers: dst.Addrs(), Principal: "User:ANONYMOUS"},
		ShutdownTimeout: 5 * time.Second,
		Tuning: Tuning{
			BackoffBase:  50 * time.Millisecond,
			BackoffMax:   time.Second,
			LeaseSkew:    time.Nanosecond, // both sessions run on this machine's clock
			FetchMaxWait: 100 * time.Millisecond,
			ExhaustGrace: 500 * time.Millisecond,
		},
	}
}

func startLink(t *testing.T, cfg Config, src, dst *cluster, logName string) *testLink {
	t.Helper()
	return startLinkWith(t, cfg, Deps{
		Logger:          testLogger(t, logName),
		SourceOpts:      src.Opts(),
		DestinationOpts: dst.Opts(),
	})
}

// startLinkWith runs a link with the given collaborators on its own
// goroutine; the test's cleanup stops it.
func startLinkWith(t *testing.T, cfg Config, deps Deps) *testLink {
	t.Helper()
	return startLinkSetup(t, cfg, deps, nil)
}

// startLinkSetup is startLinkWith with setup (unless nil) called on the
// link after New and before Run.
func startLinkSetup(t *testing.T, cfg Config, deps Deps, setup func(*Link)) *testLink {
	t.Helper()
	l, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(l)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tl := &testLink{Link: l, cancel: cancel, done: make(chan error, 1)}
	l.crash = tl.crash.Load
	go func() { tl.done <- l.Run(ctx) }()
	t.Cleanup(func() { tl.stop(t, false) })
	return tl
}

// stop ends the link: cleanly (drain, final checkpoint) or as a crash.
func (tl *testLink) stop(t *testing.T, crash bool) {
	t.Helper()
	if tl.cancel == nil {
		return
	}
	tl.crash.Store(crash)
	tl.cancel()
	tl.cancel = nil
	select {
	case err := <-tl.done:
		if err != nil {
			t.Errorf("link %s: Run: %v", tl.Name(), err)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("link %s did not stop", tl.Name())
	}
}

func (tl *testLink) waitState(t *testing.T, want State, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if tl.Status().State == want {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	st := tl.Status()
	t.Fatalf("link %s: state %s after %s, want %s (last error: %s)", tl.Name(), st.State, within, want, st.LastError)
}

// waitCaughtUp waits until every partition of the link has mirrored up to
// at least offset at the source.
func waitCaughtUp(t *testing.T, l *testLink, offset int64, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		st := l.Status()
		done := len(st.Partitions) > 0
		for _, p := range st.Partitions {
			done = done && p.SourceNextOffset >= offset
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("link %s did not reach source offset %d: %+v", l.Name(), offset, st.Partitions)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// testLogger writes the link's log into the test log (shown on failure or
// with -v), so that a failing scenario tells its story.
func testLogger(t *testing.T, name string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Info, Output: testWriter{t}, DisableTime: true})
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p[:len(p)-1]))
	return len(p), nil
}

// ---- load and checks, from mirrortest ----

type produced = mirrortest.Produced

func newProduced() *produced { return mirrortest.NewProduced() }

const (
	idempotent    = mirrortest.Idempotent
	transactional = mirrortest.Transactional
	plain         = mirrortest.Plain
)

var (
	codecs     = mirrortest.Codecs
	codecNames = mirrortest.CodecNames
)

// load produces n records to topics (full names) with one producer.
func load(t *testing.T, c *cluster, p *produced, kind mirrortest.Kind, codec int, txid string, n int, topics ...string) {
	t.Helper()
	mirrortest.Load(t, c, p, kind, codec, txid, n, topics)
}

func exactlyOnce(t *testing.T, dst *cluster, p *produced, topics ...string) int {
	t.Helper()
	return mirrortest.ExactlyOnce(t, dst, p, nil, topics...)
}

func consumeAll(t *testing.T, c *cluster, markers bool, topics ...string) []*kgo.Record {
	t.Helper()
	return mirrortest.ConsumeAll(t, c, markers, topics...)
}

func waitMirrored(t *testing.T, src, dst *cluster, stateTopic string, topics map[string]string, within time.Duration) verify.Report {
	t.Helper()
	return mirrortest.WaitMirrored(t, src, dst, stateTopic, topics, within)
}

func mirrorOf(t *testing.T, src, dst *cluster, stateTopic string, topics map[string]string) (verify.Report, error) {
	t.Helper()
	return mirrortest.Verify(t, src, dst, stateTopic, topics)
}

func replayState(ctx context.Context, dst *cluster, stateTopic string) (*statestore.View, error) {
	return mirrortest.ReadState(ctx, dst, stateTopic)
}

func rawHeaders(t testing.TB, c *cluster, topic string, partition int32) []transform.Header {
	t.Helper()
	return mirrortest.RawHeaders(t, c, topic, partition)
}
