package link

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/internal/backoff"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/statestore"
)

// Guards the refusal an operator reads when a cluster reports that the
// link's principal lacks a topic permission: the operation spelled as
// kafka-acls.sh spells it, the resource, the role and cluster, why the link
// needs it, what the principal may do instead, and an error that
// errors.Is a topic authorization failure (so the link counts it under
// kind=authorization and does not retry it).
func TestTopicAccessCheck(t *testing.T) {
	a := clusterAccess{role: "destination", cluster: "dst", principal: "User:mirror"}
	td := kadm.TopicDetail{Topic: "orders", AuthorizedOperations: []kmsg.ACLOperation{kmsg.ACLOperationRead, kmsg.ACLOperationDescribe}}
	errs := a.check(td, topicNeed{kmsg.ACLOperationWrite, "to append mirrored batches"}, topicNeed{kmsg.ACLOperationDescribe, "to find its partitions"})
	if len(errs) != 1 {
		t.Fatalf("check returned %d refusals, want 1 (Write): %v", len(errs), errs)
	}
	want := `destination cluster "dst" does not allow User:mirror Write on Topic:orders (to append mirrored batches; it may Describe, Read; see docs/acls.md)`
	if got := errs[0].Error(); !strings.HasPrefix(got, want) {
		t.Errorf("refusal:\n%s\nwant it to start with\n%s", got, want)
	}
	if !errors.Is(errs[0], kerr.TopicAuthorizationFailed) || !isAuthorization(errs[0]) {
		t.Errorf("refusal %v is not a topic authorization failure", errs[0])
	}
	// A cluster that reports no authorized operations (before Kafka 2.3)
	// is not judged here.
	if errs := a.check(kadm.TopicDetail{Topic: "orders"}, topicNeed{kmsg.ACLOperationWrite, "x"}); errs != nil {
		t.Errorf("a topic without authorized operations gave refusals %v", errs)
	}
}

// Guards the spelling of every operation the link may need, as
// kafka-acls.sh --operation takes it.
func TestOpName(t *testing.T) {
	for op, want := range map[kmsg.ACLOperation]string{
		kmsg.ACLOperationRead: "Read", kmsg.ACLOperationWrite: "Write", kmsg.ACLOperationCreate: "Create",
		kmsg.ACLOperationDelete: "Delete", kmsg.ACLOperationAlter: "Alter", kmsg.ACLOperationDescribe: "Describe",
		kmsg.ACLOperationClusterAction: "ClusterAction", kmsg.ACLOperationDescribeConfigs: "DescribeConfigs",
		kmsg.ACLOperationAlterConfigs: "AlterConfigs", kmsg.ACLOperationIdempotentWrite: "IdempotentWrite",
		kmsg.ACLOperationAll: kmsg.ACLOperationAll.String(),
	} {
		if got := opName(op); got != want {
			t.Errorf("opName(%d) = %q, want %q", op, got, want)
		}
	}
	if got := opList([]kmsg.ACLOperation{kmsg.ACLOperationWrite, kmsg.ACLOperationAlterConfigs, kmsg.ACLOperationRead}); got != "AlterConfigs, Read, Write" {
		t.Errorf("opList = %q", got)
	}
}

// Guards that one error lists at most maxRefusals refusals and says how
// many more there were.
func TestJoinRefusals(t *testing.T) {
	var errs []error
	for i := range maxRefusals + 3 {
		errs = append(errs, fmt.Errorf("refusal %d: %w", i, kerr.TopicAuthorizationFailed))
	}
	err := joinRefusals(errs)
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != maxRefusals+1 || lines[maxRefusals] != "and 3 more refusals of the same kind" || lines[0] != "refusal 0: "+kerr.TopicAuthorizationFailed.Error() {
		t.Errorf("joined: %q", lines)
	}
	if !isAuthorization(err) {
		t.Error("the joined refusals are not an authorization error")
	}
	if err := joinRefusals(errs[:2]); strings.Count(err.Error(), "\n") != 1 {
		t.Errorf("two refusals joined: %q", err)
	}
}

