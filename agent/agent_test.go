package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/internal/testkit/logtest"
	"github.com/seed83556561/mirrord/link"
	"github.com/seed83556561/mirrord/statestore"
	"github.com/seed83556561/mirrord/verify"
)

// within is the generous deadline of every wait; it only keeps a broken
// test from hanging.
const within = 90 * time.Second

// newLogBuffer collects an agent's log lines and shows them if the test
// fails.
func newLogBuffer(t *testing.T) *logtest.Buffer {
	b := &logtest.Buffer{}
	t.Cleanup(func() {
		if t.Failed() || testing.Verbose() {
			t.Logf("agent log:\n%s", b.String())
		}
	})
	return b
}

// agentHCL is a configuration with clusters src and dst and a link "l"
// that mirrors the topic orders; extraSrc goes into the src cluster block.
func agentHCL(src, dst *kfake.Cluster, extraSrc string) string {
	return fmt.Sprintf(`
agent {
  listen           = "127.0.0.1:0"
  log_level        = "debug"
  shutdown_timeout = "20s"
}
cluster "src" {
  bootstrap_servers = %s
  %s
}
cluster "dst" {
  bootstrap_servers = %s
}
link "l" {
  source      = "src"
  destination = "dst"
  topics { include = ["orders"] }
  checkpoint_interval            = "200ms"
  session_timeout                = "3s"
  settle_delay                   = "200ms"
  discovery_interval             = "300ms"
  destination_replication_factor = 1
  check_crcs                     = true
}
`, hclList(src.ListenAddrs()), extraSrc, hclList(dst.ListenAddrs()))
}

func hclList(s []string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// tune shortens the waits that the file does not set.
func tune(c *link.Config) {
	c.Tuning.FetchMaxWait = 100 * time.Millisecond
	c.Tuning.BackoffBase = 50 * time.Millisecond
	c.Tuning.BackoffMax = time.Second
	c.Tuning.LeaseSkew = time.Nanosecond
}

// running is an agent whose Run goroutine the test owns.
type running struct {
	*Agent
	base   string // http://host:port
	cancel context.CancelFunc
	done   chan error
}

func newAgent(t *testing.T, src string, environ []string, logs io.Writer, reg *prometheus.Registry) *Agent {
	t.Helper()
	cfg, err := config.Parse("agent_test.hcl", []byte(src), environ)
	if err != nil {
		t.Fatalf("config:\n%v", err)
	}
	a, err := New(cfg, Deps{Logger: NewLogger(cfg.Agent, logs), Registry: reg, Tune: tune, Version: "test-1"})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func start(t *testing.T, a *Agent) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Agent: a, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(ctx) }()
	t.Cleanup(func() { _ = r.stop(t) })
	select {
	case <-a.Ready():
	case err := <-r.done:
		t.Fatalf("Run ended before it listened: %v", err)
	case <-time.After(within):
		t.Fatal("agent does not listen")
	}
	r.base = "http://" + a.Addr().String()
	return r
}

// stop cancels Run and returns what it returned.
func (r *running) stop(t *testing.T) error {
	t.Helper()
	if r.cancel == nil {
		return nil
	}
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		return err
	case <-time.After(within):
		t.Fatal("agent did not stop")
		return nil
	}
}

// call sends a request and returns the status code and body.
func call(t *testing.T, method, url string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return resp.StatusCode, body
}

