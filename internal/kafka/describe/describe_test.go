package describe_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/internal/kafka/describe"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
)

// Guards each topic's answer standing alone: of three topics in one
// request, the middle one refused, the other two keep their settings and
// only the refused one has the refusal. kadm's DescribeTopicConfigs, given
// the same answer, fails the whole call and leaves out the topic after the
// refused one; the test pins that too, as the reason for the package.
func TestTopicConfigsOneRefused(t *testing.T) {
	c := kafkatest.NewCluster(t, kafkatest.SourceClusterID, kfake.SeedTopics(1, "a", "denied", "b"))
	c.ControlKey(int16(kmsg.DescribeConfigs), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.DescribeConfigsRequest)
		resp := r.ResponseKind().(*kmsg.DescribeConfigsResponse)
		for _, rr := range r.Resources {
			rs := kmsg.NewDescribeConfigsResponseResource()
			rs.ResourceName, rs.ResourceType = rr.ResourceName, rr.ResourceType
			if rr.ResourceName == "denied" {
				rs.ErrorCode = kerr.TopicAuthorizationFailed.Code
			} else {
				cfg := kmsg.NewDescribeConfigsResponseResourceConfig()
				cfg.Name, cfg.Value = "retention.ms", new("60000-"+rr.ResourceName)
				syn := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
				syn.Name, syn.Value, syn.Source = "log.retention.ms", new("604800000"), kmsg.ConfigSourceStaticBrokerConfig
				cfg.ConfigSynonyms = append(cfg.ConfigSynonyms, syn)
				rs.Configs = append(rs.Configs, cfg)
			}
			resp.Resources = append(resp.Resources, rs)
		}
		return resp, nil, true
	})
	cl := kafkatest.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()

	rcs, err := describe.TopicConfigs(ctx, cl, "a", "denied", "b")
	if err != nil {
		t.Fatalf("TopicConfigs: %v", err)
	}
	for _, topic := range []string{"a", "b"} {
		rc, err := rcs.On(topic, nil)
		switch {
		case err != nil:
			t.Errorf("%s: not in the answer: %v", topic, err)
		case rc.Err != nil:
			t.Errorf("%s: %v, want its settings", topic, rc.Err)
		case len(rc.Configs) != 1 || rc.Configs[0].Key != "retention.ms" || *rc.Configs[0].Value != "60000-"+topic ||
			len(rc.Configs[0].Synonyms) != 1 || rc.Configs[0].Synonyms[0].Source != kmsg.ConfigSourceStaticBrokerConfig:
			t.Errorf("%s: settings %+v", topic, rc.Configs)
		}
	}
	if rc, err := rcs.On("denied", nil); err != nil || !errors.Is(rc.Err, kerr.TopicAuthorizationFailed) {
		t.Errorf("denied: %v / %v, want its own TOPIC_AUTHORIZATION_FAILED", err, rc.Err)
	}

	krcs, kerr2 := kadm.NewClient(cl).DescribeTopicConfigs(ctx, "a", "denied", "b")
	if _, onErr := krcs.On("b", nil); kerr2 == nil || onErr == nil {
		t.Logf("kadm now keeps every topic's answer (err %v, b: %v): the package may no longer be needed", kerr2, onErr)
	}
}