// Guards retry: it stops at the first success, at once on an
// authorization refusal (waiting grants no permission), after the
// attempts, and when ctx ends while it waits.
func TestRetry(t *testing.T) {
	quick := backoff.Policy{First: time.Millisecond, Max: time.Millisecond}
	ctx := context.Background()
	calls := 0
	failThen := func(n int, err error) func() error {
		calls = 0
		return func() error {
			calls++
			if calls <= n {
				return err
			}
			return nil
		}
	}
	if err := retry(ctx, 5, quick, failThen(2, kerr.LeaderNotAvailable)); err != nil || calls != 3 {
		t.Errorf("two failures then success: %v after %d calls", err, calls)
	}
	if err := retry(ctx, 5, quick, failThen(9, kerr.TopicAuthorizationFailed)); !errors.Is(err, kerr.TopicAuthorizationFailed) || calls != 1 {
		t.Errorf("authorization refusal: %v after %d calls, want it after 1", err, calls)
	}
	if err := retry(ctx, 3, quick, failThen(9, kerr.LeaderNotAvailable)); !errors.Is(err, kerr.LeaderNotAvailable) || calls != 3 {
		t.Errorf("out of attempts: %v after %d calls, want the last error after 3", err, calls)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := retry(cctx, 3, backoff.Policy{First: time.Hour, Max: time.Hour}, failThen(9, kerr.LeaderNotAvailable)); !errors.Is(err, context.Canceled) || calls != 1 {
		t.Errorf("ended while waiting: %v after %d calls", err, calls)
	}
}

// Guards offsetOf: a partition missing from a listing, or listed with an
// error, is an error that names the partition and what was listed.
func TestOffsetOf(t *testing.T) {
	p := tp.Partition{Topic: "orders", Partition: 3}
	offs := kadm.ListedOffsets{"orders": {
		3: {Topic: "orders", Partition: 3, Offset: 42},
		4: {Topic: "orders", Partition: 4, Err: kerr.NotLeaderForPartition},
	}}
	if o, err := offsetOf(offs, p, "end"); o != 42 || err != nil {
		t.Errorf("listed: %d, %v", o, err)
	}
	if _, err := offsetOf(offs, tp.Partition{Topic: "orders", Partition: 4}, "end"); !errors.Is(err, kerr.NotLeaderForPartition) || !strings.HasPrefix(err.Error(), "end offset of orders[4]: ") {
		t.Errorf("listed with an error: %v", err)
	}
	if _, err := offsetOf(offs, tp.Partition{Topic: "events", Partition: 0}, "start"); err == nil || err.Error() != "start offset of events[0]: not in the answer" {
		t.Errorf("not listed: %v", err)
	}
}

// Guards which checkpoint a partition resumes from: one of the same source
// topic, partition and (when both know it) topic ID; a version 0
// checkpoint, which has no ID, goes by name.
func TestSameSource(t *testing.T) {
	id := [16]byte{1}
	src := tp.Partition{Topic: "orders", Partition: 2, ID: id}
	for _, c := range []struct {
		name string
		ck   statestore.CheckpointValue
		want bool
	}{
		{"same topic ID", statestore.CheckpointValue{SourceTopic: "orders", SourcePartition: 2, SourceTopicID: statestore.UUID(id)}, true},
		{"version 0, by name", statestore.CheckpointValue{SourceTopic: "orders", SourcePartition: 2}, true},
		{"the topic was recreated", statestore.CheckpointValue{SourceTopic: "orders", SourcePartition: 2, SourceTopicID: statestore.UUID{2}}, false},
		{"another topic", statestore.CheckpointValue{SourceTopic: "events", SourcePartition: 2, SourceTopicID: statestore.UUID(id)}, false},
		{"another partition", statestore.CheckpointValue{SourceTopic: "orders", SourcePartition: 3, SourceTopicID: statestore.UUID(id)}, false},
	} {
		if got := sameSource(&c.ck, src); got != c.want {
			t.Errorf("%s: sameSource = %v, want %v", c.name, got, c.want)
		}
	}
	if !sameSource(&statestore.CheckpointValue{SourceTopic: "orders", SourcePartition: 2, SourceTopicID: statestore.UUID{2}}, tp.Partition{Topic: "orders", Partition: 2}) {
		t.Error("a source partition whose ID is not known goes by name")
	}
}

// Guards listLed: a partition whose leader is not there yet is listed
// again until it answers; an error that no wait cures comes back at once
// (for offsetOf to name the partition); a request that keeps failing as a
// whole fails with its own error.
func TestListLed(t *testing.T) {
	was := metadataRetry
	metadataRetry = backoff.Policy{First: time.Millisecond, Max: time.Millisecond} // no test in link runs in parallel
	t.Cleanup(func() { metadataRetry = was })
	ctx := context.Background()
	parts := []tp.Partition{{Topic: "t", Partition: 0}}
	listing := func(err error, offset int64) kadm.ListedOffsets {
		return kadm.ListedOffsets{"t": {0: {Topic: "t", Partition: 0, Offset: offset, Err: err}}}
	}
	calls := 0
	offs, err := listLed(ctx, parts, func() (kadm.ListedOffsets, error) {
		calls++
		if calls < 3 {
			return listing(kerr.NotLeaderForPartition, 0), nil
		}
		return listing(nil, 7), nil
	})
	if o, oerr := offsetOf(offs, parts[0], "end"); err != nil || oerr != nil || o != 7 || calls != 3 {
		t.Errorf("leader after two refusals: offset %d (%v, %v) after %d calls", o, err, oerr, calls)
	}
	calls = 0
	offs, err = listLed(ctx, parts, func() (kadm.ListedOffsets, error) {
		calls++
		return listing(kerr.TopicAuthorizationFailed, 0), nil
	})
	if _, oerr := offsetOf(offs, parts[0], "end"); err != nil || !errors.Is(oerr, kerr.TopicAuthorizationFailed) || calls != 1 {
		t.Errorf("a refusal no wait cures: %v, %v after %d calls", err, oerr, calls)
	}
	calls = 0
	whole := errors.New("broker unreachable")
	if _, err := listLed(ctx, parts, func() (kadm.ListedOffsets, error) { calls++; return nil, whole }); !errors.Is(err, whole) || calls != placeAttempts {
		t.Errorf("a request failing as a whole: %v after %d calls, want it after %d", err, calls, placeAttempts)
	}
}
