package link

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/internal/kafka/access"
	"github.com/seed83556561/mirrord/internal/kafka/describe"
	"github.com/seed83556561/mirrord/internal/topicconfig"
	"github.com/seed83556561/mirrord/statestore"
)

// Topic config sync (issue 25, item 2): every config_sync_interval, and
// right after the session starts mirroring or adds topics, the settings of
// each source topic the link mirrors are brought to its mirror, as
// topicconfig.Plan decides from the two topics' DescribeConfigs answers,
// with IncrementalAlterConfigs. The rules:
//
//   - a round runs only while this agent's session of the link is the live
//     one (MIRRORING within its lease, as for the group offset sync), and
//     checks again right before each change, so that a standby or fenced
//     agent never alters a topic;
//   - only the destination topics the link created are managed (the state
//     topic records each creation, statestore.TopicKey), unless config_sync
//     all_topics opts in: a topic an operator created is left alone;
//   - a topic whose settings cannot be read or changed (a missing
//     permission, a value the destination refuses) is that topic's error,
//     in the status and the log; the other topics go on, and so does
//     mirroring.
//
// Its goroutine (runConfigSync) is started and waited for by Link.Run; it
// owns its two clients and closes them before it returns. Rounds run one at
// a time on that goroutine.

// ConfigSync is a link's config_sync block (see package topicconfig).
type ConfigSync struct {
	// Enabled: the link syncs its topics' settings.
	Enabled bool
	// AllTopics: also the destination topics the link did not create.
	AllTopics bool
	// Include names default exclusions that follow after all; Exclude
	// are anchored patterns of settings that never follow.
	Include []string
	Exclude []*regexp.Regexp
}

func (c ConfigSync) rules() topicconfig.Rules {
	return topicconfig.Rules{Include: c.Include, Exclude: c.Exclude}
}

// ConfigSyncStatus is the topic config sync's part of a link's status.
type ConfigSyncStatus struct {
	Interval  time.Duration `json:"interval"`
	AllTopics bool          `json:"all_topics"`
	// LastRound is when the last round ended; LastSuccess when the last
	// round in which every topic synced without an error ended.
	LastRound   time.Time `json:"last_round,omitzero"`
	LastSuccess time.Time `json:"last_success,omitzero"`
	// LastError is the last round's error as a whole (the topics could
	// not be described at all); each topic's own is in Topics.
	LastError string `json:"last_error,omitempty"`
	// Idle says why no round runs now: this agent's session of the link
	// is not the live one. Empty while rounds run.
	Idle   string              `json:"idle,omitempty"`
	Topics []TopicConfigStatus `json:"topics"`
}

// TopicConfigStatus is one mirrored topic after the last round.
type TopicConfigStatus struct {
	SourceTopic      string `json:"source_topic"`
	DestinationTopic string `json:"destination_topic"`
	// State: synced (settings changed this round), up_to_date,
	// left_alone (the link did not create the topic and all_topics is
	// off), failed (see Error).
	State string `json:"state"`
	// Set are the settings set this round (key=value), Deleted the
	// destination overrides deleted.
	Set     []string  `json:"set,omitempty"`
	Deleted []string  `json:"deleted,omitempty"`
	Error   string    `json:"error,omitempty"`
	At      time.Time `json:"at"`
}

// Topic states of the config sync.
const (
	TopicConfigSynced    = "synced"
	TopicConfigUpToDate  = "up_to_date"
	TopicConfigLeftAlone = "left_alone"
	TopicConfigFailed    = "failed"
)

// Why config sync needs each permission (docs/acls.md).
const (
	whyConfigSrcDescribe = "config sync reads the source topic's settings to bring them to its mirror"
	whyConfigDstDescribe = "config sync reads the mirror's settings to change only what differs from its source"
	whyConfigDstAlter    = "config sync brings the source topic's settings to its mirror (IncrementalAlterConfigs); or turn it off with config_sync { enabled = false }"
)

// errConfigSyncNotLive is why no round runs while this agent's session of
// the link is not the live one.
var errConfigSyncNotLive = errors.New("this agent's session of the link is not the live one (not MIRRORING, or its lease lapsed): config sync changes topics only from the session that holds the link")

// configRoundTimeout bounds one round's requests.
const configRoundTimeout = time.Minute

// ownedTopics are the destination topics the link created, by topic ID:
// those the state topic records (each session adds what its replay found)
// and those created in this process, recorded or not yet. Safe for
// concurrent use: sessions add, the config sync reads.
type ownedTopics struct {
	mu  sync.Mutex
	ids map[[16]byte]statestore.TopicValue
}

