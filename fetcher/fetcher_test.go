package fetcher

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/internal/kafka/leaders"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/transform"
)

// Guards construction: defaults filled in, every problem reported at once.
// Guards how soon a failing partition is fetched again once its leader is
// back: whenever a new leader becomes known (Kafka needs its 9 s broker
// session timeout and an election after a broker dies), the next retry
// comes within MaxRetryBackoff. With the old 10 s cap, an outage of 12 s
// was retried only at 22.7 s.
func TestRetryBackoffBounded(t *testing.T) {
	c := kafkatest.NewCluster(t, kafkatest.SourceClusterID)
	cl := kafkatest.Client(t, c)
	f, err := New(Config{}, Deps{Client: cl, Leaders: leaders.New(cl, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if f.backoff(1) != 100*time.Millisecond {
		t.Errorf("first retry after %v, want 100ms", f.backoff(1))
	}
	for _, outage := range []time.Duration{time.Second, 5 * time.Second, 9 * time.Second, 12 * time.Second, 30 * time.Second, 5 * time.Minute} {
		var at time.Duration
		for n := 1; at < outage; n++ {
			w := f.backoff(n)
			if w > MaxRetryBackoff {
				t.Fatalf("retry %d waits %v, more than %v", n, w, MaxRetryBackoff)
			}
			at += w
		}
		if at > outage+MaxRetryBackoff {
			t.Errorf("a leader back after %v is fetched from at %v, more than %v later", outage, at, MaxRetryBackoff)
		}
	}
}

func TestNew(t *testing.T) {
	c := kafkatest.NewCluster(t, kafkatest.SourceClusterID)
	cl := kafkatest.Client(t, c)
	deps := Deps{Client: cl, Leaders: leaders.New(cl, 0)}
	for _, tc := range []struct {
		name string
		cfg  Config
		deps Deps
		want []string // substrings of the error; nil: no error
	}{
		{name: "defaults", deps: deps},
		{name: "explicit", cfg: Config{PartitionMaxBytes: 4096, MaxWait: time.Second, MaxBufferedBytes: 1 << 20, OnOutOfRange: "earliest", CheckCRCs: true}, deps: deps},
		{
			name: "everything wrong",
			cfg:  Config{PartitionMaxBytes: -1, MaxWait: -time.Second, MaxBufferedBytes: -5, OnOutOfRange: "latest"},
			want: []string{"Deps.Client is nil", "Deps.Leaders is nil", "PartitionMaxBytes is -1", "MaxWait is -1s", "MaxBufferedBytes is -5", `OnOutOfRange is "latest"`},
		},
		{name: "budget below one partition", cfg: Config{PartitionMaxBytes: 2 << 20, MaxBufferedBytes: 1 << 20}, deps: deps, want: []string{"MaxBufferedBytes (1048576) is less than PartitionMaxBytes (2097152)"}},
		{name: "partition limit above the cap", cfg: Config{PartitionMaxBytes: MaxPartitionMaxBytes + 1}, deps: deps, want: []string{"PartitionMaxBytes is 67108865"}},
		{name: "wait too long", cfg: Config{MaxWait: time.Hour}, deps: deps, want: []string{"MaxWait is 1h0m0s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := New(tc.cfg, tc.deps)
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				if f.cfg.PartitionMaxBytes <= 0 || f.cfg.MaxWait <= 0 || f.cfg.MaxBufferedBytes <= 0 || f.cfg.OnOutOfRange == "" {
					t.Errorf("defaults not filled: %+v", f.cfg)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

var codecs = []struct {
	name  string
	codec kgo.CompressionCodec
}{
	{"none", kgo.NoCompression()},
	{"gzip", kgo.GzipCompression()},
	{"snappy", kgo.SnappyCompression()},
	{"lz4", kgo.Lz4Compression()},
	{"zstd", kgo.ZstdCompression()},
}

// produceMix writes, concurrently, with plain, idempotent and transactional
// kgo producers over every codec, rounds of records to every partition;
// every other transaction of a transactional producer is aborted, and its
// records say "ABORTED". Then it writes the sentinels.
func produceMix(ctx context.Context, t *testing.T, c *kfake.Cluster, topic string, partitions int32, rounds int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 3*len(codecs))
	for _, cd := range codecs {
		for _, kind := range []string{"plain", "idempotent", "txn"} {
			opts := []kgo.Opt{kgo.ProducerBatchCompression(cd.codec), kgo.ProducerLinger(5 * time.Millisecond)}
			switch kind {
			case "plain":
				opts = append(opts, kgo.DisableIdempotentWrite())
			case "txn":
				opts = append(opts, kgo.TransactionalID("txn-"+cd.name))
			}
			cl := producer(t, c, opts...)
			wg.Go(func() {
				for round := range rounds {
					abort := kind == "txn" && round%2 == 1
					if kind == "txn" {
						if err := cl.BeginTransaction(); err != nil {
							errs <- err
							return
						}
					}
					var rs []*kgo.Record
					for p := range partitions {
						for i := range 6 {
							v := fmt.Sprintf("%s/%s/r%d/p%d/i%d", cd.name, kind, round, p, i)
							if abort {
								v += "/ABORTED"
							}
							rs = append(rs, &kgo.Record{
								Topic: topic, Partition: p,
								Key:     []byte(fmt.Sprintf("key-%d", i%3)),
								Value:   []byte(strings.Repeat(v+" ", 4)),
								Headers: []kgo.RecordHeader{{Key: "codec", Value: []byte(cd.name)}, {Key: "i", Value: []byte{byte(i)}}},
							})
						}
					}
					if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
						errs <- fmt.Errorf("%s %s: %w", cd.name, kind, err)
						return
					}
					if kind == "txn" {
						commit := kgo.TryCommit
						if abort {
							commit = kgo.TryAbort
						}
						if err := cl.EndTransaction(ctx, commit); err != nil {
							errs <- fmt.Errorf("%s end txn: %w", cd.name, err)
							return
						}
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	endAll(ctx, t, c, topic, partitions)
}

// assignAll assigns every partition in ends at offset 0.
func (c *consumer) assignAll(ends map[tp.Key]int64) {
	for k := range ends {
		c.assign(tp.Partition{Topic: k.Topic, Partition: k.Partition}, 0)
	}
}

// Guards the core promise: the fetcher delivers exactly the records a Kafka
// READ_COMMITTED consumer reads (key, value, headers, timestamp, offset, per
// partition and in order) from plain, idempotent and transactional producers
// with aborts, over every codec; never a control batch or an aborted record;
// and the last End is the high watermark.
func TestExactAgainstReadCommittedConsumer(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"small fetches with CRC checks", Config{PartitionMaxBytes: 2 << 10, MaxBufferedBytes: 64 << 10, CheckCRCs: true}},
		{"default sizes", Config{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := deadline(t)
			c := source(t, 4, "t")
			produceMix(ctx, t, c, "t", 4, 4)
			ends := endOffsets(ctx, t, c, "t")
			want := readCommitted(ctx, t, c, "t", ends)

			f, _ := newFetcher(t, c, tc.cfg)
			con := newConsumer(t, f)
			con.assignAll(ends)
			run(t, f)
			con.until(ctx, ends)
			compare(t, con.s, want)

			aborted, codecsSeen := 0, make(map[int8]bool)
			for _, s := range con.s {
				aborted += s.aborted
				for cd := range s.codecs {
					codecsSeen[cd] = true
				}
				for _, r := range s.recs {
					if strings.Contains(string(r.Value), "ABORTED") {
						t.Fatalf("aborted record delivered: %v", r)
					}
				}
			}
			nrecs, nres := 0, 0
			for _, s := range con.s {
				nrecs += len(s.recs)
				nres += s.results
			}
			t.Logf("%d records in %d results, %d aborted batches dropped", nrecs, nres, aborted)
			if aborted == 0 {
				t.Error("no aborted batch was dropped; the test does not exercise aborts")
			}
			if len(codecsSeen) != len(codecs) {
				t.Errorf("codecs seen %v, want all %d", codecsSeen, len(codecs))
			}
		})
	}
}

// Guards leader moves mid-stream and injected NOT_LEADER_OR_FOLLOWER and
// UNKNOWN_TOPIC_ID answers: the fetcher refreshes leaders and retries from
// the same offset, so the records stay exact with no duplicate.
func TestLeaderMovesAndFaults(t *testing.T) {
	ctx := deadline(t)
	c := source(t, 4, "t")
	produceMix(ctx, t, c, "t", 4, 2)
	ends := endOffsets(ctx, t, c, "t")
	want := readCommitted(ctx, t, c, "t", ends)

	notLeader := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: "t", Partitions: []int32{1}, Err: kerr.NotLeaderForPartition, Count: 3})
	unknownID := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: "t", Partitions: []int32{2}, Err: kerr.UnknownTopicID, Count: 2})

	// Two fetches of partition 3 lose their connection.
	var mu sync.Mutex
	dropped := 0
	c.ControlKey(int16(kmsg.Fetch), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		mu.Lock()
		defer mu.Unlock()
		for _, rt := range kreq.(*kmsg.FetchRequest).Topics {
			for _, rp := range rt.Partitions {
				if rp.Partition == 3 && dropped < 2 {
					dropped++
					if dropped < 2 {
						c.KeepControl()
					}
					return nil, errors.New("connection dropped by the test"), true
				}
			}
		}
		return nil, nil, false
	})

	f, m := newFetcher(t, c, Config{PartitionMaxBytes: 1 << 10, MaxBufferedBytes: 16 << 10})
	con := newConsumer(t, f)
	con.assignAll(ends)
	moved := false
	con.onResult = func(n int, r Result) {
		if n == 8 { // mid-stream: move every partition to the next broker
			for p := range int32(4) {
				if err := c.MoveTopicPartition("t", p, (c.LeaderFor("t", p)+1)%3); err != nil {
					t.Fatal(err)
				}
			}
			moved = true
		}
	}
	run(t, f)
	con.until(ctx, ends)
	compare(t, con.s, want)

	if !moved {
		t.Fatal("the stream ended before the leaders moved")
	}
	if notLeader.Hits() != 3 || unknownID.Hits() != 2 {
		t.Errorf("faults answered %d and %d fetches, want 3 and 2", notLeader.Hits(), unknownID.Hits())
	}
	lm := m.forLink(testLink)
	moves := testutil.ToFloat64(lm.errors[KindNotLeader]) + testutil.ToFloat64(lm.errors[KindFencedLeaderEpoch])
	if moves < 3 || testutil.ToFloat64(lm.errors[KindUnknownTopic]) < 2 || testutil.ToFloat64(lm.errors[KindConnection]) < 2 {
		t.Errorf("errors counted: not leader or fenced %v, unknown topic %v, connection %v",
			moves, testutil.ToFloat64(lm.errors[KindUnknownTopic]), testutil.ToFloat64(lm.errors[KindConnection]))
	}
}

// Guards the other ways a partition fails: a topic ID that the source
// contradicts (recreated topic), a non-retriable broker error and a leader
// lookup refused for authorization; each
// result names the partition and offset and wraps its sentinel.
func TestPartitionFailures(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(c *kfake.Cluster, p *tp.Partition)
		want  error
		says  string
	}{
		{
			name:  "topic recreated",
			setup: func(_ *kfake.Cluster, p *tp.Partition) { p.ID = [16]byte{1, 2, 3} },
			want:  ErrTopicRecreated, says: "t[0] at offset 3: topic ID 01020300000000000000000000000000 was assigned",
		},
		{
			name: "authorization refused",
			setup: func(c *kfake.Cluster, _ *tp.Partition) {
				c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: "t", Err: kerr.TopicAuthorizationFailed, Count: -1})
			},
			want: ErrRefused, says: ": the source cluster does not allow the link's principal Read on Topic:t (mirrord fetches the topic's batches; see docs/acls.md): TOPIC_AUTHORIZATION_FAILED",
		},
		{
			// A lookup refused for authorization used to be retried
			// forever, counted as a metadata error.
			name: "leader lookup refused for authorization",
			setup: func(c *kfake.Cluster, _ *tp.Partition) {
				c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Metadata}, Topic: "t", Err: kerr.TopicAuthorizationFailed, Count: -1})
			},
			want: ErrRefused, says: "t[0] at offset 3: leader lookup: the source cluster does not allow the link's principal Describe on Topic:t (the partition's leader is looked up with a Metadata request; Read implies Describe; see docs/acls.md): metadata for topic t: TOPIC_AUTHORIZATION_FAILED",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := deadline(t)
			c := source(t, 1, "t")
			produceBulk(ctx, t, c, "t", 1, 6, 3, 10)
			p := tp.Partition{Topic: "t", Partition: 0}
			tc.setup(c, &p)
			f, _ := newFetcher(t, c, Config{})
			f.Assign(p, 3, 1)
			run(t, f)
			select {
			case r := <-f.Results():
				if !errors.Is(r.Err, tc.want) || r.Start != 3 || !strings.Contains(r.Err.Error(), tc.says) {
					t.Fatalf("result [%d, %d) error %v, want %v saying %q", r.Start, r.End, r.Err, tc.want, tc.says)
				}
			case <-ctx.Done():
				t.Fatal("no result")
			}
		})
	}
}

