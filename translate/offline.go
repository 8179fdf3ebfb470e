package translate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/barrier"
	"github.com/seed83556561/mirrord/internal/kafka/leaders"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/statestore"
	"github.com/seed83556561/mirrord/transform"
	"github.com/seed83556561/mirrord/twin"
)

// OfflineConfig is what an Offline needs of a link: which topics it
// mirrors and under which names, where its state topic is, and how to
// reach both clusters.
type OfflineConfig struct {
	Link       string
	StateTopic string // on the destination cluster
	// Selects reports whether the link mirrors a source topic;
	// DestinationTopic names the mirror of one.
	Selects          func(topic string) bool
	DestinationTopic func(source string) string
	// SourceName and DestinationName are the cluster blocks' labels, for
	// errors; SourceClusterID and DestinationClusterID pin the clusters'
	// IDs ("" = ask them).
	SourceName, DestinationName           string
	SourceClusterID, DestinationClusterID string
	// SkipUnattributed and ReturnHome are the link's policies for the
	// batches it does not send (transform.Returns, DESIGN §16).
	SkipUnattributed, ReturnHome bool
	// SourceOpts and DestinationOpts reach the clusters (seed brokers, TLS,
	// SASL).
	SourceOpts, DestinationOpts []kgo.Opt
	Now                         func() time.Time // nil: time.Now
	// Stamped: the link delivers transactionally (Logs.Stamped).
	Stamped bool
}

// Offline translates source positions of one link with nothing but the
// link's configuration, while no session of it runs: it reads the link's
// state topic once for the checkpoints and salts, and both clusters for the
// batches. `mirrord offsets translate` uses it, and so does a link that has
// no session running. An Offline holds two clients and no goroutine; Close
// releases them. It is safe for concurrent use.
type Offline struct {
	cfg      OfflineConfig
	src, dst *kgo.Client
	srcAdm   *kadm.Client
	logs     *Logs
	view     *statestore.View
	origins  *statestore.Origins // nil when the link checks no origin
}

// NewOffline connects to the link's clusters, learns the source cluster's
// ID and replays the link's state topic.
func NewOffline(ctx context.Context, cfg OfflineConfig) (_ *Offline, err error) {
	o := &Offline{cfg: cfg}
	defer func() {
		if err != nil {
			o.Close()
		}
	}()
	if o.src, err = kgo.NewClient(cfg.SourceOpts...); err != nil {
		return nil, fmt.Errorf("source cluster %s client: %w", cfg.SourceName, err)
	}
	if o.dst, err = kgo.NewClient(cfg.DestinationOpts...); err != nil {
		return nil, fmt.Errorf("destination cluster %s client: %w", cfg.DestinationName, err)
	}
	o.srcAdm = kadm.NewClient(o.src)
	srcID, err := leaders.ClusterID(ctx, o.src, cfg.SourceName, cfg.SourceClusterID)
	if err != nil {
		return nil, err
	}
	dstID, err := leaders.ClusterID(ctx, o.dst, cfg.DestinationName, cfg.DestinationClusterID)
	if err != nil {
		return nil, err
	}
	region, _ := transform.RegionOf(srcID)
	returns := transform.ReturnsOf(srcID, dstID, cfg.ReturnHome, cfg.SkipUnattributed)
	source := NewCluster(o.src)
	if returns.Check {
		// Batches a transactional link from the destination appended at
		// the source are not sent back (DESIGN §16).
		if o.origins, err = statestore.NewOrigins(statestore.OriginsConfig{Topic: cfg.StateTopic, SourceOpts: cfg.SourceOpts,
			SourceClusterID: srcID, DestinationClusterID: dstID, Strict: cfg.SkipUnattributed}); err != nil {
			return nil, err
		}
		returns.Sessions, source = o.origins.Sessions(), source.Screened(o.origins.Learn)
	}
	o.logs = &Logs{
		Source: source, Destination: NewCluster(o.dst),
		From: twin.Source{Cluster: srcID, Region: region, Returns: returns},
		Now:  cfg.Now, Stamped: cfg.Stamped,
	}
	if o.origins != nil {
		o.logs.Reverse = o.origins.Reverse
	}
	if o.view, err = statestore.ReadView(ctx, cfg.StateTopic, cfg.DestinationOpts); err != nil {
		return nil, fmt.Errorf("read the link's state topic %q on cluster %s: %w", cfg.StateTopic, cfg.DestinationName, err)
	}
	return o, nil
}

