package appender

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	backoffpkg "github.com/seed83556561/mirrord/internal/backoff"
	"github.com/seed83556561/mirrord/internal/kafka/leaders"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/transform"
)

// Appending under a transactional producer.
//
// The batch carries the session's producer ID, epoch and sequence, so,
// unlike a preserve-mode batch (classify.go), a batch sent again after an
// answer that leaves its outcome open is safe: the leader appends it once
// and answers the repeat with the first append's offset. So every answer
// that may mean "appended" or "not appended" (a lost connection, a
// timeout, NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS_AFTER_APPEND,
// KAFKA_STORAGE_ERROR) is retried with the same bytes at the partition's
// current leader, as Kafka's idempotent producer retries. The new leader
// knows the producer's last sequences from the replicated log (the
// producer state is rebuilt from the batches themselves), as long as the
// batch reached a replica that became leader; if it did not, the repeat
// is simply the first append.
//
// CONCURRENT_TRANSACTIONS and the coordinator's loading or moving, which a
// leader passes on from the coordinator when it adds the partition to the
// transaction (transaction.version 2), are retried too.
//
// Answers that end the transaction: the producer was fenced
// (INVALID_PRODUCER_EPOCH, PRODUCER_FENCED, and INVALID_TXN_STATE, which
// the partition leader's KIP-890 check answers when the partition is not in
// an open transaction of this epoch, i.e. the coordinator aborted it), or
// the sequence chain broke (OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID
// with no earlier batch of the partition in flight; with one, the batch
// overtook it and is sent again after it: AppendReserved) or the batch can never be appended (CORRUPT_MESSAGE, MESSAGE_TOO_LARGE,
// authorization, INVALID_RECORD): the reserved sequence stays unused, so
// nothing more may be appended in this transaction; the caller aborts it and
// resumes at the last committed checkpoint.

// count records an append's outcome in the metrics: its latency once
// appended, else the kind of error that ended it.
func (t *Txn) count(err error, start time.Time) {
	switch {
	case err == nil:
		t.m.latency.Observe(t.cfg.Now().Sub(start).Seconds())
	case errors.Is(err, ErrCorrupt):
		t.m.errors[KindCorrupt].Inc()
	case errors.Is(err, ErrTooLarge):
		t.m.errors[KindTooLarge].Inc()
	case errors.Is(err, ErrFatal):
		t.m.errors[KindFatal].Inc()
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		t.m.errors[KindStopped].Inc()
	default:
		t.m.errors[KindTxnAborted].Inc()
	}
}

// errSequenceGap marks an answer that the batch is not the next in its
// partition's chain of sequences.
var errSequenceGap = errors.New("the partition's previous batch of this producer is not appended")

// TxnAppendConfig bounds one transactional append.
type TxnAppendConfig struct {
	// RequestTimeout is the Produce request's TimeoutMillis. Default 30s.
	RequestTimeout time.Duration
	// RetryBackoff is the first wait before the batch is sent again.
	// Default 100ms, doubling up to MaxRetryBackoff.
	RetryBackoff time.Duration
	// Uncounted keeps the append out of the metrics (the state topic's
	// records of a commit: the metrics count mirrored batches).
	Uncounted bool
}

// Append reserves p's next sequences for batch (Reserve) and appends it
// (AppendReserved).
func (t *Txn) Append(ctx context.Context, cfg TxnAppendConfig, ls *leaders.Cache, p tp.Partition, batch []byte) (int64, error) {
	h, err := transform.ParseHeader(batch)
	if err != nil {
		return 0, fmt.Errorf("%s: %w: %w", p, ErrInvalidBatch, err)
	}
	r, err := t.Reserve(p.Key(), h.LastOffsetDelta+1)
	if err != nil {
		return 0, err
	}
	return t.AppendReserved(ctx, cfg, ls, p, batch, r)
}