// produceBulk writes n records of size bytes to every partition of topic, in
// batches of per records, then the sentinels.
func produceBulk(ctx context.Context, t *testing.T, c *kfake.Cluster, topic string, partitions int32, n, per, size int) {
	t.Helper()
	cl := producer(t, c, kgo.ProducerBatchCompression(kgo.NoCompression()))
	for p := range partitions {
		for i := 0; i < n; i += per {
			var vs []string
			for j := i; j < min(n, i+per); j++ {
				v := fmt.Sprintf("p%d-r%d-", p, j)
				vs = append(vs, v+strings.Repeat("x", size-len(v)))
			}
			produce(ctx, t, cl, topic, p, vs...)
		}
	}
	endAll(ctx, t, c, topic, partitions)
}

// Guards the buffer bound (I7): a consumer that does not release holds
// fetch responses of at most MaxBufferedBytes plus one batch in all, and far
// less than there is to fetch; once it releases, the fetcher continues and
// everything arrives exactly.
func TestBackpressure(t *testing.T) {
	ctx := deadline(t)
	c := source(t, 4, "t")
	produceBulk(ctx, t, c, "t", 4, 240, 4, 1000)
	ends := endOffsets(ctx, t, c, "t")
	want := readCommitted(ctx, t, c, "t", ends)

	const budget = 32 << 10
	f, m := newFetcher(t, c, Config{PartitionMaxBytes: 8 << 10, MaxBufferedBytes: budget})
	con := newConsumer(t, f)
	con.assignAll(ends)
	con.hold = true
	run(t, f)

	// Take results without releasing until none comes for a while; the
	// quiet period only ends the phase, the assertions do not depend on it.
	quiet := time.NewTimer(time.Second)
hold:
	for {
		select {
		case r := <-f.Results():
			con.take(r)
			quiet.Reset(time.Second)
		case <-quiet.C:
			break hold
		case <-ctx.Done():
			t.Fatal("deadline")
		}
	}
	maxBatch := 0
	for _, s := range con.s {
		maxBatch = max(maxBatch, s.maxRaw)
	}
	total := 0
	for _, rs := range want {
		total += len(rs) * 1000
	}
	t.Logf("held %d bytes in %d results (budget %d, largest batch %d, data %d)", con.maxOut, len(con.order), budget, maxBatch, total)
	if con.held == 0 {
		t.Fatal("nothing delivered")
	}
	if con.maxOut > int64(budget+maxBatch) {
		t.Fatalf("held responses of %d bytes unreleased, above the bound %d + one batch (%d)", con.maxOut, budget, maxBatch)
	}
	if con.held >= int64(total/2) {
		t.Fatalf("held %d of %d bytes: the budget did not stop the fetcher", con.held, total)
	}
	gauge := m.forLink(testLink).buffered
	for testutil.ToFloat64(gauge) < float64(con.held) { // set by the coordinator's next step
		if ctx.Err() != nil {
			t.Fatalf("buffered gauge %v below the %d bytes held", testutil.ToFloat64(gauge), con.held)
		}
		time.Sleep(time.Millisecond)
	}
	if g := testutil.ToFloat64(gauge); g > float64(budget+maxBatch) {
		t.Errorf("buffered gauge %v above the bound %d + %d", g, budget, maxBatch)
	}

	// Release: the fetcher continues.
	con.releaseHeld()
	con.until(ctx, ends)
	compare(t, con.s, want)
}

