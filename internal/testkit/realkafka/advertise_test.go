package realkafka

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// proxy forwards TCP connections from its own loopback port to a target
// and counts them: the shape of the fault-injection proxies Advertise is
// for.
type proxy struct {
	ln     net.Listener
	target string
	conns  atomic.Int64
	wg     sync.WaitGroup
}

func newProxy(t *testing.T) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln}
	t.Cleanup(func() { _ = ln.Close(); p.wg.Wait() })
	return p
}

func (p *proxy) serve() {
	p.wg.Go(func() {
		for {
			c, err := p.ln.Accept()
			if err != nil {
				return
			}
			p.conns.Add(1)
			p.wg.Go(func() {
				defer c.Close()
				b, err := net.Dial("tcp", p.target)
				if err != nil {
					return
				}
				defer b.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(b, c); done <- struct{}{} }()
				go func() { _, _ = io.Copy(c, b); done <- struct{}{} }()
				<-done
			})
		}
	})
}

// Guards the Advertise hook fault tests rely on (clients reach the broker
// only through the advertised proxy, replication does not), and Stop's
// bound: a node that does not finish its controlled shutdown in time is
// killed, Stop says so, and the node starts again from its data.
func TestAdvertiseAndStopBound(t *testing.T) {
	v := TestVersions(t)[0]
	px := newProxy(t)
	c := ForTest(t, Config{
		Version:     v,
		StopTimeout: time.Millisecond,
		Advertise: func(node int, listener, listenAddr string) string {
			if listener != "PLAINTEXT" {
				return listenAddr
			}
			px.target = listenAddr // before any node starts: no race with serve
			return px.ln.Addr().String()
		},
	})
	px.serve()
	if got, want := c.NodeAddr(1), px.ln.Addr().String(); got != want {
		t.Fatalf("NodeAddr(1) = %s, want the proxy %s", got, want)
	}
	if c.ListenAddr(1, "PLAINTEXT") == c.NodeAddr(1) {
		t.Fatal("listen address equals the advertised proxy address")
	}
	ctx := t.Context()
	cl := client(t, c.Addrs(), kgo.DefaultProduceTopic("adv"))
	createTopic(t, ctx, cl, "adv", 1, 1, nil)
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("through the proxy")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if px.conns.Load() == 0 {
		t.Fatal("the client never went through the advertised proxy")
	}

	err := c.Stop(ctx, 1)
	if err == nil || !strings.Contains(err.Error(), "killed it (SIGKILL)") {
		t.Fatalf("Stop with a 1ms bound: %v", err)
	}
	if c.Running(1) {
		t.Fatal("node 1 runs after Stop")
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := c.Start(sctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := checkValue(ctx, client(t, c.Addrs()), "adv", "through the proxy"); err != nil {
		t.Fatalf("after the restart: %v", err)
	}
}
