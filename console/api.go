package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/attempts"
	"github.com/outbox-relay/outbox-relay/deadletter"
	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/internal/redact"
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

// Endpoint is an endpoint as the API shows it.
type Endpoint struct {
	Sink string `json:"sink"`
	Name string `json:"name"`
	// Key is "<sink>/<name>", its checkpoint's and its metrics' name.
	Key string `json:"key"`
	// Static: an endpoint of the configuration (not written here).
	Static bool `json:"static"`
	gateway.TableRow
	// State is the gateway's (attached, waiting, catching_up, disabled,
	// off, invalid, stopped), "unknown" before it reported one.
	State string `json:"state"`
	// Health is "failing" during a run of failed attempts, else "ok".
	Health string                 `json:"health"`
	Stats  *gateway.EndpointStats `json:"stats,omitempty"`
}

// redacted returns e as the API shows it: its url with the credentials
// and query values hidden (redact.URL, as the page shows it). Only the
// answer of the create shows the url as written.
func (e Endpoint) redacted() Endpoint {
	e.URL = redact.URL(e.URL)
	return e
}

// stats returns the gateway's figures of every endpoint by key.
func (s *Server) stats() map[string]gateway.EndpointStats {
	out := map[string]gateway.EndpointStats{}
	if s.o.Stats == nil {
		return out
	}
	for _, l := range s.o.Stats("") {
		for _, e := range l {
			out[e.Endpoint] = e
		}
	}
	return out
}

// stat returns a lookup of endpoints' figures by sink and key: Stat's,
// else one copy of Stats' made at the first lookup.
func (s *Server) stat() func(sink, key string) (gateway.EndpointStats, bool) {
	if s.o.Stat != nil {
		return s.o.Stat
	}
	var all map[string]gateway.EndpointStats
	return func(_, key string) (gateway.EndpointStats, bool) {
		if all == nil {
			all = s.stats()
		}
		x, ok := all[key]
		return x, ok
	}
}

func withStats(e Endpoint, st map[string]gateway.EndpointStats) Endpoint {
	return withStat(e, func(_, key string) (gateway.EndpointStats, bool) { x, ok := st[key]; return x, ok })
}

func withStat(e Endpoint, stat func(sink, key string) (gateway.EndpointStats, bool)) Endpoint {
	e.State, e.Health = "unknown", "ok"
	if x, ok := stat(e.Sink, e.Key); ok {
		e.Stats = &x
		e.State = x.State
		if !x.Failing.IsZero() {
			e.Health = "failing"
		}
	}
	if e.Invalid != "" {
		e.State = "invalid"
	}
	return e
}

// endpoints returns the endpoints p may see, of one sink or ("") all.
func (s *Server) endpoints(ctx context.Context, p principal, sink string) ([]Endpoint, error) {
	st := s.stats()
	var out []Endpoint
	names := make([]string, 0, len(s.sinks))
	for n := range s.sinks {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if sink != "" && n != sink {
			continue
		}
		sk := s.sinks[n]
		if p.operator() {
			for _, name := range sk.Static {
				out = append(out, withStats(Endpoint{Sink: n, Name: name, Key: n + "/" + name, Static: true, TableRow: gateway.TableRow{ID: name, Enabled: true}}, st))
			}
		}
		if sk.Table == nil {
			continue
		}
		rows, err := sk.Table.Rows(ctx)
		if err != nil {
			return nil, err
		}
		for _, row := range rows {
			if !p.operator() && row.Tenant != p.tenant {
				continue
			}
			if slices.Contains(sk.Static, row.ID) {
				continue // refused by the relay; the static one is listed
			}
			out = append(out, withStats(Endpoint{Sink: n, Name: displayName(p, row.ID), Key: n + "/" + row.ID, TableRow: row}, st))
		}
	}
	return out, nil
}

var errNoEndpoint = errors.New("no such endpoint")

