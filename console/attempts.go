package console

// This file owns the delivery attempts routes: the list with its query, one
// attempt, and resend (a replay job of the attempt's event).

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/outbox-relay/outbox-relay/attempts"
	"github.com/outbox-relay/outbox-relay/internal/paging"
)

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
		f, err := paging.DecodeCursor(cursorAttempts, it, 1)
		if err != nil {
			return q, err
		}
		if q.Before, err = strconv.ParseInt(f[0], 10, 64); err != nil || q.Before < 1 {
			return q, paging.BadCursor(it)
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
		next = paging.EncodeCursor(cursorAttempts, strconv.FormatInt(recs[limit-1].ID, 10))
	}
	writeJSON(w, http.StatusOK, paging.Answer("attempts", recs, next, more))
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
