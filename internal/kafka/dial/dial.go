// Package dial turns a config.Cluster into franz-go client options —
// seed brokers, client ID, TLS and SASL — so that every component connects
// to a cluster the same way, and explains connection failures in terms of
// the configuration (Ping).
//
// SASL is franz-go's own (sasl/plain, sasl/scram, sasl/oauth). Secrets that
// come from files are read again, for new connections, when the file
// changes (internal/secret): password_file, and for OAUTHBEARER the
// token_file or the client_secret_file of the client-credentials grant,
// whose tokens internal/oauth gets and caches. The options include a hook
// that notices a SASL exchange cut off by the broker, which is how some
// brokers (and kfake) answer a wrong password; Ping uses it to say
// "authentication failed" instead of "EOF".
//
// The package starts no goroutines. The hook and the SASL callbacks are
// safe for concurrent use by the client's connections.
package dial

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	kafkaoauth "github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/internal/backoff"
	"github.com/seed83556561/mirrord/internal/oauth"
	"github.com/seed83556561/mirrord/internal/secret"
)

// Sentinel errors of Options and Ping.
var (
	// ErrTLS: the TLS files could not be loaded, or the TLS handshake
	// with a broker failed.
	ErrTLS = errors.New("tls failed")
	// ErrAuthentication: the broker refused the SASL credentials.
	ErrAuthentication = errors.New("authentication failed")
)

// Options returns the kgo options that reach cluster c: SeedBrokers,
// ClientID, a Dialer (TLS when it is enabled; SO_LINGER 0), SASL when a mechanism is
// set, a hook that Ping reads, and the waits and count of a request's
// retries (RetryBackoff, RequestRetries). Callers append their own options
// (logger, producer or consumer settings, more hooks). It reads the TLS
// files; an error names the cluster and the file.
func Options(c *config.Cluster) ([]kgo.Opt, error) {
	if c == nil {
		return nil, errors.New("dial: nil cluster")
	}
	if len(c.BootstrapServers) == 0 {
		return nil, fmt.Errorf("cluster %q: no bootstrap servers", c.Name)
	}
	described := c.SASL
	described.Password, described.ClientSecret = "", "" // the hook needs no secret
	h := &hook{cluster: c.Name, mechanism: c.SASL.Mechanism, user: c.SASL.Username, tls: c.TLS, sasl: described}
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.BootstrapServers...),
		kgo.ClientID(c.ClientID),
		kgo.WithHooks(h),
		kgo.RetryBackoffFn(RetryBackoff),
		kgo.RequestRetries(RequestRetries),
	}
	if c.TLS.Enabled {
		tc, err := tlsConfig(c)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.Dialer(dialTLS(tc)))
	} else {
		opts = append(opts, kgo.Dialer(netDialer().DialContext))
	}
	if c.SASL.Mechanism != "" {
		m, err := mechanism(c)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// RetryBackoff is how long a client waits before it sends a failed
// request again (fails: the failures so far, from 1): 100 ms, doubling up
// to 1 s, less up to a fifth at random, as Kafka's Java clients wait
// (retry.backoff.ms 100, retry.backoff.max.ms 1000; KIP-580). kgo's own
// waits double from 250 ms up to 5 s: a request that met a partition whose
// leader was not there yet went again up to 3 s after the leader was. A
// topic the link has just created is such a case: one Kafka 4.4.0 broker
// takes several seconds to lead 1,000 new partitions, and the listing of
// their offsets at placement, retried by kgo at 0.3, 0.8, 1.8, 3.6 and
// 6.9 s, kept a new link of 1,000 partitions in PREPARING for 4-8 s.
func RetryBackoff(fails int) time.Duration {
	d := retryPolicy.Wait(fails)
	// The jitter is Kafka's clients', so that the requests of many
	// partitions that failed together do not all go again at once; the
	// link's own retries (internal/backoff) are one loop each and need
	// none.
	return d - time.Duration(rand.Int64N(int64(d/5)+1))
}

// retryPolicy is RetryBackoff's schedule before its jitter.
var retryPolicy = backoff.Policy{First: 100 * time.Millisecond, Max: time.Second}

// RequestRetries is how often a client sends a failed request again: high
// enough that kgo's retry timeout (30 s, the session timeout for group
// requests) still bounds it, as it did with kgo's longer waits; with
// RetryBackoff's, kgo's default 20 would end after about 18 s.
const RequestRetries = 45

// dialTimeout is kgo's default dial timeout, which a Dialer replaces.
const dialTimeout = 10 * time.Second

// netDialer dials brokers over TCP with SO_LINGER set to 0 (lingerZero,
// on Unix): closing a connection resets it (RST) and drops whatever the
// kernel had not sent yet. kgo closes a connection when it gives up on a
// request on it (its context ended: an append past the session's lease,
// a produce timeout). With the default linger the kernel would go on
// sending the request after the close (retransmitting through a network
// partition for up to a minute or two), and it could reach the broker
// after the link's next session had taken over and reconciled: a
// preserve-delivery append has no producer ID the broker fences (DESIGN
// §7). With linger 0 a request given up is given up.
func netDialer() *net.Dialer {
	return &net.Dialer{Timeout: dialTimeout, Control: lingerZero}
}

// dialTLS dials with netDialer and TLS, as kgo.DialTLSConfig does: the
// server name, unless tc sets one, is the host dialed.
func dialTLS(tc *tls.Config) func(ctx context.Context, network, host string) (net.Conn, error) {
	return func(ctx context.Context, network, host string) (net.Conn, error) {
		c := tc.Clone()
		if c.ServerName == "" {
			server, _, err := net.SplitHostPort(host)
			if err != nil {
				return nil, fmt.Errorf("dial %s: %w", host, err)
			}
			c.ServerName = server
		}
		return (&tls.Dialer{NetDialer: netDialer(), Config: c}).DialContext(ctx, network, host)
	}
}

// tlsConfig builds the client TLS config. Without ServerName, kgo checks
// each broker's certificate against the host it dials.
func tlsConfig(c *config.Cluster) (*tls.Config, error) {
	t := c.TLS
	tc := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         t.ServerName,
		InsecureSkipVerify: t.InsecureSkipVerify, // the operator's explicit choice
	}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("cluster %q: %w: read tls.ca_file: %w", c.Name, ErrTLS, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("cluster %q: %w: tls.ca_file %s holds no PEM certificate", c.Name, ErrTLS, t.CAFile)
		}
		tc.RootCAs = pool
	}
	switch {
	case t.CertFile != "" && t.KeyFile != "":
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("cluster %q: %w: load tls.cert_file %s and tls.key_file %s: %w",
				c.Name, ErrTLS, t.CertFile, t.KeyFile, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	case t.CertFile != "" || t.KeyFile != "":
		return nil, fmt.Errorf("cluster %q: %w: tls.cert_file and tls.key_file go together; set both or neither", c.Name, ErrTLS)
	}
	return tc, nil
}

