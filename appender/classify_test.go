package appender

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/seed83556561/mirrord/internal/kafka/tp"
)

// TestClassifyCode guards the one decision that can duplicate data: only
// answers that prove the broker did not append a batch may be retried.
func TestClassifyCode(t *testing.T) {
	p := tp.Partition{Topic: "orders", Partition: 3}
	cases := []struct {
		name       string
		code       int16
		verdict    verdict
		is         error // sentinel the error wraps; nil for success and retries
		kind       string
		invalidate bool
	}{
		{"success", 0, verdictAppended, nil, "", false},

		// Proven not appended: retried inside the appender.
		{"unknown topic or partition", kerr.UnknownTopicOrPartition.Code, verdictRetry, nil, KindRetriable, true},
		{"unknown topic id", kerr.UnknownTopicID.Code, verdictRetry, nil, KindRetriable, true},
		{"leader not available", kerr.LeaderNotAvailable.Code, verdictRetry, nil, KindRetriable, true},
		{"not enough replicas", kerr.NotEnoughReplicas.Code, verdictRetry, nil, KindRetriable, false},

		// The append may have happened.
		{"not leader or follower", kerr.NotLeaderForPartition.Code, verdictFinal, ErrUnknownOutcome, KindUnknownOutcome, true},
		{"request timed out", kerr.RequestTimedOut.Code, verdictFinal, ErrUnknownOutcome, KindUnknownOutcome, false},
		{"not enough replicas after append", kerr.NotEnoughReplicasAfterAppend.Code, verdictFinal, ErrUnknownOutcome, KindUnknownOutcome, false},
		{"kafka storage error", kerr.KafkaStorageError.Code, verdictFinal, ErrUnknownOutcome, KindUnknownOutcome, true},
		{"unknown server error", kerr.UnknownServerError.Code, verdictFinal, ErrUnknownOutcome, KindUnknownOutcome, false},
		{"network exception", kerr.NetworkException.Code, verdictFinal, ErrUnknownOutcome, KindUnknownOutcome, false},
		{"code kerr does not know", 9999, verdictFinal, ErrUnknownOutcome, KindUnknownOutcome, false},

		// Refused before the append, final.
		{"corrupt message", kerr.CorruptMessage.Code, verdictFinal, ErrCorrupt, KindCorrupt, false},
		{"message too large", kerr.MessageTooLarge.Code, verdictFinal, ErrTooLarge, KindTooLarge, false},
		{"record list too large", kerr.RecordListTooLarge.Code, verdictFinal, ErrTooLarge, KindTooLarge, false},
		{"invalid record", kerr.InvalidRecord.Code, verdictFinal, ErrFatal, KindFatal, false},
		{"invalid timestamp", kerr.InvalidTimestamp.Code, verdictFinal, ErrFatal, KindFatal, false},
		{"topic authorization failed", kerr.TopicAuthorizationFailed.Code, verdictFinal, ErrFatal, KindFatal, false},
		{"cluster authorization failed", kerr.ClusterAuthorizationFailed.Code, verdictFinal, ErrFatal, KindFatal, false},
		{"invalid required acks", kerr.InvalidRequiredAcks.Code, verdictFinal, ErrFatal, KindFatal, false},
		{"invalid producer id mapping", kerr.InvalidProducerIDMapping.Code, verdictFinal, ErrFatal, KindFatal, false},
		{"out of order sequence", kerr.OutOfOrderSequenceNumber.Code, verdictFinal, ErrFatal, KindFatal, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := classifyCode(p, 2, c.code, nil, 4096)
			if o.verdict != c.verdict || o.kind != c.kind || o.invalidate != c.invalidate {
				t.Fatalf("code %d: verdict %d kind %q invalidate %v, want %d %q %v (err %v)",
					c.code, o.verdict, o.kind, o.invalidate, c.verdict, c.kind, c.invalidate, o.err)
			}
			if c.verdict == verdictAppended {
				if o.err != nil {
					t.Fatalf("success carries an error: %v", o.err)
				}
				return
			}
			if c.is != nil && !errors.Is(o.err, c.is) {
				t.Fatalf("error %v does not wrap %v", o.err, c.is)
			}
			for _, s := range []error{ErrUnknownOutcome, ErrCorrupt, ErrTooLarge, ErrFatal, ErrStopped, ErrLeaseExpired} {
				if s != c.is && errors.Is(o.err, s) { //nolint:errorlint // which sentinel of the list, by identity; not an error check
					t.Fatalf("error %v also wraps %v", o.err, s)
				}
			}
			if ke := kerr.ErrorForCode(c.code); c.code != 9999 && !errors.Is(o.err, ke) {
				t.Fatalf("error %v does not wrap the broker's %v", o.err, ke)
			}
			msg := o.err.Error()
			if !strings.Contains(msg, "orders[3]") || !strings.Contains(msg, "broker 2") {
				t.Fatalf("error %q does not name the partition and the broker", msg)
			}
		})
	}
}

