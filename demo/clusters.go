package demo

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/transform"
)

// BrokersPerCluster is how many brokers each embedded cluster runs.
const BrokersPerCluster = 3

// Topic is one source topic of the demo.
type Topic struct {
	Name       string
	Partitions int32
}

// Topics are the source topics the demo creates and loads, with different
// partition counts.
var Topics = []Topic{
	{Name: "orders", Partitions: 6},
	{Name: "payments", Partitions: 3},
	{Name: "clicks", Partitions: 8},
	{Name: "audit", Partitions: 1},
}

// TotalPartitions is the number of source partitions over Topics.
func TotalPartitions() int {
	n := 0
	for _, t := range Topics {
		n += int(t.Partitions)
	}
	return n
}

// Cluster is one embedded kfake cluster.
type Cluster struct {
	Name string // the config's cluster label: "source" or "destination"
	ID   string // its cluster ID, a random UUID in Kafka's base64url form
	*kfake.Cluster
}

// Region is the cluster's region selector (DESIGN §3).
func (c *Cluster) Region() transform.Region {
	r, _ := transform.RegionOf(c.ID)
	return r
}

// Clusters are the demo's source and destination clusters.
type Clusters struct {
	Source, Destination *Cluster
}

// StartClusters starts two kfake clusters of BrokersPerCluster brokers each
// on loopback ports, with random UUID cluster IDs of distinct regions. The
// caller closes them.
func StartClusters() (*Clusters, error) {
	srcID, err := newClusterID()
	if err != nil {
		return nil, err
	}
	var dstID string
	for {
		if dstID, err = newClusterID(); err != nil {
			return nil, err
		}
		rs, _ := transform.RegionOf(srcID)
		rd, _ := transform.RegionOf(dstID)
		if rs != rd {
			break
		}
	}
	src, err := kfake.NewCluster(kfake.NumBrokers(BrokersPerCluster), kfake.ClusterID(srcID))
	if err != nil {
		return nil, fmt.Errorf("start source cluster: %w", err)
	}
	dst, err := kfake.NewCluster(kfake.NumBrokers(BrokersPerCluster), kfake.ClusterID(dstID))
	if err != nil {
		src.Close()
		return nil, fmt.Errorf("start destination cluster: %w", err)
	}
	return &Clusters{
		Source:      &Cluster{Name: "source", ID: srcID, Cluster: src},
		Destination: &Cluster{Name: "destination", ID: dstID, Cluster: dst},
	}, nil
}

// Close stops both clusters and waits for their goroutines.
func (c *Clusters) Close() {
	c.Source.Close()
	c.Destination.Close()
}

// newClusterID returns a random version-4 UUID in the 22-character unpadded
// base64url form that Kafka reports cluster IDs in.
func newClusterID() (string, error) {
	var u [16]byte
	if _, err := rand.Read(u[:]); err != nil {
		return "", fmt.Errorf("cluster ID: %w", err)
	}
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	return base64.RawURLEncoding.EncodeToString(u[:]), nil
}

// createTopics creates Topics on the source cluster, replicated on every
// broker.
func createTopics(ctx context.Context, c *Cluster) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		return fmt.Errorf("source cluster client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for _, t := range Topics {
		resp, err := adm.CreateTopic(ctx, t.Partitions, BrokersPerCluster, nil, t.Name)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			return fmt.Errorf("create source topic %s: %w", t.Name, err)
		}
	}
	return nil
}
