package link

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/internal/kafka/access"
)

// Guards the topic names discovery asks the source about directly: a
// pattern that names a finite set of topics gives exactly them (a topic in
// it that the principal may not describe is then an error, not a topic
// silently left out); a pattern without bound gives none.
func TestNamedTopics(t *testing.T) {
	cases := []struct {
		include []string
		exclude []string
		want    []string
	}{
		{[]string{"orders"}, nil, []string{"orders"}},
		{[]string{`orders|payments`}, nil, []string{"orders", "payments"}},
		{[]string{`orders\.(eu|us)`, "audit"}, nil, []string{"audit", "orders.eu", "orders.us"}},
		{[]string{`t[0-2]`}, nil, []string{"t0", "t1", "t2"}},
		{[]string{`logs-?x`}, nil, []string{"logs-x", "logsx"}},
		{[]string{`orders|payments`}, []string{"pay.*"}, []string{"orders"}},
		{[]string{`__consumer_offsets|orders`, "__mirror_state"}, nil, []string{"orders"}}, // never mirrored
		{[]string{`orders\..*`}, nil, nil},
		{[]string{`.*`}, nil, nil},
		{[]string{`t[0-9]{3}`}, nil, nil},  // a repetition: not enumerated
		{[]string{`(?i)orders`}, nil, nil}, // case folding: not enumerated
		{[]string{`a b|c`}, nil, nil},      // not a topic name
		{[]string{`[a-z][a-z]`}, nil, nil}, // more than maxNamed
		{[]string{`orders`, `x.*`}, nil, []string{"orders"}},
	}
	for _, tc := range cases {
		l := settingsOf(config.Default().Links[0])
		l.Include, l.Exclude = nil, nil
		for _, p := range tc.include {
			re, err := config.TopicPattern(p)
			if err != nil {
				t.Fatal(err)
			}
			l.Include = append(l.Include, re)
		}
		for _, p := range tc.exclude {
			l.Exclude = append(l.Exclude, regexp.MustCompile(`^(?:`+p+`)$`))
		}
		if got := namedTopics(&l); !slices.Equal(got, tc.want) {
			t.Errorf("include %q exclude %q: named %q, want %q", tc.include, tc.exclude, got, tc.want)
		}
	}
}

// planRules is a link from cluster "src" to cluster "dst" that mirrors
// orders and payments (named) and any topic matching logs\..* under the
// rename dc1.{topic}, with principal User:mirror on both sides.
func planRules(t *testing.T, sameCluster bool, rename string) topicRules {
	t.Helper()
	inc, err := config.TopicPattern(`orders|payments`)
	if err != nil {
		t.Fatal(err)
	}
	logs, err := config.TopicPattern(`logs\..*`)
	if err != nil {
		t.Fatal(err)
	}
	l := &Settings{Include: []*regexp.Regexp{inc, logs}, StateTopic: "__mirror_state", Rename: rename}
	return topicRules{
		link:        l,
		destName:    func(source string) string { return l.DestinationTopic(source, "src") },
		sameCluster: sameCluster, clusterID: "c1",
		src: access.Cluster{Role: "source", Name: "src", Principal: "User:mirror"},
		dst: access.Cluster{Role: "destination", Name: "dst", Principal: "User:mirror"},
	}
}

// topic is a topic's metadata as a Metadata answer with authorized
// operations gives it: parts partitions, the operations ops (none: the
// cluster does not report them), and err.
func topic(name string, parts int, err error, ops ...kmsg.ACLOperation) kadm.TopicDetail {
	td := kadm.TopicDetail{Topic: name, Partitions: kadm.PartitionDetails{}, AuthorizedOperations: ops, Err: err}
	for p := range parts {
		td.Partitions[int32(p)] = kadm.PartitionDetail{Topic: name, Partition: int32(p)}
	}
	return td
}

func details(tds ...kadm.TopicDetail) kadm.TopicDetails {
	out := kadm.TopicDetails{}
	for _, td := range tds {
		out[td.Topic] = td
	}
	return out
}

func names(tds []kadm.TopicDetail) []string {
	var out []string
	for _, td := range tds {
		out = append(out, td.Topic)
	}
	return out
}

var (
	read     = []kmsg.ACLOperation{kmsg.ACLOperationRead, kmsg.ACLOperationDescribe}
	readCfg  = []kmsg.ACLOperation{kmsg.ACLOperationRead, kmsg.ACLOperationDescribe, kmsg.ACLOperationDescribeConfigs}
	mirror   = []kmsg.ACLOperation{kmsg.ACLOperationRead, kmsg.ACLOperationWrite, kmsg.ACLOperationDescribe}
	mirrorUp = []kmsg.ACLOperation{kmsg.ACLOperationRead, kmsg.ACLOperationWrite, kmsg.ACLOperationDescribe, kmsg.ACLOperationAlter}
)

