package agent

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/internal/secret"
)

// Limits of the HTTP listener.
const (
	// MaxRequestBody is the largest request body accepted; a larger one
	// is answered 413.
	MaxRequestBody = 64 << 10
	// MaxConcurrentAdminRequests bounds the requests under /v1/ served
	// at once; one more is answered 503 with Retry-After.
	MaxConcurrentAdminRequests = 16
)

// httpLimits are the HTTP server's timeouts and header limit; a field of
// the Agent so that tests can shorten them.
type httpLimits struct {
	readHeader, read, write, idle time.Duration
	maxHeaderBytes                int
}

var defaultHTTPLimits = httpLimits{
	readHeader:     5 * time.Second,
	read:           10 * time.Second,
	write:          30 * time.Second,
	idle:           60 * time.Second,
	maxHeaderBytes: 64 << 10,
}

// Reasons of mirrord_http_requests_refused_total.
const (
	refusedUnauthenticated  = "unauthenticated"   // 401: no bearer token
	refusedForbidden        = "forbidden"         // 403: a wrong token
	refusedTokenUnavailable = "token_unavailable" // 503: the token file was never readable
	refusedBadPath          = "bad_path"          // 400: an escaped or non-canonical path
	refusedTooMany          = "too_many"          // 503: MaxConcurrentAdminRequests reached
	refusedTooLarge         = "too_large"         // 413: a body above MaxRequestBody
	refusedBadBody          = "bad_body"          // 400: the body could not be read
)

// guard is the HTTP listener's access control and request hygiene,
// around every route:
//
//   - Under /v1/ (the admin API, whatever its endpoints and methods) and,
//     with protect_metrics, on /metrics, a configured token is required:
//     401 with WWW-Authenticate: Bearer without one, 403 for a wrong one,
//     compared in constant time. Every other path (/healthz, /readyz, the
//     status page and its assets) is open.
//   - Under /v1/ the path must be literal (nothing percent-encoded, nothing
//     that needs it) and canonical (400 otherwise), so that a link name is
//     matched exactly as written: ServeMux would decode %2F, %6C or %00
//     into a name, and redirect "..", "." and "//" to the cleaned path
//     with a 307 that keeps the method.
//   - At most MaxConcurrentAdminRequests under /v1/ at once (503 with
//     Retry-After beyond), and their bodies read in full up to
//     MaxRequestBody (413 beyond) before the handler runs; elsewhere bodies
//     are cut at MaxRequestBody.
//
// Refusals are JSON {"error": "..."} and counted in
// mirrord_http_requests_refused_total{reason}.
type guard struct {
	token          *adminToken // nil: no token configured
	protectMetrics bool
	sem            chan struct{}
	maxBody        int64
	log            hclog.Logger
	refused        *prometheus.CounterVec
}

func newGuard(ad config.Admin, log hclog.Logger, reg prometheus.Registerer) (*guard, error) {
	g := &guard{
		protectMetrics: ad.ProtectMetrics,
		sem:            make(chan struct{}, MaxConcurrentAdminRequests),
		maxBody:        MaxRequestBody,
		log:            log,
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "mirrord",
			Name:      "http_requests_refused_total",
			Help:      "HTTP requests refused before a handler ran, by reason: unauthenticated (401), forbidden (403), token_unavailable, too_many (503), bad_path, bad_body (400), too_large (413).",
		}, []string{"reason"}),
	}
	for _, r := range []string{refusedUnauthenticated, refusedForbidden, refusedTokenUnavailable, refusedBadPath, refusedTooMany, refusedTooLarge, refusedBadBody} {
		g.refused.WithLabelValues(r)
	}
	if err := reg.Register(g.refused); err != nil {
		return nil, fmt.Errorf("register http metrics: %w", err)
	}
	switch {
	case ad.TokenFile != "":
		g.token = &adminToken{file: &secret.File{Path: ad.TokenFile}, log: log}
		if _, ok := g.token.get(); !ok {
			return nil, fmt.Errorf("agent.admin.token_file %s: cannot read the admin token", ad.TokenFile)
		}
	case ad.Token != "":
		g.token = &adminToken{static: ad.Token}
	}
	return g, nil
}

// wrap returns next behind the guard.
func (g *guard) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		p := r.URL.Path
		api := underAPI(p) || underAPI(path.Clean(p))
		protected := api || (g.protectMetrics && (p == "/metrics" || path.Clean(p) == "/metrics"))
		if protected && g.token != nil && !g.authorize(w, r) {
			return
		}
		if !api {
			r.Body = http.MaxBytesReader(w, r.Body, g.maxBody)
			next.ServeHTTP(w, r)
			return
		}
		if r.URL.EscapedPath() != p {
			g.refuse(w, http.StatusBadRequest, refusedBadPath,
				fmt.Sprintf("the path %q has escaped characters; write link names as they are (letters, digits, '-' and '_')", r.URL.EscapedPath()))
			return
		}
		if clean := path.Clean(p); clean != p {
			g.refuse(w, http.StatusBadRequest, refusedBadPath, fmt.Sprintf("the path %q is not canonical; the admin API does not clean or redirect paths", p))
			return
		}
		select {
		case g.sem <- struct{}{}:
			defer func() { <-g.sem }()
		default:
			w.Header().Set("Retry-After", "1")
			g.refuse(w, http.StatusServiceUnavailable, refusedTooMany,
				fmt.Sprintf("%d admin requests are being served; retry in a second", MaxConcurrentAdminRequests))
			return
		}
		if r.ContentLength > g.maxBody {
			g.refuseBody(w)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, g.maxBody+1))
		switch {
		case err != nil:
			g.refuse(w, http.StatusBadRequest, refusedBadBody, "cannot read the request body")
			return
		case int64(len(body)) > g.maxBody:
			g.refuseBody(w)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}

