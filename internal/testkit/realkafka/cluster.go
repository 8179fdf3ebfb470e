package realkafka

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// errPortTaken is a node that could not bind a port the launcher picked
// (another process took it between the pick and the bind); Start retries.
var errPortTaken = errors.New("a listener port was taken")

// Cluster is a running cluster of Apache Kafka nodes, each a JVM in its own
// process group. Its methods may be called from several goroutines.
type Cluster struct {
	cfg     Config
	dir     string
	ownDir  bool
	java    string
	jars    *Jars
	runDir  string
	archive string  // the class-data archive, or "" (archive.go)
	nodes   []*node // nodes[i] has node ID i+1
	defName string  // the default listener

	mu     sync.Mutex // guards node.p, keep, closed
	keep   bool
	closed bool
}

type node struct {
	id     int
	dir    string
	log    string            // stdout and stderr of the JVM
	args   []string          // the java command line
	listen map[string]string // listener -> 127.0.0.1:port
	adv    map[string]string // listener -> advertised host:port
	p      *proc             // nil when not started; guarded by Cluster.mu
}

// Start resolves the jars of cfg.Version (once per machine, see Resolve),
// sweeps brokers left behind by dead test processes, formats and starts
// cfg.Nodes nodes, and returns when a Metadata request to every node lists
// every broker. On failure every node it started is stopped again and the
// error names the log to read; the directory stays.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("realkafka: %w", err)
	}
	java, err := Java(ctx)
	if err != nil {
		return nil, err
	}
	jars, err := Resolve(ctx, BrokerSpec(cfg.Version))
	if err != nil {
		return nil, err
	}
	root, err := CacheRoot()
	if err != nil {
		return nil, err
	}
	runDir := filepath.Join(root, "run")
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return nil, fmt.Errorf("realkafka: %w", err)
	}
	if _, err := sweep(runDir); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	archive := classArchive(ctx, java, jars, runDir, cfg.Version)
	for attempt := 1; ; attempt++ {
		c, err := start(ctx, cfg, java, jars, runDir, archive)
		if err == nil {
			return c, nil
		}
		if errors.Is(err, errPortTaken) && attempt < 3 && c != nil {
			_ = c.Close() // nothing worth keeping: try again on other ports
			continue
		}
		return nil, err
	}
}

// start starts cfg's cluster; archive, if not "", is the class-data archive
// every JVM maps its classes from.
func start(ctx context.Context, cfg Config, java string, jars *Jars, runDir, archive string) (*Cluster, error) {
	c := &Cluster{cfg: cfg, java: java, jars: jars, runDir: runDir, archive: archive, defName: cfg.Listeners[0].Name}
	if cfg.Dir == "" {
		d, err := os.MkdirTemp("", "realkafka-")
		if err != nil {
			return nil, fmt.Errorf("realkafka: %w", err)
		}
		c.dir, c.ownDir = d, true
	} else {
		d, err := filepath.Abs(cfg.Dir)
		if err != nil {
			return nil, fmt.Errorf("realkafka: %w", err)
		}
		c.dir = d
	}
	names := []string{Controller, Internal}
	for _, l := range cfg.Listeners {
		names = append(names, l.Name)
	}
	ports, err := freePorts(cfg.Nodes * len(names))
	if err != nil {
		return c, err
	}
	var voters []string
	for i := range cfg.Nodes {
		n := &node{id: i + 1, dir: filepath.Join(c.dir, fmt.Sprintf("node-%d", i+1)), listen: map[string]string{}, adv: map[string]string{}}
		n.log = filepath.Join(n.dir, "server.log")
		for j, name := range names {
			n.listen[name] = fmt.Sprintf("127.0.0.1:%d", ports[i*len(names)+j])
			n.adv[name] = n.listen[name]
			if name != Controller && cfg.Advertise != nil {
				n.adv[name] = cfg.Advertise(n.id, name, n.listen[name])
			}
		}
		voters = append(voters, fmt.Sprintf("%d@%s", n.id, n.listen[Controller]))
		c.nodes = append(c.nodes, n)
	}
	for _, n := range c.nodes {
		if err := c.writeNode(n, strings.Join(voters, ",")); err != nil {
			return c, err
		}
	}
	if err := c.formatAll(ctx); err != nil {
		return c, err
	}
	for _, n := range c.nodes {
		if err := c.launch(n); err != nil {
			c.killAll()
			return c, err
		}
	}
	if err := c.waitReady(ctx, c.allIDs()); err != nil {
		c.killAll()
		return c, err
	}
	return c, nil
}