// Guards the choice of source topics, without a cluster: what the link
// selects and may read is mirrored, in name order; a missing permission is
// a refusal that names it (every one of them); a topic whose metadata has
// another error waits for the next discovery; a same-cluster rename onto
// itself is an error.
func TestPlanSources(t *testing.T) {
	for _, tc := range []struct {
		name          string
		same          bool
		rename        string
		listed, named kadm.TopicDetails
		unlisted      []string // what the listing leaves out of the named topics
		want          []string
		errs          []string // substrings of the error, in order
	}{
		{name: "selected and readable, in name order", rename: "dc1.{topic}",
			listed:   details(topic("payments", 1, nil, read...), topic("logs.a", 2, nil, read...), topic("orders", 3, nil, read...), topic("other", 1, nil, read...)),
			unlisted: nil, want: []string{"logs.a", "orders", "payments"}},
		{name: "a named topic the listing left out is asked about", rename: "dc1.{topic}",
			listed:   details(topic("logs.a", 2, nil, read...)),
			named:    details(topic("orders", 3, nil, read...), topic("payments", 0, kerr.UnknownTopicOrPartition)),
			unlisted: []string{"orders", "payments"}, want: []string{"logs.a", "orders"}},
		{name: "a named topic the principal may not describe is a refusal", rename: "dc1.{topic}",
			listed: details(topic("orders", 3, nil, read...)), named: details(topic("payments", 0, kerr.TopicAuthorizationFailed)),
			unlisted: []string{"payments"},
			errs:     []string{`source cluster "src" does not allow User:mirror Describe on Topic:payments (the link's topics name it`}},
		{name: "missing Read on two topics: both refusals", rename: "dc1.{topic}",
			listed: details(topic("orders", 3, nil, kmsg.ACLOperationDescribe), topic("payments", 1, nil, kmsg.ACLOperationDescribe)),
			errs: []string{`does not allow User:mirror Read on Topic:orders (mirrord fetches the topic's batches; it may Describe`,
				`does not allow User:mirror Read on Topic:payments`}},
		{name: "a listed topic with a refusal", rename: "dc1.{topic}",
			listed: details(topic("orders", 0, kerr.TopicAuthorizationFailed), topic("payments", 1, nil, read...)),
			errs:   []string{`does not allow User:mirror Describe on Topic:orders (Read implies Describe`}},
		{name: "a topic being created waits", rename: "dc1.{topic}",
			listed: details(topic("orders", 0, kerr.LeaderNotAvailable), topic("payments", 1, nil, read...)),
			want:   []string{"payments"}},
		{name: "a cluster that does not report operations is not judged here", rename: "dc1.{topic}",
			listed: details(topic("orders", 3, nil), topic("payments", 1, nil)), want: []string{"orders", "payments"}},
		{name: "same cluster, rename onto itself", same: true, rename: "{topic}",
			listed: details(topic("orders", 3, nil, read...)), unlisted: []string{"payments"},
			errs: []string{`source and destination are the same cluster (c1) and rename "{topic}" maps topic orders onto itself`}},
		{name: "same cluster, renamed", same: true, rename: "dc1.{topic}",
			listed: details(topic("orders", 3, nil, read...)), unlisted: []string{"payments"}, want: []string{"orders"}},
		{name: "nothing selected", rename: "dc1.{topic}", listed: details(topic("other", 1, nil, read...)), unlisted: []string{"orders", "payments"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := planRules(t, tc.same, tc.rename)
			if got := r.unlisted(tc.listed); !slices.Equal(got, tc.unlisted) && !(len(got) == 0 && len(tc.unlisted) == 0) {
				t.Errorf("unlisted = %v, want %v", got, tc.unlisted)
			}
			got, err := r.sources(tc.listed, tc.named)
			checkPlanErr(t, err, tc.errs)
			if !slices.Equal(names(got), tc.want) {
				t.Errorf("selected %v, want %v", names(got), tc.want)
			}
		})
	}
}