// Guards the fair share rule: with room for one fetch at a time, partitions
// take strict turns, whatever broker leads them, until one runs out of data.
func TestFairShare(t *testing.T) {
	ctx := deadline(t)
	c := source(t, 4, "t")
	produceBulk(ctx, t, c, "t", 4, 100, 4, 1000)
	ends := endOffsets(ctx, t, c, "t")

	f, _ := newFetcher(t, c, Config{PartitionMaxBytes: 16 << 10, MaxBufferedBytes: 16 << 10, MaxWait: 50 * time.Millisecond})
	con := newConsumer(t, f)
	con.assignAll(ends)
	run(t, f)
	con.until(ctx, ends)

	// Up to the first partition that reached its end, every window of four
	// consecutive results holds each partition once.
	first := len(con.order)
	seen := make(map[tp.Key]int)
	for i, k := range con.order {
		seen[k]++
		if seen[k] == con.s[k].results {
			first = i
			break
		}
	}
	t.Logf("%d results, the first partition ended at result %d", len(con.order), first)
	if first < 12 {
		t.Fatalf("only %d results before a partition ended; the test needs more data", first)
	}
	for i := 0; i+4 <= first; i++ {
		w := make(map[tp.Key]bool)
		for _, k := range con.order[i : i+4] {
			w[k] = true
		}
		if len(w) != 4 {
			t.Fatalf("results %d-%d are of %v: a partition was passed over (order %v)", i, i+3, con.order[i:i+4], con.order[:first])
		}
	}
}

