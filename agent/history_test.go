package agent

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/link"
)

// TestRingKeepsTheNewest guards the history's memory bound: a ring never
// grows, and after more samples than it holds it has exactly its capacity,
// the newest, oldest first.
func TestRingKeepsTheNewest(t *testing.T) {
	for _, tc := range []struct {
		name             string
		capacity, pushed int
	}{
		{"empty", 5, 0},
		{"partly filled", 5, 3},
		{"just full", 5, 5},
		{"wrapped twice and more", 5, 12},
		{"capacity one", 1, 4},
		{"default capacity, an hour and a half", DefaultHistorySamples, DefaultHistorySamples * 3 / 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRing(tc.capacity)
			for i := range tc.pushed {
				r.push(point{atMs: int64(i), lag: int64(i * 10)})
			}
			got := r.appendTo(nil)
			want := min(tc.pushed, tc.capacity)
			if len(got) != want {
				t.Fatalf("holds %d samples after %d pushes, want %d", len(got), tc.pushed, want)
			}
			for i, p := range got {
				if w := int64(tc.pushed - want + i); p.atMs != w || p.lag != w*10 {
					t.Fatalf("sample %d is the one pushed %d-th, want %d-th (oldest dropped first)", i, p.atMs, w)
				}
			}
			if len(r.buf) != tc.capacity || cap(r.buf) != tc.capacity {
				t.Errorf("ring buffer len %d cap %d, want both %d", len(r.buf), cap(r.buf), tc.capacity)
			}
		})
	}
}

// TestSampleBytes holds the memory figure of the README and the doc
// comments (samples × SampleBytes per link) to the sample's real size.
func TestSampleBytes(t *testing.T) {
	if got := unsafe.Sizeof(point{}); got != SampleBytes {
		t.Fatalf("a sample takes %d bytes, SampleBytes says %d: fix the constant and the README", got, SampleBytes)
	}
	r := newRing(DefaultHistorySamples)
	if got := uintptr(cap(r.buf)) * unsafe.Sizeof(r.buf[0]); got != 14400 {
		t.Errorf("a default ring takes %d bytes, the README says 14,400", got)
	}
}

// fakeTicker is a HistoryConfig.Ticker whose ticks the test sends.
type fakeTicker struct {
	ch       chan time.Time
	interval chan time.Duration // the interval the sampler asked for
	stopped  chan struct{}
}

func newFakeTicker() *fakeTicker {
	return &fakeTicker{ch: make(chan time.Time), interval: make(chan time.Duration, 1), stopped: make(chan struct{})}
}

func (f *fakeTicker) ticker(d time.Duration) (<-chan time.Time, func()) {
	f.interval <- d
	return f.ch, func() { close(f.stopped) }
}

// TestSamplerRun drives the sampler's goroutine with scripted ticks and
// statuses and checks every sample: the rates are the counters' growth over
// the ticks' times (the baseline is the reading at start), lag and state are
// the link's; the goroutine stops its ticker and returns when the context
// ends. Guards against rates over the wrong interval, a sample lost or
// stored twice, and a sampler that outlives Run.
func TestSamplerRun(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	st := func(name string, state link.State, records, bytes, lag int64) link.Status {
		return link.Status{Name: name, State: state, Lag: lag, Counters: link.CountsOf(map[link.Counter]int64{link.RecordsMirrored: records, link.BytesMirrored: bytes})}
	}
	// Reading i is what the links show at baseline (0) and at tick i.
	readings := [][]link.Status{
		{st("a", link.Preparing, 0, 0, 0), st("b", link.Mirroring, 500, 1000, 0)},
		{st("a", link.Mirroring, 1000, 50_000, 7), st("b", link.Mirroring, 500, 1000, 3)},
		{st("a", link.Paused, 1000, 50_000, 0), st("b", link.Failed, 600, 1200, 3)},
		{st("a", link.Mirroring, 3000, 150_000, 12), st("b", link.Mirroring, 600, 1200, 0)},
	}
	ticks := []time.Time{t0.Add(10 * time.Second), t0.Add(20 * time.Second), t0.Add(25 * time.Second)}
	cfg := HistoryConfig{Interval: 10 * time.Second, Samples: 10, Now: func() time.Time { return t0 }}
	ft := newFakeTicker()
	cfg.Ticker = ft.ticker
	cfg.defaults()
	h := newHistory(cfg, []string{"a", "b"})
	n := 0
	s := newSampler(cfg, h, func() []link.Status { n++; return readings[n-1] })

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.run(ctx) }()
	if d := <-ft.interval; d != 10*time.Second {
		t.Errorf("sampler asked for a ticker of %s, want 10s", d)
	}
	for _, tk := range ticks {
		ft.ch <- tk // unbuffered: the sampler took the previous tick's sample before it receives this one
	}
	cancel()
	select {
	case <-done:
	case <-time.After(within):
		t.Fatal("sampler did not return after its context ended")
	}
	select {
	case <-ft.stopped:
	default:
		t.Error("sampler returned without stopping its ticker")
	}
	if n != len(readings) {
		t.Errorf("sampler read the statuses %d times, want %d (baseline and one per tick)", n, len(readings))
	}

	want := map[string][]point{
		"a": {
			{atMs: ticks[0].UnixMilli(), recordsPerSec: 100, bytesPerSec: 5000, lag: 7, state: link.Mirroring},
			{atMs: ticks[1].UnixMilli(), recordsPerSec: 0, bytesPerSec: 0, lag: 0, state: link.Paused},
			{atMs: ticks[2].UnixMilli(), recordsPerSec: 400, bytesPerSec: 20_000, lag: 12, state: link.Mirroring},
		},
		"b": {
			{atMs: ticks[0].UnixMilli(), recordsPerSec: 0, bytesPerSec: 0, lag: 3, state: link.Mirroring},
			{atMs: ticks[1].UnixMilli(), recordsPerSec: 10, bytesPerSec: 20, lag: 3, state: link.Failed},
			{atMs: ticks[2].UnixMilli(), recordsPerSec: 0, bytesPerSec: 0, lag: 0, state: link.Mirroring},
		},
	}
	for name, w := range want {
		if got := h.samples(name); !slices.Equal(got, w) {
			t.Errorf("link %s samples:\n got %+v\nwant %+v", name, got, w)
		}
	}
}

