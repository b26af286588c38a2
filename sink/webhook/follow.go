package webhook

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/sink"
)

// tableEndpoints follows a webhook sink's endpoints table: the rows read at
// start, then every INSERT, UPDATE and DELETE of the table read on the
// sink's shared stream, applied at the transaction that made it.
//
// The rule: a change of an endpoint's row takes effect for the transactions
// committed after the one that changed it. An endpoint inserted by
// transaction T gets the events of every transaction after T (none before:
// its cursor starts at T), whether it runs from T or not; deleted by T, it
// gets none after T (it still gets T's own and the earlier ones it had not
// yet delivered). Turned off by T (enabled = 0), it is sent nothing after T
// until a later transaction turns it on; it then resumes from its cursor
// and sends what waited: off pauses, it skips nothing.
// A change of its filter (tenant, event_types, aggregate_types) routes the
// transactions after T with the new one; a change of its url, secrets or
// rate limit restarts its pipeline, which drains what it holds, saves its
// cursor, and goes on from there with the new row — requests after the
// restart use the new row, whatever transaction their events came from. An
// endpoint catching up on its own stream matches each transaction with the
// filter it had (gateway.Hub.SetFilterLocked keeps the history).
//
// A row never touches an endpoint of the configuration (a "static" one,
// from the YAML): a row whose id names one is refused — one error log, at
// start or at its first change — and its INSERTs, UPDATEs and DELETEs are
// ignored, so the static endpoint keeps every event, its url, its secrets
// and its checkpoint. An id names a static endpoint when it equals its name
// or when both fold to the same (FoldName: "BILLING", "billing " and
// "bíllíng" name "billing"), whatever the ways the store, a dashboard or a
// reader compare them. A row that cannot be used (FromRow refuses it, or its
// endpoint cannot be built) makes its endpoint invalid: not run, with one
// error log, while every other endpoint runs; an UPDATE that fixes it
// starts it from its cursor. An endpoint that does not run (off, invalid)
// keeps a cursor: where it stopped, or, inserted or first read off or
// invalid, where it came into being (gateway.Endpoint.Held at start,
// Gateway.HoldLocked at the transaction), so it loses nothing. A row whose
// id itself is not valid (TableConfig.CheckID) has no endpoint: its
// changes never stop, disable or delete one.
//
// An UPDATE that changes a row's id is the DELETE of the old id and the
// INSERT of the new one, at that transaction: the old id's endpoint gets no
// later event and its cursor is dropped; the new id starts as a new
// endpoint.
type tableEndpoints struct {
	sink string // the webhook sink's name
	// suffix ends every key (the scaled-out gateway's partition, "@t[p]").
	suffix string
	tc     TableConfig
	store  checkpoint.Store
	health *gateway.Health
	states gateway.StateShower
	log    *slog.Logger
	b      builder // makes the endpoints' sinks
	// static are the sink's endpoints of the configuration.
	static StaticNames
	// The fields below are read and written under the hub's lock (or
	// before the gateway runs).
	//
	// rows are the enabled endpoints' rows by key, as last applied: their
	// columns, not their config (an idle endpoint's row costs its
	// strings; Open decodes it when it wakes).
	rows map[string]*tableRow
	// off are the keys whose row says enabled = 0; bad those whose row
	// cannot be used (invalid).
	off, bad map[string]bool
	// clashed are the keys of the rows refused for naming a static
	// endpoint (logged once until the row is deleted).
	clashed map[string]bool
}

// newTableEndpoints follows the endpoints table tc of the webhook sink
// named sink, whose endpoints of the configuration are static.
func newTableEndpoints(sink string, tc TableConfig, static []EndpointConfig) *tableEndpoints {
	return &tableEndpoints{sink: sink, tc: tc, static: NewStaticNames(static), rows: map[string]*tableRow{},
		off: map[string]bool{}, bad: map[string]bool{}, clashed: map[string]bool{}}
}

func (te *tableEndpoints) key(id string) string { return te.sink + "/" + id + te.suffix }

