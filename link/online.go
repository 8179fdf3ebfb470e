package link

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/seed83556561/mirrord/failover"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/slots"
	"github.com/seed83556561/mirrord/statestore"
	"github.com/seed83556561/mirrord/translate"
)

// online is what a running session offers to other goroutines: queries run
// on the link goroutine against its pipeline, and the readers of both
// clusters that its translations use. Link.online holds it while the session's event loop runs.
type online struct {
	queries chan query
	done    chan struct{} // closed when the event loop returned
	logs    *translate.Logs
	// discover asks the event loop for a topic discovery now (a buffer
	// of one: a request while one waits is the same request).
	discover chan struct{}
	// leaseValid reports whether the session still holds its lease
	// (statestore.Session.LeaseValid, safe from any goroutine).
	leaseValid func(now time.Time) bool
}

// query is a function the link goroutine runs with the session's
// partitions; done is closed when it ran.
type query struct {
	fn   func(partitions)
	done chan struct{}
}

// partitions is what a query reads of a running session: the pipeline of
// a preserve session, the plan of a transactional one.
type partitions interface {
	// Anchor is what the session knows of a source partition for offset
	// translation, copied; false if it does not mirror it.
	Anchor(src tp.Key) (translate.Anchor, bool)
	// Pairs is every partition the session mirrors, in the order they
	// joined.
	Pairs() []Pair
}

// errSessionEnded: the session ended before it answered.
var errSessionEnded = errors.New("the link's session ended")

