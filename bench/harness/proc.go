package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/internal/lockedexec"
)

// Binaries are the programs the benchmark runs, each in its own process.
type Binaries struct {
	Mirrord     string // ./cmd/mirrord
	KfakeServer string // ./bench/cmd/kfakeserver
	PeerMirror  string // ./bench/cmd/peermirror
}

// ModuleDir is the root of the Go module that holds the working directory.
func ModuleDir(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, goTool(), "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside a Go module: run the benchmark from the mirrord repository")
	}
	return filepath.Dir(mod), nil
}

// goTool is the go command on PATH (go test puts its own first).
func goTool() string { return "go" }

// Build compiles the three programs of the benchmark into outDir.
func Build(ctx context.Context, moduleDir, outDir string) (Binaries, error) {
	b := Binaries{
		Mirrord:     filepath.Join(outDir, "mirrord"),
		KfakeServer: filepath.Join(outDir, "kfakeserver"),
		PeerMirror:  filepath.Join(outDir, "peermirror"),
	}
	for out, pkg := range map[string]string{
		b.Mirrord:     "./cmd/mirrord",
		b.KfakeServer: "./bench/cmd/kfakeserver",
		b.PeerMirror:  "./bench/cmd/peermirror",
	} {
		if err := BuildPackage(ctx, moduleDir, out, pkg); err != nil {
			return b, err
		}
	}
	return b, nil
}

// BuildPackage runs go build -o out pkg in moduleDir.
func BuildPackage(ctx context.Context, moduleDir, out, pkg string) error {
	cmd := exec.CommandContext(ctx, goTool(), "build", "-o", out, pkg)
	cmd.Dir = moduleDir
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, msg)
	}
	return nil
}

// process is a child process whose end the harness waits for.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string        // file with its stderr (and stdout, unless read)
	done chan struct{} // closed when Wait returned and the sampler ended
	err  error         // of Wait
	peak atomic.Int64  // highest VmHWM seen, bytes
}

// rssInterval is how often a child's VmHWM is read. VmHWM only grows, so
// what the sampling misses is the growth in the last interval before exit.
const rssInterval = 10 * time.Millisecond

