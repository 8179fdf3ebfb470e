package faults

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/internal/testkit/realkafka"
)

// Side is one of the two clusters.
type Side int

// The sides.
const (
	Source Side = iota
	Destination
)

func (s Side) String() string { return [...]string{"source", "destination"}[s] }

// Cluster IDs of the two clusters: real UUIDs in distinct regions (the same
// as the other test kits use).
const (
	SourceClusterID      = "MkU3OEVBNTcwNTJENDM2Qg"
	DestinationClusterID = "LqsXsMnTTYq0dBuyEJh1_A"
)

// Nodes is the size of each cluster.
const Nodes = 3

// EnvConfig says which clusters StartEnv starts.
type EnvConfig struct {
	Version string // Kafka version (default realkafka.Kafka4)
	Dir     string // parent of the clusters' directories (default: temporary)
	// Advertise, if set, is each cluster's realkafka Advertise hook.
	Advertise [2]func(node int, listener, listenAddr string) string
}

// Env is a source and a destination cluster of Nodes nodes each, with an
// admin client for each (connected directly, not through any proxy): Apache
// Kafka clusters (StartEnv), or kfake clusters in the test's process
// (StartKfakeEnv), which agents in processes of their own reach over TCP
// as they reach Kafka. Broker faults need Kafka (Cluster); the agents'
// own faults (kill, stop, start) run on both.
type Env struct {
	clusters [2]*realkafka.Cluster
	fakes    [2]*kfake.Cluster
	addrs    [2][]string
	clients  [2]*kgo.Client
	admins   [2]*kadm.Client
}

