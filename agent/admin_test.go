package agent

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/internal/testkit/logtest"
	"github.com/seed83556561/mirrord/internal/testkit/tlstest"
)

const (
	rightToken = "right-admin-token-0123456789"
	wrongToken = "wrong-admin-token-0123456789"
)

// offlineHCL is a configuration whose clusters are not running (New does no
// I/O), with links "l" and "m" and the given agent block lines.
func offlineHCL(agentLines ...string) string {
	return "agent {\n  " + strings.Join(agentLines, "\n  ") + "\n}\n" + `
cluster "a" { bootstrap_servers = ["127.0.0.1:1"] }
cluster "b" { bootstrap_servers = ["127.0.0.1:2"] }
link "l" {
  source = "a"
  destination = "b"
  topics { include = [".*"] }
  unattributed = "skip"
}
link "m" {
  source = "b"
  destination = "a"
  topics { include = [".*"] }
  unattributed = "skip"
}
`
}

// offlineAgent builds an agent from offlineHCL; its log goes to the
// returned buffer.
func offlineAgent(t *testing.T, environ []string, agentLines ...string) (*Agent, *logtest.Buffer) {
	t.Helper()
	cfg, err := config.Parse("admin_test.hcl", []byte(offlineHCL(agentLines...)), environ)
	if err != nil {
		t.Fatalf("config:\n%v", err)
	}
	logs := newLogBuffer(t)
	a, err := New(cfg, Deps{Logger: NewLogger(cfg.Agent, logs), Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	return a, logs
}

// serve sends one request to h; auth is the Authorization header, if any.
func serve(h http.Handler, method, target, auth string, body io.Reader) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, body)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// apiErrorOf decodes a JSON {"error": ...} body, or fails the test.
func apiErrorOf(t *testing.T, rec *httptest.ResponseRecorder) string {
	t.Helper()
	var e struct {
		Error string `json:"error"`
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("content type %q, want application/json", ct)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == "" {
		t.Fatalf("body %q is not a JSON error: %v", rec.Body, err)
	}
	return e.Error
}

// Guards the access rule, endpoint by endpoint: with a token every request
// under /v1/ needs it (endpoints not written yet, like failover, included),
// /metrics only with protect_metrics; without one nothing needs it; and
// /healthz, /readyz and the status page stay open.
func TestAdminAccessMatrix(t *testing.T) {
	env := []string{"ADMIN_TOKEN=" + rightToken}
	agents := map[string]*Agent{}
	agents["none"], _ = offlineAgent(t, nil)
	agents["token"], _ = offlineAgent(t, env, `admin { token_env = "ADMIN_TOKEN" }`)
	agents["token+metrics"], _ = offlineAgent(t, env, `admin {`, `  token_env = "ADMIN_TOKEN"`, `  protect_metrics = true`, `}`)

	type row struct {
		method, path string
		open         int // the answer when the request may go through
	}
	rows := []row{
		{"GET", "/v1/links", 200},
		{"GET", "/v1/links/l", 200},
		{"GET", "/v1/status", 200},          // the status page's data: protected like the rest of /v1
		{"GET", "/v1/links/l/history", 200}, // likewise
		{"POST", "/v1/links/l/pause", 202},
		{"POST", "/v1/links/l/resume", 202},
		{"GET", "/v1/links/l/translate", 400}, // no query: refused before any I/O
		{"POST", "/v1/links/l/failover", 409}, // the link is not mirroring
		{"DELETE", "/v1/links/l", 405},
		{"HEAD", "/v1/links", 200},
		{"GET", "/v1", 404},
		{"GET", "/metrics", 200},
		{"GET", "/healthz", 200},
		{"GET", "/readyz", 503}, // the links are not running
		{"GET", "/", 200},
		{"GET", "/ui/app.js", 200}, // the status page's assets: open
	}
	protected := func(agent, path string) bool {
		switch {
		case agent == "none":
			return false
		case strings.HasPrefix(path, "/v1"):
			return true
		case path == "/metrics":
			return agent == "token+metrics"
		}
		return false
	}
	presented := map[string]string{"missing": "", "wrong": "Bearer " + wrongToken, "right": "Bearer " + rightToken}
	for _, name := range []string{"none", "token", "token+metrics"} {
		for _, r := range rows {
			for _, tok := range []string{"missing", "wrong", "right"} {
				want := r.open
				if protected(name, r.path) && tok != "right" {
					want = map[string]int{"missing": 401, "wrong": 403}[tok]
				}
				t.Run(fmt.Sprintf("%s/%s %s/%s token", name, r.method, r.path, tok), func(t *testing.T) {
					rec := serve(agents[name].Handler(), r.method, r.path, presented[tok], nil)
					if rec.Code != want {
						t.Fatalf("status %d, want %d; body %s", rec.Code, want, rec.Body)
					}
					switch want {
					case 401:
						if got := rec.Header().Get("WWW-Authenticate"); got != `Bearer realm="mirrord"` {
							t.Errorf("WWW-Authenticate %q", got)
						}
						if msg := apiErrorOf(t, rec); !strings.Contains(msg, "Authorization: Bearer <token>") || !strings.Contains(msg, "agent.admin.token_env") {
							t.Errorf("401 error %q does not say what to send", msg)
						}
					case 403:
						if msg := apiErrorOf(t, rec); msg != "the admin token is wrong" {
							t.Errorf("403 error %q", msg)
						}
					}
					if strings.Contains(rec.Body.String(), rightToken) {
						t.Error("the answer shows the token")
					}
				})
			}
		}
	}
}

// Guards how the header is read: the scheme is case-insensitive, anything
// but a bearer token is "missing", a token that differs in one character
// or in length is wrong.
func TestAdminAuthorizationHeader(t *testing.T) {
	a, logs := offlineAgent(t, []string{"ADMIN_TOKEN=" + rightToken}, `admin { token_env = "ADMIN_TOKEN" }`)
	for _, tc := range []struct {
		header string
		code   int
	}{
		{"Bearer " + rightToken, 200},
		{"bearer " + rightToken, 200},
		{"BEARER  " + rightToken + " ", 200},
		{"Bearer", 401},
		{"Bearer ", 401},
		{"Basic " + rightToken, 401},
		{rightToken, 401},
		{"Bearer " + rightToken[:len(rightToken)-1], 403},
		{"Bearer " + rightToken + "0", 403},
		{"Bearer " + strings.ToUpper(rightToken), 403},
	} {
		if rec := serve(a.Handler(), "GET", "/v1/links", tc.header, nil); rec.Code != tc.code {
			t.Errorf("Authorization %q: %d, want %d", tc.header, rec.Code, tc.code)
		}
	}
	if !strings.Contains(logs.String(), "[WARN]  mirrord.agent.http: admin request with a wrong token refused: method=GET path=/v1/links") {
		t.Errorf("a wrong token is not logged:\n%s", logs)
	}
	if strings.Contains(logs.String(), rightToken[:10]) {
		t.Error("the log shows a token")
	}
	reg := prometheus.NewRegistry()
	g, err := newGuard(a.cfg.Agent.Admin, a.log, reg)
	if err != nil {
		t.Fatal(err)
	}
	h := g.wrap(a.mux)
	serve(h, "GET", "/v1/links", "", nil)
	serve(h, "GET", "/v1/links", "Bearer "+wrongToken, nil)
	serve(h, "GET", "/v1/links", "Bearer "+wrongToken, nil)
	if u, f := testutil.ToFloat64(g.refused.WithLabelValues(refusedUnauthenticated)), testutil.ToFloat64(g.refused.WithLabelValues(refusedForbidden)); u != 1 || f != 2 {
		t.Errorf("mirrord_http_requests_refused_total: unauthenticated %v, forbidden %v; want 1 and 2", u, f)
	}
}

// Guards the rotation of token_file (Kubernetes swaps a mounted secret):
// the new token is in force after the check interval and the old one is
// refused; a broken rotation keeps the last good token.
func TestAdminTokenFileRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path+".tmp", []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
	}
	write(rightToken + "\n")
	a, logs := offlineAgent(t, nil, `admin { token_file = "`+path+`" }`)
	var mu sync.Mutex
	now := time.Now()
	a.guard.token.file.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	code := func(tok string) int { return serve(a.Handler(), "GET", "/v1/links", "Bearer "+tok, nil).Code }

	if c := code(rightToken); c != 200 {
		t.Fatalf("the file's token: %d", c)
	}
	const rotated = "rotated-admin-token-abcdefgh"
	write(rotated + "\n")
	if c := code(rotated); c != 403 {
		t.Errorf("the new token within the check interval: %d, want 403 (the stat is trusted for a second)", c)
	}
	advance(time.Second)
	if c, old := code(rotated), code(rightToken); c != 200 || old != 403 {
		t.Errorf("after the check interval: new token %d, old token %d; want 200 and 403", c, old)
	}
	if !strings.Contains(logs.String(), "admin token file changed; the new token is in force: token_file="+path) {
		t.Errorf("the rotation is not logged:\n%s", logs)
	}

	write("\n")
	advance(time.Second)
	if c := code(rotated); c != 200 {
		t.Errorf("after an emptied token file: %d, want 200 with the last good token", c)
	}
	if !strings.Contains(logs.String(), "cannot read the admin token file again; the token read before stays in force") {
		t.Errorf("the broken rotation is not logged:\n%s", logs)
	}
	if strings.Contains(logs.String(), rotated) || strings.Contains(logs.String(), rightToken) {
		t.Error("the log shows a token")
	}
}

