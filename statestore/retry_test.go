package statestore

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/internal/testkit/logtest"
)

// failEndTxn answers the next n commits' EndTxn with code instead of
// letting the cluster handle them (so nothing commits), then lets every
// later one through; it returns how many it answered.
func failEndTxn(c *kfake.Cluster, n int, code int16) *atomic.Int32 {
	var failed atomic.Int32
	c.ControlKey(int16(kmsg.EndTxn), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.EndTxnRequest)
		if !req.Commit || int(failed.Load()) >= n {
			return nil, nil, false
		}
		failed.Add(1)
		resp := req.ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = code
		return resp, nil, true
	})
	return &failed
}

// failProduce answers the next n transactional Produce requests with code
// on every partition, unwritten, then lets every later one through.
func failProduce(c *kfake.Cluster, n int, code int16) *atomic.Int32 {
	var failed atomic.Int32
	c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.ProduceRequest)
		if req.TransactionID == nil || int(failed.Load()) >= n {
			return nil, nil, false
		}
		failed.Add(1)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	return &failed
}

// TestCommitRetriedWithinLease guards that a state transaction that fails
// (as one does when the state topic's leader or the transaction coordinator
// moves in a rolling restart) is aborted and committed again within the
// lease, instead of failing the session and with it the link, which then
// stalls every partition while it prepares again. The records commit once
// the cluster lets them, the session stays usable and its lease renews.
func TestCommitRetriedWithinLease(t *testing.T) {
	for _, tt := range []struct {
		name string
		fail func(c *kfake.Cluster) *atomic.Int32
	}{
		// An EndTxn of unknown outcome: kgo's abort re-runs
		// InitProducerId, which aborts the transaction broker-side.
		{"end-unknown-outcome", func(c *kfake.Cluster) *atomic.Int32 { return failEndTxn(c, 2, kerr.UnknownServerError.Code) }},
		// A produce the broker refused for good: the records are
		// dropped and the transaction aborted.
		{"produce-refused", func(c *kfake.Cluster) *atomic.Int32 { return failProduce(c, 1, kerr.UnknownServerError.Code) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			_, dst := kafkatest.Pair(t)
			var log logtest.Buffer
			s := newStore(t, dst, Config{}, logtest.Logger(&log))
			if err := s.Ensure(ctx); err != nil {
				t.Fatal(err)
			}
			sess := begin(t, ctx, s, "l1")
			cp := func(n int64) Record {
				return Record{Key: CheckpointKey{LinkName: "l1"}, Value: CheckpointValue{SourceTopic: "t", SourceNextOffset: n}}
			}
			if err := sess.Commit(ctx, Mirroring, cp(1)); err != nil {
				t.Fatalf("first commit: %v", err)
			}
			failed := tt.fail(dst)
			var retried []string
			sess.onRetry = func(op string, err error) { retried = append(retried, op+": "+err.Error()) }
			if err := sess.Commit(ctx, Mirroring, cp(2)); err != nil {
				t.Fatalf("commit with failures to retry: %v (log:\n%s)", err, log.String())
			}
			if failed.Load() == 0 || len(retried) != int(failed.Load()) {
				t.Fatalf("the cluster failed %d attempts, the session retried %d: %q", failed.Load(), len(retried), retried)
			}
			if got := s.Stats().CommitRetries; got != int64(len(retried)) {
				t.Errorf("CommitRetries = %d, want %d", got, len(retried))
			}
			if err := sess.Err(); err != nil || !sess.LeaseValid(time.Now()) {
				t.Fatalf("after the retried commit: session error %v, lease valid %v; want a usable session", err, sess.LeaseValid(time.Now()))
			}
			if err := sess.Commit(ctx, Mirroring, cp(3)); err != nil {
				t.Fatalf("commit after the retried one: %v", err)
			}
			v, err := s.Replay(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var got []int64
			for _, r := range v.Records {
				if c, ok := r.Value.(CheckpointValue); ok {
					got = append(got, c.SourceNextOffset)
				}
			}
			// The aborted attempts left nothing a read_committed reader
			// sees: each checkpoint once, in order.
			if len(got) != 3 || got[0] != 1 || got[1] != 2 || got[2] != 3 {
				t.Errorf("committed checkpoints %v, want [1 2 3]", got)
			}
			if lv := v.Links["l1"]; lv.State != Mirroring || lv.SessionEpoch != sess.Epoch() {
				t.Errorf("link record %+v, want MIRRORING at epoch %d", lv, sess.Epoch())
			}
			if !strings.Contains(log.String(), "state commit failed; aborting it and committing again while the lease lasts") {
				t.Errorf("no warning of the retry in the log:\n%s", log.String())
			}
		})
	}
}

// TestCommitRetryEndsWithLease guards that a commit that keeps failing is
// retried only while the lease lasts: past it the session fails (a newer
// session may hold the link by then), with the last error, and stays
// failed. A fencing error is never retried.
func TestCommitRetryEndsWithLease(t *testing.T) {
	ctx := testCtx(t)
	_, dst := kafkatest.Pair(t)
	s := newStore(t, dst, Config{}, nil)
	if err := s.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	sess, err := s.Begin(ctx, "l1", 1500*time.Millisecond, SourceCluster(kafkatest.SourceClusterID))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close(ctx) })
	if err := sess.Commit(ctx, Mirroring); err != nil {
		t.Fatal(err)
	}
	failed := failEndTxn(dst, 1<<30, kerr.UnknownServerError.Code)
	err = sess.Commit(ctx, Mirroring)
	if err == nil || errors.Is(err, ErrFenced) || !errors.Is(err, kerr.UnknownServerError) {
		t.Fatalf("commit that never succeeds: %v, want the last attempt's UNKNOWN_SERVER_ERROR, not fencing", err)
	}
	if failed.Load() < 2 {
		t.Errorf("%d attempts within the lease, want retries", failed.Load())
	}
	if sess.LeaseValid(time.Now()) {
		t.Error("the failed session still holds its lease")
	}
	if err2 := sess.Commit(ctx, Mirroring); err2 == nil || err2.Error() != err.Error() {
		t.Errorf("commit after the session failed: %v, want the sticky %v", err2, err)
	}
	if got := s.Stats().CommitRetries; got != int64(failed.Load())-1 {
		t.Errorf("CommitRetries = %d, want %d (every failed attempt but the last)", got, failed.Load()-1)
	}
}