// endpoint returns one endpoint p may see; errNoEndpoint otherwise.
func (s *Server) endpoint(ctx context.Context, p principal, sink, name string) (Endpoint, error) {
	sk, ok := s.sinks[sink]
	if !ok {
		return Endpoint{}, errNoEndpoint
	}
	if p.operator() && slices.Contains(sk.Static, name) { // a tenant never sees them: its names are rows'
		return withStat(Endpoint{Sink: sink, Name: name, Key: sink + "/" + name, Static: true, TableRow: gateway.TableRow{ID: name, Enabled: true}}, s.stat()), nil
	}
	if sk.Table == nil {
		return Endpoint{}, errNoEndpoint
	}
	for _, id := range rowIDs(p, name) {
		row, err := sk.Table.Row(ctx, id)
		if errors.Is(err, gateway.ErrNoRow) || err == nil && !p.operator() && row.Tenant != p.tenant {
			continue
		}
		if err != nil {
			return Endpoint{}, err
		}
		return withStat(Endpoint{Sink: sink, Name: displayName(p, row.ID), Key: sink + "/" + row.ID, TableRow: row}, s.stat()), nil
	}
	return Endpoint{}, errNoEndpoint
}

// lookup is endpoint for a handler: false (answered) when there is none.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request, p principal) (Endpoint, bool) {
	sink, name := r.PathValue("sink"), r.PathValue("endpoint")
	e, err := s.endpoint(r.Context(), p, sink, name)
	switch {
	case errors.Is(err, errNoEndpoint):
		notFound(w, fmt.Sprintf("no endpoint %s/%s: GET /api/v1/endpoints lists those this token may see", sink, name))
		return e, false
	case err != nil:
		s.internal(w, err)
		return e, false
	}
	return e, true
}

// SinkSummary is one webhook sink as /api/v1/sinks shows it.
type SinkSummary struct {
	Name      string         `json:"name"`
	Endpoints int            `json:"endpoints"`
	States    map[string]int `json:"states"`
	Failing   int            `json:"failing"`
	// LagSeconds is the greatest lag of its endpoints.
	LagSeconds float64 `json:"lag_seconds"`
	Table      bool    `json:"endpoints_table"`
}

// sinkSummaries counts, per sink, the endpoints p may see. An operator's
// are the gateway's counts (Options.Counts), kept as the endpoints report
// their states: no row is read, whatever the table's size. A tenant's are
// its own rows, read a page at a time by tenant (endpointsPage).
func (s *Server) sinkSummaries(ctx context.Context, p principal) ([]SinkSummary, error) {
	var out []SinkSummary
	for _, n := range slices.Sorted(maps.Keys(s.sinks)) {
		ss := SinkSummary{Name: n, States: map[string]int{}, Table: s.sinks[n].Table != nil}
		if c, ok := s.counts(p, n); ok {
			ss.Endpoints, ss.Failing, ss.LagSeconds = c.Endpoints, c.Failing, c.LagSeconds
			maps.Copy(ss.States, c.States)
			out = append(out, ss)
			continue
		}
		var after endpointKey
		for {
			page, next, more, err := s.endpointsPage(ctx, p, endpointFilter{sink: n}, after, MaxPageLimit)
			if err != nil {
				return nil, err
			}
			for _, e := range page {
				ss.Endpoints++
				ss.States[e.State]++
				if e.Health == "failing" {
					ss.Failing++
				}
				if e.Stats != nil {
					ss.LagSeconds = max(ss.LagSeconds, e.Stats.LagSeconds)
				}
			}
			if !more {
				break
			}
			after = next
		}
		out = append(out, ss)
	}
	return out, nil
}

// counts returns the gateway's counts of sink's endpoints when p may see
// them all (an operator) and the relay keeps them.
func (s *Server) counts(p principal, sink string) (gateway.EndpointCounts, bool) {
	if !p.operator() || s.o.Counts == nil {
		return gateway.EndpointCounts{}, false
	}
	return s.o.Counts(sink)
}

func (s *Server) listSinks(w http.ResponseWriter, r *http.Request, p principal) {
	out, err := s.sinkSummaries(r.Context(), p)
	if err != nil {
		s.internal(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"sinks": out})
}

func (s *Server) getEndpoint(w http.ResponseWriter, r *http.Request, p principal) {
	if e, ok := s.lookup(w, r, p); ok {
		writeJSON(w, http.StatusOK, e.redacted())
	}
}

