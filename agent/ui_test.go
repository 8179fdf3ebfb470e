package agent

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed83556561/mirrord/internal/testkit/kafkatest"
	"github.com/seed83556561/mirrord/link"
	"github.com/seed83556561/mirrord/transform"
)

// TestPageAndAssets checks what GET / and GET /ui/{file} serve: the page
// with its security headers to a browser, the list of endpoints to a client
// that asks for text, every asset with its content type, revalidation by
// ETag, and 404 for what is not an asset. Guards against a page a browser
// refuses (a module script with the wrong type) or one that is cached
// across upgrades.
func TestPageAndAssets(t *testing.T) {
	a := historyAgent(t, historyHCL, HistoryConfig{})
	browser := http.Header{"Accept": {"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}}

	rec := serveAgent(a, http.MethodGet, "/", browser)
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "text/html; charset=utf-8" ||
		rec.Body.String() != string(assets["index.html"].body) {
		t.Fatalf("GET / from a browser: %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	for k, want := range map[string]string{
		"Content-Security-Policy": pageCSP, "X-Content-Type-Options": "nosniff", "Vary": "Accept",
		"Cache-Control": "no-cache", "Referrer-Policy": "no-referrer",
	} {
		if got := rec.Header().Get(k); got != want {
			t.Errorf("GET /: %s %q, want %q", k, got, want)
		}
	}
	if !strings.Contains(pageCSP, "default-src 'none'") || !strings.Contains(pageCSP, "connect-src 'self'") {
		t.Errorf("the page's CSP lets it reach other hosts: %s", pageCSP)
	}

	for _, tc := range []struct {
		name   string
		target string
		header http.Header
	}{
		{"curl asking for text", "/", http.Header{"Accept": {"text/plain"}}},
		{"the endpoint list", "/api", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := serveAgent(a, http.MethodGet, tc.target, tc.header)
			body := rec.Body.String()
			if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "text/plain; charset=utf-8" {
				t.Fatalf("%d %q %s", rec.Code, rec.Header().Get("Content-Type"), body)
			}
			for _, want := range []string{"GET  /v1/links ", "GET  /v1/status ", "GET  /v1/links/{name}/history ", "POST /v1/links/{name}/pause "} {
				if !strings.Contains(body, want) {
					t.Errorf("the list lacks %q:\n%s", want, body)
				}
			}
		})
	}
	if rec := serveAgent(a, http.MethodGet, "/", http.Header{"Accept": {"*/*"}}); rec.Header().Get("Content-Type") != "text/html; charset=utf-8" {
		t.Errorf("GET / with Accept */*: %q, want the page", rec.Header().Get("Content-Type"))
	}

	wantTypes := map[string]string{".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
	served := 0
	for name, as := range assets {
		if name == "index.html" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			rec := serveAgent(a, http.MethodGet, "/ui/"+name, nil)
			if rec.Code != http.StatusOK || rec.Body.String() != string(as.body) {
				t.Fatalf("GET /ui/%s: %d, %d bytes, want the %d embedded", name, rec.Code, rec.Body.Len(), len(as.body))
			}
			if got, want := rec.Header().Get("Content-Type"), wantTypes[path.Ext(name)]; got != want {
				t.Errorf("Content-Type %q, want %q", got, want)
			}
			if rec.Header().Get("X-Content-Type-Options") != "nosniff" || rec.Header().Get("ETag") == "" {
				t.Errorf("headers %v", rec.Header())
			}
			again := serveAgent(a, http.MethodGet, "/ui/"+name, http.Header{"If-None-Match": {rec.Header().Get("ETag")}})
			if again.Code != http.StatusNotModified || again.Body.Len() != 0 {
				t.Errorf("revalidation with the ETag: %d, %d bytes; want 304", again.Code, again.Body.Len())
			}
		})
		served++
	}
	if served < 4 {
		t.Errorf("only %d assets besides the page: %v", served, slices.Sorted(func(yield func(string) bool) {
			for k := range assets {
				if !yield(k) {
					return
				}
			}
		}))
	}

	for _, tc := range []struct {
		method, target string
		code           int
	}{
		{http.MethodGet, "/ui/nope.js", http.StatusNotFound},
		{http.MethodGet, "/ui/index.html", http.StatusNotFound}, // only at /, where its relative references resolve
		{http.MethodGet, "/ui/", http.StatusNotFound},
		{http.MethodPost, "/", http.StatusMethodNotAllowed},
		{http.MethodPost, "/v1/status", http.StatusMethodNotAllowed},
		{http.MethodGet, "/index.html", http.StatusNotFound},
	} {
		if rec := serveAgent(a, tc.method, tc.target, browser); rec.Code != tc.code {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.target, rec.Code, tc.code)
		}
	}
}

