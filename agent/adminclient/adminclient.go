// Package adminclient calls a running agent's admin API as its
// configuration says to: the agent block gives the address
// (agent.listen), whether to use TLS and which certificate to trust
// (agent.admin.cert_file), and the bearer token — read from the same
// token_env or token_file that the agent reads. The mirrord commands
// links, pause and resume use it; Do serves endpoints that have no helper
// yet.
//
// Errors say what to fix in terms of the configuration: which variable or
// file the token came from when the agent refuses it, which address and
// key when no agent answers.
//
// A Client holds no goroutines of its own; it is safe for concurrent use.
package adminclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/failover"
	"github.com/seed83556561/mirrord/link"
)

// Errors, matched with errors.Is.
var (
	// ErrNotRunning: nothing answers on the agent's address.
	ErrNotRunning = errors.New("no agent answers")
	// ErrUnauthorized: the agent wants a token and got none (401).
	ErrUnauthorized = errors.New("the agent requires an admin token")
	// ErrForbidden: the agent refused the token (403).
	ErrForbidden = errors.New("the agent refused the admin token")
	// ErrNotFound: no such link or endpoint (404).
	ErrNotFound = errors.New("not found")
	// ErrTLS: the TLS connection to the agent failed.
	ErrTLS = errors.New("tls failed")
	// ErrAPI: any other answer that is not a success (see APIError).
	ErrAPI = errors.New("the admin API refused the request")
)

// DefaultTimeout bounds one request.
const DefaultTimeout = 10 * time.Second

// maxAnswer bounds the body of an answer read.
const maxAnswer = 16 << 20

// Options are the command line's additions to the configuration.
type Options struct {
	// ConfigFile is the configuration's file name, for messages.
	ConfigFile string
	// Addr is host:port to call instead of agent.listen (another host,
	// or the port an agent on port 0 chose).
	Addr string
	// CAFile verifies the agent's certificate against these CAs (PEM),
	// with ServerName (default: the host of the address), instead of
	// trusting exactly the certificate in agent.admin.cert_file.
	CAFile     string
	ServerName string
	// CertFile and KeyFile are the client certificate for an agent with
	// agent.admin.client_ca_file.
	CertFile, KeyFile string
	// Timeout bounds each request; zero means DefaultTimeout.
	Timeout time.Duration
}

// Client calls one agent's admin API.
type Client struct {
	base      string // scheme://host:port
	addr      string
	where     string // how the address was found, for messages
	tls       bool
	token     string
	tokenFrom string // config.Admin.TokenSource
	file      string // the configuration file, for messages
	http      *http.Client
	timeout   time.Duration
}