// AppendReserved stamps batch (one v2 batch as the fetcher returned it: the
// source producer's identity, any base offset) with the producer's
// identity and r's sequence, in place, and appends it to p's leader as part
// of the current transaction (which Add must have given p), retrying until
// it is appended, the transaction must end, or ctx ends. It returns the
// offset the batch starts at in the destination log, and settles r.
//
// Calls may run at once, for the same partition too: the broker appends a
// partition's batches in the order of their sequences and answers one that
// arrives before an earlier one OUT_OF_ORDER_SEQUENCE_NUMBER (or, when the
// producer has no state at the partition yet, UNKNOWN_PRODUCER_ID). Such a
// batch waits for the earlier ones still in flight and is sent again at
// once, as Kafka's idempotent producer retries it; with nothing earlier in
// flight the answer means the chain broke, and the transaction must abort.
func (t *Txn) AppendReserved(ctx context.Context, cfg TxnAppendConfig, ls *leaders.Cache, p tp.Partition, batch []byte, r *Reservation) (_ int64, err error) {
	start := t.cfg.Now()
	defer func() {
		t.settle(r, err == nil)
		if !cfg.Uncounted {
			t.count(err, start)
		}
	}()
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = DefaultRetryBackoff
	}
	h, err := transform.ParseHeader(batch)
	if err != nil {
		return 0, fmt.Errorf("%s: %w: %w", p, ErrInvalidBatch, err)
	}
	if h.Control() || len(batch) != int(h.Length)+transform.LengthOverhead {
		return 0, fmt.Errorf("%s: %w: a control batch, or not exactly one batch", p, ErrInvalidBatch)
	}
	if r.p != p.Key() {
		return 0, fmt.Errorf("%s: %w: the sequences were reserved for %s[%d]", p, ErrInvalidBatch, r.p.Topic, r.p.Partition)
	}
	st := r.Stamp
	transform.Stamp(batch, st.ProducerID, st.Epoch, st.Sequence)

	policy := backoffpkg.Policy{First: cfg.RetryBackoff, Max: MaxRetryBackoff}
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("%s: %w: %w (sequence %d of producer %d epoch %d is reserved and unused)", p, ErrTxnAborted, err, st.Sequence, st.ProducerID, st.Epoch)
		}
		if err := t.Err(); err != nil {
			return 0, err
		}
		// Whether an earlier batch of the partition was in flight when
		// this one was sent: only then can an answer that it is out of
		// order mean that it overtook one.
		earlier := t.before(r) != nil
		base, retry, err := t.produceOnce(ctx, cfg, ls, p, batch, r)
		if err == nil {
			return base, nil
		}
		if errors.Is(err, errSequenceGap) && earlier {
			// It overtook an earlier batch: wait until every earlier
			// one is settled, then send it again at once.
			if werr := t.awaitEarlier(ctx, r); werr != nil {
				return 0, fmt.Errorf("%s: %w: %w (sequence %d): %w", p, ErrTxnAborted, werr, st.Sequence, err)
			}
			t.outOfOrder.Add(1)
			continue
		}
		if !retry {
			return 0, err
		}
		if !cfg.Uncounted {
			t.m.errors[KindRetriable].Inc()
		}
		if terr := t.timedOut("Produce", err); terr != nil {
			return 0, fmt.Errorf("%s: %w", p, terr)
		}
		if attempt > 0 && attempt%10 == 0 {
			t.log.Warn("transactional append keeps failing; sending the batch again", "partition", p.String(),
				"attempts", attempt, "sequence", st.Sequence, "error", err)
		}
		if err := backoffpkg.Sleep(ctx, policy.Wait(attempt)); err != nil {
			return 0, fmt.Errorf("%s: %w: %w", p, ErrTxnAborted, err)
		}
	}
}

