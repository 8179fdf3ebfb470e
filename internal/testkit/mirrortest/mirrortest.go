// Package mirrortest is the test kit of mirrord's end-to-end scenarios: the
// clusters a scenario runs on (one backend switch: kfake, or real Apache
// Kafka from the realkafka launcher), the producers that load the source
// (idempotent, transactional with aborts, plain; every codec), and the
// checks that judge the destination record by record (package verify) and
// against what the producers had acknowledged.
//
// # Backends
//
// Each runs a scenario once per backend: always on kfake, and on every
// Kafka version MIRRORD_TEST_KAFKA selects (see realkafka). A kfake cluster
// is fresh for each test; a real cluster is shared by the test package
// (one per version and cluster ID, started on first use, stopped by Main),
// so a scenario names its topics, links and state topics with Names, which
// makes them unique on a shared cluster. A package that uses real clusters
// runs Main from its TestMain.
//
// The package starts no goroutines of its own beyond those of the clients
// and clusters it makes, which t.Cleanup closes.
package mirrortest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/internal/kafka/leaders"
	"github.com/seed83556561/mirrord/internal/kafka/rawfetch"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/internal/testkit/realkafka"
	"github.com/seed83556561/mirrord/statestore"
	"github.com/seed83556561/mirrord/transform"
	"github.com/seed83556561/mirrord/verify"
)

// Backend is where a scenario's clusters run: kfake, or a Kafka version.
type Backend struct {
	Kafka string // "" for kfake
}

// Real reports whether the backend is real Apache Kafka.
func (b Backend) Real() bool { return b.Kafka != "" }

func (b Backend) String() string {
	if b.Kafka == "" {
		return "kfake"
	}
	return "kafka-" + b.Kafka
}

// Backends are kfake and every version MIRRORD_TEST_KAFKA selects.
func Backends(t testing.TB) []Backend {
	t.Helper()
	vs, err := realkafka.Versions()
	if err != nil {
		t.Fatal(err)
	}
	out := []Backend{{}}
	for _, v := range vs {
		out = append(out, Backend{Kafka: v})
	}
	return out
}

// Each runs fn as a subtest per backend (named kfake, kafka-4.4.0, ...).
func Each(t *testing.T, fn func(t *testing.T, b Backend)) {
	t.Helper()
	for _, b := range Backends(t) {
		t.Run(b.String(), func(t *testing.T) {
			if b.Real() {
				realkafka.RequireTools(t)
			}
			fn(t, b)
		})
	}
}

// RealOnly runs fn as a subtest per Kafka version only (a scenario that
// needs what kfake lacks: a log cleaner, LogAppendTime stamping, real
// retention), and says so in one line when no version is selected.
func RealOnly(t *testing.T, fn func(t *testing.T, b Backend)) {
	t.Helper()
	bs := Backends(t)[1:]
	if len(bs) == 0 {
		t.Skip(realkafka.SkipMessage)
	}
	for _, b := range bs {
		t.Run(b.String(), func(t *testing.T) {
			realkafka.RequireTools(t)
			fn(t, b)
		})
	}
}

// Main runs the package's tests and stops the real clusters they shared.
func Main(m *testing.M) int { return realkafka.Main(m) }

// Names gives a scenario names that are unique on a shared cluster: on a
// real backend every name carries a prefix made from the test's name; on
// kfake (fresh clusters) names stay as written.
type Names struct{ prefix string }

// NamesFor returns t's names on b.
func NamesFor(t testing.TB, b Backend) Names {
	if !b.Real() {
		return Names{}
	}
	sum := sha256.Sum256([]byte(t.Name()))
	return Names{prefix: "x" + hex.EncodeToString(sum[:4]) + "-"}
}

// Of returns the scenario's name for base.
func (n Names) Of(base string) string { return n.prefix + base }

// Include is a topics include pattern that selects exactly the given topics
// (each named with Of).
func (n Names) Include(bases ...string) string {
	var alts []string
	for _, b := range bases {
		alts = append(alts, regexp.QuoteMeta(n.Of(b)))
	}
	return strings.Join(alts, "|")
}

// StateTopic is the scenario's state topic.
func (n Names) StateTopic() string {
	if n.prefix == "" {
		return "__mirror_state"
	}
	return "__mirror_state_" + strings.TrimSuffix(n.prefix, "-")
}

