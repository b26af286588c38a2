package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outbox-relay/outbox-relay/deadletter"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink"
)

func (r *Relay) openDeadLetters(ctx context.Context) (deadletter.Putter, func(), error) {
	st, closeFn, err := deadletter.Open(ctx, r.cfg)
	if err != nil || st == nil {
		return nil, closeFn, err
	}
	return st, closeFn, nil
}

// ReplayDeadLetters delivers each record's event to its sink again (a
// fresh one, built from the configuration; a webhook endpoint of a table
// read from it), in stored order per sink, and deletes the record once the
// sink acknowledged it (`outbox-relay dlq replay`, the console). It says
// how many were delivered and how many kept, and why. A record of a tenant
// is sent only to a sink of the same tenant (sink.TenantOf): an endpoint
// deleted and made again by another tenant, or given to another, keeps it.
func (rl *Relay) ReplayDeadLetters(ctx context.Context, store deadletter.Store, recs []deadletter.Record) (ok, failed int, err error) {
	targets, err := rl.Targets()
	if err != nil {
		return 0, 0, err
	}
	byName := map[string]Target{}
	for _, t := range targets {
		byName[t.Name] = t
	}
	// Endpoints kept in a table are read from it, when a record needs one.
	for _, r := range recs {
		if _, ok := byName[r.Sink]; !ok {
			more, err := rl.TableTargets(ctx)
			if err != nil {
				return 0, 0, fmt.Errorf("read the webhook endpoints tables: %w", err)
			}
			for _, t := range more {
				if _, ok := byName[t.Name]; !ok { // a row never replaces an endpoint of the configuration
					byName[t.Name] = t
				}
			}
			break
		}
	}
	connected := map[string]bool{}
	var errs []error
	for _, r := range recs {
		t := byName[r.Sink]
		s := t.Sink
		if s == nil && t.Open != nil {
			var err error
			if s, err = t.Build(); err != nil {
				errs = append(errs, fmt.Errorf("record %s: %w (kept)", r.ID, err))
				failed++
				continue
			}
			t.Sink = s
			byName[r.Sink] = t
		}
		if s == nil {
			errs = append(errs, fmt.Errorf("record %s: sink %q is not in the config (kept)", r.ID, r.Sink))
			failed++
			continue
		}
		if r.Tenant != "" && sink.TenantOf(s) != r.Tenant {
			errs = append(errs, fmt.Errorf("record %s (event %s) is of tenant %q, and %s is not that tenant's now (deleted and made again, or given to another tenant); purge it (kept)", r.ID, r.Event.ID, r.Tenant, r.Sink))
			failed++
			continue
		}
		if !connected[r.Sink] {
			if err := s.Connect(ctx); err != nil {
				return ok, failed, fmt.Errorf("connect sink %s: %w", r.Sink, err)
			}
			connected[r.Sink] = true
			defer s.Close(context.WithoutCancel(ctx))
		}
		if f, ok := s.(interface{ Selects(*event.Event) bool }); ok && !f.Selects(r.Event) || t.Filter.Match != nil && !t.Filter.Match(r.Event) {
			// The sink would acknowledge it without sending it: keep it.
			errs = append(errs, fmt.Errorf("record %s (event %s): the filter of %s no longer selects it; change the filter or purge it (kept)", r.ID, r.Event.ID, r.Sink))
			failed++
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err := sink.ErrorFor(sink.Deliver(wctx, s, []*event.Event{r.Event}), 0)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("record %s (event %s) to %s: %w (kept)", r.ID, r.Event.ID, r.Sink, err))
			failed++
			continue
		}
		if err := store.Delete(ctx, r.ID); err != nil {
			return ok, failed, fmt.Errorf("event %s was delivered but its record %s could not be deleted: %w", r.Event.ID, r.ID, err)
		}
		ok++
	}
	return ok, failed, errors.Join(errs...)
}
