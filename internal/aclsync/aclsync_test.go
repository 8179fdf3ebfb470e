package aclsync

import (
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	topic   = kmsg.ACLResourceTypeTopic
	group   = kmsg.ACLResourceTypeGroup
	literal = kmsg.ACLResourcePatternTypeLiteral
	prefix  = kmsg.ACLResourcePatternTypePrefixed
	allow   = kmsg.ACLPermissionTypeAllow
	deny    = kmsg.ACLPermissionTypeDeny
)

func bind(rt kmsg.ACLResourceType, name string, pt kmsg.ACLResourcePatternType, who string, o kmsg.ACLOperation, p kmsg.ACLPermissionType) Binding {
	return Binding{Resource: rt, Name: name, Pattern: pt, Principal: who, Host: "*", Operation: o, Permission: p}
}

func TestPlan(t *testing.T) {
	src := []Binding{
		bind(topic, "orders", literal, "User:reader", kmsg.ACLOperationRead, allow),
		bind(topic, "orders", literal, "User:writer", kmsg.ACLOperationWrite, allow),
		bind(topic, "*", literal, "User:all", kmsg.ACLOperationDescribe, allow),
		bind(topic, "ord", prefix, "User:admin", kmsg.ACLOperationAll, allow),
		bind(topic, "orders", literal, "User:banned", kmsg.ACLOperationWrite, deny),
		bind(topic, "payments", literal, "User:reader", kmsg.ACLOperationRead, allow), // not mirrored
		bind(topic, "pay", prefix, "User:reader", kmsg.ACLOperationRead, allow),       // covers nothing mirrored
		bind(group, "app", literal, "User:reader", kmsg.ACLOperationRead, allow),
		bind(group, "ap", prefix, "User:ops", kmsg.ACLOperationDescribe, allow),
		bind(group, "other", literal, "User:reader", kmsg.ACLOperationRead, allow), // not synced
		bind(kmsg.ACLResourceTypeCluster, "kafka-cluster", literal, "User:writer", kmsg.ACLOperationIdempotentWrite, allow),
	}
	res := []Resource{
		{Type: topic, Source: "orders", Destination: "east.orders"},
		{Type: group, Source: "app", Destination: "app"},
	}
	wants, skipped := Plan(src, res, "User:mirror")
	if len(skipped) != 0 {
		t.Errorf("skipped %v", skipped)
	}
	got := map[Binding]Kind{}
	for _, w := range wants {
		if w.Pattern != literal {
			t.Errorf("%s: not literal", w.Binding)
		}
		got[w.Binding] = w.Kind
	}
	want := map[Binding]Kind{
		bind(topic, "east.orders", literal, "User:reader", kmsg.ACLOperationRead, allow):  Always,
		bind(topic, "east.orders", literal, "User:writer", kmsg.ACLOperationWrite, allow): WriteGranted,
		bind(topic, "east.orders", literal, "User:all", kmsg.ACLOperationDescribe, allow): Always,
		bind(topic, "east.orders", literal, "User:admin", kmsg.ACLOperationAll, allow):    WriteGranted,
		bind(topic, "east.orders", literal, "User:banned", kmsg.ACLOperationWrite, deny):  Always,
		bind(group, "app", literal, "User:reader", kmsg.ACLOperationRead, allow):          Always,
		bind(group, "app", literal, "User:ops", kmsg.ACLOperationDescribe, allow):         Always,
	}
	for _, o := range topicOpsButWrite {
		want[bind(topic, "east.orders", literal, "User:admin", o, allow)] = WriteHeldBack
	}
	if len(got) != len(want) || len(wants) != len(want) {
		t.Errorf("got %d wants (%d distinct), want %d", len(wants), len(got), len(want))
	}
	for b, k := range want {
		if g, ok := got[b]; !ok || g != k {
			t.Errorf("%s: got kind %d (present %v), want %d", b, g, ok, k)
		}
	}
	if !slices.IsSortedFunc(wants, func(a, b Want) int { return Order(a.Binding, b.Binding) }) {
		t.Error("wants are not in order")
	}

	// Without write: no WRITE or ALL allowed on the topic, every other
	// operation of ALL is; with write, ALL as it is and no expansion.
	for _, w := range Desired(wants, false) {
		if w.Permission == allow && (w.Operation == kmsg.ACLOperationWrite || w.Operation == kmsg.ACLOperationAll) {
			t.Errorf("without write: %s follows", w.Binding)
		}
	}
	if n, m := len(Desired(wants, false)), len(want)-2; n != m {
		t.Errorf("without write: %d follow, want %d", n, m)
	}
	var withAll bool
	for _, w := range Desired(wants, true) {
		if w.Kind == WriteHeldBack {
			t.Errorf("with write: %s follows", w.Binding)
		}
		withAll = withAll || w.Operation == kmsg.ACLOperationAll
	}
	if !withAll {
		t.Error("with write: ALLOW ALL does not follow")
	}
	if n, m := len(Desired(wants, true)), len(want)-len(topicOpsButWrite); n != m {
		t.Errorf("with write: %d follow, want %d", n, m)
	}
}

