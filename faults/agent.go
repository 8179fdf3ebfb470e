package faults

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/seed83556561/mirrord/internal/lockedexec"
	"github.com/seed83556561/mirrord/link"
)

// BuildAgent builds the mirrord binary of the module this package belongs
// to into dir and returns its path.
func BuildAgent(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	bin := filepath.Join(dir, "mirrord")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/mirrord")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/mirrord: %w: %s", err, b)
	}
	return bin, nil
}

// AgentConfig is what the agent mirrors and how it reaches the clusters.
type AgentConfig struct {
	Bin        string   // the mirrord binary (BuildAgent)
	Dir        string   // where the configuration and the log go
	Source     []string // bootstrap servers of each cluster as the agent sees them
	Dest       []string
	Include    string // the link's topics pattern
	StateTopic string
	// ProduceTimeout and SettleDelay are the link's keys (defaults: the
	// product's).
	ProduceTimeout, SettleDelay time.Duration
	// Delivery is the link's delivery mode ("" is the default, preserve).
	Delivery string
	// CheckpointInterval is the link's key (default here: 1s).
	CheckpointInterval time.Duration
	// LinkExtra is more of the link block, as HCL lines.
	LinkExtra string
	// Name is agent.name ("": none). Agents with names that run the same
	// link stand by for each other.
	Name string
}

// LinkName is the one link the agent runs.
const LinkName = "faults"

func (c AgentConfig) hcl(listen string) string {
	list := func(s []string) string { b, _ := json.Marshal(s); return string(b) }
	extra := ""
	if c.ProduceTimeout > 0 {
		extra += fmt.Sprintf("  produce_timeout = %q\n", c.ProduceTimeout)
	}
	if c.SettleDelay > 0 {
		extra += fmt.Sprintf("  settle_delay = %q\n", c.SettleDelay)
	}
	ck := "1s"
	if c.CheckpointInterval > 0 {
		ck = c.CheckpointInterval.String()
	}
	if c.Delivery != "" {
		extra += fmt.Sprintf("  delivery = %q\n", c.Delivery)
	}
	extra += c.LinkExtra
	name := ""
	if c.Name != "" {
		name = fmt.Sprintf("  name             = %q\n", c.Name)
	}
	return fmt.Sprintf(`agent {
  listen           = %q
  log_level        = "info"
  log_format       = "json"
  shutdown_timeout = "20s"
%s}
cluster "src" {
  bootstrap_servers = %s
}
cluster "dst" {
  bootstrap_servers = %s
}
link %q {
  source      = "src"
  destination = "dst"
  topics { include = [%q] }
  state_topic                    = %q
  state_topic_replication_factor = 3
  destination_replication_factor = 3
  checkpoint_interval            = %q
  discovery_interval             = "5s"
%s}
`, listen, name, list(c.Source), list(c.Dest), LinkName, c.Include, c.StateTopic, ck, extra)
}

// Agent is one mirrord run process. Its log (JSON lines) goes to a file
// in the configuration's directory, appended to across restarts.
type Agent struct {
	cfg    AgentConfig
	listen string
	cfgAt  string
	logAt  string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited <-chan struct{}
	starts int
}

// NewAgent writes the agent's configuration; Start runs it.
func NewAgent(cfg AgentConfig) (*Agent, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	listen := l.Addr().String()
	_ = l.Close()
	a := &Agent{cfg: cfg, listen: listen, cfgAt: filepath.Join(cfg.Dir, "mirrord.hcl"), logAt: filepath.Join(cfg.Dir, "mirrord.log")}
	if err := os.WriteFile(a.cfgAt, []byte(cfg.hcl(listen)), 0o600); err != nil {
		return nil, err
	}
	return a, nil
}

// Start runs the agent (again).
func (a *Agent) Start() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cmd != nil {
		return errors.New("agent already running")
	}
	logf, err := os.OpenFile(a.logAt, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(a.cfg.Bin, "run", "--config", a.cfgAt)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// Started from a thread that lives as long as the agent: a plain
	// cmd.Start let a broker restart's ending launcher thread SIGKILL the
	// agent through Pdeathsig (see lockedexec).
	p, err := lockedexec.Start(cmd, lockedexec.Hooks{Exited: func(error) { _ = logf.Close() }})
	if err != nil {
		_ = logf.Close()
		return fmt.Errorf("start mirrord: %w", err)
	}
	a.cmd, a.exited = cmd, p.Done() // p's waiter is owned by the Agent: Kill and Stop wait for it
	a.starts++
	return nil
}

