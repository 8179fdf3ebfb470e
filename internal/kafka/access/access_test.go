package access

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Guards the refusal an operator reads when a cluster reports that the
// link's principal lacks a topic permission: the operation spelled as
// kafka-acls.sh spells it, the resource, the role and cluster, why the link
// needs it, what the principal may do instead, and an error that
// errors.Is a topic authorization failure (so the link counts it under
// kind=authorization and does not retry it).
func TestTopicAccessCheck(t *testing.T) {
	a := Cluster{Role: "destination", Name: "dst", Principal: "User:mirror"}
	td := kadm.TopicDetail{Topic: "orders", AuthorizedOperations: []kmsg.ACLOperation{kmsg.ACLOperationRead, kmsg.ACLOperationDescribe}}
	errs := a.Check(td, Need{kmsg.ACLOperationWrite, "to append mirrored batches"}, Need{kmsg.ACLOperationDescribe, "to find its partitions"})
	if len(errs) != 1 {
		t.Fatalf("Check returned %d refusals, want 1 (Write): %v", len(errs), errs)
	}
	want := `destination cluster "dst" does not allow User:mirror Write on Topic:orders (to append mirrored batches; it may Describe, Read; see docs/acls.md)`
	if got := errs[0].Error(); !strings.HasPrefix(got, want) {
		t.Errorf("refusal:\n%s\nwant it to start with\n%s", got, want)
	}
	if !errors.Is(errs[0], kerr.TopicAuthorizationFailed) || !IsRefusal(errs[0]) {
		t.Errorf("refusal %v is not a topic authorization failure", errs[0])
	}
	// A cluster that reports no authorized operations (before Kafka 2.3)
	// is not judged here.
	if errs := a.Check(kadm.TopicDetail{Topic: "orders"}, Need{kmsg.ACLOperationWrite, "x"}); errs != nil {
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
		if got := OpName(op); got != want {
			t.Errorf("OpName(%d) = %q, want %q", op, got, want)
		}
	}
	if got := OpList([]kmsg.ACLOperation{kmsg.ACLOperationWrite, kmsg.ACLOperationAlterConfigs, kmsg.ACLOperationRead}); got != "AlterConfigs, Read, Write" {
		t.Errorf("OpList = %q", got)
	}
}

// Guards that one error lists at most MaxRefusals refusals and says how
// many more there were.
func TestJoin(t *testing.T) {
	var errs []error
	for i := range MaxRefusals + 3 {
		errs = append(errs, fmt.Errorf("refusal %d: %w", i, kerr.TopicAuthorizationFailed))
	}
	err := Join(errs)
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != MaxRefusals+1 || lines[MaxRefusals] != "and 3 more refusals of the same kind" || lines[0] != "refusal 0: "+kerr.TopicAuthorizationFailed.Error() {
		t.Errorf("joined: %q", lines)
	}
	if !IsRefusal(err) {
		t.Error("the joined refusals are not an authorization error")
	}
	if err := Join(errs[:2]); strings.Count(err.Error(), "\n") != 1 {
		t.Errorf("two refusals joined: %q", err)
	}
}

// Guards IsRefusal: every authorization refusal Kafka answers for the
// resources mirrord touches (topics, groups, transactional IDs, the
// cluster) is one, wrapped or not; a fault a retry cures is not.
func TestIsRefusal(t *testing.T) {
	for _, err := range []error{kerr.TopicAuthorizationFailed, kerr.GroupAuthorizationFailed,
		kerr.TransactionalIDAuthorizationFailed, kerr.ClusterAuthorizationFailed} {
		if !IsRefusal(err) || !IsRefusal(fmt.Errorf("context: %w", err)) {
			t.Errorf("%v is not a refusal", err)
		}
	}
	for _, err := range []error{nil, kerr.LeaderNotAvailable, kerr.SaslAuthenticationFailed, errors.New("other")} {
		if IsRefusal(err) {
			t.Errorf("%v is a refusal", err)
		}
	}
}