// load reads the table and returns the endpoints of its rows: those of
// usable, enabled rows to run, the others (off, invalid) Held, so that the
// gateway keeps their cursors. Only a table that cannot be read is an
// error: a bad row is not run (invalid), a row with a static endpoint's
// name refused, a row whose id cannot be used has no endpoint. The table
// is read a page at a time, in one snapshot (TableConfig.EachRow), each
// row made its endpoint as it comes; a large table's progress is logged
// every loadProgress rows.
//
// The snapshot is read after the start position was resolved, and the
// shared stream starts at or before it: every change committed after the
// read's snapshot reaches Changed on the stream, and one committed between
// the start and the snapshot is applied once more (an INSERT of a row
// read running is a change of nothing).
func (te *tableEndpoints) load(ctx context.Context, db *sql.DB) ([]gateway.Endpoint, error) {
	tc := te.tc.WithDefaults()
	var (
		out        []gateway.Endpoint
		good       []TableEndpoint // for the warnings about weak secrets
		read, bads int
	)
	began := time.Now()
	err := tc.EachRow(ctx, db, func(raw map[string]any) error {
		read++
		if read%loadProgress == 0 {
			te.log.Info("endpoints table: reading", slog.String("table", tc.Table), slog.Int("rows", read),
				slog.Duration("elapsed", time.Since(began).Round(time.Millisecond)))
		}
		id, _ := raw["id"].(string)
		cols, row, err := tc.read(raw)
		if err != nil {
			bads++
			if name, ok := te.static.Taken(id); ok {
				te.clash(id, name, "read at start", nil)
				return nil
			}
			te.invalid(id, err)
			out = te.held(out, id)
			return nil
		}
		if name, ok := te.static.Taken(row.ID); ok {
			te.clash(row.ID, name, "read at start", nil)
			return nil
		}
		if row.PlainSecrets || row.V1Secrets {
			good = append(good, TableEndpoint{ID: row.ID, PlainSecrets: row.PlainSecrets, V1Secrets: row.V1Secrets})
		}
		out = append(out, te.admit(cols, row))
		return nil
	})
	if err != nil {
		return nil, err
	}
	tc.warnWeak(good)
	te.log.Info("endpoints table read", slog.String("table", tc.Table), slog.Int("rows", read),
		slog.Int("enabled", len(te.rows)), slog.Int("invalid", bads), slog.Duration("took", time.Since(began).Round(time.Millisecond)))
	return out, nil
}

// loadProgress is how many rows load reads between two progress logs.
const loadProgress = 20_000

// held appends to out the endpoint of row id, which does not run (its row
// is off or cannot be used), for the gateway to keep its cursor: none
// when id cannot be used (such a row has no endpoint).
func (te *tableEndpoints) held(out []gateway.Endpoint, id string) []gateway.Endpoint {
	if id == "" || te.tc.CheckID(id) != nil {
		return out
	}
	return append(out, gateway.Endpoint{Key: te.key(id), Held: true})
}

// hold keeps the cursor of key, whose row was inserted or changed so that
// it does not run (off, invalid) while it was not running: one without a
// cursor gets one at this transaction, so that it gets every later event
// once it runs (under the hub's lock).
func (te *tableEndpoints) hold(g *gateway.Gateway, key string) {
	if err := g.HoldLocked(key); err != nil {
		te.log.Error("endpoints table: the cursor of an endpoint that does not run could not be kept; once it runs it starts where its row is read then",
			slog.String("endpoint", key), slog.Any("err", err))
	}
}

// clash logs, once until the row is deleted, that the row id names the
// endpoint of the configuration name (StaticNames.Taken) and is
// refused.
func (te *tableEndpoints) clash(id, name, op string, at *event.Position) {
	if te.clashed[te.key(id)] {
		return
	}
	te.clashed[te.key(id)] = true
	key := te.key(name)
	attrs := []any{slog.String("table", te.tc.Table), slog.String("row", id), slog.String("endpoint", key), slog.String("op", op)}
	if at != nil {
		attrs = append(attrs, slog.String("at", at.String()))
	}
	te.log.Error(fmt.Sprintf("endpoints table: row %q refused: endpoint %s is in the configuration (endpoints), and a row cannot start, stop, change or remove it; it runs as configured. Rename the row (UPDATE %s SET id = 'another-name' WHERE id = '%s')",
		id, key, te.tc.Table, id), attrs...)
}

// invalid marks the endpoint of row id invalid: one error log, its state.
func (te *tableEndpoints) invalid(id string, err error) {
	if id == "" {
		te.log.Error("endpoints table: a row cannot be used and is skipped; fix it in the table (no restart needed), the other endpoints run",
			slog.String("table", te.tc.Table), slog.Any("err", err))
		return
	}
	key := te.key(id)
	delete(te.off, key)
	if te.tc.CheckID(id) == nil {
		te.bad[key] = true
	}
	te.states.Invalid(key, err)
	te.log.Error("endpoints table: a row cannot be used: its endpoint is skipped (state invalid) until an UPDATE fixes the row (no restart needed); the other endpoints run",
		slog.String("table", te.tc.Table), slog.String("endpoint", key), slog.Any("err", err))
}

