package dial

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/internal/oauth"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/internal/testkit/oauthtest"
	"github.com/seed83556561/mirrord/internal/testkit/tlstest"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
)

// clusterFromHCL parses an HCL file with one cluster "c" (the given body
// lines) and a link that uses it, and returns cluster "c".
func clusterFromHCL(t *testing.T, body string, environ ...string) *config.Cluster {
	t.Helper()
	src := "cluster \"c\" {\n" + body + "\n}\ncluster \"other\" {\n  bootstrap_servers = [\"127.0.0.1:1\"]\n}\n" +
		"link \"l\" {\n  source = \"c\"\n  destination = \"other\"\n  topics { include = [\".*\"] }\n}\n"
	cfg, err := config.Parse("test.hcl", []byte(src), environ)
	if err != nil {
		t.Fatalf("parse:\n%v\n%s", err, src)
	}
	return cfg.Clusters["c"]
}

func bootstrap(c *kfake.Cluster) string {
	return fmt.Sprintf("  bootstrap_servers = [%q]\n  client_id = \"kclient-test\"", c.ListenAddrs()[0])
}

func newClient(t *testing.T, c *config.Cluster, extra ...kgo.Opt) *kgo.Client {
	t.Helper()
	opts, err := Options(c)
	if err != nil {
		t.Fatalf("Options: %v", err)
	}
	cl, err := kgo.NewClient(slices.Concat(opts, extra)...)
	if err != nil {
		t.Fatalf("kgo client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // only against hangs
	t.Cleanup(cancel)
	return ctx
}

// roundTrip produces three records through one client and consumes them
// through another, both built from c, and checks them one by one.
func roundTrip(t *testing.T, c *config.Cluster, topic string) {
	t.Helper()
	ctx := testContext(t)
	prod := newClient(t, c, kgo.DefaultProduceTopic(topic))
	if err := Ping(ctx, prod); err != nil {
		t.Fatalf("ping: %v", err)
	}
	var sent []*kgo.Record
	for i := range 3 {
		sent = append(sent, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "value %d via %s", i, c.Name)})
	}
	if err := prod.ProduceSync(ctx, sent...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	cons := newClient(t, c, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var got []*kgo.Record
	for len(got) < len(sent) {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records: %v", len(got), len(sent), err)
		}
		fs.EachError(func(tp string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", tp, p, err) })
		got = append(got, fs.Records()...)
	}
	if len(got) != len(sent) {
		t.Fatalf("consumed %d records, want %d", len(got), len(sent))
	}
	for i, r := range got {
		if string(r.Key) != string(sent[i].Key) || string(r.Value) != string(sent[i].Value) || r.Offset != int64(i) {
			t.Errorf("record %d: %s=%q at offset %d, want %s=%q at offset %d", i, r.Key, r.Value, r.Offset, sent[i].Key, sent[i].Value, i)
		}
	}
}

// Guards SASL through the whole chain (HCL → config → Options → broker):
// each mechanism authenticates with the right password and gives a clear
// "authentication failed" with a wrong one or an unknown user.
func TestSASL(t *testing.T) {
	for _, mech := range []string{config.MechanismScramSHA512, config.MechanismScramSHA256, config.MechanismPlain} {
		t.Run(mech, func(t *testing.T) {
			const user, pass = "mirror", "s3cret-pass"
			k := kafkatest.NewCluster(t, kafkatest.SourceClusterID,
				kfake.EnableSASL(), kfake.Superuser(mech, user, pass), kfake.SeedTopics(1, "t", "t2"))
			saslBlock := func(u string) string {
				return fmt.Sprintf("  sasl {\n    mechanism = %q\n    username = %q\n    password_env = \"KC_PASSWORD\"\n  }", mech, u)
			}

			t.Run("round trip", func(t *testing.T) {
				roundTrip(t, clusterFromHCL(t, bootstrap(k)+"\n"+saslBlock(user), "KC_PASSWORD="+pass), "t")
			})

			for _, bad := range []struct{ name, user, pass string }{
				{"wrong password", user, "wrong-pass"},
				{"unknown user", "nobody", pass},
			} {
				t.Run(bad.name, func(t *testing.T) {
					c := clusterFromHCL(t, bootstrap(k)+"\n"+saslBlock(bad.user), "KC_PASSWORD="+bad.pass)
					err := Ping(testContext(t), newClient(t, c))
					if !errors.Is(err, ErrAuthentication) {
						t.Fatalf("ping: %v, want ErrAuthentication", err)
					}
					want := fmt.Sprintf(`cluster "c": authentication failed: the broker closed the connection during SASL %s for user %q (check sasl.username and the password): `, mech, bad.user)
					if !strings.HasPrefix(err.Error(), want) {
						t.Errorf("ping error:\n%v\nwant prefix\n%s", err, want)
					}
					if strings.Contains(err.Error(), bad.pass) {
						t.Errorf("error shows the password: %v", err)
					}
				})
			}

			t.Run("no sasl block", func(t *testing.T) {
				err := Ping(testContext(t), newClient(t, clusterFromHCL(t, bootstrap(k))))
				want := `cluster "c": ping: broker closed the connection immediately after a request was issued, which often happens when SASL is required but not provided: is SASL missing?`
				if err == nil || err.Error() != want {
					t.Fatalf("ping error:\n%v\nwant\n%s", err, want)
				}
			})
		})
	}
}

// Guards the realistic source cluster of config.example.hcl: SCRAM-SHA-512
// over TLS, both from HCL.
func TestSCRAMOverTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "ca")
	k := kafkatest.NewCluster(t, kafkatest.SourceClusterID, kfake.TLS(ca.ServerConfig(t, "kafka.test")),
		kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "mirror", "pw"), kfake.SeedTopics(1, "t", "t2"))
	c := clusterFromHCL(t, bootstrap(k)+fmt.Sprintf(`
  tls {
    ca_file = %q
  }
  sasl {
    mechanism = "SCRAM-SHA-512"
    username  = "mirror"
    password  = "pw"
  }`, ca.File))
	roundTrip(t, c, "t")
}

