package webhook

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
)

// sessionCounters reads the status counters of the one session of db
// (whose pool holds one connection) named by names, summed.
func sessionCounters(t *testing.T, db *sql.DB, names ...string) int64 {
	t.Helper()
	rows, err := db.Query("SHOW SESSION STATUS WHERE Variable_name IN ('" + strings.Join(names, "', '") + "')")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var sum int64
	for rows.Next() {
		var name string
		var v int64
		if err := rows.Scan(&name, &v); err != nil {
			t.Fatal(err)
		}
		sum += v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return sum
}

// counted returns how much f moves the counters names of db's one
// session, less what reading them moves them by.
func counted(t *testing.T, db *sql.DB, f func(), names ...string) int64 {
	t.Helper()
	a := sessionCounters(t, db, names...)
	b := sessionCounters(t, db, names...)
	f()
	c := sessionCounters(t, db, names...)
	return (c - b) - (b - a)
}

// oneSession returns a pool of one connection to dbname on srv: every
// statement runs in the same session, whose counters then count them.
func oneSession(t *testing.T, srv *testserver.Server, dbname string) *sql.DB {
	db := srv.DB(t, dbname)
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	return db
}

// fill inserts n rows r0000000... (one tenant each, t0000000...) into
// dbname's endpoints table.
func fill(t testing.TB, db *sql.DB, n int) {
	t.Helper()
	err := outboxtest.InsertEndpoints(context.Background(), db, n, func(i int) outboxtest.EndpointRow {
		return outboxtest.EndpointRow{ID: fmt.Sprintf("r%07d", i), URL: "https://hooks.example/in", Tenant: fmt.Sprintf("t%07d", i)}
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The table at scale: a lookup of one row reads that row by its primary
// key, and a read of the whole table reads it a page at a time, in one
// snapshot.
func TestTheEndpointsTableAtScale(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	dbname := srv.NewDatabase(t)
	other := srv.DB(t, dbname) // another session: writes during a read
	if _, err := other.Exec(EndpointsTableSchema); err != nil {
		t.Fatal(err)
	}
	const n = 1050
	fill(t, other, n)
	tc := TableConfig{Table: dbname + ".outbox_endpoints", TenantHeader: "tenant"}
	ctx := context.Background()
	// Rows an index or table scan handed on: a lookup by primary key
	// moves Handler_read_key only.
	scanned := []string{"Handler_read_first", "Handler_read_last", "Handler_read_next", "Handler_read_prev", "Handler_read_rnd", "Handler_read_rnd_next"}

	t.Run("the console's lookup of one endpoint reads one row by its primary key", func(t *testing.T) {
		db := oneSession(t, srv, dbname)
		ta := &tableAdmin{tc: tc.WithDefaults(), db: db}
		var row gateway.TableRow
		var err error
		read := counted(t, db, func() { row, err = ta.Row(ctx, "r0000700") }, scanned...)
		if err != nil || row.ID != "r0000700" || row.Tenant != "t0000700" || row.Invalid != "" {
			t.Fatalf("Row(r0000700) = %+v, %v", row, err)
		}
		if read > 2 {
			t.Errorf("Row(r0000700) scanned %d rows of a table of %d; want the one row, by its primary key", read, n)
		}
		keys := counted(t, db, func() { _, err = ta.Row(ctx, "r0000701") }, "Handler_read_key")
		if err != nil || keys < 1 {
			t.Errorf("Row(r0000701): %d primary-key reads, %v; want one", keys, err)
		}
		// The table's collation finds "R0000700" equal to "r0000700": it
		// is not that row's id.
		if _, err := ta.Row(ctx, "R0000700"); !errors.Is(err, gateway.ErrNoRow) {
			t.Errorf("Row(R0000700) = %v, want ErrNoRow: ids are compared byte for byte", err)
		}
		if _, err := ta.Row(ctx, "nope"); !errors.Is(err, gateway.ErrNoRow) {
			t.Errorf("Row(nope) = %v, want ErrNoRow", err)
		}
		// A write of one row by id reads it by its primary key too.
		read = counted(t, db, func() { err = ta.SetEnabled(ctx, "r0000701", true) }, scanned...)
		if err != nil || read > 4 {
			t.Errorf("SetEnabled(r0000701): %v, scanned %d rows of %d; want the one row", err, read, n)
		}
	})

	t.Run("a load reads the table a page at a time, every row once, in one snapshot", func(t *testing.T) {
		defer func(p int) { tablePage = p }(tablePage)
		tablePage = 100
		db := oneSession(t, srv, dbname)
		var ids []string
		selects := counted(t, db, func() {
			rows, bad, err := tc.Load(ctx, db)
			if err != nil || len(bad) > 0 {
				t.Fatalf("Load: %v, bad %v", err, bad)
			}
			ids = RowIDs(rows)
		}, "Com_select")
		if want := n/tablePage + 1; selects != int64(want) {
			t.Errorf("Load of %d rows ran %d SELECTs, want %d (pages of %d rows)", n, selects, want, tablePage)
		}
		if len(ids) != n || !slices.IsSorted(ids) || len(slices.Compact(slices.Clone(ids))) != n {
			t.Fatalf("Load read %d rows (sorted: %v), want each of %d once", len(ids), slices.IsSorted(ids), n)
		}

		// Rows written by another session while the pages are read: the
		// read sees the table as it was at its first page (those changes
		// reach a running relay on its binlog stream, after its start).
		var seen []string
		read := 0
		err := tc.EachRow(ctx, db, func(row map[string]any) error {
			read++
			seen = append(seen, row["id"].(string))
			if read == 150 { // in the second page
				for _, q := range []string{
					"INSERT INTO outbox_endpoints (id, url) VALUES ('a-before', 'https://hooks.example/in'), ('z-after', 'https://hooks.example/in')",
					"DELETE FROM outbox_endpoints WHERE id = 'r0000900'",
					"UPDATE outbox_endpoints SET id = 'a-renamed' WHERE id = 'r0000800'",
					"UPDATE outbox_endpoints SET id = 'z-renamed' WHERE id = 'r0000050'",
				} {
					if _, err := other.Exec(q); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(seen) != n || len(slices.Compact(slices.Clone(seen))) != n || seen[0] != "r0000000" || seen[n-1] != fmt.Sprintf("r%07d", n-1) {
			t.Errorf("a read while rows were inserted, deleted and renamed saw %d rows (%v ... %v), want the %d it began with, each once",
				len(seen), seen[:min(3, len(seen))], seen[max(0, len(seen)-3):], n)
		}
		rows, _, err := tc.Load(ctx, db)
		if err != nil || len(rows) != n+1 {
			t.Errorf("the next Load read %d rows, %v; want %d", len(rows), err, n+1)
		}
	})
}
