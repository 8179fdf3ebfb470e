package demo

import (
	"fmt"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Figures are the link metrics the demo shows, summed over links (the demo
// runs one). Names are those of the link package's metrics.
type Figures struct {
	Records, Batches, Bytes  int64 // mirrord_{records,batches,bytes}_mirrored_total
	Reencoded                int64 // mirrord_batches_reencoded_total
	Collisions, Unresolvable int64 // mirrord_collisions_{resolved,unresolvable}_total
	Duplicates, Gaps         int64 // mirrord_duplicates_skipped_total, mirrord_sequence_gaps_total
	Barriers                 int64 // mirrord_barriers_emitted_total
	Lag                      int64 // mirrord_lag_records
}

// figures reads Figures from g.
func figures(g prometheus.Gatherer) (Figures, error) {
	mfs, err := g.Gather()
	if err != nil {
		return Figures{}, fmt.Errorf("gather metrics: %w", err)
	}
	sums := make(map[string]float64, len(mfs))
	for _, mf := range mfs {
		var s float64
		for _, m := range mf.GetMetric() {
			s += value(mf.GetType(), m)
		}
		sums[mf.GetName()] = s
	}
	get := func(name string) int64 { return int64(sums[name]) }
	return Figures{
		Records:      get("mirrord_records_mirrored_total"),
		Batches:      get("mirrord_batches_mirrored_total"),
		Bytes:        get("mirrord_bytes_mirrored_total"),
		Reencoded:    get("mirrord_batches_reencoded_total"),
		Collisions:   get("mirrord_collisions_resolved_total"),
		Unresolvable: get("mirrord_collisions_unresolvable_total"),
		Duplicates:   get("mirrord_duplicates_skipped_total"),
		Gaps:         get("mirrord_sequence_gaps_total"),
		Barriers:     get("mirrord_barriers_emitted_total"),
		Lag:          get("mirrord_lag_records"),
	}, nil
}

func value(t dto.MetricType, m *dto.Metric) float64 {
	switch t {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue()
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue()
	}
	return 0
}

// progress writes one progress line per tick: appended with a newline, or,
// on a terminal, rewritten in place.
type progress struct {
	w           io.Writer
	interactive bool
	open        bool // an in-place line is on the terminal without its newline

	lastAt      time.Time
	lastRecords int64
}

// sample is what one progress line shows.
type sample struct {
	elapsed  time.Duration
	phase    string // "load", "catch-up"
	counts   Counts
	mirrored int64
	lag      int64
	state    string
}

func (p *progress) line(now time.Time, s sample) {
	rate := 0.0
	if !p.lastAt.IsZero() && now.After(p.lastAt) {
		rate = float64(s.mirrored-p.lastRecords) / now.Sub(p.lastAt).Seconds()
	}
	p.lastAt, p.lastRecords = now, s.mirrored
	text := fmt.Sprintf("%6.1fs %-8s produced %d (committed %d, aborted %d)  mirrored %d (%.0f records/s)  lag %d  link %s",
		s.elapsed.Seconds(), s.phase, s.counts.Produced(), s.counts.Committed, s.counts.Aborted, s.mirrored, rate, s.lag, s.state)
	if p.interactive {
		fmt.Fprintf(p.w, "\r\x1b[K%s", text)
		p.open = true
		return
	}
	fmt.Fprintln(p.w, text)
}

// end finishes an in-place line so that what follows starts on its own.
func (p *progress) end() {
	if p.open {
		fmt.Fprintln(p.w)
		p.open = false
	}
}
