package link

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/internal/kafka/access"
)

// Topic discovery as a plan (DESIGN §8): which source topics the link
// mirrors, which destination topics it creates or grows, and which
// permissions are missing, decided by pure functions from what the two
// clusters' Metadata answers say (session.discover reads them and carries
// out the plan). Every explanation of a topic permission the link needs is
// here.

// What the link needs on its topics (docs/acls.md has the whole list, with
// the state topic and the transactional ID that package statestore
// checks). Kafka answers a Metadata request with the operations the
// principal may perform on each topic it may describe (KIP-430), so
// discover checks them before anything runs: a permission the link needs
// only now and then (Read on a destination topic, for reconciliation and
// settling; Alter, for growing it) would otherwise fail the link days
// later, or only log a warning.
var (
	needSourceRead = access.Need{Op: kmsg.ACLOperationRead, Why: "mirrord fetches the topic's batches"}
	// needSourceDescribeConfigs is checked only for a destination topic
	// the link creates.
	needSourceDescribeConfigs = access.Need{Op: kmsg.ACLOperationDescribeConfigs,
		Why: "mirrord reads cleanup.policy, retention.ms, retention.bytes and max.message.bytes to create the destination topic with them; or create the destination topic beforehand"}
	needDestWrite = access.Need{Op: kmsg.ACLOperationWrite, Why: "mirrord appends the mirrored batches"}
	needDestRead  = access.Need{Op: kmsg.ACLOperationRead, Why: "mirrord reads the destination partitions to reconcile after a restart and to settle appends of unknown outcome"}
	// needDestAlter is checked only for a destination topic that has
	// fewer partitions than its source.
	needDestAlter = access.Need{Op: kmsg.ACLOperationAlter, Why: "mirrord adds partitions to a destination topic when its source topic has more"}
)

// topicRules is what discovery decides by: which topics the link mirrors
// and under which names, and how its clusters are named in refusals.
type topicRules struct {
	link        *Settings
	destName    func(source string) string
	sameCluster bool   // source and destination are one cluster
	clusterID   string // the source's, for the same-cluster error
	src, dst    access.Cluster
}

func (s *session) topicRules() topicRules {
	return topicRules{link: &s.l.cfg.Link, destName: s.destName, sameCluster: s.sameCluster, clusterID: s.srcID, src: s.l.acl.src, dst: s.l.acl.dst}
}

// unlisted returns the topics the link's include patterns name (namedTopics)
// that a listing of the source left out: discover asks the source about
// them directly, so that a named topic the principal may not describe is a
// refusal rather than a topic silently not mirrored.
func (r topicRules) unlisted(listed kadm.TopicDetails) []string {
	var ask []string
	for _, n := range namedTopics(r.link) {
		if _, ok := listed[n]; !ok {
			ask = append(ask, n)
		}
	}
	return ask
}

// sources selects the source topics to mirror from a listing of the source
// and the answer about the topics unlisted named: those the link selects
// and may read, in name order. A missing permission is a refusal (all of
// them, joined); a topic being created or deleted (another error) is left
// for the next discovery; a same-cluster link whose rename maps a topic
// onto itself is an error.
func (r topicRules) sources(listed, named kadm.TopicDetails) ([]kadm.TopicDetail, error) {
	all := maps.Clone(listed)
	if all == nil {
		all = kadm.TopicDetails{}
	}
	var refusals []error
	for _, name := range named.Names() {
		td := named[name]
		switch {
		case errors.Is(td.Err, kerr.TopicAuthorizationFailed):
			refusals = append(refusals, r.src.RefusedTopic(kmsg.ACLOperationDescribe, name,
				"the link's topics name it, and Kafka lists only the topics the principal may describe; Read implies Describe", td.Err))
		case errors.Is(td.Err, kerr.UnknownTopicOrPartition):
			// Not there (yet): mirrored once it is.
		default:
			all[name] = td
		}
	}
	var selected []kadm.TopicDetail
	for _, name := range all.Names() {
		td := all[name]
		if !r.link.Selects(name) {
			continue
		}
		if access.IsRefusal(td.Err) {
			refusals = append(refusals, r.src.RefusedTopic(kmsg.ACLOperationDescribe, name, "Read implies Describe", td.Err))
			continue
		}
		if td.Err != nil {
			continue // being created or deleted: the next discovery sees it
		}
		if r.sameCluster && r.destName(name) == name {
			return nil, fmt.Errorf("source and destination are the same cluster (%s) and rename %q maps topic %s onto itself: set rename to a template that changes names, such as \"{source}.{topic}\"",
				r.clusterID, r.link.Rename, name)
		}
		refusals = append(refusals, r.src.Check(td, needSourceRead)...)
		selected = append(selected, td)
	}
	if len(refusals) > 0 {
		return nil, access.Join(refusals)
	}
	return selected, nil
}

// topicPlan is what discovery does at the destination: the source topics
// whose mirror it creates, and those whose mirror has fewer partitions and
// grows (by growBy, in the same order).
type topicPlan struct {
	create, grow []kadm.TopicDetail // source topics
	growBy       []int
}

