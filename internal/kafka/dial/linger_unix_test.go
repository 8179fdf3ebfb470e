//go:build unix

package dial

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// A connection the client gives up on is reset, not closed: what the
// kernel had not sent is dropped instead of being sent on after the close
// (a request retransmitted through a healed partition could reach the
// broker after the link's next session took over). The broker side sees
// ECONNRESET where an orderly close would give it EOF. The TLS dialer
// dials its TCP connection with the same netDialer (TestTLS handshakes
// through it).
func TestDialerResetsOnClose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := netDialer().DialContext(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if _, err := c.Write([]byte("a produce request given up")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // delivered, unread: a reset discards it at the receiver
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	_ = srv.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = io.ReadAll(srv)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("the broker side read %v after the client closed, want ECONNRESET (a reset, not an orderly close)", err)
	}
}
