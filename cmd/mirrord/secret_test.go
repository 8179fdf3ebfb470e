package main

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/internal/testkit/oauthtest"
)

// Distinctive secret values: none of them may appear anywhere mirrord
// writes or answers.
const (
	fileKafkaPassword = "File-Kafka-Pa55word-4417"
	envKafkaPassword  = "Env-Kafka-Pa55word-6652"
	adminTokenSecret  = "Admin-Token-Secret-8830"
	oauthClientSecret = "OAuth-Client-Secret-2291"
	presentedToken    = "Presented-Wrong-Token-5519" // sent by a client, wrong
	shortTokenSecret  = "Short-S3cr"
)

// secretForms are the ways a secret could leak: as is, URL-encoded, in
// hex, in base64 (how JSON encodes bytes), and inside the HTTP Basic
// credential of the OAuth client.
func secretForms() map[string]string {
	forms := map[string]string{}
	for _, s := range []string{fileKafkaPassword, envKafkaPassword, adminTokenSecret, oauthClientSecret, presentedToken, shortTokenSecret} {
		forms[s] = s
		forms[s+" (url)"] = url.QueryEscape(s)
		forms[s+" (hex)"] = hex.EncodeToString([]byte(s))
		forms[s+" (base64)"] = base64.StdEncoding.EncodeToString([]byte(s))
	}
	forms["basic credential"] = base64.StdEncoding.EncodeToString([]byte("mirrord-oc:" + url.QueryEscape(oauthClientSecret)))
	return forms
}

// outputs collects everything mirrord wrote or answered, by where it came
// from.
type outputs map[string]string

func (o outputs) add(where, s string) { o[where] += s }

// check fails the test for every secret found in any output.
func (o outputs) check(t *testing.T) {
	t.Helper()
	total := 0
	for where, out := range o {
		total += len(out)
		for name, form := range secretForms() {
			if strings.Contains(out, form) {
				t.Errorf("%s shows the secret %s:\n%s", where, name, out)
			}
		}
	}
	if len(o) < 20 || total < 10000 {
		t.Errorf("only %d outputs, %d bytes: the test did not exercise mirrord", len(o), total)
	}
}

// leakyEndpoint is a token endpoint that refuses the client and echoes
// everything it was sent in its error, the worst an authorization server
// could do.
func leakyEndpoint(t *testing.T) (string, func() int) {
	var requests int
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests++
		_ = r.ParseForm()
		user, pass, _ := r.BasicAuth()
		b, _ := json.Marshal(map[string]string{
			"error":             "invalid_client",
			"error_description": fmt.Sprintf("client %s with secret %s (%s; Authorization: %s) is not known", user, pass, mustUnescape(pass), r.Header.Get("Authorization")),
		})
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write(b)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String() + "/oauth2/token", func() int { return requests }
}

func mustUnescape(s string) string {
	u, _ := url.QueryUnescape(s)
	return u
}