// A binding called for both held back and always (ALLOW ALL's READ, and
// an ALLOW READ of its own) follows always.
func TestPlanAlwaysWins(t *testing.T) {
	src := []Binding{
		bind(topic, "t", literal, "User:u", kmsg.ACLOperationAll, allow),
		bind(topic, "t", literal, "User:u", kmsg.ACLOperationRead, allow),
	}
	wants, _ := Plan(src, []Resource{{Type: topic, Source: "t", Destination: "t"}}, "User:mirror")
	for _, w := range wants {
		if w.Operation == kmsg.ACLOperationRead && w.Kind != Always {
			t.Errorf("READ: kind %d, want Always", w.Kind)
		}
	}
}

func TestCompare(t *testing.T) {
	a := bind(topic, "t", literal, "User:a", kmsg.ACLOperationRead, allow)
	b := bind(topic, "t", literal, "User:b", kmsg.ACLOperationRead, allow)
	c := bind(topic, "t", literal, "User:c", kmsg.ACLOperationRead, allow)
	d := bind(topic, "t", literal, "User:d", kmsg.ACLOperationRead, allow)
	e := bind(topic, "t", literal, "User:e", kmsg.ACLOperationRead, allow)
	desired := []Want{{Binding: a}, {Binding: b}, {Binding: c}, {Binding: e}}
	held := map[Binding]bool{b: true, c: true, d: true}
	recorded := map[Binding]bool{c: true, d: true, e: true}
	ch := Compare(desired, held, recorded)
	// a: missing, create. b: held, not the link's: left alone. c: the
	// link's, in place. d: the link's, no longer wanted: delete. e: the
	// link's, deleted by someone: create again.
	var created []Binding
	for _, w := range ch.Create {
		created = append(created, w.Binding)
	}
	if !slices.Equal(created, []Binding{a, e}) {
		t.Errorf("create %v", created)
	}
	if !slices.Equal(ch.LeftAlone, []Binding{b}) {
		t.Errorf("left alone %v", ch.LeftAlone)
	}
	if !slices.Equal(ch.Delete, []Binding{d}) {
		t.Errorf("delete %v", ch.Delete)
	}
	if ch.InPlace != 1 {
		t.Errorf("in place %d", ch.InPlace)
	}
	// An operator's binding that is not desired is never deleted.
	if ch := Compare(nil, map[Binding]bool{b: true}, nil); len(ch.Delete) != 0 {
		t.Errorf("deletes an operator's binding: %v", ch.Delete)
	}
}

// A DENY that would apply to the link's own principal at the destination
// (its name, or User:*) is skipped: it would refuse the link its writes.
// An ALLOW for it, and a DENY for anyone else, follow.
func TestPlanSkipsDenyOfTheLink(t *testing.T) {
	src := []Binding{
		bind(topic, "t", literal, "User:mirror", kmsg.ACLOperationWrite, deny),
		bind(topic, "t", literal, "User:*", kmsg.ACLOperationAll, deny),
		bind(topic, "t", literal, "User:mirror", kmsg.ACLOperationRead, allow),
		bind(topic, "t", literal, "User:other", kmsg.ACLOperationWrite, deny),
	}
	wants, skipped := Plan(src, []Resource{{Type: topic, Source: "t", Destination: "t"}}, "User:mirror")
	if len(skipped) != 2 || skipped[0].Principal != "User:*" || skipped[1].Principal != "User:mirror" {
		t.Errorf("skipped %v, want the two DENYs of User:* and User:mirror", skipped)
	}
	if len(wants) != 2 {
		t.Errorf("wants %v, want User:mirror's READ and User:other's DENY", wants)
	}
}

// Scope keeps the resources of recorded bindings the link still selects
// (a topic missing from one round's list keeps its bindings) and drops
// those it no longer selects.
func TestScope(t *testing.T) {
	cur := []Resource{{Type: topic, Source: "a", Destination: "x.a"}}
	rec := map[Binding]string{
		bind(topic, "x.a", literal, "User:u", kmsg.ACLOperationRead, allow): "a",
		bind(topic, "x.b", literal, "User:u", kmsg.ACLOperationRead, allow): "b", // selected, missing this round
		bind(topic, "x.c", literal, "User:u", kmsg.ACLOperationRead, allow): "c", // no longer selected
		bind(group, "g", literal, "User:u", kmsg.ACLOperationRead, allow):   "g",
	}
	selects := func(rt kmsg.ACLResourceType, s string) bool { return s != "c" }
	got := Scope(cur, rec, selects)
	want := []Resource{{Type: topic, Source: "a", Destination: "x.a"}, {Type: topic, Source: "b", Destination: "x.b"}, {Type: group, Source: "g", Destination: "g"}}
	if !slices.Equal(got, want) {
		t.Errorf("scope %v, want %v", got, want)
	}
}
