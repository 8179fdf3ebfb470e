package oauth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed83556561/mirrord/internal/secret"
)

// clientSecret has characters that form encoding changes, so that the test
// sees the RFC 6749 2.3.1 encoding applied.
const clientSecret = "Cl1ent:S3cret/+&=%"

// clock is a manual clock, safe for concurrent use.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)} }
func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// endpoint is a token endpoint for the tests: it checks each request the
// way an authorization server would and answers with what respond says.
type endpoint struct {
	t        *testing.T
	srv      *httptest.Server
	requests atomic.Int64
	respond  atomic.Value // func(n int64) (code int, body string)
	delay    time.Duration

	mu      sync.Mutex
	secrets []string // the client secret of each request
}

func newEndpoint(t *testing.T, scope string) *endpoint {
	e := &endpoint{t: t}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := e.requests.Add(1)
		// What every authorization server checks.
		user, pass, ok := r.BasicAuth()
		id, _ := url.QueryUnescape(user)
		sec, _ := url.QueryUnescape(pass)
		e.mu.Lock()
		e.secrets = append(e.secrets, sec)
		e.mu.Unlock()
		if err := r.ParseForm(); err != nil {
			t.Errorf("request %d: form: %v", n, err)
		}
		switch {
		case r.Method != http.MethodPost || r.URL.Path != "/oauth2/token":
			t.Errorf("request %d: %s %s", n, r.Method, r.URL.Path)
		case r.Header.Get("Content-Type") != "application/x-www-form-urlencoded":
			t.Errorf("request %d: content type %q", n, r.Header.Get("Content-Type"))
		case r.PostForm.Get("grant_type") != "client_credentials" || r.PostForm.Get("scope") != scope:
			t.Errorf("request %d: form %v", n, r.PostForm)
		case !ok || id != "mirrord-client" || (sec != clientSecret && sec != "rotated-secret"):
			t.Errorf("request %d: basic auth %v %q %q", n, ok, user, pass)
		}
		time.Sleep(e.delay)
		code, body := e.respond.Load().(func(int64) (int, string))(n)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		fmt.Fprint(w, body)
	}))
	t.Cleanup(e.srv.Close)
	e.answer(func(n int64) (int, string) { return 200, tokenJSON(fmt.Sprintf("token-%d", n), 3600) })
	return e
}

func (e *endpoint) answer(f func(n int64) (int, string)) { e.respond.Store(f) }
func (e *endpoint) url() string                          { return e.srv.URL + "/oauth2/token" }

func tokenJSON(token string, expiresIn any) string {
	b, _ := json.Marshal(map[string]any{"access_token": token, "token_type": "Bearer", "expires_in": expiresIn})
	return string(b)
}

func staticSecret() (string, error) { return clientSecret, nil }

func source(e *endpoint, c *clock, scope string) *ClientCredentials {
	s := NewClientCredentials(e.url(), "mirrord-client", staticSecret, scope)
	s.Now = c.now
	return s
}

func ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func wantToken(t *testing.T, s Source, want string) {
	t.Helper()
	got, err := s.Token(ctx(t))
	if err != nil || got != want {
		t.Fatalf("Token() = %q, %v; want %q", got, err, want)
	}
}

// Guards the client-credentials request (method, form, scope, client
// authentication as RFC 6749 encodes it) and the cache: one request for
// many connections.
func TestClientCredentialsRequestAndCache(t *testing.T) {
	e := newEndpoint(t, "kafka write")
	c := newClock()
	s := source(e, c, "kafka write")
	wantToken(t, s, "token-1")
	c.advance(47 * time.Minute)
	wantToken(t, s, "token-1")
	if n := e.requests.Load(); n != 1 {
		t.Errorf("%d requests for a cached token, want 1", n)
	}
}

// Guards the refresh: a token is used until a fifth of its lifetime (at
// most five minutes) before it expires, then a new one is asked for;
// expires_in may be a string.
func TestClientCredentialsRefreshBeforeExpiry(t *testing.T) {
	e := newEndpoint(t, "")
	e.answer(func(n int64) (int, string) { return 200, tokenJSON(fmt.Sprintf("token-%d", n), "100") })
	c := newClock()
	s := source(e, c, "")
	wantToken(t, s, "token-1")
	c.advance(79 * time.Second)
	wantToken(t, s, "token-1")
	c.advance(time.Second) // 80s: a fifth of 100s before expiry
	wantToken(t, s, "token-2")

	// An hour-long token is refreshed five minutes before it expires.
	e.answer(func(n int64) (int, string) { return 200, tokenJSON(fmt.Sprintf("token-%d", n), 3600) })
	c.advance(80 * time.Second)
	wantToken(t, s, "token-3")
	c.advance(55*time.Minute - time.Second)
	wantToken(t, s, "token-3")
	c.advance(time.Second)
	wantToken(t, s, "token-4")
}