// Guards TLS from HCL: a broker certificate signed by ca_file is accepted,
// a different CA, the system roots, a wrong server name and a plaintext
// client each fail with an error that says what to fix.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "ca")
	other := tlstest.NewCA(t, dir, "other-ca")
	k := kafkatest.NewCluster(t, kafkatest.SourceClusterID, kfake.TLS(ca.ServerConfig(t, "kafka.test")), kfake.SeedTopics(1, "t", "t2"))

	t.Run("round trip", func(t *testing.T) {
		roundTrip(t, clusterFromHCL(t, bootstrap(k)+fmt.Sprintf("\n  tls {\n    ca_file = %q\n  }", ca.File)), "t")
	})
	t.Run("server name that the certificate has", func(t *testing.T) {
		roundTrip(t, clusterFromHCL(t, bootstrap(k)+fmt.Sprintf("\n  tls {\n    ca_file = %q\n    server_name = \"kafka.test\"\n  }", ca.File)), "t2")
	})

	cases := []struct {
		name, tls string
		want      string // the error's prefix
		sentinel  error
	}{{
		name:     "wrong CA",
		tls:      fmt.Sprintf("  tls {\n    ca_file = %q\n  }", other.File),
		want:     fmt.Sprintf(`cluster "c": tls failed: the broker's certificate is not signed by a CA in tls.ca_file %s (point it at the CA that signed the brokers' certificates): `, other.File),
		sentinel: ErrTLS,
	}, {
		name:     "system roots",
		tls:      "  tls {\n  }",
		want:     `cluster "c": tls failed: the broker's certificate is not signed by a CA in the system's roots (set tls.ca_file to the CA that signed the brokers' certificates): `,
		sentinel: ErrTLS,
	}, {
		name:     "wrong server name",
		tls:      fmt.Sprintf("  tls {\n    ca_file = %q\n    server_name = \"elsewhere.test\"\n  }", ca.File),
		want:     `cluster "c": tls failed: the broker's certificate is not valid for "elsewhere.test" (set tls.server_name to a name in the certificate): `,
		sentinel: ErrTLS,
	}, {
		name: "TLS switched off",
		tls:  fmt.Sprintf("  tls {\n    enabled = false\n    ca_file = %q\n  }", ca.File),
		want: `cluster "c": ping: broker closed the connection immediately during api versions negotiation, which often happens when the broker requires TLS but the client is using plaintext: is TLS missing?`,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := Ping(testContext(t), newClient(t, clusterFromHCL(t, bootstrap(k)+"\n"+tc.tls)))
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("ping error:\n%v\nwant prefix\n%s", err, tc.want)
			}
			if tc.sentinel != nil && !errors.Is(err, tc.sentinel) {
				t.Errorf("error does not match %v", tc.sentinel)
			}
		})
	}
}

