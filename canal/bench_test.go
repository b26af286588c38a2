package canal_test

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/poller"
)

// BenchmarkReaderBacklog reads a backlog of outbox rows shaped as the
// bench's (outbox-bench: 13 columns, four of them DATETIME(6), ~100-byte
// JSON payloads, transactions of 10) from the private server, decoding
// each row narrow (only the columns an event is made of) or whole (every
// column, as go-mysql does). cpu-µs/event is this process's CPU time
// (rusage) per event, which other work on the machine moves less than the
// wall time.
func BenchmarkReaderBacklog(b *testing.B) {
	dbname := srv.NewDatabase(b)
	db := srv.DB(b, dbname)
	if _, err := db.Exec(fmt.Sprintf(poller.Schema, "outbox")); err != nil {
		b.Fatal(err)
	}
	start := serverPosition(b, db, false)
	const rows = 20000
	for i := range rows / 10 {
		var q strings.Builder
		q.WriteString("INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ")
		for r := range 10 {
			if r > 0 {
				q.WriteByte(',')
			}
			k := i*10 + r
			fmt.Fprintf(&q, `('tenant-%03d', 'ord-%06d', 'order.created', '{"order_id": "ord-%06d", "amount": %d, "currency": "EUR", "note": "a typical small payload"}')`, k%1000, k%5000, k, k%9973)
		}
		if _, err := db.Exec(q.String()); err != nil {
			b.Fatal(err)
		}
	}
	cfg := canal.Config{
		Host: srv.Host, Port: uint16(srv.Port), User: "root", ServerID: 7001, Flavor: "mariadb",
		Tables: []canal.Table{{Schema: dbname, Name: "outbox", Columns: canal.Columns{
			ID: "id", AggregateType: "aggregatetype", AggregateID: "aggregateid", Type: "type", Payload: "payload"}}},
	}
	for _, whole := range []bool{false, true} {
		name := "narrow"
		if whole {
			name = "whole"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				r, err := canal.New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				if whole {
					canal.DecodeWhole(r)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				n := 0
				err = r.Run(ctx, start, func(_ context.Context, txn *event.Txn) error {
					if n += len(txn.Events); n >= rows {
						cancel()
					}
					return nil
				})
				cancel()
				if n < rows {
					b.Fatalf("read %d of %d events: %v", n, rows, err)
				}
			}
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N*rows), "cpu-µs/event")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// cpuTime is the user and system CPU time of this process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