// New returns a client for the agent that configuration a describes. It
// reads the TLS files it needs; it does not connect.
func New(a config.Agent, o Options) (*Client, error) {
	file := o.ConfigFile
	if file == "" {
		file = "the configuration"
	}
	c := &Client{token: a.Admin.Token, tokenFrom: a.Admin.TokenSource(), file: file, tls: a.Admin.CertFile != "", timeout: o.Timeout}
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	addr, where, err := address(a.Listen, o.Addr, file)
	if err != nil {
		return nil, err
	}
	c.addr, c.where = addr, where
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // an operator's proxy settings are not for the agent's port
	if c.tls {
		tc, err := tlsConfig(a.Admin, o, addr)
		if err != nil {
			return nil, err
		}
		tr.TLSClientConfig = tc
		c.base = "https://" + addr
	} else {
		if o.CAFile != "" || o.CertFile != "" {
			return nil, fmt.Errorf("--ca-file and --client-cert need TLS, and agent.admin in %s has no cert_file", file)
		}
		c.base = "http://" + addr
	}
	c.http = &http.Client{
		Transport: tr,
		// The agent never redirects; a redirect would carry the token
		// elsewhere.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return c, nil
}

// address is where to call: addr if given, else agent.listen with a
// wildcard host replaced by loopback.
func address(listen, addr, file string) (string, string, error) {
	if addr != "" {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return "", "", fmt.Errorf("--addr %q is not host:port", addr)
		}
		return addr, "--addr", nil
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", "", fmt.Errorf("agent.listen %q in %s is not host:port", listen, file)
	}
	if port == "0" {
		return "", "", fmt.Errorf("agent.listen in %s has port 0, a port the agent chose at start: pass --addr with the address of its \"http listening\" log line", file)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	return net.JoinHostPort(host, port), fmt.Sprintf("agent.listen %q in %s", listen, file), nil
}

// tlsConfig trusts the agent's own certificate (the one in
// agent.admin.cert_file) unless CAFile says otherwise, and presents the
// client certificate.
func tlsConfig(ad config.Admin, o Options, addr string) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.CAFile != "" {
		pemBytes, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("--ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pemBytes) {
			return nil, fmt.Errorf("--ca-file %s holds no PEM certificate", o.CAFile)
		}
		tc.RootCAs = pool
		tc.ServerName = o.ServerName
		if tc.ServerName == "" {
			tc.ServerName, _, _ = net.SplitHostPort(addr)
		}
	} else {
		pinned, err := certificates(ad.CertFile)
		if err != nil {
			return nil, fmt.Errorf("cannot read the agent's certificate to trust it: %w (pass --ca-file with the CA that signed it)", err)
		}
		// The certificate is checked against the file, not a name: the
		// address is often loopback, which the certificate need not name.
		tc.InsecureSkipVerify = true
		tc.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) > 0 {
				for _, p := range pinned {
					if bytes.Equal(cs.PeerCertificates[0].Raw, p.Raw) {
						return nil
					}
				}
			}
			return fmt.Errorf("the agent's certificate is not the one in agent.admin.cert_file %s (pass --ca-file to verify it against a CA instead)", ad.CertFile)
		}
	}
	switch {
	case o.CertFile != "" || o.KeyFile != "":
		cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("--client-cert and --client-key: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	case ad.ClientCAFile != "":
		return nil, errors.New("the agent requires a client certificate (agent.admin.client_ca_file): pass --client-cert and --client-key")
	}
	return tc, nil
}

// certificates reads the certificates of a PEM file.
func certificates(file string) ([]*x509.Certificate, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		out = append(out, cert)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return out, nil
}

// Addr is the address the client calls.
func (c *Client) Addr() string { return c.addr }

// Do sends one request to the admin API (path from the root, e.g.
// "/v1/links") with the token, and returns the status and the body. err
// is only for a request that got no answer, explained; use Check for the
// meaning of the status.
func (c *Client) Do(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, c.explain(method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("%s %s: read the answer: %w", method, path, err)
	}
	return resp.StatusCode, b, nil
}

// explain says why a request got no answer.
func (c *Client) explain(method, path string, err error) error {
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		op        *net.OpError
		rh        tls.RecordHeaderError
	)
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("%w on %s (%s): is mirrord run running with this configuration? (%w)", ErrNotRunning, c.addr, c.where, err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w on %s (%s) within %v: %s %s: %w", ErrNotRunning, c.addr, c.where, c.timeout, method, path, err)
	case errors.As(err, &rh) || strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return fmt.Errorf("%w: the agent on %s serves plain HTTP, but agent.admin in %s sets cert_file: %w", ErrTLS, c.addr, c.file, err)
	case errors.As(err, &unknownCA), errors.As(err, &hostname):
		return fmt.Errorf("%w: the agent's certificate on %s does not verify (check --ca-file and --server-name): %w", ErrTLS, c.addr, err)
	case strings.Contains(err.Error(), "agent.admin.cert_file"): // the pin
		return fmt.Errorf("%w: %w", ErrTLS, err)
	case errors.As(err, &op) && op.Op == "remote error":
		return fmt.Errorf("%w: the agent on %s refused the TLS handshake (with agent.admin.client_ca_file it needs --client-cert and --client-key signed by that CA): %w",
			ErrTLS, c.addr, err)
	}
	return fmt.Errorf("%s %s on %s: %w", method, path, c.addr, err)
}

// APIError is an answer that is not a success, with the API's message.
type APIError struct {
	Status  int
	Message string // the API's {"error": ...}, or the body's start
}