// admit takes a usable row read at start that is not a configured
// endpoint's: off when disabled, invalid when its endpoint cannot be
// built (both Held: the gateway keeps their cursors), else its endpoint to
// start.
func (te *tableEndpoints) admit(cols rowColumns, row TableEndpoint) gateway.Endpoint {
	key := te.key(row.ID)
	if !row.Enabled {
		te.off[key] = true
		te.states.State(key, gateway.Off)
		return gateway.Endpoint{Key: key, Held: true}
	}
	r := &tableRow{cols: cols}
	ep := te.endpoint(key, r, row.Config.Filter)
	te.rows[key] = r
	delete(te.bad, key)
	return ep
}

// endpoint is the gateway's endpoint of row r keyed key, routed by filter
// (its decoded config's): Open decodes r's columns as they are then and
// makes its sink, handed on what r carries.
func (te *tableEndpoints) endpoint(key string, r *tableRow, filter Filter) gateway.Endpoint {
	return te.b.endpoint(key, gatewayFilter(filter), func() (sink.Sink, error) {
		cols, carry := r.open()
		row, err := te.tc.decode(cols)
		if err != nil {
			return nil, err
		}
		return te.b.open(key, row.Config, carry)
	})
}

// changed applies the table's row changes of txn (under the hub's lock).
func (te *tableEndpoints) changed(g *gateway.Gateway, txn *event.Txn) {
	for _, c := range splitRenames(te.tc.Table, txn.Changes) {
		if c.Table != te.tc.Table {
			continue
		}
		id, enabled := RowIdentity(c.Row)
		key := te.key(id)
		// First what the row may touch: never an endpoint of the
		// configuration, nor any endpoint when its id is not valid.
		if name, ok := te.static.Taken(id); ok {
			if c.Op == event.Delete {
				if te.clashed[key] {
					te.log.Info("endpoints table: the row refused for the name of an endpoint of the configuration was deleted; that endpoint was not touched",
						slog.String("table", te.tc.Table), slog.String("row", id), slog.String("endpoint", te.key(name)))
				}
				delete(te.clashed, key)
				continue
			}
			te.clash(id, name, c.Op.String(), &txn.Position)
			continue
		}
		if id != "" {
			if err := te.tc.CheckID(id); err != nil {
				if c.Op == event.Delete {
					delete(te.off, key)
					te.states.Forget(key)
					te.log.Info("endpoints table: a row whose id cannot be used was deleted; it had no endpoint", slog.String("table", te.tc.Table), slog.String("row", id))
					continue
				}
				te.invalid(id, err)
				continue
			}
		}
		_, running := te.rows[key]
		if id != "" && (c.Op == event.Delete || !enabled) {
			te.stop(g, key, c.Op, txn.Position, running)
			continue
		}
		cols, row, err := te.tc.read(c.Row)
		if err == nil {
			te.tc.warnWeak([]TableEndpoint{row})
		}
		if err != nil {
			if running {
				// Not applied: the endpoint keeps its last good row.
				te.log.Error("endpoints table: a changed row cannot be used; the endpoint keeps its last good row until it is fixed",
					slog.String("endpoint", key), slog.String("op", c.Op.String()), slog.String("at", txn.Position.String()), slog.Any("err", err))
				continue
			}
			te.invalid(id, err)
			if id != "" && !g.IsDisabled(key) {
				te.hold(g, key)
			}
			continue
		}
		old := te.rows[key]
		delete(te.off, key)
		delete(te.bad, key)
		if g.IsDisabled(key) {
			// Disabled for failing: an UPDATE of its row enables it, with
			// the row as it is now, from its cursor.
			r := old.changed(cols)
			ep := te.endpoint(key, r, row.Config.Filter)
			te.rows[key] = r
			g.Go(func() {
				if _, err := g.Enable(context.Background(), key, &ep); err != nil {
					te.log.Error("endpoints table: endpoint not enabled", slog.String("endpoint", key), slog.Any("err", err))
				}
			})
			continue
		}
		switch {
		case !running:
			r := &tableRow{cols: cols}
			ep := te.endpoint(key, r, row.Config.Filter)
			te.rows[key] = r
			if _, err := te.store.Load(context.Background(), key); err == nil {
				// Re-enabled: it resumes from its cursor, catching up.
				g.Go(func() { te.restart(g, key, nil) })
				continue
			}
			if err := g.StartLocked(ep); err != nil {
				te.log.Error("endpoints table: endpoint not started", slog.String("endpoint", key), slog.Any("err", err))
				delete(te.rows, key)
				continue
			}
			te.log.Info("endpoint added from the table", slog.String("endpoint", key), slog.String("at", txn.Position.String()))
		case onlyFilterChanged(old.columns(), cols):
			te.rows[key] = old.changed(cols)
			if t := g.Tap(key); t != nil {
				g.Hub().SetFilterLocked(t, gatewayFilter(row.Config.Filter))
			}
			te.log.Info("endpoint filter changed", slog.String("endpoint", key), slog.String("at", txn.Position.String()))
		default:
			// read has validated the row; restart builds it.
			te.rows[key] = old.changed(cols)
			done := g.StopLocked(key)
			g.Go(func() { te.restart(g, key, done) })
			te.log.Info("endpoint changed: its pipeline restarts with the new row", slog.String("endpoint", key), slog.String("at", txn.Position.String()))
		}
	}
}