// start runs bin with args; its stderr goes to the file logPath, and so
// does its stdout unless stdout is non-nil. With sample, its peak RSS is
// sampled while it runs.
func start(name, bin string, args []string, logPath string, stdout io.Writer, sample bool) (*process, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("%s: log file: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	// A child dies with the harness (SIGKILL when the thread that started
	// it ends: in practice when the harness process does) rather than
	// outliving a killed benchmark.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = logf
	cmd.Stdout = logf
	if stdout != nil {
		cmd.Stdout = stdout
	}
	p := &process{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	// Started from a thread that lives as long as the child (lockedexec:
	// Pdeathsig fires when the forking thread ends, and the brokers'
	// launchers end theirs). The waiter ends when the process does, after
	// the sampler; whoever stops the process waits for both through done.
	sampled := make(chan struct{})
	lp, err := lockedexec.Start(cmd, lockedexec.Hooks{Exited: func(err error) { p.err = err }})
	if err != nil {
		_ = logf.Close() // the error to report is Start's
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	exited := lp.Done()
	go func() {
		defer close(sampled)
		if !sample {
			<-exited
			return
		}
		t := time.NewTicker(rssInterval)
		defer t.Stop()
		for {
			if v := peakRSS(cmd.Process.Pid); v > p.peak.Load() {
				p.peak.Store(v)
			}
			select {
			case <-exited:
				return
			case <-t.C:
			}
		}
	}()
	go func() {
		<-exited
		<-sampled
		_ = logf.Close() // the child has exited; nothing more is written to it
		close(p.done)
	}()
	return p, nil
}

// peakRSS is the highest resident set of the process, as far as sampled.
func (p *process) peakRSS() int64 { return p.peak.Load() }

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and waits up to timeout for the process to exit; then
// it kills it. It returns the process's state and an error if the process
// had to be killed or exited with a failure.
func (p *process) stop(timeout time.Duration) (*os.ProcessState, error) {
	return p.stopAccepting(timeout, nil)
}

// stopAccepting is stop for a process whose clean stop may end in an error
// from Wait that clean accepts (a JVM exits with 143 after SIGTERM); clean
// may be nil.
func (p *process) stopAccepting(timeout time.Duration, clean func(error) bool) (*os.ProcessState, error) {
	if !p.exited() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.done
		return p.cmd.ProcessState, fmt.Errorf("%s did not stop within %s of SIGTERM and was killed; log %s:\n%s", p.name, timeout, p.log, tail(p.log))
	}
	if p.err != nil && (clean == nil || !clean(p.err)) {
		return p.cmd.ProcessState, fmt.Errorf("%s: %w; log %s:\n%s", p.name, p.err, p.log, tail(p.log))
	}
	return p.cmd.ProcessState, nil
}

// tail is the end of a log file, for error messages.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	const tail = 4000
	if len(b) > tail {
		b = b[len(b)-tail:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}

// Cluster is a source or destination cluster of the benchmark in its own
// process: a kfake cluster (StartCluster) or a one-node Apache Kafka cluster
// (StartKafka).
type Cluster struct {
	Name  string
	ID    string
	Addrs []string
	proc  *process // kfake
	kafka *kafkaCluster
}

// firstLine hands the first line written to it to a channel and drops the
// rest.
type firstLine struct {
	buf  []byte
	sent bool
	ch   chan string // buffered, one line
}

func (w *firstLine) Write(b []byte) (int, error) {
	if !w.sent {
		w.buf = append(w.buf, b...)
		if i := bytes.IndexByte(w.buf, '\n'); i >= 0 {
			w.ch <- string(w.buf[:i])
			w.sent, w.buf = true, nil
		}
	}
	return len(b), nil
}

// StartCluster starts bin (kfakeserver) with the cluster ID id, brokers
// brokers (0: one), its log files under dataDir, and its stderr in
// logPath, and waits until it listens.
func StartCluster(ctx context.Context, bin, name, id string, brokers int, dataDir, logPath string) (*Cluster, error) {
	w := &firstLine{ch: make(chan string, 1)}
	p, err := start("cluster "+name, bin, []string{"-cluster-id", id, "-brokers", fmt.Sprint(max(brokers, 1)), "-data-dir", dataDir}, logPath, w, false)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Name: name, ID: id, proc: p}
	fail := func(format string, args ...any) (*Cluster, error) {
		_, _ = p.stop(10 * time.Second)
		return nil, fmt.Errorf("cluster %s: "+format+"; log %s:\n%s", append([]any{name}, append(args, logPath, tail(logPath))...)...)
	}
	select {
	case line := <-w.ch:
		rest, found := strings.CutPrefix(line, "listening ")
		if !found || rest == "" {
			return fail("kfakeserver printed %q instead of its addresses", line)
		}
		c.Addrs = strings.Split(rest, ",")
	case <-p.done:
		return fail("kfakeserver exited before it listened: %v", p.err)
	case <-ctx.Done():
		return fail("waiting for it to listen: %v", ctx.Err())
	}
	return c, nil
}

// Opts are kgo options that reach the cluster.
func (c *Cluster) Opts() []kgo.Opt { return []kgo.Opt{kgo.SeedBrokers(c.Addrs...)} }

// PollClient is a client for watching the cluster: its metadata may be
// refreshed as often as the harness polls. With kgo's default minimum age
// of 5s, a poll that runs just before a mirror creates its destination
// topic caches the topic as unknown, and the run seems to take 5s longer.
func (c *Cluster) PollClient() (*kgo.Client, error) {
	cl, err := kgo.NewClient(append(c.Opts(), kgo.MetadataMinAge(DefaultPollInterval))...)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: client: %w", c.Name, err)
	}
	return cl, nil
}

// CPU is the cluster process's CPU time so far (user and system), or 0
// off Linux.
func (c *Cluster) CPU() time.Duration {
	if c.kafka != nil {
		return cpuTime(c.kafka.pid)
	}
	return cpuTime(c.proc.cmd.Process.Pid)
}

// Stop ends the cluster's process. It may be called again; later calls
// report nothing new.
func (c *Cluster) Stop() error {
	if c.kafka != nil {
		return c.kafka.c.Close()
	}
	_, err := c.proc.stop(2 * time.Minute)
	return err
}
