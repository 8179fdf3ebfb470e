package link

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/internal/backoff"
	"github.com/seed83556561/mirrord/internal/kafka/access"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
)

// copiedTopicConfigs are the source topic settings a created destination
// topic takes over (issue 4): how long data lives and how big a batch may
// be. Everything else is the destination broker's default, except the two
// settings mirroring needs (see createConfigs).
var copiedTopicConfigs = []string{"cleanup.policy", "retention.ms", "retention.bytes", "max.message.bytes"}

// createConfigs are the settings of a destination topic the link creates:
// compression.type=producer keeps every batch as the source producer
// compressed it (the broker would otherwise recompress, and re-encode every
// batch), and CreateTime keeps the source timestamps (LogAppendTime would
// overwrite them and the CRC).
func createConfigs(source map[string]*string) map[string]*string {
	out := map[string]*string{
		"compression.type":       kadm.StringPtr("producer"),
		"message.timestamp.type": kadm.StringPtr("CreateTime"),
	}
	for _, k := range copiedTopicConfigs {
		if v, ok := source[k]; ok && v != nil {
			out[k] = v
		}
	}
	return out
}

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

// describeTopics asks the cluster of cl for the metadata of topics (of
// every topic the principal may describe when none are named), with the
// operations the principal may perform on each (KIP-430). Kafka leaves a
// topic that the principal may not describe out of a listing of every
// topic, without a word; a named one comes back with
// TOPIC_AUTHORIZATION_FAILED, whether it exists or not. Internal topics
// are left out of a listing.
func describeTopics(ctx context.Context, cl *kgo.Client, topics ...string) (kadm.TopicDetails, error) {
	req := kmsg.NewPtrMetadataRequest()
	req.AllowAutoTopicCreation = false
	req.IncludeTopicAuthorizedOperations = true
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	out := make(kadm.TopicDetails, len(resp.Topics))
	for _, t := range resp.Topics {
		if t.Topic == nil || len(topics) == 0 && t.IsInternal {
			continue
		}
		td := kadm.TopicDetail{
			Topic:                *t.Topic,
			ID:                   t.TopicID,
			IsInternal:           t.IsInternal,
			Partitions:           make(kadm.PartitionDetails, len(t.Partitions)),
			AuthorizedOperations: kadm.DecodeACLOperations(t.AuthorizedOperations),
			Err:                  kerr.ErrorForCode(t.ErrorCode),
		}
		for _, p := range t.Partitions {
			td.Partitions[p.Partition] = kadm.PartitionDetail{
				Topic: td.Topic, Partition: p.Partition, Leader: p.Leader, LeaderEpoch: p.LeaderEpoch,
				Replicas: p.Replicas, ISR: p.ISR, OfflineReplicas: p.OfflineReplicas, Err: kerr.ErrorForCode(p.ErrorCode),
			}
		}
		out[td.Topic] = td
	}
	return out, nil
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

// discover lists the source topics the link selects, checks that the
// link's principal may do on them and on their destination topics what
// mirroring needs, creates or grows their destination topics, and returns
// every partition pair in topic and partition order. A missing permission
// is an error that names it (every one found, at most maxRefusals), not a
// topic left out.
func (s *session) discover(ctx context.Context) ([]Pair, error) {
	srcAcc, dstAcc := s.l.acl.src, s.l.acl.dst
	src, err := describeTopics(ctx, s.src)
	if err != nil {
		return nil, fmt.Errorf("list source topics: %w", err)
	}
	var refusals []error
	if named := namedTopics(&s.l.cfg.Link); len(named) > 0 {
		var ask []string
		for _, n := range named {
			if _, ok := src[n]; !ok {
				ask = append(ask, n)
			}
		}
		if len(ask) > 0 {
			more, err := describeTopics(ctx, s.src, ask...)
			if err != nil {
				return nil, fmt.Errorf("describe source topics %v: %w", ask, err)
			}
			for _, name := range more.Names() {
				td := more[name]
				switch {
				case errors.Is(td.Err, kerr.TopicAuthorizationFailed):
					refusals = append(refusals, srcAcc.RefusedTopic(kmsg.ACLOperationDescribe, name,
						"the link's topics name it, and Kafka lists only the topics the principal may describe; Read implies Describe", td.Err))
				case errors.Is(td.Err, kerr.UnknownTopicOrPartition):
					// Not there (yet): mirrored once it is.
				default:
					src[name] = td
				}
			}
		}
	}
	var selected []kadm.TopicDetail
	for _, name := range src.Names() {
		td := src[name]
		if !s.l.cfg.Link.Selects(name) {
			continue
		}
		if access.IsRefusal(td.Err) {
			refusals = append(refusals, srcAcc.RefusedTopic(kmsg.ACLOperationDescribe, name, "Read implies Describe", td.Err))
			continue
		}
		if td.Err != nil {
			continue // being created or deleted: the next discovery sees it
		}
		if s.sameCluster && s.destName(name) == name {
			return nil, fmt.Errorf("source and destination are the same cluster (%s) and rename %q maps topic %s onto itself: set rename to a template that changes names, such as \"{source}.{topic}\"",
				s.srcID, s.l.cfg.Link.Rename, name)
		}
		refusals = append(refusals, srcAcc.Check(td, needSourceRead)...)
		selected = append(selected, td)
	}
	if len(refusals) > 0 {
		return nil, access.Join(refusals)
	}
	if len(selected) == 0 {
		if s.pipe == nil { // the session's first discovery (begin builds the pipeline after it)
			s.log.Warn("no source topic matches the link's topics among those the source lists: Kafka lists only the topics the principal may describe, so a topic without Describe (or Read, which implies it) is left out without a word (see docs/acls.md)",
				"cluster", srcAcc.Name, "principal", srcAcc.Principal)
		}
		return nil, nil
	}

	var dstNames []string
	for _, td := range selected {
		dstNames = append(dstNames, s.destName(td.Topic))
	}
	dst, err := describeTopics(ctx, s.dst, dstNames...)
	if err != nil {
		return nil, fmt.Errorf("list destination topics: %w", err)
	}
	var (
		toCreate []kadm.TopicDetail
		toGrow   []kadm.TopicDetail // the source topics
	)
	for _, td := range selected {
		name := s.destName(td.Topic)
		d, ok := dst[name]
		switch {
		case !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition):
			refusals = append(refusals, srcAcc.Check(td, needSourceDescribeConfigs)...)
			toCreate = append(toCreate, td)
		case access.IsRefusal(d.Err):
			refusals = append(refusals, dstAcc.RefusedTopic(kmsg.ACLOperationDescribe, name,
				"mirrord needs Write and Read on it, which imply Describe, and Create unless the topic exists", d.Err))
		case d.Err != nil:
			return nil, fmt.Errorf("destination topic %s: %w", name, d.Err)
		default:
			refusals = append(refusals, dstAcc.Check(d, needDestWrite, needDestRead)...)
			if len(d.Partitions) < len(td.Partitions) {
				refusals = append(refusals, dstAcc.Check(d, needDestAlter)...)
				toGrow = append(toGrow, td)
			}
		}
	}
	if len(refusals) > 0 {
		return nil, access.Join(refusals)
	}
	for _, td := range toGrow {
		name := s.destName(td.Topic)
		add := len(td.Partitions) - len(dst[name].Partitions)
		resp, err := s.dstAdm.CreatePartitions(ctx, add, name)
		if err == nil {
			if pr, ok := resp[name]; ok && pr.Err != nil && !errors.Is(pr.Err, kerr.InvalidPartitions) {
				err = pr.Err
			}
		}
		if access.IsRefusal(err) {
			return nil, dstAcc.RefusedTopic(kmsg.ACLOperationAlter, name, needDestAlter.Why, err)
		}
		if err != nil {
			return nil, fmt.Errorf("add %d partitions to destination topic %s: %w", add, name, err)
		}
		s.log.Info("grew destination topic", "topic", name, "partitions", len(td.Partitions), "added", add)
	}
	if err := s.createTopics(ctx, toCreate); err != nil {
		return nil, err
	}
	if len(toCreate) > 0 {
		// What the link created must also let it append and read.
		var created []string
		for _, td := range toCreate {
			created = append(created, s.destName(td.Topic))
		}
		if err := metadataRetry.Retry(ctx, 20, func() error {
			got, err := describeTopics(ctx, s.dst, created...)
			if err != nil {
				return err
			}
			var errs []error
			for _, name := range created {
				d := got[name]
				switch {
				case access.IsRefusal(d.Err):
					errs = append(errs, dstAcc.RefusedTopic(kmsg.ACLOperationDescribe, name,
						"mirrord created the topic and needs Write and Read on it, which imply Describe", d.Err))
				case d.Err != nil:
					return fmt.Errorf("destination topic %s after its creation: %w", name, d.Err)
				default:
					errs = append(errs, dstAcc.Check(d, needDestWrite, needDestRead)...)
				}
			}
			return access.Join(errs)
		}, access.IsRefusal); err != nil {
			return nil, err
		}
	}

	// Fresh metadata for IDs and partition counts: what was just created
	// may not be in any cache yet.
	var pairs []Pair
	err = metadataRetry.Retry(ctx, 20, func() error {
		pairs = pairs[:0]
		if err := s.srcLeaders.Refresh(ctx, topicsOf(selected)...); err != nil {
			return err
		}
		if err := s.dstLeaders.Refresh(ctx, dstNames...); err != nil {
			return err
		}
		for _, td := range selected {
			name := s.destName(td.Topic)
			ps := make([]int32, 0, len(td.Partitions))
			for p := range td.Partitions {
				ps = append(ps, p)
			}
			sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
			for _, p := range ps {
				sl, err := s.srcLeaders.Lookup(ctx, tp.Key{Topic: td.Topic, Partition: p})
				if err != nil {
					return fmt.Errorf("source partition %s[%d]: %w", td.Topic, p, err)
				}
				dl, err := s.dstLeaders.Lookup(ctx, tp.Key{Topic: name, Partition: p})
				if err != nil {
					return fmt.Errorf("destination partition %s[%d]: %w", name, p, err)
				}
				pairs = append(pairs, Pair{
					Src: tp.Partition{Topic: td.Topic, ID: sl.ID, Partition: p},
					Dst: tp.Partition{Topic: name, ID: dl.ID, Partition: p},
				})
			}
		}
		return nil
	}, access.IsRefusal)
	return pairs, err
}