// Guards link names taken literally: an escaped, non-canonical or
// differently written path never reaches a link, where ServeMux would have
// decoded it into a name or redirected it (307, method kept) to the
// cleaned path.
func TestAdminPathHygiene(t *testing.T) {
	a, logs := offlineAgent(t, nil)
	for _, tc := range []struct {
		target string
		code   int
	}{
		{"/v1/links/a%2Fb/pause", 400},
		{"/v1/links/l%2Fpause", 400},
		{"/v1/links/%6c/pause", 400},
		{"/v1/links/%2e%2e/pause", 400},
		{"/v1/links/../links/l/pause", 400},
		{"/v1/links/./l/pause", 400},
		{"/v1/links//l/pause", 400},
		{"/v1//links/l/pause", 400},
		{"/v1/links/l/pause/", 400},
		{"/v1/links/l%00/pause", 400},
		{`/v1/links/l\..\m/pause`, 400},
		{"/v1/links/L/pause", 404},
		{"/v1/links/l;m/pause", 404},
		{"/v1/links/l%20/pause", 400},
		{"/v1/links/l%3Fx/pause", 400},
	} {
		// The target exactly as a client can send it.
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader("POST " + tc.target + " HTTP/1.1\r\nHost: x\r\n\r\n")))
		if err != nil {
			t.Fatalf("%s: %v", tc.target, err)
		}
		rec := httptest.NewRecorder()
		a.Handler().ServeHTTP(rec, req)
		if rec.Code != tc.code {
			t.Errorf("POST %s: %d, want %d (%s)", tc.target, rec.Code, tc.code, rec.Body)
			continue
		}
		msg := apiErrorOf(t, rec)
		if tc.code == 404 && !strings.HasPrefix(msg, "no link ") {
			t.Errorf("POST %s: %q", tc.target, msg)
		}
	}
	if strings.Contains(logs.String(), "operator command") {
		t.Errorf("a path trick reached a link:\n%s", logs)
	}
	// A query string is not part of the path.
	if rec := serve(a.Handler(), "POST", "/v1/links/l/pause?link=m", "", nil); rec.Code != 202 || !strings.Contains(logs.String(), "operator command: link=l command=pause") {
		t.Errorf("pause with a query: %d %s", rec.Code, logs)
	}
}

