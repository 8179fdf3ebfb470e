package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/failover"
	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/link"
	"github.com/seed83556561/mirrord/transform"
)

// chromiumPath is Debian's Chromium (apt-get install -y chromium).
const chromiumPath = "/usr/bin/chromium"

// browser is one headless Chromium with one tab, and what the tab showed
// that a test should not see.
type browser struct {
	t   *testing.T
	ctx context.Context

	mu       sync.Mutex
	problems []string // uncaught exceptions, console errors, CSP violations
	requests []string // every URL the tab requested
}

// newBrowser starts Chromium headless with a fresh profile and a window of
// w×h, and stops it (waiting for the process) when the test ends. Without
// Chromium the test is skipped, or fails under CI=true.
func newBrowser(t *testing.T, w, h int) *browser {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and no Chromium at %s (.ci/run installs it: apt-get install -y chromium)", chromiumPath)
		}
		t.Skipf("browser test skipped: no Chromium at %s; apt-get install -y chromium to run it", chromiumPath)
	}
	profile := t.TempDir() // removed after the browser below has exited (cleanups run last-in first-out)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-background-timer-throttling", true),
		chromedp.Flag("disable-renderer-backgrounding", true),
		chromedp.Flag("password-store", "basic"),
		chromedp.Flag("force-color-profile", "srgb"),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(w, h),
	)
	ctx, cancelTab := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	// The allocator's cancel waits for the browser process to exit.
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	b := &browser{t: t, ctx: ctx}
	if err := chromedp.Do(ctx); err != nil { // starts the browser, bound to ctx
		t.Fatalf("start %s: %v", chromiumPath, err)
	}
	if err := chromedp.Listen(ctx, b.event); err != nil {
		t.Fatal(err)
	}
	return b
}

// event notes what the page must not do. It runs on chromedp's reader
// goroutine: it only appends under the lock.
func (b *browser) event(ev any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch ev := ev.(type) {
	case *runtime.EventExceptionThrown:
		text := ev.ExceptionDetails.Text
		if ev.ExceptionDetails.Exception != nil {
			text += " " + ev.ExceptionDetails.Exception.Description
		}
		b.problems = append(b.problems, "exception: "+text)
	case *runtime.EventConsoleAPICalled:
		if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeWarning {
			b.problems = append(b.problems, fmt.Sprintf("console.%s from the page", ev.Type))
		}
	case *log.EventEntryAdded:
		// Network entries are the 401 and 403 answers the page is meant
		// to handle; everything else (CSP violations above all) counts.
		if ev.Entry.Level == log.EntryLevelError && ev.Entry.Source != log.EntrySourceNetwork {
			b.problems = append(b.problems, fmt.Sprintf("%s: %s", ev.Entry.Source, ev.Entry.Text))
		}
	case *network.EventRequestWillBeSent:
		b.requests = append(b.requests, ev.Request.URL)
	}
}

// checkClean fails the test for any problem seen, and for any request to
// another origin than origin.
func (b *browser) checkClean(origin string) {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.problems {
		b.t.Errorf("the page logged %s", p)
	}
	for _, u := range b.requests {
		if !strings.HasPrefix(u, origin+"/") && !strings.HasPrefix(u, "data:") {
			b.t.Errorf("the page requested %s, outside %s", u, origin)
		}
	}
	if len(b.requests) == 0 {
		b.t.Error("no request seen: the request log does not work")
	}
}

func (b *browser) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.fail("%v", err)
	}
}

// eval evaluates a JavaScript expression (awaiting a promise) into T.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.fail("evaluate %s: %v", expr, err)
	}
	return v
}

// waitFor polls a JavaScript predicate until it holds; what says what the
// test waits for.
func (b *browser) waitFor(what, predicate string) {
	b.t.Helper()
	_, err := chromedp.Run(b.ctx, chromedp.Poll[chromedp.Void](predicate,
		chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(within)))
	if err != nil {
		b.fail("waiting for %s (%s): %v", what, predicate, err)
	}
}

