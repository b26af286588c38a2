package source_test

import (
	"context"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/source"
)

var srv *testserver.Server

func TestMain(m *testing.M) { testserver.Main(m, testserver.Options{ServerID: 1}, &srv) }

func TestCheckTablesNamesTheMissingColumn(t *testing.T) {
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	if _, err := db.Exec(`CREATE TABLE outbox (id BINARY(16) NOT NULL PRIMARY KEY, aggregatetype VARCHAR(64) NOT NULL,
		aggregateid VARCHAR(64) NOT NULL, type VARCHAR(64) NOT NULL, payload JSON NOT NULL, tenant VARCHAR(32) NULL)`); err != nil {
		t.Fatal(err)
	}
	tables := []config.Table{{Name: dbname + ".outbox", Headers: []string{"tenant"}, Columns: config.Columns{
		ID: "id", AggregateType: "aggregatetype", AggregateID: "aggregateid", Type: "type", Payload: "payload"}}}
	if err := source.CheckTables(context.Background(), db, tables); err != nil {
		t.Fatalf("CheckTables of a table with every mapped column = %v", err)
	}
	tables[0].Columns.Type = "event_type"
	err := source.CheckTables(context.Background(), db, tables)
	if err == nil || !strings.Contains(err.Error(), `"event_type"`) || !strings.Contains(err.Error(), "columns.type") {
		t.Fatalf("CheckTables = %v, want an error naming event_type and columns.type", err)
	}
	tables[0].Columns.Type = "-"
	if err := source.CheckTables(context.Background(), db, tables); err != nil {
		t.Fatalf(`CheckTables with type "-" (not mapped) = %v`, err)
	}
	tables[0].Name = dbname + ".nope"
	err = source.CheckTables(context.Background(), db, tables)
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("CheckTables on a missing table = %v", err)
	}
}