// Guards OFFSET_OUT_OF_RANGE: below the log start, "fail" fails the partition
// with the range and what to do, "earliest" skips to the log start and says
// how many records were lost; a partition assigned to reconcile passes to
// the log start under either policy and reports the offsets unjudged
// (neither counted nor failed: the link may have mirrored those records);
// above the high watermark always fails.
func TestOutOfRange(t *testing.T) {
	for _, tc := range []struct {
		name        string
		policy      OutOfRange
		reconciling bool
		at          int64
		wantErr     []string // substrings; nil: continues
		skipped     int64
	}{
		{"below log start, reconciling under fail", OutOfRangeFail, true, 2, nil, 3},
		{"below log start, reconciling under earliest", OutOfRangeEarliest, true, 2, nil, 3},
		{"below log start, fail", OutOfRangeFail, false, 2, []string{"t[0] offset 2 is below the log start offset 5", "valid range [5, 11]", "3 records", `on_offset_out_of_range = "earliest"`}, 0},
		{"below log start, earliest", OutOfRangeEarliest, false, 2, nil, 3},
		{"above high watermark, fail", OutOfRangeFail, false, 50, []string{"t[0] offset 50 is above the high watermark 11", "valid range [5, 11]"}, 0},
		{"above high watermark, earliest", OutOfRangeEarliest, false, 50, []string{"t[0] offset 50 is above the high watermark 11"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := deadline(t)
			c := source(t, 1, "t")
			cl := producer(t, c)
			for i := range 10 {
				produce(ctx, t, cl, "t", 0, fmt.Sprintf("v%d", i))
			}
			endAll(ctx, t, c, "t", 1)
			adm := kafkatest.Client(t, c)
			del := kmsg.NewPtrDeleteRecordsRequest()
			dt := kmsg.NewDeleteRecordsRequestTopic()
			dt.Topic = "t"
			dp := kmsg.NewDeleteRecordsRequestTopicPartition()
			dp.Offset = 5
			dt.Partitions = append(dt.Partitions, dp)
			del.Topics = append(del.Topics, dt)
			del.TimeoutMillis = 10000
			if resp, err := del.RequestWith(ctx, adm); err != nil || resp.Topics[0].Partitions[0].ErrorCode != 0 {
				t.Fatalf("delete records: %v %+v", err, resp)
			}
			ends := endOffsets(ctx, t, c, "t")

			f, m := newFetcher(t, c, Config{OnOutOfRange: tc.policy})
			con := newConsumer(t, f)
			p := tp.Partition{Topic: "t", Partition: 0}
			if tc.reconciling {
				con.assignReconciling(p, tc.at)
			} else {
				con.assign(p, tc.at)
			}
			run(t, f)
			if tc.wantErr != nil {
				var r Result
				select {
				case r = <-f.Results():
				case <-ctx.Done():
					t.Fatal("no result")
				}
				if !errors.Is(r.Err, ErrOffsetOutOfRange) || r.Start != tc.at || r.End != tc.at || len(r.Batches) > 0 {
					t.Fatalf("result %+v, want a failure at %d with ErrOffsetOutOfRange", r, tc.at)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(r.Err.Error(), w) {
						t.Errorf("error %q does not say %q", r.Err, w)
					}
				}
				return
			}
			con.until(ctx, ends)
			s := con.s[p.Key()]
			counted := tc.skipped
			if tc.reconciling {
				counted = 0
				if s.unjudged != tc.skipped {
					t.Errorf("unjudged %d, want the %d offsets passed", s.unjudged, tc.skipped)
				}
			}
			if s.skipped != tc.skipped || testutil.ToFloat64(m.forLink(testLink).skipped) != float64(counted) {
				t.Errorf("skipped %d (metric %v), want %d (metric %d)", s.skipped, testutil.ToFloat64(m.forLink(testLink).skipped), tc.skipped, counted)
			}
			var got []string
			for _, r := range s.recs {
				got = append(got, fmt.Sprintf("%d:%s", r.Offset, r.Value))
			}
			if w := "[5:v5 6:v6 7:v7 8:v8 9:v9 10:end]"; fmt.Sprint(got) != w {
				t.Errorf("records %v, want %s", got, w)
			}
		})
	}
}