// Guards a failed refresh: the previous token goes on until it expires,
// the endpoint is not asked again before RetryAfterFailure, and once the
// token has expired the failure is the caller's.
func TestClientCredentialsFailedRefresh(t *testing.T) {
	e := newEndpoint(t, "")
	e.answer(func(n int64) (int, string) { return 200, tokenJSON("token-1", 100) })
	c := newClock()
	s := source(e, c, "")
	wantToken(t, s, "token-1")

	e.answer(func(int64) (int, string) { return 503, `{"error":"temporarily_unavailable"}` })
	c.advance(85 * time.Second)
	wantToken(t, s, "token-1")
	c.advance(RetryAfterFailure - time.Second)
	wantToken(t, s, "token-1")
	if n := e.requests.Load(); n != 2 {
		t.Errorf("%d requests, want 2: a failed refresh is retried only after %v", n, RetryAfterFailure)
	}
	c.advance(time.Second)
	wantToken(t, s, "token-1")
	if n := e.requests.Load(); n != 3 {
		t.Errorf("%d requests, want 3", n)
	}
	c.advance(10 * time.Second) // past expiry
	if _, err := s.Token(ctx(t)); !errors.Is(err, ErrTokenEndpoint) || !strings.Contains(err.Error(), "503") {
		t.Errorf("after expiry: %v, want the endpoint's 503", err)
	}
}

// Guards the token's lifetime when the endpoint gives no expires_in: the
// exp claim of a JWT, else UnknownLifetime; an expired JWT is refused.
func TestClientCredentialsLifetimeWithoutExpiresIn(t *testing.T) {
	c := newClock()
	jwt := func(exp time.Time) string {
		payload, _ := json.Marshal(map[string]any{"sub": "mirrord", "exp": exp.Unix()})
		return "eyJhbGciOiJub25lIn0." + base64.RawURLEncoding.EncodeToString(payload) + ".sig"
	}
	e := newEndpoint(t, "")
	var tokens []string
	e.answer(func(n int64) (int, string) {
		b, _ := json.Marshal(map[string]any{"access_token": tokens[n-1], "token_type": "bearer"})
		return 200, string(b)
	})
	tokens = []string{jwt(c.now().Add(10 * time.Minute)), "opaque-token", jwt(c.now().Add(-time.Second))}
	s := source(e, c, "")
	wantToken(t, s, tokens[0])
	c.advance(8*time.Minute - time.Second) // refreshed after 4/5 of 10 minutes
	wantToken(t, s, tokens[0])
	c.advance(time.Second)
	wantToken(t, s, tokens[1])
	c.advance(UnknownLifetime * 4 / 5)
	c.advance(UnknownLifetime) // the opaque token expired
	if _, err := s.Token(ctx(t)); !errors.Is(err, ErrBadTokenResponse) || !strings.Contains(err.Error(), "exp claim is in the past") {
		t.Errorf("expired JWT: %v", err)
	}
}

// Guards the errors: each names the endpoint and the client and says what
// the endpoint said, and none shows the client secret, not even when the
// endpoint echoes it.
func TestClientCredentialsErrors(t *testing.T) {
	basic := base64.StdEncoding.EncodeToString([]byte("mirrord-client:" + url.QueryEscape(clientSecret)))
	cases := []struct {
		name     string
		code     int
		body     string
		sentinel error
		want     string // after "token endpoint URL (client "mirrord-client")"
	}{
		{"401 invalid client echoing the secret", 401,
			`{"error":"invalid_client","error_description":"secret ` + clientSecret + ` (` + url.QueryEscape(clientSecret) + `, ` + basic + `) is wrong"}`,
			ErrTokenEndpoint, ` answered 401 Unauthorized: "invalid_client: secret [redacted] ([redacted], [redacted]) is wrong"`},
		{"400 invalid scope", 400, `{"error":"invalid_scope"}`, ErrTokenEndpoint, ` answered 400 Bad Request: "invalid_scope"`},
		{"500 with an HTML page", 500, `<html>` + clientSecret + `</html>`, ErrTokenEndpoint, ` answered 500 Internal Server Error`},
		{"200 that is not JSON", 200, `ok`, ErrBadTokenResponse, `: the answer is not JSON: invalid character 'o' looking for beginning of value`},
		{"200 without a token", 200, `{"token_type":"Bearer"}`, ErrBadTokenResponse, `: the answer has no access_token`},
		{"200 with another token type", 200, `{"access_token":"t","token_type":"mac"}`, ErrBadTokenResponse, `: token_type is "mac", not Bearer`},
		{"200 with a bad expires_in", 200, `{"access_token":"t","expires_in":-5}`, ErrBadTokenResponse, `: expires_in "-5" is not a positive number of seconds`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEndpoint(t, "")
			e.answer(func(int64) (int, string) { return tc.code, tc.body })
			_, err := source(e, newClock(), "").Token(ctx(t))
			want := fmt.Sprintf("token endpoint %s (client %q)", e.url(), "mirrord-client") + tc.want
			if !errors.Is(err, tc.sentinel) || !strings.HasSuffix(err.Error(), want) {
				t.Fatalf("error:\n%v\nwant it to match %v and end with\n%s", err, tc.sentinel, want)
			}
			for _, s := range []string{clientSecret, url.QueryEscape(clientSecret), basic} {
				if strings.Contains(err.Error(), s) {
					t.Errorf("the error shows the secret: %v", err)
				}
			}
		})
	}
}

