package statestore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/internal/backoff"
	"github.com/seed83556561/mirrord/internal/kafka/access"
)

// Follower reads one partition of the state topic as it grows, with
// READ_COMMITTED isolation: a standby agent watches the partition that
// holds its link's record, so that it sees a clean stop, or a lease no
// longer renewed, as soon as it is committed instead of at its next full
// replay. It is used by one goroutine and holds no goroutine of its own.
type Follower struct {
	r   partitionReader
	off int64
}

// Follow returns a Follower of partition p from offset off.
func (s *Store) Follow(ctx context.Context, p int32, off int64) (*Follower, error) {
	cl, err := s.client()
	if err != nil {
		return nil, err
	}
	adm := kadm.NewClient(cl)
	topic := s.cfg.Topic
	md, err := adm.Metadata(ctx, topic)
	if access.IsRefusal(err) {
		return nil, s.refused(needDescribe, err)
	}
	if err != nil {
		return nil, fmt.Errorf("metadata of state topic %q: %w", topic, err)
	}
	td, ok := md.Topics[topic]
	if !ok {
		return nil, fmt.Errorf("state topic %q: %w", topic, ErrNoTopic)
	}
	if td.Err != nil {
		return nil, fmt.Errorf("metadata of state topic %q: %w", topic, td.Err)
	}
	pd, ok := td.Partitions[p]
	if !ok {
		return nil, fmt.Errorf("state topic %q has no partition %d", topic, p)
	}
	return &Follower{r: partitionReader{s: s, cl: cl, adm: adm, topic: topic, id: td.ID, p: p, leader: pd.Leader}, off: off}, nil
}

// Next waits at most wait for committed records past the follower's
// offset and returns those a fetch answered (none when wait passed
// without any); the follower then follows from after them. An error is
// one the partition's leader answered that a retry does not mend, or a
// refusal.
func (f *Follower) Next(ctx context.Context, wait time.Duration) ([]RawRecord, error) {
	r := &f.r
	if r.leader < 0 {
		if err := r.refreshLeader(ctx); err != nil {
			return nil, err
		}
		if r.leader < 0 {
			return nil, backoff.Sleep(ctx, min(wait, 100*time.Millisecond))
		}
	}
	fp, next, err := r.fetchWait(ctx, f.off, wait)
	if err != nil {
		return nil, err
	}
	switch {
	case fp.Err == nil:
	case errors.Is(fp.Err, kerr.OffsetOutOfRange) && fp.LogStartOffset > f.off:
		f.off = fp.LogStartOffset // compaction or DeleteRecords moved the start
		return nil, nil
	case kerr.IsRetriable(fp.Err):
		if err := r.refreshLeader(ctx); err != nil {
			return nil, err
		}
		return nil, backoff.Sleep(ctx, min(wait, 100*time.Millisecond))
	case access.IsRefusal(fp.Err):
		return nil, fmt.Errorf("follow state topic %q partition %d at offset %d: %w", r.topic, r.p, f.off, r.s.refused(needRead, fp.Err))
	default:
		return nil, fmt.Errorf("follow state topic %q partition %d at offset %d: %w", r.topic, r.p, f.off, fp.Err)
	}
	var out []RawRecord
	for _, rec := range fp.Records {
		out = append(out, RawRecord{Partition: r.p, Offset: rec.Offset, Key: rec.Key, Value: rec.Value, Timestamp: rec.Timestamp})
	}
	f.off = max(f.off, next)
	return out, nil
}

// TxnProducer is the producer a transactional.id is held by, as its
// coordinator describes it (DescribeTransactions).
type TxnProducer struct {
	ID    int64
	Epoch int16
	State string // Empty, Ongoing, PrepareCommit, CompleteCommit, ...
}

// LinkProducer describes the producer of link's transactional.id. Every
// session of the link begins with an InitProducerId on it, which moves
// its epoch (or its producer ID), so a standby that compares two answers
// sees another agent begin a session before that session commits
// anything.
func (s *Store) LinkProducer(ctx context.Context, link string) (TxnProducer, error) {
	cl, err := s.client()
	if err != nil {
		return TxnProducer{}, err
	}
	return LinkProducerWith(ctx, cl, link)
}

// LinkProducerWith is LinkProducer through cl, a client of the cluster
// that holds the link's state: a session asks through the client whose
// InitProducerId follows, which then finds the transactional.id's
// coordinator known and connected.
func LinkProducerWith(ctx context.Context, cl *kgo.Client, link string) (TxnProducer, error) {
	id := TransactionalID(link)
	txns, err := kadm.NewClient(cl).DescribeTransactions(ctx, id)
	if err != nil {
		return TxnProducer{}, fmt.Errorf("describe transactional.id %s: %w", id, err)
	}
	txn, ok := txns[id]
	if !ok {
		return TxnProducer{}, fmt.Errorf("describe transactional.id %s: not in the answer", id)
	}
	if txn.Err != nil {
		return TxnProducer{}, fmt.Errorf("describe transactional.id %s: %w", id, txn.Err)
	}
	return TxnProducer{ID: txn.ProducerID, Epoch: txn.ProducerEpoch, State: txn.State}, nil
}
