package failover

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/translate"
)

// Share-group sync (KIP-932; issue 25). For each source share group the
// link's share_groups block selects, in every round of the group sync: its
// share-partition start offsets on the partitions the link mirrors
// (DescribeShareGroupOffsets) are translated (translate.ShareGroup) and set
// at the destination's share group of the same ID (AlterShareGroupOffsets),
// under the rules of group offset sync: only from the live session, only
// while the destination share group has no members (the broker refuses an
// alter of a group with members anyway, NON_EMPTY_GROUP), and never
// backwards. A broker exposes a share group's progress only as its start
// offset: records above it that the group acknowledged at the source are
// delivered again at the destination after a move (README, "What follows
// the mirror").

// Group types in GroupStatus.Type.
const (
	TypeConsumer = "consumer"
	TypeShare    = "share"
)

// Why share-group sync needs each permission (docs/acls.md).
const (
	WhySrcShareDescribe = "share-group sync reads the share group's start offsets at the source (DescribeShareGroupOffsets)"
	WhyDstShareDescribe = "share-group sync describes the share group at the destination, to set its start offsets only while it has no members and never behind them"
	WhyDstShareRead     = "share-group sync sets the translated start offsets (AlterShareGroupOffsets needs Read on the group)"
)

// errNoShareGroups explains an answer that says a cluster does not offer
// share groups.
func errNoShareGroups(cluster string, err error) error {
	if errors.Is(err, kerr.UnsupportedVersion) || errors.Is(err, kerr.InvalidRequest) || isTooOld(err) {
		return fmt.Errorf("cluster %s does not offer share groups (KIP-932: Kafka 4.1 or later with the share.version feature enabled; production-ready since 4.2): %w", cluster, err)
	}
	return err
}

// isTooOld reports whether err is kgo's refusal to send a request the
// broker does not advertise (its ApiVersions answer lacks the key): kgo
// does not export that error, whose message says "broker is too old"
// (franz-go pkg/kgo/errors.go, errBrokerTooOld).
func isTooOld(err error) bool {
	return err != nil && strings.Contains(err.Error(), "broker is too old")
}

// syncShare syncs every selected source share group once.
func (g *groupSync) syncShare(ctx context.Context) ([]GroupStatus, error) {
	out := []GroupStatus{}
	var listed kadm.ListedGroups
	err := g.retryCoordinator(ctx, func() (err error) {
		listed, err = g.srcAdm.ListGroupsByType(ctx, []string{TypeShare})
		return err
	})
	if err != nil {
		return out, fmt.Errorf("list the source's share groups: %w", errNoShareGroups(g.m.cfg.Source.Name, err))
	}
	var names []string
	for _, l := range listed.Sorted() {
		// A broker before ListGroups v5 ignores the type filter and
		// lists every group without its type: none of them is known
		// to be a share group.
		if l.GroupType == TypeShare && g.m.cfg.ShareGroups.Selects(l.Group) {
			names = append(names, l.Group)
		}
	}
	if len(names) == 0 {
		if !g.noShareListed {
			g.log.Warn("share-group sync: no source share group matches the link's share_groups among those the source lists: Kafka lists only the groups the principal may describe, and a share group appears once a member joined it (see docs/acls.md)",
				"source", g.m.cfg.Source.Name, "principal", g.m.cfg.Source.Principal, "listed", len(listed))
			g.noShareListed = true
		}
		return out, nil
	}
	g.noShareListed = false
	tr, done, err := g.m.link.Translator(ctx)
	if err != nil {
		return out, fmt.Errorf("share-group sync: %w", err)
	}
	defer done()
	for _, name := range names {
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		out = append(out, g.shareGroup(ctx, name, tr))
	}
	return out, nil
}

// describeShare describes one share group at the destination, as describe
// does a consumer group: a group that does not exist is Dead, one the
// answer leaves out or answers with an error is unknown and left alone.
func (g *groupSync) describeShare(ctx context.Context, name string) (state string, members int, err error) {
	err = g.retryCoordinator(ctx, func() error {
		all, err := g.dstAdm.DescribeShareGroups(ctx, name)
		if se, ok := errors.AsType[*kadm.ShardErrors](err); ok && len(se.Errs) == 1 {
			err = se.Errs[0].Err
		}
		if err != nil {
			return err
		}
		d, ok := all[name]
		if !ok {
			return errNotDescribed
		}
		state, members = d.GroupState, len(d.Members)
		return d.Err
	})
	if errors.Is(err, kerr.GroupIDNotFound) {
		return "Dead", 0, nil
	}
	return state, members, err
}

