package console

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/outbox-relay/outbox-relay/gateway"
)

// countingTable is a memTable that records the reads of its rows.
type countingTable struct {
	*memTable
	mu      sync.Mutex
	rows    int      // calls of Rows
	tenants []string // the tenant of each call of Page
}

func (c *countingTable) Rows(ctx context.Context) ([]gateway.TableRow, error) {
	c.mu.Lock()
	c.rows++
	c.mu.Unlock()
	return c.memTable.Rows(ctx)
}

func (c *countingTable) Page(ctx context.Context, after, tenant string, limit int) ([]gateway.TableRow, error) {
	c.mu.Lock()
	c.tenants = append(c.tenants, tenant)
	c.mu.Unlock()
	return c.memTable.Page(ctx, after, tenant, limit)
}

// The list of sinks: an operator's counts are the gateway's, kept as the
// endpoints report their states (no row is read, however many there are);
// a tenant's are its own rows, read by its tenant only.
func TestTheListOfSinksCountsWithoutReadingTheTable(t *testing.T) {
	f := newFixture(t)
	table := &countingTable{memTable: f.table}
	o := f.s.o
	o.Sinks = []Sink{{Name: "hooks", Static: []string{"ops-hook"}, Table: table}}
	o.Logger = slog.New(slog.DiscardHandler)
	o.Counts = func(sink string) (gateway.EndpointCounts, bool) {
		if sink != "hooks" {
			return gateway.EndpointCounts{}, false
		}
		return gateway.EndpointCounts{Endpoints: 100_000, States: map[string]int{"attached": 99_990, "off": 10}, Failing: 3, LagSeconds: 7}, true
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	f.s, f.h = s, s.Handler()
	list := func(token string) SinkSummary {
		t.Helper()
		res, body := f.do(t, "GET", "/api/v1/sinks", token, "")
		var got struct{ Sinks []SinkSummary }
		if res.StatusCode != 200 || json.Unmarshal([]byte(body), &got) != nil || len(got.Sinks) != 1 {
			t.Fatalf("GET /api/v1/sinks: %d %s", res.StatusCode, body)
		}
		return got.Sinks[0]
	}

	op := list(f.op)
	if op.Endpoints != 100_000 || op.States["attached"] != 99_990 || op.States["off"] != 10 || op.Failing != 3 || op.LagSeconds != 7 || !op.Table {
		t.Errorf("an operator's list: %+v, want the gateway's counts", op)
	}
	if table.rows != 0 || len(table.tenants) != 0 {
		t.Errorf("an operator's list read the table: %d reads of every row, %d pages; want none", table.rows, len(table.tenants))
	}

	a := list(f.tenA)
	if a.Endpoints != 1 || a.States["attached"] != 1 || a.Failing != 0 || a.LagSeconds != 1.5 {
		t.Errorf("tenant A's list: %+v, want its one endpoint (a1, attached, lag 1.5)", a)
	}
	if table.rows != 0 || len(table.tenants) == 0 || strings.Join(table.tenants, ",") != strings.Repeat("A,", len(table.tenants)-1)+"A" {
		t.Errorf("tenant A's list read every row %d times and pages of tenants %q; want only pages of A's rows", table.rows, table.tenants)
	}
}
