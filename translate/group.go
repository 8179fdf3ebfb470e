package translate

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kadm"
)

// Translation of a consumer group's committed offsets (DESIGN §13): each
// offset the source group committed on a partition the link mirrors,
// translated as any other position. `mirrord offsets translate --group`
// and the group offset sync use it.

// GroupOffset is a source group's committed offset on one partition and
// its translation; Error is set instead when it could not be translated.
type GroupOffset struct {
	Result
	// Metadata is what the group committed with the offset.
	Metadata string `json:"metadata"`
	// LeaderEpoch is the source leader epoch committed with it (-1:
	// none); it means nothing at the destination and is not carried over.
	LeaderEpoch int32  `json:"source_leader_epoch"`
	Error       string `json:"error,omitempty"`
	// Err is the translation's error, nil if it was translated (Error
	// spells it).
	Err error `json:"-"`
}

// GroupOffsets is a group's committed offsets on the partitions a link
// mirrors, by topic and partition.
type GroupOffsets struct {
	Group      string        `json:"group"`
	Partitions []GroupOffset `json:"partitions"`
}

// Failed counts the offsets that were not translated.
func (g GroupOffsets) Failed() int {
	n := 0
	for _, p := range g.Partitions {
		if p.Err != nil {
			n++
		}
	}
	return n
}

// Group fetches group's committed offsets at the source and
// translates those on topics the link selects with tr. An offset committed
// as -1 (none) is left out.
func Group(ctx context.Context, adm *kadm.Client, group string, selects func(string) bool,
	tr Func,
) (GroupOffsets, error) {
	out := GroupOffsets{Group: group, Partitions: []GroupOffset{}}
	offs, err := adm.FetchOffsets(ctx, group)
	if err == nil {
		err = offs.Error()
	}
	if err != nil {
		return out, fmt.Errorf("fetch the committed offsets of group %q at the source: %w", group, err)
	}
	offs.Each(func(o kadm.OffsetResponse) {
		if !selects(o.Topic) || o.At < 0 {
			return
		}
		t, err := tr(ctx, o.Topic, o.Partition, o.At)
		g := GroupOffset{Result: t, Metadata: o.Metadata, LeaderEpoch: o.LeaderEpoch, Err: err}
		g.SourceTopic, g.Partition, g.SourceOffset = o.Topic, o.Partition, o.At
		if err != nil {
			g.Error = err.Error()
		}
		out.Partitions = append(out.Partitions, g)
	})
	slices.SortFunc(out.Partitions, func(a, b GroupOffset) int {
		return cmp.Or(cmp.Compare(a.SourceTopic, b.SourceTopic), cmp.Compare(a.Partition, b.Partition))
	})
	return out, nil
}

// Func translates one source position of a partition the link mirrors.
type Func func(ctx context.Context, topic string, partition int32, offset int64) (Result, error)

// ShareGroup reads share group group's share-partition start offsets at
// the source (DescribeShareGroupOffsets, KIP-932: every record below a
// partition's start offset was acknowledged, and the group delivers the
// records from it on that it has not acknowledged) and translates those on
// topics the link selects with tr, as Group translates committed offsets:
// the destination offset a share group there starts at to deliver every
// record at or above the start offset and none below it. A partition
// without a start offset (-1: the group has not read it) is left out.
func ShareGroup(ctx context.Context, adm *kadm.Client, group string, selects func(string) bool,
	tr Func,
) (GroupOffsets, error) {
	out := GroupOffsets{Group: group, Partitions: []GroupOffset{}}
	all, err := adm.DescribeShareGroupOffsets(ctx, group)
	d, ok := all[group]
	switch {
	case err != nil:
	case !ok:
		err = fmt.Errorf("the answer does not hold the group")
	default:
		err = d.Err
	}
	if err != nil {
		return out, fmt.Errorf("describe the start offsets of share group %q at the source: %w", group, err)
	}
	for topic, ps := range d.Offsets {
		for p, o := range ps {
			if !selects(topic) || o.StartOffset < 0 {
				continue
			}
			if o.Err != nil {
				g := GroupOffset{Result: Result{SourceTopic: topic, Partition: p, SourceOffset: -1, SourceBatch: -1, DestinationBatch: -1},
					LeaderEpoch: -1, Err: o.Err, Error: o.Err.Error()}
				out.Partitions = append(out.Partitions, g)
				continue
			}
			t, err := tr(ctx, topic, p, o.StartOffset)
			g := GroupOffset{Result: t, LeaderEpoch: o.LeaderEpoch, Err: err}
			g.SourceTopic, g.Partition, g.SourceOffset = topic, p, o.StartOffset
			if err != nil {
				g.Error = err.Error()
			}
			out.Partitions = append(out.Partitions, g)
		}
	}
	slices.SortFunc(out.Partitions, func(a, b GroupOffset) int {
		return cmp.Or(cmp.Compare(a.SourceTopic, b.SourceTopic), cmp.Compare(a.Partition, b.Partition))
	})
	return out, nil
}