// Cluster is one Kafka cluster of a scenario, with a client and an admin
// client that the test's cleanup closes.
type Cluster struct {
	Name    string // the configuration's label: "src", "dst", ...
	ID      string
	Backend Backend
	Fake    *kfake.Cluster     // kfake only
	Real    *realkafka.Cluster // real Kafka only
	Client  *kgo.Client
	Admin   *kadm.Client

	opts []kgo.Opt // how the test's clients reach it, when not the plain default listener
}

// NewCluster returns a cluster with the given cluster ID: a fresh kfake
// cluster of three brokers (opts added), or the package's shared
// single-node Kafka cluster of that ID.
func NewCluster(t testing.TB, b Backend, name, id string, opts ...kfake.Opt) *Cluster {
	t.Helper()
	c := &Cluster{Name: name, ID: id, Backend: b}
	if b.Real() {
		c.Real = realkafka.Shared(t, "mirrortest/"+b.Kafka+"/"+id, realkafka.Config{
			Version: b.Kafka, ClusterID: id, BrokerProps: brokerProps,
		})
	} else {
		c.Fake = kafkatest.NewCluster(t, id, append([]kfake.Opt{kfake.NumBrokers(3)}, opts...)...)
	}
	cl, err := kgo.NewClient(c.Opts()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	c.Client, c.Admin = cl, kadm.NewClient(cl)
	return c
}

// brokerProps make a real broker quick at what scenarios wait for: the log
// cleaner, retention, and group joins. The delay before a replaced segment
// is deleted (log.segment.delete.delay.ms, the broker's default for the
// topics' file.delete.delay.ms) keeps Kafka's default of 60 s: a segment
// the cleaner or retention replaced stays on disk that long, so that a
// fetch already reading it completes (at 100 ms the broker closed the
// connection of a raw fetch sending a segment the cleaner had just
// replaced), and so that the flush Kafka schedules when it rolls a segment
// never finds that segment closed: at 0 a 4.4.0 broker took a
// ClosedChannelException from that flush for its log directory failing
// and shut down in CI (the race of KAFKA-19571).
var brokerProps = map[string]string{
	"log.cleaner.backoff.ms":                                      "200",
	"log.cleaner.dedupe.buffer.size":                              "4194304",
	"log.retention.check.interval.ms":                             "500",
	"log.initial.task.delay.ms":                                   "0",
	"group.initial.rebalance.delay.ms":                            "0",
	"transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}

// Wrap makes a Cluster of a real cluster the test started itself (with
// listeners of its own), whose test clients connect with opts.
func Wrap(t testing.TB, name string, rc *realkafka.Cluster, opts ...kgo.Opt) *Cluster {
	t.Helper()
	c := &Cluster{Name: name, ID: rc.ID(), Backend: Backend{Kafka: rc.Version()}, Real: rc, opts: opts}
	cl, err := kgo.NewClient(c.Opts()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	c.Client, c.Admin = cl, kadm.NewClient(cl)
	return c
}

// Addrs are the cluster's bootstrap addresses.
func (c *Cluster) Addrs() []string {
	if c.Real != nil {
		return c.Real.Addrs()
	}
	return c.Fake.ListenAddrs()
}

// Opts are the kgo options that reach the cluster. They turn kgo's fetch
// sessions (KIP-227) off, for the tests' consumers: kgo v1.22.3's
// Client.Close reads a source's fetch session ID without the lock under
// which a fetch still in flight writes it (fetchSession.bumpEpoch), a data
// race the race detector reported in CI (TestCompactedSource, a consumer
// of readCommitted closed while it fetched). Without sessions the ID is
// never written. mirrord's own clients are not consumers (the fetcher
// sends its own Fetch requests), so the option changes nothing of theirs.
func (c *Cluster) Opts() []kgo.Opt {
	if c.opts != nil {
		return append(append([]kgo.Opt(nil), c.opts...), kgo.DisableFetchSessions())
	}
	return []kgo.Opt{kgo.SeedBrokers(c.Addrs()...), kgo.DisableFetchSessions()}
}

// NewClient returns a client of the cluster with extra options, closed
// when the test ends.
func (c *Cluster) NewClient(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append(c.Opts(), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// CreateTopic creates a topic with replication factor 1 and waits until its
// metadata answers.
func (c *Cluster) CreateTopic(t testing.TB, name string, partitions int32, cfg map[string]*string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.Admin.CreateTopic(ctx, partitions, 1, cfg, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic %s on %s: %v", name, c.Name, err)
	}
	c.WaitTopic(t, name, partitions)
}

// WaitTopic waits until every partition of a topic has a leader.
func (c *Cluster) WaitTopic(t testing.TB, name string, partitions int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		md, err := leaders.Metadata(ctx, c.Client, name)
		if err == nil && len(md.Topics) == 1 && md.Topics[0].ErrorCode == 0 && len(md.Topics[0].Partitions) == int(partitions) {
			ok := true
			for _, p := range md.Topics[0].Partitions {
				ok = ok && p.Leader >= 0 && p.ErrorCode == 0
			}
			if ok {
				return
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("topic %s on %s has no leaders: %v", name, c.Name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ---- load ----

// Produced collects what producers committed and aborted, by topic and key,
// so that a test can check the destination against what was acknowledged,
// independently of reading the source.
type Produced struct {
	mu        sync.Mutex
	Committed map[string]int // "topic/key" → count
	Aborted   map[string]int
}

// NewProduced returns an empty record of production.
func NewProduced() *Produced {
	return &Produced{Committed: map[string]int{}, Aborted: map[string]int{}}
}

// Add records records as committed or aborted.
func (p *Produced) Add(committed bool, recs ...*kgo.Record) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range recs {
		k := r.Topic + "/" + string(r.Key)
		if committed {
			p.Committed[k]++
		} else {
			p.Aborted[k]++
		}
	}
}

// Kind is a producer kind.
type Kind int

// Producer kinds.
const (
	Idempotent Kind = iota
	Transactional
	Plain
)

func (k Kind) String() string { return [...]string{"idempotent", "transactional", "plain"}[k] }

// Codecs are the five codecs, by their Kafka number; CodecNames name them.
var (
	Codecs     = []kgo.CompressionCodec{kgo.NoCompression(), kgo.GzipCompression(), kgo.SnappyCompression(), kgo.Lz4Compression(), kgo.ZstdCompression()}
	CodecNames = []string{"none", "gzip", "snappy", "lz4", "zstd"}
)

// Load produces n records to topics with one producer of the given kind and
// codec. Transactional producers commit batches of 7 records spread over
// every partition of every topic given and abort every third transaction.
// Keys are unique per producer (kind, codec, txid) so that a test can find
// each record. extra options go to the producer.
func Load(t testing.TB, c *Cluster, p *Produced, kind Kind, codec int, txid string, n int, topics []string, extra ...kgo.Opt) {
	t.Helper()
	opts := append(c.Opts(), kgo.ProducerBatchCompression(Codecs[codec]),
		kgo.ProducerLinger(time.Millisecond), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	switch kind {
	case Transactional:
		opts = append(opts, kgo.TransactionalID(txid))
	case Plain:
		opts = append(opts, kgo.DisableIdempotentWrite(), kgo.RequiredAcks(kgo.LeaderAck()))
	}
	cl, err := kgo.NewClient(append(opts, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prefix := KeyPrefix(kind, codec, txid)
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
	if kind != Transactional {
		var recs []*kgo.Record
		for i := range n {
			recs = append(recs, rec(i, topics[i%len(topics)]))
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("%s producer: %v", prefix, err)
		}
		p.Add(true, recs...)
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
		p.Add(commit, recs...)
	}
}

// KeyPrefix is the prefix of the keys Load writes for a producer.
func KeyPrefix(kind Kind, codec int, txid string) string {
	return fmt.Sprintf("%s-%s-%s", kind, CodecNames[codec], txid)
}

// ---- checks ----

// ConsumeAll reads every record of the topics up to their end offsets as of
// the call. A partition whose last offsets are transaction markers
// (markers: a source with transactional producers) never shows a record
// at its end - 1, so such a read also ends when polls find nothing for
// five seconds; a destination holds no markers and is read to its end.
// The read is read_uncommitted: a source's aborted records are returned.
func ConsumeAll(t testing.TB, c *Cluster, markers bool, topics ...string) []*kgo.Record {
	t.Helper()
	return consume(t, c, markers, nil, topics...)
}

// ConsumeCommitted is ConsumeAll read_committed (and so always as a log
// with markers): what a consumer of the cluster's committed records gets.
func ConsumeCommitted(t testing.TB, c *Cluster, topics ...string) []*kgo.Record {
	t.Helper()
	return consume(t, c, true, []kgo.Opt{kgo.FetchIsolationLevel(kgo.ReadCommitted())}, topics...)
}

func consume(t testing.TB, c *Cluster, markers bool, extra []kgo.Opt, topics ...string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ends, err := c.Admin.ListEndOffsets(ctx, topics...)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			if want[o.Topic] == nil {
				want[o.Topic] = map[int32]int64{}
			}
			want[o.Topic][o.Partition] = o.Offset
		}
	})
	cl, err := kgo.NewClient(append(append(c.Opts(), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond)), extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	idleSince := time.Now()
	for len(want) > 0 {
		pollCtx, pollCancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pollCtx)
		pollCancel()
		if err := ctx.Err(); err != nil {
			t.Fatalf("consume %v: %v (still waiting for %v)", topics, err, want)
		}
		if fs.NumRecords() > 0 {
			idleSince = time.Now()
		} else if markers && time.Since(idleSince) > 5*time.Second {
			break // nothing more: the rest are transaction markers
		}
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, r)
			if end, ok := want[r.Topic][r.Partition]; ok && r.Offset+1 >= end {
				delete(want[r.Topic], r.Partition)
				if len(want[r.Topic]) == 0 {
					delete(want, r.Topic)
				}
			}
		})
	}
	return out
}

// ExactlyOnce checks the destination against what the producers had
// acknowledged: every committed record exactly once, no aborted record, no
// record that nobody produced. rename maps a source topic to its mirror
// (nil: the same name). It returns the number of committed records checked.
func ExactlyOnce(t testing.TB, dst *Cluster, p *Produced, rename func(string) string, topics ...string) int {
	t.Helper()
	if rename == nil {
		rename = func(s string) string { return s }
	}
	dstTopics := make([]string, len(topics))
	back := map[string]string{}
	for i, tp := range topics {
		dstTopics[i] = rename(tp)
		back[dstTopics[i]] = tp
	}
	got := map[string]int{}
	for _, r := range ConsumeAll(t, dst, false, dstTopics...) {
		got[back[r.Topic]+"/"+string(r.Key)]++
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	mirrored := func(k string) bool {
		for _, tp := range topics {
			if strings.HasPrefix(k, tp+"/") {
				return true
			}
		}
		return false
	}
	bad, n := 0, 0
	for k, c := range p.Committed {
		if !mirrored(k) {
			continue
		}
		n += c
		if got[k] != c {
			bad++
			if bad < 10 {
				t.Errorf("record %s: %d at the destination, %d committed at the source", k, got[k], c)
			}
		}
	}
	for k := range p.Aborted {
		if mirrored(k) && got[k] > 0 {
			bad++
			if bad < 10 {
				t.Errorf("aborted record %s reached the destination", k)
			}
		}
	}
	for k := range got {
		if _, ok := p.Committed[k]; !ok {
			if _, ab := p.Aborted[k]; !ab {
				t.Errorf("record %s at the destination was never produced", k)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d records wrong", bad)
	}
	return n
}

// Verify compares every source topic with its mirror through package verify,
// with the salts of the link's state topic. topics maps source to
// destination topic.
func Verify(t testing.TB, src, dst *Cluster, stateTopic string, topics map[string]string) (verify.Report, error) {
	t.Helper()
	return VerifyMode(t, src, dst, stateTopic, topics, false)
}

// VerifyMode is Verify for a mirror written in either delivery mode
// (verify.Config.Transactional).
func VerifyMode(t testing.TB, src, dst *Cluster, stateTopic string, topics map[string]string, transactional bool) (verify.Report, error) {
	t.Helper()
	return verifyWithin(src, dst, stateTopic, topics, transactional, time.Minute)
}

// verifyWithin is VerifyMode with a time limit of its own.
func verifyWithin(src, dst *Cluster, stateTopic string, topics map[string]string, transactional bool, limit time.Duration) (verify.Report, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	salts, err := verify.StateSalts(ctx, dst.Client, dst.Opts(), stateTopic)
	if err != nil {
		return verify.Report{}, err
	}
	return verify.Run(ctx, verify.Config{
		Source: src.Client, Destination: dst.Client, Topics: topics, SourceClusterID: src.ID, Salt: salts,
		Transactional: transactional,
	})
}

// WaitMirrored waits until the destination holds every committed source
// record, and fails on the first difference.
func WaitMirrored(t testing.TB, src, dst *Cluster, stateTopic string, topics map[string]string, within time.Duration) verify.Report {
	t.Helper()
	return WaitMirroredMode(t, src, dst, stateTopic, topics, within, false)
}

// WaitMirroredMode is WaitMirrored for a mirror written in either delivery
// mode (verify.Config.Transactional). Each comparison may take what is left
// of the wait (at least a minute): a comparison cut off reports nothing, and
// with a fixed limit a mirror too big to compare in that time under a
// loaded -race run would look stalled. A failure says how old its figure
// is and how many comparisons ended without one.
func WaitMirroredMode(t testing.TB, src, dst *Cluster, stateTopic string, topics map[string]string, within time.Duration, transactional bool) verify.Report {
	t.Helper()
	start := time.Now()
	deadline := start.Add(within)
	var (
		last       verify.Report
		lastAt     time.Time
		unfinished int
		lastErr    error
		longest    time.Duration
	)
	for {
		began := time.Now()
		rep, err := verifyWithin(src, dst, stateTopic, topics, transactional, max(time.Minute, time.Until(deadline)))
		longest = max(longest, time.Since(began))
		if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, statestore.ErrNoTopic) {
			t.Fatalf("verify: %v", err)
		}
		if err != nil {
			unfinished, lastErr = unfinished+1, err
		} else {
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
			last, lastAt = rep, time.Now()
		}
		if time.Now().After(deadline) {
			seen := "no comparison finished"
			if !lastAt.IsZero() {
				seen = fmt.Sprintf("%d records behind at the last finished comparison, %s into the wait (first difference: %v)",
					last.Behind, lastAt.Sub(start).Round(time.Millisecond), last.First)
			}
			t.Fatalf("destination not caught up after %s: %s; %d comparisons ended without a result (last: %v); the longest took %s",
				within, seen, unfinished, lastErr, longest.Round(time.Millisecond))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ReadState replays a state topic.
func ReadState(ctx context.Context, c *Cluster, stateTopic string) (*statestore.View, error) {
	return statestore.ReadView(ctx, stateTopic, c.Opts())
}

// RawBatches returns every batch of a partition from its log start to its
// high watermark, as the broker stores them (READ_UNCOMMITTED).
func RawBatches(t testing.TB, c *Cluster, topic string, partition int32) [][]byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := c.Admin.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup(topic, partition)
	starts, err := c.Admin.ListStartOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	start, _ := starts.Lookup(topic, partition)
	cache := leaders.New(c.Client, 0)
	var out [][]byte
	for pos := start.Offset; pos < end.Offset; {
		ld, err := cache.Lookup(ctx, tp.Key{Topic: topic, Partition: partition})
		if err != nil {
			t.Fatal(err)
		}
		var rp *kmsg.FetchResponseTopicPartition
		for try := 1; ; try++ {
			rp, err = rawfetch.Do(ctx, c.Client, ld.Broker, rawfetch.Request{
				Partition: tp.Partition{Topic: topic, ID: ld.ID, Partition: partition}, Offset: pos,
				LeaderEpoch: ld.Epoch, PartitionMaxBytes: 16 << 20,
			})
			var kafkaErr *kerr.Error
			if err == nil || errors.As(err, &kafkaErr) || try == 3 {
				break
			}
			// A connection the broker closed (as it does when the
			// segment file it sends is gone): ask again on a new one.
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Fatal(err)
		}
		bs, _, err := transform.Split(rp.RecordBatches, nil)
		if err != nil {
			t.Fatal(err)
		}
		moved := false
		for _, b := range bs {
			h, _ := transform.ParseHeader(b)
			if h.NextOffset() <= pos {
				continue
			}
			out = append(out, b)
			pos, moved = h.NextOffset(), true
		}
		if !moved {
			t.Fatalf("raw read of %s[%d] at %d returned nothing below %d", topic, partition, pos, end.Offset)
		}
	}
	return out
}

// RawHeaders are the headers of RawBatches.
func RawHeaders(t testing.TB, c *Cluster, topic string, partition int32) []transform.Header {
	t.Helper()
	var out []transform.Header
	for _, b := range RawBatches(t, c, topic, partition) {
		h, err := transform.ParseHeader(b)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, h)
	}
	return out
}
