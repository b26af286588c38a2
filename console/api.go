package console

// This file owns the API's routes (what the mux serves and the OpenAPI
// document describes), the wrapper every route runs in (authentication, rate
// limit, CSRF), the helpers routes share (decode, parseTime) and the tenant
// links route. The routes themselves: endpoints.go and endpointwrite.go,
// attempts.go, deadletters.go.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// route is one route of the API, with what its OpenAPI operation says.
type route struct {
	method, path, id, summary string
	// query are the query parameters: name → description.
	query [][2]string
	// body and resp name the schemas of the request and of the answer
	// (schemas in openapi.go); status is the answer's on success.
	body, resp string
	status     int
	// write: the route changes something (audit line, CSRF for a session).
	write bool
	h     func(s *Server, w http.ResponseWriter, r *http.Request, p principal)
}

// apiRoutes are the API's routes: the mux serves these, and the OpenAPI
// document describes these.
var apiRoutes = []route{
	{method: "GET", path: "/api/v1/sinks", id: "listSinks", summary: "The webhook sinks, with their endpoints counted by state and their greatest lag: for an operator, the counts the gateway keeps as endpoints change state (no row is read); for a tenant, its own rows.", resp: "SinkList", status: 200, h: (*Server).listSinks},
	{method: "GET", path: "/api/v1/endpoints", id: "listEndpoints", summary: "A page of the endpoints (of the configuration, then of the endpoints table, each sink in turn, by id) with state, health and lag.", query: [][2]string{{"sink", "only this webhook sink's"},
		{"state", "only endpoints in this state: running (attached, waiting or catching_up), attached, waiting, catching_up, disabled, off, invalid, stopped, unknown"}, pageQuery[0], pageQuery[1], pageQuery[2]}, resp: "EndpointList", status: 200, h: (*Server).listEndpoints},
	{method: "POST", path: "/api/v1/endpoints/{sink}", id: "createEndpoint", summary: "Add an endpoint as a row of the sink's endpoints table; the answer holds its signing secret, shown this once.", body: "EndpointWrite", resp: "EndpointSecret", status: 201, write: true, h: (*Server).createEndpoint},
	{method: "GET", path: "/api/v1/endpoints/{sink}/{endpoint}", id: "getEndpoint", summary: "One endpoint.", resp: "Endpoint", status: 200, h: (*Server).getEndpoint},
	{method: "PUT", path: "/api/v1/endpoints/{sink}/{endpoint}", id: "updateEndpoint", summary: "Set an endpoint row's url, tenant, filters and rate limit.", body: "EndpointWrite", resp: "Endpoint", status: 200, write: true, h: (*Server).updateEndpoint},
	{method: "DELETE", path: "/api/v1/endpoints/{sink}/{endpoint}", id: "deleteEndpoint", summary: "Delete an endpoint row.", status: 204, write: true, h: (*Server).deleteEndpoint},
	{method: "POST", path: "/api/v1/endpoints/{sink}/{endpoint}/disable", id: "disableEndpoint", summary: "Disable an endpoint row (enabled = 0): nothing is sent to it until it is enabled, and then what was committed meanwhile (it resumes from its cursor).", resp: "Endpoint", status: 200, write: true, h: (*Server).disableEndpoint},
	{method: "POST", path: "/api/v1/endpoints/{sink}/{endpoint}/enable", id: "enableEndpoint", summary: "Enable an endpoint: its row's enabled = 1, and the mark of an endpoint the relay disabled for failing too long cleared (it resumes from its cursor).", resp: "Endpoint", status: 200, write: true, h: (*Server).enableEndpoint},
	{method: "POST", path: "/api/v1/endpoints/{sink}/{endpoint}/rotate-secret", id: "rotateSecret", summary: "Make a new signing secret the row's first; keep_old keeps the old ones while receivers switch. The answer holds the new secret, shown this once.", body: "Rotate", resp: "EndpointSecret", status: 200, write: true, h: (*Server).rotateSecret},
	{method: "POST", path: "/api/v1/endpoints/{sink}/{endpoint}/recover", id: "recoverEndpoint", summary: "Send the endpoint what it was sent since a time, again (a replay job the running relay runs).", body: "Recover", resp: "Job", status: 202, write: true, h: (*Server).recoverEndpoint},
	{method: "GET", path: "/api/v1/attempts", id: "listAttempts", summary: "A page of delivery attempts, newest first (by id).", query: [][2]string{
		{"sink", "only this webhook sink's"}, {"endpoint", "only this endpoint's (its id: a tenant's endpoint's is not its name)"}, {"event_id", "only this event's"},
		{"status", "only attempts answered with this HTTP status"}, {"failed", "true: only attempts that did not deliver"},
		{"since", "only attempts at or after this time (RFC 3339, or a duration ago: 2h)"}, {"until", "only attempts before this time"},
		{"before", "only attempts with an id below it (iterator is the same, opaque)"}, pageQuery[0], pageQuery[1], pageQuery[2]}, resp: "AttemptList", status: 200, h: (*Server).listAttempts},
	{method: "GET", path: "/api/v1/attempts/{id}", id: "getAttempt", summary: "One attempt, with the first bytes of the endpoint's answer.", resp: "Attempt", status: 200, h: (*Server).getAttempt},
	{method: "POST", path: "/api/v1/attempts/{id}/resend", id: "resendAttempt", summary: "Send the attempt's event again to its endpoint, freshly signed (a replay job selecting only that event); a new attempt is recorded.", resp: "Job", status: 202, write: true, h: (*Server).resend},
	{method: "GET", path: "/api/v1/dead-letters", id: "listDeadLetters", summary: "A page of the dead letters of the webhook endpoints, oldest first (by id).", query: [][2]string{{"sink", "only this sink's or endpoint's (sink/endpoint)"}, {"since", "stored at or after"}, {"until", "stored before"}, pageQuery[0], pageQuery[1], pageQuery[2]}, resp: "DeadLetterList", status: 200, h: (*Server).listDeadLetters},
	{method: "POST", path: "/api/v1/links", id: "createLink", summary: "Mint a tenant's signed link (operator tokens only): the path of that tenant's view, valid for ttl (default 15m, at most 24h), to embed in a frame.", body: "LinkRequest", resp: "Link", status: 201, write: true, h: (*Server).createLink},
	{method: "POST", path: "/api/v1/dead-letters/replay", id: "replayDeadLetters", summary: "Deliver dead letters again; each leaves the store once its endpoint acknowledged it. Refused (409) when an endpoint is gone or of another tenant than the record's.", body: "DeadLetterReplay", resp: "DeadLetterReplayResult", status: 200, write: true, h: (*Server).replayDeadLetters},
	{method: "POST", path: "/api/v1/dead-letters/purge", id: "purgeDeadLetters", summary: "Delete dead letters (a deleted endpoint's too).", body: "DeadLetterPurge", resp: "DeadLetterPurgeResult", status: 200, write: true, h: (*Server).purgeDeadLetters},
}

