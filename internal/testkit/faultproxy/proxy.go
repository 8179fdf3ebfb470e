package faultproxy

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const (
	// MaxFrameBytes bounds one frame in either direction. It is above what
	// a broker accepts by default (socket.request.max.bytes, 100 MiB) and
	// below what the first bytes of a TLS ClientHello read as a size.
	MaxFrameBytes = 128 << 20

	// maxPending is how many requests of one connection may be forwarded
	// and not yet answered.
	maxPending = 8

	dialTimeout = 10 * time.Second
)

// Proxy forwards the connections of Kafka clients to the brokers of one
// cluster, one listener per broker. Its methods are safe for concurrent use.
type Proxy struct {
	t      testing.TB
	ctx    context.Context // ends at Close: dials
	cancel context.CancelFunc
	nodes  map[int32]*node // fixed at Start
	ids    []int32         // sorted node IDs
	icpt   atomic.Pointer[Interceptor]
	wg     sync.WaitGroup // every goroutine

	mu      sync.Mutex
	names   map[[16]byte]string // topic names by ID, from Metadata responses
	unknown map[int32]bool      // node IDs already logged as not proxied
	closed  bool
}

// node is one broker and its listener.
type node struct {
	id       int32
	upstream string
	ln       *net.TCPListener
	addr     string
	host     string
	port     int32
	refuse   atomic.Bool
	// dialFails counts failed dials since the last one that worked: a
	// broker that is down is logged once, not once per client retry.
	dialFails atomic.Int64

	mu       sync.Mutex
	conns    map[*conn]struct{}
	stall    chan struct{} // non-nil while stalled; Resume closes it
	cut      bool          // the stall is a Cut
	closed   bool
	requests map[int16]int64
	accepted int64
}

// Start opens a listener on a free 127.0.0.1 port for each broker (node ID
// to upstream host:port) and forwards connections until the test ends, when
// t.Cleanup closes the proxy. A listener that cannot be opened fails t.
func Start(t testing.TB, brokers map[int32]string) *Proxy {
	t.Helper()
	if len(brokers) == 0 {
		t.Fatal("faultproxy: no brokers")
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		t:       t,
		ctx:     ctx,
		cancel:  cancel,
		nodes:   make(map[int32]*node, len(brokers)),
		names:   map[[16]byte]string{},
		unknown: map[int32]bool{},
	}
	t.Cleanup(p.Close)
	for id, up := range brokers {
		ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatalf("faultproxy: listen for node %d: %v", id, err)
		}
		a := ln.Addr().(*net.TCPAddr)
		p.nodes[id] = &node{
			id:       id,
			upstream: up,
			ln:       ln,
			addr:     a.String(),
			host:     a.IP.String(),
			port:     int32(a.Port),
			conns:    map[*conn]struct{}{},
			requests: map[int16]int64{},
		}
		p.ids = append(p.ids, id)
	}
	slices.Sort(p.ids)
	for _, n := range p.nodes {
		p.wg.Go(func() { p.accept(n) })
	}
	return p
}

// Addrs returns the proxy's addresses in node ID order: seeds for a client.
func (p *Proxy) Addrs() []string {
	out := make([]string, len(p.ids))
	for i, id := range p.ids {
		out[i] = p.nodes[id].addr
	}
	return out
}

// Addr returns the proxy's address for node ("" and a test error for a
// node the proxy does not have).
func (p *Proxy) Addr(node int32) string {
	n := p.node("Addr", node)
	if n == nil {
		return ""
	}
	return n.addr
}

// Nodes returns the node IDs the proxy forwards, in order.
func (p *Proxy) Nodes() []int32 { return slices.Clone(p.ids) }

// Intercept makes fn see every request and response from now on, replacing
// the interceptor before; nil removes it. See Interceptor.
func (p *Proxy) Intercept(fn Interceptor) {
	if fn == nil {
		p.icpt.Store(nil)
		return
	}
	p.icpt.Store(&fn)
}

// Stall stops forwarding in both directions on node's connections, current
// and new, until Resume. Bytes wait in the proxy (a few requests read
// ahead) and in the sockets; nothing is lost.
func (p *Proxy) Stall(node int32) {
	n := p.node("Stall", node)
	if n == nil {
		return
	}
	n.mu.Lock()
	if n.stall == nil {
		n.stall = make(chan struct{})
	}
	n.mu.Unlock()
}

