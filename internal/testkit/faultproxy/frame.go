package faultproxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// API keys the proxy treats specially.
const (
	keyProduce            int16 = 0
	keyFetch              int16 = 1
	keyMetadata           int16 = 3
	keyControlledShutdown int16 = 7
	keyFindCoordinator    int16 = 10
	keySASLHandshake      int16 = 17
	keyAPIVersions        int16 = 18
	keyDescribeCluster    int16 = 60
	keyShareFetch         int16 = 78
	keyShareAcknowledge   int16 = 79
)

// Frame is one request or response as the Interceptor sees it. Its slices
// belong to the proxy: read them during the call, copy what you keep, and
// never modify them.
type Frame struct {
	// Node is the broker the connection goes to.
	Node int32
	// APIKey, Version, CorrelationID and ClientID come from the request
	// header (for a response: of the request it answers).
	APIKey        int16
	Version       int16
	CorrelationID int32
	ClientID      string
	// Request is the request body, after the request header (for a
	// response: the body of the request it answers, as forwarded).
	Request []byte
	// Response is nil for a request; for a response it is the body after
	// the response header, with the proxy's endpoints already written in.
	Response []byte

	p *Proxy
}

// IsResponse reports whether f is a response.
func (f *Frame) IsResponse() bool { return f.Response != nil }

// Interceptor decides what happens to a frame. It is called for every
// request before the proxy forwards it and for every response before the
// proxy sends it back, on the connection's goroutine, concurrently for
// different connections; while it runs, that direction of that connection
// waits.
type Interceptor func(f *Frame) Action

type actionKind uint8

const (
	actPass actionKind = iota
	actDrop
	actReset
	actReplace
	actDelay
)

// Action is what an Interceptor decides for a frame.
type Action struct {
	kind  actionKind
	body  []byte
	delay time.Duration
}

var (
	// Pass forwards the frame as it is.
	Pass = Action{}
	// DropConnection closes the connection (both sides, FIN) instead of
	// forwarding the frame: a request never reaches the broker; for a
	// response, the broker processed the request and the client never
	// hears of it.
	DropConnection = Action{kind: actDrop}
	// ResetConnection is DropConnection with an RST.
	ResetConnection = Action{kind: actReset}
)

// Replace forwards body in place of the frame's body, after the frame's
// original header (with the size fixed). For a response that is an answer
// the broker never gave; for a request, a request the client never sent
// (its response is matched to it as usual).
func Replace(body []byte) Action { return Action{kind: actReplace, body: body} }

// Delay waits d, then forwards the frame. The direction reads nothing
// more while it waits; a fault that closes the connection ends the wait.
func Delay(d time.Duration) Action { return Action{kind: actDelay, delay: d} }

// errProtocol marks what the proxy cannot forward: the test fails.
var errProtocol = errors.New("faultproxy: protocol")

// readFrame reads one frame, its 4-byte size included.
func readFrame(r io.Reader) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	n := int32(binary.BigEndian.Uint32(size[:]))
	if n < 0 || n > MaxFrameBytes {
		return nil, fmt.Errorf("%w: frame size %d outside [0, %d] (TLS, or not Kafka?)", errProtocol, n, MaxFrameBytes)
	}
	buf := make([]byte, 4+int(n))
	copy(buf, size[:])
	if _, err := io.ReadFull(r, buf[4:]); err != nil {
		return nil, err
	}
	return buf, nil
}

// requestHeader is a parsed request header.
type requestHeader struct {
	key      int16
	version  int16
	corr     int32
	clientID string
	len      int // header length, after the size
}

// parseRequestHeader reads the header of a request payload (after the
// size): v2 for a flexible version, v0 for ControlledShutdown v0, v1
// otherwise (and for keys kmsg does not know).
func parseRequestHeader(b []byte) (requestHeader, error) {
	if len(b) < 8 {
		return requestHeader{}, fmt.Errorf("%w: request of %d bytes has no header", errProtocol, len(b))
	}
	r := kbin.Reader{Src: b}
	h := requestHeader{key: r.Int16(), version: r.Int16(), corr: r.Int32()}
	if !(h.key == keyControlledShutdown && h.version == 0) {
		if cid := r.NullableString(); cid != nil {
			h.clientID = *cid
		}
		if req := kmsg.RequestForKey(h.key); req != nil {
			req.SetVersion(h.version)
			if req.IsFlexible() {
				kmsg.SkipTags(&r)
			}
		}
	}
	if err := r.Complete(); err != nil {
		return h, fmt.Errorf("%w: request header (key %d v%d): %v", errProtocol, h.key, h.version, err)
	}
	h.len = len(b) - len(r.Src)
	return h, nil
}

// responseHeaderLen returns the length of the response header (after the
// size) of a response to key at version: v1 (correlation ID and tagged
// fields) for flexible versions except ApiVersions, which always answers
// with v0 (correlation ID only).
func responseHeaderLen(b []byte, key, version int16) (int, error) {
	if len(b) < 4 {
		return 0, fmt.Errorf("%w: response of %d bytes has no correlation ID", errProtocol, len(b))
	}
	resp := kmsg.ResponseForKey(key)
	if resp == nil || key == keyAPIVersions {
		return 4, nil
	}
	resp.SetVersion(version)
	if !resp.IsFlexible() {
		return 4, nil
	}
	r := kbin.Reader{Src: b[4:]}
	kmsg.SkipTags(&r)
	if err := r.Complete(); err != nil {
		return 0, fmt.Errorf("%w: response header (key %d v%d): %v", errProtocol, key, version, err)
	}
	return len(b) - len(r.Src), nil
}