// historyHCL is a configuration whose link "l" is never run: New does no
// I/O, so its clusters need not exist.
const historyHCL = `
agent { listen = "127.0.0.1:0" }
cluster "src" { bootstrap_servers = ["127.0.0.1:1"] }
cluster "dst" { bootstrap_servers = ["127.0.0.1:2"] }
link "l" {
  source      = "src"
  destination = "dst"
  topics { include = [".*"] }
}
`

func historyAgent(t *testing.T, hcl string, hist HistoryConfig) *Agent {
	t.Helper()
	cfg, err := config.Parse("offline.hcl", []byte(hcl), nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(cfg, Deps{History: hist})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// serve runs one request through the agent's handler.
func serveAgent(a *Agent, method, target string, header http.Header) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, nil)
	maps.Copy(req.Header, header)
	rec := httptest.NewRecorder()
	a.Handler().ServeHTTP(rec, req)
	return rec
}

// TestHistoryEndpoint checks GET /v1/links/{name}/history: the link, the
// interval and capacity, the samples oldest first and never more than the
// capacity, their JSON field names, and 404 for an unknown link.
func TestHistoryEndpoint(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	a := historyAgent(t, historyHCL, HistoryConfig{Interval: 10 * time.Second, Samples: 3})
	a.smp.baseline(t0, []link.Status{{Name: "l"}})
	for i := 1; i <= 5; i++ {
		a.smp.sample(t0.Add(time.Duration(i)*10*time.Second), []link.Status{{
			Name: "l", State: link.Mirroring, Lag: int64(i),
			Counters: link.CountsOf(map[link.Counter]int64{link.RecordsMirrored: int64(i * i * 100), link.BytesMirrored: int64(i * 1000)}),
		}})
	}

	rec := serveAgent(a, http.MethodGet, "/v1/links/l/history", nil)
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("history: %d %q %s", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
	var got struct {
		Link            string           `json:"link"`
		IntervalSeconds float64          `json:"interval_seconds"`
		Capacity        int              `json:"capacity"`
		Samples         []map[string]any `json:"samples"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.Link != "l" || got.IntervalSeconds != 10 || got.Capacity != 3 || len(got.Samples) != 3 {
		t.Fatalf("history %s", rec.Body)
	}
	for j, s := range got.Samples {
		i := j + 3 // samples 1 and 2 were dropped
		want := map[string]any{
			"at":                 t0.Add(time.Duration(i) * 10 * time.Second).Format(time.RFC3339),
			"state":              "MIRRORING",
			"records_per_second": float64(i*i*100-(i-1)*(i-1)*100) / 10,
			"bytes_per_second":   float64(100),
			"lag_records":        float64(i),
		}
		if len(s) != len(want) {
			t.Errorf("sample %d has fields %v, want %v", j, s, want)
		}
		for k, w := range want {
			if s[k] != w {
				t.Errorf("sample %d %s = %v, want %v", j, k, s[k], w)
			}
		}
	}

	rec = serveAgent(a, http.MethodGet, "/v1/links/nope/history", nil)
	if rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), `the links are: l`) {
		t.Errorf("history of an unknown link: %d %s", rec.Code, rec.Body)
	}
}

// TestHistoryConfigRefused: New refuses a history it cannot bound, and
// names every problem.
func TestHistoryConfigRefused(t *testing.T) {
	cfg, err := config.Parse("offline.hcl", []byte(historyHCL), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(cfg, Deps{History: HistoryConfig{Interval: -time.Second, Samples: MaxHistorySamples + 1}})
	if err == nil || !strings.Contains(err.Error(), "history interval -1s is negative") ||
		!strings.Contains(err.Error(), "history samples 8641 is not between 1 and 8640") {
		t.Fatalf("New: %v", err)
	}
}

// TestRunOwnsTheSampler: Run starts the sampler with the configured
// interval, its ticks fill the history of the running link, and it stops
// with Run. Guards against a sampler left out of Run's errgroup.
func TestRunOwnsTheSampler(t *testing.T) {
	srcC, dstC := kafkatest.Pair(t)
	createOrders(t, producer(t, srcC), 1)
	cfg, err := config.Parse("agent_test.hcl", []byte(agentHCL(srcC, dstC, "")), nil)
	if err != nil {
		t.Fatal(err)
	}
	ft := newFakeTicker()
	t0 := time.Now()
	a, err := New(cfg, Deps{Logger: NewLogger(cfg.Agent, newLogBuffer(t)), Tune: tune,
		History: HistoryConfig{Interval: 7 * time.Second, Samples: 4, Ticker: ft.ticker}})
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, a)
	if d := <-ft.interval; d != 7*time.Second {
		t.Errorf("Run's sampler asked for a ticker of %s, want 7s", d)
	}
	for i := range 6 {
		ft.ch <- t0.Add(time.Duration(i+1) * 7 * time.Second)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ft.stopped:
	default:
		t.Fatal("Run returned, and its sampler had not stopped its ticker")
	}
	got := a.hist.samples("l")
	if len(got) != 4 || got[3].atMs != t0.Add(42*time.Second).UnixMilli() {
		t.Fatalf("history of l after 6 ticks: %+v, want the last 4", got)
	}
}