// Guards client certificates: cert_file and key_file authenticate to a
// broker that requires them; without them the broker's refusal is
// explained.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "ca")
	sc := ca.ServerConfig(t, "kafka.test")
	sc.ClientAuth = tls.RequireAndVerifyClientCert
	sc.ClientCAs = ca.Pool
	k := kafkatest.NewCluster(t, kafkatest.SourceClusterID, kfake.TLS(sc), kfake.SeedTopics(1, "t", "t2"))
	certFile, keyFile := ca.Issue(t, "client", nil, nil, x509.ExtKeyUsageClientAuth)

	roundTrip(t, clusterFromHCL(t, bootstrap(k)+fmt.Sprintf("\n  tls {\n    ca_file = %q\n    cert_file = %q\n    key_file = %q\n  }", ca.File, certFile, keyFile)), "t")

	err := Ping(testContext(t), newClient(t, clusterFromHCL(t, bootstrap(k)+fmt.Sprintf("\n  tls {\n    ca_file = %q\n  }", ca.File))))
	want := `cluster "c": tls failed: the broker refused the TLS handshake (check tls.cert_file and tls.key_file, and the broker's client authentication): `
	if !errors.Is(err, ErrTLS) || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("ping error:\n%v\nwant prefix\n%s", err, want)
	}
}

// Guards the errors of Options for TLS files: each names the cluster and
// the file that failed.
func TestOptionsFileErrors(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "ca")
	certFile, keyFile := ca.Issue(t, "client", nil, nil, x509.ExtKeyUsageClientAuth)
	_, otherKey := ca.Issue(t, "client2", nil, nil, x509.ExtKeyUsageClientAuth)
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	cases := []struct {
		name string
		tls  config.TLS
		want string
	}{
		{"missing ca_file", config.TLS{Enabled: true, CAFile: missing},
			fmt.Sprintf(`cluster "c": tls failed: read tls.ca_file: open %s: no such file or directory`, missing)},
		{"ca_file without certificates", config.TLS{Enabled: true, CAFile: notPEM},
			fmt.Sprintf(`cluster "c": tls failed: tls.ca_file %s holds no PEM certificate`, notPEM)},
		{"key of another certificate", config.TLS{Enabled: true, CertFile: certFile, KeyFile: otherKey},
			fmt.Sprintf(`cluster "c": tls failed: load tls.cert_file %s and tls.key_file %s: tls: private key does not match public key`, certFile, otherKey)},
		{"missing cert_file", config.TLS{Enabled: true, CertFile: missing, KeyFile: keyFile},
			fmt.Sprintf(`cluster "c": tls failed: load tls.cert_file %s and tls.key_file %s: open %s: no such file or directory`, missing, keyFile, missing)},
		{"cert_file alone", config.TLS{Enabled: true, CertFile: certFile},
			`cluster "c": tls failed: tls.cert_file and tls.key_file go together; set both or neither`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Options(&config.Cluster{Name: "c", BootstrapServers: []string{"127.0.0.1:1"}, TLS: tc.tls})
			if err == nil || err.Error() != tc.want {
				t.Fatalf("got  %v\nwant %s", err, tc.want)
			}
			if !errors.Is(err, ErrTLS) {
				t.Errorf("error does not match ErrTLS")
			}
		})
	}
	// With TLS disabled the files are not read.
	if _, err := Options(&config.Cluster{Name: "c", BootstrapServers: []string{"127.0.0.1:1"}, TLS: config.TLS{CAFile: missing}}); err != nil {
		t.Errorf("disabled TLS read its files: %v", err)
	}
	if _, err := Options(&config.Cluster{Name: "c"}); err == nil || err.Error() != `cluster "c": no bootstrap servers` {
		t.Errorf("no bootstrap servers: %v", err)
	}
	if _, err := Options(&config.Cluster{Name: "c", BootstrapServers: []string{"x:1"}, SASL: config.SASL{Mechanism: "GSSAPI"}}); err == nil ||
		err.Error() != `cluster "c": unknown sasl.mechanism "GSSAPI" (use PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER)` {
		t.Errorf("unknown mechanism: %v", err)
	}
}

