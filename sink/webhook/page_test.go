package webhook

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/sink"
)

// RowsPage reads the table a page at a time by id, a tenant's rows only
// when asked, and a walk from page to page meets every row once while
// rows are added and deleted between its pages.
func TestRowsPageWalksTheTableByID(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{NoBinlog: true})
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	ctx := context.Background()
	if _, err := db.Exec(EndpointsTableSchema); err != nil {
		t.Fatal(err)
	}
	insert := func(id, tenant string) {
		t.Helper()
		if _, err := db.Exec("INSERT INTO outbox_endpoints (id, url, tenant) VALUES (?, 'https://x.example/', ?)", id, tenant); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 40 {
		insert(fmt.Sprintf("e%02d", i*2), []string{"A", "B"}[i%2])
	}
	tc := TableConfig{Table: dbname + ".outbox_endpoints", TenantHeader: "tenant"}.WithDefaults()
	for _, tenant := range []string{"", "A"} {
		seen := map[string]int{}
		after, page := "", 0
		for {
			rows, err := tc.RowsPage(ctx, db, after, tenant, 6)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				id := r["id"].(string)
				seen[id]++
				if tenant != "" && r["tenant"] != tenant {
					t.Errorf("tenant %s's page holds row %s of tenant %v", tenant, id, r["tenant"])
				}
				if id <= after {
					t.Errorf("page after %q holds %q", after, id)
				}
				after = id
			}
			if len(rows) < 6 {
				break
			}
			// Between pages: a row behind, one ahead; one deleted ahead.
			insert(fmt.Sprintf("e%02d-%s%d", page*2+1, tenant, page), "A")
			insert(fmt.Sprintf("z%s%d", tenant, page), "B")
			if _, err := db.Exec("DELETE FROM outbox_endpoints WHERE id = ?", fmt.Sprintf("e%02d", 78-page*2)); err != nil {
				t.Fatal(err)
			}
			page++
		}
		for i := range 40 - page {
			id := fmt.Sprintf("e%02d", i*2)
			if want := []string{"A", "B"}[i%2]; (tenant == "" || want == tenant) && seen[id] != 1 {
				t.Errorf("tenant %q: row %s, there throughout, seen %d times", tenant, id, seen[id])
			}
		}
		for id, n := range seen {
			if n > 1 {
				t.Errorf("tenant %q: row %s seen %d times", tenant, id, n)
			}
		}
		if _, err := db.Exec("DELETE FROM outbox_endpoints WHERE id NOT LIKE 'e__'"); err != nil {
			t.Fatal(err)
		}
		for i := range 40 {
			_, _ = db.Exec("INSERT IGNORE INTO outbox_endpoints (id, url, tenant) VALUES (?, 'https://x.example/', ?)", fmt.Sprintf("e%02d", i*2), []string{"A", "B"}[i%2])
		}
	}
}

// check warns about an endpoints table with tenants but without an index
// on (tenant, id), and names the ALTER to run; the table of
// EndpointsTableSchema has it.
func TestCheckWarnsOfATableWithoutTheTenantIndex(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{NoBinlog: true})
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	ctx := context.Background()
	if _, err := db.Exec(EndpointsTableSchema); err != nil {
		t.Fatal(err)
	}
	tc := TableConfig{Table: dbname + ".outbox_endpoints", TenantHeader: "tenant"}
	if f := tenantIndexResult(ctx, db, "hooks", tc); len(f) != 0 {
		t.Fatalf("the schema's table: %+v, want no warning", f)
	}
	if _, err := db.Exec("ALTER TABLE outbox_endpoints DROP KEY ix_tenant"); err != nil {
		t.Fatal(err)
	}
	f := tenantIndexResult(ctx, db, "hooks", tc)
	if len(f) != 1 || f[0].Status != sink.Warned || !strings.Contains(f[0].Fix, "ADD KEY ix_tenant (tenant, id)") {
		t.Fatalf("a table without the index: %+v, want a warning naming the ALTER", f)
	}
	if f := tenantIndexResult(ctx, db, "hooks", TableConfig{Table: tc.Table}); len(f) != 0 {
		t.Fatalf("a table of no tenants: %+v, want no warning", f)
	}
}