func (o *ownedTopics) add(id [16]byte, v statestore.TopicValue) {
	o.mu.Lock()
	o.ids[id] = v
	o.mu.Unlock()
}

func (o *ownedTopics) has(id [16]byte) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, ok := o.ids[id]
	return ok
}

// merge adds the topics of link that view records and returns the records
// of those this process created that view lacks (a session that created
// them ended before it committed their records).
func (o *ownedTopics) merge(link string, view *statestore.View) []statestore.Record {
	o.mu.Lock()
	defer o.mu.Unlock()
	for k, v := range view.Topics {
		if k.LinkName == link {
			o.ids[k.TopicID] = v
		}
	}
	var missing []statestore.Record
	for id, v := range o.ids {
		k := statestore.TopicKey{LinkName: link, TopicID: statestore.UUID(id)}
		if _, ok := view.Topics[k]; !ok {
			missing = append(missing, statestore.Record{Key: k, Value: v})
		}
	}
	return missing
}

// kickConfigSync asks for a config sync round and an ACL sync round now;
// it never blocks.
func (l *Link) kickConfigSync() {
	select {
	case l.syncNow <- struct{}{}:
	default: // one is asked for already
	}
	select {
	case l.aclNow <- struct{}{}:
	default:
	}
}

// configSync runs a link's topic config sync.
type configSync struct {
	l              *Link
	log            hclog.Logger
	rules          topicconfig.Rules
	src, dst       *kgo.Client
	srcAdm, dstAdm *kadm.Client
}

// runConfigSync syncs on the interval and when asked, until ctx ends.
func (l *Link) runConfigSync(ctx context.Context) {
	cs := &configSync{l: l, log: l.log.Named("configs"), rules: l.cfg.Link.ConfigSync.rules()}
	var err error
	if cs.src, err = kgo.NewClient(l.deps.SourceOpts...); err != nil {
		cs.fail(fmt.Errorf("config sync: source cluster %s client: %w", l.cfg.Source.Name, err))
		return
	}
	defer cs.src.Close()
	if cs.dst, err = kgo.NewClient(l.deps.DestinationOpts...); err != nil {
		cs.fail(fmt.Errorf("config sync: destination cluster %s client: %w", l.cfg.Destination.Name, err))
		return
	}
	defer cs.dst.Close()
	cs.srcAdm, cs.dstAdm = kadm.NewClient(cs.src), kadm.NewClient(cs.dst)
	t := time.NewTicker(l.cfg.Link.ConfigSyncInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-l.syncNow:
		}
		cs.round(ctx)
	}
}

// fail records an error that keeps config sync from running at all.
func (cs *configSync) fail(err error) {
	cs.log.Error("topic config sync cannot run", "error", err)
	cs.set(func(c *ConfigSyncStatus) { c.LastError = err.Error() })
}

// set changes the config sync's status, copied so that a Status taken
// before stays as it was.
func (cs *configSync) set(fn func(*ConfigSyncStatus)) {
	cs.l.setStatus(func(s *Status) {
		c := ConfigSyncStatus{Interval: cs.l.cfg.Link.ConfigSyncInterval, AllTopics: cs.l.cfg.Link.ConfigSync.AllTopics, Topics: []TopicConfigStatus{}}
		if s.ConfigSync != nil {
			c = *s.ConfigSync
		}
		fn(&c)
		s.ConfigSync = &c
	})
}

// live reports whether this agent's session of the link is the live one.
func (cs *configSync) live() bool { return cs.l.syncLive() }

// syncLive reports whether this agent's session of the link is the live
// one, for the config and ACL syncs.
func (l *Link) syncLive() bool {
	if l.slotted() && l.wideTopics.Load() == nil {
		return false // not slot 0's Link, or its session has not discovered the link's topics
	}
	if l.cfg.Link.Delivery == statestore.DeliveryTransactional {
		return l.txnTopics.Load() != nil
	}
	return moverView{l}.Live()
}

// mirrored is one mirrored topic pair.
type mirrored struct {
	src, dst string
	dstID    [16]byte
}

// mirroredTopics asks the running session for the topics it mirrors, in
// destination name order.
func (cs *configSync) mirroredTopics(ctx context.Context) ([]mirrored, error) {
	return cs.l.mirroredTopics(ctx)
}