var (
	absoluteURL = regexp.MustCompile(`(?i)[a-z][a-z0-9+.-]*://`)
	// protocolRelative is //host in an attribute, a CSS url() or a JS import.
	protocolRelative = regexp.MustCompile(`(?i)(?:src|href|action)\s*=\s*["']?\s*//|url\(\s*["']?\s*//|from\s+["']//|import\s*\(\s*["']//`)
	htmlRef          = regexp.MustCompile(`(?i)\b(?:src|href)\s*=\s*["']([^"']*)["']`)
	jsImport         = regexp.MustCompile(`(?m)^\s*import\s+(?:[^'"]*?\s+from\s+)?['"]([^'"]+)['"]|\bimport\s*\(\s*['"]([^'"]+)['"]`)
	cssRef           = regexp.MustCompile(`(?i)@import|url\(\s*["']?([^"')]*)`)
)

// TestAssetsStayOnThisHost guards the page on a network without internet:
// no embedded file names another host (no scheme://, no //host), the
// page's references and the modules' imports are relative and resolve to
// embedded files, and the CSS loads nothing (no @import, url() only for
// data:).
func TestAssetsStayOnThisHost(t *testing.T) {
	if len(assets) == 0 {
		t.Fatal("nothing embedded")
	}
	for name, as := range assets {
		body := string(as.body)
		if m := absoluteURL.FindString(body); m != "" {
			t.Errorf("%s contains an absolute URL (%q...): the page must not load anything from another host", name, m)
		}
		if m := protocolRelative.FindString(body); m != "" {
			t.Errorf("%s contains a protocol-relative reference %q", name, m)
		}
		var refs []string
		switch path.Ext(name) {
		case ".html":
			for _, m := range htmlRef.FindAllStringSubmatch(body, -1) {
				refs = append(refs, m[1])
			}
		case ".js":
			for _, m := range jsImport.FindAllStringSubmatch(body, -1) {
				refs = append(refs, m[1]+m[2])
			}
		case ".css":
			for _, m := range cssRef.FindAllStringSubmatch(body, -1) {
				if !strings.HasPrefix(m[1], "data:") {
					t.Errorf("%s loads %q: the stylesheet must load nothing", name, m[0])
				}
			}
		}
		for _, ref := range refs {
			switch {
			case ref == "data:," || ref == "api":
				// the empty favicon; the endpoint list, served by the agent
			case name == "index.html" && strings.HasPrefix(ref, "ui/"):
				if _, ok := assets[strings.TrimPrefix(ref, "ui/")]; !ok {
					t.Errorf("index.html references %s, which is not embedded", ref)
				}
			case strings.HasSuffix(name, ".js") && strings.HasPrefix(ref, "./"):
				if _, ok := assets[path.Join(path.Dir(name), ref)]; !ok {
					t.Errorf("%s imports %s, which is not embedded", name, ref)
				}
			default:
				t.Errorf("%s references %q: want a relative path to an embedded file", name, ref)
			}
		}
	}
	// The checks above find what they look for.
	for _, bad := range []string{`<script src="https://cdn.example/x.js">`, `<img src="//cdn.example/x.png">`, `@import url(//fonts.example/css);`} {
		if !absoluteURL.MatchString(bad) && !protocolRelative.MatchString(bad) {
			t.Errorf("the checks miss %s", bad)
		}
	}
}