// brokerProps make the clusters what an operator runs: three replicas of
// everything, two in sync for an acknowledged write, no unclean elections,
// and leader moves only when a test makes them (auto leader rebalance off,
// so a restarted broker does not take its leaderships back on its own).
var brokerProps = map[string]string{
	"min.insync.replicas":                                         "2",
	"unclean.leader.election.enable":                              "false",
	"auto.leader.rebalance.enable":                                "false",
	"log.initial.task.delay.ms":                                   "0",
	"group.initial.rebalance.delay.ms":                            "0",
	"transaction.state.log.segment.bytes":                         fmt.Sprint(8 << 20),
	"offsets.topic.segment.bytes":                                 fmt.Sprint(8 << 20),
	"controlled.shutdown.enable":                                  "true",
	"replica.lag.time.max.ms":                                     "30000",
	"transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}

// StartEnv starts both clusters at once and waits until both serve.
func StartEnv(ctx context.Context, cfg EnvConfig) (*Env, error) {
	if cfg.Version == "" {
		cfg.Version = realkafka.Kafka4
	}
	e := &Env{}
	ids := [2]string{SourceClusterID, DestinationClusterID}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			rc := realkafka.Config{
				Version: cfg.Version, ClusterID: ids[i], Nodes: Nodes,
				BrokerProps: brokerProps, Advertise: cfg.Advertise[i],
				StartTimeout: 4 * time.Minute,
			}
			if cfg.Dir != "" {
				rc.Dir = fmt.Sprintf("%s/%s", cfg.Dir, Side(i))
			}
			c, err := realkafka.Start(ctx, rc)
			if err != nil {
				errs[i] = fmt.Errorf("start the %s cluster: %w", Side(i), err)
				return
			}
			e.clusters[i] = c
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		e.Close()
		return nil, err
	}
	for i, c := range e.clusters {
		e.addrs[i] = c.Addrs()
	}
	if err := e.connect(); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// StartKfakeEnv starts a source and a destination kfake cluster of Nodes
// brokers each, with the cluster IDs of StartEnv's, in this process.
func StartKfakeEnv() (*Env, error) {
	e := &Env{}
	for i, id := range [2]string{SourceClusterID, DestinationClusterID} {
		c, err := kfake.NewCluster(kfake.NumBrokers(Nodes), kfake.ClusterID(id))
		if err != nil {
			e.Close()
			return nil, fmt.Errorf("start the %s kfake cluster: %w", Side(i), err)
		}
		e.fakes[i], e.addrs[i] = c, c.ListenAddrs()
	}
	if err := e.connect(); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// connect makes the clients of both sides.
func (e *Env) connect() error {
	for i, addrs := range e.addrs {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.MetadataMinAge(100*time.Millisecond))
		if err != nil {
			return err
		}
		e.clients[i], e.admins[i] = cl, kadm.NewClient(cl)
	}
	return nil
}

// Close stops both clusters and closes the clients.
func (e *Env) Close() {
	for i := range 2 {
		if e.clients[i] != nil {
			e.clients[i].Close()
		}
		if e.clusters[i] != nil {
			_ = e.clusters[i].Close()
		}
		if e.fakes[i] != nil {
			e.fakes[i].Close()
		}
	}
}

// Keep leaves the clusters' directories (with every node's log) in place
// after Close, and returns them.
func (e *Env) Keep() []string {
	var dirs []string
	for _, c := range e.clusters {
		if c != nil {
			c.Keep()
			dirs = append(dirs, c.Dir())
		}
	}
	return dirs
}

// Cluster is the Kafka cluster of a side, for its broker faults; nil on
// kfake (StartKfakeEnv).
func (e *Env) Cluster(s Side) *realkafka.Cluster { return e.clusters[s] }

// Addrs are the bootstrap servers of a side's cluster.
func (e *Env) Addrs(s Side) []string { return e.addrs[s] }

// Kfake reports whether the clusters are kfake's (StartKfakeEnv).
func (e *Env) Kfake() bool { return e.fakes[0] != nil }

// Client is a client of a side's cluster.
func (e *Env) Client(s Side) *kgo.Client { return e.clients[s] }

// Admin is an admin client of a side's cluster.
func (e *Env) Admin(s Side) *kadm.Client { return e.admins[s] }

// CreateTopic creates a topic with three replicas on a side.
func (e *Env) CreateTopic(ctx context.Context, s Side, name string, partitions int32, configs map[string]*string) error {
	resp, err := e.admins[s].CreateTopic(ctx, partitions, Nodes, configs, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("create topic %s on the %s: %w", name, s, err)
	}
	return nil
}

// Leaders maps every partition of the topics on a side to its leader's
// node ID and leader epoch.
func (e *Env) Leaders(ctx context.Context, s Side, topics ...string) (map[tp.Key]Leader, error) {
	m, err := e.admins[s].Metadata(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("metadata of the %s: %w", s, err)
	}
	out := map[tp.Key]Leader{}
	for _, td := range m.Topics {
		if td.Err != nil {
			return nil, fmt.Errorf("metadata of %s on the %s: %w", td.Topic, s, td.Err)
		}
		for _, pd := range td.Partitions {
			out[tp.Key{Topic: td.Topic, Partition: pd.Partition}] = Leader{Node: pd.Leader, Epoch: pd.LeaderEpoch, ISR: len(pd.ISR), Replicas: slices.Clone(pd.Replicas)}
		}
	}
	return out, nil
}

// Leader is a partition's leader as the cluster reports it.
type Leader struct {
	Node, Epoch int32
	ISR         int // in-sync replicas
	Replicas    []int32
}

// WaitHealthy waits until every node of a side runs and every partition of
// the topics (all topics when none are named) has a leader and all Nodes
// replicas in sync, so that the next fault starts from a whole cluster.
func (e *Env) WaitHealthy(ctx context.Context, s Side, within time.Duration, topics ...string) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var last string
	for {
		m, err := e.admins[s].Metadata(ctx, topics...)
		if err == nil {
			last = ""
			if len(m.Brokers) < Nodes {
				last = fmt.Sprintf("%d of %d brokers registered", len(m.Brokers), Nodes)
			}
			for _, td := range m.Topics {
				for _, pd := range td.Partitions {
					if last == "" && (pd.Leader < 0 || len(pd.ISR) < Nodes) {
						last = fmt.Sprintf("%s[%d]: leader %d, ISR %v", td.Topic, pd.Partition, pd.Leader, pd.ISR)
					}
				}
			}
			if last == "" {
				return nil
			}
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the %s cluster did not become whole within %s: %s", s, within, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// moved lists the partitions whose leader differs between two readings.
func moved(before, after map[tp.Key]Leader) []tp.Key {
	var out []tp.Key
	for _, k := range slices.SortedFunc(maps.Keys(after), func(a, b tp.Key) int {
		if a.Topic != b.Topic {
			if a.Topic < b.Topic {
				return -1
			}
			return 1
		}
		return int(a.Partition - b.Partition)
	}) {
		if b, ok := before[k]; ok && b.Node != after[k].Node {
			out = append(out, k)
		}
	}
	return out
}