// mirroredTopics asks the running session for the topics it mirrors (with
// slots, slot 0's session for every slot's), in destination name order;
// errConfigSyncNotLive without one.
func (l *Link) mirroredTopics(ctx context.Context) ([]mirrored, error) {
	if l.slotted() {
		// Slot 0's session: every slot's topics, as it last discovered
		// them.
		ts := l.wideTopics.Load()
		if ts == nil {
			return nil, errConfigSyncNotLive
		}
		return slices.Clone(*ts), nil
	}
	if l.cfg.Link.Delivery == statestore.DeliveryTransactional {
		ts := l.txnTopics.Load()
		if ts == nil {
			return nil, errConfigSyncNotLive
		}
		return slices.Clone(*ts), nil
	}
	o := l.online.Load()
	if o == nil {
		return nil, errConfigSyncNotLive
	}
	var out []mirrored
	if err := o.ask(ctx, func(pl partitions) {
		seen := map[string]bool{}
		for _, pr := range pl.Pairs() {
			if !seen[pr.Dst.Topic] {
				seen[pr.Dst.Topic] = true
				out = append(out, mirrored{src: pr.Src.Topic, dst: pr.Dst.Topic, dstID: pr.Dst.ID})
			}
		}
	}); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b mirrored) int {
		switch {
		case a.dst < b.dst:
			return -1
		case a.dst > b.dst:
			return 1
		}
		return 0
	})
	return out, nil
}

// round syncs every mirrored topic once; while this agent's session is not
// the live one it only says so in the status.
func (cs *configSync) round(ctx context.Context) {
	if !cs.live() {
		cs.set(func(c *ConfigSyncStatus) { c.Idle = errConfigSyncNotLive.Error() })
		return
	}
	ctx, cancel := context.WithTimeout(ctx, configRoundTimeout)
	defer cancel()
	topics, err := cs.sync(ctx)
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return // the link stops
	}
	now := cs.l.deps.Now()
	ok := err == nil
	for _, t := range topics {
		ok = ok && t.State != TopicConfigFailed
	}
	if err != nil {
		cs.l.met.add(ConfigSyncErrors, 1)
		cs.log.Warn("topic config sync round failed", "error", err)
	}
	cs.l.met.add(ConfigSyncRounds, 1)
	cs.set(func(c *ConfigSyncStatus) {
		c.LastRound, c.Topics, c.LastError, c.Idle = now, topics, "", ""
		if ok {
			c.LastSuccess = now
		}
		if err != nil {
			c.LastError = err.Error()
		}
	})
}

// sync reads both sides' settings and changes each managed mirror that
// differs from its source.
func (cs *configSync) sync(ctx context.Context) ([]TopicConfigStatus, error) {
	out := []TopicConfigStatus{}
	all, err := cs.mirroredTopics(ctx)
	if err != nil {
		return out, err
	}
	var managed []mirrored
	for _, m := range all {
		if cs.l.cfg.Link.ConfigSync.AllTopics || cs.l.owned.has(m.dstID) {
			managed = append(managed, m)
			continue
		}
		out = append(out, TopicConfigStatus{SourceTopic: m.src, DestinationTopic: m.dst, State: TopicConfigLeftAlone, At: cs.l.deps.Now()})
	}
	if len(managed) == 0 {
		return out, nil
	}
	var srcNames, dstNames []string
	for _, m := range managed {
		srcNames, dstNames = append(srcNames, m.src), append(dstNames, m.dst)
	}
	acl := cs.l.acl
	srcCfgs, err := describeConfigs(ctx, cs.src, srcNames)
	if err != nil {
		return out, fmt.Errorf("describe the configs of the source topics: %w", err)
	}
	dstCfgs, err := describeConfigs(ctx, cs.dst, dstNames)
	if err != nil {
		return out, fmt.Errorf("describe the configs of the destination topics: %w", err)
	}
	for _, m := range managed {
		st := TopicConfigStatus{SourceTopic: m.src, DestinationTopic: m.dst, At: cs.l.deps.Now()}
		fail := func(err error) {
			st.State, st.Error = TopicConfigFailed, err.Error()
			cs.l.met.add(ConfigSyncErrors, 1)
			cs.log.Warn("topic config sync: topic not synced this round", "source_topic", m.src, "destination_topic", m.dst, "error", err)
		}
		src, err := configsOf(srcCfgs, m.src, acl.src, whyConfigSrcDescribe)
		if err != nil {
			fail(err)
			out = append(out, st)
			continue
		}
		dst, err := configsOf(dstCfgs, m.dst, acl.dst, whyConfigDstDescribe)
		if err != nil {
			fail(err)
			out = append(out, st)
			continue
		}
		ops := topicconfig.Plan(src, dst, cs.rules)
		if len(ops) == 0 {
			st.State = TopicConfigUpToDate
			out = append(out, st)
			continue
		}
		if !cs.live() {
			// The session stopped being the live one while the
			// topics were read: nothing is changed.
			return out, errConfigSyncNotLive
		}
		if err := cs.alter(ctx, m.dst, ops); err != nil {
			fail(err)
			out = append(out, st)
			continue
		}
		var set, deleted int64
		for _, op := range ops {
			if op.Op == kadm.DeleteConfig {
				st.Deleted = append(st.Deleted, op.Name)
				deleted++
			} else {
				st.Set = append(st.Set, op.Name+"="+*op.Value)
				set++
			}
		}
		cs.l.met.add(ConfigsSet, set)
		cs.l.met.add(ConfigsDeleted, deleted)
		st.State = TopicConfigSynced
		cs.log.Info("topic settings synced", "source_topic", m.src, "destination_topic", m.dst, "changes", topicconfig.Describe(ops))
		out = append(out, st)
	}
	return out, nil
}