// Close closes the clients.
func (o *Offline) Close() {
	if o.src != nil {
		o.src.Close()
	}
	if o.dst != nil {
		o.dst.Close()
	}
	if o.origins != nil {
		o.origins.Close()
	}
}

// Translate translates source position offset of topic's partition.
func (o *Offline) Translate(ctx context.Context, topic string, partition int32, offset int64) (Result, error) {
	a, err := o.anchor(ctx, tp.Key{Topic: topic, Partition: partition})
	if err != nil {
		return Result{SourceTopic: topic, Partition: partition, SourceOffset: offset, SourceBatch: -1, DestinationBatch: -1},
			fmt.Errorf("translate %s[%d] offset %d: %w", topic, partition, offset, err)
	}
	return o.logs.Translate(ctx, a, offset)
}

// Group translates the committed offsets of source group group on the
// partitions the link mirrors.
func (o *Offline) Group(ctx context.Context, group string) (GroupOffsets, error) {
	return Group(ctx, o.srcAdm, group, o.cfg.Selects, o.Translate)
}

// anchor is what the state topic knows of a source partition: its pair and
// the link's checkpoint of it.
func (o *Offline) anchor(ctx context.Context, src tp.Key) (Anchor, error) {
	if !o.cfg.Selects(src.Topic) {
		return Anchor{}, fmt.Errorf("%w: link %s does not select topic %q (see its topics include and exclude)", ErrNotMirrored, o.cfg.Link, src.Topic)
	}
	pr, err := o.logs.Pair(ctx, o.cfg.DestinationTopic(src.Topic), src)
	if err != nil {
		return Anchor{}, err
	}
	a := Anchor{Pair: pr, SrcNext: -1, DstNext: -1, CkSrc: -1, CkDst: -1, Salts: map[transform.Origin]int64{}}
	// The link's own checkpoint, or with slots the latest of its slots'
	// sessions.
	ck, _, ok := o.view.LatestCheckpoint(o.cfg.Link, o.cfg.Link, statestore.UUID(pr.Dst.ID), pr.Dst.Partition)
	if ok && ck.IsOf(pr.Src) {
		a.SrcNext, a.DstNext = ck.SourceNextOffset, ck.DestNextOffset
		a.CkSrc, a.CkDst = ck.SourceNextOffset, ck.DestNextOffset
		a.Producers = statestore.ProducerEntries(ck.Producers)
	}
	for _, s := range barrier.Salts(o.view)[barrier.Partition{TopicID: statestore.UUID(pr.Dst.ID), Partition: pr.Dst.Partition}] {
		a.Salts[s.Origin] = s.Salt
	}
	return a, nil
}

// Pair names the partition pair of source partition src mirrored into
// destination topic dst, with both topic IDs; either side missing is
// ErrNotMirrored.
func (lg *Logs) Pair(ctx context.Context, dst string, src tp.Key) (tp.Pair, error) {
	sl, err := lg.Source.leaders.Lookup(ctx, src)
	if err != nil {
		if errors.Is(err, leaders.ErrUnknownPartition) {
			return tp.Pair{}, fmt.Errorf("%w: the source has no partition %s[%d]", ErrNotMirrored, src.Topic, src.Partition)
		}
		return tp.Pair{}, err
	}
	dk := tp.Key{Topic: dst, Partition: src.Partition}
	dl, err := lg.Destination.leaders.Lookup(ctx, dk)
	if err != nil {
		if errors.Is(err, leaders.ErrUnknownPartition) {
			return tp.Pair{}, fmt.Errorf("%w: the destination has no partition %s[%d] yet", ErrNotMirrored, dst, src.Partition)
		}
		return tp.Pair{}, err
	}
	return tp.Pair{
		Src: tp.Partition{Topic: src.Topic, ID: sl.ID, Partition: src.Partition},
		Dst: tp.Partition{Topic: dst, ID: dl.ID, Partition: src.Partition},
	}, nil
}
