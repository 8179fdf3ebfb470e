package link

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/internal/testkit/mirrortest"
	"github.com/seed83556561/mirrord/internal/testkit/oauthtest"
	"github.com/seed83556561/mirrord/internal/testkit/realkafka"
)

// oauthClusters are the clusters of the OAUTHBEARER link test: their
// embedded mirrortest clusters' clients use the PLAINTEXT listener;
// secured is the listener mirrord uses, with Kafka's unsecured validator
// requiring the scope "kafka", on brokers that make every connection
// re-authenticate after 10 s (KIP-368).
func oauthClusters(t *testing.T, b mirrortest.Backend) (src, dst *securedCluster) {
	t.Helper()
	return securedClusters(t, b, "oauth", realkafka.Listener{
		Name: "OAUTH", Protocol: realkafka.SASLPlaintext, Mechanisms: []string{realkafka.OAuthBearer}, Props: map[string]string{
			"oauthbearer.sasl.jaas.config": `org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="admin" unsecuredValidatorRequiredScope="kafka";`,
		},
	}, map[string]string{
		"connections.max.reauth.ms":                                   "10000",
		"transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
	})
}

// authHooks count, for every client of a link, the connections opened and
// the SASL authentications on them.
type authHooks struct {
	connects, auths, authErrs atomic.Int64
}

func (a *authHooks) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err == nil {
		a.connects.Add(1)
	}
}

func (a *authHooks) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if key != int16(kmsg.SASLAuthenticate) {
		return
	}
	if e2e.Err() != nil {
		a.authErrs.Add(1)
		return
	}
	a.auths.Add(1)
}

// Guards a link that reaches both clusters with SASL OAUTHBEARER tokens
// from token_file on Kafka's own broker half, with what a token sidecar
// does: tokens of 15 s, the file replaced every 5 s, brokers that ask every
// connection to re-authenticate after 10 s. A link that kept the first
// token would be refused at its first re-authentication after 15 s; this
// one mirrors for 40 s without an error, checked record by record.
func TestOAuthBearerLink(t *testing.T) {
	mirrortest.RealOnly(t, func(t *testing.T, b mirrortest.Backend) {
		defer logWallTime(t, b)()
		src, dst := oauthClusters(t, b)
		e := &env{b: b, n: mirrortest.NamesFor(t, b)}
		f := e.mirroredBetween(t, src.cluster, dst.cluster, "oauth", srcTopic("o", 2))

		dir := t.TempDir()
		srcToken, dstToken := filepath.Join(dir, "src-token"), filepath.Join(dir, "dst-token")
		var written atomic.Int64
		write := func() {
			for _, f := range []struct{ path, sub string }{{srcToken, "mirror-src"}, {dstToken, "mirror-dst"}} {
				tmp := f.path + ".tmp" // through a rename, as Kubernetes swaps a mounted secret
				if err := os.WriteFile(tmp, []byte(oauthtest.UnsecuredJWT(f.sub, time.Now(), 15*time.Second, "kafka")+"\n"), 0o600); err != nil {
					t.Error(err)
					return
				}
				if err := os.Rename(tmp, f.path); err != nil {
					t.Error(err)
					return
				}
			}
			written.Add(1)
		}
		write()
		sidecar, stopSidecar := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() {
			tick := time.NewTicker(5 * time.Second)
			defer tick.Stop()
			for {
				select {
				case <-sidecar.Done():
					return
				case <-tick.C:
					write()
				}
			}
		})

		srcBlock := config.Cluster{Name: "src", BootstrapServers: src.secured, ClientID: "mirrord",
			SASL: config.SASL{Mechanism: config.MechanismOAuthBearer, TokenFile: srcToken}}
		dstBlock := config.Cluster{Name: "dst", BootstrapServers: dst.secured, ClientID: "mirrord",
			SASL: config.SASL{Mechanism: config.MechanismOAuthBearer, TokenFile: dstToken, Extensions: map[string]string{"logicalCluster": "lkc-dst"}}}
		f.cfg.Source, f.cfg.Destination = clusterOf(&srcBlock), clusterOf(&dstBlock)
		// The test asserts one session throughout (no failure at all):
		// linkConfig's 3 s lease lapses when a loaded machine holds a
		// state commit up that long, a failure of another kind that
		// the lease tests cover.
		f.cfg.Link.SessionTimeout = 30 * time.Second
		var hooks authHooks
		l := f.startWith(Deps{
			SourceOpts:      append(dialed(t, &srcBlock), kgo.WithHooks(&hooks)),
			DestinationOpts: append(dialed(t, &dstBlock), kgo.WithHooks(&hooks)),
		})
		// The link stops (cleanup, LIFO) before the sidecar does.
		t.Cleanup(func() { stopSidecar(); wg.Wait() })

		f.load(idempotent, 3, "i0", 200)
		l.waitState(t, Mirroring, 90*time.Second)
		f.waitMirrored(60 * time.Second)
		mirroring := time.Now()
		for i := 1; time.Since(mirroring) < 40*time.Second; i++ {
			kind := []mirrortest.Kind{idempotent, transactional, plain}[i%3]
			f.load(kind, i%5, fmt.Sprintf("r%d", i), 70)
			time.Sleep(4 * time.Second)
		}
		f.waitMirrored(60 * time.Second)
		n := f.exactlyOnce()

		st := l.Status()
		if st.LastError != "" || l.prepared.Load() != 1 || st.State != Mirroring {
			t.Errorf("link %s: state %s, prepared %d times, last error %q; want MIRRORING throughout", st.Name, st.State, l.prepared.Load(), st.LastError)
		}
		if hooks.authErrs.Load() > 0 {
			t.Errorf("%d SASL authentications failed", hooks.authErrs.Load())
		}
		a, c := hooks.auths.Load(), hooks.connects.Load()
		if a <= c {
			t.Errorf("%d authentications on %d connections over %s: no re-authentication", a, c, time.Since(mirroring).Round(time.Second))
		}
		t.Logf("%d records mirrored through OAUTHBEARER; token files written %d times; %d authentications on %d connections", n, written.Load(), a, c)
	})
}
