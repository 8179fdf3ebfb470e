// Package kafkatest starts in-process Kafka clusters (kfake) for tests and the
// demo, with real cluster UUIDs so that the region selector sees what a real
// cluster would give it. Each cluster is closed by t.Cleanup; kfake runs its
// own goroutines and Close waits for them.
package kafkatest

import (
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

// NewCluster starts a kfake cluster with the given cluster ID (one broker
// unless opts say otherwise) and closes it when the test ends.
func NewCluster(t testing.TB, clusterID string, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	all := append([]kfake.Opt{kfake.ClusterID(clusterID), kfake.NumBrokers(1)}, opts...)
	c, err := kfake.NewCluster(all...)
	if err != nil {
		t.Fatalf("start kfake cluster %s: %v", clusterID, err)
	}
	t.Cleanup(c.Close)
	return c
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