// TestSecretsNeverInOutputs runs `mirrord validate`, `mirrord run`'s
// start-up failures, a `mirrord run` process (its whole log at debug, its
// admin API answers and finally its goroutine dump on SIGQUIT) and the
// commands that call the admin API, with a SASL password from a file and
// one from the environment, an admin token from a file and an OAuth client
// secret from a file that the token endpoint echoes back; and greps every
// output for the secrets. It guards against any secret reaching stdout,
// stderr, a log line, an HTTP body or a traceback.
func TestSecretsNeverInOutputs(t *testing.T) {
	srcC := kafkatest.NewCluster(t, kafkatest.SourceClusterID, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "mirror", fileKafkaPassword))
	dstC := kafkatest.NewCluster(t, kafkatest.DestClusterID, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "mirror", envKafkaPassword))
	ocC := kafkatest.NewCluster(t, "T0F1dGhDbHVzdGVySURfXw")
	oauthtest.Broker(ocC, nil, nil)
	endpoint, requests := leakyEndpoint(t)

	dir := t.TempDir()
	secretFile := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pwFile, tokenFile, csFile := secretFile("kafka-password", fileKafkaPassword), secretFile("admin-token", adminTokenSecret), secretFile("client-secret", oauthClientSecret)
	t.Setenv("DST_KAFKA_PASSWORD", envKafkaPassword)
	list := func(c *kfake.Cluster) string { b, _ := json.Marshal(c.ListenAddrs()); return string(b) }
	addr := freeAddr(t)
	good := fmt.Sprintf(`agent {
  listen     = %q
  log_level  = "debug"
  log_format = "json"
  admin { token_file = %q }
}
cluster "src" {
  bootstrap_servers = %s
  sasl {
    mechanism     = "SCRAM-SHA-512"
    username      = "mirror"
    password_file = %q
  }
}
cluster "dst" {
  bootstrap_servers = %s
  sasl {
    mechanism    = "SCRAM-SHA-256"
    username     = "mirror"
    password_env = "DST_KAFKA_PASSWORD"
  }
}
cluster "oc" {
  bootstrap_servers = %s
  sasl {
    mechanism          = "OAUTHBEARER"
    token_endpoint     = %q
    client_id          = "mirrord-oc"
    client_secret_file = %q
    extensions         = { logicalCluster = "lkc-1" }
  }
}
link "l" {
  source      = "src"
  destination = "dst"
  topics { include = ["orders"] }
  checkpoint_interval            = "200ms"
  session_timeout                = "3s"
  settle_delay                   = "200ms"
  discovery_interval             = "300ms"
  destination_replication_factor = 1
}
link "o" {
  source      = "oc"
  destination = "dst"
  topics { include = ["orders"] }
  state_topic = "__mirror_state_o"
  destination_replication_factor = 1
}
`, addr, tokenFile, list(srcC), pwFile, list(dstC), list(ocC), endpoint, csFile)
	goodFile := writeFile(t, "good.hcl", good)
	out := outputs{}
	record := func(name string, args ...string) int {
		code, stdout, stderr := runCmd(args...)
		out.add(name+" stdout", stdout)
		out.add(name+" stderr", stderr)
		return code
	}

	// validate, good and bad.
	if code := record("validate", "validate", "--config", goodFile); code != exitOK {
		t.Fatalf("validate of the good file: %d\n%s", code, out["validate stderr"])
	}
	bad := strings.NewReplacer(
		`password_file = `+fmt.Sprintf("%q", pwFile), `pasword = "`+fileKafkaPassword+`"`,
		`client_id          = "mirrord-oc"`, `client_id = "mirrord-oc"`+"\n    client_secret = \""+oauthClientSecret+"\"",
		`admin { token_file = `+fmt.Sprintf("%q", tokenFile)+` }`, `admin { token = "`+adminTokenSecret+`" }`,
	).Replace(good)
	badFile := writeFile(t, "bad.hcl", bad)
	if code := record("validate bad", "validate", "--config", badFile); code != exitUsage || !strings.Contains(out["validate bad stderr"], "agent.admin.token: not allowed") {
		t.Fatalf("validate of the bad file: %d\n%s", code, out["validate bad stderr"])
	}

	// run's start-up failures.
	if code := record("run bad", "run", "--config", badFile); code != exitUsage {
		t.Errorf("run of the bad file: %d", code)
	}
	t.Setenv("MIRRORD_CLUSTER__src__SASL__PASSWORD", fileKafkaPassword)
	if code := record("run override", "run", "--config", goodFile); code != exitUsage || !strings.Contains(out["run override stderr"], "password and password_file are both set") {
		t.Errorf("run with a password override: %d\n%s", code, out["run override stderr"])
	}
	_ = os.Unsetenv("MIRRORD_CLUSTER__src__SASL__PASSWORD") // t.Setenv above restores it at the end
	t.Setenv("SHORT_TOKEN", shortTokenSecret)
	short := writeFile(t, "short.hcl", strings.Replace(good, `admin { token_file = `+fmt.Sprintf("%q", tokenFile)+` }`, `admin { token_env = "SHORT_TOKEN" }`, 1))
	if code := record("run short token", "run", "--config", short); code != exitUsage || !strings.Contains(out["run short token stderr"], "shorter than 16 characters") {
		t.Errorf("run with a short token: %d\n%s", code, out["run short token stderr"])
	}
	noCert := writeFile(t, "nocert.hcl", strings.Replace(good, `admin { token_file = `+fmt.Sprintf("%q", tokenFile)+` }`,
		"admin {\n    cert_file = \"/nonexistent/admin.pem\"\n    key_file = \"/nonexistent/admin-key.pem\"\n    token_file = "+fmt.Sprintf("%q", tokenFile)+"\n  }", 1))
	if code := record("run no cert", "run", "--config", noCert); code != exitUsage || !strings.Contains(out["run no cert stderr"], "agent.admin: load cert_file") {
		t.Errorf("run with a missing listener certificate: %d\n%s", code, out["run no cert stderr"])
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	busy := writeFile(t, "busy.hcl", strings.Replace(good, addr, ln.Addr().String(), 1))
	if code := record("run busy", "run", "--config", busy); code != exitError {
		t.Errorf("run on a busy address: %d", code)
	}
	_ = ln.Close()

	// A running agent: link l mirrors, link o cannot get a token.
	p := startMirrordEnv(t, []string{"DST_KAFKA_PASSWORD=" + envKafkaPassword}, "run", "--config", goodFile)
	p.waitLog(t, "http listening")
	waitLinks(t, addr, func(links map[string]linkView) bool {
		return links["l"].State == "MIRRORING" && links["o"].LastError != ""
	})
	if requests() == 0 {
		t.Fatal("the token endpoint was never asked: the test did not exercise the client secret")
	}
	for _, req := range []struct{ method, path, token string }{
		{"GET", "/v1/links", adminTokenSecret},
		{"GET", "/v1/links/o", adminTokenSecret},
		{"GET", "/v1/links/nope", adminTokenSecret},
		{"GET", "/v1/links", ""},
		{"GET", "/v1/links", presentedToken},
		{"POST", "/v1/links/l/pause", presentedToken},
		{"POST", "/v1/links/a%2Fb/pause", adminTokenSecret},
		{"GET", "/readyz", ""},
		{"GET", "/healthz", ""},
		{"GET", "/metrics", ""},
		{"GET", "/", ""},
	} {
		code, hdr, body := httpCall(t, req.method, "http://"+addr+req.path, req.token)
		out.add(fmt.Sprintf("HTTP %s %s (%d)", req.method, req.path, code), hdr+body)
	}
	record("links", "links", "--config", goodFile)
	record("links --json", "links", "--config", goodFile, "--json")
	record("pause", "pause", "--config", goodFile, "--link", "l")
	record("resume", "resume", "--config", goodFile, "--link", "l")
	record("pause unknown", "pause", "--config", goodFile, "--link", "nope")
	wrongFile := secretFile("presented-token", presentedToken)
	wrong := writeFile(t, "wrong.hcl", strings.Replace(good, tokenFile, wrongFile, 1))
	if code := record("links wrong token", "links", "--config", wrong); code != exitError {
		t.Errorf("links with a wrong token: %d", code)
	}
	if !strings.Contains(out["links --json stdout"], "token endpoint") {
		t.Errorf("link o's last error does not show the token endpoint's refusal:\n%s", out["links --json stdout"])
	}

	// Last, the goroutine dump of a SIGQUIT: what a panic prints.
	p.signal(t, syscall.SIGQUIT)
	p.wait(t)
	out.add("mirrord run stderr", p.stderr())
	if !strings.Contains(p.stderr(), "goroutine ") || !strings.Contains(p.stderr(), `"@message":"http listening"`) {
		t.Errorf("the process's output lacks its log or its goroutine dump")
	}
	out.check(t)
}

// linkView is what the test reads of a link's status.
type linkView struct {
	State     string `json:"state"`
	LastError string `json:"last_error"`
}

// waitLinks polls GET /v1/links with the admin token until done holds.
func waitLinks(t *testing.T, addr string, done func(map[string]linkView) bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	var last string
	for time.Now().Before(deadline) {
		code, _, body := httpCall(t, "GET", "http://"+addr+"/v1/links", adminTokenSecret)
		var links []struct {
			Name string `json:"name"`
			linkView
		}
		if err := json.Unmarshal([]byte(body), &links); code != 200 || err != nil {
			t.Fatalf("GET /v1/links: %d %v %s", code, err, body)
		}
		byName := map[string]linkView{}
		for _, l := range links {
			byName[l.Name] = l.linkView
		}
		if done(byName) {
			return
		}
		last = body
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the links did not get there; last status %s", last)
}

// httpCall sends a request with a bearer token (if any) and returns the
// status, the headers as text and the body.
func httpCall(t *testing.T, method, target, token string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, target, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var hdr strings.Builder
	_ = resp.Header.Write(&hdr)
	return resp.StatusCode, hdr.String(), string(body)
}
