package link

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seed83556561/mirrord/internal/kafka/leaders"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/statestore"
	"github.com/seed83556561/mirrord/transform"
)

// Translator translates source positions of one link with nothing but the
// link's configuration: it reads the link's state topic once for the
// checkpoints and salts, and both clusters for the batches (translate.go).
// `mirrord offsets translate` uses it, and so does a Link that has no
// session running (Link.Translate). A Translator holds two clients and no
// goroutine; Close releases them. It is safe for concurrent use.
type Translator struct {
	cfg      Config
	src, dst *kgo.Client
	srcAdm   *kadm.Client
	tr       *translator
	view     *statestore.View
}

// NewTranslator connects to the link's clusters, learns the source
// cluster's ID and replays the link's state topic. deps gives the clients'
// options (Deps.SourceOpts, DestinationOpts) and, optionally, the clock.
func NewTranslator(ctx context.Context, cfg Config, deps Deps) (_ *Translator, err error) {
	if deps.Now == nil {
		deps.Now = time.Now
	}
	t := &Translator{cfg: cfg}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	if t.src, err = kgo.NewClient(deps.SourceOpts...); err != nil {
		return nil, fmt.Errorf("source cluster %s client: %w", cfg.Source.Name, err)
	}
	if t.dst, err = kgo.NewClient(deps.DestinationOpts...); err != nil {
		return nil, fmt.Errorf("destination cluster %s client: %w", cfg.Destination.Name, err)
	}
	t.srcAdm = kadm.NewClient(t.src)
	srcID, err := clusterID(ctx, t.srcAdm, cfg.Source.Name, cfg.Source.ClusterID)
	if err != nil {
		return nil, err
	}
	region, _ := transform.RegionOf(srcID)
	t.tr = &translator{
		src: t.src, dst: t.dst, srcLeaders: leaders.New(t.src, 0), dstLeaders: leaders.New(t.dst, 0),
		source: source{cluster: srcID, region: region}, now: deps.Now,
	}
	if t.view, err = statestore.ReadView(ctx, cfg.Link.StateTopic, deps.DestinationOpts); err != nil {
		return nil, fmt.Errorf("read the link's state topic %q on cluster %s: %w", cfg.Link.StateTopic, cfg.Destination.Name, err)
	}
	return t, nil
}

// Close closes the clients.
func (t *Translator) Close() {
	if t.src != nil {
		t.src.Close()
	}
	if t.dst != nil {
		t.dst.Close()
	}
}

// Source is the source cluster's client, for callers that read groups.
func (t *Translator) Source() *kadm.Client { return t.srcAdm }

// Translate translates source position offset of topic's partition.
func (t *Translator) Translate(ctx context.Context, topic string, partition int32, offset int64) (Translation, error) {
	a, err := t.anchor(ctx, tp.Key{Topic: topic, Partition: partition})
	if err != nil {
		return Translation{SourceTopic: topic, Partition: partition, SourceOffset: offset, SourceBatch: -1, DestinationBatch: -1},
			fmt.Errorf("translate %s[%d] offset %d: %w", topic, partition, offset, err)
	}
	return t.tr.translate(ctx, a, offset)
}

// anchor is what the state topic knows of a source partition: its pair and
// the link's checkpoint of it.
func (t *Translator) anchor(ctx context.Context, src tp.Key) (Anchor, error) {
	l := &t.cfg.Link
	if !l.Selects(src.Topic) {
		return Anchor{}, fmt.Errorf("%w: link %s does not select topic %q (see its topics include and exclude)", ErrNotMirrored, l.Name, src.Topic)
	}
	pr, err := pairOf(ctx, t.tr, l.DestinationTopic(src.Topic, t.cfg.Source.Name), src)
	if err != nil {
		return Anchor{}, err
	}
	a := Anchor{Pair: pr, SrcNext: -1, DstNext: -1, CkSrc: -1, CkDst: -1, Salts: map[transform.Origin]int64{}}
	ck, ok := t.view.Checkpoints[statestore.CheckpointKey{LinkName: l.Name, TopicID: statestore.UUID(pr.Dst.ID), Partition: pr.Dst.Partition}]
	if ok && sameSource(&ck, pr.Src) {
		a.SrcNext, a.DstNext = ck.SourceNextOffset, ck.DestNextOffset
		a.CkSrc, a.CkDst = ck.SourceNextOffset, ck.DestNextOffset
		a.Producers = producerEntries(ck.Producers)
	}
	for k, v := range t.view.Salts {
		if k.TopicID == statestore.UUID(pr.Dst.ID) && k.Partition == pr.Dst.Partition {
			a.Salts[transform.Origin{Cluster: k.SourceClusterID, PID: k.OriginalPID}] = v.Salt
		}
	}
	return a, nil
}