// TestBeginRetriesInitProducerID guards that a new session asks again when
// InitProducerId fails (its coordinator's broker down or moving), instead
// of failing the link's PREPARING at once, and that a refusal no retry
// fixes (an ACL) is not asked again.
func TestBeginRetriesInitProducerID(t *testing.T) {
	ctx := testCtx(t)
	_, dst := kafkatest.Pair(t)
	var log logtest.Buffer
	s := newStore(t, dst, Config{}, logtest.Logger(&log))
	if err := s.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	answer := func(n int, code int16) *atomic.Int32 {
		var failed atomic.Int32
		dst.ControlKey(int16(kmsg.InitProducerID), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
			dst.KeepControl()
			if int(failed.Load()) >= n {
				return nil, nil, false
			}
			failed.Add(1)
			resp := kreq.ResponseKind().(*kmsg.InitProducerIDResponse)
			resp.ErrorCode, resp.ProducerID, resp.ProducerEpoch = code, -1, -1
			return resp, nil, true
		})
		return &failed
	}
	failed := answer(2, kerr.UnknownServerError.Code)
	sess := begin(t, ctx, s, "l1")
	if failed.Load() != 2 {
		t.Fatalf("%d InitProducerId answered with errors, want 2", failed.Load())
	}
	if err := sess.Commit(ctx, Mirroring); err != nil {
		t.Fatalf("commit of the session begun after retries: %v", err)
	}
	if n := strings.Count(log.String(), "init producer id of a new state session failed; asking again"); n != 2 {
		t.Errorf("%d retry warnings, want 2:\n%s", n, log.String())
	}

	refused := answer(5, kerr.TransactionalIDAuthorizationFailed.Code)
	if _, err := s.Begin(ctx, "l2", time.Minute); !errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
		t.Fatalf("Begin refused by an ACL: %v, want TRANSACTIONAL_ID_AUTHORIZATION_FAILED", err)
	}
	if refused.Load() != 1 {
		t.Errorf("an ACL refusal was asked %d times, want once", refused.Load())
	}
}
