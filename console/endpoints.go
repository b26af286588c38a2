package console

// This file owns the endpoint routes that read: an endpoint as the API shows
// it (with its state, health and lag), the sinks' summaries, and finding the
// endpoint a request names among those its principal may see.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"

	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/internal/redact"
)

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