// Guards the transport errors: a redirect is not followed (it would carry
// the credentials elsewhere), an endpoint that does not answer is named,
// and a secret that cannot be read is said so.
func TestClientCredentialsTransportErrors(t *testing.T) {
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/token" {
			t.Errorf("the redirect was followed to %s", r.URL.Path)
		}
		http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
	}))
	defer redirect.Close()
	_, err := NewClientCredentials(redirect.URL+"/token", "c", staticSecret, "").Token(ctx(t))
	if !errors.Is(err, ErrTokenEndpoint) || !strings.Contains(err.Error(), `answered 307 Temporary Redirect (a redirect to "/elsewhere"; set token_endpoint to the URL that answers)`) {
		t.Errorf("redirect: %v", err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/token"
	_ = ln.Close()
	_, err = NewClientCredentials(closed, "c", staticSecret, "").Token(ctx(t))
	if !errors.Is(err, ErrTokenEndpoint) || !strings.HasPrefix(err.Error(), fmt.Sprintf(`token endpoint failed: token endpoint %s (client "c"): dial tcp `, closed)) ||
		!strings.Contains(err.Error(), "connection refused") {
		t.Errorf("closed endpoint: %v", err)
	}

	_, err = NewClientCredentials(closed, "c", func() (string, error) { return "", errors.New("cannot read /s") }, "").Token(ctx(t))
	if err == nil || err.Error() != fmt.Sprintf(`token endpoint %s (client "c"): client secret: cannot read /s`, closed) {
		t.Errorf("secret error: %v", err)
	}
}

// Guards the client secret read for every request: a rotated secret file
// is used for the next token.
func TestClientCredentialsRotatedSecret(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(path, []byte(clientSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newClock()
	f := &secret.File{Path: path, Now: c.now}
	e := newEndpoint(t, "")
	s := NewClientCredentials(e.url(), "mirrord-client", func() (string, error) {
		v, _, err := f.Secret()
		if v == "" {
			return "", err
		}
		return v, nil
	}, "")
	s.Now = c.now
	wantToken(t, s, "token-1")
	if err := os.WriteFile(path, []byte("rotated-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.advance(time.Hour)
	wantToken(t, s, "token-2")
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.secrets) != 2 || e.secrets[0] != clientSecret || e.secrets[1] != "rotated-secret" {
		t.Errorf("the endpoint saw other secrets than the file's two")
	}
}

// Guards against a stampede: connections that need a token at the same
// time wait for one request, and a caller whose context ends stops
// waiting.
func TestClientCredentialsOneRequestAtATime(t *testing.T) {
	e := newEndpoint(t, "")
	e.delay = 200 * time.Millisecond
	s := NewClientCredentials(e.url(), "mirrord-client", staticSecret, "")
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if tok, err := s.Token(context.Background()); err != nil || tok != "token-1" {
				t.Errorf("Token() = %q, %v", tok, err)
			}
		})
	}
	wg.Wait()
	if n := e.requests.Load(); n != 1 {
		t.Errorf("%d requests for 20 concurrent callers, want 1", n)
	}

	slow := NewClientCredentials(e.url(), "mirrord-client", staticSecret, "")
	go func() { _, _ = slow.Token(context.Background()) }()
	time.Sleep(50 * time.Millisecond) // the first caller holds the request
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := slow.Token(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("waiting caller with an ended context: %v", err)
	}
}

// Guards FileToken: the file's token, a rotation picked up, an unreadable
// file without an earlier token an error that names it.
func TestFileToken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	c := newClock()
	s := FileToken{File: &secret.File{Path: path, Now: c.now}}
	if _, err := s.Token(ctx(t)); !errors.Is(err, ErrTokenFile) || !strings.Contains(err.Error(), path) {
		t.Errorf("missing file: %v", err)
	}
	if err := os.WriteFile(path, []byte("first-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.advance(time.Second)
	wantToken(t, s, "first-token")
	if err := os.WriteFile(path, []byte("second-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.advance(time.Second)
	wantToken(t, s, "second-token")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c.advance(time.Second)
	wantToken(t, s, "second-token") // a broken rotation keeps the last token
}

// Guards the printed forms of a ClientCredentials: no secret, no token.
func TestClientCredentialsNeverPrintsSecrets(t *testing.T) {
	e := newEndpoint(t, "")
	s := NewClientCredentials(e.url(), "mirrord-client", staticSecret, "")
	wantToken(t, s, "token-1")
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q"} {
		if out := fmt.Sprintf(verb, s); strings.Contains(out, "token-1") || strings.Contains(out, clientSecret) {
			t.Errorf("%s shows a secret: %s", verb, out)
		}
	}
}
