package dial

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/internal/testkit/oauthtest"
	"github.com/seed83556561/mirrord/internal/testkit/realkafka"
)

// The real-Kafka tier of OAUTHBEARER: a broker listener with Kafka's own
// unsecured validator (OAuthBearerUnsecuredValidatorCallbackHandler), which
// checks a token's exp and requires the scope "kafka", and
// connections.max.reauth.ms = 10 s, so that every connection authenticates
// again (KIP-368) within the test.

// oauthJAAS is the listener's login module: the broker's own token (for
// the login module's sake; inter-broker traffic is PLAINTEXT) and the scope
// the validator requires of every client token.
const oauthJAAS = `org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="admin" unsecuredValidatorRequiredScope="kafka";`

// reauthMs is the broker's connections.max.reauth.ms.
const reauthMs = 10000

func oauthBroker(t *testing.T, version string) *realkafka.Cluster {
	t.Helper()
	return realkafka.ForTest(t, realkafka.Config{
		Version: version,
		Listeners: []realkafka.Listener{{
			Name: "OAUTH", Protocol: realkafka.SASLPlaintext, Mechanisms: []string{realkafka.OAuthBearer},
			Props: map[string]string{"oauthbearer.sasl.jaas.config": oauthJAAS},
		}},
		BrokerProps: map[string]string{"connections.max.reauth.ms": fmt.Sprint(reauthMs)},
	})
}

// oauthHCL is cluster "c" on the broker's OAUTHBEARER listener with the
// given sasl lines.
func oauthHCL(t *testing.T, c *realkafka.Cluster, lines ...string) *config.Cluster {
	t.Helper()
	return clusterFromHCL(t, fmt.Sprintf("  bootstrap_servers = [%q]\n  client_id = \"mirrord-oauth-test\"\n", c.Addrs()[0])+
		"  sasl {\n    mechanism = \"OAUTHBEARER\"\n    "+strings.Join(lines, "\n    ")+"\n  }")
}

// authCounter counts, from a client's hooks, the connections it opened and
// the SASL authentications on them: more authentications than connections
// is re-authentication.
type authCounter struct {
	connects, auths, authErrs atomic.Int64
}

func (a *authCounter) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err == nil {
		a.connects.Add(1)
	}
}

func (a *authCounter) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if key != int16(kmsg.SASLAuthenticate) {
		return
	}
	if e2e.Err() != nil {
		a.authErrs.Add(1)
		return
	}
	a.auths.Add(1)
}