// Cut stalls node as a network partition would, until Resume: nothing is
// forwarded in either direction, as with Stall, except that the requests
// a client connection sent and the proxy holds are dropped when that client
// resets the connection (an RST: a close with SO_LINGER 0) during the cut.
// A client's kernel drops, at such a close, what the broker has not
// acknowledged, and through a partition the broker acknowledged nothing.
// After a FIN (a plain close) the held requests go on at Resume, as the
// kernel would retransmit them once the partition heals. Stall is the
// other model: a middlebox that took the bytes and forwards them later
// whatever the client does.
func (p *Proxy) Cut(node int32) {
	n := p.node("Cut", node)
	if n == nil {
		return
	}
	n.mu.Lock()
	if n.stall == nil {
		n.stall = make(chan struct{})
	}
	n.cut = true
	n.mu.Unlock()
}

// Resume ends a Stall or Cut of node; the waiting frames go on in order.
func (p *Proxy) Resume(node int32) {
	n := p.node("Resume", node)
	if n == nil {
		return
	}
	n.mu.Lock()
	if n.stall != nil {
		close(n.stall)
		n.stall = nil
	}
	n.cut = false
	n.mu.Unlock()
}

// Drop closes every current connection of node, client and broker side,
// with a FIN. Frames held by a stall or a delay are lost.
func (p *Proxy) Drop(node int32) { p.closeAll("Drop", node, false) }

// Reset closes every current connection of node with an RST (SO_LINGER 0).
func (p *Proxy) Reset(node int32) { p.closeAll("Reset", node, true) }

// Refuse sets whether node's listener closes every new connection as soon
// as it accepts it (while on is true). Current connections are left alone.
func (p *Proxy) Refuse(node int32, on bool) {
	if n := p.node("Refuse", node); n != nil {
		n.refuse.Store(on)
	}
}

// Requests returns how many requests with API key the clients sent to node
// through the proxy, counted as the proxy reads them (before the
// Interceptor, so a dropped request counts).
func (p *Proxy) Requests(node int32, key int16) int64 {
	n := p.node("Requests", node)
	if n == nil {
		return 0
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.requests[key]
}

// Connections returns how many connections node's listener accepted,
// refused ones included.
func (p *Proxy) Connections(node int32) int64 {
	n := p.node("Connections", node)
	if n == nil {
		return 0
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.accepted
}

// Open returns how many of node's connections are open: accepted, and
// not yet closed by either side or a fault.
func (p *Proxy) Open(node int32) int {
	n := p.node("Open", node)
	if n == nil {
		return 0
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.conns)
}

// Close closes every listener and connection and waits for every goroutine
// of the proxy. It is idempotent; t.Cleanup calls it.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wg.Wait()
		return
	}
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	for _, n := range p.nodes {
		n.mu.Lock()
		n.closed = true
		conns := make([]*conn, 0, len(n.conns))
		for c := range n.conns {
			conns = append(conns, c)
		}
		n.mu.Unlock()
		_ = n.ln.Close()
		for _, c := range conns {
			c.close(false)
		}
	}
	p.wg.Wait()
}

func (p *Proxy) node(op string, id int32) *node {
	n := p.nodes[id]
	if n == nil {
		p.t.Errorf("faultproxy: %s(%d): the proxy has no node %d (it has %v)", op, id, id, p.ids)
	}
	return n
}

func (p *Proxy) closeAll(op string, id int32, rst bool) {
	n := p.node(op, id)
	if n == nil {
		return
	}
	n.mu.Lock()
	conns := make([]*conn, 0, len(n.conns))
	for c := range n.conns {
		conns = append(conns, c)
	}
	n.mu.Unlock()
	for _, c := range conns {
		c.close(rst)
	}
}

// accept runs node's listener until Close.
func (p *Proxy) accept(n *node) {
	for {
		tc, err := n.ln.AcceptTCP()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				p.t.Errorf("faultproxy: node %d: accept: %v", n.id, err)
			}
			return
		}
		c := &conn{n: n, client: tc, done: make(chan struct{}), pending: make(chan pending, maxPending)}
		n.mu.Lock()
		n.accepted++
		closed := n.closed
		if !closed && !n.refuse.Load() {
			n.conns[c] = struct{}{}
			n.mu.Unlock()
			p.wg.Go(func() { p.serve(c) })
			continue
		}
		n.mu.Unlock()
		_ = tc.Close()
		if closed {
			return
		}
	}
}

