package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/seed83556561/mirrord/link"
)

// Defaults and bounds of HistoryConfig.
const (
	// DefaultHistoryInterval is the time between two samples of a link.
	DefaultHistoryInterval = 10 * time.Second
	// DefaultHistorySamples is how many samples each link keeps: one
	// hour at DefaultHistoryInterval.
	DefaultHistorySamples = 360
	// MaxHistorySamples bounds HistoryConfig.Samples: a day at the
	// default interval, 8640 × SampleBytes = 337.5 KiB per link.
	MaxHistorySamples = 8640
	// SampleBytes is the memory one sample takes in a link's ring (a
	// test holds it to unsafe.Sizeof). A link's history is allocated
	// once, whole: Samples × SampleBytes, 360 × 40 B = 14,400 B (14.1
	// KiB) per link with the defaults, whatever the link's partition
	// count or traffic.
	SampleBytes = 40
)

// HistoryConfig configures the in-agent history behind the status page's
// charts: a fixed ring of samples per link, filled by a sampler goroutine
// that Run owns.
type HistoryConfig struct {
	// Interval between samples (default DefaultHistoryInterval).
	Interval time.Duration
	// Samples each link keeps, the oldest dropped first (default
	// DefaultHistorySamples, at most MaxHistorySamples).
	Samples int
	// Now is the clock of the first sample's baseline (default
	// time.Now). Every later sample is taken at the time its tick
	// carries.
	Now func() time.Time
	// Ticker returns the channel of sampling ticks, each carrying the
	// time it fired, and a function that stops it (default: a
	// time.Ticker of Interval). Tests send their own ticks.
	Ticker func(interval time.Duration) (ticks <-chan time.Time, stop func())
}

func (c *HistoryConfig) defaults() {
	if c.Interval == 0 {
		c.Interval = DefaultHistoryInterval
	}
	if c.Samples == 0 {
		c.Samples = DefaultHistorySamples
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Ticker == nil {
		c.Ticker = func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		}
	}
}

func (c *HistoryConfig) validate() error {
	var errs []error
	if c.Interval < 0 {
		errs = append(errs, fmt.Errorf("history interval %s is negative", c.Interval))
	}
	if c.Samples < 0 || c.Samples > MaxHistorySamples {
		errs = append(errs, fmt.Errorf("history samples %d is not between 1 and %d", c.Samples, MaxHistorySamples))
	}
	return errors.Join(errs...)
}

// point is one sample of a link's history, SampleBytes in memory.
type point struct {
	atMs          int64   // when it was taken, Unix milliseconds
	recordsPerSec float64 // records mirrored per second since the previous sample
	bytesPerSec   float64 // bytes mirrored per second since the previous sample
	lag           int64   // link.Status.Lag
	state         link.State
}

// ring holds the last len(buf) samples of one link; buf is allocated once.
type ring struct {
	buf  []point
	next int // where the next sample goes
	n    int // samples held, at most len(buf)
}

func newRing(capacity int) *ring { return &ring{buf: make([]point, capacity)} }

// push adds s, overwriting the oldest sample once the ring is full.
func (r *ring) push(s point) {
	r.buf[r.next] = s
	r.next = (r.next + 1) % len(r.buf)
	if r.n < len(r.buf) {
		r.n++
	}
}

// appendTo appends the samples held, oldest first.
func (r *ring) appendTo(dst []point) []point {
	start := (r.next - r.n + len(r.buf)) % len(r.buf)
	for i := range r.n {
		dst = append(dst, r.buf[(start+i)%len(r.buf)])
	}
	return dst
}

// history is every link's ring. The sampler goroutine writes it, HTTP
// handlers read it; the mutex guards the rings, whose set is fixed at
// construction.
type history struct {
	interval time.Duration
	capacity int

	mu    sync.Mutex
	rings map[string]*ring // by link name
}

func newHistory(cfg HistoryConfig, links []string) *history {
	h := &history{interval: cfg.Interval, capacity: cfg.Samples, rings: make(map[string]*ring, len(links))}
	for _, name := range links {
		h.rings[name] = newRing(cfg.Samples)
	}
	return h
}

