package statestore

import (
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
)

// Guards Ensure against a destination with ACLs (kfake's authorizer; the
// real-tier test in package link runs the same on Kafka): a state topic
// created beforehand needs no Create, which KRaft refuses even for a topic
// that exists; each permission a session needs and lacks is named with the
// topic and the principal at the first Ensure, not at the next start or
// the next replay.
func TestEnsureChecksACLs(t *testing.T) {
	const topic = "__mirror_state"
	all := []kadm.ACLOperation{kadm.OpCreate, kadm.OpRead, kadm.OpWrite, kadm.OpDescribeConfigs}
	without := func(op kadm.ACLOperation) []kadm.ACLOperation {
		var out []kadm.ACLOperation
		for _, o := range all {
			if o != op {
				out = append(out, o)
			}
		}
		return out
	}
	cases := []struct {
		name   string
		exists bool
		ops    []kadm.ACLOperation
		want   string // "" for success
	}{
		{"created with the four", false, all, ""},
		{"existing topic without Create", true, without(kadm.OpCreate), ""},
		{"missing topic without Create", false, without(kadm.OpCreate),
			"the destination cluster does not allow User:mirror Create on Topic:__mirror_state (mirrord creates the state topic when it does not exist; grant Create on it or on the cluster, or create it beforehand with cleanup.policy=compact; see docs/acls.md): TOPIC_AUTHORIZATION_FAILED"},
		{"without Read", true, without(kadm.OpRead),
			"the destination cluster does not allow User:mirror Read on Topic:__mirror_state (mirrord replays the state topic when a session begins and when partitions join; see docs/acls.md): TOPIC_AUTHORIZATION_FAILED"},
		{"created, without Read", false, without(kadm.OpRead),
			"the destination cluster does not allow User:mirror Read on Topic:__mirror_state (mirrord replays"},
		{"without Write", true, without(kadm.OpWrite),
			"the destination cluster does not allow User:mirror Write on Topic:__mirror_state (every state transaction"},
		{"without DescribeConfigs", true, without(kadm.OpDescribeConfigs),
			"the destination cluster does not allow User:mirror DescribeConfigs on Topic:__mirror_state (mirrord checks that an existing state topic is compacted"},
		{"created, without DescribeConfigs", false, without(kadm.OpDescribeConfigs),
			"the destination cluster does not allow User:mirror DescribeConfigs on Topic:__mirror_state"},
		{"nothing", true, nil,
			"the destination cluster does not allow User:mirror Describe on Topic:__mirror_state (the link's state topic: mirrord needs Read, Write and DescribeConfigs on it, which imply Describe, and Create unless it exists; see docs/acls.md): TOPIC_AUTHORIZATION_FAILED"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			c := kafkatest.NewCluster(t, kafkatest.DestClusterID, kfake.EnableSASL(), kfake.EnableACLs(),
				kfake.Superuser("SCRAM-SHA-256", "admin", "admin-pw"))
			admCl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...),
				kgo.SASL(scram.Auth{User: "admin", Pass: "admin-pw"}.AsSha256Mechanism()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(admCl.Close)
			adm := kadm.NewClient(admCl)
			res, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: "mirror", Mechanism: kadm.ScramSha256, Iterations: 4096, Password: "mirror-pw"}})
			if err == nil {
				err = res.Error()
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.exists {
				if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": new("compact")}, topic); err != nil {
					t.Fatal(err)
				}
			}
			if len(tc.ops) > 0 {
				acls := kadm.NewACLs().Allow("User:mirror").Topics(topic).Operations(tc.ops...).ResourcePatternType(kadm.ACLPatternLiteral)
				res, err := adm.CreateACLs(ctx, acls)
				for _, r := range res {
					err = errors.Join(err, r.Err)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			s, err := New(Config{Topic: topic, ReplicationFactor: 1, Principal: "User:mirror"}, Deps{ClientOpts: []kgo.Opt{
				kgo.SeedBrokers(c.ListenAddrs()...), kgo.SASL(scram.Auth{User: "mirror", Pass: "mirror-pw"}.AsSha256Mechanism()),
			}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Close)
			err = s.Ensure(ctx)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Ensure: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Ensure: %v\nwant it to say\n%s", err, tc.want)
			case tc.want != "" && !errors.Is(err, kerr.TopicAuthorizationFailed):
				t.Errorf("Ensure: %v does not wrap TOPIC_AUTHORIZATION_FAILED", err)
			}
		})
	}
}
