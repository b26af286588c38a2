package console

// This file owns the dead letter routes: the list of the dead letters a
// principal may see, and replay and purge of those it names.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/deadletter"
	"github.com/outbox-relay/outbox-relay/internal/paging"
)

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
		c, err := paging.DecodeCursor(cursorDeadLetters, it, 1)
		if err != nil || c[0] == "" {
			badRequest(w, paging.BadCursor(it).Error())
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
	recs, next, more, err := paging.Fill(limit, f.After, read, func(rec deadletter.Record) string { return rec.ID }, func(rec deadletter.Record) bool { return s.maySee(p, rec) })
	if err != nil {
		s.internal(w, err)
		return
	}
	if recs == nil {
		recs = []deadletter.Record{}
	}
	writeJSON(w, http.StatusOK, paging.Answer("dead_letters", recs, paging.EncodeCursor(cursorDeadLetters, next), more))
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