// serve dials the broker for c and forwards until either side ends or a
// fault closes c.
func (p *Proxy) serve(c *conn) {
	defer c.close(false)
	d := net.Dialer{Timeout: dialTimeout}
	u, err := d.DialContext(p.ctx, "tcp", c.n.upstream)
	if err != nil {
		if p.ctx.Err() == nil && c.n.dialFails.Add(1) == 1 {
			p.t.Logf("faultproxy: node %d: dial %s: %v (counted, not logged, until a dial works)", c.n.id, c.n.upstream, err)
		}
		return
	}
	if fails := c.n.dialFails.Swap(0); fails > 0 {
		p.t.Logf("faultproxy: node %d: dial %s works again after %d failed dials", c.n.id, c.n.upstream, fails)
	}
	if !c.setUpstream(u.(*net.TCPConn)) {
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		defer c.close(false)
		p.forwardResponses(c)
	})
	p.forwardRequests(c)
	c.close(false)
	wg.Wait()
}

// unmapped logs once that node id is not proxied.
func (p *Proxy) unmapped(id int32, where string) {
	p.mu.Lock()
	seen := p.unknown[id]
	p.unknown[id] = true
	p.mu.Unlock()
	if !seen {
		p.t.Logf("faultproxy: %s names node %d, which the proxy has no listener for: left unchanged, clients may reach it directly", where, id)
	}
}

func (p *Proxy) learnTopic(id [16]byte, name string) {
	if id == ([16]byte{}) || name == "" {
		return
	}
	p.mu.Lock()
	p.names[id] = name
	p.mu.Unlock()
}

func (p *Proxy) topicName(id [16]byte) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.names[id]
}

func (p *Proxy) interceptor() Interceptor {
	if fn := p.icpt.Load(); fn != nil {
		return *fn
	}
	return nil
}

// wait blocks while n is stalled; false when done closes first, or, while
// n is cut, reset (nil for the response direction) does.
func (n *node) wait(done, reset <-chan struct{}) bool {
	for {
		n.mu.Lock()
		ch, cut := n.stall, n.cut
		n.mu.Unlock()
		if ch == nil {
			return true
		}
		var rst <-chan struct{}
		if cut {
			rst = reset
		}
		select {
		case <-ch:
		case <-done:
			return false
		case <-rst:
			return false
		}
	}
}

func (n *node) count(key int16) {
	n.mu.Lock()
	n.requests[key]++
	n.mu.Unlock()
}

// conn is one client connection and its broker connection.
type conn struct {
	n       *node
	client  *net.TCPConn
	done    chan struct{} // closed by close
	pending chan pending  // forwarded requests awaiting their response

	mu     sync.Mutex
	up     *net.TCPConn // nil until dialed
	closed bool
}

// pending is a forwarded request whose response has not come back.
type pending struct {
	hdr  requestHeader
	body []byte
}

// setUpstream attaches the broker connection; false (and u closed) when c
// was closed while dialing.
func (c *conn) setUpstream(u *net.TCPConn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		_ = u.Close()
		return false
	}
	c.up = u
	return true
}

func (c *conn) upstream() *net.TCPConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.up
}

// close closes both sockets, with an RST when rst, once.
func (c *conn) close(rst bool) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	up := c.up
	c.mu.Unlock()
	shut(c.client, rst)
	if up != nil {
		shut(up, rst)
	}
	close(c.done)
	c.n.mu.Lock()
	delete(c.n.conns, c)
	c.n.mu.Unlock()
}

// shut closes tc: a FIN first (even when unread bytes wait, which would
// make close alone send an RST), or an RST when rst.
func shut(tc *net.TCPConn, rst bool) {
	if rst {
		_ = tc.SetLinger(0)
	} else {
		_ = tc.CloseWrite()
	}
	_ = tc.Close()
}

// sleep waits d; false when done closes first.
func sleep(d time.Duration, done <-chan struct{}) bool {
	if d <= 0 {
		return true
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-done:
		return false
	}
}

func hostPort(host string, port int32) string {
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}