// ask runs fn on the link goroutine with the session's partitions and
// waits until it ran. fn must only read them and copy what it keeps.
func (o *online) ask(ctx context.Context, fn func(partitions)) error {
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
// the state topic and both clusters with clients of its own (NewOffline).
func (l *Link) Translate(ctx context.Context, topic string, partition int32, offset int64) (translate.Result, error) {
	if o := l.online.Load(); o != nil {
		var (
			a  translate.Anchor
			ok bool
		)
		err := o.ask(ctx, func(pl partitions) { a, ok = pl.Anchor(tp.Key{Topic: topic, Partition: partition}) })
		switch {
		case err == nil && ok:
			return o.logs.Translate(ctx, a, offset)
		case err == nil && !l.cfg.Link.Selects(topic):
			return translate.Result{SourceTopic: topic, Partition: partition, SourceOffset: offset, SourceBatch: -1, DestinationBatch: -1},
				fmt.Errorf("translate %s[%d] offset %d: %w: link %s does not select topic %q", topic, partition, offset, translate.ErrNotMirrored, l.Name(), topic)
		case ctx.Err() != nil:
			return translate.Result{}, ctx.Err()
		}
		// The session ended, or does not mirror the partition yet:
		// what the state topic says decides.
	}
	t, err := NewOffline(ctx, l.cfg, l.deps)
	if err != nil {
		return translate.Result{}, fmt.Errorf("translate %s[%d] offset %d: %w", topic, partition, offset, err)
	}
	defer t.Close()
	return t.Translate(ctx, topic, partition, offset)
}

// NewOffline is a translator of the link's positions that needs no session:
// it reads the link's state topic and both clusters (translate.Offline).
// deps gives the clients' options and, optionally, the clock.
func NewOffline(ctx context.Context, cfg Config, deps Deps) (*translate.Offline, error) {
	l := cfg.Link
	return translate.NewOffline(ctx, translate.OfflineConfig{
		Link: l.Name, StateTopic: l.StateTopic,
		Selects:          l.Selects,
		DestinationTopic: func(source string) string { return l.DestinationTopic(source, cfg.Source.Name) },
		SourceName:       cfg.Source.Name, DestinationName: cfg.Destination.Name,
		SourceClusterID: cfg.Source.ClusterID, DestinationClusterID: cfg.Destination.ClusterID,
		SkipUnattributed: l.SkipUnattributed, ReturnHome: l.ReturnHome,
		SourceOpts: deps.SourceOpts, DestinationOpts: deps.DestinationOpts,
		Now: deps.Now, Stamped: l.Delivery == statestore.DeliveryTransactional,
	})
}

// moverView is the link as its failover.Mover sees it: the state, whether
// the session here is the live one, a pause, the running session's anchors
// and translation; nothing of the session or the pipeline beyond that.
type moverView struct{ l *Link }

func (v moverView) State() State { return v.l.State() }

// Live reports whether this agent's session of the link is the live one:
// MIRRORING, and still holding its lease. A preserve session fenced by
// another agent's stays MIRRORING until its next state commit fails, but
// its lease lapses before the other session reconciles (it waits the lease
// out), so the two are never live at once. A transactional session fenced
// by another's InitProducerId (which waits for no lease) stays live until
// its next append or commit is refused, at most a third of the lease when
// it is idle: for that long two agents may run group sync rounds (each
// commits only forward; a round that read the destination before the
// other's commit can still move a group back to its own, older,
// translation). A standby (PREPARING or FAILED) and a
// paused link run no session.
func (v moverView) Live() bool {
	o := v.l.online.Load()
	return o != nil && v.l.State() == Mirroring && o.leaseValid(v.l.deps.Now())
}

func (v moverView) Pause() { v.l.Pause() }

func (v moverView) Pausing() bool { return v.l.pausing() }

// GrantACLWrite has the ACL sync grant WRITE (Link.GrantACLWrite).
func (v moverView) GrantACLWrite(ctx context.Context) (failover.ACLGrant, error) {
	return v.l.GrantACLWrite(ctx)
}

// Discover asks the running session to look for new topics and
// partitions now; the partitions it finds show in Anchors once they are
// placed.
func (v moverView) Discover(ctx context.Context) error {
	o := v.l.online.Load()
	if o == nil {
		return errors.New("the link runs no session")
	}
	select {
	case o.discover <- struct{}{}:
	default: // one is asked for already
	}
	return nil
}

func (v moverView) Translate(ctx context.Context, topic string, partition int32, offset int64) (translate.Result, error) {
	return v.l.Translate(ctx, topic, partition, offset)
}

// Anchors asks the running session for the anchor of every partition it
// mirrors, in the order they joined.
func (v moverView) Anchors(ctx context.Context) ([]translate.Anchor, error) {
	o := v.l.online.Load()
	if o == nil {
		return nil, errors.New("the link runs no session")
	}
	var anchors []translate.Anchor
	if err := o.ask(ctx, func(pl partitions) {
		for _, pr := range pl.Pairs() {
			if a, ok := pl.Anchor(pr.Src.Key()); ok {
				anchors = append(anchors, a)
			}
		}
	}); err != nil {
		return nil, err
	}
	return anchors, nil
}

// Translator is how a round of translations translates: through the
// running session's window and positions. With no session running there is
// no round to translate for (group sync runs only in the live session).
//
// With slots (slot 0's Link runs the group sync), the partitions of the
// other slots are translated as `mirrord offsets translate` does
// (NewOffline): from the latest checkpoint of the link's sessions in the
// state topic, read once per round when the round first needs it, and
// forward over both clusters' logs from there. Their sessions run in other
// agents, so only what they committed to the state topic and the
// destination is known here; a translation is never past what the
// destination holds (translate.Logs).
func (v moverView) Translator(ctx context.Context) (translate.Func, func(), error) {
	l := v.l
	if l.online.Load() == nil {
		return nil, nil, errors.New("the link runs no session")
	}
	if !l.slotted() {
		return l.Translate, func() {}, nil
	}
	var (
		mu     sync.Mutex
		off    *translate.Offline
		offErr error
	)
	offline := func(ctx context.Context) (*translate.Offline, error) {
		mu.Lock()
		defer mu.Unlock()
		if off == nil && offErr == nil {
			off, offErr = NewOffline(ctx, l.cfg, l.deps)
		}
		return off, offErr
	}
	tr := func(ctx context.Context, topic string, partition int32, offset int64) (translate.Result, error) {
		if l.owns(topic, partition) {
			return l.Translate(ctx, topic, partition, offset)
		}
		o, err := offline(ctx)
		if err != nil {
			return translate.Result{}, fmt.Errorf("translate %s[%d] offset %d (slot %d's): %w", topic, partition, offset, slots.Of(topic, partition, l.cfg.Link.Slots), err)
		}
		return o.Translate(ctx, topic, partition, offset)
	}
	done := func() {
		mu.Lock()
		defer mu.Unlock()
		if off != nil {
			off.Close()
		}
		off, offErr = nil, errors.New("the round is over")
	}
	return tr, done, nil
}