// shareGroup syncs one share group.
func (g *groupSync) shareGroup(ctx context.Context, name string, tr translate.Func) GroupStatus {
	state, members, err := g.describeShare(ctx, name)
	st := GroupStatus{Group: name, Type: TypeShare, At: g.m.now(), Members: members, DstState: state, Partitions: []GroupPartitionSync{}}
	fail := func(err error) GroupStatus {
		st.State, st.Error = GroupFailed, err.Error()
		if ctx.Err() != nil {
			return st
		}
		g.m.met.errors.Inc()
		g.log.Warn("share-group sync: share group not synced this round", "group", name, "error", err)
		return st
	}
	if err != nil {
		return fail(fmt.Errorf("describe share group %q at the destination: %w; not knowing whether it has members there, share-group sync leaves it alone", name,
			g.m.cfg.Destination.RefusedGroup(kmsg.ACLOperationDescribe, name, WhyDstShareDescribe, errNoShareGroups(g.m.cfg.Destination.Name, err))))
	}
	active := members > 0 || state != "Empty" && state != "Dead"
	var gt translate.GroupOffsets
	err = g.retryCoordinator(ctx, func() (err error) {
		gt, err = translate.ShareGroup(ctx, g.srcAdm, name, g.m.cfg.Selects, tr)
		return err
	})
	if err != nil {
		return fail(g.m.cfg.Source.RefusedGroup(kmsg.ACLOperationDescribe, name, WhySrcShareDescribe, errNoShareGroups(g.m.cfg.Source.Name, err)))
	}
	for _, p := range gt.Partitions {
		if p.Err != nil {
			g.m.met.errors.Inc()
		} else {
			g.m.met.translated.Inc()
		}
	}
	dst := map[tp.Key]int64{}
	if !active {
		var offs kadm.DescribedShareGroupsOffsets
		err := g.retryCoordinator(ctx, func() (err error) {
			offs, err = g.dstAdm.DescribeShareGroupOffsets(ctx, name)
			if err == nil {
				err = offs[name].Err
			}
			return err
		})
		if errors.Is(err, kerr.GroupIDNotFound) {
			offs, err = nil, nil // nothing set there yet
		}
		if err != nil {
			return fail(fmt.Errorf("describe the start offsets of share group %q at the destination: %w", name,
				g.m.cfg.Destination.RefusedGroup(kmsg.ACLOperationDescribe, name, WhyDstShareDescribe, err)))
		}
		for topic, ps := range offs[name].Offsets {
			for p, o := range ps {
				if o.Err == nil && o.StartOffset >= 0 {
					dst[tp.Key{Topic: topic, Partition: p}] = o.StartOffset
				}
			}
		}
	}
	commits, parts, planned := planGroup(gt, dst, active)
	st.Partitions, st.State = parts, planned
	for _, p := range parts {
		if p.Error != "" && st.Error == "" {
			st.Error = fmt.Sprintf("%s[%d]: %s", p.SourceTopic, p.Partition, p.Error)
		}
	}
	if len(commits) > 0 {
		os := kadm.Offsets{}
		for _, o := range commits {
			os.Add(o)
		}
		var failed map[tp.Key]error
		err := g.retryCoordinator(ctx, func() error {
			if !g.m.link.Live() {
				return ErrNotLive
			}
			resp, err := g.dstAdm.AlterShareGroupOffsets(ctx, name, os)
			if err != nil {
				return err
			}
			failed = map[tp.Key]error{}
			resp.EachError(func(t string, p int32, err error) { failed[tp.Key{Topic: t, Partition: p}] = err })
			return nil
		})
		for i := range st.Partitions {
			p := &st.Partitions[i]
			if p.Action != ActionCommitted {
				continue
			}
			perr := err
			if perr == nil {
				perr = failed[tp.Key{Topic: p.DestinationTopic, Partition: p.Partition}]
			}
			if perr == nil {
				continue
			}
			p.Action, p.Error, p.DestinationCommitted = ActionFailed, perr.Error(), -1
			if cur, ok := dst[tp.Key{Topic: p.DestinationTopic, Partition: p.Partition}]; ok {
				p.DestinationCommitted = cur
			}
			if err == nil {
				err = perr
			}
		}
		if err != nil {
			// NON_EMPTY_GROUP: a member joined in between.
			return fail(fmt.Errorf("set the start offsets of share group %q at the destination: %w", name,
				g.m.cfg.Destination.RefusedGroup(kmsg.ACLOperationRead, name, WhyDstShareRead, err)))
		}
		g.log.Info("share group start offsets synced", "group", name,
			"partitions", len(commits), "topics", slices.Compact(topicsOf(commits)))
	}
	if st.State != GroupFailed {
		g.m.met.synced.Inc()
	}
	return st
}

// topicsOf is the topics of os, in order.
func topicsOf(os []kadm.Offset) []string {
	out := make([]string, 0, len(os))
	for _, o := range os {
		out = append(out, o.Topic)
	}
	slices.Sort(out)
	return out
}