// TestLinkView checks what GET /v1/status adds to a link's status: the
// regions of both clusters as transform.RegionOf gives them (hashed for an
// ID that is not a UUID), an empty partition list rather than null, and
// the commands.
func TestLinkView(t *testing.T) {
	v := newLinkView(link.Status{Name: "l", State: link.Mirroring, SourceClusterID: kafkatest.SourceClusterID, DestinationClusterID: "kfake"})
	if v.SourceRegion != "0x71720375" || v.SourceRegionHashed {
		t.Errorf("source region %q hashed %v, want 0x71720375 (kafkatest's comment)", v.SourceRegion, v.SourceRegionHashed)
	}
	r, hashed := transform.RegionOf("kfake")
	if want := fmt.Sprintf("0x%08x", uint32(r)); v.DestinationRegion != want || !v.DestinationRegionHashed || !hashed {
		t.Errorf("destination region %q hashed %v, want %s hashed", v.DestinationRegion, v.DestinationRegionHashed, want)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"name": `"l"`, "state": `"MIRRORING"`, "partitions": `[]`, "source_region": `"0x71720375"`,
		"destination_region_hashed": `true`, "commands": `["pause","resume","failover"]`,
	} {
		got, _ := json.Marshal(m[k])
		if string(got) != want {
			t.Errorf("%s = %s, want %s", k, got, want)
		}
	}
	if _, ok := m["counters"].(map[string]any)["records_mirrored"]; !ok {
		t.Errorf("no counters.records_mirrored in %s", b)
	}
	if v := newLinkView(link.Status{Name: "l"}); v.SourceRegion != "" || v.DestinationRegion != "" {
		t.Errorf("regions of a link that has not learned its cluster IDs: %q %q", v.SourceRegion, v.DestinationRegion)
	}
}

// TestOverviewEndpoint checks GET /v1/status on an agent that has not run:
// the clock's time, the history's shape, and the link.
func TestOverviewEndpoint(t *testing.T) {
	at := time.Date(2026, 11, 29, 12, 30, 0, 0, time.UTC)
	a := historyAgent(t, historyHCL, HistoryConfig{Interval: 5 * time.Second, Samples: 720, Now: func() time.Time { return at }})
	rec := serveAgent(a, http.MethodGet, "/v1/status", nil)
	if rec.Code != http.StatusOK || rec.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("GET /v1/status: %d %v %s", rec.Code, rec.Header(), rec.Body)
	}
	var ov struct {
		At      time.Time    `json:"at"`
		History HistoryShape `json:"history"`
		Links   []struct {
			Name       string   `json:"name"`
			State      string   `json:"state"`
			Source     string   `json:"source"`
			Partitions []any    `json:"partitions"`
			Commands   []string `json:"commands"`
		} `json:"links"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &ov); err != nil {
		t.Fatal(err)
	}
	if !ov.At.Equal(at) || ov.History != (HistoryShape{IntervalSeconds: 5, Capacity: 720}) || len(ov.Links) != 1 {
		t.Fatalf("overview %s", rec.Body)
	}
	if l := ov.Links[0]; l.Name != "l" || l.State != "STOPPED" || l.Source != "src" || l.Partitions == nil || !slices.Equal(l.Commands, linkCommands) {
		t.Errorf("link %+v", l)
	}
}

// TestCommandsMatchRoutes: the commands GET /v1/status offers, and so the
// page's buttons, are exactly the POST /v1/links/{name}/{command} routes.
// Guards the hidden failover button: whoever adds the route must list it.
func TestCommandsMatchRoutes(t *testing.T) {
	a := historyAgent(t, historyHCL, HistoryConfig{})
	for _, cmd := range []string{"pause", "resume", "failover", "stop", "restart"} {
		_, pattern := a.mux.Handler(httptest.NewRequest(http.MethodPost, "/v1/links/l/"+cmd, nil))
		if routed, listed := pattern != "", slices.Contains(linkCommands, cmd); routed != listed {
			t.Errorf("command %s: routed %v (%q), listed in GET /v1/status %v", cmd, routed, pattern, listed)
		}
	}
}

// TestPrefersText covers the Accept negotiation of GET /.
func TestPrefersText(t *testing.T) {
	for accept, want := range map[string]bool{
		"":                           false,
		"*/*":                        false,
		"text/plain":                 true,
		"text/plain; charset=utf-8":  true,
		"TEXT/PLAIN":                 true,
		"text/html,text/plain;q=0.5": false,
		"application/json":           false,
		"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8": false,
	} {
		if got := prefersText(accept); got != want {
			t.Errorf("prefersText(%q) = %v, want %v", accept, got, want)
		}
	}
}
