// Package oauthtest is what tests of SASL/OAUTHBEARER need: unsecured JWTs
// of the form Kafka's OAuthBearerUnsecuredValidatorCallbackHandler
// accepts, a token endpoint for the client-credentials grant that issues
// them, and the broker's half of OAUTHBEARER on a kfake cluster (kfake has
// no OAUTHBEARER of its own).
//
// Endpoint runs an httptest server; the test's cleanup closes it. Broker
// installs kfake control functions that run on kfake's own goroutine.
package oauthtest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// UnsecuredJWT returns an unsigned JWT ("alg": "none", an empty signature)
// for subject, issued at iat and expiring after lifetime, with the scopes
// as a space-separated "scope" claim: what Kafka's unsecured validator
// (listener.name.<l>.oauthbearer.sasl.server.callback.handler.class =
// OAuthBearerUnsecuredValidatorCallbackHandler) accepts, with "sub" as the
// principal.
func UnsecuredJWT(subject string, iat time.Time, lifetime time.Duration, scopes ...string) string {
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	claims := map[string]any{"sub": subject, "iat": iat.Unix(), "exp": iat.Add(lifetime).Unix()}
	if len(scopes) > 0 {
		claims["scope"] = strings.Join(scopes, " ")
	}
	return enc(map[string]string{"alg": "none"}) + "." + enc(claims) + "."
}

// Claims decodes the claims of a JWT without checking a signature.
func Claims(token string) (map[string]any, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil, fmt.Errorf("a JWT has three parts, this one %d", len(parts))
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil, fmt.Errorf("claims: %w", err)
	}
	var claims map[string]any
	if err := json.Unmarshal(b, &claims); err != nil {
		return nil, fmt.Errorf("claims: %w", err)
	}
	return claims, nil
}

// Endpoint is a token endpoint for the client-credentials grant: it checks
// grant_type and the client's HTTP Basic credentials (RFC 6749 2.3.1) and
// answers with an unsecured JWT for the client ID, or 401 invalid_client.
type Endpoint struct {
	ClientID, Secret string
	Lifetime         time.Duration // of the tokens; default one hour

	srv    *httptest.Server
	mu     sync.Mutex
	issued []string // tokens, in order
	asked  int      // requests, refused ones included
}

// NewEndpoint starts an endpoint on 127.0.0.1 for one client; the test's
// cleanup stops it.
func NewEndpoint(t testing.TB, clientID, secret string) *Endpoint {
	e := &Endpoint{ClientID: clientID, Secret: secret, Lifetime: time.Hour}
	e.srv = httptest.NewServer(http.HandlerFunc(e.serve))
	t.Cleanup(e.srv.Close)
	return e
}

// URL is the endpoint's token URL (http on 127.0.0.1, which the
// configuration accepts for a loopback address).
func (e *Endpoint) URL() string { return e.srv.URL + "/oauth2/token" }

// Issued returns the tokens issued so far, in order.
func (e *Endpoint) Issued() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.issued...)
}

// Requests is how many requests the endpoint answered.
func (e *Endpoint) Requests() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.asked
}

func (e *Endpoint) serve(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.asked++
	w.Header().Set("Content-Type", "application/json")
	user, pass, ok := r.BasicAuth()
	id, _ := url.QueryUnescape(user)
	secret, _ := url.QueryUnescape(pass)
	if r.Method != http.MethodPost || r.URL.Path != "/oauth2/token" || r.ParseForm() != nil || r.PostForm.Get("grant_type") != "client_credentials" {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"error":"unsupported_grant_type"}`)
		return
	}
	if !ok || id != e.ClientID || secret != e.Secret {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":"invalid_client","error_description":"client authentication failed"}`)
		return
	}
	var scopes []string
	if s := r.PostForm.Get("scope"); s != "" {
		scopes = strings.Fields(s)
	}
	tok := UnsecuredJWT(id, time.Now(), e.Lifetime, scopes...)
	e.issued = append(e.issued, tok)
	b, _ := json.Marshal(map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": int(e.Lifetime.Seconds())})
	_, _ = w.Write(b)
}

// Login is one OAUTHBEARER client-first message as a broker receives it.
type Login struct {
	Token      string
	Extensions map[string]string
}

// Broker makes kfake cluster c answer SASL OAUTHBEARER the way Kafka does
// (RFC 7628): a login that check accepts authenticates the connection; one
// it refuses gets the error challenge {"status":"invalid_token"} and then
// SASL_AUTHENTICATION_FAILED with check's message. Every login, accepted or
// not, is sent to logins if it is not nil (never blocking: it is dropped
// when the channel is full). c must not have kfake's own SASL enabled.
func Broker(c *kfake.Cluster, check func(Login) error, logins chan<- Login) {
	// kfake runs control functions one at a time and does not say which
	// connection a request came on: the client's answer to an error
	// challenge follows its login at once, so the last refusal is its.
	var (
		mu      sync.Mutex
		refusal string
	)
	c.ControlKey(int16(kmsg.SASLHandshake), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.SASLHandshakeRequest)
		resp := r.ResponseKind().(*kmsg.SASLHandshakeResponse)
		resp.SupportedMechanisms = []string{"OAUTHBEARER"}
		if r.Mechanism != "OAUTHBEARER" {
			resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		}
		return resp, nil, true
	})
	c.ControlKey(int16(kmsg.SASLAuthenticate), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.SASLAuthenticateRequest)
		resp := r.ResponseKind().(*kmsg.SASLAuthenticateResponse)
		if bytes.Equal(r.SASLAuthBytes, []byte{1}) {
			// The client's answer to an error challenge.
			mu.Lock()
			msg := refusal
			mu.Unlock()
			resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
			resp.ErrorMessage = new("Authentication failed: " + msg)
			return resp, nil, true
		}
		login, err := parseLogin(r.SASLAuthBytes)
		if err == nil && check != nil {
			err = check(login)
		}
		if logins != nil {
			select {
			case logins <- login:
			default:
			}
		}
		if err != nil {
			mu.Lock()
			refusal = err.Error()
			mu.Unlock()
			resp.SASLAuthBytes = []byte(`{"status":"invalid_token"}`)
		}
		return resp, nil, true
	})
}

// parseLogin parses a client-first message: gs2 header, then key=value
// pairs each ended by 0x01, then 0x01.
func parseLogin(b []byte) (Login, error) {
	header, rest, ok := bytes.Cut(b, []byte{1})
	if !ok || !bytes.HasPrefix(header, []byte("n,")) {
		return Login{}, fmt.Errorf("not an OAUTHBEARER client-first message")
	}
	l := Login{Extensions: map[string]string{}}
	for kv := range bytes.SplitSeq(bytes.TrimSuffix(rest, []byte{1, 1}), []byte{1}) {
		k, v, _ := bytes.Cut(kv, []byte("="))
		if string(k) == "auth" {
			tok, found := strings.CutPrefix(string(v), "Bearer ")
			if !found {
				return Login{}, fmt.Errorf("auth is not a bearer token")
			}
			l.Token = tok
			continue
		}
		l.Extensions[string(k)] = string(v)
	}
	if l.Token == "" {
		return Login{}, fmt.Errorf("no token")
	}
	return l, nil
}
