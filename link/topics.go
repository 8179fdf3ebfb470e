package link

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/seed83556561/mirrord/internal/backoff"
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

// discover lists the source topics the link selects, creates or grows
// their destination topics, and returns every partition pair in topic and
// partition order.
func (s *session) discover(ctx context.Context) ([]Pair, error) {
	src, err := s.srcAdm.ListTopics(ctx)
	if err != nil {
		return nil, fmt.Errorf("list source topics: %w", err)
	}
	var selected []kadm.TopicDetail
	for _, name := range src.Names() {
		td := src[name]
		if td.Err != nil || !s.l.cfg.Link.Selects(name) {
			continue
		}
		if s.sameCluster && s.destName(name) == name {
			return nil, fmt.Errorf("source and destination are the same cluster (%s) and rename %q maps topic %s onto itself: set rename to a template that changes names, such as \"{source}.{topic}\"",
				s.srcID, s.l.cfg.Link.Rename, name)
		}
		selected = append(selected, td)
	}
	if len(selected) == 0 {
		return nil, nil
	}

	var dstNames []string
	for _, td := range selected {
		dstNames = append(dstNames, s.destName(td.Topic))
	}
	dst, err := s.dstAdm.ListTopics(ctx, dstNames...)
	if err != nil {
		return nil, fmt.Errorf("list destination topics: %w", err)
	}
	var toCreate []kadm.TopicDetail
	for _, td := range selected {
		name := s.destName(td.Topic)
		d, ok := dst[name]
		switch {
		case !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition):
			toCreate = append(toCreate, td)
		case d.Err != nil:
			return nil, fmt.Errorf("destination topic %s: %w", name, d.Err)
		case len(d.Partitions) < len(td.Partitions):
			add := len(td.Partitions) - len(d.Partitions)
			resp, err := s.dstAdm.CreatePartitions(ctx, add, name)
			if err != nil {
				return nil, fmt.Errorf("add %d partitions to destination topic %s: %w", add, name, err)
			}
			if pr, ok := resp[name]; ok && pr.Err != nil && !errors.Is(pr.Err, kerr.InvalidPartitions) {
				return nil, fmt.Errorf("add %d partitions to destination topic %s: %w", add, name, pr.Err)
			}
			s.log.Info("grew destination topic", "topic", name, "partitions", len(td.Partitions), "added", add)
		}
	}
	if err := s.createTopics(ctx, toCreate); err != nil {
		return nil, err
	}

	// Fresh metadata for IDs and partition counts: what was just created
	// may not be in any cache yet.
	topics := append(dstNames[:0:0], dstNames...)
	for _, td := range selected {
		topics = append(topics, td.Topic)
	}
	var pairs []Pair
	err = retry(ctx, 20, metadataRetry, func() error {
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
	})
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
// with the source's partition count and retention settings.
func (s *session) createTopics(ctx context.Context, sources []kadm.TopicDetail) error {
	if len(sources) == 0 {
		return nil
	}
	names := topicsOf(sources)
	rcs, err := s.srcAdm.DescribeTopicConfigs(ctx, names...)
	if err != nil {
		return fmt.Errorf("describe source topic configs: %w", err)
	}
	for _, td := range sources {
		srcCfg := map[string]*string{}
		if rc, err := rcs.On(td.Topic, nil); err == nil {
			for _, c := range rc.Configs {
				srcCfg[c.Key] = c.Value
			}
		}
		name := s.destName(td.Topic)
		rf := s.l.cfg.Link.DestinationReplicationFactor
		_, err := s.dstAdm.CreateTopic(ctx, int32(len(td.Partitions)), rf, createConfigs(srcCfg), name)
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
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

// retry runs fn until it succeeds, ctx ends or attempts run out, waiting
// after each failure as policy says.
func retry(ctx context.Context, attempts int, policy backoff.Policy, fn func() error) error {
	var err error
	for i := 1; i <= attempts; i++ {
		if err = fn(); err == nil {
			return nil
		}
		if !sleep(ctx, policy.Wait(i)) {
			return ctx.Err()
		}
	}
	return err
}

// metadataRetry is how a freshly created topic's metadata is waited for.
var metadataRetry = backoff.Policy{First: 100 * time.Millisecond, Max: 5 * time.Second}

// sleep waits d or until ctx ends; it reports whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
