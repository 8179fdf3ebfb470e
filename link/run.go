package link

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seed83556561/mirrord/internal/backoff"
	"github.com/seed83556561/mirrord/internal/kafka/access"
	"github.com/seed83556561/mirrord/internal/kafka/leaders"
	"github.com/seed83556561/mirrord/internal/kafka/tp"
	"github.com/seed83556561/mirrord/transform"
	"github.com/seed83556561/mirrord/twin"
)

// sessionEnd is how a session ended, for the next one.
type sessionEnd struct {
	unresolved int // appends in flight or of unknown outcome when it ended
}

// tickInterval is how often the pipeline gets InTick and the status is
// published.
const tickInterval = time.Second

// run steps the pipeline with what the fetcher, the appender, the committer
// and the workers report, and carries out its actions, until the session
// ends: ctx ends (EvStop after the drain and final checkpoint), an operator
// pauses (EvPause, likewise), or the session fails (EvFail with the error).
// mirroring is called when the initial partitions are admitted.
func (s *session) run(ctx context.Context, mirroring func() error) (Event, sessionEnd, error) {
	l := s.l
	ck := time.NewTicker(l.cfg.Link.CheckpointInterval)
	defer ck.Stop()
	disc := time.NewTicker(l.cfg.Link.DiscoveryInterval)
	defer disc.Stop()
	tick := time.NewTicker(tickInterval)
	defer tick.Stop()
	var (
		drain    <-chan time.Time
		stopping = EvStop // how the session ends once its stop is done
		stopped  bool
	)
	end := func() sessionEnd { return sessionEnd{unresolved: s.pipe.Unresolved()} }
	o := &online{queries: s.queries, done: make(chan struct{}), logs: s.logs}
	l.online.Store(o)
	defer func() {
		l.online.Store(nil)
		close(o.done)
	}()
	drainTimer := time.NewTimer(time.Hour)
	drainTimer.Stop()
	defer drainTimer.Stop()
	stop := func(ev Event, state State) stepped {
		if stopped {
			return stepped{}
		}
		stopped, stopping = true, ev
		drainTimer.Reset(l.cfg.ShutdownTimeout)
		drain = drainTimer.C
		return s.step(InStop{State: state})
	}
	done := ctx.Done()
	for {
		var ev Input
		select {
		case <-done:
			done = nil
			if l.crash != nil && l.crash() {
				return EvStop, end(), nil
			}
			if out := stop(EvStop, Stopped); out.ended {
				return out.result(stopping, end())
			}
			continue
		case c := <-l.ctl:
			if c == ctlPause {
				if out := stop(EvPause, Paused); out.ended {
					return out.result(stopping, end())
				}
			}
			continue
		case <-s.ctx.Done():
			return EvFail, end(), context.Cause(s.ctx)
		case r := <-s.fetch.Results():
			ev = InFetched{Result: r}
		case <-s.app.Results().Wake():
			for _, r := range s.app.Results().Take() {
				if out := s.step(InAppended{Result: r}); out.ended {
					return out.result(stopping, end())
				}
			}
			continue
		case <-s.events.Wake():
			for _, e := range s.events.Take() {
				if out := s.step(e); out.ended {
					return out.result(stopping, end())
				} else if out.mirroring {
					if err := mirroring(); err != nil {
						return EvFail, end(), err
					}
				}
			}
			continue
		case q := <-s.queries:
			q.fn(s.pipe)
			close(q.done)
			continue
		case <-ck.C:
			ev = InCheckpointDue{}
		case <-disc.C:
			ev = InDiscoveryDue{}
		case <-tick.C:
			s.publish()
			ev = InTick{}
		case <-drain:
			ev = InDrainTimeout{}
		}
		out := s.step(ev)
		if out.ended {
			return out.result(stopping, end())
		}
		if out.mirroring {
			if err := mirroring(); err != nil {
				return EvFail, end(), err
			}
		}
	}
}

// stepped is what one step asked of the session beyond its actions.
type stepped struct {
	ended     bool  // the session is over: DoFinish, DoFail or a refused submit
	err       error // DoFail
	mirroring bool  // DoEnterMirroring
}

func (o stepped) result(stopping Event, end sessionEnd) (Event, sessionEnd, error) {
	if o.err != nil {
		return EvFail, end, o.err
	}
	return stopping, end, nil
}