// freePorts picks n distinct free loopback ports, holding each until all
// are picked.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("realkafka: pick a port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func (c *Cluster) writeNode(n *node, voters string) error {
	data := filepath.Join(n.dir, "data")
	if err := os.RemoveAll(n.dir); err != nil {
		return fmt.Errorf("realkafka: %w", err)
	}
	if err := os.MkdirAll(data, 0o755); err != nil {
		return fmt.Errorf("realkafka: %w", err)
	}
	listen := map[string]int{}
	for name, addr := range n.listen {
		_, p, _ := net.SplitHostPort(addr)
		listen[name], _ = strconv.Atoi(p)
	}
	props, err := c.cfg.nodeProps(n.id, data, voters, listen, n.adv)
	if err != nil {
		return fmt.Errorf("realkafka: node %d: %w", n.id, err)
	}
	propsPath := filepath.Join(n.dir, "node.properties")
	log4j := filepath.Join(n.dir, "log4j2.xml")
	if err := os.WriteFile(propsPath, propsFile(props), 0o644); err != nil {
		return fmt.Errorf("realkafka: %w", err)
	}
	if err := os.WriteFile(log4j, []byte(log4j2XML), 0o644); err != nil {
		return fmt.Errorf("realkafka: %w", err)
	}
	if err := os.WriteFile(filepath.Join(n.dir, "log4j2-tools.xml"), []byte(log4j2ToolsXML), 0o644); err != nil {
		return fmt.Errorf("realkafka: %w", err)
	}
	// The command line of kafka-server-start.sh (kafka-run-class.sh's
	// defaults), with the node directory on it for the sweep to recognise.
	n.args = []string{
		"-Xms" + c.cfg.Heap, "-Xmx" + c.cfg.Heap,
		"-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
		"-XX:+ExplicitGCInvokesConcurrent", "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
		"-Dlog4j2.configurationFile=" + log4j,
		"-Dkafka.logs.dir=" + n.dir,
	}
	if c.cfg.ShortLived {
		n.args = append(n.args, "-XX:TieredStopAtLevel=1")
	}
	n.args = append(n.args, c.sharingArgs()...)
	n.args = append(n.args, c.cfg.JVMArgs...)
	n.args = append(n.args, "-cp", c.jars.Classpath(), "kafka.Kafka", propsPath)
	return nil
}

