package check

import "testing"

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