// Kill SIGKILLs the agent and waits for it to exit.
func (a *Agent) Kill() { a.end(syscall.SIGKILL) }

// Stop asks the agent to stop (SIGTERM: drain, final checkpoint) and waits.
func (a *Agent) Stop() { a.end(syscall.SIGTERM) }

func (a *Agent) end(sig syscall.Signal) {
	a.mu.Lock()
	cmd, exited := a.cmd, a.exited
	a.cmd = nil
	a.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}
}

// Starts counts how often the agent was started.
func (a *Agent) Starts() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.starts
}

// LogPath is the agent's log file.
func (a *Agent) LogPath() string { return a.logAt }

var httpClient = &http.Client{Timeout: 2 * time.Second}

// Status is the link's status from the running agent.
func (a *Agent) Status(ctx context.Context) (link.Status, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.listen+"/v1/links/"+LinkName, nil)
	if err != nil {
		return link.Status{}, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return link.Status{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return link.Status{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return link.Status{}, fmt.Errorf("GET /v1/links/%s: %s: %s", LinkName, resp.Status, body)
	}
	var st link.Status
	if err := json.Unmarshal(body, &st); err != nil {
		return link.Status{}, fmt.Errorf("GET /v1/links/%s: %w", LinkName, err)
	}
	return st, nil
}

// Statuses are GET /v1/links from the running agent: with slots, one
// status per slot it runs.
func (a *Agent) Statuses(ctx context.Context) ([]link.Status, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.listen+"/v1/links", nil)
	if err != nil {
		return nil, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /v1/links: %s: %s", resp.Status, body)
	}
	var sts []link.Status
	if err := json.Unmarshal(body, &sts); err != nil {
		return nil, fmt.Errorf("GET /v1/links: %w", err)
	}
	return sts, nil
}

// WaitMirroring waits until the link is MIRRORING.
func (a *Agent) WaitMirroring(ctx context.Context, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var last string
	for {
		st, err := a.Status(ctx)
		switch {
		case err != nil:
			last = err.Error()
		case st.State == link.Mirroring:
			return nil
		default:
			last = fmt.Sprintf("state %s, last error %q", st.State, st.LastError)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the link did not reach MIRRORING within %s: %s", within, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// LogLines returns the agent's log lines whose message starts with msg.
func (a *Agent) LogLines(msg string) ([]map[string]any, error) {
	var out []map[string]any
	err := a.eachLogLine(func(l map[string]any) {
		if m, _ := l["@message"].(string); strings.HasPrefix(m, msg) {
			out = append(out, l)
		}
	})
	return out, err
}

// eachLogLine calls fn with each JSON line of the agent's log, decoded.
func (a *Agent) eachLogLine(fn func(map[string]any)) error {
	f, err := os.Open(a.logAt)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 4<<20)
	for sc.Scan() {
		var l map[string]any
		d := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		d.UseNumber() // producer IDs keep their digits
		if d.Decode(&l) == nil {
			fn(l)
		}
	}
	return sc.Err()
}

// LogSince returns the agent's log lines stamped at or after from, each
// as "time level module: message key=value ..." (time of day in UTC,
// with milliseconds), for a report of what an agent did in a takeover.
func (a *Agent) LogSince(from time.Time) ([]string, error) {
	var out []string
	err := a.eachLogLine(func(l map[string]any) {
		ts, _ := l["@timestamp"].(string)
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil || at.Before(from) {
			return
		}
		var line strings.Builder
		fmt.Fprintf(&line, "%s %v %v: %v", at.UTC().Format("15:04:05.000"), l["@level"], l["@module"], l["@message"])
		keys := make([]string, 0, len(l))
		for k := range l {
			if !strings.HasPrefix(k, "@") {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(&line, " %s=%v", k, l[k])
		}
		out = append(out, line.String())
	})
	return out, err
}
