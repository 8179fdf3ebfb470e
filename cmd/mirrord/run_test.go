package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/internal/testkit/mirrortest"
	"github.com/seed83556561/mirrord/statestore"
)

// asMain makes the test binary act as the mirrord binary: the signal tests
// run it as a subprocess with this variable set and mirrord's arguments.
const asMain = "GO_WANT_MIRRORD_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asMain) == "1" {
		os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(mirrortest.Main(m))
}

// waitLimit is the generous deadline of every wait; it only keeps a broken
// test from hanging.
const waitLimit = 90 * time.Second

// linkHCL is a configuration with clusters src and dst and a link "l"
// that mirrors the topics orders and events, with short intervals.
func linkHCL(src, dst *kfake.Cluster, agentExtra string) string {
	list := func(s []string) string { b, _ := json.Marshal(s); return string(b) }
	return fmt.Sprintf(`
agent {
  listen = "127.0.0.1:0"
  %s
}
cluster "src" {
  bootstrap_servers = %s
}
cluster "dst" {
  bootstrap_servers = %s
}
link "l" {
  source      = "src"
  destination = "dst"
  topics { include = ["orders", "events"] }
  checkpoint_interval            = "200ms"
  session_timeout                = "3s"
  settle_delay                   = "200ms"
  discovery_interval             = "300ms"
  destination_replication_factor = 1
}
`, agentExtra, list(src.ListenAddrs()), list(dst.ListenAddrs()))
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// produceTo writes n records to each of the topic's partitions and returns
// the topic's end offsets.
func produceTo(t *testing.T, cl *kgo.Client, topic string, partitions int32, round string, n int) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	var recs []*kgo.Record
	for p := range partitions {
		for i := range n {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p,
				Key: fmt.Appendf(nil, "%s-%d-%d", round, p, i), Value: fmt.Appendf(nil, "%s value %d %d", round, p, i)})
		}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
	return endOffsets(t, cl, topic)
}

func endOffsets(t *testing.T, cl *kgo.Client, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

func manualProducer(t *testing.T, c *kfake.Cluster) *kgo.Client {
	return kafkatest.Client(t, c, kgo.RecordPartitioner(kgo.ManualPartitioner()))
}

func createTopics(t *testing.T, cl *kgo.Client, partitions int32, topics ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopics(ctx, partitions, 1, nil, topics...); err != nil {
		t.Fatal(err)
	}
}

// stateOf replays the destination's state topic.
func stateOf(t *testing.T, dst *kfake.Cluster) *statestore.View {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	view, err := statestore.ReadView(ctx, statestore.DefaultTopic, []kgo.Opt{kgo.SeedBrokers(dst.ListenAddrs()...)})
	if err != nil {
		t.Fatal(err)
	}
	return view
}

// mirrordProcess is the test binary running `mirrord run` with JSON logs.
type mirrordProcess struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	lines  []map[string]any // parsed log lines
	text   bytes.Buffer     // everything it wrote to stderr
	read   sync.WaitGroup   // the stderr reader
	exited chan struct{}
	code   int
}

func startMirrord(t *testing.T, args ...string) *mirrordProcess {
	t.Helper()
	return startMirrordEnv(t, nil, args...)
}

// startMirrordEnv is startMirrord with more environment variables, which
// only the process gets.
func startMirrordEnv(t *testing.T, env []string, args ...string) *mirrordProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), asMain+"=1"), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &mirrordProcess{cmd: cmd, exited: make(chan struct{})}
	p.read.Add(1)
	go p.readLog(stderr)
	go func() {
		p.read.Wait() // Wait closes the pipe: read it to the end first
		err := cmd.Wait()
		p.code = cmd.ProcessState.ExitCode()
		if err != nil && p.code < 0 {
			p.code = -1
		}
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("mirrord run stderr:\n%s", p.stderr())
		}
	})
	return p
}

func (p *mirrordProcess) readLog(r io.Reader) {
	defer p.read.Done()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line map[string]any
		_ = json.Unmarshal(sc.Bytes(), &line)
		p.mu.Lock()
		p.text.Write(sc.Bytes())
		p.text.WriteByte('\n')
		if line != nil {
			p.lines = append(p.lines, line)
		}
		p.mu.Unlock()
	}
}

func (p *mirrordProcess) stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.text.String()
}

