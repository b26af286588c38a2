package relay_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/receiver"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/relaytest"
	"github.com/outbox-relay/outbox-relay/sink/webhook"
)

// benchTableRows is how many endpoint rows the table benchmarks fill the
// table with: OUTBOX_RELAY_BENCH_ROWS, 10,000 unless set (the issue's
// figure is 100,000: a relay running that many pipelines takes about
// 3 GB).
func benchTableRows(b *testing.B) int {
	n := 10_000
	if s := os.Getenv("OUTBOX_RELAY_BENCH_ROWS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			b.Fatalf("OUTBOX_RELAY_BENCH_ROWS=%q: want a positive number", s)
		}
		n = v
	}
	return n
}

// fillEndpointsTable inserts n rows (ids r000000..., one tenant each, all
// to url).
func fillEndpointsTable(b *testing.B, db *sql.DB, n int, url string) {
	b.Helper()
	err := outboxtest.InsertEndpoints(b.Context(), db, n, func(i int) outboxtest.EndpointRow {
		return outboxtest.EndpointRow{ID: fmt.Sprintf("r%07d", i), URL: url, Tenant: fmt.Sprintf("t%07d", i)}
	})
	if err != nil {
		b.Fatal(err)
	}
}

// A new endpoint row, then an event for it, at a table of
// OUTBOX_RELAY_BENCH_ROWS rows: the time from the event's commit to its
// delivery (ms/op). Each iteration inserts one row (its own tenant),
// commits, then commits one event of that tenant, and waits for it.
func BenchmarkNewEndpointRowToDelivery(b *testing.B) {
	n := benchTableRows(b)
	dbname := srv.NewDatabase(b)
	db := srv.DB(b, dbname)
	exec := func(q string, args ...any) {
		b.Helper()
		if _, err := db.Exec(q, args...); err != nil {
			b.Fatal(err)
		}
	}
	exec(`CREATE TABLE outbox (seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, id VARCHAR(64) NOT NULL UNIQUE,
	  aggregatetype VARCHAR(64) NOT NULL, aggregateid VARCHAR(64) NOT NULL, type VARCHAR(64) NOT NULL,
	  payload JSON NOT NULL, tenant VARCHAR(32) NOT NULL)`)
	exec(webhook.EndpointsTableSchema)
	rc := receiver.Start(b, nil)
	got := make(chan string, 16)
	rc.OnAccept(func(r receiver.Request) { got <- r.EventID })
	fillEndpointsTable(b, db, n, rc.URL+"/hook")
	dir := b.TempDir()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %[3]s.outbox, headers: [tenant]}]
checkpoint: {path: %[4]s}
sinks:
  - name: hooks
    type: webhook
    webhook:
      endpoints_table:
        table: %[3]s.outbox_endpoints
        tenant_header: tenant
        defaults: {body: envelope, egress: {allow: [127.0.0.1]}}
`, srv.Port, testserver.ServerID(), dbname, filepath.Join(dir, "cp.json"))))
	if err != nil {
		b.Fatal(err)
	}
	// Run here, not with startRelay: stopping a relay of 100,000 running
	// endpoints takes longer than relaytest waits.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	began := time.Now()
	go func() { done <- relay.New(cfg, relay.Options{Logger: relaytest.Stderr(slog.LevelError)}).Run(ctx) }()
	defer func() {
		stopping := time.Now()
		cancel()
		err := <-done
		if errors.Is(err, context.Canceled) {
			err = nil
		}
		// Not a failure of what is measured: a relay of that many running
		// pipelines may not save every final cursor in time.
		lines := 0
		if err != nil {
			lines = strings.Count(err.Error(), "\n") + 1
		}
		b.Logf("%d rows: the relay stopped in %.1f s (%d endpoints' errors at the stop)", n, time.Since(stopping).Seconds(), lines)
	}()
	// The start is resolved once a checkpoint is saved (at 100,000 rows
	// that takes longer than waitForCheckpoint waits).
	for deadline := time.Now().Add(10 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(cfg.Checkpoint.Path); err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("relay wrote no checkpoint to %s in 10 minutes", cfg.Checkpoint.Path)
		}
	}
	// One event to the first row: the relay runs once it is delivered.
	event := func(id, tenant string) time.Time {
		exec(`INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, tenant) VALUES (?, 'order', ?, 'order.created', '{}', ?)`, id, "agg-"+tenant, tenant)
		return time.Now()
	}
	wait := func(id string) {
		b.Helper()
		timeout := time.After(5 * time.Minute)
		for {
			select {
			case e := <-got:
				if e == id {
					return
				}
			case <-timeout:
				b.Fatalf("event %s not delivered in 5 minutes", id)
			}
		}
	}
	event("first", "t0000000")
	wait("first")
	b.Logf("%d rows: first event delivered %.1f s after the relay was started", n, time.Since(began).Seconds())
	var total time.Duration
	if path := os.Getenv("OUTBOX_RELAY_BENCH_CPUPROFILE"); path != "" {
		// The timed loop's profile alone, without the start's.
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id, tenant := fmt.Sprintf("new%06d", i), fmt.Sprintf("n%06d", i)
		exec(`INSERT INTO outbox_endpoints (id, url, tenant) VALUES (?, ?, ?)`, id, rc.URL+"/hook", tenant)
		at := event("e-"+id, tenant)
		wait("e-" + id)
		took := time.Since(at)
		total += took
		b.Logf("%d rows: new row %s's first event delivered %v after its commit", n, id, took.Round(time.Millisecond))
	}
	b.StopTimer()
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms-commit-to-delivery/op")
}