// EndpointWrite is the body of a create or an update.
type EndpointWrite struct {
	ID             string   `json:"id"`
	URL            string   `json:"url"`
	Tenant         string   `json:"tenant"`
	EventTypes     []string `json:"event_types"`
	AggregateTypes []string `json:"aggregate_types"`
	RateLimit      *float64 `json:"rate_limit"`
	// Enabled (create only; default true).
	Enabled *bool `json:"enabled"`
	// Secret (create only): a "whsec_..." to sign with; default a new one.
	Secret string `json:"secret"`
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

// tableErr answers a TableAdmin's error.
func (s *Server) tableErr(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, gateway.ErrNoRow):
		notFound(w, err.Error())
	case errors.Is(err, gateway.ErrRowExists):
		writeProblem(w, http.StatusConflict, "conflict", err.Error())
	case errors.Is(err, gateway.ErrBadRow):
		writeProblem(w, http.StatusUnprocessableEntity, "invalid-endpoint", err.Error())
	default:
		s.internal(w, err)
	}
}

// tenantFor returns the tenant a write of p sets, or answers 403.
func tenantFor(w http.ResponseWriter, p principal, asked string) (string, bool) {
	if p.operator() {
		return asked, true
	}
	if asked != "" && asked != p.tenant {
		forbidden(w, fmt.Sprintf("this token manages the endpoints of tenant %q only: leave tenant out or set it to %q", p.tenant, p.tenant))
		return "", false
	}
	return p.tenant, true
}

func (s *Server) createEndpoint(w http.ResponseWriter, r *http.Request, p principal) {
	sinkName := r.PathValue("sink")
	var in EndpointWrite
	if !decode(w, r, &in) {
		return
	}
	sk, ok := s.sinks[sinkName]
	if !ok {
		notFound(w, fmt.Sprintf("no webhook sink %q: GET /api/v1/sinks lists them", sinkName))
		return
	}
	if sk.Table == nil {
		writeProblem(w, http.StatusConflict, "no-table", fmt.Sprintf("sink %q has no endpoints_table: its endpoints are in the configuration; add endpoints_table to its section to manage endpoints here", sinkName))
		return
	}
	tenant, ok := tenantFor(w, p, in.Tenant)
	if !ok {
		return
	}
	id, ok := s.newRowID(w, r, p, sinkName, in.ID, tenant)
	if !ok {
		return
	}
	target := sinkName + "/" + id
	row := gateway.TableRow{ID: id, URL: in.URL, Tenant: tenant, EventTypes: in.EventTypes, AggregateTypes: in.AggregateTypes, RateLimit: in.RateLimit, Enabled: in.Enabled == nil || *in.Enabled}
	secret, err := sk.Table.Insert(r.Context(), row, in.Secret)
	if !s.changed(w, p, "create endpoint", target, err) {
		return
	}
	e, err := s.endpoint(r.Context(), p, sinkName, in.ID)
	if err != nil {
		s.internal(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"endpoint": e, "secret": secret})
}

// newRowID returns the row id of an endpoint p creates in sink as name,
// or answers why it cannot. An operator's name is the row id; a tenant's
// is one of its own namespace (names.go): it can collide with none of
// another tenant's, nor with an endpoint of the configuration, so every
// answer depends on the tenant's own endpoints only.
func (s *Server) newRowID(w http.ResponseWriter, r *http.Request, p principal, sink, name, tenant string) (string, bool) {
	if p.operator() {
		if err := checkNamespace(name, tenant); err != nil {
			writeProblem(w, http.StatusUnprocessableEntity, "invalid-endpoint", err.Error())
			return "", false
		}
		return name, true
	}
	if err := checkTenantName(p.tenant, name); err != nil {
		writeProblem(w, http.StatusUnprocessableEntity, "invalid-endpoint", err.Error())
		return "", false
	}
	switch _, err := s.endpoint(r.Context(), p, sink, name); {
	case err == nil:
		writeProblem(w, http.StatusConflict, "conflict", fmt.Sprintf("this tenant has an endpoint %q in sink %s already; update it, or choose another id", name, sink))
		return "", false
	case !errors.Is(err, errNoEndpoint):
		s.internal(w, err)
		return "", false
	}
	return namespace(p.tenant) + name, true
}

// rowOf returns e's table, answering 409 for an endpoint of the
// configuration.
func (s *Server) rowOf(w http.ResponseWriter, e Endpoint) (gateway.TableAdmin, bool) {
	if e.Static {
		writeProblem(w, http.StatusConflict, "static-endpoint", StaticError(e.Key, e.Sink).Error())
		return nil, false
	}
	return s.sinks[e.Sink].Table, true
}

