package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// lockedBuffer is an Out that the test reads while the demo writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestDemoServesStatusPage: while the demo runs, the status page address it
// prints serves the page, and the page's data (GET /v1/status and the
// link's history) shows the demo's link mirroring, with its clusters'
// regions, every partition and the demo's sampling. The load waits in
// OnProduced until the test has looked. Guards the line an operator opens.
func TestDemoServesStatusPage(t *testing.T) {
	cls, err := StartClusters()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cls.Close)
	out := &lockedBuffer{}
	release := make(chan struct{})
	var releaseOnce sync.Once
	d, err := New(Config{Duration: 5 * time.Minute, Records: 400, Listen: "127.0.0.1:0"}, Deps{
		Out: out, LogOutput: testWriter{t}, Clusters: cls,
		OnProduced: func(bool, []*kgo.Record) { <-release },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	type result struct {
		res Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := d.Run(ctx)
		done <- result{res, err}
	}()
	var ran result
	finished := false
	finish := func() {
		if !finished {
			finished = true
			releaseOnce.Do(func() { close(release) })
			ran = <-done
		}
	}
	t.Cleanup(finish)

	var base string
	wait(t, func() (bool, string) {
		m := regexp.MustCompile(`(?m)^  status page  (http://127\.0\.0\.1:\d+)/$`).FindStringSubmatch(out.String())
		if m != nil {
			base = m[1]
		}
		return m != nil, "no status page line in:\n" + out.String()
	})

	header, page := get(t, base+"/")
	if header.Get("Content-Type") != "text/html; charset=utf-8" || !strings.Contains(page, `<script type="module" src="ui/app.js">`) {
		t.Fatalf("GET %s/: %q\n%s", base, header.Get("Content-Type"), page)
	}
	type overview struct {
		Links []struct {
			Name         string `json:"name"`
			State        string `json:"state"`
			SourceRegion string `json:"source_region"`
			DestRegion   string `json:"destination_region"`
			Partitions   []any  `json:"partitions"`
			Counters     struct {
				Records int64 `json:"records_mirrored"`
			} `json:"counters"`
		} `json:"links"`
	}
	var ov overview
	wait(t, func() (bool, string) {
		_, body := get(t, base+"/v1/status")
		ov = overview{}
		if err := json.Unmarshal([]byte(body), &ov); err != nil {
			t.Fatalf("GET /v1/status: %v\n%s", err, body)
		}
		return len(ov.Links) == 1 && ov.Links[0].State == "MIRRORING" && ov.Links[0].Counters.Records > 0, body
	})
	l := ov.Links[0]
	if l.Name != "demo" || len(l.Partitions) != TotalPartitions() ||
		l.SourceRegion != fmt.Sprintf("0x%08x", uint32(cls.Source.Region())) || l.DestRegion != fmt.Sprintf("0x%08x", uint32(cls.Destination.Region())) {
		t.Errorf("the page's link: %+v", l)
	}
	var hist struct {
		IntervalSeconds float64 `json:"interval_seconds"`
		Capacity        int     `json:"capacity"`
		Samples         []any   `json:"samples"`
	}
	wait(t, func() (bool, string) {
		_, body := get(t, base+"/v1/links/demo/history")
		if err := json.Unmarshal([]byte(body), &hist); err != nil {
			t.Fatalf("history: %v\n%s", err, body)
		}
		return len(hist.Samples) > 0, body
	})
	if hist.IntervalSeconds != HistoryInterval.Seconds() || hist.Capacity != HistorySamples {
		t.Errorf("the demo's history samples every %gs and keeps %d, want %s and %d", hist.IntervalSeconds, hist.Capacity, HistoryInterval, HistorySamples)
	}

	finish()
	if ran.err != nil || !ran.res.Verified {
		t.Fatalf("the demo after the look at its page: verified %v, %v\n%s", ran.res.Verified, ran.err, out.String())
	}
}

// get returns the header and body of a GET of url, which must answer 200.
func get(t *testing.T, url string) (http.Header, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v\n%s", url, resp.StatusCode, err, b)
	}
	return resp.Header, string(b)
}

func wait(t *testing.T, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		ok, what := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