// Guards generations: reassigning a partition drops the results the fetcher
// still holds for the old generation and releases their bytes (with a budget
// of one fetch, a leak would stall the fetcher), and the new generation
// starts at its own offset.
func TestAssignNewGenDropsStale(t *testing.T) {
	ctx := deadline(t)
	c := source(t, 1, "t")
	produceBulk(ctx, t, c, "t", 1, 40, 2, 500)
	ends := endOffsets(ctx, t, c, "t")
	want := readCommitted(ctx, t, c, "t", ends)

	f, m := newFetcher(t, c, Config{PartitionMaxBytes: 4 << 10, MaxBufferedBytes: 4 << 10})
	gauge := m.forLink(testLink).buffered
	con := newConsumer(t, f)
	p := tp.Partition{Topic: "t", Partition: 0}
	con.assign(p, 0)
	run(t, f)
	// Nobody reads: wait until the first result is queued.
	for testutil.ToFloat64(gauge) == 0 {
		if ctx.Err() != nil {
			t.Fatal("no result queued")
		}
		time.Sleep(time.Millisecond)
	}
	con.assign(p, 10) // gen 2 from offset 10
	stale := 0
	for con.s[p.Key()].end < ends[p.Key()] {
		select {
		case r := <-f.Results():
			if !con.take(r) {
				stale++
			}
		case <-ctx.Done():
			t.Fatal("stalled: stale bytes not released?")
		}
	}
	t.Logf("stale results received: %d", stale)
	compare(t, con.s, map[tp.Key][]rec{p.Key(): want[p.Key()][10:]})
	for testutil.ToFloat64(gauge) != 0 {
		if ctx.Err() != nil {
			t.Fatalf("buffered gauge stays at %v after everything was released", testutil.ToFloat64(gauge))
		}
		time.Sleep(time.Millisecond)
	}
}