func (s *Server) updateEndpoint(w http.ResponseWriter, r *http.Request, p principal) {
	var in EndpointWrite
	e, t, ok := s.lookupRow(w, r, p, &in)
	if !ok {
		return
	}
	if in.ID != "" && in.ID != e.Name && in.ID != e.ID {
		badRequest(w, "the id cannot change: create an endpoint with the new id and delete this one")
		return
	}
	if in.Secret != "" || in.Enabled != nil {
		badRequest(w, "secret and enabled are not set by an update: use rotate-secret, enable or disable")
		return
	}
	tenant, ok := tenantFor(w, p, in.Tenant)
	if !ok {
		return
	}
	if in.URL != e.URL && in.URL == redact.URL(e.URL) {
		// The url as the API showed it, sent back with another change:
		// the credentials it hid are kept.
		in.URL = e.URL
	}
	if err := checkNamespace(e.ID, tenant); p.operator() && err != nil {
		writeProblem(w, http.StatusUnprocessableEntity, "invalid-endpoint", err.Error())
		return
	}
	err := t.Update(r.Context(), gateway.TableRow{ID: e.ID, URL: in.URL, Tenant: tenant, EventTypes: in.EventTypes, AggregateTypes: in.AggregateTypes, RateLimit: in.RateLimit})
	s.answerChange(w, r, p, e, "update endpoint", err)
}

// lookupDecoding is lookup, then, for an endpoint it found, decode of the
// request's body into in.
func (s *Server) lookupDecoding(w http.ResponseWriter, r *http.Request, p principal, in any) (Endpoint, bool) {
	e, ok := s.lookup(w, r, p)
	return e, ok && decode(w, r, in)
}

// lookupRow is lookupDecoding (lookup alone when in is nil), then rowOf:
// the endpoint whose table row the request changes, and its table.
func (s *Server) lookupRow(w http.ResponseWriter, r *http.Request, p principal, in any) (Endpoint, gateway.TableAdmin, bool) {
	var e Endpoint
	var ok bool
	if in == nil {
		e, ok = s.lookup(w, r, p)
	} else {
		e, ok = s.lookupDecoding(w, r, p, in)
	}
	if !ok {
		return e, nil, false
	}
	t, ok := s.rowOf(w, e)
	return e, t, ok
}

// answerChange records a change to endpoint e (action; err its failure)
// as changed does and, when it was made, answers with e as it is now.
func (s *Server) answerChange(w http.ResponseWriter, r *http.Request, p principal, e Endpoint, action string, err error) {
	if s.changed(w, p, action, e.Key, err) {
		s.answerEndpoint(w, r, p, e)
	}
}

func (s *Server) answerEndpoint(w http.ResponseWriter, r *http.Request, p principal, e Endpoint) {
	e2, err := s.endpoint(r.Context(), principal{name: p.name}, e.Sink, e.ID) // as the operator: the row may have left the tenant
	if err != nil {
		s.internal(w, err)
		return
	}
	e2.Name = displayName(p, e2.ID)
	writeJSON(w, http.StatusOK, e2.redacted())
}

