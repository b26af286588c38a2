package relay_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/source"
)

const backlogRows = 200000

var backlog struct {
	once       sync.Once
	dbname     string
	start, end event.Position
	err        error
}

// makeBacklog commits 200,000 outbox rows in 20,000 transactions (once).
func makeBacklog(b *testing.B) {
	backlog.once.Do(func() {
		ctx := context.Background()
		backlog.dbname = srv.NewDatabase(b)
		db := srv.DB(b, backlog.dbname)
		if _, err := db.Exec(`CREATE TABLE outbox (id VARCHAR(64) PRIMARY KEY, aggregatetype VARCHAR(64) NOT NULL,
			aggregateid VARCHAR(64) NOT NULL, type VARCHAR(64) NOT NULL, payload JSON NOT NULL)`); err != nil {
			backlog.err = err
			return
		}
		info, _ := source.ReadInfo(ctx, db)
		backlog.start, backlog.err = source.CurrentPosition(ctx, db, info)
		var wg sync.WaitGroup
		var mu sync.Mutex
		for p := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < backlogRows/10/4; i++ {
					var vals []string
					for r := range 10 {
						id := fmt.Sprintf("p%d-%d-%d", p, i, r)
						vals = append(vals, fmt.Sprintf(`('%s', 'order', 'agg-%d', 'created', '{"id": "%s", "amount": %d, "note": "a typical small event payload"}')`, id, (i*10+r)%1000, id, i))
					}
					if _, err := db.Exec("INSERT INTO outbox VALUES " + strings.Join(vals, ",")); err != nil {
						mu.Lock()
						backlog.err = err
						mu.Unlock()
						return
					}
				}
			}()
		}
		wg.Wait()
		if backlog.err == nil {
			backlog.end, backlog.err = source.CurrentPosition(ctx, db, info)
		}
	})
	if backlog.err != nil {
		b.Fatal(backlog.err)
	}
}

// BenchmarkBacklog drains 200,000 committed outbox rows: "binlog" is the raw
// read-and-decode rate of the reader alone; "kafka" is the whole relay into
// an in-process Kafka-protocol broker, until the checkpoint covers the backlog.
func BenchmarkBacklog(b *testing.B) {
	makeBacklog(b)
	b.Run("binlog", func(b *testing.B) {
		for range b.N {
			r, err := canal.New(canal.Config{Host: srv.Host, Port: uint16(srv.Port), User: "root", ServerID: testserver.ServerID(), Flavor: "mariadb",
				Tables: []canal.Table{{Schema: backlog.dbname, Name: "outbox", Columns: canal.Columns{ID: "id", AggregateType: "aggregatetype", AggregateID: "aggregateid", Type: "type", Payload: "payload"}}}})
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			done := errors.New("done")
			start := time.Now()
			err = r.Run(context.Background(), backlog.start, func(_ context.Context, txn *event.Txn) error {
				n += len(txn.Events)
				if n >= backlogRows {
					return done
				}
				return nil
			})
			if !errors.Is(err, done) {
				b.Fatal(err)
			}
			b.ReportMetric(float64(n)/time.Since(start).Seconds(), "events/s")
		}
	})
	b.Run("kafka", func(b *testing.B) {
		for range b.N {
			k, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(6, "outbox.event.order"))
			if err != nil {
				b.Fatal(err)
			}
			_, elapsed := drainBacklog(b, k.ListenAddrs()[0])
			k.Close()
			b.ReportMetric(float64(backlogRows)/elapsed.Seconds(), "events/s")
		}
	})
}

// drainBacklog runs a relay with a kafka sink on brokers until its
// checkpoint covers the backlog; it returns the config and how long it took.
func drainBacklog(b *testing.B, brokers string) (*config.Config, time.Duration) {
	cpPath := filepath.Join(b.TempDir(), "cp.json")
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d}
tables: [{name: %s.outbox}]
checkpoint: {path: %s, interval: 50ms, start: "gtid:%s"}
delivery: {batch_size: 2000, max_in_flight: 20000}
sinks: [{name: kafka, type: kafka, kafka: {brokers: [%s]}}]
`, srv.Port, testserver.ServerID(), backlog.dbname, cpPath, backlog.start.GTIDSet, brokers)))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	start := time.Now()
	rl := startRelay(b, cfg, relay.Options{Logger: slog.New(slog.DiscardHandler)})
	for {
		if st, err := checkpoint.OpenFile(cpPath); err == nil {
			if cp, err := st.Load(ctx, "kafka"); err == nil && cp.Position.GTIDSet == backlog.end.GTIDSet {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	elapsed := time.Since(start)
	rl.stop(b)
	return cfg, elapsed
}