// fail saves a screenshot and the page's text, then fails the test.
func (b *browser) fail(format string, args ...any) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	if png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)); err == nil {
		p := filepath.Join(b.t.ArtifactDir(), "failure.png")
		if os.WriteFile(p, png, 0o644) == nil {
			b.t.Logf("screenshot of the failure: %s", p)
		}
	}
	if text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`)); err == nil {
		b.t.Logf("the page's text:\n%s", text)
	}
	b.t.Fatalf(format, args...)
}

// screenshot saves a PNG of the whole page under the test's artifacts.
func (b *browser) screenshot(name string) string {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.fail("screenshot: %v", err)
	}
	p := filepath.Join(b.t.ArtifactDir(), name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s (kept with go test -artifacts -outputdir DIR)", p)
	return p
}

// requireToken stands in for the admin API's access control (being added
// to agent/http.go separately) with its contract: /v1/... needs
// "Authorization: Bearer <token>", missing is 401 and wrong is 403, each
// with a JSON error; everything else stays open. It counts the /v1
// requests it let through.
func requireToken(token string, next http.Handler, passed *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/") {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			switch {
			case !ok || got == "":
				writeJSON(w, http.StatusUnauthorized, apiError{Error: "this agent's admin API needs a bearer token"})
				return
			case got != token:
				writeJSON(w, http.StatusForbidden, apiError{Error: "the bearer token is not this agent's"})
				return
			}
			passed.Add(1)
		}
		next.ServeHTTP(w, r)
	})
}

// commas formats n as the page does (en-US grouping).
func commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// card is a JavaScript expression for an element of link l's card.
func card(l, sel string) string {
	return fmt.Sprintf(`document.querySelector(%q)`, fmt.Sprintf(`.link[data-link=%q] %s`, l, sel))
}

func field(l, f string) string { return card(l, fmt.Sprintf(`[data-f=%q]`, f)) }

// TestStatusPageInBrowser runs an agent on two kfake clusters behind the
// admin API's token contract and drives its status page in headless
// Chromium as an operator would: the page asks for the token (and refuses
// a wrong one), then shows the link MIRRORING with its clusters' regions,
// lag, counters and partitions; the figures follow the records mirrored;
// the charts fill from the history; pause and resume work from the
// buttons; the token never reaches the URL or the page; the page fits a
// 400 px screen; and it requests nothing from another host and logs no
// error. Screenshots go to the test's artifacts.
func TestStatusPageInBrowser(t *testing.T) {
	b := newBrowser(t, 1280, 900)
	srcC, dstC := kafkatest.Pair(t)
	srcCl := producer(t, srcC)
	const partitions = 4
	createOrders(t, srcCl, partitions)
	produce(t, srcCl, partitions, "first", 30)
	total := int64(partitions * 30)

	cfg, err := config.Parse("agent_test.hcl", []byte(agentHCL(srcC, dstC, "")), nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(cfg, Deps{Logger: NewLogger(cfg.Agent, newLogBuffer(t)), Tune: tune,
		History: HistoryConfig{Interval: 250 * time.Millisecond, Samples: 240}})
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, a)
	const token = "s3cret-Admin-Token-7q"
	var passed atomic.Int64
	srv := httptest.NewServer(requireToken(token, a.Handler(), &passed))
	t.Cleanup(srv.Close)

	// The API asks for a token: the page asks the operator.
	b.do(chromedp.Navigate(srv.URL + "/"))
	b.waitFor("the token form", `!document.getElementById('token-form').hidden && document.getElementById('token-reason').textContent.includes('asks for a token')`)
	b.do(chromedp.SendKeys(chromedp.ID("token-input"), "not-the-token"), chromedp.Click(chromedp.CSS(`#token-form button[type=submit]`)))
	b.waitFor("the wrong token refused and forgotten",
		`document.getElementById('token-reason').textContent.includes('refused') && sessionStorage.getItem('mirrord.admin-token') === null && !document.getElementById('token-form').hidden`)
	b.do(chromedp.SendKeys(chromedp.ID("token-input"), token), chromedp.Click(chromedp.CSS(`#token-form button[type=submit]`)))

	// The link, as it mirrors.
	b.waitFor("link l MIRRORING with all its records", fmt.Sprintf(`%s?.textContent === 'MIRRORING' && %s.textContent === %q`,
		field("l", "state"), field("l", "records"), commas(total)))
	if passed.Load() == 0 {
		t.Error("no /v1 request carried the token")
	}
	srcRegion, _ := transform.RegionOf(kafkatest.SourceClusterID)
	dstRegion, _ := transform.RegionOf(kafkatest.DestClusterID)
	for f, want := range map[string]string{
		"name": "l", "source": "src", "destination": "dst",
		"source-id": kafkatest.SourceClusterID, "destination-id": kafkatest.DestClusterID,
		"source-region": fmt.Sprintf("0x%08x", uint32(srcRegion)), "destination-region": fmt.Sprintf("0x%08x", uint32(dstRegion)),
		"partitions": strconv.Itoa(partitions), "delivery": "preserve",
	} {
		if got := eval[string](b, field("l", f)+".textContent"); got != want {
			t.Errorf("the card's %s shows %q, want %q", f, got, want)
		}
	}
	b.waitFor("a lag figure", fmt.Sprintf(`/^[0-9,]+$/.test(%s.textContent)`, field("l", "lag")))
	if got := eval[string](b, field("l", "since")+".textContent"); !strings.HasPrefix(got, "since ") {
		t.Errorf("the card's since shows %q", got)
	}

	// More records: the figures and the partition table follow.
	ends := produce(t, srcCl, partitions, "second", 50)
	total += partitions * 50
	var wantNext []string
	for p := range int32(partitions) {
		wantNext = append(wantNext, commas(ends[p]))
	}
	slices.Sort(wantNext)
	b.waitFor("the second round of records on the page", fmt.Sprintf(`%s.textContent === %q`, field("l", "records"), commas(total)))
	b.waitFor("the partition table at the source's end offsets", fmt.Sprintf(
		`JSON.stringify([...document.querySelectorAll('.link[data-link="l"] .parts tbody tr:not([hidden])')].map(tr => tr.cells[3].textContent).sort()) === %q`,
		mustJSON(t, wantNext)))
	b.waitFor("the records/s and lag charts drawn from the history", fmt.Sprintf(
		`(%s.getAttribute('d') || '').split('L').length >= 3 && (%s.getAttribute('d') || '').startsWith('M')`,
		card("l", `figure[data-series="records"] .line`), card("l", `figure[data-series="lag"] .line`)))
	b.waitFor("a records/s figure", fmt.Sprintf(`/^[0-9.,]+[kMG]?$/.test(%s.textContent)`, field("l", "rps")))

	if !eval[bool](b, field("l", "groups")+".hidden") || !eval[bool](b, field("l", "error-box")+".hidden") {
		t.Error("the groups section or the error box shows, and the agent reports neither")
	}

	// Pause and resume from the buttons.
	pause, resume := card("l", `button[data-command="pause"]`), card("l", `button[data-command="resume"]`)
	if eval[bool](b, card("l", `button[data-command="failover"]`)+".hidden") {
		t.Error("the failover button is hidden, but the API offers failover")
	}
	b.waitFor("pause enabled", pause+"&& !"+pause+".disabled && "+resume+".disabled")
	b.do(chromedp.Click(chromedp.CSS(`.link[data-link="l"] button[data-command="pause"]`)))
	failover := card("l", `button[data-command="failover"]`)
	b.waitFor("link l PAUSED", fmt.Sprintf(`%s.textContent === 'PAUSED' && !%s.disabled`, field("l", "state"), resume))
	if !eval[bool](b, failover+".disabled") {
		t.Error("the failover button is enabled on a PAUSED link; a failover starts from MIRRORING (the API answers 409)")
	}
	if s := r.linkStatus(t); s.State != "PAUSED" {
		t.Errorf("the API says %s after the pause button", s.State)
	}
	b.screenshot("statuspage-paused.png")
	b.do(chromedp.Click(chromedp.CSS(`.link[data-link="l"] button[data-command="resume"]`)))
	b.waitFor("link l MIRRORING again, failover enabled", fmt.Sprintf(`%s.textContent === 'MIRRORING' && !%s.disabled`, field("l", "state"), failover))
	b.waitFor("the notice of the command", fmt.Sprintf(`%s.textContent.startsWith('resume sent')`, field("l", "notice")))

	// The token stays in sessionStorage: not in the URL, not in the page.
	if got := eval[string](b, `sessionStorage.getItem('mirrord.admin-token')`); got != token {
		t.Errorf("sessionStorage holds %q, want the token", got)
	}
	if eval[bool](b, fmt.Sprintf(`document.documentElement.outerHTML.includes(%q) || location.href.includes(%q) || document.getElementById('token-input').value !== ''`, token, token)) {
		t.Error("the token shows in the page or the URL")
	}
	b.screenshot("statuspage.png")

	// A narrow screen: nothing wider than the viewport.
	b.do(chromedp.EmulateViewport(400, 860, chromedp.EmulateMobile))
	b.waitFor("the page laid out at 400 px", `window.innerWidth === 400`)
	if got := eval[[]float64](b, `[document.documentElement.scrollWidth, Math.max(...[...document.querySelectorAll('.link, .tile, .chart, .top')].map(e => e.getBoundingClientRect().right))]`); got[0] > 400 || got[1] > 400 {
		t.Errorf("at 400 px the page is %v px wide (document, widest box)", got)
	}
	b.screenshot("statuspage-400px.png")

	b.checkClean(srv.URL)
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	s, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(s)
}

