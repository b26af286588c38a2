package outboxtest

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TenantSchema is an outbox table with a tenant column, to be delivered as a
// header (tables[].headers: [tenant]) that webhook endpoints filter on.
const TenantSchema = outboxTable + `,
  tenant VARCHAR(16) NOT NULL
)`

// TenantEvent is one committed event of a TenantWorkload.
type TenantEvent struct {
	ID, AggregateID string
	Tenant          int // its tenant column is "t<Tenant>"
	// Seq is its producer's counter: every aggregate has one producer, so
	// per aggregate Seq is commit order.
	Seq int
	At  time.Time // when COMMIT returned
}

// TenantLoad shapes ProduceTenants.
type TenantLoad struct {
	Producers, Txns, Tenants int
	// Hot: a third of the tenants drawn are among the first Hot (0: none).
	Hot int
	// Every is each producer's commit interval (a steady rate).
	Every time.Duration
}

// TenantWorkload is what ProduceTenants committed; safe while it runs.
type TenantWorkload struct {
	mu       sync.Mutex
	byTenant map[int][]TenantEvent
	byID     map[string]TenantEvent
	txns     int
}

// Events returns the number of committed events.
func (w *TenantWorkload) Events() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.byID)
}

// Txns returns the number of committed transactions.
func (w *TenantWorkload) Txns() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.txns
}

// Tenant returns tenant t's committed events.
func (w *TenantWorkload) Tenant(t int) []TenantEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.byTenant[t])
}

// Lookup returns the committed event id.
func (w *TenantWorkload) Lookup(id string) (TenantEvent, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.byID[id]
	return e, ok
}

// init makes w's maps.
func (w *TenantWorkload) init() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byTenant == nil {
		w.byTenant, w.byID = map[int][]TenantEvent{}, map[string]TenantEvent{}
	}
}

// CommitEach commits one event for each of tenants (id
// "<prefix>-<tenant>", on an aggregate of its own), perTxn events a
// transaction, and records them in w: a wave that touches many endpoints
// once.
func CommitEach(ctx context.Context, t testing.TB, db *sql.DB, w *TenantWorkload, prefix string, tenants []int, perTxn int) {
	t.Helper()
	w.init()
	for lo := 0; lo < len(tenants); lo += perTxn {
		var evs []TenantEvent
		var vals []string
		var args []any
		for _, tn := range tenants[lo:min(len(tenants), lo+perTxn)] {
			e := TenantEvent{ID: fmt.Sprintf("%s-%d", prefix, tn), AggregateID: fmt.Sprintf("t%d-%s", tn, prefix), Tenant: tn}
			evs = append(evs, e)
			vals = append(vals, "(?, 'order', ?, 'created', '{}', ?)")
			args = append(args, e.ID, e.AggregateID, "t"+strconv.Itoa(tn))
		}
		if _, err := db.ExecContext(ctx, "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, tenant) VALUES "+strings.Join(vals, ","), args...); err != nil {
			t.Fatalf("commit a wave's events: %v", err)
		}
		w.record(evs)
	}
}

// record adds evs, one transaction's, committed now.
func (w *TenantWorkload) record(evs []TenantEvent) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range evs {
		e.At = now
		w.byTenant[e.Tenant] = append(w.byTenant[e.Tenant], e)
		w.byID[e.ID] = e
	}
	w.txns++
}