// checkInterval is how long the stat of a secret file is trusted (a var
// for tests).
var checkInterval = secret.DefaultCheckInterval

func mechanism(c *config.Cluster) (sasl.Mechanism, error) {
	s := c.SASL
	switch s.Mechanism {
	case config.MechanismPlain:
		pw := password(s)
		return plain.Plain(func(context.Context) (plain.Auth, error) {
			p, err := pw()
			return plain.Auth{User: s.Username, Pass: p}, err
		}), nil
	case config.MechanismScramSHA256, config.MechanismScramSHA512:
		pw := password(s)
		auth := func(context.Context) (scram.Auth, error) {
			p, err := pw()
			return scram.Auth{User: s.Username, Pass: p}, err
		}
		if s.Mechanism == config.MechanismScramSHA256 {
			return scram.Sha256(auth), nil
		}
		return scram.Sha512(auth), nil
	case config.MechanismOAuthBearer:
		src, err := TokenSource(c)
		if err != nil {
			return nil, err
		}
		ext := maps.Clone(s.Extensions)
		return kafkaoauth.Oauth(func(ctx context.Context) (kafkaoauth.Auth, error) {
			tok, err := src.Token(ctx)
			if err != nil {
				return kafkaoauth.Auth{}, err
			}
			return kafkaoauth.Auth{Token: tok, Extensions: ext}, nil
		}), nil
	}
	return nil, fmt.Errorf("cluster %q: unknown sasl.mechanism %q (use PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER)", c.Name, s.Mechanism)
}

// password returns what gives the SASL password for each connection: the
// password_file, read again when it changes (a failed re-read keeps the
// last good password), or the password Parse resolved.
func password(s config.SASL) func() (string, error) {
	return fileOr(s.PasswordFile, s.Password, "sasl.password_file")
}

// fileOr returns a function that reads the secret in path when it is set,
// and returns value otherwise.
func fileOr(path, value, key string) func() (string, error) {
	if path == "" {
		return func() (string, error) { return value, nil }
	}
	f := &secret.File{Path: path, CheckInterval: checkInterval}
	return func() (string, error) {
		v, _, err := f.Secret()
		if v == "" {
			return "", fmt.Errorf("%s: %w", key, err)
		}
		return v, nil
	}
}