func (s *Server) deleteEndpoint(w http.ResponseWriter, r *http.Request, p principal) {
	e, t, ok := s.lookupRow(w, r, p, nil)
	if !ok {
		return
	}
	err := t.Delete(r.Context(), e.ID)
	if !s.changed(w, p, "delete endpoint", e.Key, err) {
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// changed records a change to the endpoint key (action; err its failure)
// in the audit log and answers a failed one: it reports whether the change
// was made, for the handler to answer it.
func (s *Server) changed(w http.ResponseWriter, p principal, action, key string, err error) bool {
	s.writeAudit(p, action, key, err)
	if err != nil {
		s.tableErr(w, err)
		return false
	}
	return true
}

func (s *Server) disableEndpoint(w http.ResponseWriter, r *http.Request, p principal) {
	e, t, ok := s.lookupRow(w, r, p, nil)
	if !ok {
		return
	}
	err := t.SetEnabled(r.Context(), e.ID, false)
	s.answerChange(w, r, p, e, "disable endpoint", err)
}

func (s *Server) enableEndpoint(w http.ResponseWriter, r *http.Request, p principal) {
	e, ok := s.lookup(w, r, p)
	if !ok {
		return
	}
	var err error
	if !e.Static && !e.Enabled {
		err = s.sinks[e.Sink].Table.SetEnabled(r.Context(), e.ID, true)
	}
	if err == nil && s.o.Relay != nil {
		_, err = s.o.Relay.Enable(r.Context(), e.Key)
	}
	s.answerChange(w, r, p, e, "enable endpoint", err)
}

func (s *Server) rotateSecret(w http.ResponseWriter, r *http.Request, p principal) {
	var in struct {
		KeepOld bool `json:"keep_old"`
	}
	e, t, ok := s.lookupRow(w, r, p, &in)
	if !ok {
		return
	}
	secret, err := t.RotateSecret(r.Context(), e.ID, in.KeepOld)
	if !s.changed(w, p, "rotate secret", e.Key, err) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"secret": secret})
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

func (s *Server) recoverEndpoint(w http.ResponseWriter, r *http.Request, p principal) {
	var in struct {
		Since string `json:"since"`
	}
	e, ok := s.lookupDecoding(w, r, p, &in)
	if !ok {
		return
	}
	since, err := parseTime(in.Since, s.o.Now())
	if err != nil {
		badRequest(w, "since: "+err.Error())
		return
	}
	if s.o.Relay == nil {
		unavailable(w, "this console runs without a relay: replays cannot be made")
		return
	}
	id, err := s.o.Relay.Recover(r.Context(), p.tenant, e.Sink, e.ID, since)
	s.writeAudit(p, "recover endpoint since "+since.Format(time.RFC3339), e.Key, err)
	if err != nil {
		replayRefused(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"job": id})
}

// attemptsQuery reads the query of /api/v1/attempts.
func (s *Server) attemptsQuery(r *http.Request, p principal) (attempts.Query, error) {
	v := r.URL.Query()
	limit, tenant, err := listQuery(v, p)
	if err != nil {
		return attempts.Query{}, err
	}
	q := attempts.Query{Sink: v.Get("sink"), Endpoint: v.Get("endpoint"), EventID: v.Get("event_id"), Tenant: tenant, Limit: limit}
	if x := v.Get("status"); x != "" {
		if q.Status, err = strconv.Atoi(x); err != nil {
			return q, fmt.Errorf("status %q is not an HTTP status code", x)
		}
	}
	if x := v.Get("failed"); x != "" {
		if q.Failed, err = strconv.ParseBool(x); err != nil {
			return q, fmt.Errorf("failed %q: use true or false", x)
		}
	}
	for _, f := range []struct {
		name string
		dst  *time.Time
	}{{"since", &q.Since}, {"until", &q.Until}} {
		if x := v.Get(f.name); x != "" {
			if *f.dst, err = parseTime(x, s.o.Now()); err != nil {
				return q, fmt.Errorf("%s: %v", f.name, err)
			}
		}
	}
	if x := v.Get("before"); x != "" {
		if q.Before, err = strconv.ParseInt(x, 10, 64); err != nil {
			return q, fmt.Errorf("before %q is not an attempt id", x)
		}
	}
	if it := v.Get("iterator"); it != "" {
		f, err := decodeCursor(cursorAttempts, it, 1)
		if err != nil {
			return q, err
		}
		if q.Before, err = strconv.ParseInt(f[0], 10, 64); err != nil || q.Before < 1 {
			return q, badCursor(it)
		}
	}
	return q, nil
}

func (s *Server) listAttempts(w http.ResponseWriter, r *http.Request, p principal) {
	if s.o.Attempts == nil {
		unavailable(w, "the attempts log is off: configure attempts to keep them")
		return
	}
	q, err := s.attemptsQuery(r, p)
	if err != nil {
		badRequest(w, err.Error())
		return
	}
	limit := q.Limit
	q.Limit++ // one more: does the list go on?
	recs, err := s.o.Attempts.Search(r.Context(), q)
	if err != nil {
		s.internal(w, err)
		return
	}
	if recs == nil {
		recs = []attempts.Record{}
	}
	var next string
	more := len(recs) > limit
	if more {
		// Newest first: the next page is of the ids below the last one's.
		recs = recs[:limit]
		next = encodeCursor(cursorAttempts, strconv.FormatInt(recs[limit-1].ID, 10))
	}
	writeJSON(w, http.StatusOK, pageAnswer("attempts", recs, next, more))
}

// attempt returns attempt id when p may see it.
func (s *Server) attempt(ctx context.Context, p principal, id int64) (attempts.Record, bool, error) {
	recs, err := s.o.Attempts.Search(ctx, attempts.Query{Tenant: p.tenant, Before: id + 1, Limit: 1})
	if err != nil || len(recs) == 0 || recs[0].ID != id || !p.operator() && recs[0].Tenant != attempts.TenantKey(p.tenant) {
		return attempts.Record{}, false, err
	}
	return recs[0], true, nil
}

func (s *Server) lookupAttempt(w http.ResponseWriter, r *http.Request, p principal) (attempts.Record, bool) {
	if s.o.Attempts == nil {
		unavailable(w, "the attempts log is off: configure attempts to keep them")
		return attempts.Record{}, false
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		notFound(w, "no such attempt")
		return attempts.Record{}, false
	}
	rec, ok, err := s.attempt(r.Context(), p, id)
	if err != nil {
		s.internal(w, err)
		return rec, false
	}
	if !ok {
		notFound(w, fmt.Sprintf("no attempt %d: GET /api/v1/attempts lists those this token may see", id))
	}
	return rec, ok
}

func (s *Server) getAttempt(w http.ResponseWriter, r *http.Request, p principal) {
	if rec, ok := s.lookupAttempt(w, r, p); ok {
		writeJSON(w, http.StatusOK, rec)
	}
}

func (s *Server) resend(w http.ResponseWriter, r *http.Request, p principal) {
	rec, ok := s.lookupAttempt(w, r, p)
	if !ok {
		return
	}
	// The endpoint must still be one p may see, and still of the tenant
	// the attempt was of: a row deleted and made again by another tenant,
	// or given to another, is not sent the old tenant's event, even by the
	// operator.
	if e, err := s.endpoint(r.Context(), p, rec.Sink, rec.Endpoint); err != nil || attempts.TenantKey(e.Tenant) != rec.Tenant {
		notFound(w, fmt.Sprintf("attempt %d's endpoint %s/%s is gone: deleted, or not the same tenant's now", rec.ID, rec.Sink, rec.Endpoint))
		return
	}
	if s.o.Relay == nil {
		unavailable(w, "this console runs without a relay: replays cannot be made")
		return
	}
	id, err := s.o.Relay.Resend(r.Context(), p.tenant, rec)
	s.writeAudit(p, "resend event "+rec.EventID, rec.Sink+"/"+rec.Endpoint, err)
	if err != nil {
		replayRefused(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"job": id})
}

// deadLetters returns the dead letters p may see that f selects: a
// tenant's, those stored as that tenant's (the store selects them: another
// tenant's are not read), whoever has their endpoint now; the operator's,
// those of every endpoint of the webhook sinks, deleted ones' too.
func (s *Server) deadLetters(ctx context.Context, p principal, f deadletter.Filter) ([]deadletter.Record, error) {
	f.Tenant = p.tenant
	recs, err := s.o.DeadLetters.List(ctx, f)
	if err != nil {
		return nil, err
	}
	out := []deadletter.Record{}
	for _, rec := range recs {
		if s.maySee(p, rec) {
			out = append(out, rec)
		}
	}
	return out, nil
}

// maySee reports whether p may see rec: a record of a webhook sink's
// endpoint, and, for a tenant, stored as its own.
func (s *Server) maySee(p principal, rec deadletter.Record) bool {
	sink, _, _ := strings.Cut(rec.Sink, "/")
	_, ok := s.sinks[sink]
	return ok && (p.operator() || rec.Tenant == p.tenant)
}

// ownEndpoints answers 409 and returns false when one of recs cannot be
// sent to its endpoint: the endpoint is not one p may see now, or it is
// of another tenant than the record was stored for (deleted and made
// again, or given to another tenant). The answer names the records, never
// who has their endpoints now.
func (s *Server) ownEndpoints(w http.ResponseWriter, ctx context.Context, p principal, recs []deadletter.Record) bool {
	var gone []string
	for _, rec := range recs {
		sink, name, _ := strings.Cut(rec.Sink, "/")
		e, err := s.endpoint(ctx, p, sink, name)
		if err != nil && !errors.Is(err, errNoEndpoint) {
			s.internal(w, err)
			return false
		}
		if err != nil || rec.Tenant != "" && e.Tenant != rec.Tenant {
			gone = append(gone, rec.ID)
		}
	}
	if len(gone) > 0 {
		writeProblem(w, http.StatusConflict, "endpoint-gone", fmt.Sprintf("the endpoints of dead letters %s are gone: deleted, or not the same tenant's now; their records are kept (purge them with POST /api/v1/dead-letters/purge)", strings.Join(gone, ", ")))
		return false
	}
	return true
}

func (s *Server) listDeadLetters(w http.ResponseWriter, r *http.Request, p principal) {
	if s.o.DeadLetters == nil {
		unavailable(w, "dead_letter.store is none: there are no dead letters")
		return
	}
	v := r.URL.Query()
	limit, tenant, err := listQuery(v, p)
	if err != nil {
		badRequest(w, err.Error())
		return
	}
	f := deadletter.Filter{Sink: v.Get("sink"), Tenant: tenant}
	if it := v.Get("iterator"); it != "" {
		c, err := decodeCursor(cursorDeadLetters, it, 1)
		if err != nil || c[0] == "" {
			badRequest(w, badCursor(it).Error())
			return
		}
		f.After = c[0]
	}
	for _, x := range []struct {
		name string
		dst  *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		if q := v.Get(x.name); q != "" {
			if *x.dst, err = parseTime(q, s.o.Now()); err != nil {
				badRequest(w, x.name+": "+err.Error())
				return
			}
		}
	}
	// The store selects by tenant and reads from the cursor on by its key;
	// the records of sinks that are not webhook sinks are skipped here.
	read := func(after string, n int) ([]deadletter.Record, error) {
		f.After, f.Limit = after, n
		return s.o.DeadLetters.List(r.Context(), f)
	}
	recs, next, more, err := fill(limit, f.After, read, func(rec deadletter.Record) string { return rec.ID }, func(rec deadletter.Record) bool { return s.maySee(p, rec) })
	if err != nil {
		s.internal(w, err)
		return
	}
	if recs == nil {
		recs = []deadletter.Record{}
	}
	writeJSON(w, http.StatusOK, pageAnswer("dead_letters", recs, encodeCursor(cursorDeadLetters, next), more))
}

// namedDeadLetters decodes a body naming dead letters by id ({"ids": […]})
// and returns them, every one of them a record p may see, or answers the
// request (verb says what was asked: "replay", "purge") and returns false.
func (s *Server) namedDeadLetters(w http.ResponseWriter, r *http.Request, p principal, verb string) ([]deadletter.Record, bool) {
	if s.o.DeadLetters == nil {
		unavailable(w, "dead_letter.store is none: there are no dead letters")
		return nil, false
	}
	var in struct {
		IDs []string `json:"ids"`
	}
	if !decode(w, r, &in) {
		return nil, false
	}
	if len(in.IDs) == 0 {
		badRequest(w, "ids: name the dead letters to "+verb+" (GET /api/v1/dead-letters lists them)")
		return nil, false
	}
	recs, err := s.deadLetters(r.Context(), p, deadletter.Filter{IDs: in.IDs})
	if err != nil {
		s.internal(w, err)
		return nil, false
	}
	if len(recs) != len(in.IDs) {
		notFound(w, "some of ids are not dead letters this token may see: GET /api/v1/dead-letters lists them")
		return nil, false
	}
	return recs, true
}

func (s *Server) replayDeadLetters(w http.ResponseWriter, r *http.Request, p principal) {
	recs, ok := s.namedDeadLetters(w, r, p, "replay")
	if !ok || !s.ownEndpoints(w, r.Context(), p, recs) {
		return
	}
	if s.o.Relay == nil {
		unavailable(w, "this console runs without a relay: dead letters cannot be replayed")
		return
	}
	n, err := s.o.Relay.ReplayDeadLetters(r.Context(), recs)
	ids := make([]string, len(recs))
	for i, rec := range recs {
		ids[i] = rec.ID
	}
	s.writeAudit(p, "replay dead letters "+strings.Join(ids, ","), recs[0].Sink, err)
	out := map[string]any{"replayed": n, "failed": len(recs) - n}
	if err != nil {
		out["error"] = err.Error()
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) purgeDeadLetters(w http.ResponseWriter, r *http.Request, p principal) {
	recs, ok := s.namedDeadLetters(w, r, p, "purge")
	if !ok {
		return
	}
	ids := make([]string, len(recs))
	for i, rec := range recs {
		ids[i] = rec.ID
	}
	err := s.o.DeadLetters.Delete(r.Context(), ids...)
	s.writeAudit(p, "purge dead letters "+strings.Join(ids, ","), recs[0].Sink, err)
	if err != nil {
		s.internal(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"purged": len(ids)})
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
