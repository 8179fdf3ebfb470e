package agent

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/seed83556561/mirrord/link"
)

// routes builds the HTTP API. ServeMux answers 404 for an unknown path and
// 405 (with Allow) for a known path with another method.
func (a *Agent) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{
		ErrorLog:      a.log.Named("metrics").StandardLogger(nil),
		ErrorHandling: promhttp.ContinueOnError,
	}))
	mux.HandleFunc("GET /healthz", a.healthz)
	mux.HandleFunc("GET /readyz", a.readyz)
	mux.HandleFunc("GET /v1/links", a.listLinks)
	mux.HandleFunc("GET /v1/links/{name}", a.getLink)
	mux.HandleFunc("POST /v1/links/{name}/pause", a.control((*link.Link).Pause))
	mux.HandleFunc("POST /v1/links/{name}/resume", a.control((*link.Link).Resume))
	mux.HandleFunc("GET /v1/links/{name}/translate", a.translate)
	mux.HandleFunc("POST /v1/links/{name}/failover", a.failover)
	// The status page (agent/ui.go) and what it reads.
	mux.HandleFunc("GET /{$}", a.page)
	mux.HandleFunc("GET /ui/{file}", a.uiAsset)
	mux.HandleFunc("GET /api", a.index)
	mux.HandleFunc("GET /v1/status", a.overview)
	mux.HandleFunc("GET /v1/links/{name}/history", a.linkHistory)
	return mux
}

func (a *Agent) index(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprint(w, `mirrord
GET  /                          the status page (this list for Accept: text/plain)
GET  /api                       this list
GET  /metrics                   Prometheus metrics
GET  /healthz                   200 while the process runs
GET  /readyz                    200 when every link is MIRRORING or PAUSED, else 503
GET  /v1/links                  every link's status
GET  /v1/status                 every link's status with its clusters' regions (the status page's data)
GET  /v1/links/{name}           one link's status
GET  /v1/links/{name}/history   the link's recent throughput, lag and state (an hour by default)
POST /v1/links/{name}/pause     stop mirroring after a final checkpoint
POST /v1/links/{name}/resume    prepare and mirror again
GET  /v1/links/{name}/translate?topic=T&partition=P&offset=O
                                the destination offset of source position O of T[P] (offset translation)
POST /v1/links/{name}/failover?timeout=5m&allow_lag=false&grant_write=false
                                catch up, sync groups a last time, pause; progress in the link's status
`)
}

// healthz says that the process runs and serves HTTP.
func (a *Agent) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "ok")
}

// Readiness is the body of /readyz.
type Readiness struct {
	Ready bool `json:"ready"`
	// Stopping is true once the agent began to stop.
	Stopping bool `json:"stopping,omitempty"`
	// NotReady lists the links that are neither MIRRORING nor PAUSED.
	NotReady []LinkReadiness `json:"not_ready"`
}

// LinkReadiness is a link that is not ready.
type LinkReadiness struct {
	Name        string    `json:"name"`
	State       string    `json:"state"` // link.State by name
	Since       time.Time `json:"since,omitzero"`
	LastError   string    `json:"last_error,omitempty"`
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
}

// readyz is 200 when every link is MIRRORING or PAUSED (an operator's
// pause is a ready state) and the agent is not stopping; else 503. The
// body names each link that is not ready, with its state and last error.
func (a *Agent) readyz(w http.ResponseWriter, _ *http.Request) {
	r := Readiness{Stopping: a.stopping.Load(), NotReady: []LinkReadiness{}}
	for _, l := range a.links {
		s := l.Status()
		if s.State == link.Mirroring || s.State == link.Paused || (s.State == link.Preparing && s.StandingBy != "") {
			continue // mirroring, paused, or a hot standby for the agent that mirrors
		}
		r.NotReady = append(r.NotReady, LinkReadiness{
			Name: s.Name, State: s.State.String(), Since: s.Since, LastError: s.LastError, LastErrorAt: s.LastErrorAt,
		})
	}
	for _, sr := range a.slotted {
		sts, joined := sr.statuses()
		if !joined {
			r.NotReady = append(r.NotReady, LinkReadiness{Name: sr.name, State: "JOINING",
				LastError: "not yet a member of the link's slots group " + SlotsGroup(sr.name) + " (see the log)"})
			continue
		}
		for _, s := range sts { // owning no slot: a ready standby
			if s.State == link.Mirroring || s.State == link.Paused {
				continue
			}
			r.NotReady = append(r.NotReady, LinkReadiness{
				Name: slotName(s), State: s.State.String(), Since: s.Since, LastError: s.LastError, LastErrorAt: s.LastErrorAt,
			})
		}
	}
	r.Ready = len(r.NotReady) == 0 && !r.Stopping
	code := http.StatusOK
	if !r.Ready {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, r)
}

func (a *Agent) listLinks(w http.ResponseWriter, _ *http.Request) {
	out := make([]link.Status, 0, len(a.links))
	for _, l := range a.links {
		out = append(out, status(l))
	}
	out = append(out, a.SlotStatuses()...)
	writeJSON(w, http.StatusOK, out)
}

func (a *Agent) getLink(w http.ResponseWriter, r *http.Request) {
	if l := a.link(w, r); l != nil {
		writeJSON(w, http.StatusOK, status(l))
	}
}

// control runs an operator command on the named link and answers 202 with
// the link's status: the link acts on it asynchronously, so the state in
// the answer may still be the one before.
func (a *Agent) control(cmd func(*link.Link)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		l := a.link(w, r)
		if l == nil {
			return
		}
		a.log.Info("operator command", "link", l.Name(), "command", r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:], "remote", r.RemoteAddr)
		cmd(l)
		writeJSON(w, http.StatusAccepted, status(l))
	}
}

// link finds the link the path names, or answers 404 and returns nil.
func (a *Agent) link(w http.ResponseWriter, r *http.Request) *link.Link {
	name := r.PathValue("name")
	for _, sr := range a.slotted {
		if sr.name == name {
			sts, _ := sr.statuses()
			owned := make([]string, 0, len(sts))
			for _, st := range sts {
				owned = append(owned, strconv.Itoa(*st.Slot))
			}
			writeJSON(w, http.StatusConflict, apiError{Error: fmt.Sprintf("%v: link %q runs as %d slots that the agents running it share (this agent owns slots [%s]); commands for one link (status, pause, resume, failover, translation) do not work on a link with slots yet: GET /v1/links lists the slots this agent runs",
				errSlotted, name, sr.cfg.Link.Slots, strings.Join(owned, " "))})
			return nil
		}
	}
	names := make([]string, 0, len(a.links))
	for _, l := range a.links {
		if l.Name() == name {
			return l
		}
		names = append(names, l.Name())
	}
	writeJSON(w, http.StatusNotFound, apiError{Error: fmt.Sprintf("no link %q; the links are: %s", name, strings.Join(names, ", "))})
	return nil
}

type apiError struct {
	Error string `json:"error"`
}

// status is the link's status with an empty partition list rather than
// null when it has none.
func status(l *link.Link) link.Status {
	s := l.Status()
	if s.Partitions == nil {
		s.Partitions = []link.PartitionStatus{}
	}
	return s
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		// Every type written here marshals; this is a bug.
		http.Error(w, "encode response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}