// Guards Unassign: once applied, the partition is no longer fetched (at most
// the one request in flight), and no result of it is delivered, while the
// other partitions go on.
func TestUnassignStopsFetching(t *testing.T) {
	ctx := deadline(t)
	c := source(t, 2, "t")
	produceBulk(ctx, t, c, "t", 2, 20, 2, 200)

	// Count the fetch requests that name partition 1.
	var mu sync.Mutex
	fetches1 := 0
	c.ControlKey(int16(kmsg.Fetch), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		for _, rt := range kreq.(*kmsg.FetchRequest).Topics {
			for _, rp := range rt.Partitions {
				if rp.Partition == 1 {
					mu.Lock()
					fetches1++
					mu.Unlock()
				}
			}
		}
		return nil, nil, false
	})
	count := func() int { mu.Lock(); defer mu.Unlock(); return fetches1 }

	f, _ := newFetcher(t, c, Config{PartitionMaxBytes: 1 << 10, MaxWait: 50 * time.Millisecond})
	con := newConsumer(t, f)
	p0, p1 := tp.Partition{Topic: "t", Partition: 0}, tp.Partition{Topic: "t", Partition: 1}
	con.assign(p0, 0)
	con.assign(p1, 0)
	run(t, f)
	for con.s[p1.Key()].results < 2 {
		select {
		case r := <-f.Results():
			con.take(r)
		case <-ctx.Done():
			t.Fatal("no results of partition 1")
		}
	}
	f.Unassign(p1)
	delete(con.gens, p1.Key())
	// Reassigning p0 after the Unassign is a barrier: commands apply in
	// order, so once a result of p0's new generation arrives, p1 is gone.
	con.assign(p0, 0)
	for con.s[p0.Key()].results == 0 {
		select {
		case r := <-f.Results():
			con.take(r) // a result of p1 before the barrier is ignored and released
		case <-ctx.Done():
			t.Fatal("no result after the barrier")
		}
	}
	atBarrier := count()
	// More data for both; p0 is read to its end while p1 must stay quiet.
	cl := producer(t, c)
	produce(ctx, t, cl, "t", 1, "late-1")
	produce(ctx, t, cl, "t", 0, "late-0")
	ends := endOffsets(ctx, t, c, "t")
	for con.s[p0.Key()].end < ends[p0.Key()] {
		select {
		case r := <-f.Results():
			if r.Partition.Key() == p1.Key() {
				t.Fatalf("result of unassigned partition 1: [%d, %d)", r.Start, r.End)
			}
			con.take(r)
		case <-ctx.Done():
			t.Fatal("partition 0 stopped")
		}
	}
	if n := count() - atBarrier; n > 1 {
		t.Errorf("%d fetches of partition 1 after Unassign, want at most the one in flight", n)
	}
}