func (e *APIError) Error() string {
	return fmt.Sprintf("the agent answered %d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
}

// Is makes an APIError match ErrAPI.
func (e *APIError) Is(target error) bool { return target == ErrAPI }

// Check turns an answer into an error: nil for 2xx; for 401 and 403 an
// error that says where the token comes from (ErrUnauthorized,
// ErrForbidden); ErrNotFound for 404; an *APIError otherwise.
func (c *Client) Check(status int, body []byte) error {
	if status >= 200 && status < 300 {
		return nil
	}
	msg := apiMessage(body)
	switch status {
	case http.StatusUnauthorized:
		if c.token == "" {
			return fmt.Errorf("%w, and agent.admin in %s sets neither token_env nor token_file: set the one the agent's configuration sets", ErrUnauthorized, c.file)
		}
		return fmt.Errorf("%w although the token from %s was sent: %s", ErrUnauthorized, c.tokenFrom, msg)
	case http.StatusForbidden:
		return fmt.Errorf("%w from %s: it is not the agent's token; check that this command and the agent read the same variable or file, with the same content", ErrForbidden, c.tokenFrom)
	case http.StatusNotFound:
		return fmt.Errorf("%w: %s", ErrNotFound, msg)
	case http.StatusBadRequest:
		if strings.Contains(msg, "HTTPS server") {
			return fmt.Errorf("%w: the agent on %s serves HTTPS, but agent.admin in %s has no cert_file", ErrTLS, c.addr, c.file)
		}
	}
	return &APIError{Status: status, Message: msg}
}

// apiMessage is the API's {"error": ...}, or the start of another body.
func apiMessage(body []byte) string {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		return e.Error
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return strconv.Quote(s)
}

// call sends a request, checks the answer and decodes it into out.
func (c *Client) call(ctx context.Context, method, path string, out any) error {
	status, body, err := c.Do(ctx, method, path, nil)
	if err != nil {
		return err
	}
	if err := c.Check(status, body); err != nil {
		return err
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("%s %s: decode the answer: %w", method, path, err)
	}
	return nil
}

// Links returns every link's status (GET /v1/links).
func (c *Client) Links(ctx context.Context) ([]link.Status, error) {
	var out []link.Status
	err := c.call(ctx, http.MethodGet, "/v1/links", &out)
	return out, err
}

// Link returns one link's status (GET /v1/links/{name}).
func (c *Client) Link(ctx context.Context, name string) (link.Status, error) {
	var out link.Status
	p, err := linkPath(name, "")
	if err == nil {
		err = c.call(ctx, http.MethodGet, p, &out)
	}
	return out, err
}

// Pause asks a link to stop mirroring after a final checkpoint (POST
// /v1/links/{name}/pause). The status returned is the link's when the
// agent accepted the command; the link acts on it asynchronously.
func (c *Client) Pause(ctx context.Context, name string) (link.Status, error) {
	return c.command(ctx, name, "pause")
}

// Resume asks a paused link to mirror again (POST
// /v1/links/{name}/resume), like Pause.
func (c *Client) Resume(ctx context.Context, name string) (link.Status, error) {
	return c.command(ctx, name, "resume")
}

// Failover starts a failover of the link (POST
// /v1/links/{name}/failover); the status returned shows it running, and
// the link's status (Link) its progress and outcome.
func (c *Client) Failover(ctx context.Context, name string, o failover.Options) (link.Status, error) {
	var out link.Status
	p, err := linkPath(name, "failover")
	if err == nil {
		p += fmt.Sprintf("?timeout=%s&allow_lag=%t&grant_write=%t", o.Timeout, o.AllowLag, o.GrantWrite)
		err = c.call(ctx, http.MethodPost, p, &out)
	}
	return out, err
}

func (c *Client) command(ctx context.Context, name, cmd string) (link.Status, error) {
	var out link.Status
	p, err := linkPath(name, cmd)
	if err == nil {
		err = c.call(ctx, http.MethodPost, p, &out)
	}
	return out, err
}

// linkPath is the path of a link's endpoint; a name that no link can have
// is refused before any request.
func linkPath(name, cmd string) (string, error) {
	if !config.ValidName(name) {
		return "", fmt.Errorf("%w: no link can be called %q (link names are letters, digits, '-' and single '_')", ErrNotFound, name)
	}
	p := "/v1/links/" + name
	if cmd != "" {
		p += "/" + cmd
	}
	return p, nil
}