// ProduceTenants runs l.Producers goroutines that together commit l.Txns
// transactions at a steady rate (one per l.Every, per producer), each of 1
// to 4 events of one tenant (every fifth of two) on aggregates that only
// that producer writes. It returns when all are committed or ctx ends.
func ProduceTenants(ctx context.Context, t testing.TB, db *sql.DB, w *TenantWorkload, l TenantLoad) {
	t.Helper()
	w.init()
	var wg sync.WaitGroup
	for p := range l.Producers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(p), 14))
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			tick := time.NewTicker(l.Every)
			defer tick.Stop()
			tenant := func() int {
				if l.Hot > 0 && r.IntN(3) == 0 {
					return r.IntN(l.Hot)
				}
				return r.IntN(l.Tenants)
			}
			seq := 0
			for i := p; i < l.Txns; i += l.Producers {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				ts := []int{tenant()}
				if i%5 == 4 {
					ts = append(ts, tenant())
				}
				var evs []TenantEvent
				var vals []string
				var args []any
				for _, tn := range ts {
					for range 1 + r.IntN(2) {
						seq++
						e := TenantEvent{ID: fmt.Sprintf("p%d-%d", p, seq), AggregateID: fmt.Sprintf("t%d-p%d-a%d", tn, p, r.IntN(4)), Tenant: tn, Seq: seq}
						evs = append(evs, e)
						vals = append(vals, "(?, 'order', ?, 'created', '{}', ?)")
						args = append(args, e.ID, e.AggregateID, "t"+strconv.Itoa(tn))
					}
				}
				if _, err := conn.ExecContext(ctx, "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, tenant) VALUES "+strings.Join(vals, ","), args...); err != nil {
					if ctx.Err() == nil {
						t.Errorf("producer %d: %v", p, err)
					}
					return
				}
				w.record(evs)
			}
		})
	}
	wg.Wait()
}

// TenantReport is what CheckTenant found of one endpoint.
type TenantReport struct {
	Unique, Duplicates int
	// Missing are tenant events never received, Foreign received ids that
	// are not the tenant's, OutOfOrder first receipts after a later event
	// of their aggregate.
	Missing, Foreign, OutOfOrder []string
}

// CheckTenant compares the event ids an endpoint received, in order of
// receipt, with its tenant's committed events.
func CheckTenant(w *TenantWorkload, tenant int, received []string) TenantReport {
	var rep TenantReport
	seen := map[string]bool{}
	last := map[string]int{}
	for _, id := range received {
		e, ok := w.Lookup(id)
		switch {
		case !ok || e.Tenant != tenant:
			rep.Foreign = append(rep.Foreign, id)
			continue
		case seen[id]:
			rep.Duplicates++
			continue
		case e.Seq < last[e.AggregateID]:
			rep.OutOfOrder = append(rep.OutOfOrder, id)
		}
		seen[id] = true
		last[e.AggregateID] = max(last[e.AggregateID], e.Seq)
	}
	rep.Unique = len(seen)
	for _, e := range w.Tenant(tenant) {
		if !seen[e.ID] {
			rep.Missing = append(rep.Missing, e.ID)
		}
	}
	return rep
}

// EndpointRow is one row of a webhook sink's endpoints table (the table
// webhook.EndpointsTableSchema creates): Secrets and Tenant "" are NULL.
type EndpointRow struct{ ID, URL, Secrets, Tenant string }

// InsertEndpoints inserts n rows into db's endpoints table
// (outbox_endpoints), row(i) for i in [0, n), 1,000 rows a statement: a
// table of 100,000 rows fills in seconds.
func InsertEndpoints(ctx context.Context, db *sql.DB, n int, row func(i int) EndpointRow) error {
	null := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	for lo := 0; lo < n; lo += 1000 {
		var q strings.Builder
		q.WriteString("INSERT INTO outbox_endpoints (id, url, secrets, tenant) VALUES ")
		var args []any
		for i := lo; i < min(n, lo+1000); i++ {
			if i > lo {
				q.WriteString(", ")
			}
			q.WriteString("(?, ?, ?, ?)")
			r := row(i)
			args = append(args, r.ID, r.URL, null(r.Secrets), null(r.Tenant))
		}
		if _, err := db.ExecContext(ctx, q.String(), args...); err != nil {
			return fmt.Errorf("insert endpoint rows %d to %d: %w", lo, min(n, lo+1000)-1, err)
		}
	}
	return nil
}
