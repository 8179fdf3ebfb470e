package faultproxy_test

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/internal/testkit/realkafka"
)

// Guards that the proxy needs nothing from the brokers: the kfake
// scenarios, on one three-node Apache Kafka cluster per version that
// MIRRORD_TEST_KAFKA selects (skipped when it selects none). Real brokers
// advertise their own addresses and replicate through their INTERNAL
// listener, so only the clients' traffic goes through the proxy.
func TestRealKafka(t *testing.T) {
	for _, v := range realkafka.TestVersions(t) {
		t.Run(v, func(t *testing.T) {
			c := realkafka.ForTest(t, realkafka.Config{Version: v, Nodes: 3})
			direct, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...))
			if err != nil {
				t.Fatal(err)
			}
			k := behind(t, direct, nil)
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			defer cancel()
			adm := kadm.NewClient(k.client(t))
			for topic, partitions := range map[string]int32{
				"e2e": 3, "txn": 3, "stall": 1, "cut": 1, "cut-reset": 1, "lost-idempotent": 1, "lost-plain": 1, "replace": 1, "unsent": 1,
				"faults-drop": 1, "faults-reset": 1, "faults-refuse": 1,
			} {
				resp, err := adm.CreateTopic(ctx, partitions, 3, nil, topic)
				if err == nil {
					err = resp.Err
				}
				if err != nil {
					t.Fatalf("create topic %s: %v", topic, err)
				}
			}
			t.Run("end to end", func(t *testing.T) { endToEnd(t, k, "e2e") })
			t.Run("endpoints", func(t *testing.T) { endpointRewrite(t, k, true) })
			t.Run("transaction", func(t *testing.T) { transactionCommits(t, k, "txn") })
			t.Run("stall", func(t *testing.T) { stall(t, k, "stall") })
			t.Run("cut", func(t *testing.T) { cutHolds(t, k, "cut") })
			t.Run("cut reset", func(t *testing.T) { cutDrops(t, k, "cut-reset") })
			t.Run("connection faults", func(t *testing.T) { connectionFaults(t, k, "faults") })
			t.Run("response lost", func(t *testing.T) { responseLost(t, k, "lost-idempotent", "lost-plain") })
			t.Run("replace", func(t *testing.T) { replaceProduceError(t, k, "replace") })
			t.Run("request dropped", func(t *testing.T) { requestDropped(t, k, "unsent") })
		})
	}
}