// Guards I7 on an abort-heavy source (issue 10, case 8): every batch of a
// result is a sub-slice of its whole fetch response, aborted and control
// bytes included, so a consumer that holds results holds those responses.
// The fetcher must count them and stop: the source log that the held
// results cover stays within MaxBufferedBytes plus one batch, although each
// result delivers only a tiny committed batch.
func TestBackpressureCountsWholeResponses(t *testing.T) {
	ctx := deadline(t)
	c := source(t, 1, "t")
	txn := producer(t, c, kgo.TransactionalID("aborting"), kgo.ProducerLinger(0))
	small := producer(t, c, kgo.ProducerLinger(0))
	// Incompressible, so that each aborted batch really is 12 KiB.
	rnd := rand.New(rand.NewPCG(1, 2))
	big := make([]byte, 12<<10)
	for i := range big {
		big[i] = byte(rnd.Uint32())
	}
	for i := range 30 {
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		produce(ctx, t, txn, "t", 0, string(big))
		if err := txn.EndTransaction(ctx, kgo.TryAbort); err != nil {
			t.Fatal(err)
		}
		produce(ctx, t, small, "t", 0, fmt.Sprintf("committed %d", i))
	}
	endAll(ctx, t, c, "t", 1)
	ends := endOffsets(ctx, t, c, "t")
	want := readCommitted(ctx, t, c, "t", ends)
	k := tp.Key{Topic: "t", Partition: 0}

	// The size of every batch in the log, aborted ones included.
	type span struct {
		next int64
		size int
	}
	var log []span
	maxBatch := 0
	for off := int64(0); off < ends[k]; {
		raw, _ := rawFetch(ctx, t, c, k, off)
		bs, _, err := transform.Split(raw, nil)
		if err != nil || len(bs) == 0 {
			t.Fatalf("raw read at %d: %d batches, %v", off, len(bs), err)
		}
		for _, b := range bs {
			h, _ := transform.ParseHeader(b)
			if h.NextOffset() <= off {
				continue
			}
			log = append(log, span{h.NextOffset(), len(b)})
			maxBatch = max(maxBatch, len(b))
			off = h.NextOffset()
		}
	}

	const budget = 32 << 10
	f, _ := newFetcher(t, c, Config{PartitionMaxBytes: 16 << 10, MaxBufferedBytes: budget})
	con := newConsumer(t, f)
	con.assignAll(ends)
	con.hold = true
	run(t, f)
	quiet := time.NewTimer(time.Second)
hold:
	for {
		select {
		case r := <-f.Results():
			con.take(r)
			quiet.Reset(time.Second)
		case <-quiet.C:
			break hold
		case <-ctx.Done():
			t.Fatal("deadline")
		}
	}
	covered := 0
	for _, s := range log {
		if s.next <= con.s[k].end {
			covered += s.size
		}
	}
	t.Logf("held %d results covering %d bytes of the source log (pinned %d; budget %d, largest batch %d, log %d batches)",
		len(con.order), covered, con.maxOut, budget, maxBatch, len(log))
	if covered > budget+maxBatch {
		t.Fatalf("held results cover %d bytes of the source log, above the bound %d + one batch (%d): aborted bytes are not counted", covered, budget, maxBatch)
	}
	if con.maxOut > int64(budget+maxBatch) {
		t.Fatalf("held responses of %d bytes, above the bound %d + one batch (%d)", con.maxOut, budget, maxBatch)
	}
	con.releaseHeld()
	con.until(ctx, ends)
	compare(t, con.s, want)
}

