// Package aclsync decides which ACLs a link creates at its destination and
// which of those it deletes (issue 25, item 3): pure functions over ACL
// bindings, with no I/O, and it runs no goroutines. Package link reads both
// clusters' bindings, runs Plan and Compare, and carries out and records
// what they return.
//
// The rules:
//
//   - The source's bindings on a mirrored topic, and on a consumer group or
//     share group the link syncs, follow to the destination resource of
//     the same role (the topic's mirror, with the link's rename; groups
//     keep their names), for the same principal, host, operation and
//     permission.
//   - A binding's pattern is resolved at the source: a LITERAL name, the
//     wildcard "*", or a PREFIXED name that covers the resource becomes a
//     LITERAL binding on the mirror, one per resource it covers. A
//     wildcard or prefix is never copied as it is: it would grant on
//     destination resources the link does not mirror.
//   - ALLOW WRITE on a topic (and the WRITE in ALLOW ALL on a topic) is
//     held back unless write is granted (the acl_sync write key, or a
//     failover that grants it): ALLOW ALL then follows as every other
//     topic operation. Until a failover, the mirror is written by the
//     link alone. DENY bindings always follow: they only take away.
//   - A DENY binding that would apply to the link's own principal at the
//     destination (its principal, or the wildcard principal User:*) is
//     not synced: it would refuse the link its own writes to the mirror.
//     Plan returns it as skipped, for the status.
//   - Only bindings the link created are ever deleted (Compare): a binding
//     that the destination held already, made by an operator, is left
//     alone and is not recorded as the link's.
//   - The resources in scope are those the link mirrors or syncs now, and
//     those it created bindings for that its settings still select
//     (Scope): a topic or group missing from one round's list (a
//     session starting, a group that expired) does not lose its
//     bindings; a topic the link's settings no longer select does.
package aclsync

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Binding is one ACL binding: a resource pattern and an access control
// entry, as DescribeACLs returns and CreateACLs takes them.
type Binding struct {
	Resource   kmsg.ACLResourceType
	Name       string
	Pattern    kmsg.ACLResourcePatternType
	Principal  string
	Host       string
	Operation  kmsg.ACLOperation
	Permission kmsg.ACLPermissionType
}

// String is the binding as an operator reads it.
func (b Binding) String() string {
	return fmt.Sprintf("%s %s on %s %s %q for %s from host %s", perm(b.Permission), op(b.Operation), lower(b.Pattern.String()), lower(b.Resource.String()), b.Name, b.Principal, b.Host)
}

func perm(p kmsg.ACLPermissionType) string { return strings.ToUpper(p.String()) }
func op(o kmsg.ACLOperation) string        { return strings.ToUpper(o.String()) }
func lower(s string) string                { return strings.ToLower(s) }

// Resource is a source resource the link mirrors or syncs, and the name of
// its counterpart at the destination.
type Resource struct {
	Type        kmsg.ACLResourceType // TOPIC or GROUP
	Source      string
	Destination string
}

// Kind says when a wanted binding is created.
type Kind int8

// The kinds of Want.
const (
	// Always: the binding follows whether or not write is granted.
	Always Kind = iota
	// WriteGranted: the binding grants WRITE on a topic (ALLOW WRITE, or
	// ALLOW ALL as it is); it follows only once write is granted.
	WriteGranted
	// WriteHeldBack: one operation of a topic's ALLOW ALL with its WRITE
	// taken out; it follows only while write is not granted (once it is,
	// ALLOW ALL follows whole).
	WriteHeldBack
)

// Want is a destination binding the source's bindings call for.
type Want struct {
	Binding
	Kind Kind
	// Source is the source resource's name; From the source binding it
	// follows, for the log.
	Source string
	From   Binding
}

// topicOpsButWrite are the operations ALLOW ALL grants on a topic, WRITE
// left out (Kafka's AclOperation: READ, WRITE, CREATE, DELETE, ALTER,
// DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS apply to topics).
var topicOpsButWrite = []kmsg.ACLOperation{
	kmsg.ACLOperationRead,
	kmsg.ACLOperationCreate,
	kmsg.ACLOperationDelete,
	kmsg.ACLOperationAlter,
	kmsg.ACLOperationDescribe,
	kmsg.ACLOperationDescribeConfigs,
	kmsg.ACLOperationAlterConfigs,
}

// Covers reports whether source binding b applies to resource r: same
// resource type, and a LITERAL name equal to r's or the wildcard "*", or a
// PREFIXED name r's starts with.
func Covers(b Binding, r Resource) bool {
	if b.Resource != r.Type {
		return false
	}
	switch b.Pattern {
	case kmsg.ACLResourcePatternTypeLiteral:
		return b.Name == r.Source || b.Name == "*"
	case kmsg.ACLResourcePatternTypePrefixed:
		return strings.HasPrefix(r.Source, b.Name)
	}
	return false
}