// pageDuration is format.js's duration of a number of seconds: the largest
// unit and the one after it ("8m 18s", "45s").
func pageDuration(seconds float64) string {
	s := int64(seconds)
	units := []struct {
		name string
		size int64
	}{{"d", 86400}, {"h", 3600}, {"m", 60}, {"s", 1}}
	i := 0
	for i < len(units)-1 && s < units[i].size {
		i++
	}
	first := fmt.Sprintf("%d%s", s/units[i].size, units[i].name)
	if i == len(units)-1 {
		return first
	}
	return fmt.Sprintf("%s %d%s", first, s%units[i].size/units[i+1].size, units[i+1].name)
}

// bigStatus is a link of 1000 partitions over ten topics with varied
// offsets and lags.
func bigStatus(records int64) link.Status {
	st := link.Status{
		Name: "big", Source: "src", Destination: "dst", State: link.Mirroring, Since: time.Now().Add(-time.Hour),
		SourceClusterID: kafkatest.SourceClusterID, DestinationClusterID: kafkatest.DestClusterID,
		Counters:    link.CountsOf(map[link.Counter]int64{link.RecordsMirrored: records, link.BytesMirrored: records * 180, link.BatchesMirrored: records / 10, link.Checkpoints: records / 1000, link.ForeignBatches: 3}),
		LastError:   "append orders[7]: lease expired",
		LastErrorAt: time.Now().Add(-10 * time.Minute),
	}
	for i := range 1000 {
		hw := int64(1_000_000 + (i*7919)%100_003)
		lag := int64((i * 104729) % 5000)
		if i%3 == 0 {
			lag = 0
		}
		ps := link.PartitionStatus{
			SourceTopic: fmt.Sprintf("topic-%02d", i/100), DestinationTopic: fmt.Sprintf("mirror.topic-%02d", i/100), Partition: int32(i % 100),
			SourceNextOffset: hw - lag, DestNextOffset: (hw - lag) * 9 / 10, HighWatermark: hw, Lag: lag,
			CheckpointSource: hw - lag - 100, CheckpointDest: (hw - lag - 100) * 9 / 10,
		}
		if i%50 != 1 { // every fiftieth partition's time lag is not known yet
			ps.LagSeconds = new(float64(lag) / 10)
		}
		st.Partitions = append(st.Partitions, ps)
		st.Lag += lag
	}
	return st
}

