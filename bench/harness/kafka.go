package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/seed83556561/mirrord/internal/testkit/realkafka"
)

// Backends of the benchmark.
const (
	BackendKfake = "kfake" // in-process fakes, each in its own process (bench/cmd/kfakeserver)
	BackendKafka = "kafka" // Apache Kafka brokers from the realkafka launcher, one JVM per cluster
)

// DefaultBrokerHeap is the heap of each Kafka broker JVM of the kafka
// backend: that of kafka-server-start.sh.
const DefaultBrokerHeap = "1g"

// kafkaCluster is the Kafka side of a Cluster.
type kafkaCluster struct {
	c   *realkafka.Cluster
	pid int // the broker's JVM, for its CPU time
}

// brokerProps are the kafka backend's broker properties beyond the
// launcher's: a deleted topic's files go soon (every run deletes its
// destination topics, and MirrorMaker 2 creates topics of the same names
// again in later runs).
var brokerProps = map[string]string{
	"file.delete.delay.ms":        "1000",
	"log.segment.delete.delay.ms": "1000",
}

// StartKafka starts a one-node Apache Kafka cluster of the given version
// and cluster ID in dir (the launcher's node-1/ holds its properties, data
// and server.log) and returns when it answers Metadata.
func StartKafka(ctx context.Context, name, id, version, heap, dir string) (*Cluster, error) {
	if heap == "" {
		heap = DefaultBrokerHeap
	}
	rc, err := realkafka.Start(ctx, realkafka.Config{
		Version:     version,
		ClusterID:   id,
		Dir:         dir,
		Heap:        heap,
		BrokerProps: brokerProps,
	})
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", name, err)
	}
	node := filepath.Join(rc.Dir(), "node-1")
	pid := findJVM("kafka.Kafka", node)
	if pid == 0 {
		_ = rc.Close() // the error to report is the missing process
		return nil, fmt.Errorf("cluster %s: no kafka.Kafka process runs from %s", name, node)
	}
	return &Cluster{Name: name, ID: id, Addrs: rc.Addrs(), kafka: &kafkaCluster{c: rc, pid: pid}}, nil
}

// findJVM returns the pid of the process whose command line holds both
// mainClass and dir (the launcher puts the node directory on the JVM's
// command line), or 0.
func findJVM(mainClass, dir string) int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		hasMain, hasDir := false, false
		for _, a := range args {
			hasMain = hasMain || a == mainClass
			hasDir = hasDir || strings.Contains(a, dir)
		}
		if hasMain && hasDir {
			return pid
		}
	}
	return 0
}
