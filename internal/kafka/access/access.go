// Package access is how mirrord explains a permission a cluster refuses:
// every error for a missing ACL names the cluster, the principal, the
// operation as kafka-acls.sh spells it, the resource, and why mirrord needs
// it (docs/acls.md has the whole list), and wraps the refusal Kafka
// answered, so that callers can tell it apart from faults a retry cures.
//
// Kafka answers a Metadata request with the operations the principal may
// perform on each topic it may describe (KIP-430); Check reads them, so a
// permission needed only now and then is reported before anything runs.
//
// The package holds no state and starts no goroutines.
package access

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// IsRefusal reports whether err is a Kafka authorization refusal (of a
// topic, group, transactional ID or cluster operation), which no retry
// cures.
func IsRefusal(err error) bool {
	return errors.Is(err, kerr.TopicAuthorizationFailed) ||
		errors.Is(err, kerr.GroupAuthorizationFailed) ||
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed) ||
		errors.Is(err, kerr.ClusterAuthorizationFailed)
}

// Cluster is one of a link's clusters as its ACL errors name it.
type Cluster struct {
	Role      string // "source" or "destination"
	Name      string // the cluster block's label
	Principal string // the principal the link's credentials authenticate as
}

// Refused is the error for op that the cluster does not allow the link's
// principal on resource, named as kafka-acls.sh names it ("Topic:orders",
// "Group:app"). It says what the operation is for (why) and wraps cause
// (the refusal, as the cluster answers or would answer).
func (c Cluster) Refused(op kmsg.ACLOperation, resource, why string, cause error) error {
	return fmt.Errorf("%s cluster %q does not allow %s %s on %s (%s; see docs/acls.md): %w",
		c.Role, c.Name, c.Principal, OpName(op), resource, why, cause)
}

// RefusedTopic is Refused for a topic.
func (c Cluster) RefusedTopic(op kmsg.ACLOperation, topic, why string, cause error) error {
	return c.Refused(op, "Topic:"+topic, why, cause)
}

// RefusedGroup returns err explained as a refusal of op on consumer group
// group when the cluster answered GROUP_AUTHORIZATION_FAILED, and err as it
// is otherwise (a topic refusal in the same answer concerns the topic, not
// the group).
func (c Cluster) RefusedGroup(op kmsg.ACLOperation, group, why string, err error) error {
	if errors.Is(err, kerr.GroupAuthorizationFailed) {
		return c.Refused(op, "Group:"+group, why, err)
	}
	return err
}

// Need is an operation the link needs on a topic, and why.
type Need struct {
	Op  kmsg.ACLOperation
	Why string
}

// Check returns the refusals of needs on td, whose AuthorizedOperations
// the cluster reported; a cluster that did not report them (before Kafka
// 2.3) is not checked here, and its refusals come from the requests
// themselves.
func (c Cluster) Check(td kadm.TopicDetail, needs ...Need) []error {
	if len(td.AuthorizedOperations) == 0 {
		return nil
	}
	var errs []error
	for _, n := range needs {
		if !slices.Contains(td.AuthorizedOperations, n.Op) {
			errs = append(errs, c.RefusedTopic(n.Op, td.Topic, fmt.Sprintf("%s; it may %s", n.Why, OpList(td.AuthorizedOperations)), kerr.TopicAuthorizationFailed))
		}
	}
	return errs
}

// OpName spells an operation as kafka-acls.sh --operation does.
func OpName(op kmsg.ACLOperation) string {
	switch op {
	case kmsg.ACLOperationRead:
		return "Read"
	case kmsg.ACLOperationWrite:
		return "Write"
	case kmsg.ACLOperationCreate:
		return "Create"
	case kmsg.ACLOperationDelete:
		return "Delete"
	case kmsg.ACLOperationAlter:
		return "Alter"
	case kmsg.ACLOperationDescribe:
		return "Describe"
	case kmsg.ACLOperationClusterAction:
		return "ClusterAction"
	case kmsg.ACLOperationDescribeConfigs:
		return "DescribeConfigs"
	case kmsg.ACLOperationAlterConfigs:
		return "AlterConfigs"
	case kmsg.ACLOperationIdempotentWrite:
		return "IdempotentWrite"
	}
	return op.String()
}

// OpList spells operations, sorted, comma-separated.
func OpList(ops []kmsg.ACLOperation) string {
	names := make([]string, len(ops))
	for i, op := range ops {
		names[i] = OpName(op)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// MaxRefusals is how many refusals one error lists.
const MaxRefusals = 10

// Join joins refusals into one error, at most MaxRefusals of them.
func Join(errs []error) error {
	if len(errs) > MaxRefusals {
		errs = append(errs[:MaxRefusals:MaxRefusals], fmt.Errorf("and %d more refusals of the same kind", len(errs)-MaxRefusals))
	}
	return errors.Join(errs...)
}
