// Package oauth gets OAuth 2.0 access tokens for SASL/OAUTHBEARER: from a
// file that holds one (FileToken, read again when the file changes), or
// from a token endpoint with the client-credentials grant (RFC 6749
// section 4.4; ClientCredentials), cached until shortly before it
// expires.
//
// A Source's Token is called for every new connection to a broker and for
// every re-authentication, from the clients' connection goroutines, so
// both sources are safe for concurrent use and cheap to call: FileToken
// stats its file at most once per secret.DefaultCheckInterval;
// ClientCredentials asks the endpoint only when its token nears expiry,
// one request at a time (other callers wait for it, or for their
// context).
//
// No error or printed form shows a token or the client secret: errors name
// the endpoint, the client ID or the file, and what the endpoint says is
// cleaned of the secret before it is quoted.
//
// The package starts no goroutines.
package oauth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/seed83556561/mirrord/internal/secret"
)

// Errors of the sources.
var (
	// ErrTokenEndpoint: the token endpoint refused the request, or could
	// not be reached.
	ErrTokenEndpoint = errors.New("token endpoint failed")
	// ErrBadTokenResponse: the token endpoint answered 200 without a
	// usable bearer token.
	ErrBadTokenResponse = errors.New("token endpoint gave no usable token")
	// ErrTokenFile: the token file could not be read, and there is no
	// earlier token from it.
	ErrTokenFile = errors.New("cannot read the token file")
)

// Source gives an access token for one connection.
type Source interface {
	Token(ctx context.Context) (string, error)
}

// FileToken is a token kept in a file by something else (a sidecar, a
// projected service account token), read again when the file changes. A
// re-read that fails keeps the previous token.
type FileToken struct {
	File *secret.File
}

// Token implements Source.
func (f FileToken) Token(context.Context) (string, error) {
	tok, _, err := f.File.Secret()
	if tok == "" {
		return "", fmt.Errorf("%w: %w", ErrTokenFile, err)
	}
	return tok, nil
}

// Defaults of ClientCredentials.
const (
	// DefaultTimeout bounds one request to the token endpoint.
	DefaultTimeout = 30 * time.Second
	// UnknownLifetime is how long a token is used when the endpoint says
	// neither expires_in nor, in a JWT, exp.
	UnknownLifetime = time.Minute
	// MaxRefreshMargin is the most a token is refreshed ahead of its
	// expiry; tokens shorter than five times it are refreshed after four
	// fifths of their lifetime.
	MaxRefreshMargin = 5 * time.Minute
	// RetryAfterFailure is how long a failed refresh is not retried
	// while the previous token is still valid.
	RetryAfterFailure = 5 * time.Second

	maxResponse = 1 << 20 // bytes of a token response read at most
	maxQuoted   = 200     // characters of the endpoint's error quoted at most
)

// ClientCredentials gets tokens from a token endpoint with the client
// credentials grant: a POST of grant_type=client_credentials (and scope)
// authenticated as ClientID with the client secret by HTTP Basic (RFC 6749
// section 2.3.1). A token is used until MaxRefreshMargin (at most a fifth
// of its lifetime) before it expires; a refresh that fails keeps the
// previous token until it expires, retried at most every
// RetryAfterFailure.
//
// Set the exported fields before the first Token call, and do not copy a
// ClientCredentials after it; it prints without its secrets.
type ClientCredentials struct {
	Endpoint string
	ClientID string
	// Secret returns the client secret; it is called for every request
	// to the endpoint (a rotated secret file is read again).
	Secret func() (string, error)
	Scope  string // "" sends no scope

	// HTTPClient sends the requests; nil means a client with
	// DefaultTimeout that follows no redirect (a redirected POST would
	// carry the credentials elsewhere).
	HTTPClient *http.Client
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	once      sync.Once
	sem       chan struct{} // one request at a time; guards the fields below
	token     string
	refreshAt time.Time
	expiresAt time.Time
	retryAt   time.Time
}

// NewClientCredentials returns a ClientCredentials source with the default
// HTTP client and clock. The zero value with the fields set works too.
func NewClientCredentials(endpoint, clientID string, secret func() (string, error), scope string) *ClientCredentials {
	return &ClientCredentials{Endpoint: endpoint, ClientID: clientID, Secret: secret, Scope: scope}
}

// Token implements Source: the cached token, or a new one from the
// endpoint when the cached one nears expiry.
func (c *ClientCredentials) Token(ctx context.Context) (string, error) {
	c.once.Do(func() { c.sem = make(chan struct{}, 1) })
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	defer func() { <-c.sem }()

	now := c.now()
	valid := c.token != "" && now.Before(c.expiresAt)
	if valid && (now.Before(c.refreshAt) || now.Before(c.retryAt)) {
		return c.token, nil
	}
	tok, lifetime, err := c.fetch(ctx, now)
	if err != nil {
		if valid {
			c.retryAt = now.Add(RetryAfterFailure)
			return c.token, nil
		}
		return "", err
	}
	c.token = tok
	c.expiresAt = now.Add(lifetime)
	c.refreshAt = c.expiresAt.Add(-min(lifetime/5, MaxRefreshMargin))
	c.retryAt = time.Time{}
	return tok, nil
}

// tokenResponse is the endpoint's answer (RFC 6749 sections 5.1, 5.2).
type tokenResponse struct {
	AccessToken string          `json:"access_token"`
	TokenType   string          `json:"token_type"`
	ExpiresIn   json.RawMessage `json:"expires_in"` // a number, or a number in a string
	Error       string          `json:"error"`
	Description string          `json:"error_description"`
}