// step applies one event and carries out the actions it returns.
func (s *session) step(ev Input) stepped {
	var out stepped
	s.noteRefusal(ev)
	for _, a := range s.pipe.Step(s.l.deps.Now(), ev) {
		switch a := a.(type) {
		case DoAssign:
			s.fetch.Assign(a.Src, a.Offset, a.Gen)
		case DoUnassign:
			s.fetch.Unassign(a.Src)
		case DoRelease:
			s.fetch.Release(a.Pin)
		case DoSubmit:
			if err := s.app.Submit(a.Request); err != nil {
				// The pipeline keeps one batch per partition in the
				// appender, and the batch passed decide: a refusal
				// is a bug or a closed appender.
				out.ended, out.err = true, fmt.Errorf("destination %s: submit: %w", a.Request.Partition, err)
			}
		case DoSettle:
			s.work(func(ctx context.Context) Input { return s.settle(ctx, a) })
		case DoReadTail:
			s.work(func(ctx context.Context) Input { return s.readTail(ctx, a) })
		case DoLookupSourceEnd:
			s.work(func(ctx context.Context) Input { return s.sourceEnd(ctx, a.Src) })
		case DoCommit:
			select {
			case s.commits <- a:
			default:
				panic("link: a state commit while another is in flight")
			}
		case DoDiscover:
			s.work(func(ctx context.Context) Input { return s.discoverAll(ctx, a.Known) })
		case DoPlace:
			s.work(func(ctx context.Context) Input { return s.placeNew(ctx, a.Pairs) })
		case DoEnterMirroring:
			out.mirroring = true
		case DoFail:
			out.ended, out.err = true, a.Err
		case DoFinish:
			out.ended = true
		case DoLog:
			s.log.Log(a.Level, a.Msg, a.Args...)
		default:
			panic(fmt.Sprintf("link: pipeline action %T", a))
		}
	}
	s.report()
	if n := s.pipe.Len(); n != s.published || out.mirroring {
		s.publish() // the partition set changed: show it at once
	}
	return out
}

// noteRefusal shows a missing ACL that discovery or placement met while the
// link mirrors in the link's last_error: the link keeps mirroring what it
// has (the pipeline retries at the next discovery), but an operator must
// grant the permission for the new topic or partitions to be mirrored.
func (s *session) noteRefusal(ev Input) {
	var err error
	switch e := ev.(type) {
	case InDiscovered:
		err = e.Err
	case InPlaced:
		err = e.Err
	}
	if err == nil || !access.IsRefusal(err) {
		return
	}
	now := s.l.deps.Now()
	s.l.setStatus(func(st *Status) { st.LastError, st.LastErrorAt = err.Error(), now })
}

// work runs fn on a worker goroutine of the session and hands its event to
// the link goroutine.
func (s *session) work(fn func(ctx context.Context) Input) {
	s.g.Go(func() error {
		if ev := fn(s.ctx); ev != nil && s.ctx.Err() == nil {
			s.events.Put(ev)
		}
		return nil
	})
}

// committer runs the state transactions one at a time (a transactional
// producer has at most one transaction open). The final commit gets its
// own deadline: it runs after the agent's context ended.
func (s *session) committer() error {
	for {
		select {
		case <-s.ctx.Done():
			return nil
		case c := <-s.commits:
			var err error
			if c.Final {
				ctx, cancel := context.WithTimeout(s.ctx, s.l.cfg.ShutdownTimeout)
				err = s.sess.CommitStop(ctx, c.State, c.Unresolved, c.Records...)
				cancel()
			} else {
				err = s.sess.Commit(s.ctx, c.State, c.Records...)
			}
			s.events.Put(InCommitted{ID: c.ID, Err: err})
		}
	}
}

