// Package kafkatest starts in-process Kafka clusters (kfake) for tests and the
// demo, with real cluster UUIDs so that the region selector sees what a real
// cluster would give it. Each cluster is closed by t.Cleanup; kfake runs its
// own goroutines and Close waits for them.
package kafkatest

import (
	"os"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Cluster IDs used by tests: real 22-character base64url UUIDs, distinct, so
// that their regions differ.
const (
	SourceClusterID = "MkU3OEVBNTcwNTJENDM2Qg" // region 0x71720375
	DestClusterID   = "LqsXsMnTTYq0dBuyEJh1_A" // region 0xd94b3876
	ThirdClusterID  = "pBtcCqUjQEuSJ4rWvgX2Ow" // region 0x1b26b670
)

// RealTierEnv is the variable that, set to "real", says that the tests run
// as the real-Kafka tier after the kfake tier already ran them (.ci/run): a
// test that starts a kfake cluster then skips, unless it runs under a
// real-Kafka subtest (a name element "kafka-<version>", as mirrortest names
// them).
const RealTierEnv = "MIRRORD_TEST_TIER"

// NewCluster starts a kfake cluster with the given cluster ID (one broker
// unless opts say otherwise) and closes it when the test ends.
func NewCluster(t testing.TB, clusterID string, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	if os.Getenv(RealTierEnv) == "real" && !underRealKafka(t.Name()) {
		t.Skipf("a kfake test: it ran in the kfake tier (%s=real)", RealTierEnv)
	}
	all := append([]kfake.Opt{kfake.ClusterID(clusterID), kfake.NumBrokers(1)}, opts...)
	c, err := kfake.NewCluster(all...)
	if err != nil {
		t.Fatalf("start kfake cluster %s: %v", clusterID, err)
	}
	t.Cleanup(c.Close)
	return c
}

// underRealKafka reports whether a test name has an element kafka-<version>.
func underRealKafka(name string) bool {
	for el := range strings.SplitSeq(name, "/") {
		if strings.HasPrefix(el, "kafka-") {
			return true
		}
	}
	return false
}

// Pair starts a source and a destination cluster with distinct cluster IDs.
func Pair(t testing.TB, opts ...kfake.Opt) (src, dst *kfake.Cluster) {
	t.Helper()
	return NewCluster(t, SourceClusterID, opts...), NewCluster(t, DestClusterID, opts...)
}

// Client returns a kgo client for c, closed when the test ends.
func Client(t testing.TB, c *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	all := append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, opts...)
	cl, err := kgo.NewClient(all...)
	if err != nil {
		t.Fatalf("kgo client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}