// fetch asks the endpoint for a token; it returns the token and how long
// it lives from now.
func (c *ClientCredentials) fetch(ctx context.Context, now time.Time) (string, time.Duration, error) {
	who := fmt.Sprintf("token endpoint %s (client %q)", c.Endpoint, c.ClientID)
	clientSecret, err := c.Secret()
	if err != nil {
		return "", 0, fmt.Errorf("%s: client secret: %w", who, err)
	}
	form := url.Values{"grant_type": {"client_credentials"}}
	if c.Scope != "" {
		form.Set("scope", c.Scope)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.Endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return "", 0, fmt.Errorf("%w: %s: %w", ErrTokenEndpoint, who, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	user, pass := url.QueryEscape(c.ClientID), url.QueryEscape(clientSecret)
	req.SetBasicAuth(user, pass)
	hide := []string{clientSecret, pass, base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))}

	resp, err := c.client().Do(req)
	if err != nil {
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err // its message repeats the URL
		}
		return "", 0, fmt.Errorf("%w: %s: %s", ErrTokenEndpoint, who, redact(err.Error(), hide))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return "", 0, fmt.Errorf("%w: %s: read the answer: %w", ErrTokenEndpoint, who, err)
	}
	var r tokenResponse
	jsonErr := json.Unmarshal(body, &r)
	if resp.StatusCode != http.StatusOK {
		var detail string
		if d := strings.TrimSpace(strings.Trim(r.Error+": "+r.Description, ": ")); jsonErr == nil && d != "" {
			detail = ": " + quoteLimited(redact(d, hide))
		}
		if loc := resp.Header.Get("Location"); loc != "" {
			detail += " (a redirect to " + quoteLimited(redact(loc, hide)) + "; set token_endpoint to the URL that answers)"
		}
		return "", 0, fmt.Errorf("%w: %s answered %s%s", ErrTokenEndpoint, who, resp.Status, detail)
	}
	switch {
	case jsonErr != nil:
		return "", 0, fmt.Errorf("%w: %s: the answer is not JSON: %w", ErrBadTokenResponse, who, jsonErr)
	case r.AccessToken == "":
		return "", 0, fmt.Errorf("%w: %s: the answer has no access_token", ErrBadTokenResponse, who)
	case r.TokenType != "" && !strings.EqualFold(r.TokenType, "bearer"):
		return "", 0, fmt.Errorf("%w: %s: token_type is %s, not Bearer", ErrBadTokenResponse, who, quoteLimited(r.TokenType))
	}
	lifetime, err := lifetimeOf(r, now)
	if err != nil {
		return "", 0, fmt.Errorf("%w: %s: %w", ErrBadTokenResponse, who, err)
	}
	return r.AccessToken, lifetime, nil
}

// lifetimeOf is how long the token lives: expires_in, else the exp claim of
// a JWT, else UnknownLifetime.
func lifetimeOf(r tokenResponse, now time.Time) (time.Duration, error) {
	if raw := strings.Trim(string(r.ExpiresIn), `" `); raw != "" && raw != "null" {
		secs, err := strconv.ParseFloat(raw, 64)
		if err != nil || secs <= 0 {
			return 0, fmt.Errorf("expires_in %s is not a positive number of seconds", quoteLimited(raw))
		}
		return time.Duration(secs * float64(time.Second)), nil
	}
	if exp, ok := jwtExpiry(r.AccessToken); ok {
		if !exp.After(now) {
			return 0, errors.New("the token's exp claim is in the past (check the clocks)")
		}
		return exp.Sub(now), nil
	}
	return UnknownLifetime, nil
}

// jwtExpiry reads the exp claim of a JWT without checking its signature
// (the broker does that); ok is false for anything else.
func jwtExpiry(token string) (time.Time, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp *float64 `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil || claims.Exp == nil {
		return time.Time{}, false
	}
	return time.Unix(0, int64(*claims.Exp*float64(time.Second))), true
}

func (c *ClientCredentials) client() *http.Client {
	if c.HTTPClient != nil {
		return c.HTTPClient
	}
	return defaultClient
}

var defaultClient = &http.Client{
	Timeout: DefaultTimeout,
	CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	},
}

func (c *ClientCredentials) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// String names the endpoint and the client, never a secret or a token.
func (c *ClientCredentials) String() string {
	return fmt.Sprintf("oauth client credentials of %q at %s", c.ClientID, c.Endpoint)
}

// GoString is the %#v form, without secrets.
func (c *ClientCredentials) GoString() string {
	return fmt.Sprintf("&oauth.ClientCredentials{Endpoint:%q, ClientID:%q, Scope:%q}", c.Endpoint, c.ClientID, c.Scope)
}

// Format prints c with any verb without a secret or a token.
func (c *ClientCredentials) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		fmt.Fprint(f, c.GoString())
		return
	}
	fmt.Fprint(f, c.String())
}

// redact replaces every occurrence of the hidden strings in s.
func redact(s string, hide []string) string {
	for _, h := range hide {
		if h != "" {
			s = strings.ReplaceAll(s, h, "[redacted]")
		}
	}
	return s
}

// quoteLimited quotes s, cut to maxQuoted characters.
func quoteLimited(s string) string {
	if utf8.RuneCountInString(s) > maxQuoted {
		s = string([]rune(s)[:maxQuoted]) + "..."
	}
	return strconv.Quote(s)
}
