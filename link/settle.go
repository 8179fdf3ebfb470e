package link

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/internal/backoff"
	"github.com/seed83556561/mirrord/internal/kafka/leaders"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/transform"
	"github.com/seed83556561/mirrord/twin"
)

// settle finds out whether an append of unknown outcome landed (DESIGN §6):
// after the delay, it reads the partition's current leader from the offset
// the append would have got up to the high watermark, looking for the
// batch's twin. Not finding it is an answer only once the high watermark
// has reached the leader's log end (OffsetsForLeaderEpoch for the leader's
// epoch answers the log end offset, not the high watermark: Kafka's
// Partition.lastOffsetForLeaderEpoch with UnifiedLog.endOffsetForEpoch):
// a batch in the leader's log above the high watermark is still becoming
// visible while the in-sync replicas catch up, or the ISR shrinks (at most
// replica.lag.time.max.ms), and must be waited for. A batch on a former
// leader that its successor never got is truncated when the former leader
// follows again (Kafka truncates a follower to the leader's epoch end
// offset), so the current leader's log decides. It gives up after
// produce_timeout plus settle_delay of waiting for the high watermark.
func (s *session) settle(ctx context.Context, a DoSettle) Input {
	ev := InSettled{Dst: a.Dst.Key(), Tag: a.Tag, Offset: -1}
	if !s.settleWait(ctx, a) {
		return nil
	}
	patience := s.l.cfg.Link.ProduceTimeout + s.l.cfg.Link.SettleDelay
	give := time.Now().Add(patience)
	for attempt := 1; ; attempt++ {
		found, certain, err := s.settleOnce(ctx, a)
		switch {
		case err == nil && found >= 0:
			ev.Offset = found
			return ev
		case err == nil && certain:
			return ev
		case ctx.Err() != nil:
			return nil
		case time.Now().After(give):
			if err == nil {
				err = fmt.Errorf("the high watermark of %s did not reach its log end within %v: its in-sync replicas are behind", a.Dst, patience)
			}
			ev.Err = err
			return ev
		}
		if err != nil {
			s.dstLeaders.Invalidate(a.Dst.Key())
		}
		if backoff.Sleep(ctx, settleRetry.Wait(attempt)) != nil {
			return nil
		}
	}
}

// settleWait waits a.Delay before a settle, or less: from a.EarlyAfter on
// it looks up the partition's leader every leaderPoll and stops waiting
// once another broker leads under a newer epoch (leaderMoved). It reports
// false when ctx ended.
func (s *session) settleWait(ctx context.Context, a DoSettle) bool {
	if a.Delay <= 0 {
		return true
	}
	start := time.Now()
	if a.SentTo == nil || a.EarlyAfter >= a.Delay {
		return backoff.Sleep(ctx, a.Delay) == nil
	}
	if backoff.Sleep(ctx, a.EarlyAfter) != nil {
		return false
	}
	for {
		s.dstLeaders.Invalidate(a.Dst.Key())
		if ld, err := s.dstLeaders.Lookup(ctx, a.Dst.Key()); err == nil && leaderMoved(a.SentTo, ld) {
			s.log.Info("settling an unanswered append early: another broker leads the partition now, so the old leader can no longer append it",
				"destination", a.Dst.String(), "sent_to_broker", a.SentTo.Broker, "sent_leader_epoch", a.SentTo.Epoch,
				"leader", ld.Broker, "leader_epoch", ld.Epoch, "waited", time.Since(start).Round(time.Millisecond))
			return true
		}
		left := a.Delay - time.Since(start)
		if left <= 0 {
			return true
		}
		if backoff.Sleep(ctx, min(left, leaderPoll)) != nil {
			return false
		}
	}
}

// leaderPoll is how often settleWait looks for a new leader.
const leaderPoll = 250 * time.Millisecond

// settleRetry is the wait between looks at a partition being settled.
var settleRetry = backoff.Policy{First: 50 * time.Millisecond, Max: time.Second}

// settleOnce looks once: the twin's offset (or -1), and whether not finding
// it is certain (the high watermark is at the leader's log end).
func (s *session) settleOnce(ctx context.Context, a DoSettle) (found int64, certain bool, err error) {
	ld, err := s.dstLeaders.Lookup(ctx, a.Dst.Key())
	if err != nil {
		return -1, false, err
	}
	leo, err := logEnd(ctx, s.dst, a.Dst, ld)
	if err != nil {
		return -1, false, err
	}
	ends, err := s.dstAdm.ListEndOffsets(ctx, a.Dst.Topic)
	if err != nil {
		return -1, false, err
	}
	hw, err := offsetOf(ends, a.Dst, "destination end")
	if err != nil {
		return -1, false, err
	}
	tr := &tailReader{cl: s.dst, leaders: s.dstLeaders, p: a.Dst, pos: a.From, end: hw}
	for {
		batches, err := tr.next(ctx)
		if err != nil {
			return -1, false, err
		}
		if len(batches) == 0 {
			return -1, hw >= leo, nil
		}
		for _, b := range batches {
			if twin.Match(a.Want, b) {
				h, _ := transform.ParseHeader(b)
				return h.BaseOffset, true, nil
			}
		}
	}
}

// logEnd is the log end offset of a partition's leader: OffsetsForLeaderEpoch
// for the leader's current epoch answers the end offset of that epoch, which
// for the latest epoch is the log end offset (KIP-320 lets consumers ask it
// with DESCRIBE on the topic).
func logEnd(ctx context.Context, cl *kgo.Client, p tp.Partition, ld leaders.Leader) (int64, error) {
	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	req.ReplicaID = -1
	rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
	rt.Topic = p.Topic
	rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	rp.Partition = p.Partition
	rp.CurrentLeaderEpoch = ld.Epoch
	rp.LeaderEpoch = ld.Epoch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	kresp, err := cl.Broker(int(ld.Broker)).Request(ctx, req)
	if err != nil {
		return 0, fmt.Errorf("log end offset of %s from broker %d: %w", p, ld.Broker, err)
	}
	resp := kresp.(*kmsg.OffsetForLeaderEpochResponse)
	for _, t := range resp.Topics {
		for _, pp := range t.Partitions {
			if t.Topic != p.Topic || pp.Partition != p.Partition {
				continue
			}
			if err := kerr.ErrorForCode(pp.ErrorCode); err != nil {
				return 0, fmt.Errorf("log end offset of %s from broker %d: %w", p, ld.Broker, err)
			}
			return pp.EndOffset, nil
		}
	}
	return 0, fmt.Errorf("log end offset of %s from broker %d: the answer does not hold the partition", p, ld.Broker)
}