// TokenSource returns where the OAUTHBEARER tokens of cluster c come from:
// its sasl.token_file, or its token endpoint with the client-credentials
// grant (the client secret read again from client_secret_file when it
// changes). It does no I/O. Options uses it; a test against a real broker
// can call it to see the token a connection sends.
func TokenSource(c *config.Cluster) (oauth.Source, error) {
	s := c.SASL
	switch {
	case s.Mechanism != config.MechanismOAuthBearer:
		return nil, fmt.Errorf("cluster %q: sasl.mechanism is %q, not OAUTHBEARER", c.Name, s.Mechanism)
	case s.TokenFile != "":
		return oauth.FileToken{File: &secret.File{Path: s.TokenFile, CheckInterval: checkInterval}}, nil
	case s.TokenEndpoint != "":
		return oauth.NewClientCredentials(s.TokenEndpoint, s.ClientID,
			fileOr(s.ClientSecretFile, s.ClientSecret, "sasl.client_secret_file"), s.Scope), nil
	}
	return nil, fmt.Errorf("cluster %q: sasl OAUTHBEARER needs token_file or token_endpoint", c.Name)
}

// Principal is how errors name the Kafka principal of cluster c's
// credentials, as a broker with Kafka's default principal builder and no
// mapping rules sees it: User:<sasl.username> for PLAIN and SCRAM, the
// subject of the token for OAUTHBEARER (the sub claim with Kafka's JWT
// validators), the distinguished name of the client certificate for TLS
// client authentication, User:ANONYMOUS for a PLAINTEXT or SSL listener
// without one. A broker with ssl.principal.mapping.rules,
// sasl.kerberos.principal.to.local.rules or its own principal.builder.class
// may see another name; ACLs are written for the name it sees. Principal
// does no I/O.
func Principal(c *config.Cluster) string {
	s := c.SASL
	switch s.Mechanism {
	case config.MechanismPlain, config.MechanismScramSHA256, config.MechanismScramSHA512:
		return "User:" + s.Username
	case config.MechanismOAuthBearer:
		if s.TokenFile != "" {
			return "the principal of the token in sasl.token_file (User:<its sub claim>)"
		}
		return fmt.Sprintf("the principal of the tokens of client %q (User:<their sub claim>)", s.ClientID)
	}
	if c.TLS.Enabled && c.TLS.CertFile != "" {
		return "the principal of tls.cert_file (User:<its distinguished name>)"
	}
	return "User:ANONYMOUS"
}

// hook remembers what Ping needs to explain a failure: the cluster's
// settings, and how many SASL exchanges a broker cut off.
type hook struct {
	cluster, mechanism, user string
	tls                      config.TLS
	sasl                     config.SASL // for OAUTHBEARER's explanations, without its secrets
	saslCutOff               atomic.Int64
}

// OnBrokerE2E implements kgo.HookBrokerE2E.
func (h *hook) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if key != int16(kmsg.SASLHandshake) && key != int16(kmsg.SASLAuthenticate) {
		return
	}
	if e2e.Err() != nil {
		h.saslCutOff.Add(1)
	}
}

// Ping checks that cl can reach and authenticate with one broker of its
// cluster, and explains a failure: ErrAuthentication for refused
// credentials, ErrTLS for a failed handshake, each naming the cluster and
// the configuration keys to check. cl must be built from Options.
func Ping(ctx context.Context, cl *kgo.Client) error {
	var h *hook
	hooks, _ := cl.OptValue(kgo.WithHooks).([]kgo.Hook)
	for _, x := range hooks {
		if mine, ok := x.(*hook); ok {
			h = mine
		}
	}
	if h == nil {
		return errors.New("dial: Ping needs a client built from dial.Options")
	}
	before := h.saslCutOff.Load()
	err := cl.Ping(ctx)
	if err == nil {
		return nil
	}
	return h.explain(err, h.saslCutOff.Load() > before)
}

// Explain wraps err, an error of a client built from Options(c) (a link's
// request refused because a token expired, say), with what it means for
// c's configuration as Ping explains it: ErrAuthentication for credentials
// the broker refused, naming the keys to check, ErrTLS for a failed
// handshake. Errors that are neither pass unchanged; an error already
// explained is not explained twice.
func Explain(c *config.Cluster, err error) error {
	if err == nil || errors.Is(err, ErrAuthentication) || errors.Is(err, ErrTLS) {
		return err
	}
	described := c.SASL
	described.Password, described.ClientSecret = "", ""
	h := &hook{cluster: c.Name, mechanism: c.SASL.Mechanism, user: c.SASL.Username, tls: c.TLS, sasl: described}
	out := h.explain(err, false)
	if !errors.Is(out, ErrAuthentication) && !errors.Is(out, ErrTLS) {
		return err
	}
	return out
}