func (h *history) push(name string, s point) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r := h.rings[name]; r != nil {
		r.push(s)
	}
}

// samples returns a copy of the link's samples, oldest first.
func (h *history) samples(name string) []point {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.rings[name]
	if r == nil {
		return nil
	}
	return r.appendTo(make([]point, 0, r.n))
}

// sampler fills a history from the links' statuses, one sample per link
// per tick. Its run goroutine owns prev.
type sampler struct {
	cfg  HistoryConfig
	hist *history
	read func() []link.Status

	prev map[string]mark
}

// mark is where a link's counters stood at the previous sample.
type mark struct {
	at             time.Time
	records, bytes int64
}

func newSampler(cfg HistoryConfig, hist *history, read func() []link.Status) *sampler {
	return &sampler{cfg: cfg, hist: hist, read: read, prev: map[string]mark{}}
}

// run samples at every tick until ctx ends. The first reading, at start,
// is the baseline of the first sample's rates and is not stored.
func (s *sampler) run(ctx context.Context) {
	ticks, stop := s.cfg.Ticker(s.cfg.Interval)
	defer stop()
	s.baseline(s.cfg.Now(), s.read())
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-ticks:
			s.sample(now, s.read())
		}
	}
}

func (s *sampler) baseline(now time.Time, sts []link.Status) {
	for _, st := range sts {
		s.prev[st.Name] = mark{at: now, records: st.Counters.Get(link.RecordsMirrored), bytes: st.Counters.Get(link.BytesMirrored)}
	}
}

// sample stores one sample per link taken at now: the rates since the
// previous sample (zero without one, or if the clock did not advance) and
// the link's lag and state.
func (s *sampler) sample(now time.Time, sts []link.Status) {
	for _, st := range sts {
		cur := mark{at: now, records: st.Counters.Get(link.RecordsMirrored), bytes: st.Counters.Get(link.BytesMirrored)}
		smp := point{atMs: now.UnixMilli(), lag: st.Lag, state: st.State}
		if p, ok := s.prev[st.Name]; ok {
			if dt := now.Sub(p.at).Seconds(); dt > 0 {
				smp.recordsPerSec = max(0, float64(cur.records-p.records)/dt)
				smp.bytesPerSec = max(0, float64(cur.bytes-p.bytes)/dt)
			}
		}
		s.prev[st.Name] = cur
		s.hist.push(st.Name, smp)
	}
}

// HistorySample is one sample of GET /v1/links/{name}/history.
type HistorySample struct {
	At               time.Time  `json:"at"`
	State            link.State `json:"state"`
	RecordsPerSecond float64    `json:"records_per_second"`
	BytesPerSecond   float64    `json:"bytes_per_second"`
	LagRecords       int64      `json:"lag_records"`
}

// History is the body of GET /v1/links/{name}/history.
type History struct {
	Link            string  `json:"link"`
	IntervalSeconds float64 `json:"interval_seconds"`
	// Capacity is how many samples the agent keeps per link; Samples
	// holds at most that many, oldest first.
	Capacity int             `json:"capacity"`
	Samples  []HistorySample `json:"samples"`
}

// linkHistory answers GET /v1/links/{name}/history.
func (a *Agent) linkHistory(w http.ResponseWriter, r *http.Request) {
	l := a.link(w, r)
	if l == nil {
		return
	}
	smps := a.hist.samples(l.Name())
	out := History{
		Link:            l.Name(),
		IntervalSeconds: a.hist.interval.Seconds(),
		Capacity:        a.hist.capacity,
		Samples:         make([]HistorySample, len(smps)),
	}
	for i, s := range smps {
		out.Samples[i] = HistorySample{
			At:               time.UnixMilli(s.atMs).UTC(),
			State:            s.state,
			RecordsPerSecond: s.recordsPerSec,
			BytesPerSecond:   s.bytesPerSec,
			LagRecords:       s.lag,
		}
	}
	writeJSON(w, http.StatusOK, out)
}