// Guards the body limit: up to MaxRequestBody the handler gets the whole
// body; beyond, 413, whether the client sends a Content-Length or not.
func TestAdminBodyLimit(t *testing.T) {
	g, err := newGuard(config.Admin{}, logtest.Logger(io.Discard), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	var (
		got     atomic.Int64
		readErr atomic.Value
	)
	h := g.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		readErr.Store(fmt.Sprint(err))
		got.Store(int64(len(b)))
		w.WriteHeader(http.StatusAccepted)
	}))
	full := bytes.Repeat([]byte("x"), MaxRequestBody)
	for _, tc := range []struct {
		name string
		body io.Reader
		code int
	}{
		{"at the limit with a length", bytes.NewReader(full), 202},
		{"at the limit without a length", io.MultiReader(bytes.NewReader(full)), 202},
		{"above the limit with a length", bytes.NewReader(append(full, 'x')), 413},
		{"above the limit without a length", io.MultiReader(bytes.NewReader(full), strings.NewReader("x")), 413},
	} {
		got.Store(-1)
		rec := serve(h, "POST", "/v1/links/l/failover", "", tc.body)
		if rec.Code != tc.code {
			t.Errorf("%s: %d, want %d", tc.name, rec.Code, tc.code)
		}
		switch {
		case tc.code == 202 && (got.Load() != MaxRequestBody || readErr.Load() != "<nil>"):
			t.Errorf("%s: the handler read %d bytes (%v)", tc.name, got.Load(), readErr.Load())
		case tc.code == 413 && got.Load() != -1:
			t.Errorf("%s: the handler ran", tc.name)
		case tc.code == 413 && apiErrorOf(t, rec) != fmt.Sprintf("the request body is larger than %d bytes", MaxRequestBody):
			t.Errorf("%s: %s", tc.name, rec.Body)
		}
	}
	// Outside /v1/ the body is cut at the limit as the handler reads it.
	got.Store(-1)
	serve(h, "POST", "/elsewhere", "", io.MultiReader(bytes.NewReader(full), strings.NewReader("xyz")))
	if got.Load() != MaxRequestBody || readErr.Load() != "http: request body too large" {
		t.Errorf("outside /v1/ the handler read %d bytes (%v), want %d and the limit's error", got.Load(), readErr.Load(), MaxRequestBody)
	}
}