func underAPI(p string) bool { return p == "/v1" || strings.HasPrefix(p, "/v1/") }

// authorize checks the bearer token; it answers and returns false if the
// request may not go on.
func (g *guard) authorize(w http.ResponseWriter, r *http.Request) bool {
	want, ok := g.token.get()
	if !ok {
		g.refuse(w, http.StatusServiceUnavailable, refusedTokenUnavailable, "the agent cannot read its admin token; see its log")
		return false
	}
	scheme, got, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	got = strings.TrimSpace(got)
	if !strings.EqualFold(scheme, "Bearer") || got == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="mirrord"`)
		g.log.Debug("admin request without a token", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
		g.refuse(w, http.StatusUnauthorized, refusedUnauthenticated,
			"this endpoint needs the admin token: send the header \"Authorization: Bearer <token>\" with the token of the agent's agent.admin.token_env or agent.admin.token_file")
		return false
	}
	// Hashes have one length, so the comparison's time says nothing about
	// the token's length either.
	a, b := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	if subtle.ConstantTimeCompare(a[:], b[:]) != 1 {
		g.log.Warn("admin request with a wrong token refused", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
		g.refuse(w, http.StatusForbidden, refusedForbidden, "the admin token is wrong")
		return false
	}
	return true
}

func (g *guard) refuseBody(w http.ResponseWriter) {
	g.refuse(w, http.StatusRequestEntityTooLarge, refusedTooLarge, fmt.Sprintf("the request body is larger than %d bytes", g.maxBody))
}

func (g *guard) refuse(w http.ResponseWriter, code int, reason, msg string) {
	g.refused.WithLabelValues(reason).Inc()
	writeJSON(w, code, apiError{Error: msg})
}

// adminToken is the token requests must carry: fixed (token_env, or set
// in code), or the content of token_file, read again when it changes.
type adminToken struct {
	static string
	file   *secret.File
	log    hclog.Logger

	mu      sync.Mutex
	version uint64 // of the file's content in use
}

// get returns the token; ok is false when there is none (a token file
// that was never readable): requests are then refused.
func (t *adminToken) get() (token string, ok bool) {
	if t.file == nil {
		return t.static, true
	}
	tok, v, err := t.file.Secret()
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case tok == "":
		t.log.Error("cannot read the admin token; admin requests are refused", "token_file", t.file.Path, "error", err)
		return "", false
	case err != nil:
		t.log.Warn("cannot read the admin token file again; the token read before stays in force", "token_file", t.file.Path, "error", err)
	case t.version != 0 && v != t.version:
		t.log.Info("admin token file changed; the new token is in force", "token_file", t.file.Path)
	}
	t.version = v
	return tok, true
}

// listenerTLS returns the TLS configuration of the HTTP listener and its
// certificate, or nils without cert_file. The certificate and key are read now and again when
// they change; the client CAs are read now.
func listenerTLS(ad config.Admin, log hclog.Logger) (*tls.Config, *keyPair, error) {
	if ad.CertFile == "" {
		return nil, nil, nil
	}
	kp := &keyPair{cert: secret.NewFile(ad.CertFile), key: secret.NewFile(ad.KeyFile), log: log}
	if _, err := kp.get(); err != nil {
		return nil, nil, fmt.Errorf("agent.admin: load cert_file %s and key_file %s: %w", ad.CertFile, ad.KeyFile, err)
	}
	tc := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return kp.get() },
	}
	if ad.ClientCAFile != "" {
		pem, err := os.ReadFile(ad.ClientCAFile)
		if err != nil {
			return nil, nil, fmt.Errorf("agent.admin: read client_ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("agent.admin: client_ca_file %s holds no PEM certificate", ad.ClientCAFile)
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc, kp, nil
}

// keyPair is the listener's certificate, parsed again when its files
// change; a pair that does not parse (a rotation half done) keeps the
// previous one until the files change again.
type keyPair struct {
	cert, key *secret.File
	log       hclog.Logger

	mu          sync.Mutex
	current     *tls.Certificate
	certV, keyV uint64 // the versions last parsed, well or not
}

func (k *keyPair) get() (*tls.Certificate, error) {
	certPEM, cv, cerr := k.cert.Load()
	keyPEM, kv, kerr := k.key.Load()
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := firstErr(cerr, kerr); err != nil {
		if k.current == nil {
			return nil, err
		}
		k.log.Warn("cannot read the listener's certificate files again; the certificate read before stays in use", "error", err)
		return k.current, nil
	}
	if k.current != nil && cv == k.certV && kv == k.keyV {
		return k.current, nil
	}
	k.certV, k.keyV = cv, kv
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		if k.current == nil {
			return nil, err
		}
		k.log.Warn("the listener's new certificate and key do not make a pair; the certificate read before stays in use",
			"cert_file", k.cert.Path, "key_file", k.key.Path, "error", err)
		return k.current, nil
	}
	if k.current != nil {
		k.log.Info("listener certificate changed; new connections get the new one", "cert_file", k.cert.Path)
	}
	k.current = &cert
	return k.current, nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
