package appender

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/seed83556561/mirrord/internal/kafka/tp"
)

// Classifying what a broker's answer says about a batch.
//
// A destination batch has a negative producer ID. Apache Kafka treats such a
// batch as non-idempotent (RecordBatch.hasProducerId is producerId >= 0), so
// it keeps no producer state for it and does not deduplicate it: a batch
// sent twice is appended twice. A retry inside the appender is therefore
// safe only after an answer that proves nothing was appended. Everything
// else that is not a success is ErrUnknownOutcome, settled by the caller's
// reconciliation (DESIGN §6), or a final error that, again, proves nothing
// was appended.
//
// Where a Produce answer comes from in Apache Kafka (ReplicaManager,
// Partition, DelayedProduce in core/src/main/scala/kafka):
//
//  1. Before any append, KafkaApis.handleProduceRequest answers partitions
//     it will not hand to the log: an unknown topic ID (v13,
//     UNKNOWN_TOPIC_ID), a topic missing from the broker's metadata
//     (UNKNOWN_TOPIC_OR_PARTITION), authorization failures, and requests
//     that fail ProduceRequest.validateRecords (INVALID_RECORD: e.g. more
//     than one batch for a partition in Produce v3+).
//  2. ReplicaManager.appendToLocalLog calls Partition.appendRecordsToLeader,
//     which throws NotLeaderOrFollowerException when this broker does not
//     lead the partition and NotEnoughReplicasException ("Avoid writing to
//     leader if there are not enough insync replicas to make it safe") when
//     the ISR is below min.insync.replicas and acks=all, both before
//     leaderLog.appendAsLeader. Inside appendAsLeader, LogValidator and the
//     size checks throw CorruptRecordException (CORRUPT_MESSAGE: the batch's
//     CRC is wrong), RecordTooLargeException / RecordBatchTooLargeException
//     (MESSAGE_TOO_LARGE / RECORD_LIST_TOO_LARGE), InvalidTimestampException,
//     InvalidRecordException, before the batch reaches the segment. An I/O
//     failure while writing the segment is KafkaStorageException, and any
//     other Throwable becomes UNKNOWN_SERVER_ERROR: both may come after part
//     or all of the write.
//  3. After the local append, with acks=all, the request waits in
//     DelayedProduce. It completes with NONE when the ISR reached the
//     offset, NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below
//     min.insync.replicas meanwhile, REQUEST_TIMED_OUT when TimeoutMillis
//     passed (DelayedProduce sets REQUEST_TIMED_OUT as the initial status of
//     every appended partition), and, from getPartitionOrError or
//     checkEnoughReplicasReachOffset, NOT_LEADER_OR_FOLLOWER when the broker
//     lost leadership while waiting, KAFKA_STORAGE_ERROR when the log went
//     offline, UNKNOWN_TOPIC_OR_PARTITION when the topic is gone from the
//     broker's metadata (deleted). The batch is in the leader's log in all
//     of these; whether it survives depends on what the next leader has.
//
// So NOT_LEADER_OR_FOLLOWER (2 or 3), REQUEST_TIMED_OUT (3),
// NOT_ENOUGH_REPLICAS_AFTER_APPEND (3), KAFKA_STORAGE_ERROR (2 or 3) and
// UNKNOWN_SERVER_ERROR (2) leave the append possible. UNKNOWN_TOPIC_OR_PARTITION
// after an append (3) means the topic was deleted, and the appended batch
// went with it: no log that exists holds it. The retry is addressed by
// topic ID (v13), and is sent only after Metadata shows the topic ID the
// batch was first sent with (handleResolved), so it cannot land in a
// recreated topic of the same name.

// verdict is what the appender does with a batch after an answer.
type verdict int

const (
	verdictAppended verdict = iota // the broker appended the batch at baseOffset
	verdictRetry                   // proven not appended: back off, look up the leader, send again
	verdictFinal                   // report err as the batch's Result
)