// produceAcks returns the acks of a Produce request body; ok is false when
// the body is too short to say.
func produceAcks(body []byte, version int16) (acks int16, ok bool) {
	r := kbin.Reader{Src: body}
	switch {
	case version >= 9:
		r.CompactNullableString()
	case version >= 3:
		r.NullableString()
	}
	acks = r.Int16()
	return acks, r.Complete() == nil
}

// withBody returns frame's size and header followed by body.
func withBody(frame []byte, hdrLen int, body []byte) []byte {
	out := make([]byte, 0, 4+hdrLen+len(body))
	out = append(out, 0, 0, 0, 0)
	out = append(out, frame[4:4+hdrLen]...)
	out = append(out, body...)
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	return out
}

// fail reports err unless it is the connection ending.
func (p *Proxy) fail(c *conn, dir string, err error) {
	if errors.Is(err, errProtocol) {
		p.t.Errorf("faultproxy: node %d %s: %v", c.n.id, dir, err)
	}
}

// forwardRequests forwards c's requests to the broker until either ends.
// A goroutine it owns reads them from the client, at most maxPending ahead
// of the one being forwarded, so that a reset of the client's connection
// is seen while a Cut holds a request (wait).
func (p *Proxy) forwardRequests(c *conn) {
	up := c.upstream()
	frames := make(chan []byte, maxPending)
	reset := make(chan struct{}) // closed when the client reset the connection
	var rerr error               // the read's error; read after frames is closed
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(frames)
		for {
			frame, err := readFrame(c.client)
			if err != nil {
				rerr = err
				if errors.Is(err, syscall.ECONNRESET) {
					close(reset)
				}
				return
			}
			select {
			case frames <- frame:
			case <-c.done:
				return
			}
		}
	})
	defer func() {
		c.close(false) // ends the read, if the client has not
		wg.Wait()
	}()
	for frame := range frames {
		h, err := parseRequestHeader(frame[4:])
		if err != nil {
			p.fail(c, "request", err)
			return
		}
		c.n.count(h.key)
		if h.key == keySASLHandshake && h.version == 0 {
			p.fail(c, "request", fmt.Errorf("%w: SaslHandshake v0 (a raw SASL exchange follows, pre-KIP-152) is not supported", errProtocol))
			return
		}
		body := frame[4+h.len:]
		out := frame
		if fn := p.interceptor(); fn != nil {
			act := fn(&Frame{Node: c.n.id, APIKey: h.key, Version: h.version, CorrelationID: h.corr, ClientID: h.clientID, Request: body, p: p})
			switch act.kind {
			case actDrop:
				c.close(false)
				return
			case actReset:
				c.close(true)
				return
			case actReplace:
				body = act.body
				out = withBody(frame, h.len, body)
			case actDelay:
				if !sleep(act.delay, c.done) {
					return
				}
			}
		}
		expect := true
		if h.key == keyProduce {
			if acks, ok := produceAcks(body, h.version); ok && acks == 0 {
				expect = false
			}
		}
		if expect {
			select {
			case c.pending <- pending{hdr: h, body: body}:
			case <-c.done:
				return
			}
		}
		if !c.n.wait(c.done, reset) {
			// Done, or the client reset its connection during a
			// Cut: what it sent since is dropped, as its kernel
			// would drop it.
			c.close(true)
			return
		}
		if _, err := up.Write(out); err != nil {
			return
		}
	}
	if rerr != nil {
		p.fail(c, "request", rerr)
	}
}

// forwardResponses forwards the broker's responses to c's client until
// either ends.
func (p *Proxy) forwardResponses(c *conn) {
	up := c.upstream()
	for {
		frame, err := readFrame(up)
		if err != nil {
			p.fail(c, "response", err)
			return
		}
		if len(frame) < 8 {
			p.fail(c, "response", fmt.Errorf("%w: response of %d bytes has no correlation ID", errProtocol, len(frame)-4))
			return
		}
		corr := int32(binary.BigEndian.Uint32(frame[4:]))
		var req pending
		select {
		case req = <-c.pending:
		default:
			p.fail(c, "response", fmt.Errorf("%w: response with correlation ID %d answers no request", errProtocol, corr))
			return
		}
		h := req.hdr
		if corr != h.corr {
			p.fail(c, "response", fmt.Errorf("%w: response with correlation ID %d where the next request (key %d v%d) has %d", errProtocol, corr, h.key, h.version, h.corr))
			return
		}
		hl, err := responseHeaderLen(frame[4:], h.key, h.version)
		if err != nil {
			p.fail(c, "response", err)
			return
		}
		body := frame[4+hl:]
		out := frame
		nb, err := p.rewrite(h.key, h.version, body)
		if err != nil {
			p.fail(c, "response", err)
			return
		}
		if nb != nil {
			body = nb
			out = withBody(frame, hl, body)
		}
		if fn := p.interceptor(); fn != nil {
			act := fn(&Frame{Node: c.n.id, APIKey: h.key, Version: h.version, CorrelationID: h.corr, ClientID: h.clientID, Request: req.body, Response: body, p: p})
			switch act.kind {
			case actDrop:
				c.close(false)
				return
			case actReset:
				c.close(true)
				return
			case actReplace:
				out = withBody(frame, hl, act.body)
			case actDelay:
				if !sleep(act.delay, c.done) {
					return
				}
			}
		}
		if !c.n.wait(c.done, nil) {
			return
		}
		if _, err := c.client.Write(out); err != nil {
			return
		}
	}
}
