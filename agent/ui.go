package agent

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/seed83556561/mirrord/link"
	"github.com/seed83556561/mirrord/transform"
)

// The status page: ui/index.html at GET /, the other files of ui/ at
// GET /ui/{file}. Plain ES modules and CSS, no build step, nothing loaded
// from another host (the Content-Security-Policy forbids it, and a test
// checks every file). The page reads GET /v1/status every second and GET
// /v1/links/{name}/history at the history's interval (not for the slots of
// a link with slots, which /v1/status lists one by one), and sends the
// operator's token, if the API asks for one, as an Authorization header.
//
//go:embed ui
var uiFiles embed.FS

// pageCSP lets the page load its own scripts, styles and API answers and
// nothing else; form-action 'none' keeps the token form from ever being
// submitted into a URL.
const pageCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// assetTypes are the content types of the page's files, by extension.
var assetTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
}

// asset is one embedded file, ready to serve.
type asset struct {
	body  []byte
	ctype string
	etag  string
}

// assets are the files of ui/ by name; read once, they never change.
var assets = loadAssets(uiFiles)

func loadAssets(fsys fs.FS) map[string]asset {
	out := map[string]asset{}
	err := fs.WalkDir(fsys, "ui", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		ctype, ok := assetTypes[path.Ext(p)]
		if !ok {
			return fmt.Errorf("%s: no content type for %q", p, path.Ext(p))
		}
		sum := sha256.Sum256(body)
		out[strings.TrimPrefix(p, "ui/")] = asset{body: body, ctype: ctype, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	if err != nil {
		// The files are compiled in; this is a broken build.
		panic("agent: embedded status page: " + err.Error())
	}
	return out
}

// pageFile is the page itself; it is served at / only, so that its
// relative references resolve against /.
const pageFile = "index.html"

// page answers GET /: the status page, or the list of endpoints as text
// for a client that asks for text/plain and not HTML.
func (a *Agent) page(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Vary", "Accept")
	if prefersText(r.Header.Get("Accept")) {
		a.index(w, r)
		return
	}
	w.Header().Set("Content-Security-Policy", pageCSP)
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.Header().Set("X-Frame-Options", "DENY")
	serveAsset(w, r, assets[pageFile])
}

// prefersText reports whether an Accept header names text/plain but not
// text/html (curl sends */*, which gets the page).
func prefersText(accept string) bool {
	var plain, html bool
	for part := range strings.SplitSeq(accept, ",") {
		mt, _, _ := strings.Cut(part, ";")
		switch strings.ToLower(strings.TrimSpace(mt)) {
		case "text/plain":
			plain = true
		case "text/html":
			html = true
		}
	}
	return plain && !html
}

// uiAsset answers GET /ui/{file}.
func (a *Agent) uiAsset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	as, ok := assets[name]
	if !ok || name == pageFile {
		http.NotFound(w, r)
		return
	}
	serveAsset(w, r, as)
}

// serveAsset writes an embedded file; the browser revalidates it with
// its ETag, so that a new binary's page is seen at the next load.
func serveAsset(w http.ResponseWriter, r *http.Request, as asset) {
	h := w.Header()
	h.Set("Content-Type", as.ctype)
	h.Set("ETag", as.etag)
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(as.body))
}

// linkCommands are the operator commands POST /v1/links/{name}/{command}
// accepts, as GET /v1/status lists them; the page shows a button for
// each (a failover button appears once "failover" is here). A test
// holds this list to the routes.
var linkCommands = []string{"pause", "resume", "failover"}

// Overview is the body of GET /v1/status, what the status page reads.
type Overview struct {
	// At is the agent's time of the snapshot; the page divides counter
	// differences between two snapshots by the difference of their At.
	At      time.Time    `json:"at"`
	History HistoryShape `json:"history"`
	// Counters is the link counter table: each link's counters, in the
	// order the page lists them, with their labels.
	Counters []link.CounterInfo `json:"counters"`
	Links    []LinkView         `json:"links"`
}

// HistoryShape is how GET /v1/links/{name}/history samples.
type HistoryShape struct {
	IntervalSeconds float64 `json:"interval_seconds"`
	Capacity        int     `json:"capacity"`
}

// LinkView is a link's status (GET /v1/links/{name}) with the regions of
// its clusters and the commands it accepts.
type LinkView struct {
	link.Status
	// SourceRegion and DestinationRegion are transform.RegionOf the
	// cluster IDs, as 0x and 8 hex digits; empty until the link learned
	// the ID. *Hashed: the ID is not a UUID and its region is a hash
	// of it (DESIGN §3).
	SourceRegion            string   `json:"source_region,omitempty"`
	SourceRegionHashed      bool     `json:"source_region_hashed,omitempty"`
	DestinationRegion       string   `json:"destination_region,omitempty"`
	DestinationRegionHashed bool     `json:"destination_region_hashed,omitempty"`
	Commands                []string `json:"commands"`
}

// newLinkView adds the regions of s's clusters and the commands.
func newLinkView(s link.Status) LinkView {
	v := LinkView{Status: s, Commands: linkCommands}
	if s.Partitions == nil {
		v.Partitions = []link.PartitionStatus{}
	}
	v.SourceRegion, v.SourceRegionHashed = regionOf(s.SourceClusterID)
	v.DestinationRegion, v.DestinationRegionHashed = regionOf(s.DestinationClusterID)
	return v
}

func regionOf(clusterID string) (string, bool) {
	if clusterID == "" {
		return "", false
	}
	r, hashed := transform.RegionOf(clusterID)
	return fmt.Sprintf("0x%08x", uint32(r)), hashed
}

// overview answers GET /v1/status.
func (a *Agent) overview(w http.ResponseWriter, _ *http.Request) {
	out := Overview{
		At:       a.now().UTC(),
		History:  HistoryShape{IntervalSeconds: a.hist.interval.Seconds(), Capacity: a.hist.capacity},
		Counters: link.CounterTable(),
		Links:    make([]LinkView, 0, len(a.links)),
	}
	for _, st := range a.statuses() {
		out.Links = append(out.Links, newLinkView(st))
	}
	// The slots this agent runs of its links with slots: each a card of
	// its own, with no commands (they answer 409 on such a link) and no
	// history (the agent keeps none for a slot, which may move).
	for _, st := range a.SlotStatuses() {
		v := newLinkView(st)
		v.Commands = []string{}
		out.Links = append(out.Links, v)
	}
	writeJSON(w, http.StatusOK, out)
}
