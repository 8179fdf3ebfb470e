package realkafka

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// The helper process of TestSweep: a re-exec of this test binary that
// starts a node and waits to be killed.
const (
	envHelper        = "REALKAFKA_TEST_HELPER" // "orphan" (no Pdeathsig) or "pdeathsig"
	envHelperVersion = "REALKAFKA_TEST_HELPER_VERSION"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(envHelper); mode != "" {
		helperMain(mode)
		return
	}
	os.Exit(Main(m))
}

func helperMain(mode string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, Config{Version: os.Getenv(envHelperVersion), noPdeathsig: mode == "orphan"})
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	n := c.nodes[0]
	fmt.Printf("READY %d %s\n", n.p.pid, n.dir)
	time.Sleep(10 * time.Minute) // until the test kills this process
	os.Exit(2)
}

func client(t *testing.T, addrs []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func createTopic(t *testing.T, ctx context.Context, cl *kgo.Client, topic string, partitions int32, rf int16, configs map[string]*string) {
	t.Helper()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, rf, configs, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

type rec struct {
	Topic     string
	Partition int32
	Key       string
	Value     string
	Headers   string
}

func recOf(r *kgo.Record) rec {
	var hs []string
	for _, h := range r.Headers {
		hs = append(hs, h.Key+"="+string(h.Value))
	}
	return rec{r.Topic, r.Partition, string(r.Key), string(r.Value), strings.Join(hs, ",")}
}

// consumeUntil reads topics read_committed from the start until every
// partition in sentinels has returned its sentinel key, and returns what
// came before, per topic/partition, in offset order.
func consumeUntil(t *testing.T, ctx context.Context, addrs []string, topics []string, sentinels map[string]map[int32]bool) map[string]map[int32][]rec {
	t.Helper()
	cl := client(t, addrs, kgo.ConsumeTopics(topics...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	got := map[string]map[int32][]rec{}
	left := 0
	for _, ps := range sentinels {
		left += len(ps)
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consume: %v with %d sentinels unseen; got %v", ctx.Err(), left, got)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Logf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Key) == "sentinel" {
				if sentinels[r.Topic][r.Partition] {
					sentinels[r.Topic][r.Partition] = false
					left--
				}
				return
			}
			if got[r.Topic] == nil {
				got[r.Topic] = map[int32][]rec{}
			}
			got[r.Topic][r.Partition] = append(got[r.Topic][r.Partition], recOf(r))
		})
	}
	return got
}

// Guards against a launcher whose broker does not behave as a real one for
// the two producers mirrord must handle: idempotent batches and
// transactions with aborts, read back read_committed record by record.
func TestProduceConsume(t *testing.T) {
	for _, v := range TestVersions(t) {
		t.Run(v, func(t *testing.T) {
			t0 := time.Now()
			c := Shared(t, "1node-"+v, Config{Version: v, ClusterID: "MkU3OEVBNTcwNTJENDM2Qg"})
			t.Logf("cluster %s up after %s", c.ID(), time.Since(t0).Round(time.Millisecond))
			ctx := t.Context()
			if c.ID() != "MkU3OEVBNTcwNTJENDM2Qg" {
				t.Fatalf("cluster ID %s", c.ID())
			}
			admin := client(t, c.Addrs())
			topics := []string{"pc-a", "pc-b"}
			for _, tp := range topics {
				createTopic(t, ctx, admin, tp, 3, 1, nil)
			}
			want := map[string]map[int32][]rec{}
			add := func(r rec) {
				if want[r.Topic] == nil {
					want[r.Topic] = map[int32][]rec{}
				}
				want[r.Topic][r.Partition] = append(want[r.Topic][r.Partition], r)
			}
			mk := func(topic string, p int32, key, value string) *kgo.Record {
				return &kgo.Record{Topic: topic, Partition: p, Key: []byte(key), Value: []byte(value),
					Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("v-" + key)}}}
			}

			idem := client(t, c.Addrs(), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchCompression(kgo.Lz4Compression()))
			for i := range 30 {
				r := mk(topics[i%2], int32(i%3), fmt.Sprintf("idem-%d", i), fmt.Sprintf("value %d", i))
				if err := idem.ProduceSync(ctx, r).FirstErr(); err != nil {
					t.Fatalf("idempotent produce: %v", err)
				}
				add(recOf(r))
			}

			txn := client(t, c.Addrs(), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionalID("pc-txn-"+v))
			for n := range 6 {
				abort := n%3 == 1
				if err := txn.BeginTransaction(); err != nil {
					t.Fatal(err)
				}
				var rs []rec
				for i := range 5 {
					r := mk(topics[(n+i)%2], int32(i%3), fmt.Sprintf("txn-%d-%d", n, i), fmt.Sprintf("abort=%v", abort))
					if err := txn.ProduceSync(ctx, r).FirstErr(); err != nil {
						t.Fatalf("transactional produce: %v", err)
					}
					rs = append(rs, recOf(r))
				}
				if err := txn.EndTransaction(ctx, kgo.TransactionEndTry(!abort)); err != nil {
					t.Fatalf("end transaction %d: %v", n, err)
				}
				if !abort {
					for _, r := range rs {
						add(r)
					}
				}
			}

			sentinels := map[string]map[int32]bool{}
			for _, tp := range topics {
				sentinels[tp] = map[int32]bool{}
				for p := range int32(3) {
					sentinels[tp][p] = true
					if err := idem.ProduceSync(ctx, mk(tp, p, "sentinel", "")).FirstErr(); err != nil {
						t.Fatal(err)
					}
				}
			}
			got := consumeUntil(t, ctx, c.Addrs(), topics, sentinels)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("read_committed read back\n got %v\nwant %v", got, want)
			}

			// 4.x formats with transaction.version=2 (KIP-890); 3.9 leaves
			// it at 0, which ApiVersions does not list at all (-1 here).
			tv := finalizedFeature(t, ctx, admin, FeatureTransactionVersion)
			if major(v) >= 4 && tv != 2 || major(v) < 4 && tv > 0 {
				t.Errorf("transaction.version finalized at %d on %s", tv, v)
			}
		})
	}
}

