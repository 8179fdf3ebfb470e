package faults

import (
	"testing"
	"time"

	"github.com/seed83556561/mirrord/internal/kafka/tp"
)

// Guards how a stall is read from the samples: from the first sample with
// records pending after the last advance to the next advance; the window's
// bounds; and the sampling gap a stall is known to within. Runs without
// Kafka.
func TestStallAndGap(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	k := tp.Key{Topic: "orders", Partition: 0}
	s := &series{}
	add := func(ms int, end int64, pending bool) {
		s.at, s.dstEnd, s.pending = append(s.at, at(ms)), append(s.dstEnd, end), append(s.pending, pending)
	}
	add(0, 10, false)
	add(100, 10, true)  // records pending from here...
	add(200, 10, true)  //
	add(3200, 10, true) // (the watcher could not list it for 3 s)
	add(3300, 20, true) // ...advanced: a 3.2 s stall; still pending
	add(3400, 30, false)
	add(3500, 30, false) // idle: nothing pending is no stall
	add(3600, 30, true)
	add(4100, 40, false) // 0.5 s
	w := &Watcher{series: map[tp.Key]*series{k: s}}

	for _, c := range []struct {
		name     string
		from, to int
		stall    time.Duration
		gap      time.Duration
		ok       bool
	}{
		{"whole run", 0, 5000, 3200 * time.Millisecond, 3000 * time.Millisecond, true},
		{"after the long stall", 3350, 5000, 500 * time.Millisecond, 500 * time.Millisecond, true},
		{"a window that ends inside a sampling gap", 0, 1000, 100 * time.Millisecond, 800 * time.Millisecond, true},
		{"no samples in the window", 5000, 6000, 0, 0, false},
	} {
		stall, ok := w.Stall(k, at(c.from), at(c.to))
		gap := w.Gap(k, at(c.from), at(c.to))
		if stall != c.stall || ok != c.ok || gap != c.gap {
			t.Errorf("%s: stall %v (%v), gap %v; want %v (%v), gap %v", c.name, stall, ok, gap, c.stall, c.ok, c.gap)
		}
	}
	if _, ok := w.Stall(tp.Key{Topic: "events"}, t0, at(5000)); ok {
		t.Error("a partition never sampled has a stall")
	}
}

// Guards the quantiles of the report: nearest rank, so a p99 of fewer
// than 100 moves is the worst one.
func TestFigures(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 10; i++ {
		ds = append(ds, time.Duration(11-i)*time.Second)
	}
	f := figures(ds)
	if f.Moves != 10 || f.P50 != 5*time.Second || f.P99 != 10*time.Second || f.Max != 10*time.Second {
		t.Errorf("figures = %+v", f)
	}
	if f := figures(nil); f.Moves != 0 {
		t.Errorf("figures of nothing = %+v", f)
	}
}