// Guards SASL OAUTHBEARER against Apache Kafka's own broker half: a token
// from token_file and from the client-credentials grant authenticates and
// carries data both ways; a rotated token file reaches new connections; one
// token request serves every client of one Options; connections
// re-authenticate (KIP-368) with fresh tokens for ~40 s without an error;
// a token without the required scope and an expired one are refused with
// ErrAuthentication, the token file and Kafka's own message; SASL
// extensions do not get in the way.
func TestOAuthBearerRealBroker(t *testing.T) {
	for _, v := range realkafka.TestVersions(t) {
		t.Run(v, func(t *testing.T) {
			realkafka.RequireTools(t)
			start := time.Now()
			defer func() { t.Logf("wall time on Kafka %s: %s", v, time.Since(start).Round(100*time.Millisecond)) }()
			fastReload(t)
			c := oauthBroker(t, v)
			admin, err := kgo.NewClient(kgo.SeedBrokers(c.ListenerAddrs(realkafka.Internal)...))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(admin.Close)
			ctx := testContext(t)
			for _, topic := range []string{"token-file", "client-credentials", "reauth", "extensions"} {
				if _, err := kadm.NewClient(admin).CreateTopic(ctx, 1, 1, nil, topic); err != nil {
					t.Fatalf("create topic %s: %v", topic, err)
				}
			}
			dir := t.TempDir()

			t.Run("token file", func(t *testing.T) {
				path := filepath.Join(dir, "token")
				writeSecret(t, path, oauthtest.UnsecuredJWT("mirrord", time.Now(), time.Hour, "kafka")+"\n")
				cc := oauthHCL(t, c, fmt.Sprintf("token_file = %q", path))
				roundTrip(t, cc, "token-file")

				// Rotation, with the options built once as the agent
				// builds them: each new connection reads the file again.
				opts, err := Options(cc)
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
				writeSecret(t, path, oauthtest.UnsecuredJWT("mirrord", time.Now(), time.Hour, "not-kafka")+"\n")
				time.Sleep(20 * time.Millisecond)
				if err := ping(); !errors.Is(err, ErrAuthentication) {
					t.Fatalf("ping after the file was rotated to a token the broker refuses: %v, want ErrAuthentication", err)
				}
				writeSecret(t, path, oauthtest.UnsecuredJWT("mirrord-rotated", time.Now(), time.Hour, "kafka")+"\n")
				time.Sleep(20 * time.Millisecond)
				if err := ping(); err != nil {
					t.Fatalf("ping after the file was rotated back to a good token: %v", err)
				}
			})

			t.Run("client credentials", func(t *testing.T) {
				const secret = "Client-Secret-real-7"
				ep := oauthtest.NewEndpoint(t, "mirrord-c", secret)
				secretPath := filepath.Join(dir, "client-secret")
				writeSecret(t, secretPath, secret+"\n")
				cc := oauthHCL(t, c, fmt.Sprintf("token_endpoint = %q", ep.URL()), `client_id = "mirrord-c"`,
					fmt.Sprintf("client_secret_file = %q", secretPath), `scope = "kafka"`)
				opts, err := Options(cc)
				if err != nil {
					t.Fatal(err)
				}
				produceConsume(t, opts, "client-credentials", 5)
				for range 3 {
					cl, err := kgo.NewClient(opts...)
					if err != nil {
						t.Fatal(err)
					}
					err = Ping(testContext(t), cl)
					cl.Close()
					if err != nil {
						t.Fatalf("ping: %v", err)
					}
				}
				if n := ep.Requests(); n != 1 {
					t.Errorf("%d token requests for five clients of one Options, want 1", n)
				}
				claims, err := oauthtest.Claims(ep.Issued()[0])
				if err != nil || claims["sub"] != "mirrord-c" || claims["scope"] != "kafka" {
					t.Errorf("issued token claims %v (%v)", claims, err)
				}
			})

			t.Run("reauthentication", func(t *testing.T) {
				const secret = "Client-Secret-reauth"
				ep := oauthtest.NewEndpoint(t, "mirrord-r", secret)
				ep.Lifetime = 12 * time.Second // refreshed after four fifths: about 10 s
				secretPath := filepath.Join(dir, "client-secret-r")
				writeSecret(t, secretPath, secret+"\n")
				cc := oauthHCL(t, c, fmt.Sprintf("token_endpoint = %q", ep.URL()), `client_id = "mirrord-r"`,
					fmt.Sprintf("client_secret_file = %q", secretPath), `scope = "kafka"`)
				opts, err := Options(cc)
				if err != nil {
					t.Fatal(err)
				}
				var hooks authCounter
				reauth(t, append(opts, kgo.WithHooks(&hooks)), "reauth", 40*time.Second)
				if n := ep.Requests(); n < 2 {
					t.Errorf("%d token requests in 40 s with tokens of %s, want at least 2", n, ep.Lifetime)
				}
				if hooks.authErrs.Load() > 0 {
					t.Errorf("%d SASL authentications failed", hooks.authErrs.Load())
				}
				if a, cn := hooks.auths.Load(), hooks.connects.Load(); a <= cn {
					t.Errorf("%d authentications on %d connections in 40 s with connections.max.reauth.ms=%d: no re-authentication", a, cn, reauthMs)
				} else {
					t.Logf("%d token requests, %d authentications on %d connections", ep.Requests(), a, cn)
				}
			})

			t.Run("refusals", func(t *testing.T) {
				for _, tc := range []struct {
					name, token, why, says string
				}{
					{"wrong scope", oauthtest.UnsecuredJWT("mirrord", time.Now(), time.Hour, "other"),
						"the token lacks the scope \"kafka\" that the broker requires",
						`SASL_AUTHENTICATION_FAILED: SASL Authentication failed.: {"status":"insufficient_scope", "scope":"[kafka]"}`},
					{"expired", oauthtest.UnsecuredJWT("mirrord", time.Now().Add(-2*time.Hour), time.Hour, "kafka"),
						"the broker found the token invalid (expired, not yet valid, or not signed or formed as it requires)",
						`SASL_AUTHENTICATION_FAILED: SASL Authentication failed.: {"status":"invalid_token"}`},
				} {
					t.Run(tc.name, func(t *testing.T) {
						path := filepath.Join(t.TempDir(), "token")
						writeSecret(t, path, tc.token+"\n")
						err := Ping(testContext(t), newClient(t, oauthHCL(t, c, fmt.Sprintf("token_file = %q", path))))
						want := fmt.Sprintf(`cluster "c": authentication failed: the broker refused the SASL OAUTHBEARER token from sasl.token_file %s: %s (check that the file holds a token the broker accepts, and that it has not expired): `, path, tc.why)
						if !errors.Is(err, ErrAuthentication) || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), tc.says) {
							t.Fatalf("ping:\n%v\nwant ErrAuthentication, prefix\n%s\nand Kafka's %s", err, want, tc.says)
						}
						if strings.Contains(err.Error(), tc.token) {
							t.Errorf("the error shows the token: %v", err)
						}
						t.Logf("%s: %v", tc.name, err)
					})
				}
			})

			t.Run("extensions", func(t *testing.T) {
				path := filepath.Join(dir, "token-ext")
				writeSecret(t, path, oauthtest.UnsecuredJWT("mirrord", time.Now(), time.Hour, "kafka")+"\n")
				cc := oauthHCL(t, c, fmt.Sprintf("token_file = %q", path), `extensions = { logicalCluster = "lkc-abc123", traceId = "t-1" }`)
				if len(cc.SASL.Extensions) != 2 {
					t.Fatalf("extensions %v", cc.SASL.Extensions)
				}
				roundTrip(t, cc, "extensions")
			})
		})
	}
}