// Guards that Options passes every setting to kgo as configured.
func TestOptionsValues(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "ca")
	c := &config.Cluster{
		Name: "c", BootstrapServers: []string{"k1:9093", "k2:9093"}, ClientID: "mirror-c",
		TLS:  config.TLS{Enabled: true, CAFile: ca.File, ServerName: "kafka.test", InsecureSkipVerify: true},
		SASL: config.SASL{Mechanism: config.MechanismScramSHA256, Username: "u", Password: "p"},
	}
	cl := newClient(t, c)
	if got := cl.OptValue(kgo.SeedBrokers); !slices.Equal(got.([]string), []string{"k1:9093", "k2:9093"}) {
		t.Errorf("seed brokers %v", got)
	}
	if got := cl.OptValue(kgo.ClientID); got != "mirror-c" {
		t.Errorf("client id %v", got)
	}
	if cl.OptValue(kgo.Dialer) == nil {
		t.Error("no dialer")
	}
	tc, err := tlsConfig(c)
	if err != nil || tc == nil || tc.ServerName != "kafka.test" || !tc.InsecureSkipVerify || tc.RootCAs == nil || !tc.RootCAs.Equal(ca.Pool) {
		t.Errorf("tls config %+v (%v)", tc, err)
	}
	ms, _ := cl.OptValue(kgo.SASL).([]sasl.Mechanism)
	if len(ms) != 1 || ms[0].Name() != "SCRAM-SHA-256" {
		t.Errorf("sasl %v", ms)
	}

	plainCl := newClient(t, &config.Cluster{Name: "p", BootstrapServers: []string{"k:1"}, ClientID: "x"})
	if tc, _ := plainCl.OptValue(kgo.DialTLSConfig).(*tls.Config); tc != nil {
		t.Error("TLS enabled without tls")
	}
	if plainCl.OptValue(kgo.Dialer) == nil {
		t.Error("no dialer without tls")
	}
	if ms, _ := plainCl.OptValue(kgo.SASL).([]sasl.Mechanism); len(ms) != 0 {
		t.Error("SASL enabled without a mechanism")
	}
}

// Guards the explanation of what Apache Kafka answers (kfake closes the
// connection instead): SASL_AUTHENTICATION_FAILED and
// UNSUPPORTED_SASL_MECHANISM as returned by kgo.
func TestExplainBrokerErrors(t *testing.T) {
	h := &hook{cluster: "c", mechanism: config.MechanismScramSHA512, user: "u"}
	cases := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("%w: Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512", kerr.SaslAuthenticationFailed),
			`cluster "c": authentication failed: the broker refused SASL SCRAM-SHA-512 for user "u" (check sasl.username and the password): SASL_AUTHENTICATION_FAILED: `},
		{kerr.UnsupportedSaslMechanism,
			`cluster "c": authentication failed: the broker does not offer SASL SCRAM-SHA-512 (set sasl.mechanism to one it offers): UNSUPPORTED_SASL_MECHANISM: `},
	}
	for _, tc := range cases {
		err := h.explain(tc.err, false)
		if !errors.Is(err, ErrAuthentication) || !errors.Is(err, tc.err) || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("explain(%v) =\n%v\nwant prefix\n%s", tc.err, err, tc.want)
		}
	}
	// An error that is neither SASL nor TLS is passed on with the cluster.
	if err := h.explain(context.DeadlineExceeded, false); err.Error() != `cluster "c": ping: context deadline exceeded` || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("explain deadline: %v", err)
	}
}

// Guards Ping against a client that was not built from Options.
func TestPingNeedsOptions(t *testing.T) {
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := Ping(testContext(t), cl); err == nil || !strings.Contains(err.Error(), "dial.Options") {
		t.Errorf("ping: %v", err)
	}
}