// TestStatusPageThousandPartitions loads the page with a link of 1000
// partitions and an hour of history. It checks that the table renders one
// page of rows (not 1000), that sorting by a column orders every partition
// (the first page is the top of the whole sort, both ways), and that paging
// and the topic filter work. Guards against a page that slows down with
// the partition count by what it puts in the DOM; the times of a refresh
// and a sort, measured in the browser, are logged, not asserted (a timed
// bound measures the machine: no performance claim comes from a test).
func TestStatusPageThousandPartitions(t *testing.T) {
	b := newBrowser(t, 1280, 900)
	at := time.Now()
	a := historyAgent(t, strings.Replace(historyHCL, `link "l"`, `link "big"`, 1), HistoryConfig{Interval: 10 * time.Second, Samples: 360})
	a.smp.baseline(at.Add(-3601*time.Second), []link.Status{{Name: "big"}})
	for i := range 360 {
		a.smp.sample(at.Add(time.Duration(i-359)*10*time.Second), []link.Status{{
			Name: "big", State: link.Mirroring, Lag: int64(1000 + 900*((i/30)%2)),
			Counters: link.CountsOf(map[link.Counter]int64{link.RecordsMirrored: int64(i * i * 50), link.BytesMirrored: int64(i * i * 9000)}),
		}})
	}
	var polls atomic.Int64
	var body atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, _ *http.Request) {
		n := polls.Add(1)
		at := time.Now().UTC()
		st := bigStatus(1_000_000 + n*25_000)
		st.GroupSync = &failover.GroupSyncStatus{Interval: 10 * time.Second, LastRound: at, Groups: []failover.GroupStatus{
			{Group: "billing", State: "synced", Partitions: make([]failover.GroupPartitionSync, 3), At: at.Add(-12 * time.Second)},
			{Group: "audit", Type: failover.TypeShare, State: "active", Members: 2, At: at.Add(-5 * time.Minute), Error: "2 members at the destination"},
		}}
		raw := Overview{At: at, History: HistoryShape{IntervalSeconds: 10, Capacity: 360}, Counters: link.CounterTable(), Links: []LinkView{newLinkView(st)}}
		rec := httptest.NewRecorder()
		writeJSON(rec, http.StatusOK, raw)
		body.Store(int64(rec.Body.Len()))
		maps.Copy(w.Header(), rec.Header())
		_, _ = w.Write(rec.Body.Bytes())
	})
	mux.Handle("/", a.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	b.do(chromedp.Navigate(srv.URL + "/"))
	b.waitFor("the first page of 1000 partitions", fmt.Sprintf(`%s?.textContent === '1–50 of 1,000'`, card("big", ".page-info")))
	if got := eval[int](b, `document.querySelectorAll('.link[data-link="big"] .parts tbody tr').length`); got != 50 {
		t.Errorf("the table has %d rows in the DOM, want 50 (one page)", got)
	}

	// Five refreshes: the page's own measure of a render (every card,
	// the sort of 1000 rows, one page of cells).
	renders := eval[[]float64](b, `new Promise((resolve) => {
		const main = document.getElementById('links'), out = [];
		const obs = new MutationObserver(() => { out.push(Number(main.dataset.renderMs)); if (out.length === 5) { obs.disconnect(); resolve(out); } });
		obs.observe(main, { attributes: true, attributeFilter: ['data-render-ms'] });
	})`)
	slices.Sort(renders)
	t.Logf("refresh of a 1000-partition status (%d KiB of JSON): render %.1f ms median, %.1f ms max over %d refreshes",
		body.Load()>>10, renders[2], renders[4], len(renders))

	// Sorting by a column: the handler's time and the time to the next
	// painted frame.
	sortTimes := eval[[][2]float64](b, `(async () => {
		const out = [];
		for (const key of ['source_high_watermark', 'lag_records', 'source_topic', 'checkpoint_source_offset', 'source_high_watermark']) {
			const btn = document.querySelector('.link[data-link="big"] button.sort[data-key="' + key + '"]');
			const t0 = performance.now();
			btn.click();
			const t1 = performance.now();
			await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
			out.push([t1 - t0, performance.now() - t0]);
		}
		return out;
	})()`)
	var handler, frame []float64
	for _, s := range sortTimes {
		handler, frame = append(handler, s[0]), append(frame, s[1])
	}
	slices.Sort(handler)
	slices.Sort(frame)
	t.Logf("sort of 1000 partitions by a column: click handler %.1f ms median (%.1f max), to the next painted frame %.1f ms median (%.1f max)",
		handler[2], handler[4], frame[2], frame[4])

	// The last click sorted by high watermark after another column:
	// descending, as numbers start. The first page is the top of the
	// whole sort; a second click reverses it.
	st := bigStatus(0)
	want := slices.Clone(st.Partitions)
	sort.SliceStable(want, func(i, j int) bool {
		if want[i].HighWatermark != want[j].HighWatermark {
			return want[i].HighWatermark < want[j].HighWatermark
		}
		if want[i].SourceTopic != want[j].SourceTopic {
			return want[i].SourceTopic < want[j].SourceTopic
		}
		return want[i].Partition < want[j].Partition
	})
	page := func() [][]string {
		return eval[[][]string](b, `[...document.querySelectorAll('.link[data-link="big"] .parts tbody tr:not([hidden])')].map(tr => [tr.cells[0].textContent, tr.cells[1].textContent, tr.cells[4].textContent])`)
	}
	rowsOf := func(ps []link.PartitionStatus) [][]string {
		var out [][]string
		for _, p := range ps {
			out = append(out, []string{p.SourceTopic, strconv.Itoa(int(p.Partition)), commas(p.HighWatermark)})
		}
		return out
	}
	hwSort := card("big", `.parts th:nth-child(5)`) + ".getAttribute('aria-sort')"
	if got := eval[string](b, hwSort); got != "descending" {
		t.Errorf("the high watermark column's aria-sort is %q, want descending", got)
	}
	got := page()
	for i, row := range got {
		if w := want[len(want)-1-i]; row[2] != commas(w.HighWatermark) {
			t.Fatalf("sorted by high watermark, descending: row %d is %v, want high watermark %s", i, row, commas(w.HighWatermark))
		}
	}
	b.do(chromedp.Click(chromedp.CSS(`.link[data-link="big"] button.sort[data-key="source_high_watermark"]`)))
	b.waitFor("ascending order", hwSort+" === 'ascending'")
	if got := page(); !slices.EqualFunc(got, rowsOf(want[:50]), slices.Equal) {
		t.Errorf("sorted by high watermark, ascending: the first page is\n%v\nwant\n%v", got, rowsOf(want[:50]))
	}

	// The last error with its time, an alarming counter, and the groups
	// section once the JSON has groups.
	b.waitFor("the last error", fmt.Sprintf(`!%s.hidden && %s.textContent === 'append orders[7]: lease expired' && %s.textContent.includes('(10m 0s ago)')`,
		field("big", "error-box"), field("big", "error"), field("big", "error-at")))
	if !eval[bool](b, card("big", `dd[data-counter="foreign_batches"]`)+".parentElement.classList.contains('alarm')") {
		t.Error("3 foreign batches are not marked as an alarm")
	}
	// One table drives the page: the card lists every counter of the link
	// counter table that is not a headline figure, in its order.
	var counters []string
	for _, c := range link.CounterTable() {
		if !c.Headline {
			counters = append(counters, c.Name)
		}
	}
	if got := eval[[]string](b, `[...document.querySelectorAll('.link[data-link="big"] dd[data-counter]')].map(d => d.dataset.counter)`); !slices.Equal(got, counters) {
		t.Errorf("the card lists the counters %q, want %q", got, counters)
	}
	if got := eval[[]string](b, fmt.Sprintf(`%s.hidden ? [] : [...%s.querySelectorAll('th, td')].map(c => c.textContent)`, field("big", "groups"), field("big", "groups"))); !slices.Equal(got,
		[]string{"group", "type", "state", "partitions", "destination members", "last sync", "error",
			"billing", "consumer", "synced", "3", "0", "12s ago", "", "audit", "share", "active", "0", "2", "5m 0s ago", "2 members at the destination"}) {
		t.Errorf("the groups section shows %q", got)
	}

	// The lag in time: sorted by it, the most lagging partition first,
	// and, reversed, the partitions whose time lag is not known yet.
	lagTime := func() []string {
		return eval[[]string](b, `[...document.querySelectorAll('.link[data-link="big"] .parts tbody tr:not([hidden])')].map(tr => tr.cells[6].textContent)`)
	}
	b.do(chromedp.Click(chromedp.CSS(`.link[data-link="big"] button.sort[data-key="lag_seconds"]`)))
	b.waitFor("sorted by lag in time", card("big", `.parts th:nth-child(7)`)+".getAttribute('aria-sort') === 'descending'")
	var most float64
	for _, p := range st.Partitions {
		if p.LagSeconds != nil {
			most = max(most, *p.LagSeconds)
		}
	}
	if got, want := lagTime(), pageDuration(most); got[0] != want {
		t.Errorf("sorted by lag in time, the first row shows %q, want %q (the most lagging partition: %gs)", got[0], want, most)
	}
	b.do(chromedp.Click(chromedp.CSS(`.link[data-link="big"] button.sort[data-key="lag_seconds"]`)))
	b.waitFor("sorted by lag in time, ascending", card("big", `.parts th:nth-child(7)`)+".getAttribute('aria-sort') === 'ascending'")
	if got := lagTime(); len(got) != 50 || got[0] != "—" || got[19] != "—" || got[20] != "0s" {
		t.Errorf("sorted by lag in time, ascending: the first page shows %q, want 20 unknown (—) then 0s", got)
	}
	b.do(chromedp.Click(chromedp.CSS(`.link[data-link="big"] button.sort[data-key="source_high_watermark"]`)))
	b.do(chromedp.Click(chromedp.CSS(`.link[data-link="big"] button.sort[data-key="source_high_watermark"]`)))
	b.waitFor("sorted by high watermark again", hwSort+" === 'ascending'")

	// Paging and the filter.
	b.do(chromedp.Click(chromedp.CSS(`.link[data-link="big"] .next`)))
	b.waitFor("the second page", card("big", ".page-info")+".textContent === '51–100 of 1,000'")
	if got := page(); len(got) != 50 || got[0][2] != commas(want[50].HighWatermark) {
		t.Errorf("the second page starts with %v, want high watermark %s", got[:1], commas(want[50].HighWatermark))
	}
	b.do(chromedp.SendKeys(chromedp.CSS(`.link[data-link="big"] .filter`), "topic-07"))
	b.waitFor("the filtered table", card("big", ".page-info")+".textContent === '1–50 of 100 (1,000 in all)'")
	for _, row := range page() {
		if row[0] != "topic-07" {
			t.Fatalf("the filter topic-07 shows %v", row)
		}
	}

	// The charts show the hour of history.
	b.waitFor("the lag chart", fmt.Sprintf(`(%s.getAttribute('d') || '').split('L').length >= 300`, card("big", `figure[data-series="lag"] .line`)))
	if got := eval[string](b, card("big", `figure[data-series="records"] .xstart`)+".textContent"); got != "−60 min" {
		t.Errorf("the records chart starts at %q, want −60 min", got)
	}
	b.screenshot("statuspage-1000-partitions.png")
	b.checkClean(srv.URL)
}