// produceConsume produces n records through one client of opts and
// consumes them through another, checking each.
func produceConsume(t *testing.T, opts []kgo.Opt, topic string, n int) {
	t.Helper()
	ctx := testContext(t)
	prod, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic(topic))...)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var sent []*kgo.Record
	for i := range n {
		sent = append(sent, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "value %d of %s", i, topic)})
	}
	if err := prod.ProduceSync(ctx, sent...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	cons, err := kgo.NewClient(append(opts, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	var got []*kgo.Record
	for len(got) < n {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d: %v", len(got), n, err)
		}
		fs.EachError(func(tp string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", tp, p, err) })
		got = append(got, fs.Records()...)
	}
	for i, r := range got {
		if i >= n || string(r.Key) != string(sent[i].Key) || string(r.Value) != string(sent[i].Value) || r.Offset != int64(i) {
			t.Fatalf("record %d: %s=%q at offset %d, want %s=%q at offset %d", i, r.Key, r.Value, r.Offset, sent[min(i, n-1)].Key, sent[min(i, n-1)].Value, i)
		}
	}
}

// reauth keeps a producer and a consumer of opts busy on topic for d: a
// record every 100 ms, each consumed and checked in order. Any produce or
// fetch error fails the test.
func reauth(t *testing.T, opts []kgo.Opt, topic string, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
	defer cancel()
	prod, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(0))...)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	cons, err := kgo.NewClient(append(opts, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(time.Second))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()

	var (
		wg   sync.WaitGroup
		sent atomic.Int64
		perr error
	)
	wg.Go(func() {
		end := time.Now().Add(d)
		for i := 0; time.Now().Before(end); i++ {
			if err := prod.ProduceSync(ctx, &kgo.Record{Key: fmt.Appendf(nil, "r%05d", i)}).FirstErr(); err != nil {
				perr = fmt.Errorf("produce record %d after %s: %w", i, time.Since(end.Add(-d)).Round(time.Millisecond), err)
				return
			}
			sent.Add(1)
			time.Sleep(100 * time.Millisecond)
		}
	})
	var next int64
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for finished := false; ; {
		select {
		case <-done:
			finished = true
		default:
		}
		if finished && next >= sent.Load() {
			break
		}
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		fs := cons.PollFetches(pctx)
		pcancel()
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records: %v", next, sent.Load(), ctx.Err())
		}
		fs.EachError(func(tp string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("fetch %s/%d after %d records: %v", tp, p, next, err)
			}
		})
		for _, r := range fs.Records() {
			if want := fmt.Sprintf("r%05d", next); string(r.Key) != want || r.Offset != next {
				t.Fatalf("record at offset %d has key %s, want %s at offset %d", r.Offset, r.Key, want, next)
			}
			next++
		}
	}
	if perr != nil {
		t.Fatal(perr)
	}
	if next < int64(d/(200*time.Millisecond)) {
		t.Errorf("only %d records in %s", next, d)
	}
}