// settle finds out whether an append of unknown outcome landed (DESIGN §6):
// after the delay, it reads the partition's current leader from the offset
// the append would have got up to the high watermark, looking for the
// batch's twin. Not finding it is an answer only once the high watermark
// has reached the leader's log end (OffsetsForLeaderEpoch for the leader's
// epoch answers the log end offset, not the high watermark: Kafka's
// Partition.lastOffsetForLeaderEpoch with UnifiedLog.endOffsetForEpoch):
// a batch in the leader's log above the high watermark is still becoming
// visible while the in-sync replicas catch up, or the ISR shrinks (at most
// replica.lag.time.max.ms), and must be waited for. A batch on a former
// leader that its successor never got is truncated when the former leader
// follows again (Kafka truncates a follower to the leader's epoch end
// offset), so the current leader's log decides. It gives up after
// produce_timeout plus settle_delay of waiting for the high watermark.
func (s *session) settle(ctx context.Context, a DoSettle) Input {
	ev := InSettled{Dst: a.Dst.Key(), Tag: a.Tag, Offset: -1}
	if !s.settleWait(ctx, a) {
		return nil
	}
	patience := s.l.cfg.Link.ProduceTimeout + s.l.cfg.Link.SettleDelay
	give := time.Now().Add(patience)
	for attempt := 1; ; attempt++ {
		found, certain, err := s.settleOnce(ctx, a)
		switch {
		case err == nil && found >= 0:
			ev.Offset = found
			return ev
		case err == nil && certain:
			return ev
		case ctx.Err() != nil:
			return nil
		case time.Now().After(give):
			if err == nil {
				err = fmt.Errorf("the high watermark of %s did not reach its log end within %v: its in-sync replicas are behind", a.Dst, patience)
			}
			ev.Err = err
			return ev
		}
		if err != nil {
			s.dstLeaders.Invalidate(a.Dst.Key())
		}
		if backoff.Sleep(ctx, settleRetry.Wait(attempt)) != nil {
			return nil
		}
	}
}

// settleWait waits a.Delay before a settle, or less: from a.EarlyAfter on
// it looks up the partition's leader every leaderPoll and stops waiting
// once another broker leads under a newer epoch (leaderMoved). It reports
// false when ctx ended.
func (s *session) settleWait(ctx context.Context, a DoSettle) bool {
	if a.Delay <= 0 {
		return true
	}
	start := time.Now()
	if a.SentTo == nil || a.EarlyAfter >= a.Delay {
		return backoff.Sleep(ctx, a.Delay) == nil
	}
	if backoff.Sleep(ctx, a.EarlyAfter) != nil {
		return false
	}
	for {
		s.dstLeaders.Invalidate(a.Dst.Key())
		if ld, err := s.dstLeaders.Lookup(ctx, a.Dst.Key()); err == nil && leaderMoved(a.SentTo, ld) {
			s.log.Info("settling an unanswered append early: another broker leads the partition now, so the old leader can no longer append it",
				"destination", a.Dst.String(), "sent_to_broker", a.SentTo.Broker, "sent_leader_epoch", a.SentTo.Epoch,
				"leader", ld.Broker, "leader_epoch", ld.Epoch, "waited", time.Since(start).Round(time.Millisecond))
			return true
		}
		left := a.Delay - time.Since(start)
		if left <= 0 {
			return true
		}
		if backoff.Sleep(ctx, min(left, leaderPoll)) != nil {
			return false
		}
	}
}

// leaderPoll is how often settleWait looks for a new leader.
const leaderPoll = 250 * time.Millisecond

// settleRetry is the wait between looks at a partition being settled.
var settleRetry = backoff.Policy{First: 50 * time.Millisecond, Max: time.Second}

// settleOnce looks once: the twin's offset (or -1), and whether not finding
// it is certain (the high watermark is at the leader's log end).
func (s *session) settleOnce(ctx context.Context, a DoSettle) (found int64, certain bool, err error) {
	ld, err := s.dstLeaders.Lookup(ctx, a.Dst.Key())
	if err != nil {
		return -1, false, err
	}
	leo, err := logEnd(ctx, s.dst, a.Dst, ld)
	if err != nil {
		return -1, false, err
	}
	ends, err := s.dstAdm.ListEndOffsets(ctx, a.Dst.Topic)
	if err != nil {
		return -1, false, err
	}
	hw, err := offsetOf(ends, a.Dst, "destination end")
	if err != nil {
		return -1, false, err
	}
	tr := &tailReader{cl: s.dst, leaders: s.dstLeaders, p: a.Dst, pos: a.From, end: hw}
	for {
		batches, err := tr.next(ctx)
		if err != nil {
			return -1, false, err
		}
		if len(batches) == 0 {
			return -1, hw >= leo, nil
		}
		for _, b := range batches {
			if twin.Match(a.Want, b) {
				h, _ := transform.ParseHeader(b)
				return h.BaseOffset, true, nil
			}
		}
	}
}

