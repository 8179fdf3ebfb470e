// Package leaders keeps, for one cluster, where each partition is led: leader
// broker, leader epoch and topic ID, from Metadata requests issued through
// kgo (which picks a broker and retries). The requests bypass kgo's metadata
// cache (kadm.Metadata would serve answers up to MetadataMinAge old), because
// a refresh follows a broker saying it is no longer the leader. The fetcher
// and the appender share this view per cluster and invalidate it when a
// broker says it is not the leader.
//
// A Cache is safe for concurrent use; it starts no goroutines. Refreshes are
// single-flight per call: concurrent callers that miss the cache may each
// issue a Metadata request, which is harmless and bounded by their number.
package leaders

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/internal/kafka/tp"
)

// ErrNoLeader means the partition exists but has no leader right now
// (election in progress); retry after a backoff.
var ErrNoLeader = errors.New("partition has no leader")

// ErrUnknownPartition means the cluster does not know the topic or partition.
var ErrUnknownPartition = errors.New("unknown topic or partition")

// Leader is where a partition is led.
type Leader struct {
	Broker int32
	Epoch  int32
	ID     [16]byte // topic ID
}

// Cache holds the partition leaders of one cluster.
type Cache struct {
	cl     *kgo.Client
	maxAge time.Duration
	now    func() time.Time

	mu      sync.Mutex
	entries map[tp.Key]entry
}

type entry struct {
	leader Leader
	at     time.Time
}

// New returns a Cache over the client's cluster. Entries older than maxAge
// are refreshed on lookup (zero means 30s).
func New(cl *kgo.Client, maxAge time.Duration) *Cache {
	if maxAge <= 0 {
		maxAge = 30 * time.Second
	}
	return &Cache{cl: cl, maxAge: maxAge, now: time.Now, entries: make(map[tp.Key]entry)}
}

// Lookup returns the leader of p, from the cache when fresh.
func (l *Cache) Lookup(ctx context.Context, p tp.Key) (Leader, error) {
	l.mu.Lock()
	e, ok := l.entries[p]
	l.mu.Unlock()
	if ok && l.now().Sub(e.at) < l.maxAge {
		return e.leader, nil
	}
	if err := l.Refresh(ctx, p.Topic); err != nil {
		return Leader{}, err
	}
	l.mu.Lock()
	e, ok = l.entries[p]
	l.mu.Unlock()
	if !ok {
		return Leader{}, fmt.Errorf("%s[%d]: %w", p.Topic, p.Partition, ErrUnknownPartition)
	}
	if e.leader.Broker < 0 {
		return Leader{}, fmt.Errorf("%s[%d]: %w", p.Topic, p.Partition, ErrNoLeader)
	}
	return e.leader, nil
}

// Invalidate drops the cached leader of p, so that the next Lookup asks the
// cluster.
func (l *Cache) Invalidate(p tp.Key) {
	l.mu.Lock()
	delete(l.entries, p)
	l.mu.Unlock()
}

// Refresh asks the cluster for the given topics' metadata and replaces their
// cache entries. A topic that does not exist is dropped from the cache and is
// not an error: Lookup reports it.
func (l *Cache) Refresh(ctx context.Context, topics ...string) error {
	resp, err := Metadata(ctx, l.cl, topics...)
	if err != nil {
		return err
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, t := range topics {
		for k := range l.entries {
			if k.Topic == t {
				delete(l.entries, k)
			}
		}
	}
	for _, rt := range resp.Topics {
		var topic string
		if rt.Topic != nil {
			topic = *rt.Topic
		}
		if err := kerr.ErrorForCode(rt.ErrorCode); err != nil {
			if errors.Is(err, kerr.UnknownTopicOrPartition) {
				continue
			}
			return fmt.Errorf("metadata for topic %s: %w", topic, err)
		}
		for _, rp := range rt.Partitions {
			leader := rp.Leader
			if rp.ErrorCode != 0 {
				leader = -1 // e.g. LEADER_NOT_AVAILABLE during an election
			}
			l.entries[tp.Key{Topic: topic, Partition: rp.Partition}] = entry{
				leader: Leader{Broker: leader, Epoch: rp.LeaderEpoch, ID: rt.TopicID},
				at:     now,
			}
		}
	}
	return nil
}

// Metadata issues a Metadata request for topics (every topic when none are
// named) through kgo, which picks a broker and retries, bypassing kgo's
// metadata cache.
func Metadata(ctx context.Context, cl *kgo.Client, topics ...string) (*kmsg.MetadataResponse, error) {
	req := kmsg.NewPtrMetadataRequest()
	req.AllowAutoTopicCreation = false // a lookup never creates a topic
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = new(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("metadata for %v: %w", topics, err)
	}
	return resp, nil
}

// ClusterID is the ID of the cluster cl reaches, as its Metadata answer
// reports it, unless pinned (a cluster block's cluster_id) is set. name is
// the cluster block's label, for errors.
func ClusterID(ctx context.Context, cl *kgo.Client, name, pinned string) (string, error) {
	if pinned != "" {
		return pinned, nil
	}
	md, err := Metadata(ctx, cl)
	if err != nil {
		return "", fmt.Errorf("cluster %s: read cluster ID: %w", name, err)
	}
	if md.ClusterID == nil || *md.ClusterID == "" {
		return "", fmt.Errorf("cluster %s reports no cluster ID (Kafka before 0.10.1?): set cluster_id in its cluster block", name)
	}
	return *md.ClusterID, nil
}