// Guards the plan for the destination, without a cluster: a missing mirror
// is created (and its source's settings must be readable), a smaller one
// grows by the difference (and needs Alter), every mirror must let the
// link append and read; refusals name what is missing, other errors of a
// mirror are errors.
func TestPlanDestinations(t *testing.T) {
	srcOrders, srcPayments := topic("orders", 3, nil, readCfg...), topic("payments", 2, nil, read...)
	for _, tc := range []struct {
		name     string
		selected []kadm.TopicDetail
		dst      kadm.TopicDetails
		create   []string
		grow     []string
		growBy   []int
		errs     []string
	}{
		{name: "missing mirror is created", selected: []kadm.TopicDetail{srcOrders}, dst: details(), create: []string{"orders"}},
		{name: "unknown mirror is created", selected: []kadm.TopicDetail{srcOrders}, dst: details(topic("dc1.orders", 0, kerr.UnknownTopicOrPartition)), create: []string{"orders"}},
		{name: "creating needs DescribeConfigs on the source", selected: []kadm.TopicDetail{srcPayments}, dst: details(),
			errs: []string{`source cluster "src" does not allow User:mirror DescribeConfigs on Topic:payments (mirrord reads cleanup.policy`}},
		{name: "a mirror with as many partitions is used as it is", selected: []kadm.TopicDetail{srcOrders}, dst: details(topic("dc1.orders", 3, nil, mirror...))},
		{name: "a mirror with more partitions is used as it is", selected: []kadm.TopicDetail{srcOrders}, dst: details(topic("dc1.orders", 5, nil, mirror...))},
		{name: "a smaller mirror grows", selected: []kadm.TopicDetail{srcOrders, srcPayments},
			dst:  details(topic("dc1.orders", 1, nil, mirrorUp...), topic("dc1.payments", 2, nil, mirror...)),
			grow: []string{"orders"}, growBy: []int{2}},
		{name: "growing needs Alter", selected: []kadm.TopicDetail{srcOrders}, dst: details(topic("dc1.orders", 1, nil, mirror...)),
			errs: []string{`destination cluster "dst" does not allow User:mirror Alter on Topic:dc1.orders (mirrord adds partitions`}},
		{name: "Write and Read are needed", selected: []kadm.TopicDetail{srcOrders}, dst: details(topic("dc1.orders", 3, nil, kmsg.ACLOperationDescribe)),
			errs: []string{`does not allow User:mirror Write on Topic:dc1.orders (mirrord appends the mirrored batches`,
				`does not allow User:mirror Read on Topic:dc1.orders (mirrord reads the destination partitions to reconcile`}},
		{name: "a mirror the principal may not describe", selected: []kadm.TopicDetail{srcOrders, srcPayments},
			dst:  details(topic("dc1.orders", 0, kerr.TopicAuthorizationFailed), topic("dc1.payments", 0, kerr.TopicAuthorizationFailed)),
			errs: []string{`does not allow User:mirror Describe on Topic:dc1.orders`, `does not allow User:mirror Describe on Topic:dc1.payments`}},
		{name: "another error of a mirror", selected: []kadm.TopicDetail{srcOrders}, dst: details(topic("dc1.orders", 0, kerr.LeaderNotAvailable)),
			errs: []string{"destination topic dc1.orders: LEADER_NOT_AVAILABLE"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := planRules(t, false, "dc1.{topic}").destinations(tc.selected, tc.dst)
			checkPlanErr(t, err, tc.errs)
			if !slices.Equal(names(plan.create), tc.create) || !slices.Equal(names(plan.grow), tc.grow) || !slices.Equal(plan.growBy, tc.growBy) {
				t.Errorf("plan: create %v, grow %v by %v; want create %v, grow %v by %v", names(plan.create), names(plan.grow), plan.growBy, tc.create, tc.grow, tc.growBy)
			}
		})
	}
}

// Guards the check of topics the link just created: each must let the link
// append and read, or the refusal says which permission is missing.
func TestPlanCreated(t *testing.T) {
	r := planRules(t, false, "dc1.{topic}")
	if err := r.created([]string{"dc1.orders"}, details(topic("dc1.orders", 3, nil, mirror...))); err != nil {
		t.Errorf("a created topic the link may use: %v", err)
	}
	checkPlanErr(t, r.created([]string{"dc1.orders", "dc1.payments"}, details(topic("dc1.orders", 3, nil, kmsg.ACLOperationWrite, kmsg.ACLOperationDescribe),
		topic("dc1.payments", 0, kerr.TopicAuthorizationFailed))), []string{
		`does not allow User:mirror Read on Topic:dc1.orders`,
		`does not allow User:mirror Describe on Topic:dc1.payments (mirrord created the topic and needs Write and Read on it`})
	checkPlanErr(t, r.created([]string{"dc1.orders"}, details(topic("dc1.orders", 0, kerr.UnknownTopicOrPartition))),
		[]string{"destination topic dc1.orders after its creation: UNKNOWN_TOPIC_OR_PARTITION"})
}

// checkPlanErr fails unless err holds each of want in order (none: err is
// nil); a refusal must be one (access.IsRefusal), so that the link counts it
// as kind=authorization and does not retry it.
func checkPlanErr(t *testing.T, err error, want []string) {
	t.Helper()
	if len(want) == 0 {
		if err != nil {
			t.Fatalf("error %v, want none", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("no error, want one with %q", want)
	}
	msg := err.Error()
	at := 0
	for _, w := range want {
		i := strings.Index(msg[at:], w)
		if i < 0 {
			t.Fatalf("error\n%s\ndoes not hold, after what came before, %q", msg, w)
		}
		at += i + len(w)
	}
	if strings.Contains(want[0], "does not allow") && !access.IsRefusal(err) {
		t.Errorf("error %v is not a refusal", err)
	}
}