// finalizedFeature reads a finalized feature level from ApiVersions (-1:
// not finalized).
func finalizedFeature(t *testing.T, ctx context.Context, cl *kgo.Client, name string) int16 {
	t.Helper()
	resp, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range resp.FinalizedFeatures {
		if f.Name == name {
			return f.MaxVersionLevel
		}
	}
	return -1
}

// Guards the TransactionVersion knob: a 4.x cluster formatted with
// transaction.version=0 speaks the pre-KIP-890 protocol.
func TestTransactionVersion0(t *testing.T) {
	for _, v := range TestVersions(t) {
		if major(v) < 4 {
			continue
		}
		t.Run(v, func(t *testing.T) {
			c := ForTest(t, Config{Version: v, Features: map[string]int{FeatureTransactionVersion: 0}})
			if tv := finalizedFeature(t, t.Context(), client(t, c.Addrs()), FeatureTransactionVersion); tv > 0 {
				t.Fatalf("transaction.version finalized at %d, want 0", tv)
			}
		})
	}
}

func waitBrokers(t *testing.T, c *Cluster, want []int32, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ids, err := c.Brokers(t.Context())
		if err == nil && slices.Equal(ids, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("brokers %v (%v), want %v within %s", ids, err, want, within)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// Guards Kill, Stop and Start against a real quorum: a killed node leaves
// the metadata, an RF=3 min.insync.replicas=2 topic still takes acks=all
// writes, the node comes back on the same ports with its data, and a
// controlled shutdown completes within the bound.
func TestThreeNodes(t *testing.T) {
	for _, v := range TestVersions(t) {
		t.Run(v, func(t *testing.T) {
			t0 := time.Now()
			c := ForTest(t, Config{Version: v, Nodes: 3})
			t.Logf("3 nodes up after %s", time.Since(t0).Round(time.Millisecond))
			ctx := t.Context()
			waitBrokers(t, c, []int32{1, 2, 3}, 0)
			cl := client(t, c.Addrs(), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			minISR := "2"
			createTopic(t, ctx, cl, "three", 3, 3, map[string]*string{"min.insync.replicas": &minISR})
			produced := 0
			produce := func(what string) {
				t.Helper()
				pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
				defer cancel()
				for p := range int32(3) {
					r := &kgo.Record{Topic: "three", Partition: p, Value: []byte(fmt.Sprintf("%s-%d", what, p))}
					if err := cl.ProduceSync(pctx, r).FirstErr(); err != nil {
						t.Fatalf("%s: acks=all produce to partition %d: %v", what, p, err)
					}
					produced++
				}
			}
			produce("all up")

			t1 := time.Now()
			if err := c.Kill(2); err != nil {
				t.Fatal(err)
			}
			if c.Running(2) {
				t.Fatal("node 2 runs after Kill")
			}
			if err := c.Kill(2); err == nil {
				t.Fatal("Kill of a dead node: no error")
			}
			waitBrokers(t, c, []int32{1, 3}, 60*time.Second)
			t.Logf("node 2 fenced %s after SIGKILL", time.Since(t1).Round(time.Millisecond))
			produce("node 2 killed")

			t1 = time.Now()
			if err := c.Start(ctx, 2); err != nil {
				t.Fatal(err)
			}
			t.Logf("node 2 back after %s", time.Since(t1).Round(time.Millisecond))
			waitBrokers(t, c, []int32{1, 2, 3}, 0)
			if err := c.Start(ctx, 2); err == nil {
				t.Fatal("Start of a running node: no error")
			}

			t1 = time.Now()
			if err := c.Stop(ctx, 3); err != nil {
				t.Fatal(err)
			}
			t.Logf("node 3 controlled shutdown took %s", time.Since(t1).Round(time.Millisecond))
			waitBrokers(t, c, []int32{1, 2}, 30*time.Second)
			produce("node 3 stopped")

			// Everything acknowledged is there.
			offs, err := kadm.NewClient(cl).ListEndOffsets(ctx, "three")
			if err != nil {
				t.Fatal(err)
			}
			total := int64(0)
			offs.Each(func(o kadm.ListedOffset) { total += o.Offset })
			if total != int64(produced) {
				t.Fatalf("end offsets sum to %d, produced %d", total, produced)
			}
		})
	}
}

// Guards the cache: a resolved jar set is found again without Maven (with
// no mvn on PATH and no Maven process started).
func TestResolveCached(t *testing.T) {
	for _, v := range TestVersions(t) {
		t.Run(v, func(t *testing.T) {
			RequireTools(t)
			j, err := Resolve(t.Context(), BrokerSpec(v))
			if err != nil {
				t.Fatal(err)
			}
			if j.Version("kafka_2.13") != v || j.Version("slf4j-api") == "" || j.Version("log4j-core") == "" {
				t.Fatalf("jars of %s: %v", v, j.Files)
			}
			binding := "log4j-slf4j2-impl"
			if strings.HasPrefix(j.Version("slf4j-api"), "1.") {
				binding = "log4j-slf4j-impl"
			}
			if j.Version(binding) != j.Version("log4j-api") {
				t.Fatalf("slf4j-api %s wants %s of log4j %s; jars %v", j.Version("slf4j-api"), binding, j.Version("log4j-api"), j.Files)
			}
			runs := mvnRuns.Load()
			t.Setenv("PATH", "")
			t0 := time.Now()
			j2, err := Resolve(t.Context(), BrokerSpec(v))
			if err != nil {
				t.Fatalf("second resolve with no mvn on PATH: %v", err)
			}
			if mvnRuns.Load() != runs || !reflect.DeepEqual(j.Files, j2.Files) {
				t.Fatalf("second resolve ran mvn (%d runs) or found other jars", mvnRuns.Load()-runs)
			}
			t.Logf("cached resolve took %s: %s", time.Since(t0), j2.Dir)
		})
	}
}

// Guards the resolution error a developer sees for a version Maven Central
// does not have: one line naming the artifact, Maven's first ERROR and the
// log with the rest.
func TestResolveMissingArtifact(t *testing.T) {
	TestVersions(t)
	RequireTools(t)
	t.Setenv(EnvCache, t.TempDir())
	missing := Artifact{"org.apache.kafka", "kafka_2.13", "0.0.1-mirrord-missing"}
	_, err := Resolve(t.Context(), Spec{Name: "missing", Artifacts: []Artifact{missing}})
	var me *MavenError
	if !errors.As(err, &me) {
		t.Fatalf("Resolve = %v, want a *MavenError", err)
	}
	msg := err.Error()
	t.Log(msg)
	for _, want := range []string{"maven could not resolve " + missing.String() + ":", "0.0.1-mirrord-missing", "full output in " + me.Log} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q", want)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Error("error is more than one line")
	}
	if !exists(me.Log) {
		t.Errorf("log %s missing", me.Log)
	}
}

// startHelper runs this test binary as a helper that starts one node, and
// returns the helper process, its JVM's pid and node directory.
func startHelper(t *testing.T, v, mode string) (*exec.Cmd, int, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envHelper+"="+mode, envHelperVersion+"="+v)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "READY ") || strings.HasPrefix(sc.Text(), "ERROR ") {
				lines <- sc.Text()
				return
			}
		}
		lines <- "ERROR helper exited"
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(3 * time.Minute):
		t.Fatal("helper did not start its node")
	}
	f := strings.Fields(line)
	if f[0] != "READY" || len(f) != 3 {
		t.Fatalf("helper: %s", line)
	}
	pid, _ := strconv.Atoi(f[1])
	t.Cleanup(func() {
		if isKafkaOf(pid, f[2]) {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
		_ = os.RemoveAll(filepath.Dir(f[2]))
	})
	return cmd, pid, f[2]
}

