package webhook

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testserver"
)

// The start-up read of an endpoints table of OUTBOX_RELAY_BENCH_ROWS rows
// (100,000 unless set), one tenant each: Load, rows in order, every one
// turned into its endpoint.
func BenchmarkLoadEndpointsTable(b *testing.B) {
	n := 100_000
	if s := os.Getenv("OUTBOX_RELAY_BENCH_ROWS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			b.Fatalf("OUTBOX_RELAY_BENCH_ROWS=%q: want a positive number", s)
		}
		n = v
	}
	srv := testserver.Start(b, testserver.Options{})
	dbname := srv.NewDatabase(b)
	db := srv.DB(b, dbname)
	if _, err := db.Exec(EndpointsTableSchema); err != nil {
		b.Fatal(err)
	}
	fill(b, db, n)
	tc := TableConfig{Table: dbname + ".outbox_endpoints", TenantHeader: "tenant"}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		rows, bad, err := tc.Load(context.Background(), db)
		if err != nil || len(bad) > 0 || len(rows) != n {
			b.Fatalf("Load = %d rows, %v bad, %v; want %d rows", len(rows), bad, err, n)
		}
	}
}