// described is a DescribeConfigs answer about some topics, and the error
// of the request (a broker that failed or refused the request as a whole
// for the topics it leads), which is the error of each topic the answer
// leaves out.
type described struct {
	rcs kadm.ResourceConfigs
	err error
}

// describeConfigs describes topics' settings, each topic's answer on its
// own (describe.TopicConfigs: a topic refused leaves the others theirs);
// only a request that failed for every topic, for another reason than a
// refusal, is an error.
func describeConfigs(ctx context.Context, cl *kgo.Client, topics []string) (described, error) {
	rcs, err := describe.TopicConfigs(ctx, cl, topics...)
	if err != nil && len(rcs) == 0 && !access.IsRefusal(err) {
		return described{}, err
	}
	return described{rcs: rcs, err: err}, nil
}

// configsOf is one topic's settings from an answer, or its error: a
// refusal explained (cluster, principal, DescribeConfigs, topic, why).
func configsOf(d described, topic string, c access.Cluster, why string) ([]kadm.Config, error) {
	rc, onErr := d.rcs.On(topic, nil)
	err := rc.Err
	if onErr != nil {
		if err = d.err; err == nil {
			err = errors.New("the answer does not hold the topic")
		}
	}
	switch {
	case access.IsRefusal(err):
		return nil, c.RefusedTopic(kmsg.ACLOperationDescribeConfigs, topic, why, err)
	case err != nil:
		return nil, fmt.Errorf("describe the configs of topic %s on %s cluster %s: %w%s", topic, c.Role, c.Name, err, detail(rc.ErrMessage))
	}
	return rc.Configs, nil
}

// alter changes one destination topic's settings. A refusal names what is
// missing; a value the destination refuses says which and why.
func (cs *configSync) alter(ctx context.Context, topic string, ops []kadm.AlterConfig) error {
	dst := cs.l.acl.dst
	resp, err := cs.dstAdm.AlterTopicConfigs(ctx, ops, topic)
	if err == nil {
		var r kadm.AlterConfigsResponse
		if r, err = resp.On(topic, nil); err == nil {
			err = r.Err
			if err != nil && r.ErrMessage != "" {
				err = fmt.Errorf("%w%s", err, detail(r.ErrMessage))
			}
		} else {
			err = fmt.Errorf("the answer does not hold the topic: %w", err)
		}
	}
	switch {
	case err == nil:
		return nil
	case access.IsRefusal(err):
		return dst.RefusedTopic(kmsg.ACLOperationAlterConfigs, topic, whyConfigDstAlter, err)
	case errors.Is(err, kerr.InvalidConfig), errors.Is(err, kerr.InvalidRequest), errors.Is(err, kerr.PolicyViolation):
		return fmt.Errorf("destination cluster %s refuses %s on topic %s: %w", dst.Name, topicconfig.Describe(ops), topic, err)
	}
	return fmt.Errorf("alter the configs of topic %s on destination cluster %s (%s): %w", topic, dst.Name, topicconfig.Describe(ops), err)
}

// detail adds a broker's error message, if it sent one.
func detail(msg string) string {
	if msg == "" {
		return ""
	}
	return ": " + msg
}
