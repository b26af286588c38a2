package console

// This file owns the endpoint routes that change something: create, update,
// delete, disable, enable and rotate-secret, each a change of the sink's
// endpoints table through gateway.TableAdmin with an audit line, and
// recover, which asks the relay for a replay job.

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/internal/redact"
)

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