// Plan returns the destination bindings that the source's bindings call
// for on the given resources, in a stable order, each once (the same
// binding called for by two source bindings keeps the first kind that
// follows always), and the DENY bindings it skipped because they would
// apply to principal, the link's own at the destination.
func Plan(src []Binding, resources []Resource, principal string) (wants []Want, skipped []Want) {
	seen := map[Binding]int{}
	skip := map[Binding]bool{}
	var out []Want
	add := func(w Want) {
		if w.Permission == kmsg.ACLPermissionTypeDeny && (w.Principal == principal || w.Principal == "User:*") {
			if !skip[w.Binding] {
				skip[w.Binding] = true
				skipped = append(skipped, w)
			}
			return
		}
		if i, ok := seen[w.Binding]; ok {
			if w.Kind == Always {
				out[i].Kind, out[i].Source, out[i].From = Always, w.Source, w.From
			}
			return
		}
		seen[w.Binding] = len(out)
		out = append(out, w)
	}
	for _, r := range resources {
		for _, b := range src {
			if !Covers(b, r) {
				continue
			}
			d := b
			d.Name, d.Pattern = r.Destination, kmsg.ACLResourcePatternTypeLiteral
			allowTopic := r.Type == kmsg.ACLResourceTypeTopic && b.Permission == kmsg.ACLPermissionTypeAllow
			switch {
			case allowTopic && b.Operation == kmsg.ACLOperationWrite:
				add(Want{Binding: d, Kind: WriteGranted, Source: r.Source, From: b})
			case allowTopic && b.Operation == kmsg.ACLOperationAll:
				add(Want{Binding: d, Kind: WriteGranted, Source: r.Source, From: b})
				for _, o := range topicOpsButWrite {
					e := d
					e.Operation = o
					add(Want{Binding: e, Kind: WriteHeldBack, Source: r.Source, From: b})
				}
			default:
				add(Want{Binding: d, Kind: Always, Source: r.Source, From: b})
			}
		}
	}
	slices.SortStableFunc(out, func(a, b Want) int { return Order(a.Binding, b.Binding) })
	slices.SortStableFunc(skipped, func(a, b Want) int { return Order(a.Binding, b.Binding) })
	return out, skipped
}

// Scope is the resources a round plans for: those the link mirrors or
// syncs now (current), and the resources of the bindings it recorded
// (each with the source resource it follows from) that selects still
// selects. Each resource once, current ones first.
func Scope(current []Resource, recorded map[Binding]string, selects func(t kmsg.ACLResourceType, source string) bool) []Resource {
	type key struct {
		t        kmsg.ACLResourceType
		src, dst string
	}
	seen := map[key]bool{}
	out := make([]Resource, 0, len(current))
	for _, r := range current {
		if k := (key{r.Type, r.Source, r.Destination}); !seen[k] {
			seen[k] = true
			out = append(out, r)
		}
	}
	var more []Resource
	for b, src := range recorded {
		k := key{b.Resource, src, b.Name}
		if seen[k] || !selects(b.Resource, src) {
			continue
		}
		seen[k] = true
		more = append(more, Resource{Type: b.Resource, Source: src, Destination: b.Name})
	}
	slices.SortFunc(more, func(a, b Resource) int {
		return cmp.Or(cmp.Compare(a.Type, b.Type), cmp.Compare(a.Source, b.Source), cmp.Compare(a.Destination, b.Destination))
	})
	return append(out, more...)
}

// Order orders bindings: resource type, name, principal, host,
// operation, permission.
func Order(a, b Binding) int {
	return cmp.Or(
		cmp.Compare(a.Resource, b.Resource),
		cmp.Compare(a.Name, b.Name),
		cmp.Compare(a.Pattern, b.Pattern),
		cmp.Compare(a.Principal, b.Principal),
		cmp.Compare(a.Host, b.Host),
		cmp.Compare(a.Operation, b.Operation),
		cmp.Compare(a.Permission, b.Permission),
	)
}

// Desired is the part of wants that follows with write granted or not.
func Desired(wants []Want, write bool) []Want {
	var out []Want
	for _, w := range wants {
		switch {
		case w.Kind == WriteGranted && !write, w.Kind == WriteHeldBack && write:
			continue
		}
		out = append(out, w)
	}
	return out
}

// Changes are what a round does at the destination.
type Changes struct {
	// Create are desired bindings the destination lacks: each is
	// recorded as the link's, then created.
	Create []Want
	// Delete are bindings the link created that are no longer desired:
	// each is deleted at the destination (if it is still there), then
	// its record removed.
	Delete []Binding
	// LeftAlone are desired bindings the destination held already that
	// the link did not create: someone else's, never recorded or deleted
	// by the link.
	LeftAlone []Binding
	// InPlace are desired bindings the link created and the destination
	// holds.
	InPlace int
}

// Compare decides a round from what is desired, the bindings the
// destination holds, and those the link recorded as created.
func Compare(desired []Want, held, recorded map[Binding]bool) Changes {
	var c Changes
	want := map[Binding]bool{}
	for _, w := range desired {
		want[w.Binding] = true
		switch {
		case !held[w.Binding]:
			c.Create = append(c.Create, w)
		case recorded[w.Binding]:
			c.InPlace++
		default:
			c.LeftAlone = append(c.LeftAlone, w.Binding)
		}
	}
	for b := range recorded {
		if !want[b] {
			c.Delete = append(c.Delete, b)
		}
	}
	slices.SortFunc(c.Delete, Order)
	return c
}