// fastReload makes secret files' stats trusted for 10ms only, for the test.
func fastReload(t *testing.T) {
	old := checkInterval
	checkInterval = 10 * time.Millisecond
	t.Cleanup(func() { checkInterval = old })
}

func writeSecret(t *testing.T, path, content string) {
	t.Helper()
	// Through a rename, as Kubernetes swaps a mounted secret.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// Guards password_file through the whole chain: the password is read from
// the file, and a rotated file is used by the next connection without a
// new client.
func TestPasswordFile(t *testing.T) {
	fastReload(t)
	k := kafkatest.NewCluster(t, kafkatest.SourceClusterID, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "mirror", "right-pass"), kfake.SeedTopics(1, "t"))
	path := filepath.Join(t.TempDir(), "password")
	writeSecret(t, path, "wrong-pass\n")
	c := clusterFromHCL(t, bootstrap(k)+fmt.Sprintf("\n  sasl {\n    mechanism = \"SCRAM-SHA-256\"\n    username = \"mirror\"\n    password_file = %q\n  }", path))
	if c.SASL.Password != "wrong-pass" || c.SASL.PasswordFile != path {
		t.Fatalf("sasl %+v", c.SASL)
	}
	cl := newClient(t, c)
	if err := Ping(testContext(t), cl); !errors.Is(err, ErrAuthentication) || strings.Contains(err.Error(), "wrong-pass") {
		t.Fatalf("ping with the wrong password in the file: %v", err)
	}
	writeSecret(t, path, "right-pass\n")
	time.Sleep(20 * time.Millisecond)
	if err := Ping(testContext(t), cl); err != nil {
		t.Fatalf("ping after the file was rotated: %v", err)
	}
}

// oauthCluster is the HCL of cluster "c" on k with an OAUTHBEARER sasl block
// of the given lines.
func oauthCluster(t *testing.T, k *kfake.Cluster, lines ...string) *config.Cluster {
	t.Helper()
	return clusterFromHCL(t, bootstrap(k)+"\n  sasl {\n    mechanism = \"OAUTHBEARER\"\n    "+strings.Join(lines, "\n    ")+"\n  }")
}

// Guards OAUTHBEARER with a token file, on the wire (kfake plays the
// broker's half, as Kafka does it): the file's token and the extensions
// reach the broker, a rotated file is sent by the next connection, and a
// refused token is explained with the file to check.
func TestOAuthBearerTokenFile(t *testing.T) {
	fastReload(t)
	k := kafkatest.NewCluster(t, kafkatest.SourceClusterID, kfake.SeedTopics(1, "t"))
	var mu sync.Mutex
	accepted := "token-one"
	logins := make(chan oauthtest.Login, 100)
	oauthtest.Broker(k, func(l oauthtest.Login) error {
		mu.Lock()
		defer mu.Unlock()
		if l.Token != accepted {
			return errors.New("the token is not valid")
		}
		return nil
	}, logins)
	path := filepath.Join(t.TempDir(), "token")
	writeSecret(t, path, "token-one\n")
	c := oauthCluster(t, k, fmt.Sprintf("token_file = %q", path), `extensions = { logicalCluster = "lkc-1" }`)
	roundTrip(t, c, "t")
	l := <-logins
	if l.Token != "token-one" || len(l.Extensions) != 1 || l.Extensions["logicalCluster"] != "lkc-1" {
		t.Errorf("the broker saw %+v", l)
	}

	// Rotation, with the options built once as the agent does: the old
	// token is no longer accepted; the next connection sends the new one.
	opts, err := Options(c)
	if err != nil {
		t.Fatal(err)
	}
	ping := func() error {
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		return Ping(testContext(t), cl)
	}
	if err := ping(); err != nil {
		t.Fatalf("ping: %v", err)
	}
	mu.Lock()
	accepted = "token-two"
	mu.Unlock()
	writeSecret(t, path, "token-two\n")
	time.Sleep(20 * time.Millisecond)
	if err := ping(); err != nil {
		t.Fatalf("ping after the token file was rotated: %v", err)
	}

	// A token the broker refuses.
	writeSecret(t, path, "token-three\n")
	time.Sleep(20 * time.Millisecond)
	err = ping()
	want := fmt.Sprintf(`cluster "c": authentication failed: the broker refused the SASL OAUTHBEARER token from sasl.token_file %s (check that the file holds a token the broker accepts, and that it has not expired): `, path)
	if !errors.Is(err, ErrAuthentication) || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "the token is not valid") {
		t.Fatalf("ping with a refused token:\n%v\nwant prefix\n%s", err, want)
	}
	if strings.Contains(err.Error(), "token-three") {
		t.Errorf("the error shows the token: %v", err)
	}
}

