package agent

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/seed83556561/mirrord/translate"
)

// translateTimeout bounds one translation served over HTTP (a translation
// reads at most 16 MiB from each cluster, link/translate.go).
const translateTimeout = 30 * time.Second

// TranslateError is the body of a translation the link could not make:
// the message, and a reason a caller can branch on (not_mirrored,
// below_destination_start, ahead_of_link, past_source_end,
// untranslatable, failed).
type TranslateError struct {
	Error  string `json:"error"`
	Reason string `json:"reason"`
}

// translateReasons maps link's translation errors to their reason and
// HTTP status; any other error (a cluster that did not answer) is
// "failed", 502.
var translateReasons = []struct {
	err    error
	reason string
	code   int
}{
	{translate.ErrNotMirrored, "not_mirrored", http.StatusNotFound},
	{translate.ErrBelowDestinationStart, "below_destination_start", http.StatusUnprocessableEntity},
	{translate.ErrAheadOfLink, "ahead_of_link", http.StatusConflict},
	{translate.ErrPastSourceEnd, "past_source_end", http.StatusUnprocessableEntity},
	{translate.ErrUntranslatable, "untranslatable", http.StatusUnprocessableEntity},
}

// TranslateReason is the reason and HTTP status of a translation error.
func TranslateReason(err error) (string, int) {
	for _, r := range translateReasons {
		if errors.Is(err, r.err) {
			return r.reason, r.code
		}
	}
	return "failed", http.StatusBadGateway
}

// translate answers GET /v1/links/{name}/translate?topic=&partition=&offset=
// with the translate.Result of a source position: 400 for a missing or
// malformed parameter, 404 for a partition the link does not mirror, and
// the statuses of TranslateReason for the rest.
func (a *Agent) translate(w http.ResponseWriter, r *http.Request) {
	l := a.link(w, r)
	if l == nil {
		return
	}
	q := r.URL.Query()
	topic := q.Get("topic")
	part, perr := strconv.ParseInt(q.Get("partition"), 10, 32)
	off, oerr := strconv.ParseInt(q.Get("offset"), 10, 64)
	switch {
	case topic == "":
		writeJSON(w, http.StatusBadRequest, apiError{Error: "the query needs topic, partition and offset: ?topic=T&partition=P&offset=O"})
		return
	case perr != nil || part < 0:
		writeJSON(w, http.StatusBadRequest, apiError{Error: fmt.Sprintf("partition %q is not a partition number", q.Get("partition"))})
		return
	case oerr != nil || off < 0 || off == math.MaxInt64:
		writeJSON(w, http.StatusBadRequest, apiError{Error: fmt.Sprintf("offset %q is not a source offset (0 or more)", q.Get("offset"))})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), translateTimeout)
	defer cancel()
	tr, err := l.Translate(ctx, topic, int32(part), off)
	if err != nil {
		reason, code := TranslateReason(err)
		writeJSON(w, code, TranslateError{Error: err.Error(), Reason: reason})
		return
	}
	writeJSON(w, http.StatusOK, tr)
}