// produceOnce sends batch to p's leader once. retry reports whether the
// answer leaves sending it again both safe and useful.
func (t *Txn) produceOnce(ctx context.Context, cfg TxnAppendConfig, ls *leaders.Cache, p tp.Partition, batch []byte, r *Reservation) (base int64, retry bool, err error) {
	leader, err := ls.Lookup(ctx, p.Key())
	if err != nil {
		if errors.Is(err, leaders.ErrUnknownPartition) || errors.Is(err, leaders.ErrNoLeader) || ctx.Err() == nil {
			return 0, true, fmt.Errorf("%s: leader lookup: %w", p, err)
		}
		return 0, false, fmt.Errorf("%s: %w: %w", p, ErrTxnAborted, err)
	}
	if t.gate != nil {
		// The partition's batches go out in the order of their
		// sequences: each in a request after the batch before's,
		// through the broker's gate (sendGate).
		// The batch before may be replaced by its parts while this
		// one waits (Split): then it waits for the last part.
		for prev := t.previous(r); prev != nil; {
			select {
			case <-prev.issued:
			case <-ctx.Done():
				return 0, false, fmt.Errorf("%s: %w: %w", p, ErrTxnAborted, ctx.Err())
			}
			next := t.previous(r)
			if next == prev {
				break
			}
			prev = next
		}
	}
	ans, err := t.produceShared(ctx, leader.Broker, &laneAppend{p: p, topicID: leader.ID, batch: batch, r: r,
		timeout: cfg.RequestTimeout, counted: !cfg.Uncounted})
	if err != nil {
		ls.Invalidate(p.Key())
		// Written or not, the same bytes again are safe.
		return 0, ctx.Err() == nil, fmt.Errorf("%s: %w", p, err)
	}
	if ans.ErrorCode == 0 {
		return ans.BaseOffset, false, nil
	}
	cause := kerr.ErrorForCode(ans.ErrorCode)
	if ans.ErrorMessage != nil && *ans.ErrorMessage != "" {
		cause = fmt.Errorf("%w: %s", cause, *ans.ErrorMessage)
	}
	where := fmt.Sprintf("%s on broker %d", p, leader.Broker)
	switch ans.ErrorCode {
	case kerr.NotLeaderForPartition.Code, kerr.LeaderNotAvailable.Code, kerr.UnknownTopicOrPartition.Code,
		kerr.UnknownTopicID.Code, kerr.KafkaStorageError.Code, kerr.FencedLeaderEpoch.Code:
		ls.Invalidate(p.Key())
		return 0, true, fmt.Errorf("%s: %w", where, cause)
	case kerr.NotEnoughReplicas.Code, kerr.NotEnoughReplicasAfterAppend.Code, kerr.RequestTimedOut.Code,
		kerr.ConcurrentTransactions.Code, kerr.CoordinatorLoadInProgress.Code, kerr.CoordinatorNotAvailable.Code, kerr.NotCoordinator.Code:
		// Under transaction.version 2 the leader adds the partition to
		// the transaction itself, and passes on what the coordinator
		// answers: CONCURRENT_TRANSACTIONS while the previous
		// transaction's markers are still being written (seen on Kafka
		// 4.4.0 right after a commit), or a coordinator that loads or
		// moved. Nothing was appended; Kafka's producer retries these.
		return 0, true, fmt.Errorf("%s: %w", where, cause)
	case kerr.CorruptMessage.Code:
		// The batch's CRC failed at the broker: the stamp keeps a batch
		// damaged before mirrord damaged, so the same bytes cannot pass.
		// The caller aborts and fetches the batch again from the source.
		return 0, false, fmt.Errorf("%s: %w: %w: the destination broker refused the batch's CRC: %w", where, ErrTxnAborted, ErrCorrupt, cause)
	case kerr.InvalidProducerEpoch.Code, kerr.ProducerFenced.Code, kerr.InvalidProducerIDMapping.Code,
		kerr.InvalidTxnState.Code:
		return 0, false, fmt.Errorf("%s: %w", where, t.fence("Produce", cause))
	case kerr.OutOfOrderSequenceNumber.Code, kerr.UnknownProducerID.Code:
		// Retried once the batches before it are appended, if one is
		// still in flight (AppendReserved); otherwise the chain broke.
		return 0, false, fmt.Errorf("%s: %w: %w: %w", where, ErrTxnAborted, errSequenceGap, cause)
	case kerr.MessageTooLarge.Code, kerr.RecordListTooLarge.Code:
		return 0, false, fmt.Errorf("%s: %w: %w: the broker refused a batch of %d bytes (%w); raise max.message.bytes of destination topic %q to at least %d",
			where, ErrTxnAborted, ErrTooLarge, len(batch), cause, p.Topic, len(batch))
	case kerr.TopicAuthorizationFailed.Code, kerr.TransactionalIDAuthorizationFailed.Code, kerr.ClusterAuthorizationFailed.Code:
		return 0, false, fmt.Errorf("%s: %w: %w: the destination does not allow the link's principal Write on Topic:%s and TransactionalId:%s (see docs/acls.md): %w",
			where, ErrTxnAborted, ErrFatal, p.Topic, t.cfg.TransactionalID, cause)
	default:
		// DUPLICATE_SEQUENCE_NUMBER (without the first offset),
		// INVALID_RECORD, UNKNOWN_SERVER_ERROR and codes this table does
		// not know: the transaction cannot go on.
		return 0, false, fmt.Errorf("%s: %w: %w", where, ErrTxnAborted, cause)
	}
}
