package backfill_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/backfill"
	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/eventually"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/pipeline"
)

var srv *testserver.Server

func TestMain(m *testing.M) { testserver.Main(m, testserver.Options{ServerID: 1}, &srv) }

// recorder is a sink that records what it was given, in order.
type recorder struct {
	mu  sync.Mutex
	got []outboxtest.Delivered
	evs []*event.Event
}

func (r *recorder) Connect(context.Context) error { return nil }
func (r *recorder) Close(context.Context) error   { return nil }
func (r *recorder) Write(_ context.Context, batch []*event.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range batch {
		r.got = append(r.got, outboxtest.Delivered{ID: e.ID, AggregateID: e.AggregateID, GTID: e.Source.GTID})
		r.evs = append(r.evs, e)
	}
	return nil
}

func (r *recorder) delivered() []outboxtest.Delivered {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]outboxtest.Delivered(nil), r.got...)
}

func unique(got []outboxtest.Delivered) int {
	seen := map[string]bool{}
	for _, d := range got {
		seen[d.ID] = true
	}
	return len(seen)
}

// lane is a source server the tests read: the package's MariaDB, or a
// Dolt server (MySQL's flavor: the GTID watermark path).
type lane struct {
	flavor string
	host   string
	port   int
	server interface {
		NewDatabase(testing.TB) string
		DB(testing.TB, string) *sql.DB
	}
}

func mariaDB() lane { return lane{flavor: "mariadb", host: srv.Host, port: srv.Port, server: srv} }

// dolt starts a Dolt server of the test's own (skipped without a dolt
// binary, but under CI: testserver.RequireDolt).
func dolt(t *testing.T) lane {
	d := testserver.StartDolt(t, testserver.DoltOptions{ServerID: 7})
	return lane{flavor: "mysql", host: d.Host, port: d.Port, server: d}
}

// lanes runs f on MariaDB (its snapshot-position path) and on Dolt (the
// GTID watermark path MySQL takes).
func lanes(t *testing.T, f func(t *testing.T, l lane)) {
	t.Run("mariadb", func(t *testing.T) { f(t, mariaDB()) })
	t.Run("dolt", func(t *testing.T) { f(t, dolt(t)) })
}

func setup(t *testing.T) (string, *sql.DB, canal.Config) { return mariaDB().setup(t) }

func (l lane) setup(t *testing.T) (string, *sql.DB, canal.Config) {
	t.Helper()
	name := l.server.NewDatabase(t)
	db := l.server.DB(t, name)
	if _, err := db.Exec(outboxtest.Schema); err != nil {
		t.Fatal(err)
	}
	return name, db, l.readerConfig(name)
}

func readerConfig(schema string) canal.Config { return mariaDB().readerConfig(schema) }

func (l lane) readerConfig(schema string) canal.Config {
	return canal.Config{
		Host: l.host, Port: uint16(l.port), User: "root",
		ServerID: testserver.ServerID(), Flavor: l.flavor, GTIDMode: l.flavor == "mysql",
		Tables: []canal.Table{{Schema: schema, Name: "outbox", Columns: canal.Columns{
			ID: "id", AggregateType: "aggregatetype", AggregateID: "aggregateid", Type: "type", Payload: "payload"}}},
		HeartbeatPeriod: time.Second,
		ReadTimeout:     45 * time.Second, // Dolt heartbeats every 30 s whatever is asked
		Logger:          slog.New(slog.DiscardHandler),
	}
}

func newSource(t *testing.T, db *sql.DB, schema string, chunk int, where string) *backfill.Source {
	return mariaDB().newSource(t, db, schema, chunk, where)
}

