// Package rawfetch sends a raw, sessionless Fetch for one partition to one
// broker: the one-partition reads that reconciliation, state-topic replay and
// verification make, as opposed to the fetcher's many-partition pipeline.
//
// The request-level MaxBytes is the protocol maximum so that it never binds
// before the partition limit: DESIGN §11 (kfake drops a partition's
// aborted-transaction list when the request limit cuts it, and the batch
// that crosses a partition limit would cross an equal request limit too).
// Real brokers clamp it to their fetch.max.bytes.
//
// The package starts no goroutines and keeps no state.
package rawfetch

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/internal/kafka/tp"
)

// ErrNoPartition means a response did not hold the partition asked for.
var ErrNoPartition = errors.New("fetch response does not hold the partition")

// Request is a fetch of one partition.
type Request struct {
	Partition         tp.Partition // topic name and ID both set where known (v13+ sends only the ID)
	Offset            int64
	LeaderEpoch       int32 // the leader epoch the caller believes current; -1: do not check
	PartitionMaxBytes int32
	ReadCommitted     bool
	MaxWait           time.Duration // 0: answer at once
	MinBytes          int32
}

// Do sends r to broker through kgo's connection (kgo retries a request that
// a dead connection never carried) and returns the partition's answer,
// whose ErrorCode the caller interprets. A response-level error code is
// returned as the error, wrapped with the partition.
func Do(ctx context.Context, cl *kgo.Client, broker int32, r Request) (*kmsg.FetchResponseTopicPartition, error) {
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = int32(r.MaxWait / time.Millisecond)
	req.MinBytes = r.MinBytes
	req.MaxBytes = math.MaxInt32
	req.SessionID = 0
	req.SessionEpoch = -1 // a full fetch, no session
	if r.ReadCommitted {
		req.IsolationLevel = 1
	}
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = r.Partition.Topic
	rt.TopicID = r.Partition.ID
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition = r.Partition.Partition
	rp.FetchOffset = r.Offset
	rp.CurrentLeaderEpoch = r.LeaderEpoch
	rp.LogStartOffset = -1
	rp.PartitionMaxBytes = r.PartitionMaxBytes
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)

	kresp, err := cl.Broker(int(broker)).RetriableRequest(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("fetch %s at offset %d from broker %d: %w", r.Partition, r.Offset, broker, err)
	}
	resp := kresp.(*kmsg.FetchResponse)
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, fmt.Errorf("fetch %s at offset %d from broker %d: %w", r.Partition, r.Offset, broker, err)
	}
	for i := range resp.Topics {
		t := &resp.Topics[i]
		if t.Topic != r.Partition.Topic && (t.TopicID == [16]byte{} || t.TopicID != r.Partition.ID) {
			continue
		}
		for j := range t.Partitions {
			if t.Partitions[j].Partition == r.Partition.Partition {
				return &t.Partitions[j], nil
			}
		}
	}
	return nil, fmt.Errorf("fetch %s at offset %d from broker %d: %w", r.Partition, r.Offset, broker, ErrNoPartition)
}