// splitRenames returns changes with each UPDATE of table that changes a
// row's id (its before image's id is not its id, byte for byte) made the
// DELETE of the row as it was and the INSERT of the row as it is. changes
// itself is returned when there is none.
func splitRenames(table string, changes []event.Change) []event.Change {
	renamed := func(c event.Change) bool {
		if c.Op != event.Update || c.Table != table || c.Before == nil {
			return false
		}
		before, _ := RowIdentity(c.Before)
		after, _ := RowIdentity(c.Row)
		return before != after
	}
	if !slices.ContainsFunc(changes, renamed) {
		return changes
	}
	out := make([]event.Change, 0, len(changes)+1)
	for _, c := range changes {
		if !renamed(c) {
			out = append(out, c)
			continue
		}
		out = append(out,
			event.Change{Table: c.Table, Op: event.Delete, Row: c.Before},
			event.Change{Table: c.Table, Op: event.Insert, Row: c.Row})
	}
	return out
}

// stop takes key off for a DELETE of its row or enabled = 0: it gets no
// event after this transaction. A deleted one is forgotten (its cursor
// dropped); one turned off shows as off once its pipeline has stopped.
func (te *tableEndpoints) stop(g *gateway.Gateway, key string, op event.ChangeOp, at event.Position, running bool) {
	delete(te.rows, key)
	delete(te.bad, key)
	done := g.StopLocked(key) // closed at once when it was not running
	if op == event.Delete {
		delete(te.off, key)
		if running {
			te.log.Info("endpoint removed from the table: it gets no later event", slog.String("endpoint", key), slog.String("at", at.String()))
		} else {
			te.log.Info("endpoints table: a row of an endpoint that was not running was deleted", slog.String("endpoint", key), slog.String("at", at.String()))
		}
		g.Go(func() { te.forget(g, key, done) })
		return
	}
	te.off[key] = true
	if running {
		te.log.Info("endpoint turned off by its row (enabled = 0): it is sent nothing until its row says enabled = 1; its events after its cursor wait for it",
			slog.String("endpoint", key), slog.String("at", at.String()))
	} else if g.Tap(key) == nil && !g.IsDisabled(key) {
		te.hold(g, key)
	}
	g.Go(func() {
		<-done
		g.Hub().Lock()
		defer g.Hub().Unlock()
		if te.off[key] && g.Tap(key) == nil && !g.IsDisabled(key) {
			te.states.State(key, gateway.Off)
		}
	})
}

// restart starts key once its old pipeline (done) has stopped, from its
// cursor, catching up to the shared stream: with its row as it is then
// (later changes may have come meanwhile), unless the row is gone or
// disabled by then, or it runs already.
func (te *tableEndpoints) restart(g *gateway.Gateway, key string, done <-chan struct{}) {
	if done != nil {
		<-done
	}
	g.Hub().Lock()
	r, ok := te.rows[key]
	if !ok || g.Tap(key) != nil {
		g.Hub().Unlock()
		return
	}
	var ep gateway.Endpoint
	row, err := te.tc.decode(r.columns())
	if err == nil {
		ep = te.endpoint(key, r, row.Config.Filter)
	}
	g.Hub().Unlock()
	if err == nil {
		err = g.Start(ep)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		te.log.Error("endpoints table: endpoint not restarted", slog.String("endpoint", key), slog.Any("err", err))
	}
}