// logEnd is the log end offset of a partition's leader: OffsetsForLeaderEpoch
// for the leader's current epoch answers the end offset of that epoch, which
// for the latest epoch is the log end offset (KIP-320 lets consumers ask it
// with DESCRIBE on the topic).
func logEnd(ctx context.Context, cl *kgo.Client, p tp.Partition, ld leaders.Leader) (int64, error) {
	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	req.ReplicaID = -1
	rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
	rt.Topic = p.Topic
	rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	rp.Partition = p.Partition
	rp.CurrentLeaderEpoch = ld.Epoch
	rp.LeaderEpoch = ld.Epoch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	kresp, err := cl.Broker(int(ld.Broker)).Request(ctx, req)
	if err != nil {
		return 0, fmt.Errorf("log end offset of %s from broker %d: %w", p, ld.Broker, err)
	}
	resp := kresp.(*kmsg.OffsetForLeaderEpochResponse)
	for _, t := range resp.Topics {
		for _, pp := range t.Partitions {
			if t.Topic != p.Topic || pp.Partition != p.Partition {
				continue
			}
			if err := kerr.ErrorForCode(pp.ErrorCode); err != nil {
				return 0, fmt.Errorf("log end offset of %s from broker %d: %w", p, ld.Broker, err)
			}
			return pp.EndOffset, nil
		}
	}
	return 0, fmt.Errorf("log end offset of %s from broker %d: the answer does not hold the partition", p, ld.Broker)
}

// readTail reads the next chunk of a destination tail for reconciliation.
func (s *session) readTail(ctx context.Context, a DoReadTail) Input {
	tr := &tailReader{cl: s.dst, leaders: s.dstLeaders, p: a.Dst, pos: a.From, end: a.End}
	batches, err := tr.next(ctx)
	return InTailRead{Dst: a.Dst.Key(), Batches: batches, Err: err}
}

// sourceEnd looks up a source partition's last stable offset.
func (s *session) sourceEnd(ctx context.Context, src tp.Partition) Input {
	offs, err := s.srcAdm.ListCommittedOffsets(ctx, src.Topic)
	ev := InSourceEnd{Src: src.Key()}
	if err == nil {
		ev.LSO, err = offsetOf(offs, src, "source last stable")
	}
	ev.Err = err
	return ev
}

// discoverAll lists the selected source topics, creating or growing their
// destination topics, and asks the source directly about every known
// partition the listing leaves out: only an answer that the topic does not
// exist, or exists under another topic ID, makes it gone (I6).
func (s *session) discoverAll(ctx context.Context, known []tp.Partition) Input {
	pairs, err := s.discover(ctx)
	if err != nil {
		return InDiscovered{Err: err}
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
		return InDiscovered{Pairs: pairs}
	}
	names := make([]string, 0, len(topics))
	for t := range topics {
		names = append(names, t)
	}
	resp, err := leaders.Metadata(ctx, s.src, names...)
	if err != nil {
		// Not an answer about the topics: nothing is gone.
		s.log.Warn("topic discovery: the listing leaves out partitions the link mirrors and the source could not be asked about them; keeping them", "topics", names, "error", err)
		return InDiscovered{Pairs: pairs}
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
	ev := InDiscovered{Pairs: pairs}
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
	parts, err := s.place(ctx, view, pairs)
	return InPlaced{Parts: parts, Err: err}
}

// report adds the pipeline's new counts to the link's totals and metrics.
func (s *session) report() {
	m := s.l.met
	for i := range counterTable {
		c := Counter(i)
		if now := s.pipe.Count(c); now != s.reported.Get(c) {
			m.add(c, now-s.reported.Get(c))
			s.reported.Add(c, now-s.reported.Get(c))
		}
	}
	for ; s.reportedDiscovery < s.pipe.DiscoveryFailures(); s.reportedDiscovery++ {
		m.error("discovery")
	}
}

// publish refreshes the status snapshot and the lag gauges.
func (s *session) publish() {
	ps := s.pipe.Partitions(s.l.deps.Now())
	var total int64
	var lagSeconds *float64
	for _, p := range ps {
		total += p.Lag
		if len(ps) <= MaxPartitionLagSeries {
			s.l.met.partitionLag(p.SourceTopic, p.Partition, p.Lag)
		}
		if p.LagSeconds != nil && (lagSeconds == nil || *p.LagSeconds > *lagSeconds) {
			lagSeconds = p.LagSeconds
		}
	}
	s.l.met.lag.Set(float64(total))
	if lagSeconds != nil {
		s.l.met.lagSeconds.Set(*lagSeconds)
	}
	s.l.met.partitions.Set(float64(len(ps)))
	s.l.setStatus(func(st *Status) {
		st.Partitions = ps
		st.Lag = total
		st.LagSeconds = lagSeconds
	})
	s.published = len(ps)
}
