package agent

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/seed83556561/mirrord/failover"
)

// failover answers POST /v1/links/{name}/failover?timeout=5m&allow_lag=true&grant_write=true:
// it starts the link's failover (link.StartFailover) and answers 202 with
// the link's status, whose failover field shows its progress and outcome;
// 409 if the link is not mirroring or a failover runs; 400 for a bad
// parameter.
func (a *Agent) failover(w http.ResponseWriter, r *http.Request) {
	l := a.link(w, r)
	if l == nil {
		return
	}
	q := r.URL.Query()
	o := failover.Options{Timeout: failover.DefaultTimeout}
	if s := q.Get("timeout"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			writeJSON(w, http.StatusBadRequest, apiError{Error: fmt.Sprintf("timeout %q is not a positive duration (e.g. 5m)", s)})
			return
		}
		o.Timeout = d
	}
	if s := q.Get("allow_lag"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, apiError{Error: fmt.Sprintf("allow_lag %q is not true or false", s)})
			return
		}
		o.AllowLag = b
	}
	if s := q.Get("grant_write"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, apiError{Error: fmt.Sprintf("grant_write %q is not true or false", s)})
			return
		}
		o.GrantWrite = b
	}
	if err := l.StartFailover(o); err != nil {
		writeJSON(w, http.StatusConflict, apiError{Error: err.Error()})
		return
	}
	a.log.Info("operator command", "link", l.Name(), "command", "failover", "timeout", o.Timeout, "allow_lag", o.AllowLag, "grant_write", o.GrantWrite, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusAccepted, status(l))
}