// formatAll formats every node's log directory, in parallel.
func (c *Cluster) formatAll(ctx context.Context) error {
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Go(func() {
			errs[i] = c.format(ctx, n)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (c *Cluster) format(ctx context.Context, n *node) error {
	out := filepath.Join(n.dir, "format.log")
	// The storage tool runs for seconds: C1 only, and the brokers' archive
	// (same class path) for the classes they share.
	args := append([]string{"-Xmx256m", "-XX:TieredStopAtLevel=1"}, c.sharingArgs()...)
	args = append(args, "-Dlog4j2.configurationFile="+filepath.Join(n.dir, "log4j2-tools.xml"),
		"-cp", c.jars.Classpath(), "kafka.tools.StorageTool", "format",
		"--cluster-id="+c.cfg.ClusterID, "--config="+filepath.Join(n.dir, "node.properties"))
	feats := make([]string, 0, len(c.cfg.Features))
	for f := range c.cfg.Features {
		feats = append(feats, f)
	}
	sort.Strings(feats)
	for _, f := range feats {
		args = append(args, fmt.Sprintf("--feature=%s=%d", f, c.cfg.Features[f]))
	}
	f, err := os.Create(out)
	if err != nil {
		return fmt.Errorf("realkafka: %w", err)
	}
	defer f.Close()
	cmd := exec.CommandContext(ctx, c.java, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("realkafka: format node %d: %w: %s (full output in %s)", n.id, err, errorLine(out), out)
	}
	return nil
}

// sharingArgs are the JVM options that map classes from c's archive.
func (c *Cluster) sharingArgs() []string {
	if c.archive == "" {
		return nil
	}
	return []string{"-XX:SharedArchiveFile=" + c.archive}
}

// launch starts n's JVM. The caller must not hold c.mu.
func (c *Cluster) launch(n *node) error {
	p, err := launch(c.java, n.args, n.log, c.runDir, n.dir, !c.cfg.noPdeathsig)
	if err != nil {
		return fmt.Errorf("realkafka: node %d: %w", n.id, err)
	}
	c.mu.Lock()
	n.p = p
	c.mu.Unlock()
	return nil
}

func (c *Cluster) allIDs() []int {
	ids := make([]int, len(c.nodes))
	for i := range c.nodes {
		ids[i] = i + 1
	}
	return ids
}

// running returns the nodes whose JVM runs.
func (c *Cluster) running() []*node {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*node
	for _, n := range c.nodes {
		if n.p != nil && !n.p.exited() {
			out = append(out, n)
		}
	}
	return out
}

// waitReady returns when the nodes want run and a Metadata request to every
// running node lists each of them.
func (c *Cluster) waitReady(ctx context.Context, want []int) error {
	clients := map[int]*kgo.Client{}
	defer func() {
		for _, cl := range clients {
			cl.Close()
		}
	}()
	var lastErr error
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		c.mu.Lock()
		for _, id := range want {
			n := c.nodes[id-1]
			if n.p == nil {
				c.mu.Unlock()
				return fmt.Errorf("realkafka: node %d is not running", id)
			}
			if n.p.exited() {
				c.mu.Unlock()
				return c.exitError(n, "before it was ready")
			}
		}
		c.mu.Unlock()
		ready := true
		for _, n := range c.running() {
			cl := clients[n.id]
			if cl == nil {
				var err error
				cl, err = kgo.NewClient(kgo.SeedBrokers(n.listen[Internal]), kgo.DialTimeout(2*time.Second))
				if err != nil {
					return fmt.Errorf("realkafka: %w", err)
				}
				clients[n.id] = cl
			}
			ids, err := metadataIDs(ctx, cl)
			if err != nil {
				lastErr = fmt.Errorf("node %d: %w", n.id, err)
				ready = false
				break
			}
			for _, id := range want {
				if !slices.Contains(ids, int32(id)) {
					lastErr = fmt.Errorf("node %d lists brokers %v, not yet %d", n.id, ids, id)
					ready = false
					break
				}
			}
			if !ready {
				break
			}
		}
		if ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("realkafka: nodes %v not ready: %w (last: %v; logs in %s)", want, ctx.Err(), lastErr, c.dir)
		case <-tick.C:
		}
	}
}

// metadataIDs asks the seed broker of cl (one node) which brokers it knows.
func metadataIDs(ctx context.Context, cl *kgo.Client) ([]int32, error) {
	seeds := cl.SeedBrokers()
	if len(seeds) == 0 {
		return nil, errors.New("no seed broker")
	}
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{} // no topics: brokers only
	resp, err := seeds[0].Request(rctx, req)
	if err != nil {
		return nil, err
	}
	var ids []int32
	for _, b := range resp.(*kmsg.MetadataResponse).Brokers {
		ids = append(ids, b.NodeID)
	}
	slices.Sort(ids)
	return ids, nil
}

// exitError describes a node that exited by itself.
func (c *Cluster) exitError(n *node, when string) error {
	<-n.p.done
	line := errorLine(n.log)
	err := fmt.Errorf("realkafka: node %d (Kafka %s) exited %s (%v): %s (log: %s)", n.id, c.cfg.Version, when, n.p.err, line, n.log) //nolint:errorlint // n.p.err is nil for a clean exit: %v prints <nil>, %w would print %!w(<nil>)
	if strings.Contains(line, "Address already in use") || fileContains(n.log, "Address already in use") {
		return fmt.Errorf("%w: %w", errPortTaken, err)
	}
	return err
}

// Brokers returns the broker IDs that a Metadata request to a running node
// lists (the first node that answers), sorted.
func (c *Cluster) Brokers(ctx context.Context) ([]int32, error) {
	var lastErr error = errors.New("no node runs")
	for _, n := range c.running() {
		cl, err := kgo.NewClient(kgo.SeedBrokers(n.listen[Internal]), kgo.DialTimeout(2*time.Second))
		if err != nil {
			return nil, err
		}
		ids, err := metadataIDs(ctx, cl)
		cl.Close()
		if err == nil {
			return ids, nil
		}
		lastErr = err
	}
	return nil, fmt.Errorf("realkafka: metadata: %w", lastErr)
}

func (c *Cluster) node(id int) (*node, error) {
	if id < 1 || id > len(c.nodes) {
		return nil, fmt.Errorf("realkafka: no node %d (nodes are 1..%d)", id, len(c.nodes))
	}
	return c.nodes[id-1], nil
}

// runningProc returns the process of node id, or an error if it does not
// run.
func (c *Cluster) runningProc(id int) (*node, *proc, error) {
	n, err := c.node(id)
	if err != nil {
		return nil, nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, nil, fmt.Errorf("realkafka: cluster closed")
	}
	if n.p == nil || n.p.exited() {
		return nil, nil, fmt.Errorf("realkafka: node %d is not running", id)
	}
	return n, n.p, nil
}

// Kill ends node id at once (SIGKILL to its process group), as a crash or a
// power cut would, and returns when the process is gone.
func (c *Cluster) Kill(id int) error {
	_, p, err := c.runningProc(id)
	if err != nil {
		return err
	}
	p.signal(syscall.SIGKILL)
	<-p.done
	return nil
}

// Stop shuts node id down the controlled way (SIGTERM: the broker moves its
// leaderships away first) and waits for it to exit, for at most the
// configured StopTimeout or until ctx ends; then it kills the node
// (SIGKILL) and says so in its error.
func (c *Cluster) Stop(ctx context.Context, id int) error {
	n, p, err := c.runningProc(id)
	if err != nil {
		return err
	}
	p.signal(syscall.SIGTERM)
	t := time.NewTimer(c.cfg.StopTimeout)
	defer t.Stop()
	var why string
	select {
	case <-p.done:
		return nil
	case <-t.C:
		why = fmt.Sprintf("within %s", c.cfg.StopTimeout)
	case <-ctx.Done():
		why = fmt.Sprintf("before %v", ctx.Err())
	}
	p.signal(syscall.SIGKILL)
	<-p.done
	return fmt.Errorf("realkafka: node %d did not finish its controlled shutdown %s: killed it (SIGKILL); log: %s", id, why, n.log)
}

// Start starts node id again, with its directories, ports and properties,
// and returns when a Metadata request to every running node lists it.
func (c *Cluster) Start(ctx context.Context, id int) error {
	n, err := c.node(id)
	if err != nil {
		return err
	}
	c.mu.Lock()
	switch {
	case c.closed:
		c.mu.Unlock()
		return fmt.Errorf("realkafka: cluster closed")
	case n.p != nil && !n.p.exited():
		c.mu.Unlock()
		return fmt.Errorf("realkafka: node %d is running", id)
	}
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, c.cfg.StartTimeout)
	defer cancel()
	fmt.Fprintf(logAppend(n.log), "\n===== realkafka: node %d started again at %s =====\n", id, time.Now().Format(time.RFC3339Nano))
	if err := c.launch(n); err != nil {
		return err
	}
	return c.waitReady(ctx, []int{id})
}

