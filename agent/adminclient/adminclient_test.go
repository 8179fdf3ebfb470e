package adminclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/seed83556561/mirrord/agent"
	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/failover"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/internal/testkit/tlstest"
)

const token = "client-test-token-0123456789"

// agentFile is a configuration with links "l" on the two clusters and the
// given admin block.
func agentFile(src, dst *kfake.Cluster, admin string) string {
	list := func(s []string) string { b, _ := json.Marshal(s); return string(b) }
	return fmt.Sprintf(`agent {
  listen = "127.0.0.1:0"
  %s
}
cluster "src" { bootstrap_servers = %s }
cluster "dst" { bootstrap_servers = %s }
link "l" {
  source = "src"
  destination = "dst"
  topics { include = ["orders"] }
  destination_replication_factor = 1
}
`, admin, list(src.ListenAddrs()), list(dst.ListenAddrs()))
}

// runAgent runs an agent of the configuration until the test ends and
// returns its address.
func runAgent(t *testing.T, src string, environ []string) string {
	t.Helper()
	cfg, err := config.Parse("agent.hcl", []byte(src), environ)
	if err != nil {
		t.Fatalf("config:\n%v", err)
	}
	a, err := agent.New(cfg, agent.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	})
	select {
	case <-a.Ready():
	case err := <-done:
		t.Fatalf("agent: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("agent does not listen")
	}
	return a.Addr().String()
}

// client parses the agent block of src with environ, as the commands do,
// and returns a client for addr.
func client(t *testing.T, src string, environ []string, o Options) (*Client, error) {
	t.Helper()
	a, err := config.ParseAgent("client.hcl", []byte(src), environ)
	if err != nil {
		t.Fatalf("config:\n%v", err)
	}
	o.ConfigFile = "client.hcl"
	return New(a, o)
}