func (l lane) newSource(t *testing.T, db *sql.DB, schema string, chunk int, where string) *backfill.Source {
	t.Helper()
	r, err := canal.New(l.readerConfig(schema))
	if err != nil {
		t.Fatal(err)
	}
	src, err := backfill.New(backfill.Config{DB: db, Reader: r, Flavor: l.flavor, Schema: schema, Table: "outbox", ChunkSize: chunk, Where: where})
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func newPipeline(t *testing.T, name string, sink *recorder, store checkpoint.Store, start event.Position) *pipeline.Pipeline {
	t.Helper()
	p, err := pipeline.New(pipeline.Config{Name: name, Sink: sink, Store: store, Start: start, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A new sink: the backfill hands on the table's rows committed before its
// start P while producers go on committing, then the live stream from P
// the rest. Every committed row arrives once, and each aggregate's in
// commit order (the producers write an aggregate from one connection, so
// its primary key order is its commit order). On MariaDB each chunk's
// snapshot names its position; on Dolt (MySQL's flavor) it is read between
// gtid_executed watermarks, and the backfill's binlog reader is served
// the whole binlog whatever GTID set it asks from.
func TestNewSinkBackfillsThenGoesLiveWithEveryRowOnce(t *testing.T) {
	lanes(t, backfillsThenGoesLive)
}

func backfillsThenGoesLive(t *testing.T, l lane) {
	schema, db, live := l.setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	stop := make(chan struct{})
	w := &outboxtest.Workload{Until: stop, Retained: true, OwnAggregates: true, NetChange: l.flavor == "mysql"}
	var produced sync.WaitGroup
	produced.Go(func() { outboxtest.Produce(ctx, t, db, w, 4, 1_000_000, []int{1, 3, 2}, 6) })
	defer func() { close(stop); produced.Wait() }()
	eventually.Within(t, 2*time.Minute, "300 events committed before the backfill starts", func() bool { return w.Events() >= 300 })

	store, err := checkpoint.OpenFile(filepath.Join(t.TempDir(), "cp.json"))
	if err != nil {
		t.Fatal(err)
	}
	src := l.newSource(t, db, schema, 17, "")
	start, err := src.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sink := &recorder{}
	if err := newPipeline(t, "s.backfill", sink, store, start).Run(ctx, src); err != nil {
		t.Fatalf("backfill: %v", err)
	}
	backfilled := len(sink.delivered())
	cp, err := store.Load(ctx, "s.backfill")
	if err != nil || cp.Position.Table == nil || !cp.Position.Table.Done {
		t.Fatalf("backfill checkpoint %v (%v): want a Done cursor", cp.Position, err)
	}
	eventually.Within(t, 2*time.Minute, "more events committed after the backfill", func() bool { return w.Events() >= 2*backfilled+300 })

	r, err := canal.New(live)
	if err != nil {
		t.Fatal(err)
	}
	liveStart := start
	liveStart.Table = nil
	lctx, lcancel := context.WithCancel(ctx)
	var running sync.WaitGroup
	running.Go(func() {
		if err := newPipeline(t, "s", sink, store, liveStart).Run(lctx, r); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("live: %v", err)
		}
	})
	close(stop)
	produced.Wait()
	stop = make(chan struct{}) // the deferred close
	eventually.Within(t, 3*time.Minute, "every committed event delivered", func() bool { return unique(sink.delivered()) >= w.Events() })
	lcancel()
	running.Wait()
	rep := outboxtest.Check(t, w, sink.delivered(), false)
	if rep.Duplicates != 0 {
		t.Errorf("%d events delivered twice by the backfill and the live stream together", rep.Duplicates)
	}
	t.Logf("committed %d events: %d backfilled, %d live, %d duplicates", rep.Committed, backfilled, rep.Delivered-backfilled, rep.Duplicates)
	if backfilled == 0 || backfilled == rep.Delivered {
		t.Errorf("backfilled %d of %d: want some from each side", backfilled, rep.Delivered)
	}
}

// A backfilled row becomes the event the binlog reader makes of it.
func TestBackfilledEventIsTheBinlogsEvent(t *testing.T) {
	schema, db, cfg := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := db.Exec(`ALTER TABLE outbox ADD COLUMN tenant VARCHAR(16) NULL, ADD COLUMN traceparent VARCHAR(64) NULL, ADD COLUMN raw BINARY(16) NULL, ADD COLUMN at DATETIME(3) NULL`); err != nil {
		t.Fatal(err)
	}
	var info struct{ file string }
	var pos uint32
	var x, y any
	if err := db.QueryRow("SHOW MASTER STATUS").Scan(&info.file, &pos, &x, &y); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, tenant, traceparent, at) VALUES
		('e1', 'order', 'o1', 'created', '{"a": 1.50}', 't1', '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', '2026-05-01 12:00:00.120'),
		('e2', 'order', 'o1', 'paid', '[]', NULL, 'not a traceparent', NULL),
		('', 'user', 'u1', 'created', '{}', NULL, NULL, NULL)`); err != nil {
		t.Fatal(err)
	}
	cfg.Tables[0].Headers = []string{"tenant", "at"}
	cfg.Tables[0].Columns.TraceParent = "traceparent"
	reader, err := canal.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	src, err := backfill.New(backfill.Config{DB: db, Reader: reader, Flavor: "mariadb", Schema: schema, Table: "outbox", ChunkSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	var got []*event.Event
	var positions []event.Position
	if err := src.Run(ctx, event.Position{}, func(_ context.Context, txn *event.Txn) error {
		got = append(got, txn.Events...)
		positions = append(positions, txn.Position)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("got %d events, want 3", len(got))
	}
	// The binlog's events of the same rows (but the empty id's, which
	// names its transaction there).
	binlog, err := canal.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var fromBinlog []*event.Event
	bctx, stop := context.WithCancel(ctx)
	_ = binlog.Run(bctx, event.Position{File: info.file, Pos: pos}, func(_ context.Context, txn *event.Txn) error {
		fromBinlog = append(fromBinlog, txn.Events...)
		if len(fromBinlog) >= 3 {
			stop()
		}
		return nil
	})
	stop()
	if len(fromBinlog) != 3 {
		t.Fatalf("the binlog reader read %d events, want 3", len(fromBinlog))
	}
	for i := range 2 {
		b, g := *fromBinlog[i], *got[i]
		b.Source, b.CommitTime = event.Source{}, time.Time{}
		if fmt.Sprintf("%+v", b) != fmt.Sprintf("%+v", g) {
			t.Errorf("row %d from the binlog %+v\nfrom the table %+v", i, b, g)
		}
	}
	e := got[0]
	if e.ID != "e1" || e.AggregateType != "order" || e.AggregateID != "o1" || e.Type != "created" || string(e.Payload) != `{"a": 1.50}` ||
		len(e.Headers) != 2 || e.Headers[0] != (event.Header{Key: "tenant", Value: "t1"}) || e.Headers[1] != (event.Header{Key: "at", Value: "2026-05-01 12:00:00.120"}) ||
		e.TraceParent != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" || e.Table != schema+".outbox" {
		t.Errorf("first event %+v", e)
	}
	if got[1].TraceParent != "" || len(got[1].Headers) != 0 {
		t.Errorf("second event: malformed traceparent %q kept, headers %v", got[1].TraceParent, got[1].Headers)
	}
	if got[2].ID == "" {
		t.Error("a row with an empty id was handed on without one")
	}
	if len(positions) != 2 || positions[0].Table == nil || positions[0].Table.Done || strings.Join(positions[0].Table.Key, ",") != "2" ||
		positions[1].Table == nil || !positions[1].Table.Done || strings.Join(positions[1].Table.Key, ",") != "3" {
		t.Errorf("positions %v", positions)
	}
	// Run from the first chunk's position resumes after it.
	got = nil
	if err := src.Run(ctx, positions[0], func(_ context.Context, txn *event.Txn) error {
		got = append(got, txn.Events...)
		return nil
	}); err != nil || len(got) != 1 || got[0].ID != got[0].ID || got[0].AggregateID != "u1" {
		t.Errorf("resumed run: %d events (%v)", len(got), err)
	}
}

// The where filter selects rows; a filter the server refuses is an error
// that names it.
func TestWhereFilter(t *testing.T) {
	schema, db, _ := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := db.Exec(`ALTER TABLE outbox ADD COLUMN status VARCHAR(16) NOT NULL DEFAULT 'pending'`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, status) VALUES
		('a', 'o', '1', 't', '{}', 'pending'), ('b', 'o', '1', 't', '{}', 'sent'), ('c', 'o', '2', 't', '{}', 'pending')`); err != nil {
		t.Fatal(err)
	}
	var ids []string
	err := newSource(t, db, schema, 100, "status = 'pending'").Run(ctx, event.Position{}, func(_ context.Context, txn *event.Txn) error {
		for _, e := range txn.Events {
			ids = append(ids, e.ID)
		}
		return nil
	})
	if err != nil || strings.Join(ids, ",") != "a,c" {
		t.Errorf("filtered ids %v (%v), want a,c", ids, err)
	}
	err = newSource(t, db, schema, 100, "statu = 'pending'").Run(ctx, event.Position{}, func(context.Context, *event.Txn) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "statu = 'pending'") || !strings.Contains(err.Error(), "Unknown column") {
		t.Errorf("a filter on a missing column: %v", err)
	}
}

// A MySQL checkpoint store keeps a table cursor (a backfill's progress),
// and a binlog position stays without one.
func TestMySQLStoreKeepsTheTableCursor(t *testing.T) {
	_, db, _ := setup(t)
	ctx := context.Background()
	st, err := checkpoint.OpenMySQL(ctx, db, "cp", nil)
	if err != nil {
		t.Fatal(err)
	}
	cur := event.Position{GTIDSet: "0-1-5", File: "binlog.000001", Pos: 400,
		Table: &event.TableCursor{Table: "s.outbox", Key: []string{"17", "ab"}, Done: true}}
	if err := st.Save(ctx, "/backfill/out/s.outbox", checkpoint.Checkpoint{Flavor: "mariadb", Position: cur}); err != nil {
		t.Fatal(err)
	}
	if err := st.Save(ctx, "out", checkpoint.Checkpoint{Flavor: "mariadb", Position: event.Position{GTIDSet: "0-1-5"}}); err != nil {
		t.Fatal(err)
	}
	got, err := st.Load(ctx, "/backfill/out/s.outbox")
	if err != nil || got.Position.String() != cur.String() || got.Position.Table == nil || !got.Position.Table.Done {
		t.Errorf("loaded %v (%v), want %v", got.Position, err, cur)
	}
	if got, err := st.Load(ctx, "out"); err != nil || got.Position.Table != nil {
		t.Errorf("a binlog position loaded as %v (%v)", got.Position, err)
	}
}

// Selecting rows by age without the insert time column is an error that
// says how to fix it.
func TestSinceNeedsTheInsertTimeColumn(t *testing.T) {
	schema, db, _ := setup(t)
	r, err := canal.New(readerConfig(schema))
	if err != nil {
		t.Fatal(err)
	}
	src, err := backfill.New(backfill.Config{DB: db, Reader: r, Flavor: "mariadb", Schema: schema, Table: "outbox", Since: time.Hour, CreatedAt: "created_at"})
	if err != nil {
		t.Fatal(err)
	}
	err = src.Run(context.Background(), event.Position{}, func(context.Context, *event.Txn) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "tables[].columns.created_at") {
		t.Errorf("Run = %v, want an error naming tables[].columns.created_at", err)
	}
}

// A replay from the table reads the rows committed before its window's
// end (Config.Until, a binlog position the server still holds) and none
// committed after it, though the table holds them: on MariaDB and on
// Dolt (the GTID watermark path).
func TestUntilReadsOnlyTheRowsCommittedBeforeIt(t *testing.T) {
	lanes(t, func(t *testing.T, l lane) {
		schema, db, _ := l.setup(t)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		insert := func(ids ...string) { insertRows(t, db, ids...) }
		insert("a1", "a2", "a3")
		until, err := l.newSource(t, db, schema, 2, "").Start(ctx)
		if err != nil {
			t.Fatal(err)
		}
		until.Table = nil
		insert("b1", "b2")
		r, err := canal.New(l.readerConfig(schema))
		if err != nil {
			t.Fatal(err)
		}
		src, err := backfill.New(backfill.Config{DB: db, Reader: r, Until: until, Flavor: l.flavor, Schema: schema, Table: "outbox", ChunkSize: 2})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		if err := src.Run(ctx, event.Position{}, func(_ context.Context, txn *event.Txn) error {
			for _, e := range txn.Events {
				ids = append(ids, e.ID)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if strings.Join(ids, ",") != "a1,a2,a3" {
			t.Errorf("read %v, want the rows committed before Until: a1,a2,a3", ids)
		}
	})
}

// A backfill ends while rows keep being inserted faster than it reads
// them: here each chunk handed on is followed by more new rows than a
// chunk holds, so a backfill that read until the table's end never
// reached it. It reads up to the last key there was when it began, and
// hands on exactly the rows committed before its start.
func TestBackfillEndsWhileInsertsOutrunIt(t *testing.T) {
	lanes(t, func(t *testing.T, l lane) {
		schema, db, _ := l.setup(t)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		insert := func(ids ...string) { insertRows(t, db, ids...) }
		var before []string
		for i := range 7 {
			before = append(before, fmt.Sprintf("old%d", i))
		}
		insert(before...)
		src := l.newSource(t, db, schema, 3, "")
		start, err := src.Start(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		chunks := 0
		err = src.Run(ctx, start, func(_ context.Context, txn *event.Txn) error {
			for _, e := range txn.Events {
				ids = append(ids, e.ID)
			}
			if chunks++; chunks > 10 {
				return errors.New("still reading after 10 chunks: the backfill chases the rows inserted since it began")
			}
			for i := range 5 { // more than a chunk's 3
				insert(fmt.Sprintf("new%d-%d", chunks, i))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := strings.Join(ids, ","), strings.Join(before, ","); got != want {
			t.Errorf("backfilled %s, want the rows committed before the start: %s", got, want)
		}
	})
}

// insertRows commits one outbox row of each id, each in a transaction of
// its own.
func insertRows(t *testing.T, db *sql.DB, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if _, err := db.Exec("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES (?, 'o', 'a', 't', '{}')", id); err != nil {
			t.Fatal(err)
		}
	}
}