// Running reports whether node id's JVM runs.
func (c *Cluster) Running(id int) bool {
	n, err := c.node(id)
	if err != nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return n.p != nil && !n.p.exited()
}

// Keep makes Close leave the cluster's directory (properties, data, logs)
// in place.
func (c *Cluster) Keep() {
	c.mu.Lock()
	c.keep = true
	c.mu.Unlock()
}

// Close kills every node (SIGKILL: the cluster's data goes with it, so a
// controlled shutdown would only cost time) and removes the directory if
// Start made it and Keep was not called. It is idempotent.
func (c *Cluster) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	remove := c.ownDir && !c.keep
	c.mu.Unlock()
	c.killAll()
	if remove {
		if err := os.RemoveAll(c.dir); err != nil {
			return fmt.Errorf("realkafka: %w", err)
		}
	}
	return nil
}

func (c *Cluster) killAll() {
	c.mu.Lock()
	var ps []*proc
	for _, n := range c.nodes {
		if n.p != nil {
			ps = append(ps, n.p)
		}
	}
	c.mu.Unlock()
	for _, p := range ps {
		if !p.exited() {
			p.signal(syscall.SIGKILL)
		}
	}
	for _, p := range ps {
		<-p.done
	}
}

// ID is the cluster ID.
func (c *Cluster) ID() string { return c.cfg.ClusterID }