// pageQuery are the query parameters of every list (paging.go).
var pageQuery = [][2]string{
	{"limit", fmt.Sprintf("at most this many (default %d, at most %d)", DefaultPageLimit, MaxPageLimit)},
	{"iterator", "the next of the previous page's answer: this page starts after it (absent: the first page); anything else is 400"},
	{"tenant", "only this tenant's (an operator's filter; a tenant token's lists are always its own, and naming another tenant is 400)"},
}

// api wraps a route's handler: authentication, rate limit, CSRF.
func (s *Server) api(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok, why, tried := s.authenticate(r)
		if !ok {
			if !s.allowFailure(w, r, tried) {
				return
			}
			unauthorized(w, why)
			return
		}
		if !s.allow(w, p.name) {
			return
		}
		if rt.write && p.csrf != "" && !sameOrigin(r) {
			forbidden(w, "a write with a session cookie must come from the console's own page")
			return
		}
		if rt.write && !csrfOK(r, p) {
			forbidden(w, "a write from the page needs its CSRF token (header X-CSRF-Token): reload the page")
			return
		}
		rt.h(s, w, r, p)
	})
}

// decode reads a JSON body into v, answering 400 when it cannot.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		badRequest(w, "the body is not the JSON this route takes ("+err.Error()+"): /api/openapi.json describes it")
		return false
	}
	return true
}

// parseTime reads a time (RFC 3339) or a duration before now ("2h").
func parseTime(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	if t, err := time.Parse("2006-01-02T15:04", s); err == nil { // a browser's datetime-local
		return t.UTC(), nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d).UTC(), nil
	}
	return time.Time{}, fmt.Errorf("%q is not a time (2026-12-02T10:00:00Z) nor a duration ago (90m, 2h)", s)
}

// maxLinkTTL caps how long a tenant link lives.
const maxLinkTTL = 24 * time.Hour

func (s *Server) createLink(w http.ResponseWriter, r *http.Request, p principal) {
	if !p.operator() {
		forbidden(w, "only an operator token mints tenant links")
		return
	}
	var in struct {
		Tenant string `json:"tenant"`
		TTL    string `json:"ttl"`
	}
	if !decode(w, r, &in) {
		return
	}
	if in.Tenant == "" {
		badRequest(w, "tenant: name the tenant whose view the link opens")
		return
	}
	ttl := 15 * time.Minute
	if in.TTL != "" {
		d, err := time.ParseDuration(in.TTL)
		if err != nil || d <= 0 || d > maxLinkTTL {
			badRequest(w, fmt.Sprintf("ttl %q: give a duration above 0 and at most %s (15m, 1h)", in.TTL, maxLinkTTL))
			return
		}
		ttl = d
	}
	exp := s.o.Now().Add(ttl)
	s.writeAudit(p, "mint link for tenant "+in.Tenant, "", nil)
	writeJSON(w, http.StatusCreated, map[string]any{"path": LinkPath(s.sign.key, in.Tenant, exp), "expires": exp.UTC()})
}