// pairOf names the partition pair of source partition src mirrored into
// destination topic dst, with both topic IDs; either side missing is
// ErrNotMirrored.
func pairOf(ctx context.Context, tr *translator, dst string, src tp.Key) (Pair, error) {
	sl, err := tr.srcLeaders.Lookup(ctx, src)
	if err != nil {
		if errors.Is(err, leaders.ErrUnknownPartition) {
			return Pair{}, fmt.Errorf("%w: the source has no partition %s[%d]", ErrNotMirrored, src.Topic, src.Partition)
		}
		return Pair{}, err
	}
	dk := tp.Key{Topic: dst, Partition: src.Partition}
	dl, err := tr.dstLeaders.Lookup(ctx, dk)
	if err != nil {
		if errors.Is(err, leaders.ErrUnknownPartition) {
			return Pair{}, fmt.Errorf("%w: the destination has no partition %s[%d] yet", ErrNotMirrored, dst, src.Partition)
		}
		return Pair{}, err
	}
	return Pair{
		Src: tp.Partition{Topic: src.Topic, ID: sl.ID, Partition: src.Partition},
		Dst: tp.Partition{Topic: dst, ID: dl.ID, Partition: src.Partition},
	}, nil
}

// ---- translation in a running session ----

// online is what a running session offers to other goroutines: queries run
// on the link goroutine against its pipeline, and a translator over its
// clients. Link.online holds it while the session's event loop runs.
type online struct {
	queries chan query
	done    chan struct{} // closed when the event loop returned
	tr      *translator
}

// query is a function the link goroutine runs with the pipeline; done is
// closed when it ran.
type query struct {
	fn   func(*Pipeline)
	done chan struct{}
}

// errSessionEnded: the session ended before it answered.
var errSessionEnded = errors.New("the link's session ended")

// ask runs fn on the link goroutine with the session's pipeline and waits
// until it ran. fn must only read the pipeline and copy what it keeps.
func (o *online) ask(ctx context.Context, fn func(*Pipeline)) error {
	q := query{fn: fn, done: make(chan struct{})}
	select {
	case o.queries <- q:
	case <-o.done:
		return errSessionEnded
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-q.done:
		return nil
	case <-o.done:
		return errSessionEnded
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Translate translates source position offset of topic's partition. While
// the link mirrors, the translation starts from its session's window and
// positions and reads through the session's clients; otherwise it reads
// the state topic and both clusters with clients of its own (NewTranslator).
func (l *Link) Translate(ctx context.Context, topic string, partition int32, offset int64) (Translation, error) {
	if o := l.online.Load(); o != nil {
		var (
			a  Anchor
			ok bool
		)
		err := o.ask(ctx, func(pl *Pipeline) { a, ok = pl.Anchor(tp.Key{Topic: topic, Partition: partition}) })
		switch {
		case err == nil && ok:
			return o.tr.translate(ctx, a, offset)
		case err == nil && !l.cfg.Link.Selects(topic):
			return Translation{SourceTopic: topic, Partition: partition, SourceOffset: offset, SourceBatch: -1, DestinationBatch: -1},
				fmt.Errorf("translate %s[%d] offset %d: %w: link %s does not select topic %q", topic, partition, offset, ErrNotMirrored, l.Name(), topic)
		case ctx.Err() != nil:
			return Translation{}, ctx.Err()
		}
		// The session ended, or does not mirror the partition yet:
		// what the state topic says decides.
	}
	t, err := NewTranslator(ctx, l.cfg, l.deps)
	if err != nil {
		return Translation{}, fmt.Errorf("translate %s[%d] offset %d: %w", topic, partition, offset, err)
	}
	defer t.Close()
	return t.Translate(ctx, topic, partition, offset)
}
