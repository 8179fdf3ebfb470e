package faults

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/seed83556561/mirrord/internal/kafka/tp"
)

// Watcher samples, every Interval, each destination partition's end offset
// (the destination's high watermark: what the link's appends made
// visible) and whether the source had more to mirror (its last stable
// offset above the link's source position, from the agent's status). It
// owns one goroutine, which Stop ends and waits for.
type Watcher struct {
	env      *Env
	agent    Mirror
	topics   []string
	interval time.Duration

	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	series map[tp.Key]*series
}

// series is one partition's samples, in time order.
type series struct {
	at      []time.Time
	dstEnd  []int64
	pending []bool // the source had committed records the link had not mirrored
}

// StartWatcher starts sampling.
func StartWatcher(env *Env, agent Mirror, topics []string, interval time.Duration) *Watcher {
	ctx, cancel := context.WithCancel(context.Background())
	w := &Watcher{env: env, agent: agent, topics: topics, interval: interval, cancel: cancel, done: make(chan struct{}), series: map[tp.Key]*series{}}
	go func() {
		defer close(w.done)
		w.run(ctx)
	}()
	return w
}

// Stop ends the sampling and waits for it.
func (w *Watcher) Stop() {
	w.cancel()
	<-w.done
}

func (w *Watcher) run(ctx context.Context) {
	t := time.NewTicker(w.interval)
	defer t.Stop()
	// pending is the last known answer per partition; it keeps its value
	// while the agent is down or slow to answer.
	pending := map[tp.Key]bool{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sctx, cancel := context.WithTimeout(ctx, w.interval*5)
		now := time.Now()
		ends, err := w.env.Admin(Destination).ListEndOffsets(sctx, w.topics...)
		lsos, lerr := w.env.Admin(Source).ListCommittedOffsets(sctx, w.topics...)
		st, serr := w.agent.Status(sctx)
		cancel()
		if serr == nil && lerr == nil {
			for _, p := range st.Partitions {
				k := tp.Key{Topic: p.SourceTopic, Partition: p.Partition}
				if o, ok := lsos.Lookup(p.SourceTopic, p.Partition); ok && o.Err == nil {
					pending[k] = o.Offset > p.SourceNextOffset
				}
			}
		}
		// A shard that failed (a broker down or slow) leaves its
		// partitions out of this sample; the others are kept.
		var shardErrs *kadm.ShardErrors
		if err != nil && !errors.As(err, &shardErrs) {
			continue
		}
		w.mu.Lock()
		ends.Each(func(o kadm.ListedOffset) {
			if o.Err != nil {
				return
			}
			k := tp.Key{Topic: o.Topic, Partition: o.Partition}
			s := w.series[k]
			if s == nil {
				s = &series{}
				w.series[k] = s
			}
			s.at = append(s.at, now)
			s.dstEnd = append(s.dstEnd, o.Offset)
			s.pending = append(s.pending, pending[k])
		})
		w.mu.Unlock()
	}
}

// Gap is the longest time within [from, to] between two samples of
// partition k: a stall can only be measured to within it, since the
// watcher does not see the partition while its end offset cannot be
// listed (its leader down or moving).
func (w *Watcher) Gap(k tp.Key, from, to time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.series[k]
	if s == nil {
		return 0
	}
	i, _ := slices.BinarySearchFunc(s.at, from, func(a, b time.Time) int { return a.Compare(b) })
	var gap time.Duration
	for j := max(i, 1); j < len(s.at) && !s.at[j-1].After(to); j++ {
		gap = max(gap, minTime(s.at[j], to).Sub(s.at[j-1]))
	}
	return gap
}

// Stall is the longest time within [from, to] that partition k's
// destination did not advance while the source had more for it: from the
// first sample since the last advance at which records were pending to the
// next advance (or to the window's end). ok is false when the window holds
// no sample. Pending comes from the agent's status, which the link
// publishes every second, so a stall can read up to a second long when
// the source has just gone idle; under the load's steady writes records
// are always pending and a stall runs from one advance to the next.
func (w *Watcher) Stall(k tp.Key, from, to time.Time) (time.Duration, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.series[k]
	if s == nil {
		return 0, false
	}
	i, _ := slices.BinarySearchFunc(s.at, from, func(a, b time.Time) int { return a.Compare(b) })
	if i >= len(s.at) || s.at[i].After(to) {
		return 0, false
	}
	var worst time.Duration
	var start time.Time // zero: nothing pending since the last advance
	if s.pending[i] {
		start = s.at[i]
	}
	end := s.at[i]
	for j := i + 1; j < len(s.at) && !s.at[j].After(to); j++ {
		end = s.at[j]
		switch {
		case s.dstEnd[j] > s.dstEnd[j-1]:
			if !start.IsZero() {
				worst = max(worst, s.at[j].Sub(start))
			}
			start = time.Time{}
			if s.pending[j] {
				start = s.at[j]
			}
		case start.IsZero() && s.pending[j]:
			start = s.at[j]
		}
	}
	if !start.IsZero() {
		worst = max(worst, end.Sub(start))
	}
	return worst, true
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