// Guards OAUTHBEARER with the client-credentials grant: mirrord gets an
// unsecured JWT from the token endpoint as the configured client with the
// secret from client_secret_file and the scope, every client built from one
// Options shares one token, and an endpoint that refuses the client is
// explained with the endpoint and the secret's file, not the secret.
func TestOAuthBearerClientCredentials(t *testing.T) {
	const secret = "Client-Secret-9"
	ep := oauthtest.NewEndpoint(t, "mirrord-c", secret)
	k := kafkatest.NewCluster(t, kafkatest.SourceClusterID, kfake.SeedTopics(1, "t"))
	logins := make(chan oauthtest.Login, 100)
	oauthtest.Broker(k, func(l oauthtest.Login) error {
		claims, err := oauthtest.Claims(l.Token)
		if err != nil {
			return err
		}
		if claims["sub"] != "mirrord-c" || claims["scope"] != "kafka" {
			return fmt.Errorf("claims %v", claims)
		}
		return nil
	}, logins)
	secretPath := filepath.Join(t.TempDir(), "client-secret")
	writeSecret(t, secretPath, secret+"\n")
	c := oauthCluster(t, k, fmt.Sprintf("token_endpoint = %q", ep.URL()), `client_id = "mirrord-c"`,
		fmt.Sprintf("client_secret_file = %q", secretPath), `scope = "kafka"`)

	opts, err := Options(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	for range 3 {
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			t.Fatal(err)
		}
		err = Ping(ctx, cl)
		cl.Close()
		if err != nil {
			t.Fatalf("ping: %v", err)
		}
	}
	if n := ep.Requests(); n != 1 {
		t.Errorf("%d token requests for three clients of one Options, want 1", n)
	}
	if l := <-logins; len(ep.Issued()) != 1 || l.Token != ep.Issued()[0] {
		t.Errorf("the broker saw another token than the endpoint issued")
	}

	writeSecret(t, secretPath, "not-the-secret\n")
	bad := oauthCluster(t, k, fmt.Sprintf("token_endpoint = %q", ep.URL()), `client_id = "mirrord-c"`, fmt.Sprintf("client_secret_file = %q", secretPath))
	err = Ping(testContext(t), newClient(t, bad))
	want := fmt.Sprintf(`cluster "c": authentication failed: no OAUTHBEARER token (check sasl.client_id, the client secret in sasl.client_secret_file %s, sasl.scope and what the broker requires of tokens): `+
		`token endpoint failed: token endpoint %s (client "mirrord-c") answered 401 Unauthorized: "invalid_client: client authentication failed"`, secretPath, ep.URL())
	if !errors.Is(err, ErrAuthentication) || !errors.Is(err, oauth.ErrTokenEndpoint) || err.Error() != want {
		t.Fatalf("ping with a refused client:\n%v\nwant\n%s", err, want)
	}
	if strings.Contains(err.Error(), "not-the-secret") || strings.Contains(err.Error(), secret) {
		t.Errorf("the error shows a secret: %v", err)
	}
}

// Guards TokenSource for what a real-broker test calls it with.
func TestTokenSource(t *testing.T) {
	if _, err := TokenSource(&config.Cluster{Name: "c", SASL: config.SASL{Mechanism: config.MechanismPlain}}); err == nil ||
		err.Error() != `cluster "c": sasl.mechanism is "PLAIN", not OAUTHBEARER` {
		t.Errorf("PLAIN: %v", err)
	}
	path := filepath.Join(t.TempDir(), "token")
	writeSecret(t, path, "tok\n")
	src, err := TokenSource(&config.Cluster{Name: "c", SASL: config.SASL{Mechanism: config.MechanismOAuthBearer, TokenFile: path}})
	if err != nil {
		t.Fatal(err)
	}
	if tok, err := src.Token(testContext(t)); err != nil || tok != "tok" {
		t.Errorf("token %q, %v", tok, err)
	}
}