// TestStatusPageSlots drives the status page of an agent that runs a link
// with slots (issue 24): one card per slot it owns, named "l (slot N)",
// MIRRORING, with the slot's partitions and records, no command buttons
// (the per-link commands answer 409 on a link with slots) and no charts
// (the agent keeps no history of a slot); the page asks for no slot's
// history and logs no error.
func TestStatusPageSlots(t *testing.T) {
	b := newBrowser(t, 1280, 900)
	srcC, dstC := kafkatest.Pair(t)
	srcCl := producer(t, srcC)
	const partitions, slots = 6, 2
	createOrders(t, srcCl, partitions)
	ends := produce(t, srcCl, partitions, "first", 20)
	total := int64(partitions * 20)
	var wantNext []string
	for p := range int32(partitions) {
		wantNext = append(wantNext, commas(ends[p]))
	}
	slices.Sort(wantNext)
	hcl := strings.Replace(agentHCL(srcC, dstC, ""), `session_timeout                = "3s"`,
		fmt.Sprintf("session_timeout = \"6s\"\n  slots = %d", slots), 1)
	a := newAgent(t, hcl, nil, newLogBuffer(t), prometheus.NewRegistry())
	start(t, a)
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)

	b.do(chromedp.Navigate(srv.URL + "/"))
	var parts, records []string
	for s := range slots {
		key := fmt.Sprintf("l.%d", s)
		b.waitFor("slot "+key+" MIRRORING", fmt.Sprintf(`%s?.textContent === 'MIRRORING'`, field(key, "state")))
		if got, want := eval[string](b, field(key, "name")+".textContent"), fmt.Sprintf("l (slot %d)", s); got != want {
			t.Errorf("slot %d's card is named %q, want %q", s, got, want)
		}
		if !eval[bool](b, fmt.Sprintf(`[...document.querySelectorAll('.link[data-link="%s"] button[data-command]')].every(b => b.hidden)`, key)) {
			t.Errorf("slot %d's card shows command buttons; the commands answer 409 on a link with slots", s)
		}
		if !eval[bool](b, card(key, ".charts")+".hidden") || !eval[bool](b, card(key, ".charts-legend")+".hidden") {
			t.Errorf("slot %d's card shows charts, and no history is kept of a slot", s)
		}
		parts = append(parts, field(key, "partitions")+".textContent")
		records = append(records, field(key, "records")+".textContent.replaceAll(',', '')")
	}
	sum := func(exprs []string) string {
		var terms []string
		for _, e := range exprs {
			terms = append(terms, "Number("+e+")")
		}
		return "(" + strings.Join(terms, " + ") + ")"
	}
	b.waitFor("the slots' partitions and records adding up to the link's", fmt.Sprintf(`%s === %d && %s === %d`, sum(parts), partitions, sum(records), total))
	b.waitFor("the slots' partition tables at the source's end offsets", fmt.Sprintf(
		`JSON.stringify([...document.querySelectorAll('.link .parts tbody tr:not([hidden])')].map(tr => tr.cells[3].textContent).sort()) === %q`,
		mustJSON(t, wantNext)))
	if got := eval[int](b, `document.querySelectorAll('.link').length`); got != slots {
		t.Errorf("%d cards, want one per slot (%d)", got, slots)
	}
	b.screenshot("statuspage-slots.png")
	b.mu.Lock()
	for _, u := range b.requests {
		if strings.Contains(u, "/history") {
			t.Errorf("the page asked for %s: no history is kept of a slot", u)
		}
	}
	b.mu.Unlock()
	b.checkClean(srv.URL)
}