func waitGone(pid int, dir string, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for isKafkaOf(pid, dir) && !isZombie(pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}

// Guards against brokers outliving the test process that started them:
// with Pdeathsig a JVM dies with its starter; without it (or if it failed)
// the next Start finds the pid file whose owner is gone and kills the JVM.
func TestSweep(t *testing.T) {
	v := TestVersions(t)[0] // the mechanism does not depend on the version
	RequireTools(t)

	t.Run("pdeathsig", func(t *testing.T) {
		helper, pid, dir := startHelper(t, v, "pdeathsig")
		_ = helper.Process.Signal(syscall.SIGKILL)
		_ = helper.Wait()
		if !waitGone(pid, dir, 10*time.Second) {
			t.Fatalf("JVM %d still runs 10s after its starter was SIGKILLed", pid)
		}
	})

	t.Run("orphan", func(t *testing.T) {
		helper, pid, dir := startHelper(t, v, "orphan")
		_ = helper.Process.Signal(syscall.SIGKILL)
		_ = helper.Wait()
		time.Sleep(time.Second)
		if !isKafkaOf(pid, dir) {
			t.Fatalf("the orphan JVM %d died with its starter: nothing left to sweep", pid)
		}
		root, _ := CacheRoot()
		files, _ := filepath.Glob(filepath.Join(root, "run", fmt.Sprintf("%d-%d.json", helper.Process.Pid, pid)))
		if len(files) != 1 {
			t.Fatalf("no pid file for the orphan in %s", filepath.Join(root, "run"))
		}
		ForTest(t, Config{Version: v}) // its Start sweeps
		if !waitGone(pid, dir, 5*time.Second) {
			t.Fatalf("orphan JVM %d of %s survived the next Start", pid, dir)
		}
		if exists(files[0]) {
			t.Errorf("pid file %s left behind", files[0])
		}
	})
}

// Guards the authenticated listeners mirrord's cluster blocks offer: SCRAM
// (users created with kadm through INTERNAL), TLS with a client certificate
// from NewCerts, and PLAIN over TLS, each through kgo.
func TestListeners(t *testing.T) {
	for _, v := range TestVersions(t) {
		t.Run(v, func(t *testing.T) {
			certs, err := NewCerts(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			c := ForTest(t, Config{Version: v, Listeners: []Listener{
				{Name: "SCRAM", Protocol: SASLPlaintext, Mechanisms: []string{ScramSHA512, ScramSHA256}},
				{Name: "TLS", Protocol: SSL, TLS: certs, Props: map[string]string{"ssl.client.auth": "required"}},
				{Name: "SASLSSL", Protocol: SASLSSL, Mechanisms: []string{Plain}, PlainUsers: map[string]string{"bob": "bob-secret"}, TLS: certs},
			}})
			ctx := t.Context()
			if got := c.Addrs(); !slices.Equal(got, c.ListenerAddrs("SCRAM")) {
				t.Fatalf("Addrs %v is not the first listener's %v", got, c.ListenerAddrs("SCRAM"))
			}
			internal := client(t, c.ListenerAddrs(Internal))
			adm := kadm.NewClient(internal)
			createTopic(t, ctx, internal, "auth", 1, 1, nil)
			// One mechanism per request: the broker refuses two upserts of
			// the same user in one (DUPLICATE_RESOURCE).
			for _, m := range []kadm.ScramMechanism{kadm.ScramSha512, kadm.ScramSha256} {
				res, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: "alice", Mechanism: m, Iterations: 4096, Password: "alice-secret"}})
				if err == nil {
					err = res.Error()
				}
				if err != nil {
					t.Fatalf("create SCRAM user (%v): %v", m, err)
				}
			}

			roundTrip := func(name string, addrs []string, opts ...kgo.Opt) error {
				cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...), kgo.ConsumeTopics("auth"),
					kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.RequestRetries(0)}, opts...)...)
				if err != nil {
					return err
				}
				defer cl.Close()
				pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
				defer cancel()
				if err := cl.ProduceSync(pctx, &kgo.Record{Topic: "auth", Key: []byte(name), Value: []byte("via " + name)}).FirstErr(); err != nil {
					return fmt.Errorf("produce: %w", err)
				}
				for {
					fs := cl.PollFetches(pctx)
					if err := fs.Err0(); err != nil {
						return fmt.Errorf("consume: %w", err)
					}
					found := false
					fs.EachRecord(func(r *kgo.Record) { found = found || string(r.Key) == name })
					if found {
						return nil
					}
				}
			}
			// probe asks for metadata once, for the error of a client that
			// must be refused (a produce would retry until its timeout).
			probe := func(addrs []string, opts ...kgo.Opt) error {
				cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...), kgo.RequestRetries(0)}, opts...)...)
				if err != nil {
					return err
				}
				defer cl.Close()
				pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				_, err = kmsg.NewPtrMetadataRequest().RequestWith(pctx, cl)
				return err
			}
			scram512 := scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism()
			// Credentials reach the broker through the metadata log: retry the
			// first login for a moment.
			deadline := time.Now().Add(20 * time.Second)
			for {
				err := roundTrip("scram-512", c.ListenerAddrs("SCRAM"), kgo.SASL(scram512))
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("SCRAM-SHA-512: %v", err)
				}
				time.Sleep(500 * time.Millisecond)
			}
			if err := roundTrip("scram-256", c.ListenerAddrs("SCRAM"), kgo.SASL(scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha256Mechanism())); err != nil {
				t.Errorf("SCRAM-SHA-256: %v", err)
			}
			err = probe(c.ListenerAddrs("SCRAM"), kgo.SASL(scram.Auth{User: "alice", Pass: "wrong"}.AsSha512Mechanism()))
			if !errors.Is(err, kerr.SaslAuthenticationFailed) {
				t.Errorf("SCRAM with a wrong password: %v, want SASL_AUTHENTICATION_FAILED", err)
			}
			if err := roundTrip("tls", c.ListenerAddrs("TLS"), kgo.DialTLSConfig(certs.ClientTLS())); err != nil {
				t.Errorf("TLS: %v", err)
			}
			noCert := certs.ClientTLS()
			noCert.Certificates = nil
			if err := probe(c.ListenerAddrs("TLS"), kgo.DialTLSConfig(noCert)); err == nil {
				t.Error("TLS without a client certificate accepted by a listener with ssl.client.auth=required")
			}
			if err := roundTrip("plain-tls", c.ListenerAddrs("SASLSSL"), kgo.DialTLSConfig(certs.ClientTLS()), kgo.SASL(plain.Auth{User: "bob", Pass: "bob-secret"}.AsMechanism())); err != nil {
				t.Errorf("SASL_SSL PLAIN: %v", err)
			}
		})
	}
}

