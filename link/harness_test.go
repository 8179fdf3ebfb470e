package link

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/internal/kafka/leaders"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/statestore"
	"github.com/seed83556561/mirrord/verify"
)

// cluster is one in-process Kafka cluster of a test with an admin client.
type cluster struct {
	name string
	id   string
	c    *kfake.Cluster
	cl   *kgo.Client
	adm  *kadm.Client
}

func newCluster(t *testing.T, name, id string, opts ...kfake.Opt) *cluster {
	t.Helper()
	c := kafkatest.NewCluster(t, id, append([]kfake.Opt{kfake.NumBrokers(3)}, opts...)...)
	cl := kafkatest.Client(t, c)
	return &cluster{name: name, id: id, c: c, cl: cl, adm: kadm.NewClient(cl)}
}

func (c *cluster) opts() []kgo.Opt { return []kgo.Opt{kgo.SeedBrokers(c.c.ListenAddrs()...)} }

func (c *cluster) createTopic(t *testing.T, name string, partitions int32, cfg map[string]*string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.adm.CreateTopic(ctx, partitions, 1, cfg, name); err != nil {
		t.Fatalf("create topic %s on %s: %v", name, c.name, err)
	}
}

// testLink is a link running in a test, on its own goroutine.
type testLink struct {
	*Link
	cancel context.CancelFunc
	done   chan error
	crash  atomic.Bool
}

// linkConfig is a link from src to dst with timings short enough for tests:
// every key the file sets starts from config's defaults.
func linkConfig(name string, src, dst *cluster, include ...string) Config {
	var inc []*regexp.Regexp
	for _, e := range include {
		re, err := config.TopicPattern(e)
		if err != nil {
			panic(err)
		}
		inc = append(inc, re)
	}
	l := *config.Default().Links[0]
	l.Name, l.Source, l.Destination = name, src.name, dst.name
	l.Include = inc
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
		Source:          config.Cluster{Name: src.name, BootstrapServers: src.c.ListenAddrs()},
		Destination:     config.Cluster{Name: dst.name, BootstrapServers: dst.c.ListenAddrs()},
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
		SourceOpts:      src.opts(),
		DestinationOpts: dst.opts(),
	})
}

// startLinkWith runs a link with the given collaborators on its own
// goroutine; the test's cleanup stops it.
func startLinkWith(t *testing.T, cfg Config, deps Deps) *testLink {
	t.Helper()
	l, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
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

// ---- load ----

// produced collects what producers committed, by topic and key, so that a
// test can check the destination against what was really acknowledged,
// independently of reading the source.
type produced struct {
	mu        sync.Mutex
	committed map[string]int // "topic/key" → count
	aborted   map[string]int
}

func newProduced() *produced {
	return &produced{committed: map[string]int{}, aborted: map[string]int{}}
}

func (p *produced) add(committed bool, recs ...*kgo.Record) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range recs {
		k := r.Topic + "/" + string(r.Key)
		if committed {
			p.committed[k]++
		} else {
			p.aborted[k]++
		}
	}
}

type producerKind int

const (
	idempotent producerKind = iota
	transactional
	plain
)

func (k producerKind) String() string { return [...]string{"idempotent", "transactional", "plain"}[k] }

var codecs = []kgo.CompressionCodec{kgo.NoCompression(), kgo.GzipCompression(), kgo.SnappyCompression(), kgo.Lz4Compression(), kgo.ZstdCompression()}

var codecNames = []string{"none", "gzip", "snappy", "lz4", "zstd"}

// load produces n records to topic with one producer of the given kind and
// codec. Transactional producers commit batches of 7 records spread over
// every partition of every topic given and abort every third transaction.
// Keys are unique per producer so that a test can find each record.
func load(t *testing.T, c *cluster, p *produced, kind producerKind, codec int, txid string, n int, topics ...string) {
	t.Helper()
	opts := []kgo.Opt{kgo.SeedBrokers(c.c.ListenAddrs()...), kgo.ProducerBatchCompression(codecs[codec]),
		kgo.ProducerLinger(time.Millisecond), kgo.RecordPartitioner(kgo.RoundRobinPartitioner())}
	switch kind {
	case transactional:
		opts = append(opts, kgo.TransactionalID(txid))
	case plain:
		opts = append(opts, kgo.DisableIdempotentWrite(), kgo.RequiredAcks(kgo.LeaderAck()))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	prefix := fmt.Sprintf("%s-%s-%s", kind, codecNames[codec], txid)
	rec := func(i int, topic string) *kgo.Record {
		return &kgo.Record{
			Topic: topic,
			Key:   fmt.Appendf(nil, "%s-%06d", prefix, i),
			Value: fmt.Appendf(nil, "value %d of %s: %s", i, prefix, "some payload that compresses somewhat somewhat somewhat"),
			Headers: []kgo.RecordHeader{
				{Key: "producer", Value: []byte(prefix)},
				{Key: "seq", Value: fmt.Appendf(nil, "%d", i)},
			},
		}
	}
	if kind != transactional {
		var recs []*kgo.Record
		for i := range n {
			recs = append(recs, rec(i, topics[i%len(topics)]))
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("%s producer: %v", prefix, err)
		}
		p.add(true, recs...)
		return
	}
	for i, txn := 0, 0; i < n; txn++ {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		var recs []*kgo.Record
		for j := 0; j < 7 && i < n; j, i = j+1, i+1 {
			recs = append(recs, rec(i, topics[i%len(topics)]))
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("%s producer: %v", prefix, err)
		}
		commit := txn%3 != 2
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatalf("%s end transaction: %v", prefix, err)
		}
		p.add(commit, recs...)
	}
}

// ---- checks ----

// mirrorOf compares every source topic with its mirror through the verify
// capability, with the salts of the link's state topic.
func mirrorOf(t *testing.T, src, dst *cluster, stateTopic string, topics map[string]string) (verify.Report, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	salts, err := verify.StateSalts(ctx, dst.cl, dst.opts(), stateTopic)
	if err != nil {
		return verify.Report{}, err
	}
	return verify.Run(ctx, verify.Config{
		Source: src.cl, Destination: dst.cl, Topics: topics, SourceClusterID: src.id, Salt: salts,
	})
}

func replayState(ctx context.Context, dst *cluster, stateTopic string) (*statestore.View, error) {
	return statestore.ReadView(ctx, stateTopic, dst.opts())
}

// waitMirrored waits until the destination holds every committed source
// record, and fails on the first difference.
func waitMirrored(t *testing.T, src, dst *cluster, stateTopic string, topics map[string]string, within time.Duration) verify.Report {
	t.Helper()
	deadline := time.Now().Add(within)
	var last verify.Report
	for {
		rep, err := mirrorOf(t, src, dst, stateTopic, topics)
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("verify: %v", err)
		}
		if err == nil {
			// A missing destination partition is the link not having
			// created it yet; any other difference is a fault.
			if rep.First != nil && (rep.First.Field != verify.FieldMissing || rep.First.SourceOffset >= 0) {
				t.Fatalf("destination differs from source: %v", rep.First)
			}
			if rep.First != nil {
				rep.Behind = -1
			}
			if rep.Behind == 0 {
				return rep
			}
			last = rep
		}
		if time.Now().After(deadline) {
			t.Fatalf("destination still %d records behind after %s (first difference: %v)", last.Behind, within, last.First)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func topicPartition(topic string, id [16]byte, partition int32) tp.Partition {
	return tp.Partition{Topic: topic, ID: id, Partition: partition}
}

func newLeaders(c *cluster) *leaders.Cache { return leaders.New(c.cl, 0) }