// Guards the bound on concurrent admin requests: one more than
// MaxConcurrentAdminRequests is answered 503 with Retry-After, other paths
// are served meanwhile, and a slot frees when a request ends.
func TestAdminConcurrencyLimit(t *testing.T) {
	g, err := newGuard(config.Admin{}, logtest.Logger(io.Discard), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var inside sync.WaitGroup
	inside.Add(MaxConcurrentAdminRequests)
	h := g.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/links/slow" {
			inside.Done()
			<-release
		}
		w.WriteHeader(http.StatusOK)
	}))
	var done sync.WaitGroup
	for range MaxConcurrentAdminRequests {
		done.Go(func() {
			if rec := serve(h, "GET", "/v1/links/slow", "", nil); rec.Code != 200 {
				t.Errorf("a request within the limit: %d", rec.Code)
			}
		})
	}
	inside.Wait()
	rec := serve(h, "GET", "/v1/links", "", nil)
	if rec.Code != 503 || rec.Header().Get("Retry-After") != "1" || !strings.Contains(apiErrorOf(t, rec), "admin requests are being served") {
		t.Errorf("one request more: %d, Retry-After %q, %s", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
	if rec := serve(h, "GET", "/healthz", "", nil); rec.Code != 200 {
		t.Errorf("/healthz while the admin API is busy: %d", rec.Code)
	}
	close(release)
	done.Wait()
	if rec := serve(h, "GET", "/v1/links", "", nil); rec.Code != 200 {
		t.Errorf("after the slow requests ended: %d", rec.Code)
	}
	if n := testutil.ToFloat64(g.refused.WithLabelValues(refusedTooMany)); n != 1 {
		t.Errorf("too_many refusals counted %v, want 1", n)
	}
}

// Guards the server's timeouts: a client that sends its header slowly is
// cut off after ReadHeaderTimeout, not held open.
func TestHTTPServerTimeouts(t *testing.T) {
	a, _ := offlineAgent(t, nil)
	srv := a.server()
	if srv.ReadHeaderTimeout != 5*time.Second || srv.ReadTimeout != 10*time.Second || srv.WriteTimeout != 30*time.Second ||
		srv.IdleTimeout != 60*time.Second || srv.MaxHeaderBytes != 64<<10 || srv.Handler == nil {
		t.Errorf("server limits: header %v, read %v, write %v, idle %v, max header %d",
			srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout, srv.MaxHeaderBytes)
	}
	a.limits.readHeader = 200 * time.Millisecond
	srv = a.server()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	// The server's header deadline starts when it accepts the connection,
	// which may be before Dial returns here: the clock starts before Dial.
	start := time.Now()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n"); err != nil { // no end of header
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = io.ReadAll(c)
	if elapsed := time.Since(start); err != nil || elapsed < 200*time.Millisecond || elapsed > 5*time.Second {
		t.Errorf("slow header: connection closed after %v (%v), want after about 200ms", elapsed, err)
	}
}

// Guards the listener's TLS: with client_ca_file, a client without a
// certificate of that CA cannot connect; one with can; a rotated server
// certificate reaches new connections.
func TestAdminListenerTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "ca")
	other := tlstest.NewCA(t, dir, "other")
	certFile, keyFile := ca.Server(t, "admin")
	clientCert, _, _ := ca.ClientCert(t, "operator")
	strangerCert, _, _ := other.ClientCert(t, "stranger")
	a, logs := offlineAgent(t, []string{"ADMIN_TOKEN=" + rightToken}, "listen = \"0.0.0.0:0\"", "admin {",
		"  token_env = \"ADMIN_TOKEN\"", fmt.Sprintf("  cert_file = %q", certFile), fmt.Sprintf("  key_file = %q", keyFile),
		fmt.Sprintf("  client_ca_file = %q", ca.File), "}")
	a.certs.cert.CheckInterval, a.certs.key.CheckInterval = time.Millisecond, time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := a.server()
	go func() { _ = srv.Serve(tls.NewListener(ln, a.tls)) }()
	t.Cleanup(func() { _ = srv.Close() })

	// answer is what a request got: its status and the server's
	// certificate's common name.
	type answer struct {
		status int
		server string
	}
	get := func(certs ...tls.Certificate) (answer, error) {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool, Certificates: certs}, DisableKeepAlives: true}
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequest(http.MethodGet, "https://"+ln.Addr().String()+"/v1/links", nil)
		req.Header.Set("Authorization", "Bearer "+rightToken)
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			return answer{}, err
		}
		_ = resp.Body.Close()
		a := answer{status: resp.StatusCode}
		if resp.TLS != nil && len(resp.TLS.PeerCertificates) > 0 {
			a.server = resp.TLS.PeerCertificates[0].Subject.CommonName
		}
		return a, nil
	}
	if got, err := get(clientCert); err != nil || got.status != 200 {
		t.Fatalf("with a client certificate: %+v %v", got, err)
	}
	for name, certs := range map[string][]tls.Certificate{"no client certificate": nil, "another CA's certificate": {strangerCert}} {
		if _, err := get(certs...); err == nil {
			t.Errorf("%s: the request went through", name)
		}
	}

	// Rotation: a new certificate for new connections.
	newCert, newKey := ca.Server(t, "admin-2")
	for _, f := range [][2]string{{newCert, certFile}, {newKey, keyFile}} {
		b, _ := os.ReadFile(f[0])
		if err := os.WriteFile(f[1], b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(10 * time.Millisecond)
	got, err := get(clientCert)
	if err != nil || got.server != "admin-2" {
		t.Fatalf("after the certificate was rotated: %+v %v", got, err)
	}
	if !strings.Contains(logs.String(), "listener certificate changed") {
		t.Errorf("the rotation is not logged:\n%s", logs)
	}
}

// Guards New's refusals for the listener's files: each names the key and
// the file.
func TestNewRefusesBadListenerFiles(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "ca")
	certFile, keyFile := ca.Server(t, "admin")
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct {
		name  string
		lines []string
		want  string
	}{
		{"missing key file", []string{fmt.Sprintf("admin {\n    cert_file = %q\n    key_file = %q\n  }", certFile, missing)},
			fmt.Sprintf("agent.admin: load cert_file %s and key_file %s: stat %s: no such file or directory", certFile, missing, missing)},
		{"missing client CA file", []string{fmt.Sprintf("admin {\n    cert_file = %q\n    key_file = %q\n    client_ca_file = %q\n  }", certFile, keyFile, missing)},
			fmt.Sprintf("agent.admin: read client_ca_file: open %s: no such file or directory", missing)},
		{"client CA file without a certificate", []string{fmt.Sprintf("admin {\n    cert_file = %q\n    key_file = %q\n    client_ca_file = %q\n  }", certFile, keyFile, keyFile)},
			fmt.Sprintf("agent.admin: client_ca_file %s holds no PEM certificate", keyFile)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Parse("t.hcl", []byte(offlineHCL(tc.lines...)), nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := New(cfg, Deps{}); err == nil || err.Error() != tc.want {
				t.Errorf("New: %v\nwant %s", err, tc.want)
			}
		})
	}
}