func mustClient(t *testing.T, src string, environ []string, o Options) *Client {
	t.Helper()
	c, err := client(t, src, environ, o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Guards the typed helpers against a running agent with a token: the
// links, one link, pause and resume, an unknown link and a name no link
// can have; and Do for an endpoint without a helper.
func TestClientCallsTheAgent(t *testing.T) {
	srcC, dstC := kafkatest.Pair(t)
	src := agentFile(srcC, dstC, `admin { token_env = "MIRRORD_ADMIN_TOKEN" }`)
	env := []string{"MIRRORD_ADMIN_TOKEN=" + token}
	c := mustClient(t, src, env, Options{Addr: runAgent(t, src, env)})
	ctx := testContext(t)

	links, err := c.Links(ctx)
	if err != nil || len(links) != 1 || links[0].Name != "l" || links[0].Source != "src" || links[0].Destination != "dst" {
		t.Fatalf("Links: %+v, %v", links, err)
	}
	if l, err := c.Link(ctx, "l"); err != nil || l.Name != "l" {
		t.Errorf("Link: %+v, %v", l, err)
	}
	for name, cmd := range map[string]func(context.Context, string) error{
		"Pause":  func(ctx context.Context, n string) error { _, err := c.Pause(ctx, n); return err },
		"Resume": func(ctx context.Context, n string) error { _, err := c.Resume(ctx, n); return err },
	} {
		if err := cmd(ctx, "l"); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if err := cmd(ctx, "nope"); !errors.Is(err, ErrNotFound) || err.Error() != `not found: no link "nope"; the links are: l` {
			t.Errorf("%s of an unknown link: %v", name, err)
		}
	}
	if _, err := c.Pause(ctx, "../l"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `no link can be called "../l"`) {
		t.Errorf("Pause of a path: %v", err)
	}
	status, body, err := c.Do(ctx, http.MethodPost, "/v1/links/l/stop", []byte(`{}`))
	if err != nil || status != http.StatusNotFound || !errors.Is(c.Check(status, body), ErrNotFound) {
		t.Errorf("Do of an endpoint that does not exist yet: %d %s %v", status, body, err)
	}
	// The link's clusters do not run: it never mirrors, and a failover
	// is refused with the API's reason.
	var apiErr *APIError
	if _, err := c.Failover(ctx, "l", failover.Options{Timeout: time.Minute}); !errors.As(err, &apiErr) || apiErr.Status != http.StatusConflict ||
		!strings.Contains(apiErr.Message, "a failover starts from MIRRORING") {
		t.Errorf("Failover of a link that is not mirroring: %v", err)
	}
	if err := c.Check(503, []byte(`{"error": "busy"}`)); !errors.Is(err, ErrAPI) || err.Error() != "the agent answered 503 Service Unavailable: busy" {
		t.Errorf("Check 503: %v", err)
	}
}

// Guards the errors about the token: each says where this command's token
// came from, or that its configuration has none.
func TestClientTokenErrors(t *testing.T) {
	srcC, dstC := kafkatest.Pair(t)
	agentSrc := agentFile(srcC, dstC, `admin { token_env = "MIRRORD_ADMIN_TOKEN" }`)
	addr := runAgent(t, agentSrc, []string{"MIRRORD_ADMIN_TOKEN=" + token})
	wrongFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(wrongFile, []byte("another-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, admin string
		environ     []string
		sentinel    error
		want        string
	}{
		{"a wrong token from the environment", `admin { token_env = "MIRRORD_ADMIN_TOKEN" }`, []string{"MIRRORD_ADMIN_TOKEN=another-token-0123456789"}, ErrForbidden,
			"the agent refused the admin token from environment variable MIRRORD_ADMIN_TOKEN (agent.admin.token_env): it is not the agent's token; check that this command and the agent read the same variable or file, with the same content"},
		{"a wrong token from a file", fmt.Sprintf("admin { token_file = %q }", wrongFile), nil, ErrForbidden,
			"the agent refused the admin token from file " + wrongFile + " (agent.admin.token_file): it is not the agent's token; check that this command and the agent read the same variable or file, with the same content"},
		{"no token configured", "", nil, ErrUnauthorized,
			"the agent requires an admin token, and agent.admin in client.hcl sets neither token_env nor token_file: set the one the agent's configuration sets"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustClient(t, agentFile(srcC, dstC, tc.admin), tc.environ, Options{Addr: addr})
			_, err := c.Links(testContext(t))
			if !errors.Is(err, tc.sentinel) || err.Error() != tc.want {
				t.Fatalf("Links:\n%v\nwant\n%s", err, tc.want)
			}
			if strings.Contains(err.Error(), "another-token") || strings.Contains(err.Error(), token) {
				t.Errorf("the error shows a token")
			}
		})
	}
}

// Guards the error when no agent runs: it names the address, the key and
// the file it came from.
func TestClientNotRunning(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	a := config.Default().Agent
	a.Listen = addr
	c, err := New(a, Options{ConfigFile: "mirrord.hcl"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Links(testContext(t))
	want := fmt.Sprintf("no agent answers on %s (agent.listen %q in mirrord.hcl): is mirrord run running with this configuration? (", addr, addr)
	if !errors.Is(err, ErrNotRunning) || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("Links:\n%v\nwant prefix\n%s", err, want)
	}
}

// Guards the address taken from agent.listen: a wildcard host is called on
// loopback, port 0 is refused with what to do, --addr wins.
func TestClientAddress(t *testing.T) {
	for _, tc := range []struct{ listen, addr, want, err string }{
		{"127.0.0.1:9644", "", "127.0.0.1:9644", ""},
		{":9644", "", "127.0.0.1:9644", ""},
		{"0.0.0.0:9644", "", "127.0.0.1:9644", ""},
		{"[::]:9644", "", "[::1]:9644", ""},
		{"mirrord.internal:9644", "", "mirrord.internal:9644", ""},
		{"127.0.0.1:0", "", "", `agent.listen in f.hcl has port 0, a port the agent chose at start: pass --addr with the address of its "http listening" log line`},
		{"127.0.0.1:0", "10.1.2.3:9700", "10.1.2.3:9700", ""},
		{"127.0.0.1:9644", "nowhere", "", `--addr "nowhere" is not host:port`},
	} {
		a := config.Default().Agent
		a.Listen = tc.listen
		c, err := New(a, Options{ConfigFile: "f.hcl", Addr: tc.addr})
		switch {
		case tc.err != "" && (err == nil || err.Error() != tc.err):
			t.Errorf("listen %q, --addr %q: %v, want %s", tc.listen, tc.addr, err, tc.err)
		case tc.err == "" && (err != nil || c.Addr() != tc.want):
			t.Errorf("listen %q, --addr %q: %v %v, want %s", tc.listen, tc.addr, c, err, tc.want)
		}
	}
}

// Guards TLS to the agent: the agent's own certificate (cert_file) is
// trusted without a CA; with client_ca_file a client certificate is
// required before connecting; an agent whose TLS the file does not match
// is explained.
func TestClientTLS(t *testing.T) {
	srcC, dstC := kafkatest.Pair(t)
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "ca")
	certFile, keyFile := ca.Server(t, "admin", "mirrord.example.com")
	_, clientCert, clientKey := ca.ClientCert(t, "operator")
	otherCA := tlstest.NewCA(t, dir, "other")
	_, strangerCert, strangerKey := otherCA.ClientCert(t, "stranger")
	env := []string{"MIRRORD_ADMIN_TOKEN=" + token}
	tlsAdmin := fmt.Sprintf("admin {\n    token_env = \"MIRRORD_ADMIN_TOKEN\"\n    cert_file = %q\n    key_file = %q\n    client_ca_file = %q\n  }", certFile, keyFile, ca.File)
	src := agentFile(srcC, dstC, tlsAdmin)
	addr := runAgent(t, src, env)
	ctx := testContext(t)

	if _, err := client(t, src, env, Options{Addr: addr}); err == nil ||
		err.Error() != "the agent requires a client certificate (agent.admin.client_ca_file): pass --client-cert and --client-key" {
		t.Errorf("without a client certificate: %v", err)
	}
	c := mustClient(t, src, env, Options{Addr: addr, CertFile: clientCert, KeyFile: clientKey})
	if _, err := c.Links(ctx); err != nil {
		t.Fatalf("Links over mutual TLS, trusting cert_file: %v", err)
	}
	c = mustClient(t, src, env, Options{Addr: addr, CertFile: clientCert, KeyFile: clientKey, CAFile: ca.File, ServerName: "mirrord.example.com"})
	if _, err := c.Links(ctx); err != nil {
		t.Fatalf("Links over mutual TLS, verified against --ca-file: %v", err)
	}
	c = mustClient(t, src, env, Options{Addr: addr, CertFile: clientCert, KeyFile: clientKey, CAFile: otherCA.File})
	if _, err := c.Links(ctx); !errors.Is(err, ErrTLS) || !strings.Contains(err.Error(), "does not verify (check --ca-file and --server-name)") {
		t.Errorf("against another CA: %v", err)
	}
	c = mustClient(t, src, env, Options{Addr: addr, CertFile: strangerCert, KeyFile: strangerKey})
	if _, err := c.Links(ctx); !errors.Is(err, ErrTLS) || !strings.Contains(err.Error(), "refused the TLS handshake") {
		t.Errorf("with another CA's client certificate: %v", err)
	}

	// The configuration and the agent disagree about TLS.
	other, otherKey := ca.Server(t, "impostor")
	pinOther := agentFile(srcC, dstC, fmt.Sprintf("admin {\n    token_env = \"MIRRORD_ADMIN_TOKEN\"\n    cert_file = %q\n    key_file = %q\n  }", other, otherKey))
	c = mustClient(t, pinOther, env, Options{Addr: addr, CertFile: clientCert, KeyFile: clientKey})
	if _, err := c.Links(ctx); !errors.Is(err, ErrTLS) || !strings.Contains(err.Error(), "is not the one in agent.admin.cert_file "+other) {
		t.Errorf("an agent with another certificate than cert_file: %v", err)
	}
	c = mustClient(t, agentFile(srcC, dstC, `admin { token_env = "MIRRORD_ADMIN_TOKEN" }`), env, Options{Addr: addr})
	if _, err := c.Links(ctx); !errors.Is(err, ErrTLS) || !strings.Contains(err.Error(), "serves HTTPS, but agent.admin in client.hcl has no cert_file") {
		t.Errorf("plain HTTP to a TLS agent: %v", err)
	}
	plainAddr := runAgent(t, agentFile(srcC, dstC, ""), nil)
	c = mustClient(t, pinOther, env, Options{Addr: plainAddr})
	if _, err := c.Links(ctx); !errors.Is(err, ErrTLS) || !strings.Contains(err.Error(), "serves plain HTTP, but agent.admin in client.hcl sets cert_file") {
		t.Errorf("TLS to a plain agent: %v", err)
	}
}
