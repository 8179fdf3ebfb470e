package link

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/internal/backoff"
	"github.com/seed83556561/mirrord/internal/kafka/access"
	"github.com/seed83556561/mirrord/internal/kafka/describe"
	"github.com/seed83556561/mirrord/internal/kafka/leaders"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/internal/topicconfig"
	"github.com/seed83556561/mirrord/statestore"
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
		rt.Topic = new(t)
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

// discover lists the source topics the link selects, checks that the
// link's principal may do on them and on their destination topics what
// mirroring needs, creates or grows their destination topics, and returns
// every partition pair in topic and partition order, and the state records
// of the destination topics it created (also when it fails after creating
// some), which the caller commits. A missing permission
// is an error that names it (every one found, at most access.MaxRefusals),
// not a topic left out. What to do is decided by the pure functions of
// topicplan.go; discover reads the clusters for them and carries out what
// they decide.
func (s *session) discover(ctx context.Context) ([]Pair, []statestore.Record, error) {
	pairs, recs, _, err := s.discoverFresh(ctx)
	return pairs, recs, err
}

// discoverFresh is discover that also names the destination topics it
// created (place's fresh).
func (s *session) discoverFresh(ctx context.Context) ([]Pair, []statestore.Record, map[string]bool, error) {
	var created []createdTopic
	pairs, err := s.discoverTopics(ctx, &created)
	var fresh map[string]bool
	for _, c := range created {
		if fresh == nil {
			fresh = make(map[string]bool, len(created))
		}
		fresh[c.name] = true
	}
	return pairs, s.l.recordCreated(created), fresh, err
}