// Guards the start-up log of an exposed listener: insecure_no_auth and a
// token over plain HTTP are warned about; how requests are authenticated
// is logged.
func TestRunWarnsAboutExposure(t *testing.T) {
	srcC, dstC := kafkatest.Pair(t)
	for _, tc := range []struct {
		name, admin string
		environ     []string
		warn, auth  string
	}{
		{"insecure_no_auth", `admin { insecure_no_auth = true }`, nil,
			"[WARN]  mirrord.agent: the admin API accepts requests without authentication from anyone who can reach agent.listen", "auth=none"},
		{"token without TLS", `admin { token_env = "ADMIN_TOKEN" }`, []string{"ADMIN_TOKEN=" + rightToken},
			"[WARN]  mirrord.agent: the admin token crosses the network unencrypted", `auth="token from environment variable ADMIN_TOKEN"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := newLogBuffer(t)
			src := strings.Replace(agentHCL(srcC, dstC, ""), `listen           = "127.0.0.1:0"`, `listen = "0.0.0.0:0"`+"\n  "+tc.admin, 1)
			r := start(t, newAgent(t, src, tc.environ, logs, nil))
			if !strings.Contains(logs.String(), tc.warn) || !strings.Contains(logs.String(), tc.auth) {
				t.Errorf("log lacks %q or %q:\n%s", tc.warn, tc.auth, logs)
			}
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
		})
	}
	// On loopback, no warning.
	logs := newLogBuffer(t)
	r := start(t, newAgent(t, agentHCL(srcC, dstC, ""), nil, logs, nil))
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "[WARN]  mirrord.agent: the admin") {
		t.Errorf("a warning on loopback:\n%s", logs)
	}
}