// explain wraps a connection error with what it means for the config.
func (h *hook) explain(err error, saslCutOff bool) error {
	who := fmt.Sprintf("SASL %s for user %q", h.mechanism, h.user)
	check := "check sasl.username and the password"
	if h.mechanism == config.MechanismOAuthBearer {
		who, check = h.oauthWho()
	}
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		op        *net.OpError
	)
	switch {
	case errors.Is(err, oauth.ErrTokenEndpoint), errors.Is(err, oauth.ErrBadTokenResponse), errors.Is(err, oauth.ErrTokenFile):
		return fmt.Errorf("cluster %q: %w: no OAUTHBEARER token (%s): %w", h.cluster, ErrAuthentication, check, err)
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		if h.mechanism == config.MechanismOAuthBearer {
			if why := oauthRefusal(err); why != "" {
				return fmt.Errorf("cluster %q: %w: the broker refused %s: %s (%s): %w", h.cluster, ErrAuthentication, who, why, check, err)
			}
		}
		return fmt.Errorf("cluster %q: %w: the broker refused %s (%s): %w", h.cluster, ErrAuthentication, who, check, err)
	case errors.Is(err, kerr.UnsupportedSaslMechanism):
		return fmt.Errorf("cluster %q: %w: the broker does not offer SASL %s (set sasl.mechanism to one it offers): %w",
			h.cluster, ErrAuthentication, h.mechanism, err)
	case h.mechanism != "" && saslCutOff:
		return fmt.Errorf("cluster %q: %w: the broker closed the connection during %s (%s): %w",
			h.cluster, ErrAuthentication, who, check, err)
	case errors.As(err, &unknownCA):
		where := "the system's roots (set tls.ca_file to the CA that signed the brokers' certificates)"
		if h.tls.CAFile != "" {
			where = fmt.Sprintf("tls.ca_file %s (point it at the CA that signed the brokers' certificates)", h.tls.CAFile)
		}
		return fmt.Errorf("cluster %q: %w: the broker's certificate is not signed by a CA in %s: %w", h.cluster, ErrTLS, where, err)
	case errors.As(err, &hostname):
		return fmt.Errorf("cluster %q: %w: the broker's certificate is not valid for %q (set tls.server_name to a name in the certificate): %w",
			h.cluster, ErrTLS, hostname.Host, err)
	case errors.As(err, &invalid):
		return fmt.Errorf("cluster %q: %w: the broker's certificate is not valid: %w", h.cluster, ErrTLS, err)
	case errors.As(err, &op) && op.Op == "remote error": // a TLS alert from the broker
		return fmt.Errorf("cluster %q: %w: the broker refused the TLS handshake (check tls.cert_file and tls.key_file, and the broker's client authentication): %w",
			h.cluster, ErrTLS, err)
	}
	return fmt.Errorf("cluster %q: ping: %w", h.cluster, err)
}

// oauthRefusal says in words what a broker's OAUTHBEARER error status
// means (RFC 7628 section 3.2.2: the server's JSON, which Kafka passes on
// as the message of SASL_AUTHENTICATION_FAILED, such as
// {"status":"insufficient_scope", "scope":"[kafka]"}), or "" when err
// carries none.
func oauthRefusal(err error) string {
	msg := err.Error()
	i, j := strings.LastIndex(msg, "{"), strings.LastIndex(msg, "}")
	if i < 0 || j < i {
		return ""
	}
	var st struct {
		Status string `json:"status"`
		Scope  string `json:"scope"`
	}
	if json.Unmarshal([]byte(msg[i:j+1]), &st) != nil {
		return ""
	}
	switch st.Status {
	case "invalid_token":
		return "the broker found the token invalid (expired, not yet valid, or not signed or formed as it requires)"
	case "insufficient_scope":
		scope := strings.TrimSpace(strings.Trim(st.Scope, "[]"))
		if scope == "" {
			return "the token lacks a scope the broker requires"
		}
		return fmt.Sprintf("the token lacks the scope %q that the broker requires", scope)
	case "":
		return ""
	}
	return fmt.Sprintf("the broker answered status %q", st.Status)
}

// oauthWho describes an OAUTHBEARER login and what to check when the
// broker refuses it.
func (h *hook) oauthWho() (who, check string) {
	s := h.sasl
	if s.TokenFile != "" {
		return fmt.Sprintf("the SASL OAUTHBEARER token from sasl.token_file %s", s.TokenFile),
			"check that the file holds a token the broker accepts, and that it has not expired"
	}
	secretFrom := "the client secret"
	switch {
	case s.ClientSecretFile != "":
		secretFrom = "the client secret in sasl.client_secret_file " + s.ClientSecretFile
	case s.ClientSecretEnv != "":
		secretFrom = "the client secret in environment variable " + s.ClientSecretEnv
	}
	return fmt.Sprintf("the SASL OAUTHBEARER token of client %q from %s", s.ClientID, s.TokenEndpoint),
		fmt.Sprintf("check sasl.client_id, %s, sasl.scope and what the broker requires of tokens", secretFrom)
}