// waitLog waits for a log line whose message starts with msg and that
// every predicate given accepts.
func (p *mirrordProcess) waitLog(t *testing.T, msg string, where ...func(map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	accept := func(l map[string]any) bool {
		for _, w := range where {
			if !w(l) {
				return false
			}
		}
		return true
	}
	for time.Now().Before(deadline) {
		p.mu.Lock()
		for _, l := range p.lines {
			if m, _ := l["@message"].(string); strings.HasPrefix(m, msg) && accept(l) {
				p.mu.Unlock()
				return l
			}
		}
		p.mu.Unlock()
		select {
		case <-p.exited:
			t.Fatalf("mirrord exited with %d before logging %q", p.code, msg)
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("mirrord did not log %q", msg)
	return nil
}

func (p *mirrordProcess) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v: %v", sig, err)
	}
}

func (p *mirrordProcess) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.exited:
		return p.code
	case <-time.After(waitLimit):
		t.Fatal("mirrord did not exit")
		return 0
	}
}

// waitMirroring polls GET /v1/links on addr until link l mirrors every
// partition of the topics up to the given end offsets.
func waitMirroring(t *testing.T, addr string, ends map[string]map[int32]int64) {
	t.Helper()
	var want int
	for _, e := range ends {
		want += len(e)
	}
	deadline := time.Now().Add(waitLimit)
	var last string
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + addr + "/v1/links")
		if err != nil {
			t.Fatal(err)
		}
		var links []struct {
			State      string `json:"state"`
			Partitions []struct {
				SourceTopic      string `json:"source_topic"`
				Partition        int32  `json:"partition"`
				SourceNextOffset int64  `json:"source_next_offset"`
			} `json:"partitions"`
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err := json.Unmarshal(body, &links); err != nil || len(links) != 1 {
			t.Fatalf("GET /v1/links: %v %s", err, body)
		}
		last = string(body)
		done := links[0].State == "MIRRORING" && len(links[0].Partitions) == want
		for _, p := range links[0].Partitions {
			done = done && p.SourceNextOffset == ends[p.SourceTopic][p.Partition]
		}
		if done {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the link does not catch up; last status %s", last)
}

// TestRunSignals runs `mirrord run` as a process: SIGTERM stops it with
// exit 0 after the final checkpoint (the state topic says STOPPED at the
// source's end offsets); in a second run whose final checkpoint cannot
// complete (the destination holds every EndTxn), a second signal ends the
// process at once with exit 130.
func TestRunSignals(t *testing.T) {
	srcC, dstC := kafkatest.Pair(t)
	var hold atomic.Bool
	release := make(chan struct{})
	t.Cleanup(func() { close(release) }) // before the clusters close
	dstC.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
		if hold.Load() {
			dstC.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	srcCl := manualProducer(t, srcC)
	createTopics(t, srcCl, 2, "orders", "events")
	ends := map[string]map[int32]int64{
		"orders": produceTo(t, srcCl, "orders", 2, "a", 20),
		"events": produceTo(t, srcCl, "events", 2, "a", 10),
	}
	cfgPath := writeFile(t, "mirrord.hcl", linkHCL(srcC, dstC, `log_format = "json"
  shutdown_timeout = "30s"`))

	// SIGTERM: a graceful stop.
	p := startMirrord(t, "run", "--config", cfgPath)
	addr, _ := p.waitLog(t, "http listening")["addr"].(string)
	waitMirroring(t, addr, ends)
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t); code != exitOK {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}
	for _, msg := range []string{"signal received: stopping gracefully", "final checkpoint committed", "stopped"} {
		if !strings.Contains(p.stderr(), `"@message":"`+msg) {
			t.Errorf("no log line %q", msg)
		}
	}
	view := stateOf(t, dstC)
	if lv := view.Links["l"]; lv.State != statestore.Stopped {
		t.Errorf("state topic: link l is %s after SIGTERM, want STOPPED", lv.State.String())
	}
	var checkpoints int
	for k, ck := range view.Checkpoints {
		if k.LinkName != "l" {
			continue
		}
		checkpoints++
		if want := ends[ck.SourceTopic][ck.SourcePartition]; ck.SourceNextOffset != want || ck.DestNextOffset != want {
			t.Errorf("final checkpoint of %s[%d]: source %d, destination %d, want both %d", ck.SourceTopic, ck.SourcePartition, ck.SourceNextOffset, ck.DestNextOffset, want)
		}
	}
	if checkpoints != 4 {
		t.Errorf("%d checkpoints of link l, want 4", checkpoints)
	}

	// A second signal while the stop waits for the destination.
	p = startMirrord(t, "run", "--config", cfgPath)
	addr, _ = p.waitLog(t, "http listening")["addr"].(string)
	waitMirroring(t, addr, ends)
	hold.Store(true)
	p.signal(t, syscall.SIGTERM)
	p.waitLog(t, "stopping: links drain")
	p.signal(t, os.Interrupt)
	if code := p.wait(t); code != exitSecondSignal {
		t.Fatalf("exit code %d after a second signal, want %d", code, exitSecondSignal)
	}
	if !strings.Contains(p.stderr(), `"@message":"second signal: exiting without waiting for the final checkpoints`) {
		t.Error("the second signal is not logged")
	}
	if strings.Contains(p.stderr(), "final checkpoint committed") {
		t.Error("the final checkpoint was committed: the stop was not held, so the test did not show the second signal cutting it short")
	}
}

// TestRunErrors guards run's refusals: usage (exit 2), a configuration
// with problems (exit 2, each problem on its line), and an address that
// cannot be bound (exit 1, naming it).
func TestRunErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	busy := writeFile(t, "busy.hcl", fmt.Sprintf(`agent { listen = %q }
cluster "a" { bootstrap_servers = ["127.0.0.1:1"] }
cluster "b" { bootstrap_servers = ["127.0.0.1:2"] }
link "l" {
  source = "a"
  destination = "b"
  topics { include = [".*"] }
}
`, ln.Addr().String()))
	noCA := writeFile(t, "noca.hcl", `cluster "a" {
  bootstrap_servers = ["127.0.0.1:1"]
  tls { ca_file = "/nonexistent/ca.pem" }
}
cluster "b" { bootstrap_servers = ["127.0.0.1:2"] }
link "l" {
  source = "a"
  destination = "b"
  topics { include = [".*"] }
}
`)
	bad := writeFile(t, "bad.hcl", "agent {\n  log_level = \"loud\"\n}\ncluster \"a\" {\n}\n")
	exposed := writeFile(t, "exposed.hcl", `agent {
  listen = "0.0.0.0:9644"
}
cluster "a" { bootstrap_servers = ["127.0.0.1:1"] }
cluster "b" { bootstrap_servers = ["127.0.0.1:2"] }
link "l" {
  source = "a"
  destination = "b"
  topics { include = [".*"] }
}
`)
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr []string // lines that must appear
	}{
		{"help", []string{"run", "-h"}, exitOK, []string{"Usage: mirrord run [flags]", "-config"}},
		{"no config", []string{"run"}, exitUsage, []string{"mirrord run: need --config FILE and no arguments"}},
		{"missing file", []string{"run", "--config", filepath.Join(t.TempDir(), "none.hcl")}, exitUsage, []string{"no such file or directory"}},
		{"problems", []string{"run", "--config", bad}, exitUsage, []string{
			"mirrord run: " + bad + " has 3 problems:",
			bad + `:2:15: agent.log_level: "loud" is not allowed (use trace, debug, info, warn or error)`,
			bad + `:4:1: cluster.a.bootstrap_servers: required (list the brokers as host:port, e.g. ["kafka1:9092", "kafka2:9092"])`,
			bad + `:1:1: link: at least one link block is required (add link "name" { source = ..., destination = ..., topics { include = [...] } })`,
		}},
		{"a listener other hosts reach without a token", []string{"run", "--config", exposed}, exitUsage, []string{
			"mirrord run: " + exposed + " has 1 problem:",
			exposed + `:2:12: agent.admin.token_env: required when agent.listen ("0.0.0.0:9644") is not a loopback address: without it, anyone who can reach the port can pause and resume links ` +
				`(set agent.admin.token_env to the name of an environment variable that holds the admin token, or agent.admin.token_file to a file that holds it; ` +
				`or listen on 127.0.0.1; or require client certificates with agent.admin.client_ca_file; agent.admin.insecure_no_auth = true accepts it without authentication)`,
		}},
		{"unreadable CA file", []string{"run", "--config", noCA}, exitUsage, []string{`mirrord run: cluster "a": tls failed: read tls.ca_file: open /nonexistent/ca.pem: no such file or directory`}},
		{"address in use", []string{"run", "--config", busy}, exitError, []string{ln.Addr().String(), "agent.listen", "cannot listen"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := dispatch(tc.args, &out, &errb)
			if code != tc.code {
				t.Errorf("exit code %d, want %d; stderr:\n%s", code, tc.code, errb.String())
			}
			for _, want := range tc.stderr {
				if !strings.Contains(errb.String(), want) {
					t.Errorf("stderr lacks %q:\n%s", want, errb.String())
				}
			}
		})
	}
}