// destinations plans the destination topics of the selected source topics
// from the destination's answer about their mirrors: a missing mirror is
// created (which needs DescribeConfigs on the source topic, for its
// settings), a mirror with fewer partitions grows (which needs Alter), and
// every mirror must let the link append and read. A missing permission is
// a refusal (all of them, joined); any other error of a mirror is an error.
func (r topicRules) destinations(selected []kadm.TopicDetail, dst kadm.TopicDetails) (topicPlan, error) {
	var (
		plan     topicPlan
		refusals []error
	)
	for _, td := range selected {
		name := r.destName(td.Topic)
		d, ok := dst[name]
		switch {
		case !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition):
			refusals = append(refusals, r.src.Check(td, needSourceDescribeConfigs)...)
			plan.create = append(plan.create, td)
		case access.IsRefusal(d.Err):
			refusals = append(refusals, r.dst.RefusedTopic(kmsg.ACLOperationDescribe, name,
				"mirrord needs Write and Read on it, which imply Describe, and Create unless the topic exists", d.Err))
		case d.Err != nil:
			return topicPlan{}, fmt.Errorf("destination topic %s: %w", name, d.Err)
		default:
			refusals = append(refusals, r.dst.Check(d, needDestWrite, needDestRead)...)
			if len(d.Partitions) < len(td.Partitions) {
				refusals = append(refusals, r.dst.Check(d, needDestAlter)...)
				plan.grow = append(plan.grow, td)
				plan.growBy = append(plan.growBy, len(td.Partitions)-len(d.Partitions))
			}
		}
	}
	if len(refusals) > 0 {
		return topicPlan{}, access.Join(refusals)
	}
	return plan, nil
}

// created checks the destination's answer about the topics the link just
// created: each must let the link append and read.
func (r topicRules) created(names []string, got kadm.TopicDetails) error {
	var errs []error
	for _, name := range names {
		d := got[name]
		switch {
		case access.IsRefusal(d.Err):
			errs = append(errs, r.dst.RefusedTopic(kmsg.ACLOperationDescribe, name,
				"mirrord created the topic and needs Write and Read on it, which imply Describe", d.Err))
		case d.Err != nil:
			return fmt.Errorf("destination topic %s after its creation: %w", name, d.Err)
		default:
			errs = append(errs, r.dst.Check(d, needDestWrite, needDestRead)...)
		}
	}
	return access.Join(errs)
}

// maxNamed bounds the topic names read out of one include pattern.
const maxNamed = 256

// namedTopics returns the topic names that the link's include patterns
// spell out: a pattern such as orders|payments or orders\.(eu|us) names a
// finite set of topics, which discover asks the source about directly, so
// that a named topic the principal may not describe is an error rather
// than a topic silently not mirrored. A pattern that matches without
// bound (orders\..*) names none: Kafka lists only the topics the principal
// may describe, and there is no way to ask about the others.
func namedTopics(l *Settings) []string {
	var out []string
	for _, re := range l.Include {
		names, ok := finiteNames(re)
		if !ok {
			continue
		}
		for _, n := range names {
			if l.Selects(n) {
				out = append(out, n)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// finiteNames returns every string re matches, if they are at most
// maxNamed and each a legal topic name.
func finiteNames(re *regexp.Regexp) ([]string, bool) {
	parsed, err := syntax.Parse(re.String(), syntax.Perl)
	if err != nil {
		return nil, false
	}
	names, ok := expand(parsed.Simplify())
	if !ok {
		return nil, false
	}
	for _, n := range names {
		if n == "" || len(n) > 249 || strings.ContainsFunc(n, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
		}) {
			return nil, false
		}
	}
	return names, true
}

// expand enumerates the strings re matches, or reports false when they are
// unbounded or more than maxNamed.
func expand(re *syntax.Regexp) ([]string, bool) {
	switch re.Op {
	case syntax.OpEmptyMatch, syntax.OpBeginText, syntax.OpEndText, syntax.OpBeginLine, syntax.OpEndLine:
		return []string{""}, true
	case syntax.OpLiteral:
		if re.Flags&syntax.FoldCase != 0 {
			return nil, false
		}
		return []string{string(re.Rune)}, true
	case syntax.OpCharClass:
		var out []string
		for i := 0; i+1 < len(re.Rune); i += 2 {
			for r := re.Rune[i]; r <= re.Rune[i+1]; r++ {
				if len(out) == maxNamed || !utf8.ValidRune(r) {
					return nil, false
				}
				out = append(out, string(r))
			}
		}
		return out, true
	case syntax.OpCapture:
		return expand(re.Sub[0])
	case syntax.OpQuest:
		sub, ok := expand(re.Sub[0])
		return append([]string{""}, sub...), ok && len(sub) < maxNamed
	case syntax.OpConcat:
		out := []string{""}
		for _, sub := range re.Sub {
			parts, ok := expand(sub)
			if !ok || len(out)*len(parts) > maxNamed {
				return nil, false
			}
			next := make([]string, 0, len(out)*len(parts))
			for _, a := range out {
				for _, b := range parts {
					next = append(next, a+b)
				}
			}
			out = next
		}
		return out, true
	case syntax.OpAlternate:
		var out []string
		for _, sub := range re.Sub {
			parts, ok := expand(sub)
			if !ok || len(out)+len(parts) > maxNamed {
				return nil, false
			}
			out = append(out, parts...)
		}
		return out, true
	}
	return nil, false // repetitions, any character, word boundaries
}