// TestClassArchive: test clusters run C1 only and map their classes from
// the cache's class-data archive. The archive's path in the JVM's memory
// maps is the proof that the JVM accepted it: a JVM that rejects an
// archive (another build, another class path) warns and maps nothing.
func TestClassArchive(t *testing.T) {
	for _, v := range TestVersions(t) {
		t.Run(v, func(t *testing.T) {
			c := Shared(t, "1node-"+v, Config{Version: v, ClusterID: "MkU3OEVBNTcwNTJENDM2Qg"})
			n := c.nodes[0]
			if c.archive == "" {
				t.Fatalf("no class archive for Kafka %s (see %s/cds/*/failed.txt)", v, os.Getenv(EnvCache))
			}
			cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", n.p.pid))
			if err != nil {
				t.Fatal(err)
			}
			args := strings.Split(string(cmdline), "\x00")
			for _, want := range []string{"-XX:TieredStopAtLevel=1", "-XX:SharedArchiveFile=" + c.archive} {
				if !slices.Contains(args, want) {
					t.Errorf("the JVM's command line lacks %s: %q", want, args)
				}
			}
			maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", n.p.pid))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(maps), c.archive) {
				t.Errorf("the JVM did not map %s: it refused the archive (its log: %s)", c.archive, n.log)
			}
		})
	}
}