// TestClassifyCodeMessages guards what an operator reads: the broker's own
// message, the topic's max.message.bytes, an unknown code's number.
func TestClassifyCodeMessages(t *testing.T) {
	p := tp.Partition{Topic: "orders", Partition: 3}
	brokerMsg := "The request included a message larger than the max message size the server will accept."
	o := classifyCode(p, 1, kerr.MessageTooLarge.Code, &brokerMsg, 123456)
	for _, want := range []string{`max.message.bytes of destination topic "orders"`, "123456", brokerMsg} {
		if !strings.Contains(o.err.Error(), want) {
			t.Errorf("too-large error %q lacks %q", o.err, want)
		}
	}
	o = classifyCode(p, 1, 9999, nil, 1)
	if !strings.Contains(o.err.Error(), "error code 9999") {
		t.Errorf("unknown-code error %q lacks the code", o.err)
	}
}

// TestClassifyTransport guards the transport errors: only a request kgo
// never wrote may be retried.
func TestClassifyTransport(t *testing.T) {
	p := tp.Partition{Topic: "orders", Partition: 0}
	dialErr := &net.OpError{Op: "dial", Net: "tcp", Err: &net.AddrError{Err: "connection refused", Addr: "127.0.0.1:1"}}
	readErr := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	live := context.Background()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		name    string
		err     error
		ctx     context.Context
		verdict verdict
		is      error
	}{
		{"dial failed", dialErr, live, verdictRetry, nil},
		{"dial failed, wrapped", fmt.Errorf("loading connection: %w", dialErr), live, verdictRetry, nil},
		{"kgo does not know the broker", errors.New(errUnknownBrokerText), live, verdictRetry, nil},
		{"dial failed after cancel", dialErr, done, verdictFinal, ErrStopped},
		{"connection reset on read", readErr, live, verdictFinal, ErrUnknownOutcome},
		{"eof", io.EOF, live, verdictFinal, ErrUnknownOutcome},
		{"canceled while in flight", context.Canceled, done, verdictFinal, ErrUnknownOutcome},
		{"read timeout", &net.OpError{Op: "read", Err: errors.New("i/o timeout")}, live, verdictFinal, ErrUnknownOutcome},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := classifyTransport(p, 7, c.err, c.ctx)
			if o.verdict != c.verdict {
				t.Fatalf("verdict %d, want %d (err %v)", o.verdict, c.verdict, o.err)
			}
			if c.is != nil && !errors.Is(o.err, c.is) {
				t.Fatalf("error %v does not wrap %v", o.err, c.is)
			}
			if !errors.Is(o.err, c.err) {
				t.Fatalf("error %v does not wrap the transport error %v", o.err, c.err)
			}
		})
	}
}

// TestBackoff guards the retry schedule: exponential from the first
// backoff, capped at 5s.
func TestBackoff(t *testing.T) {
	cases := []struct {
		first   string
		attempt int
		want    string
	}{
		{"100ms", 1, "100ms"},
		{"100ms", 2, "200ms"},
		{"100ms", 4, "800ms"},
		{"100ms", 7, "5s"},
		{"100ms", 1000, "5s"},
		{"5s", 1, "5s"},
	}
	for _, c := range cases {
		if got := backoff(mustDuration(t, c.first), c.attempt).String(); got != c.want {
			t.Errorf("backoff(%s, %d) = %s, want %s", c.first, c.attempt, got, c.want)
		}
	}
}

func mustDuration(t *testing.T, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