// Version is the Kafka version the nodes run.
func (c *Cluster) Version() string { return c.cfg.Version }

// Nodes is the number of nodes; their IDs are 1..Nodes().
func (c *Cluster) Nodes() int { return len(c.nodes) }

// Dir is the directory that holds node-<id>/ (node.properties, log4j2.xml,
// data/, server.log, format.log) for every node.
func (c *Cluster) Dir() string { return c.dir }

// LogFile is the file node id's JVM writes its output to.
func (c *Cluster) LogFile(id int) string {
	if n, err := c.node(id); err == nil {
		return n.log
	}
	return ""
}

// Addrs are the advertised addresses of the default (first) listener of
// every node: the bootstrap servers for a client.
func (c *Cluster) Addrs() []string { return c.ListenerAddrs(c.defName) }

// ListenerAddrs are the advertised addresses of the named listener
// (a Config listener or Internal) of every node, nil for an unknown name.
func (c *Cluster) ListenerAddrs(listener string) []string {
	var out []string
	for _, n := range c.nodes {
		if a, ok := n.adv[listener]; ok {
			out = append(out, a)
		}
	}
	return out
}

// NodeAddr is the advertised address of node id's default listener.
func (c *Cluster) NodeAddr(id int) string {
	if n, err := c.node(id); err == nil {
		return n.adv[c.defName]
	}
	return ""
}

// ListenAddr is the loopback address node id listens on for listener
// (which differs from the advertised one when Config.Advertise says so).
func (c *Cluster) ListenAddr(id int, listener string) string {
	if n, err := c.node(id); err == nil {
		return n.listen[listener]
	}
	return ""
}

func logAppend(path string) *appendFile { return &appendFile{path} }

// appendFile appends each Write to a file, opening it for that write only
// (the JVM holds the same file open in append mode).
type appendFile struct{ path string }

func (a *appendFile) Write(b []byte) (int, error) {
	f, err := os.OpenFile(a.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return f.Write(b)
}

// errorLine picks the line of a broker log that best says why it stopped:
// the first ERROR, else the first exception, else the last line.
func errorLine(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return "no log"
	}
	defer f.Close()
	var firstErr, firstExc, last string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" {
			continue
		}
		last = l
		if firstErr == "" && strings.Contains(l, "] ERROR ") {
			firstErr = l
		}
		if firstExc == "" && (strings.HasPrefix(l, "Exception in thread") || strings.Contains(l, "Exception: ")) {
			firstExc = l
		}
	}
	switch {
	case firstErr != "":
		return firstErr
	case firstExc != "":
		return firstExc
	}
	return last
}

func fileContains(path, s string) bool {
	b, err := os.ReadFile(path)
	return err == nil && strings.Contains(string(b), s)
}
