package console

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/outbox-relay/outbox-relay/replay"
)

// problem is an RFC 9457 problem document.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// problemType is the type URI of a problem of kind (a relative reference
// into the API's documentation).
func problemType(kind string) string { return "/api/problems/" + kind }

// writeProblem answers with a problem document.
func writeProblem(w http.ResponseWriter, status int, kind, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(problem{Type: problemType(kind), Title: http.StatusText(status), Status: status, Detail: detail})
}

// The problems the API answers with.
func notFound(w http.ResponseWriter, what string) {
	writeProblem(w, http.StatusNotFound, "not-found", what)
}

func badRequest(w http.ResponseWriter, detail string) {
	writeProblem(w, http.StatusBadRequest, "bad-request", detail)
}

func unauthorized(w http.ResponseWriter, detail string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="outbox-relay console"`)
	writeProblem(w, http.StatusUnauthorized, "unauthorized", detail)
}

func forbidden(w http.ResponseWriter, detail string) {
	writeProblem(w, http.StatusForbidden, "forbidden", detail)
}

func tooMany(w http.ResponseWriter, wait time.Duration) {
	secs := max(int(wait.Seconds()+0.999), 1)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	writeProblem(w, http.StatusTooManyRequests, "rate-limited", "too many requests with this token: retry after "+strconv.Itoa(secs)+"s")
}

// replayRefused answers a replay the relay did not make: 429 when the
// tenant has as many jobs queued as it may (the detail names the cap), else
// 422 with why.
func replayRefused(w http.ResponseWriter, err error) {
	if full := (*replay.QueueFullError)(nil); errors.As(err, &full) {
		writeProblem(w, http.StatusTooManyRequests, "replay-queue-full", err.Error())
		return
	}
	writeProblem(w, http.StatusUnprocessableEntity, "replay-refused", err.Error())
}

func unavailable(w http.ResponseWriter, detail string) {
	writeProblem(w, http.StatusServiceUnavailable, "unavailable", detail)
}

// internal answers an error of the relay's side: logged, and not shown
// (it may name the relay's database or files).
func (s *Server) internal(w http.ResponseWriter, err error) {
	s.o.Logger.Error("console: a request failed", slog.Any("err", err))
	writeProblem(w, http.StatusInternalServerError, "internal", "the request failed on the relay's side; its log says why")
}

// writeJSON answers with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(true)
	_ = enc.Encode(v)
}