// Guards the share of the buffer with many partitions: every partition is
// asked for at most its share (MaxBufferedBytes over the partitions, at
// least MinPartitionShare), so that all of them fit in one request; a
// partition whose batch is above its share starves once and doubles; the
// buffer bound holds, and everything arrives exactly, in order.
func TestPartitionShare(t *testing.T) {
	ctx := deadline(t)
	const parts = 40
	c := source(t, parts, "t")
	produceBulk(ctx, t, c, "t", parts, 6, 3, 1000)
	big := producer(t, c, kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerLinger(0))
	produce(ctx, t, big, "t", 7, strings.Repeat("b", 150<<10)) // one batch above the share
	produce(ctx, t, big, "t", 7, "after the big one")
	endAll(ctx, t, c, "t", parts)
	ends := endOffsets(ctx, t, c, "t")
	want := readCommitted(ctx, t, c, "t", ends)

	var mu sync.Mutex
	var limits []map[int32]int32 // per Fetch request: partition -> PartitionMaxBytes
	var nodes []int32            // per Fetch request: the broker it went to
	c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		m := map[int32]int32{}
		for _, rt := range req.(*kmsg.FetchRequest).Topics {
			for _, rp := range rt.Partitions {
				m[rp.Partition] = rp.PartitionMaxBytes
			}
		}
		mu.Lock()
		limits = append(limits, m)
		nodes = append(nodes, c.CurrentNode())
		mu.Unlock()
		return nil, nil, false
	})

	const budget = parts * int64(MinPartitionShare)
	f, _ := newFetcher(t, c, Config{MaxBufferedBytes: budget}) // PartitionMaxBytes: 1 MiB
	con := newConsumer(t, f)
	con.assignAll(ends)
	run(t, f)
	con.until(ctx, ends)
	compare(t, con.s, want)

	// Every partition at once within the buffer: each broker gets a
	// request that holds every partition it leads. Without the share (a
	// 1 MiB limit each) the budget grants two partitions at a time. A
	// broker's first request may come before the lookups of some of its
	// partitions are done, or while results are unreleased, so the
	// fetcher's long polls after the last result are waited for too.
	allAtOnce := func() (int, bool) {
		mu.Lock()
		defer mu.Unlock()
		led := map[int32]map[int32]bool{} // broker -> partitions asked of it
		for i, m := range limits {
			if led[nodes[i]] == nil {
				led[nodes[i]] = map[int32]bool{}
			}
			for p := range m {
				led[nodes[i]][p] = true
			}
		}
		covered := 0
		for n, ps := range led {
			for i, m := range limits {
				if nodes[i] == n && len(m) == len(ps) {
					covered += len(ps)
					break
				}
			}
		}
		return covered, covered == parts
	}
	wait := time.Now().Add(10 * time.Second) // a long poll is 500 ms
	for {
		covered, ok := allAtOnce()
		if ok {
			break
		}
		if time.Now().After(wait) {
			t.Fatalf("requests that held every partition of their broker covered %d partitions; want all %d at once within the buffer", covered, parts)
		}
		time.Sleep(50 * time.Millisecond)
	}

	mu.Lock()
	defer mu.Unlock()
	for _, m := range limits {
		for p, l := range m {
			// kfake returns a batch above the limit whole (as brokers do
			// for the first partition, KIP-74), so partition 7 may never
			// starve; if it does, its limit doubles.
			if l != MinPartitionShare && (p != 7 || (l != 2*MinPartitionShare && l != 4*MinPartitionShare)) {
				t.Fatalf("partition %d asked for %d bytes, want its share %d (or, for the partition with a 150 KiB batch, the share doubled)", p, l, MinPartitionShare)
			}
		}
	}
	if con.maxOut > budget+int64(con.s[tp.Key{Topic: "t", Partition: 7}].maxRaw) {
		t.Errorf("held %d bytes, above the budget %d plus one batch", con.maxOut, budget)
	}
}

// TestScreen: Deps.Screen sees every delivered batch's header before the
// batch is delivered, and a Screen error drops the response's results,
// which are fetched again: the records stay exact.
func TestScreen(t *testing.T) {
	ctx := deadline(t)
	c := source(t, 4, "t")
	produceMix(ctx, t, c, "t", 4, 4)
	ends := endOffsets(ctx, t, c, "t")
	want := readCommitted(ctx, t, c, "t", ends)

	f, _ := newFetcher(t, c, Config{PartitionMaxBytes: 2 << 10, MaxBufferedBytes: 64 << 10})
	type seen struct {
		base int64
		pid  int64
		crc  uint32
	}
	var (
		mu       sync.Mutex
		screened = map[seen]bool{}
		calls    int
		failed   int
	)
	f.screen = func(_ context.Context, hs []transform.Header) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls%3 == 1 {
			failed++
			return errors.New("screen refuses this response")
		}
		for _, h := range hs {
			screened[seen{h.BaseOffset, h.ProducerID, h.CRC}] = true
		}
		return nil
	}
	con := newConsumer(t, f)
	unscreened := 0
	con.onResult = func(_ int, r Result) {
		mu.Lock()
		defer mu.Unlock()
		for _, b := range r.Batches {
			if !screened[seen{b.Header.BaseOffset, b.Header.ProducerID, b.Header.CRC}] {
				unscreened++
			}
		}
	}
	con.assignAll(ends)
	run(t, f)
	con.until(ctx, ends)
	compare(t, con.s, want)
	mu.Lock()
	defer mu.Unlock()
	if unscreened != 0 || failed == 0 {
		t.Fatalf("%d batches delivered before Screen saw them; %d of %d Screen calls failed (want some)", unscreened, failed, calls)
	}
	t.Logf("%d Screen calls, %d failed; %d batches screened", calls, failed, len(screened))
}
