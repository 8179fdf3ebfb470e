// Package dial turns a config.Cluster into franz-go client options —
// seed brokers, client ID, TLS and SASL — so that every component connects
// to a cluster the same way, and explains connection failures in terms of
// the configuration (Ping).
//
// SASL is franz-go's own (sasl/plain, sasl/scram). The options include a
// hook that notices a SASL exchange cut off by the broker, which is how
// some brokers (and kfake) answer a wrong password; Ping uses it to say
// "authentication failed" instead of "EOF".
//
// The package starts no goroutines. The hook is safe for concurrent use
// by the client's connections.
package dial

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"

	"github.com/seed83556561/mirrord/config"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
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
// ClientID, DialTLSConfig when TLS is enabled, SASL when a mechanism is
// set, and a hook that Ping reads. Callers append their own options
// (logger, producer or consumer settings, more hooks). It reads the TLS
// files; an error names the cluster and the file.
func Options(c *config.Cluster) ([]kgo.Opt, error) {
	if c == nil {
		return nil, errors.New("dial: nil cluster")
	}
	if len(c.BootstrapServers) == 0 {
		return nil, fmt.Errorf("cluster %q: no bootstrap servers", c.Name)
	}
	h := &hook{cluster: c.Name, mechanism: c.SASL.Mechanism, user: c.SASL.Username, tls: c.TLS}
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.BootstrapServers...),
		kgo.ClientID(c.ClientID),
		kgo.WithHooks(h),
	}
	if c.TLS.Enabled {
		tc, err := tlsConfig(c)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
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

func mechanism(c *config.Cluster) (sasl.Mechanism, error) {
	s := c.SASL
	switch s.Mechanism {
	case config.MechanismPlain:
		return plain.Auth{User: s.Username, Pass: s.Password}.AsMechanism(), nil
	case config.MechanismScramSHA256:
		return scram.Auth{User: s.Username, Pass: s.Password}.AsSha256Mechanism(), nil
	case config.MechanismScramSHA512:
		return scram.Auth{User: s.Username, Pass: s.Password}.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("cluster %q: unknown sasl.mechanism %q (use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)", c.Name, s.Mechanism)
}

// hook remembers what Ping needs to explain a failure: the cluster's
// settings, and how many SASL exchanges a broker cut off.
type hook struct {
	cluster, mechanism, user string
	tls                      config.TLS
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

// explain wraps a connection error with what it means for the config.
func (h *hook) explain(err error, saslCutOff bool) error {
	who := fmt.Sprintf("SASL %s for user %q", h.mechanism, h.user)
	const check = "check sasl.username and the password"
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		op        *net.OpError
	)
	switch {
	case errors.Is(err, kerr.SaslAuthenticationFailed):
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