// callJSON sends a request, checks the status code and decodes the body.
func callJSON(t *testing.T, method, url string, wantCode int, v any) {
	t.Helper()
	code, body := call(t, method, url)
	if code != wantCode {
		t.Fatalf("%s %s: status %d, want %d; body %s", method, url, code, wantCode, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("%s %s: decode %s: %v", method, url, body, err)
	}
}

// waitFor polls cond until it holds; what describes the last state seen.
func waitFor(t *testing.T, cond func() (ok bool, what string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, what := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// apiStatus decodes a link.Status from the API; link.State has no
// UnmarshalJSON, so the state is read by name.
type apiStatus struct {
	link.Status
	State string `json:"state"`
}

// linkStatus is GET /v1/links/l.
func (r *running) linkStatus(t *testing.T) apiStatus {
	t.Helper()
	var s apiStatus
	callJSON(t, http.MethodGet, r.base+"/v1/links/l", http.StatusOK, &s)
	return s
}

// waitCaughtUp waits until the link mirrors every partition of orders with
// no lag, as GET /v1/links shows it.
func (r *running) waitCaughtUp(t *testing.T, ends map[int32]int64) apiStatus {
	t.Helper()
	var last apiStatus
	waitFor(t, func() (bool, string) {
		var all []apiStatus
		callJSON(t, http.MethodGet, r.base+"/v1/links", http.StatusOK, &all)
		if len(all) != 1 {
			t.Fatalf("GET /v1/links: %d links, want 1", len(all))
		}
		last = all[0]
		if last.State != "MIRRORING" || last.Lag != 0 || len(last.Partitions) != len(ends) {
			return false, fmt.Sprintf("status %+v", last)
		}
		for _, p := range last.Partitions {
			if p.SourceNextOffset != ends[p.Partition] || p.HighWatermark != ends[p.Partition] || p.Lag != 0 {
				return false, fmt.Sprintf("partition %+v, source end %d", p, ends[p.Partition])
			}
		}
		return true, ""
	})
	// Caught up, the time lag is known and zero, for the link and every
	// partition.
	if last.LagSeconds == nil || *last.LagSeconds != 0 {
		t.Fatalf("caught up, the link's lag_seconds is %v, want 0", last.LagSeconds)
	}
	for _, p := range last.Partitions {
		if p.LagSeconds == nil || *p.LagSeconds != 0 {
			t.Fatalf("caught up, partition %d's lag_seconds is %v, want 0", p.Partition, p.LagSeconds)
		}
	}
	return last
}

// produce writes n records to each partition of orders through an
// idempotent producer and returns the source's end offsets.
func produce(t *testing.T, cl *kgo.Client, partitions int32, round string, n int) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var recs []*kgo.Record
	for p := range partitions {
		for i := range n {
			recs = append(recs, &kgo.Record{
				Topic: "orders", Partition: p,
				Key:     fmt.Appendf(nil, "%s-%d-%d", round, p, i),
				Value:   fmt.Appendf(nil, "value %s %d %d %s", round, p, i, strings.Repeat("x", i%50)),
				Headers: []kgo.RecordHeader{{Key: "round", Value: []byte(round)}},
			})
		}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

func producer(t *testing.T, c *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	return kafkatest.Client(t, c, append([]kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
}

func createOrders(t *testing.T, cl *kgo.Client, partitions int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
}

// verifyMirror compares orders with its mirror record by record, with the
// salts of the link's state topic.
func verifyMirror(t *testing.T, srcCl, dstCl *kgo.Client, dstOpts []kgo.Opt, want int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	salts, err := verify.StateSalts(ctx, dstCl, dstOpts, config.DefaultStateTopic)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := verify.Run(ctx, verify.Config{
		Source: srcCl, Destination: dstCl, Topics: map[string]string{"orders": "orders"},
		SourceClusterID: kafkatest.SourceClusterID, Salt: salts,
	})
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if rep.First != nil || rep.Behind != 0 || rep.Records != want {
		t.Fatalf("mirror of orders: %d records equal, %d behind, want %d equal; first difference: %v", rep.Records, rep.Behind, want, rep.First)
	}
}

// scrape parses GET /metrics.
func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := call(t, http.MethodGet, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return mfs
}

// sample returns the value of the series of family name whose labels
// include want, and how many series matched.
func sample(mfs map[string]*dto.MetricFamily, name string, want map[string]string) (float64, int) {
	var v float64
	var n int
	mf := mfs[name]
	if mf == nil {
		return 0, 0
	}
	for _, m := range mf.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for k, val := range want {
			if labels[k] != val {
				match = false
			}
		}
		if !match {
			continue
		}
		n++
		switch {
		case m.Counter != nil:
			v += m.Counter.GetValue()
		case m.Gauge != nil:
			v += m.Gauge.GetValue()
		}
	}
	return v, n
}

// replayState reads the destination's state topic.
func replayState(t *testing.T, dst *kfake.Cluster) *statestore.View {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	view, err := statestore.ReadView(ctx, statestore.DefaultTopic, []kgo.Opt{kgo.SeedBrokers(dst.ListenAddrs()...)})
	if err != nil {
		t.Fatal(err)
	}
	return view
}

// TestAgentEndToEnd runs an agent with one link between two kfake clusters
// and drives it through its HTTP API: health, readiness before and after
// the link mirrors, the links' status (state, partitions, lag), metrics
// (pipeline, franz-go clients, build), the content of the mirror record by
// record, pause and resume, the API's 404 and 405 answers, and a graceful
// stop that commits a final checkpoint with the link STOPPED.
func TestAgentEndToEnd(t *testing.T) {
	srcC, dstC := kafkatest.Pair(t)
	srcCl, dstCl := producer(t, srcC), kafkatest.Client(t, dstC)
	const partitions = 3
	createOrders(t, srcCl, partitions)
	ends := produce(t, srcCl, partitions, "before", 40)

	reg := prometheus.NewRegistry()
	logs := newLogBuffer(t)
	a := newAgent(t, agentHCL(srcC, dstC, ""), nil, logs, reg)

	// Before Run the link is STOPPED: not ready, and the body says why.
	rec := httptest.NewRecorder()
	a.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	var notReady Readiness
	if err := json.Unmarshal(rec.Body.Bytes(), &notReady); err != nil {
		t.Fatalf("readyz body %s: %v", rec.Body, err)
	}
	if rec.Code != http.StatusServiceUnavailable || notReady.Ready || len(notReady.NotReady) != 1 ||
		notReady.NotReady[0].Name != "l" || notReady.NotReady[0].State != "STOPPED" {
		t.Fatalf("readyz before Run: %d %s", rec.Code, rec.Body)
	}
	if len(a.Links()) != 1 || a.Links()[0].Name() != "l" {
		t.Fatalf("Links: %v", a.Links())
	}

	r := start(t, a)
	if !strings.Contains(logs.String(), "http listening") || !strings.Contains(logs.String(), a.Addr().String()) {
		t.Errorf("the log does not say where the agent listens:\n%s", logs)
	}
	if code, body := call(t, http.MethodGet, r.base+"/healthz"); code != http.StatusOK || string(body) != "ok\n" {
		t.Errorf("healthz: %d %q", code, body)
	}

	st := r.waitCaughtUp(t, ends)
	if st.Name != "l" || st.Source != "src" || st.Destination != "dst" ||
		st.SourceClusterID != kafkatest.SourceClusterID || st.DestinationClusterID != kafkatest.DestClusterID || st.LastError != "" {
		t.Errorf("status %+v", st)
	}
	for _, p := range st.Partitions {
		if p.SourceTopic != "orders" || p.DestinationTopic != "orders" || p.DestNextOffset != ends[p.Partition] {
			t.Errorf("partition status %+v, want orders -> orders at destination offset %d", p, ends[p.Partition])
		}
	}
	var ready Readiness
	callJSON(t, http.MethodGet, r.base+"/readyz", http.StatusOK, &ready)
	if !ready.Ready || len(ready.NotReady) != 0 {
		t.Errorf("readyz while mirroring: %+v", ready)
	}
	total := int64(partitions * 40)
	verifyMirror(t, srcCl, dstCl, []kgo.Opt{kgo.SeedBrokers(dstC.ListenAddrs()...)}, total)

	mfs := scrape(t, r.base)
	if v, n := sample(mfs, "mirrord_records_mirrored_total", map[string]string{"link": "l"}); n != 1 || v != float64(total) {
		t.Errorf("mirrord_records_mirrored_total{link=l} = %v (%d series), want %d", v, n, total)
	}
	if v, n := sample(mfs, "mirrord_link_state", map[string]string{"link": "l", "state": "MIRRORING"}); n != 1 || v != 1 {
		t.Errorf("mirrord_link_state{state=MIRRORING} = %v (%d series)", v, n)
	}
	if v, n := sample(mfs, "mirrord_build_info", map[string]string{"version": "test-1"}); n != 1 || v != 1 {
		t.Errorf("mirrord_build_info{version=test-1} = %v (%d series)", v, n)
	}
	for _, role := range []map[string]string{{"cluster": "src", "role": "source"}, {"cluster": "dst", "role": "destination"}} {
		if v, n := sample(mfs, "mirrord_kafka_read_bytes_total", role); n == 0 || v <= 0 {
			t.Errorf("mirrord_kafka_read_bytes_total%v = %v (%d series), want bytes read", role, v, n)
		}
	}
	for _, name := range []string{"mirrord_append_latency_seconds", "mirrord_fetch_requests_total", "mirrord_produce_requests_total"} {
		if mfs[name] == nil {
			t.Errorf("no %s in /metrics", name)
		}
	}
	// Every mirrord metric served is in the README's metrics table
	// (mirrord_kafka_* are franz-go's, documented as a group).
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := 0
	for name := range mfs {
		if !strings.HasPrefix(name, "mirrord_") || strings.HasPrefix(name, "mirrord_kafka_") {
			continue
		}
		if !strings.Contains(string(readme), "| `"+name+"` |") {
			t.Errorf("metric %s is served but not in the README's metrics table", name)
		}
		documented++
	}
	if documented < 30 {
		t.Errorf("only %d mirrord metrics served", documented)
	}

	// The API's refusals.
	for _, tc := range []struct {
		method, path string
		code         int
	}{
		{http.MethodGet, "/v1/links/nope", http.StatusNotFound},
		{http.MethodPost, "/v1/links/nope/pause", http.StatusNotFound},
		{http.MethodPost, "/v1/links/nope/resume", http.StatusNotFound},
		{http.MethodGet, "/v1/links/l/pause", http.StatusMethodNotAllowed},
		{http.MethodDelete, "/v1/links/l", http.StatusMethodNotAllowed},
		{http.MethodPost, "/v1/links", http.StatusMethodNotAllowed},
		{http.MethodPost, "/readyz", http.StatusMethodNotAllowed},
		{http.MethodGet, "/v2/links", http.StatusNotFound},
	} {
		code, body := call(t, tc.method, r.base+tc.path)
		if code != tc.code {
			t.Errorf("%s %s: %d, want %d (%s)", tc.method, tc.path, code, tc.code, body)
		}
		if code == http.StatusNotFound && strings.HasPrefix(tc.path, "/v1/links/nope") &&
			!strings.Contains(string(body), `"error": "no link \"nope\"; the links are: l"`) {
			t.Errorf("%s %s: body %s does not say which links exist", tc.method, tc.path, body)
		}
	}

	// Pause: a final checkpoint, PAUSED, and still ready.
	var accepted apiStatus
	callJSON(t, http.MethodPost, r.base+"/v1/links/l/pause", http.StatusAccepted, &accepted)
	if accepted.Name != "l" {
		t.Errorf("pause answered %+v", accepted)
	}
	waitFor(t, func() (bool, string) {
		s := r.linkStatus(t)
		return s.State == "PAUSED", "state " + s.State
	})
	callJSON(t, http.MethodGet, r.base+"/readyz", http.StatusOK, &ready)
	if v, _ := sample(scrape(t, r.base), "mirrord_link_state", map[string]string{"link": "l", "state": "PAUSED"}); v != 1 {
		t.Errorf("mirrord_link_state{state=PAUSED} = %v", v)
	}
	if lv := replayState(t, dstC).Links["l"]; lv.State != link.Paused {
		t.Errorf("state topic says %s after pause, want PAUSED", lv.State.String())
	}

	// Records produced while paused are mirrored after resume.
	ends = produce(t, srcCl, partitions, "paused", 25)
	callJSON(t, http.MethodPost, r.base+"/v1/links/l/resume", http.StatusAccepted, &accepted)
	r.waitCaughtUp(t, ends)
	total += partitions * 25
	verifyMirror(t, srcCl, dstCl, []kgo.Opt{kgo.SeedBrokers(dstC.ListenAddrs()...)}, total)

	// A graceful stop returns nil after a final checkpoint at the end.
	if err := r.stop(t); err != nil {
		t.Fatalf("Run after a clean stop: %v", err)
	}
	if resp, err := http.Get(r.base + "/healthz"); err == nil {
		_ = resp.Body.Close()
		t.Error("the HTTP server still answers after Run returned")
	}
	view := replayState(t, dstC)
	if lv, ok := view.Links["l"]; !ok || lv.State != link.Stopped {
		t.Fatalf("link record %+v (found %v), want STOPPED", lv, ok)
	}
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	md, err := kadm.NewClient(dstCl).Metadata(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	id := statestore.UUID(md.Topics["orders"].ID)
	for p := range int32(partitions) {
		ck, ok := view.Checkpoints[statestore.CheckpointKey{LinkName: "l", TopicID: id, Partition: p}]
		if !ok || ck.SourceNextOffset != ends[p] || ck.DestNextOffset != ends[p] || ck.SourceTopic != "orders" {
			t.Errorf("final checkpoint of orders[%d]: %+v (found %v), want source and destination at %d", p, ck, ok, ends[p])
		}
	}
	if !strings.Contains(logs.String(), "final checkpoint committed") {
		t.Error("the log does not show the final checkpoint")
	}
}

// TestAgentSCRAM mirrors from a source that accepts only SASL/SCRAM-SHA-512,
// configured through HCL with password_env, and checks that the password
// never reaches the log.
func TestAgentSCRAM(t *testing.T) {
	const user, password = "mirror", "s3cret-Pa55word-7"
	srcC := kafkatest.NewCluster(t, kafkatest.SourceClusterID, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", user, password))
	dstC := kafkatest.NewCluster(t, kafkatest.DestClusterID)
	srcCl := producer(t, srcC, kgo.SASL(scram.Auth{User: user, Pass: password}.AsSha512Mechanism()))
	dstCl := kafkatest.Client(t, dstC)
	createOrders(t, srcCl, 2)
	ends := produce(t, srcCl, 2, "scram", 30)

	logs := newLogBuffer(t)
	sasl := `sasl {
    mechanism    = "SCRAM-SHA-512"
    username     = "mirror"
    password_env = "SRC_KAFKA_PASSWORD"
  }`
	a := newAgent(t, agentHCL(srcC, dstC, sasl), []string{"SRC_KAFKA_PASSWORD=" + password}, logs, nil)
	r := start(t, a)
	r.waitCaughtUp(t, ends)
	verifyMirror(t, srcCl, dstCl, []kgo.Opt{kgo.SeedBrokers(dstC.ListenAddrs()...)}, 60)
	var ready Readiness
	callJSON(t, http.MethodGet, r.base+"/readyz", http.StatusOK, &ready)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "cluster reachable: cluster=src") {
		t.Errorf("the start-up ping of src is not logged as reachable")
	}
	if strings.Contains(logs.String(), password) {
		t.Error("the SASL password appears in the log")
	}
}

// TestAgentReadyzNamesFailingLink guards /readyz for a link that cannot
// prepare (the source refuses its credentials): 503 with the link, its
// state and its last error, and the start-up ping logged as an ERROR that
// names the cluster.
func TestAgentReadyzNamesFailingLink(t *testing.T) {
	srcC := kafkatest.NewCluster(t, kafkatest.SourceClusterID, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "mirror", "right"))
	dstC := kafkatest.NewCluster(t, kafkatest.DestClusterID)
	logs := newLogBuffer(t)
	sasl := `sasl {
    mechanism = "SCRAM-SHA-512"
    username  = "mirror"
    password  = "wrong-password-1"
  }`
	r := start(t, newAgent(t, agentHCL(srcC, dstC, sasl), nil, logs, nil))
	var ready Readiness
	waitFor(t, func() (bool, string) {
		code, body := call(t, http.MethodGet, r.base+"/readyz")
		if code != http.StatusServiceUnavailable {
			t.Fatalf("readyz with a refused source: %d %s", code, body)
		}
		if err := json.Unmarshal(body, &ready); err != nil {
			t.Fatalf("readyz body %s: %v", body, err)
		}
		return len(ready.NotReady) == 1 && ready.NotReady[0].LastError != "", string(body)
	})
	nr := ready.NotReady[0]
	if ready.Ready || nr.Name != "l" || (nr.State != "FAILED" && nr.State != "PREPARING") || nr.LastErrorAt.IsZero() {
		t.Errorf("readyz: %+v", ready)
	}
	waitFor(t, func() (bool, string) {
		return strings.Contains(logs.String(), "[ERROR] mirrord.agent: cluster refuses mirrord"), "no ERROR line for the refused source"
	})
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "wrong-password-1") {
		t.Error("the SASL password appears in the log")
	}
}

// TestRunListenError guards the message when agent.listen is taken: it
// names the address and what to do, and matches ErrListen.
func TestRunListenError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srcC, dstC := kafkatest.Pair(t)
	src := strings.Replace(agentHCL(srcC, dstC, ""), `"127.0.0.1:0"`, fmt.Sprintf("%q", ln.Addr().String()), 1)
	a := newAgent(t, src, nil, io.Discard, nil)
	err = a.Run(context.Background())
	if !errors.Is(err, ErrListen) || !strings.Contains(err.Error(), ln.Addr().String()) || !strings.Contains(err.Error(), "agent.listen") {
		t.Fatalf("Run: %v", err)
	}
	if err := a.Run(context.Background()); !errors.Is(err, ErrRunning) {
		t.Errorf("second Run: %v", err)
	}
}

// TestNewRefusesUnreadableTLS guards New: a CA file that cannot be read is
// an error at start that names the cluster, not a link that fails later.
func TestNewRefusesUnreadableTLS(t *testing.T) {
	srcC, dstC := kafkatest.Pair(t)
	src := strings.Replace(agentHCL(srcC, dstC, ""), "cluster \"dst\" {", "cluster \"dst\" {\n  tls { ca_file = \"/nonexistent/ca.pem\" }", 1)
	cfg, err := config.Parse("t.hcl", []byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(cfg, Deps{})
	if err == nil || !strings.Contains(err.Error(), `cluster "dst"`) || !strings.Contains(err.Error(), "/nonexistent/ca.pem") {
		t.Fatalf("New: %v", err)
	}
}

// Two agents of different names with the same link (the Kubernetes
// StatefulSet's two replicas): the second stands by for the first, which
// its status names (standing_by, mirrord links); both are ready (/readyz),
// and the first keeps mirroring, unfenced.
func TestStandbyAgentReady(t *testing.T) {
	srcC, dstC := kafkatest.Pair(t)
	srcCl := kafkatest.Client(t, srcC)
	createOrders(t, srcCl, 2)
	ends := produce(t, srcCl, 2, "before", 20)
	named := func(name string) string {
		return strings.Replace(agentHCL(srcC, dstC, ""), "agent {", "agent {\n  name = \""+name+"\"", 1)
	}
	a := start(t, newAgent(t, named("pod-0"), nil, newLogBuffer(t), prometheus.NewRegistry()))
	a.waitCaughtUp(t, ends)
	b := start(t, newAgent(t, named("pod-1"), nil, newLogBuffer(t), prometheus.NewRegistry()))
	waitFor(t, func() (bool, string) {
		st := b.linkStatus(t)
		return st.State == "PREPARING" && st.StandingBy == "pod-0", fmt.Sprintf("state %s, standing by for %q", st.State, st.StandingBy)
	})
	for _, r := range []*running{a, b} {
		var ready Readiness
		callJSON(t, http.MethodGet, r.base+"/readyz", http.StatusOK, &ready)
		if !ready.Ready {
			t.Errorf("readyz: %+v", ready)
		}
	}
	ends = produce(t, srcCl, 2, "after", 20)
	st := a.waitCaughtUp(t, ends)
	if st.State != "MIRRORING" || st.LastError != "" {
		t.Errorf("the holder: %+v", st)
	}
	if st := b.linkStatus(t); st.State != "PREPARING" || st.StandingBy != "pod-0" {
		t.Errorf("the standby: state %s, standing by for %q", st.State, st.StandingBy)
	}
}
