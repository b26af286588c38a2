package main

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/backfill"
	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/poller"
	"github.com/outbox-relay/outbox-relay/internal/sqlident"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
)

// roleSelect reads every row of table ("schema.table") with one bare
// SELECT *, each row's columns scanned as bytes: the floor of reading the
// table the backfill rows are measured against.
func roleSelect(dsn, table string) result {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return result{Err: err.Error()}
	}
	defer db.Close()
	schema, name, _ := strings.Cut(table, ".")
	start := time.Now()
	rows, err := db.Query("SELECT * FROM " + sqlident.Table(schema, name))
	if err != nil {
		return result{Err: err.Error()}
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	raw := make([]sql.RawBytes, len(cols))
	dest := make([]any, len(cols))
	for i := range raw {
		dest[i] = &raw[i]
	}
	n := 0
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return result{Err: err.Error()}
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return result{Err: err.Error()}
	}
	return result{Events: n, Seconds: time.Since(start).Seconds()}
}

// roleBackfill reads table with the backfill's table source (package
// backfill: chunks of chunk rows by primary key, each in a consistent
// snapshot of its own, its binlog follower from the start), every row
// mapped to its event, to the end of the table. flavor is the source's:
// "mariadb" (snapshot positions) or "mysql" (GTID watermarks: Dolt).
func roleBackfill(dsn, host string, port int, table string, chunk int, flavor string) result {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return result{Err: err.Error()}
	}
	defer db.Close()
	schema, name, _ := strings.Cut(table, ".")
	reader, err := canal.New(canal.Config{Host: host, Port: uint16(port), User: "root", ServerID: 9002, Flavor: flavor, GTIDMode: flavor == "mysql",
		Tables: []canal.Table{{Schema: schema, Name: name, Columns: canal.Columns{ID: "id", AggregateType: "aggregatetype",
			AggregateID: "aggregateid", Type: "type", Payload: "payload"}}},
		// Dolt heartbeats every 30 s whatever is asked.
		HeartbeatPeriod: time.Second, ReadTimeout: 45 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return result{Err: err.Error()}
	}
	src, err := backfill.New(backfill.Config{DB: db, Reader: reader, Flavor: flavor, Schema: schema, Table: name, ChunkSize: chunk})
	if err != nil {
		return result{Err: err.Error()}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	n := 0
	err = src.Run(ctx, event.Position{}, func(_ context.Context, txn *event.Txn) error {
		n += len(txn.Events)
		return nil
	})
	if err != nil {
		return result{Err: err.Error()}
	}
	return result{Events: n, Seconds: time.Since(start).Seconds()}
}

// doltRows caps the rows the MySQL path's backfill rows load into Dolt,
// which commits the load's transactions far slower than MariaDB.
const doltRows = 20000

// backfillOnDolt measures the backfill's MySQL path (GTID watermarks)
// against a bare SELECT of the same rows, on a private Dolt server (the
// MySQL-protocol server the tests use) loaded with n rows as the MariaDB
// rows' table is. Without a dolt binary it says so and measures nothing.
func backfillOnDolt(ctx context.Context, n int, measureOn func(server *sql.DB, pid int, name, config string, args ...string) backlogRow) ([]backlogRow, error) {
	if _, err := testserver.DoltBinary(); err != nil {
		fmt.Fprintf(os.Stderr, "backfill on the MySQL path not measured: %v\n", err)
		return nil, nil
	}
	fmt.Fprintf(os.Stderr, "starting a private dolt sql-server, loading %d rows…\n", n)
	d, err := testserver.StartDoltServer(testserver.DoltOptions{ServerID: 9})
	if err != nil {
		return nil, err
	}
	defer d.Stop()
	root, err := sql.Open("mysql", d.DSN(""))
	if err != nil {
		return nil, err
	}
	defer root.Close()
	for _, q := range []string{"CREATE DATABASE bench", fmt.Sprintf(poller.Schema, "bench.outbox")} {
		if _, err := root.ExecContext(ctx, q); err != nil {
			return nil, fmt.Errorf("dolt: %s: %w", q, err)
		}
	}
	db, err := sql.Open("mysql", d.DSN("bench"))
	if err != nil {
		return nil, err
	}
	defer db.Close()
	if err := load(db, "outbox", n); err != nil {
		return nil, fmt.Errorf("dolt: load: %w", err)
	}
	dsn := d.DSN("bench")
	return []backlogRow{
		measureOn(root, d.PID(), fmt.Sprintf("Dolt (MySQL path), %d rows: bare SELECT * of the table", n), "",
			"-role", "select", "-dsn", dsn, "-table", "bench.outbox"),
		measureOn(root, d.PID(), fmt.Sprintf("Dolt (MySQL path), %d rows: backfill, chunks of 1000 between gtid_executed watermarks", n), "",
			"-role", "backfill", "-flavor", "mysql", "-dsn", dsn, "-host", d.Host, "-port", fmt.Sprint(d.Port), "-table", "bench.outbox", "-n", "1000"),
	}, nil
}