func (s *session) discoverTopics(ctx context.Context, created *[]createdTopic) ([]Pair, error) {
	rules := s.topicRules()
	src, err := describeTopics(ctx, s.src)
	if err != nil {
		return nil, fmt.Errorf("list source topics: %w", err)
	}
	var named kadm.TopicDetails
	if ask := rules.unlisted(src); len(ask) > 0 {
		if named, err = describeTopics(ctx, s.src, ask...); err != nil {
			return nil, fmt.Errorf("describe source topics %v: %w", ask, err)
		}
	}
	selected, err := rules.sources(src, named)
	if err != nil {
		return nil, err
	}
	if len(selected) == 0 {
		if s.pipe == nil { // the session's first discovery (begin builds the pipeline after it)
			s.log.Warn("no source topic matches the link's topics among those the source lists: Kafka lists only the topics the principal may describe, so a topic without Describe (or Read, which implies it) is left out without a word (see docs/acls.md)",
				"cluster", rules.src.Name, "principal", rules.src.Principal)
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
	plan, err := rules.destinations(selected, dst)
	if err != nil {
		return nil, err
	}
	// absent: the destination partition count of a topic whose growth or
	// creation is slot 0's to do (linkWide) when this is another slot's
	// session: its partitions beyond that count wait for the next
	// discovery.
	var absent map[string]int
	if !s.l.linkWide() {
		absent = map[string]int{}
		for _, td := range plan.create {
			absent[td.Topic] = 0
		}
		for i, td := range plan.grow {
			absent[td.Topic] = len(td.Partitions) - plan.growBy[i]
		}
		if len(absent) > 0 {
			s.log.Debug("topic discovery: destination topics not yet created or grown by the link's slot 0; their new partitions wait for the next discovery", "topics", len(absent))
		}
		plan.create, plan.grow, plan.growBy = nil, nil, nil
	}
	for i, td := range plan.grow {
		name, add := s.destName(td.Topic), plan.growBy[i]
		resp, err := s.dstAdm.CreatePartitions(ctx, add, name)
		if err == nil {
			if pr, ok := resp[name]; ok && pr.Err != nil && !errors.Is(pr.Err, kerr.InvalidPartitions) {
				err = pr.Err
			}
		}
		if access.IsRefusal(err) {
			return nil, rules.dst.RefusedTopic(kmsg.ACLOperationAlter, name, needDestAlter.Why, err)
		}
		if err != nil {
			return nil, fmt.Errorf("add %d partitions to destination topic %s: %w", add, name, err)
		}
		s.log.Info("grew destination topic", "topic", name, "partitions", len(td.Partitions), "added", add)
	}
	if err := s.createTopics(ctx, plan.create, created); err != nil {
		return nil, err
	}
	if len(plan.create) > 0 {
		// What the link created must also let it append and read.
		var names []string
		for _, td := range plan.create {
			names = append(names, s.destName(td.Topic))
		}
		if err := metadataRetry.Retry(ctx, 20, func() error {
			got, err := describeTopics(ctx, s.dst, names...)
			if err != nil {
				return err
			}
			for i, c := range *created {
				if d, ok := got[c.name]; ok && c.id == ([16]byte{}) && d.Err == nil {
					(*created)[i].id = d.ID
				}
			}
			return rules.created(names, got)
		}, access.IsRefusal); err != nil {
			return nil, err
		}
	}

	// Fresh metadata for IDs and partition counts: what was just created
	// may not be in any cache yet.
	var (
		pairs []Pair
		wide  []mirrored // every topic of the link, for slot 0 (wideTopics)
	)
	err = metadataRetry.Retry(ctx, 20, func() error {
		pairs, wide = pairs[:0], wide[:0]
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
			slices.Sort(ps)
			if n, ok := absent[td.Topic]; ok {
				ps = slices.DeleteFunc(ps, func(p int32) bool { return int(p) >= n })
			}
			if s.l.slotted() {
				ps = slices.DeleteFunc(ps, func(p int32) bool { return !s.l.owns(td.Topic, p) })
				if s.l.linkWide() {
					id, err := s.dstTopicID(ctx, name)
					if err != nil {
						return err
					}
					wide = append(wide, mirrored{src: td.Topic, dst: name, dstID: id})
				}
			}
			for _, p := range ps {
				sl, err := s.srcLeaders.Lookup(ctx, tp.Key{Topic: td.Topic, Partition: p})
				if errors.Is(err, leaders.ErrUnknownPartition) {
					// Listed a moment ago, unknown now: the topic was
					// deleted in between (or the broker that answered
					// does not know it yet). Retrying would hold up
					// every discovery until the retries ran out; this
					// round leaves it out, and the next listing decides
					// (discoverAll removes a mirrored partition only
					// when the source says its topic is gone).
					s.log.Debug("topic discovery: a listed source partition is unknown to the source now; leaving it to the next discovery",
						"source", fmt.Sprintf("%s[%d]", td.Topic, p))
					continue
				}
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
	if err == nil && s.l.slotted() && s.l.linkWide() {
		slices.SortFunc(wide, func(a, b mirrored) int { return strings.Compare(a.dst, b.dst) })
		s.l.wideTopics.Store(&wide)
	}
	return pairs, err
}

// dstTopicID is the topic ID of destination topic name, from the
// destination's leader cache (its partition 0).
func (s *session) dstTopicID(ctx context.Context, name string) ([16]byte, error) {
	dl, err := s.dstLeaders.Lookup(ctx, tp.Key{Topic: name, Partition: 0})
	if err != nil {
		return [16]byte{}, fmt.Errorf("destination topic %s: %w", name, err)
	}
	return dl.ID, nil
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

// createdTopic is a destination topic the link created: its name, its
// source topic and its topic ID (zero until known).
type createdTopic struct {
	name, source string
	id           [16]byte
}

// recordCreated notes the topics the link created as its own (config sync
// manages their settings) and returns their state records. A topic whose
// ID is still unknown is noted by nothing: config sync leaves it alone
// (logged).
func (l *Link) recordCreated(created []createdTopic) []statestore.Record {
	var recs []statestore.Record
	for _, c := range created {
		if c.id == ([16]byte{}) {
			l.log.Warn("created a destination topic whose topic ID is not known yet; config sync will leave its settings alone, as for a topic the link did not create (config_sync { all_topics = true } manages it)",
				"topic", c.name)
			continue
		}
		v := statestore.TopicValue{Topic: c.name, SourceTopic: c.source, TimestampMs: l.deps.Now().UnixMilli()}
		l.owned.add(c.id, v)
		recs = append(recs, statestore.Record{Key: statestore.TopicKey{LinkName: l.cfg.Link.Name, TopicID: statestore.UUID(c.id)}, Value: v})
	}
	return recs
}

// createTopics creates the destination topics of the given source topics
// with the source's partition count and the settings topicconfig's
// CreateConfigs takes from it, and adds each it created to created. A
// source topic whose settings cannot be read is an error: a topic created
// without them could delete at the destination what the source keeps (a
// compacted source mirrored into a topic that retention deletes, say).
func (s *session) createTopics(ctx context.Context, sources []kadm.TopicDetail, created *[]createdTopic) error {
	if len(sources) == 0 {
		return nil
	}
	srcAcc, dstAcc := s.l.acl.src, s.l.acl.dst
	names := topicsOf(sources)
	// Each topic's answer on its own: a refusal names the topic refused
	// (describe.TopicConfigs).
	rcs, err := describe.TopicConfigs(ctx, s.src, names...)
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
		name := s.destName(td.Topic)
		rf := s.l.cfg.Link.DestinationReplicationFactor
		resp, err := s.dstAdm.CreateTopic(ctx, int32(len(td.Partitions)), rf, topicconfig.CreateConfigs(rc.Configs, s.l.cfg.Link.ConfigSync.rules()), name)
		switch {
		case access.IsRefusal(err):
			return dstAcc.RefusedTopic(kmsg.ACLOperationCreate, name,
				"mirrord creates a destination topic that does not exist; grant Create on the topic or on the cluster, or create the topic beforehand", err)
		case err != nil && !errors.Is(err, kerr.TopicAlreadyExists):
			return fmt.Errorf("create destination topic %s (%d partitions, replication factor %d): %w",
				name, len(td.Partitions), rf, err)
		}
		if err == nil {
			*created = append(*created, createdTopic{name: name, source: td.Topic, id: [16]byte(resp.ID)})
		}
		if slices.ContainsFunc(rc.Configs, func(c kadm.Config) bool {
			return c.Key == "message.timestamp.type" && c.Value != nil && *c.Value == "LogAppendTime"
		}) {
			s.log.Info("source topic stamps LogAppendTime; its mirror is a CreateTime topic, so destination consumers see each record's timestamp as its producer set it, not the source broker's append time",
				"source_topic", td.Topic, "destination_topic", name)
		}
		s.log.Info("created destination topic", "topic", name, "source_topic", td.Topic, "partitions", len(td.Partitions))
	}
	return nil
}

// metadataRetry is how a freshly created topic's metadata is waited for.
var metadataRetry = backoff.Policy{First: 100 * time.Millisecond, Max: 5 * time.Second}

// discoverAll lists the selected source topics, creating or growing their
// destination topics, and asks the source directly about every known
// partition the listing leaves out: only an answer that the topic does not
// exist, or exists under another topic ID, makes it gone (I6).
func (s *session) discoverAll(ctx context.Context, known []tp.Partition) Input {
	pairs, created, err := s.discover(ctx)
	if err != nil {
		return InDiscovered{Err: err, Created: created}
	}
	listed := make(map[tp.Key]bool, len(pairs))
	for _, pr := range pairs {
		listed[pr.Src.Key()] = true
	}
	var missing []tp.Partition
	topics := map[string]bool{}
	for _, p := range known {
		if !listed[p.Key()] {
			missing = append(missing, p)
			topics[p.Topic] = true
		}
	}
	if len(missing) == 0 {
		return InDiscovered{Pairs: pairs, Created: created}
	}
	names := make([]string, 0, len(topics))
	for t := range topics {
		names = append(names, t)
	}
	resp, err := leaders.Metadata(ctx, s.src, names...)
	if err != nil {
		// Not an answer about the topics: nothing is gone.
		s.log.Warn("topic discovery: the listing leaves out partitions the link mirrors and the source could not be asked about them; keeping them", "topics", names, "error", err)
		return InDiscovered{Pairs: pairs, Created: created}
	}
	type topicState struct {
		unknown bool
		id      [16]byte
	}
	states := map[string]topicState{}
	for _, t := range resp.Topics {
		if t.Topic == nil {
			continue
		}
		states[*t.Topic] = topicState{unknown: t.ErrorCode == kerr.UnknownTopicOrPartition.Code, id: t.TopicID}
	}
	ev := InDiscovered{Pairs: pairs, Created: created}
	for _, p := range missing {
		st, ok := states[p.Topic]
		switch {
		case ok && st.unknown:
			ev.Gone = append(ev.Gone, p.Key())
		case ok && st.id != ([16]byte{}) && p.ID != ([16]byte{}) && st.id != p.ID:
			ev.Gone = append(ev.Gone, p.Key())
		default:
			s.log.Debug("topic discovery: a mirrored partition is missing from the listing but the source still has its topic; keeping it", "source", p.String())
		}
	}
	return ev
}

// placeNew looks up where new partitions start, from a fresh replay of the
// state topic.
func (s *session) placeNew(ctx context.Context, pairs []Pair) Input {
	view, err := s.store.Replay(ctx)
	if err != nil {
		return InPlaced{Err: err}
	}
	parts, later, err := s.place(ctx, view, pairs, s.fresh)
	return InPlaced{Parts: parts, Err: err, Later: len(later) > 0}
}
