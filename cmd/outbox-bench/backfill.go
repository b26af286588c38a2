package main

import (
	"context"
	"database/sql"
	"log/slog"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/backfill"
	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/sqlident"
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
// mapped to its event, to the end of the table.
func roleBackfill(dsn, host string, port int, table string, chunk int) result {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return result{Err: err.Error()}
	}
	defer db.Close()
	schema, name, _ := strings.Cut(table, ".")
	reader, err := canal.New(canal.Config{Host: host, Port: uint16(port), User: "root", ServerID: 9002, Flavor: "mariadb",
		Tables: []canal.Table{{Schema: schema, Name: name, Columns: canal.Columns{ID: "id", AggregateType: "aggregatetype",
			AggregateID: "aggregateid", Type: "type", Payload: "payload"}}},
		HeartbeatPeriod: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return result{Err: err.Error()}
	}
	src, err := backfill.New(backfill.Config{DB: db, Reader: reader, Flavor: "mariadb", Schema: schema, Table: name, ChunkSize: chunk})
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