// Guards the words for the error statuses Kafka's OAUTHBEARER server sends
// (RFC 7628 section 3.2.2, as SASL_AUTHENTICATION_FAILED's message), and
// that a refusal without one keeps its form.
func TestExplainOAuthStatus(t *testing.T) {
	h := &hook{cluster: "c", mechanism: config.MechanismOAuthBearer, sasl: config.SASL{Mechanism: config.MechanismOAuthBearer, TokenFile: "/run/token"}}
	head := `cluster "c": authentication failed: the broker refused the SASL OAUTHBEARER token from sasl.token_file /run/token`
	tail := ` (check that the file holds a token the broker accepts, and that it has not expired): SASL_AUTHENTICATION_FAILED: `
	for _, tc := range []struct{ msg, want string }{
		{`SASL Authentication failed.: {"status":"insufficient_scope", "scope":"[kafka]"}`,
			head + ": the token lacks the scope \"kafka\" that the broker requires" + tail},
		{`SASL Authentication failed.: {"status":"insufficient_scope", "scope":"[kafka, mirror]"}`,
			head + ": the token lacks the scope \"kafka, mirror\" that the broker requires" + tail},
		{`SASL Authentication failed.: {"status":"invalid_token"}`,
			head + ": the broker found the token invalid (expired, not yet valid, or not signed or formed as it requires)" + tail},
		{`SASL Authentication failed.: {"status":"invalid_request", "openid-configuration":"x"}`,
			head + `: the broker answered status "invalid_request"` + tail},
		{`Authentication failed: the token is not valid`, head + tail},
		{`Authentication failed: {not json}`, head + tail},
	} {
		err := h.explain(fmt.Errorf("%w: %s", kerr.SaslAuthenticationFailed, tc.msg), false)
		if !errors.Is(err, ErrAuthentication) || !strings.HasPrefix(err.Error(), tc.want) || !strings.HasSuffix(err.Error(), tc.msg) {
			t.Errorf("explain(%q) =\n%v\nwant prefix\n%s", tc.msg, err, tc.want)
		}
	}
}

// Guards Explain, for errors a running client meets: a refused token is
// explained with the file to check, other errors pass unchanged, and an
// explained error is not wrapped twice.
func TestExplain(t *testing.T) {
	c := &config.Cluster{Name: "dst", SASL: config.SASL{Mechanism: config.MechanismOAuthBearer, TokenFile: "/run/token"}}
	refused := fmt.Errorf("commit: %w: SASL Authentication failed.: {\"status\":\"invalid_token\"}", kerr.SaslAuthenticationFailed)
	err := Explain(c, refused)
	want := `cluster "dst": authentication failed: the broker refused the SASL OAUTHBEARER token from sasl.token_file /run/token: the broker found the token invalid`
	if !errors.Is(err, ErrAuthentication) || !errors.Is(err, kerr.SaslAuthenticationFailed) || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Explain(refused) =\n%v\nwant prefix\n%s", err, want)
	}
	if again := Explain(c, err); again != err { //nolint:errorlint // Explain must return the very same error value
		t.Errorf("Explain twice: %v", again)
	}
	other := fmt.Errorf("produce: %w", kerr.NotLeaderForPartition)
	if got := Explain(c, other); got != other { //nolint:errorlint // Explain must return the very same error value
		t.Errorf("Explain(other) = %v, want it unchanged", got)
	}
	if Explain(c, nil) != nil {
		t.Error("Explain(nil) is not nil")
	}
}

// Guards RetryBackoff: Kafka's Java clients' schedule, 100 ms doubling up
// to 1 s, each wait less up to a fifth at random and never above 1 s.
func TestRetryBackoff(t *testing.T) {
	for fails, want := range map[int]time.Duration{
		0: 100 * time.Millisecond, 1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond,
		4: 800 * time.Millisecond, 5: time.Second, 6: time.Second, 40: time.Second, 1 << 20: time.Second,
	} {
		for range 200 {
			if got := RetryBackoff(fails); got > want || got < want-want/5 {
				t.Fatalf("RetryBackoff(%d) = %v, want from %v to %v", fails, got, want-want/5, want)
			}
		}
	}
}
