package check

import (
	"context"
	"testing"
	"time"
)

// A table whose name holds a backtick is measured like any other: its name
// is quoted, not pasted into the SQL (the column names are validated by
// config as letters, digits, _ and $, and quoted the same way).
func TestGrowthQuotesTheTableName(t *testing.T) {
	srv.Exec(t,
		"CREATE TABLE shop.`odd``outbox` (id CHAR(36) PRIMARY KEY, aggregatetype VARCHAR(64), aggregateid VARCHAR(64), type VARCHAR(64), payload JSON, created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))",
		"INSERT INTO shop.`odd``outbox` (id, aggregatetype, aggregateid, type, payload) VALUES ('1', 'order', 'o1', 'created', '{}')",
	)
	t.Cleanup(func() { srv.Exec(t, "DROP TABLE shop.`odd``outbox`") })
	rep := runChecks(t, testConfig(t, srv, "root", "", "tables: [{name: \"shop.odd`outbox\"}]"))
	expect(t, rep, only(t, rep, NameOutboxGrowth), Pass, "shop.odd`outbox: oldest row", "")
}

// Options.SkipGrowth leaves outbox_growth out of Run (run's startup checks:
// it may scan a whole table), and Growth makes it alone, the same.
func TestGrowthRunsAloneWhenRunSkipsIt(t *testing.T) {
	srv.Exec(t,
		"CREATE TABLE shop.grown (id CHAR(36) PRIMARY KEY, aggregatetype VARCHAR(64), aggregateid VARCHAR(64), type VARCHAR(64), payload JSON, created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))",
		"INSERT INTO shop.grown (id, aggregatetype, aggregateid, type, payload, created_at) VALUES ('1', 'order', 'o1', 'created', '{}', '2020-01-02 03:04:05')",
	)
	t.Cleanup(func() { srv.Exec(t, "DROP TABLE shop.grown") })
	cfg := testConfig(t, srv, "root", "", "tables: [{name: shop.grown}]")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := Run(ctx, cfg, Options{SkipGrowth: true})
	if err != nil {
		t.Fatal(err)
	}
	if rs := rep.Get(NameOutboxGrowth); len(rs) != 0 {
		t.Fatalf("Run with SkipGrowth made outbox_growth: %+v", rs)
	}
	only(t, rep, NameTables) // the other checks were made
	rep, err = Growth(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	expect(t, rep, only(t, rep, NameOutboxGrowth), Warn, "grown holds rows", "outbox-relay prune")
	if len(rep.Results) != 1 {
		t.Fatalf("Growth made more than outbox_growth:\n%s", printed(rep))
	}
}
