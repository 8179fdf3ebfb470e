package link

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/internal/kafka/leaders"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
)

// listServed lists the destination's start (timestamp -2) or end (-1)
// offsets of parts with one ListOffsets request per leader, each sent
// once, and gives every partition the answer of its own leader: an offset,
// or its error. kadm's listings (kgo's sharded requests) send a broker's
// request again while any of its partitions answers NOT_LEADER_OR_FOLLOWER,
// for as long as kgo's retry timeout, so a listing of a new topic returned
// only once the broker served its last partition; here the partitions it
// serves already are placed at once (place's later) and listLed asks again
// for the others. A partition whose leader is not known yet answers
// LEADER_NOT_AVAILABLE or UNKNOWN_TOPIC_OR_PARTITION (retriable); a
// request that fails as a whole fails the listing, which listLed retries.
func (s *session) listServed(ctx context.Context, parts []tp.Partition, timestamp int64) (kadm.ListedOffsets, error) {
	out := make(kadm.ListedOffsets)
	set := func(p tp.Partition, o kadm.ListedOffset) {
		if out[p.Topic] == nil {
			out[p.Topic] = make(map[int32]kadm.ListedOffset)
		}
		o.Topic, o.Partition = p.Topic, p.Partition
		out[p.Topic][p.Partition] = o
	}
	byBroker := make(map[int32][]tp.Partition)
	var brokers []int32
	unknown := make(map[string]bool) // topics the metadata does not have yet: asked once
	for _, p := range parts {
		if unknown[p.Topic] {
			set(p, kadm.ListedOffset{Offset: -1, LeaderEpoch: -1, Err: kerr.UnknownTopicOrPartition})
			continue
		}
		ld, err := s.dstLeaders.Lookup(ctx, p.Key())
		switch {
		case errors.Is(err, leaders.ErrUnknownPartition):
			set(p, kadm.ListedOffset{Offset: -1, LeaderEpoch: -1, Err: kerr.UnknownTopicOrPartition})
			unknown[p.Topic] = true
			continue
		case errors.Is(err, leaders.ErrNoLeader):
			set(p, kadm.ListedOffset{Offset: -1, LeaderEpoch: -1, Err: kerr.LeaderNotAvailable})
			continue
		case err != nil:
			return nil, err
		}
		if _, ok := byBroker[ld.Broker]; !ok {
			brokers = append(brokers, ld.Broker)
		}
		byBroker[ld.Broker] = append(byBroker[ld.Broker], p)
	}
	for _, b := range brokers {
		req := kmsg.NewPtrListOffsetsRequest()
		req.ReplicaID = -1
		idx := make(map[string]int)
		for _, p := range byBroker[b] {
			i, ok := idx[p.Topic]
			if !ok {
				i = len(req.Topics)
				idx[p.Topic] = i
				rt := kmsg.NewListOffsetsRequestTopic()
				rt.Topic = p.Topic
				req.Topics = append(req.Topics, rt)
			}
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = p.Partition, timestamp, -1
			req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
		}
		resp, err := req.RequestWith(ctx, s.dst.Broker(int(b)))
		if err != nil {
			return nil, fmt.Errorf("list offsets at broker %d: %w", b, err)
		}
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				p := tp.Partition{Topic: rt.Topic, Partition: rp.Partition}
				err := kerr.ErrorForCode(rp.ErrorCode)
				if err != nil {
					s.dstLeaders.Invalidate(p.Key()) // the next attempt asks who leads it now
				}
				set(p, kadm.ListedOffset{Timestamp: rp.Timestamp, Offset: rp.Offset, LeaderEpoch: rp.LeaderEpoch, Err: err})
			}
		}
	}
	return out, nil
}
