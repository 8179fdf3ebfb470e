package realkafka

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
)

// unsecuredJWT is a token Kafka's OAuthBearerUnsecuredValidatorCallbackHandler
// accepts: alg none, a sub claim (the principal) and an expiry.
func unsecuredJWT(sub string) string {
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	now := time.Now().Unix()
	return enc(map[string]string{"alg": "none"}) + "." + enc(map[string]any{"sub": sub, "iat": now, "exp": now + 3600}) + "."
}

// An example for ACL and OAUTHBEARER tests, and the guard that the
// launcher's listeners allow them: KRaft's StandardAuthorizer with the
// launcher's PLAINTEXT CONTROLLER and INTERNAL listeners as super user
// (their principal is User:ANONYMOUS), and an OAUTHBEARER listener whose
// principal is the token's sub claim. The principal is refused until an ACL
// lets it write.
func TestAuthorizerAndOAuth(t *testing.T) {
	for _, v := range TestVersions(t) {
		t.Run(v, func(t *testing.T) {
			c := ForTest(t, Config{
				Version:   v,
				Listeners: []Listener{{Name: "OAUTH", Protocol: SASLPlaintext, Mechanisms: []string{OAuthBearer}}},
				BrokerProps: map[string]string{
					"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
					"super.users":           "User:ANONYMOUS",
				},
			})
			ctx := t.Context()
			admin := client(t, c.ListenerAddrs(Internal))
			createTopic(t, ctx, admin, "acl", 1, 1, nil)

			produce := func() error {
				cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...), kgo.SASL(oauth.Auth{Token: unsecuredJWT("carol")}.AsMechanism()),
					kgo.DefaultProduceTopic("acl"), kgo.RequestRetries(0), kgo.ProduceRequestTimeout(5*time.Second))
				if err != nil {
					return err
				}
				defer cl.Close()
				pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				return cl.ProduceSync(pctx, &kgo.Record{Value: []byte("carol was here")}).FirstErr()
			}
			if err := produce(); !errors.Is(err, kerr.TopicAuthorizationFailed) {
				t.Fatalf("produce without an ACL: %v, want TOPIC_AUTHORIZATION_FAILED", err)
			}
			acl := kadm.NewACLs().Allow("User:carol").Topics("acl").Operations(kadm.OpWrite, kadm.OpDescribe).ResourcePatternType(kadm.ACLPatternLiteral)
			res, err := kadm.NewClient(admin).CreateACLs(ctx, acl)
			if err == nil {
				for _, r := range res {
					err = errors.Join(err, r.Err)
				}
			}
			if err != nil {
				t.Fatalf("create ACL: %v", err)
			}
			deadline := time.Now().Add(20 * time.Second)
			for {
				err := produce()
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("produce with the ACL: %v", err)
				}
				time.Sleep(300 * time.Millisecond)
			}
			if err := checkValue(ctx, admin, "acl", "carol was here"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func checkValue(ctx context.Context, cl *kgo.Client, topic, want string) error {
	cl.AddConsumeTopics(topic)
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			return fmt.Errorf("read %s: %w", topic, err)
		}
		found := false
		fs.EachRecord(func(r *kgo.Record) { found = found || string(r.Value) == want })
		if found {
			return nil
		}
	}
}