func topicsOf(tds []kadm.TopicDetail) []string {
	var out []string
	for _, td := range tds {
		out = append(out, td.Topic)
	}
	return out
}

func (s *session) destName(source string) string {
	return s.l.cfg.Link.DestinationTopic(source, s.l.cfg.Source.Name)
}

// createTopics creates the destination topics of the given source topics
// with the source's partition count and retention settings. A source topic
// whose settings cannot be read is an error: a topic created without them
// could delete at the destination what the source keeps (a compacted
// source mirrored into a topic that retention deletes, say).
func (s *session) createTopics(ctx context.Context, sources []kadm.TopicDetail) error {
	if len(sources) == 0 {
		return nil
	}
	srcAcc, dstAcc := s.l.acl.src, s.l.acl.dst
	names := topicsOf(sources)
	rcs, err := s.srcAdm.DescribeTopicConfigs(ctx, names...)
	if err != nil && !access.IsRefusal(err) {
		return fmt.Errorf("describe source topic configs: %w", err)
	}
	for _, td := range sources {
		rc, onErr := rcs.On(td.Topic, nil)
		switch {
		case onErr == nil && access.IsRefusal(rc.Err):
			return srcAcc.RefusedTopic(kmsg.ACLOperationDescribeConfigs, td.Topic, needSourceDescribeConfigs.Why, rc.Err)
		case onErr == nil && rc.Err != nil:
			return fmt.Errorf("describe the configs of source topic %s: %w", td.Topic, rc.Err)
		case access.IsRefusal(err):
			return srcAcc.RefusedTopic(kmsg.ACLOperationDescribeConfigs, td.Topic, needSourceDescribeConfigs.Why, err)
		case onErr != nil:
			return fmt.Errorf("describe the configs of source topic %s: the answer does not hold the topic: %w", td.Topic, onErr)
		}
		srcCfg := map[string]*string{}
		for _, c := range rc.Configs {
			srcCfg[c.Key] = c.Value
		}
		name := s.destName(td.Topic)
		rf := s.l.cfg.Link.DestinationReplicationFactor
		_, err := s.dstAdm.CreateTopic(ctx, int32(len(td.Partitions)), rf, createConfigs(srcCfg), name)
		switch {
		case access.IsRefusal(err):
			return dstAcc.RefusedTopic(kmsg.ACLOperationCreate, name,
				"mirrord creates a destination topic that does not exist; grant Create on the topic or on the cluster, or create the topic beforehand", err)
		case err != nil && !errors.Is(err, kerr.TopicAlreadyExists):
			return fmt.Errorf("create destination topic %s (%d partitions, replication factor %d): %w",
				name, len(td.Partitions), rf, err)
		}
		if v := srcCfg["message.timestamp.type"]; v != nil && *v == "LogAppendTime" {
			s.log.Info("source topic stamps LogAppendTime; its mirror is a CreateTime topic, so destination consumers see each record's timestamp as its producer set it, not the source broker's append time",
				"source_topic", td.Topic, "destination_topic", name)
		}
		s.log.Info("created destination topic", "topic", name, "source_topic", td.Topic, "partitions", len(td.Partitions))
	}
	return nil
}

// metadataRetry is how a freshly created topic's metadata is waited for.
var metadataRetry = backoff.Policy{First: 100 * time.Millisecond, Max: 5 * time.Second}