// outcome is the classification of one batch's answer.
type outcome struct {
	verdict    verdict
	baseOffset int64
	// err is the Result's error (verdictFinal) or the reason for the retry
	// (verdictRetry).
	err error
	// kind is the append_errors_total kind; empty for verdictAppended.
	kind string
	// invalidate: the cached leader is probably wrong; drop it before the
	// next lookup.
	invalidate bool
	// answered: a broker's answer, not a transport failure; sent and
	// timeout: when the request went to kgo and its TimeoutMillis.
	answered bool
	sent     time.Time
	timeout  time.Duration
}

// classifyCode classifies a partition's error code in a Produce response
// from broker node. size is the batch's length in bytes, msg the broker's
// ErrorMessage (Produce v8+), if any.
func classifyCode(p tp.Partition, node int32, code int16, msg *string, size int) outcome {
	if code == 0 {
		return outcome{verdict: verdictAppended}
	}
	cause := kerr.ErrorForCode(code)
	detail := ""
	if msg != nil && *msg != "" {
		detail = ": " + *msg
	}
	where := fmt.Sprintf("%s on broker %d", p, node)
	if errors.Is(cause, kerr.UnknownServerError) && code != kerr.UnknownServerError.Code {
		// kerr maps a code it does not know to UNKNOWN_SERVER_ERROR; keep
		// the number.
		where = fmt.Sprintf("%s on broker %d (error code %d)", p, node, code)
	}

	switch code {
	case kerr.UnknownTopicOrPartition.Code, kerr.UnknownTopicID.Code, kerr.LeaderNotAvailable.Code:
		// Answered before the log is touched (1 above): the broker does not
		// know the topic or does not lead the partition yet, typically
		// right after topic creation or a leader move. After an append only
		// a deleted topic answers UNKNOWN_TOPIC_OR_PARTITION, and a
		// deleted topic keeps nothing (see above).
		return outcome{verdict: verdictRetry, kind: KindRetriable, invalidate: true,
			err: fmt.Errorf("%s: %w%s", where, cause, detail)}

	case kerr.NotEnoughReplicas.Code:
		// Partition.appendRecordsToLeader throws NotEnoughReplicasException
		// before leaderLog.appendAsLeader (2 above); DelayedProduce answers
		// NOT_ENOUGH_REPLICAS_AFTER_APPEND, a different code, for a shrink
		// after the append. The leader is right; only wait.
		return outcome{verdict: verdictRetry, kind: KindRetriable,
			err: fmt.Errorf("%s: %w%s", where, cause, detail)}

	case kerr.CorruptMessage.Code:
		// LogValidator refused the batch before the append: its CRC (or
		// framing) is wrong. The rewrite keeps a damaged batch damaged
		// (DESIGN §5), so the caller refetches it from the source.
		return outcome{verdict: verdictFinal, kind: KindCorrupt,
			err: fmt.Errorf("%s: %w: the broker refused the %d-byte batch (%w%s); refetch it from the source", where, ErrCorrupt, size, cause, detail)}

	case kerr.MessageTooLarge.Code, kerr.RecordListTooLarge.Code:
		// Size checks before the append. Sending again cannot help.
		return outcome{verdict: verdictFinal, kind: KindTooLarge,
			err: fmt.Errorf("%s: %w: the broker refused a batch of %d bytes (%w%s); raise max.message.bytes of destination topic %q (and the brokers' message.max.bytes if the topic has no override) to at least %d, e.g. to the source topic's value",
				where, ErrTooLarge, size, cause, detail, p.Topic, size)}

	case kerr.TopicAuthorizationFailed.Code:
		// Refused before the append (1 above): the principal may not write
		// the topic. The one ACL a raw Produce needs (KafkaApis checks Write
		// on the topic; with the transactional bit cleared, no Write on a
		// transactional ID, and no IdempotentWrite for a negative producer
		// ID).
		return outcome{verdict: verdictFinal, kind: KindFatal,
			err: fmt.Errorf("%s: %w: the destination cluster does not allow the link's principal Write on Topic:%s (mirrord appends the mirrored batches; see docs/acls.md): %w%s",
				where, ErrFatal, p.Topic, cause, detail)}

	case kerr.InvalidRecord.Code,
		kerr.InvalidTimestamp.Code,
		kerr.ClusterAuthorizationFailed.Code,
		kerr.TransactionalIDAuthorizationFailed.Code,
		kerr.InvalidRequiredAcks.Code,
		kerr.InvalidTopicException.Code,
		kerr.UnsupportedForMessageFormat.Code,
		kerr.UnsupportedCompressionType.Code,
		kerr.UnsupportedVersion.Code,
		kerr.InvalidRequest.Code,
		kerr.PolicyViolation.Code,
		kerr.InvalidProducerEpoch.Code,
		kerr.InvalidProducerIDMapping.Code,
		kerr.InvalidTxnState.Code,
		kerr.OutOfOrderSequenceNumber.Code,
		kerr.DuplicateSequenceNumber.Code,
		kerr.UnknownProducerID.Code:
		// Refused before the append (1 or 2 above: authorization, request
		// validation, LogValidator, producer-state validation, which runs
		// before the segment write), and sending the same batch again
		// gets the same answer. The producer-state codes cannot come for a
		// negative producer ID from a correct broker; they are final all
		// the same, since nothing was appended.
		return outcome{verdict: verdictFinal, kind: KindFatal,
			err: fmt.Errorf("%s: %w: %w%s", where, ErrFatal, cause, detail)}

	default:
		// NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT,
		// NOT_ENOUGH_REPLICAS_AFTER_APPEND, KAFKA_STORAGE_ERROR,
		// UNKNOWN_SERVER_ERROR (2 and 3 above), and any code this table
		// does not know: the batch may be in the log.
		out := outcome{verdict: verdictFinal, kind: KindUnknownOutcome,
			err: fmt.Errorf("%s: %w: %w%s", where, ErrUnknownOutcome, cause, detail)}
		switch code {
		case kerr.NotLeaderForPartition.Code, kerr.KafkaStorageError.Code:
			out.invalidate = true // the next batch must find the new leader
		}
		return out
	}
}