// forget drops a deleted endpoint's cursor once its pipeline has stopped,
// so it no longer holds back prune or binlog retention.
func (te *tableEndpoints) forget(g *gateway.Gateway, key string, done <-chan struct{}) {
	<-done
	if te.health != nil {
		te.health.Forget(key)
	}
	if g != nil {
		g.Hub().Lock()
		_, back := te.rows[key]
		back = back || te.off[key] || te.bad[key]
		g.Hub().Unlock()
		if back {
			// Inserted again meanwhile: it is listed, and keeps the
			// cursor it resumes from or holds (it gets more events,
			// never fewer).
			return
		}
		te.states.Forget(key)
	}
	d, ok := te.store.(checkpoint.Deleter)
	if !ok {
		return
	}
	if err := d.Delete(context.Background(), key); err != nil {
		te.log.Warn("endpoints table: could not drop a deleted endpoint's checkpoint (it holds back prune until removed)", slog.String("endpoint", key), slog.Any("err", err))
	}
}

// onlyFilterChanged reports whether rows a and b (of one table: the same
// defaults) differ in their event or aggregate types only. A row given to
// another tenant changes its filter (the tenant header's value) and its
// tenant: the endpoint is built again, so that its attempts and dead
// letters from then on are the new tenant's (sink.Owned). Secrets are
// compared as stored (one encrypted again is built again).
func onlyFilterChanged(a, b rowColumns) bool {
	a.eventTypes, a.aggregateTypes = b.eventTypes, b.aggregateTypes
	return a == b
}

// healthObserver tells the gateway's Health of every attempt, besides the
// metrics' observer.
type healthObserver struct {
	Observer // nil without metrics
	key      string
	health   *gateway.Health
}

func (o healthObserver) Attempt(status int, dur time.Duration) {
	o.health.Attempt(o.key, status/100 == 2)
	if status == http.StatusGone {
		o.health.Gone(o.key) // its gateway disables it
	}
	if o.Observer != nil {
		o.Observer.Attempt(status, dur)
	}
}

func (o healthObserver) Retry(err error) {
	if o.Observer != nil {
		o.Observer.Retry(err)
	}
}

func (o healthObserver) Delivered(d time.Duration) {
	if o.Observer != nil {
		o.Observer.Delivered(d)
	}
}

func (o healthObserver) Failed(reason string) {
	if o.Observer != nil {
		o.Observer.Failed(reason)
	}
}

// gatewayFilter routes an endpoint's filter: by its one header value (a
// tenant) when it has exactly one, else by its aggregate types when each is
// an exact name (no glob), so the hub looks it up instead of asking it
// about every event.
//
// A filter of one header value and nothing else (a row's tenant) matches
// with a closure of that value, not with f: an idle endpoint then keeps no
// map of its filter's headers.
func gatewayFilter(f Filter) gateway.Filter {
	gf := gateway.Filter{Match: f.Match}
	if len(f.Headers) == 1 {
		for k, v := range f.Headers {
			gf.Header, gf.Value = k, v
		}
		if len(f.EventTypes) == 0 && len(f.AggregateTypes) == 0 {
			k, v := gf.Header, gf.Value
			gf.Match = func(e *event.Event) bool { return hasHeader(e.Headers, k, v) }
		}
		return gf
	}
	if len(f.AggregateTypes) > 0 && !slices.ContainsFunc(f.AggregateTypes, IsGlob) {
		gf.AggregateTypes = slices.Clone(f.AggregateTypes)
	}
	return gf
}

// loadRows is load over rows already read (TableConfig.Rows, Row).
func (te *tableEndpoints) loadRows(raw []map[string]any) []gateway.Endpoint {
	var out []gateway.Endpoint
	for _, r := range raw {
		id, _ := RowIdentity(r)
		if name, ok := te.static.Taken(id); ok {
			te.clash(id, name, "read at start", nil)
			continue
		}
		cols, row, err := te.tc.read(r)
		if err != nil {
			te.invalid(id, err)
			out = te.held(out, id)
			continue
		}
		te.tc.warnWeak([]TableEndpoint{row})
		out = append(out, te.admit(cols, row))
	}
	return out
}