// errUnknownBrokerText is the message of kgo's unexported errUnknownBroker,
// which Broker.Request returns, before writing anything, when kgo's metadata
// does not list the broker (it reloads broker metadata twice first). If kgo
// changes the text, such an error is classified as an unknown outcome: the
// safe side.
const errUnknownBrokerText = "unknown broker"

// classifyTransport classifies an error from kgo's Broker.Request: no
// response was read. ctx is the context the request was issued with.
func classifyTransport(p tp.Partition, node int32, err error, ctx context.Context) outcome {
	if neverWritten(err) {
		if ctx.Err() != nil {
			return outcome{verdict: verdictFinal, kind: KindStopped,
				err: fmt.Errorf("%s: %w: the request to broker %d was never written (%w)", p, ErrStopped, node, err)}
		}
		// The connection to the leader could not be opened or kgo does
		// not know the broker: the request never reached a broker. The
		// leader may have moved away from a broker that is gone.
		return outcome{verdict: verdictRetry, kind: KindRetriable, invalidate: true,
			err: fmt.Errorf("%s: produce to broker %d was never written: %w", p, node, err)}
	}
	// Lost connection, read timeout, canceled context, closed client, a
	// response that does not decode: the request may have been written and
	// the batch appended.
	return outcome{verdict: verdictFinal, kind: KindUnknownOutcome, invalidate: true,
		err: fmt.Errorf("%s: %w: produce to broker %d: %w", p, ErrUnknownOutcome, node, err)}
}

// neverWritten reports whether a Broker.Request error proves the request was
// not written to any connection: a failed dial (kgo dials in loadConnection,
// before writing, and after a failed write it redials only if it wrote zero
// bytes), or kgo not knowing the broker.
func neverWritten(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return err.Error() == errUnknownBrokerText
}
