package canal_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/position"
	"github.com/outbox-relay/outbox-relay/retry"
	"github.com/outbox-relay/outbox-relay/source"
)

var srv *testserver.Server

func TestMain(m *testing.M) { testserver.Main(m, testserver.Options{ServerID: 1}, &srv) }

const outboxDDL = `CREATE TABLE outbox (
  id BINARY(16) NOT NULL PRIMARY KEY,
  aggregatetype VARCHAR(64) NOT NULL,
  aggregateid VARCHAR(64) NOT NULL,
  type VARCHAR(64) NOT NULL,
  payload JSON NOT NULL,
  tenant VARCHAR(32) NULL
)`

func setup(t *testing.T) (string, *sql.DB, canal.Config) {
	t.Helper()
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	if _, err := db.Exec(outboxDDL + ";CREATE TABLE orders (id INT PRIMARY KEY, note TEXT)"); err != nil {
		t.Fatal(err)
	}
	cfg := canal.Config{
		Host: srv.Host, Port: uint16(srv.Port), User: "root",
		ServerID: testserver.ServerID(), Flavor: "mariadb",
		Tables: []canal.Table{{Schema: dbname, Name: "outbox", Columns: canal.Columns{
			ID: "id", AggregateType: "aggregatetype", AggregateID: "aggregateid", Type: "type", Payload: "payload"},
			Headers: []string{"tenant"}}},
		HeartbeatPeriod: time.Second,
		Logger:          slog.New(slog.DiscardHandler),
	}
	return dbname, db, cfg
}

func serverPosition(t testing.TB, db *sql.DB, earliest bool) event.Position {
	t.Helper()
	ctx := context.Background()
	info, err := source.ReadInfo(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if earliest {
		p, err := source.EarliestPosition(ctx, db, info)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p, err := source.CurrentPosition(ctx, db, info)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// collect reads until want events arrived or the deadline passed.
func collect(t *testing.T, cfg canal.Config, from event.Position, want int) ([]*event.Event, []event.Position) {
	t.Helper()
	var events []*event.Event
	var positions []event.Position
	collectTxns(t, cfg, from, func(txns []*event.Txn) bool {
		txn := txns[len(txns)-1]
		events = append(events, txn.Events...)
		positions = append(positions, txn.Position)
		return len(events) >= want
	})
	return events, positions
}

func TestReaderExtractsCommittedInsertsOnly(t *testing.T) {
	_, db, cfg := setup(t)
	start := serverPosition(t, db, false)
	stmts := []string{
		// multi-row insert, interleaved with another table
		`BEGIN; INSERT INTO orders VALUES (1, 'a');
		 INSERT INTO outbox VALUES (UNHEX('00112233445566778899AABBCCDDEE00'), 'order', 'o1', 'created', '{"b": 1.0,  "a":[1,2]}', 't1'),
		                           (UNHEX('00112233445566778899AABBCCDDEE01'), 'order', 'o1', 'paid', '{"x":"y"}', NULL); COMMIT`,
		// rolled back: never in the binlog
		`BEGIN; INSERT INTO outbox VALUES (UNHEX('FF112233445566778899AABBCCDDEEFF'), 'order', 'o9', 'nope', '{}', NULL); ROLLBACK`,
		// no outbox rows at all
		`INSERT INTO orders VALUES (2, 'b')`,
		// insert then delete in one transaction: delivered once
		`BEGIN; INSERT INTO outbox VALUES (UNHEX('00112233445566778899AABBCCDDEE02'), 'order', 'o2', 'created', '{"k": "v"}', NULL);
		 DELETE FROM outbox WHERE id = UNHEX('00112233445566778899AABBCCDDEE02'); COMMIT`,
		// an update of an outbox row: ignored
		`UPDATE outbox SET type = 'changed' WHERE aggregateid = 'o1'`,
		`ALTER TABLE orders ADD COLUMN extra INT NULL`,
		`INSERT INTO outbox VALUES (UNHEX('00112233445566778899AABBCCDDEE03'), 'user', 'u1', 'created', '[]', NULL)`,
	}
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	events, positions := collect(t, cfg, start, 4)
	if len(events) != 4 {
		t.Fatalf("got %d events, want 4", len(events))
	}
	want := []struct{ id, aggID, typ, payload string }{
		{"00112233-4455-6677-8899-aabbccddee00", "o1", "created", `{"b": 1.0,  "a":[1,2]}`},
		{"00112233-4455-6677-8899-aabbccddee01", "o1", "paid", `{"x":"y"}`},
		{"00112233-4455-6677-8899-aabbccddee02", "o2", "created", `{"k": "v"}`},
		{"00112233-4455-6677-8899-aabbccddee03", "u1", "created", `[]`},
	}
	for i, w := range want {
		e := events[i]
		if e.ID != w.id || e.AggregateID != w.aggID || e.Type != w.typ || string(e.Payload) != w.payload {
			t.Errorf("event %d = %+v (payload %q), want %+v", i, e, e.Payload, w)
		}
		if e.Source.GTID == "" || e.Source.File == "" || e.CommitTime.IsZero() {
			t.Errorf("event %d lacks its source: %+v", i, e.Source)
		}
	}
	if len(events[0].Headers) != 1 || events[0].Headers[0] != (event.Header{Key: "tenant", Value: "t1"}) {
		t.Errorf("headers of event 0 = %+v", events[0].Headers)
	}
	if len(events[1].Headers) != 0 {
		t.Errorf("a NULL header column must be absent, got %+v", events[1].Headers)
	}
	// Transactions without outbox rows move the position too: at least the
	// plain orders insert, the update and the ALTER.
	if len(positions) < 6 {
		t.Errorf("got %d transactions, want every committed transaction (>= 6)", len(positions))
	}
	for i, p := range positions {
		if p.GTIDSet == "" || p.File == "" || p.Pos < 4 {
			t.Errorf("position %d incomplete: %+v", i, p)
		}
	}
}

func TestReaderResumesAfterEachTransactionWithoutRepeatOrGap(t *testing.T) {
	_, db, cfg := setup(t)
	start := serverPosition(t, db, false)
	for i := range 10 {
		if _, err := db.Exec(fmt.Sprintf(`INSERT INTO outbox VALUES (UNHEX(LPAD('%x', 32, '0')), 'a', 'agg', 't', '{"n":%d}', NULL)`, i, i)); err != nil {
			t.Fatal(err)
		}
	}
	all, positions := collect(t, cfg, start, 10)
	// Resume from the position after transaction 3: the rest, exactly.
	rest, _ := collect(t, cfg, positions[3], 6)
	for i, e := range rest {
		if e.ID != all[4+i].ID {
			t.Fatalf("resumed event %d = %s, want %s", i, e.ID, all[4+i].ID)
		}
	}
	// Resume by file/pos only (as with GTIDs off): same result.
	fp := positions[3]
	fp.GTIDSet = ""
	rest2, _ := collect(t, cfg, fp, 6)
	for i, e := range rest2 {
		if e.ID != all[4+i].ID {
			t.Fatalf("file/pos resumed event %d = %s, want %s", i, e.ID, all[4+i].ID)
		}
	}
}

func TestReaderStartsAtEarliestBinlog(t *testing.T) {
	dbname, db, cfg := setup(t)
	if _, err := db.Exec(`INSERT INTO outbox VALUES (UNHEX('0000000000000000000000000000EA57'), 'a', 'first', 't', '{}', NULL)`); err != nil {
		t.Fatal(err)
	}
	_ = dbname
	r, err := canal.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	found := errors.New("found")
	var last event.Position
	err = r.Run(ctx, serverPosition(t, db, true), func(ctx context.Context, txn *event.Txn) error {
		last = txn.Position
		for _, e := range txn.Events {
			if e.AggregateID == "first" {
				return found
			}
		}
		return nil
	})
	if !errors.Is(err, found) {
		t.Fatalf("event inserted before the start not read from the earliest binlog: %v", err)
	}
	if last.GTIDSet == "" {
		t.Errorf("a file/pos start on MariaDB must still yield GTID positions, got %+v", last)
	}
}

// The server drops the replication connection mid-stream (KILL of the
// binlog dump thread): the reader reconnects from the end of the last
// transaction it handed on, so nothing is lost and nothing repeats.
func TestReaderReconnectsAfterTheConnectionIsKilled(t *testing.T) {
	_, db, cfg := setup(t)
	cfg.Retry = retry.Policy{Max: 200 * time.Millisecond}
	start := serverPosition(t, db, false)
	insert := func(from, to int) {
		for i := from; i < to; i++ {
			if _, err := db.Exec(fmt.Sprintf(`INSERT INTO outbox VALUES (UNHEX(LPAD('%x', 32, '0')), 'a', 'agg', 't', '{"n":%d}', NULL)`, i, i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	insert(0, 20)
	r, err := canal.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ids []string
	killed := false
	done := errors.New("done")
	err = r.Run(ctx, start, func(ctx context.Context, txn *event.Txn) error {
		for _, e := range txn.Events {
			ids = append(ids, e.ID)
		}
		if len(ids) == 10 && !killed {
			killed = true
			var id int64
			if err := db.QueryRow("SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%' LIMIT 1").Scan(&id); err != nil {
				t.Errorf("find the binlog dump thread: %v", err)
				return err
			}
			if _, err := db.Exec(fmt.Sprintf("KILL %d", id)); err != nil {
				t.Errorf("kill: %v", err)
				return err
			}
			insertDone := make(chan struct{})
			go func() {
				defer close(insertDone)
				for i := 20; i < 30; i++ {
					if _, err := db.Exec(fmt.Sprintf(`INSERT INTO outbox VALUES (UNHEX(LPAD('%x', 32, '0')), 'a', 'agg', 't', '{"n":%d}', NULL)`, i, i)); err != nil {
						t.Error(err)
						return
					}
				}
			}()
			t.Cleanup(func() { <-insertDone })
		}
		if len(ids) == 30 {
			return done
		}
		return nil
	})
	if !errors.Is(err, done) {
		t.Fatalf("reader stopped with %v after %d events", err, len(ids))
	}
	for i, id := range ids {
		if want := fmt.Sprintf("00000000-0000-0000-0000-%012x", i); id != want {
			t.Fatalf("event %d is %s, want %s: lost or repeated across the reconnect", i, id, want)
		}
	}
}

// A checkpoint whose binlog was purged is not silently skipped: Run returns
// position.ErrLost.
func TestReaderReportsAPurgedPosition(t *testing.T) {
	_, db, cfg := setup(t)
	old := serverPosition(t, db, false)
	old.GTIDSet = "" // resume by file/pos, like a server without GTIDs
	if _, err := db.Exec("INSERT INTO outbox VALUES (UNHEX('01'), 'a', 'b', 't', '{}', NULL)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("FLUSH BINARY LOGS"); err != nil {
		t.Fatal(err)
	}
	files, err := source.BinaryLogs(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	// MariaDB keeps a file until InnoDB's binlog checkpoint has left it:
	// purge until the oldest file is gone.
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := db.Exec(fmt.Sprintf("PURGE BINARY LOGS TO '%s'", files[len(files)-1].Name)); err != nil {
			t.Fatal(err)
		}
		if now, _ := source.BinaryLogs(context.Background(), db); len(now) > 0 && now[0].Name != old.File {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s was never purged", old.File)
		}
	}
	r, _ := canal.New(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = r.Run(ctx, old, func(context.Context, *event.Txn) error { return nil })
	if !errors.Is(err, position.ErrLost) {
		t.Fatalf("Run from a purged file = %v, want position.ErrLost", err)
	}
}

// MariaDB's log_bin_compress writes compressed row and query events; the
// reader decodes them like plain ones.
func TestReaderReadsMariaDBCompressedBinlog(t *testing.T) {
	_, db, cfg := setup(t)
	srv.Exec(t, "SET GLOBAL log_bin_compress = ON", "SET GLOBAL log_bin_compress_min_len = 10")
	defer srv.Exec(t, "SET GLOBAL log_bin_compress = OFF", "SET GLOBAL log_bin_compress_min_len = 256")
	start := serverPosition(t, db, false)
	payload := `{"big": "` + strings.Repeat("compressible ", 50) + `"}`
	for i := range 3 {
		if _, err := db.Exec(fmt.Sprintf("INSERT INTO outbox VALUES (UNHEX('%032x'), 'a', 'comp', 't', ?, NULL)", i), payload); err != nil {
			t.Fatal(err)
		}
	}
	var compressed int
	rows, err := db.Query("SHOW BINLOG EVENTS IN '" + start.File + "'")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var log, typ, info string
		var pos, sid, end any
		if err := rows.Scan(&log, &pos, &typ, &sid, &end, &info); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(typ, "compressed") {
			compressed++
		}
	}
	rows.Close()
	if compressed == 0 {
		t.Fatal("the server wrote no compressed events: the test proves nothing")
	}
	evs, _ := collect(t, cfg, start, 3)
	for i, e := range evs {
		if string(e.Payload) != payload || e.ID != fmt.Sprintf("00000000-0000-0000-0000-%012x", i) {
			t.Fatalf("event %d = %s %q", i, e.ID, e.Payload)
		}
	}
}

// XA transactions: rows are released at XA COMMIT (or a one-phase commit),
// never at XA PREPARE and never after XA ROLLBACK; and every position handed
// on while a transaction with outbox rows is prepared resumes before it, so a
// restart in that window still delivers its rows.
func TestReaderReleasesXARowsAtCommitOnly(t *testing.T) {
	_, db, cfg := setup(t)
	start := serverPosition(t, db, false)
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ins := func(c interface {
		ExecContext(context.Context, string, ...any) (sql.Result, error)
	}, n int, agg string) {
		t.Helper()
		if _, err := c.ExecContext(ctx, fmt.Sprintf("INSERT INTO outbox VALUES (UNHEX('%032x'), 'order', '%s', 'e%d', '{}', NULL)", n, agg, n)); err != nil {
			t.Fatal(err)
		}
	}
	exec := func(qs ...string) {
		t.Helper()
		for _, q := range qs {
			if _, err := conn.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	exec("XA START 'a'")
	ins(conn, 1, "xa")
	exec("XA END 'a'", "XA PREPARE 'a'")
	ins(db, 2, "plain") // committed while 'a' is prepared
	exec("XA COMMIT 'a'")
	exec("XA START 'b'")
	ins(conn, 3, "xb")
	exec("XA END 'b'", "XA PREPARE 'b'", "XA ROLLBACK 'b'")
	exec("XA START 'c'")
	ins(conn, 4, "xc")
	exec("XA END 'c'", "XA COMMIT 'c' ONE PHASE")
	ins(db, 5, "end")

	r, err := canal.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	type txn struct {
		ids  []string
		pos  event.Position
		held bool
	}
	var txns []txn
	var ids []string
	errDone := errors.New("done")
	err = r.Run(rctx, start, func(ctx context.Context, t *event.Txn) error {
		var x []string
		for _, e := range t.Events {
			x = append(x, e.Type)
		}
		txns = append(txns, txn{x, t.Position, t.Held})
		ids = append(ids, x...)
		if len(x) > 0 && x[len(x)-1] == "e5" {
			return errDone
		}
		return nil
	})
	if !errors.Is(err, errDone) {
		t.Fatalf("reader: %v (events so far %v)", err, ids)
	}
	if got, want := strings.Join(ids, ","), "e2,e1,e4,e5"; got != want {
		t.Fatalf("events in order %s, want %s (e1 at its XA COMMIT, e3 rolled back, e4 one-phase)", got, want)
	}
	// The transaction of e2 was read while 'a' was prepared: resuming from
	// the position handed on with it must deliver e1 again.
	// It says so (event.Txn.Held): its commit time is not the one of the
	// transaction that ends at its position. e5's, after, is its own.
	var e2pos event.Position
	for _, x := range txns {
		if len(x.ids) == 1 && x.ids[0] == "e2" {
			e2pos = x.pos
			if !x.held {
				t.Errorf("e2's transaction, at a held position, is not marked held")
			}
		}
		if len(x.ids) == 1 && x.ids[0] == "e5" && x.held {
			t.Errorf("e5's transaction, at its own position, is marked held")
		}
	}
	evs, _ := collect(t, cfg, e2pos, 2)
	if evs[0].Type != "e1" && evs[1].Type != "e1" {
		t.Fatalf("resumed from the position handed on during the prepared window (%s): got %s, %s; e1 is lost", e2pos, evs[0].Type, evs[1].Type)
	}
}

// Temporal columns are decoded as times (cheaper than go-mysql's strings);
// as headers (or any mapped field) they read exactly as go-mysql's strings
// did: DATETIME as stored, TIMESTAMP in the local time zone, with the
// column's fractional digits; zero dates as zeros.
func TestTemporalColumnsReadAsGoMySQLStrings(t *testing.T) {
	dbname, db, cfg := setup(t)
	if _, err := db.Exec(`CREATE TABLE outbox_t (id BIGINT PRIMARY KEY, aggregateid VARCHAR(20) NOT NULL, payload JSON NOT NULL,
		d0 DATETIME NULL, d3 DATETIME(3) NULL, d6 DATETIME(6) NULL, t0 TIMESTAMP NULL, t6 TIMESTAMP(6) NULL, dz DATETIME NULL)`); err != nil {
		t.Fatal(err)
	}
	cfg.Tables = []canal.Table{{Schema: dbname, Name: "outbox_t", Columns: canal.Columns{ID: "id", AggregateID: "d6", Payload: "payload"},
		Headers: []string{"d0", "d3", "d6", "t0", "t6", "dz"}}}
	start := serverPosition(t, db, false)
	if _, err := db.Exec(`SET time_zone = '+00:00', sql_mode = '';
		INSERT INTO outbox_t VALUES (42, 'a', '{}', '2024-05-06 07:08:09', '2024-05-06 07:08:09.123', '2024-05-06 07:08:09.000450',
		'2024-05-06 07:08:09', '2024-05-06 07:08:09.999999', '0000-00-00 00:00:00')`); err != nil {
		t.Fatal(err)
	}
	events, _ := collect(t, cfg, start, 1)
	ts := func(layout string, nsec int) string {
		return time.Date(2024, 5, 6, 7, 8, 9, nsec, time.UTC).In(time.Local).Format(layout)
	}
	want := []event.Header{
		{Key: "d0", Value: "2024-05-06 07:08:09"},
		{Key: "d3", Value: "2024-05-06 07:08:09.123"},
		{Key: "d6", Value: "2024-05-06 07:08:09.000450"},
		{Key: "t0", Value: ts("2006-01-02 15:04:05", 0)},
		{Key: "t6", Value: ts("2006-01-02 15:04:05.000000", 999999000)},
		{Key: "dz", Value: "0000-00-00 00:00:00"},
	}
	e := events[0]
	if fmt.Sprint(e.Headers) != fmt.Sprint(want) {
		t.Errorf("headers %v, want %v", e.Headers, want)
	}
	if e.ID != "42" || e.AggregateID != "2024-05-06 07:08:09.000450" {
		t.Errorf("id %q, aggregate id %q: want 42 and the DATETIME(6) text", e.ID, e.AggregateID)
	}
}

// traceCounter counts the rows whose traceparent the reader dropped.
type traceCounter struct {
	mu  sync.Mutex
	bad map[string]int
}

func (*traceCounter) BinlogEvent()             {}
func (*traceCounter) OutboxEvents(string, int) {}
func (*traceCounter) Heartbeat()               {}
func (*traceCounter) Reconnect()               {}
func (*traceCounter) Connected()               {}
func (*traceCounter) Transaction(time.Time)    {}
func (*traceCounter) Server(string, bool)      {}

func (o *traceCounter) TraceParentMalformed(table string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.bad[table]++
}

// The trace context columns become the event's TraceParent and TraceState,
// as the W3C rules read them (event.ParseTraceParent, BoundTraceState); a
// malformed traceparent is dropped with its state, counted, and the event
// is delivered all the same; NULL leaves both empty.
func TestReaderCarriesTheRowsTraceContext(t *testing.T) {
	dbname, db, cfg := setup(t)
	if _, err := db.Exec(`ALTER TABLE outbox ADD COLUMN traceparent VARCHAR(64) NULL, ADD COLUMN tracestate VARCHAR(256) NULL`); err != nil {
		t.Fatal(err)
	}
	cfg.Tables[0].Columns.TraceParent, cfg.Tables[0].Columns.TraceState = "traceparent", "tracestate"
	obs := &traceCounter{bad: map[string]int{}}
	cfg.Observer = obs
	start := serverPosition(t, db, false)
	const good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	const later = "2a-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x\r\nX: 1"
	if _, err := db.Exec(`INSERT INTO outbox VALUES
	  (UNHEX('10000000000000000000000000000001'), 'order', 'o1', 'created', '{}', NULL, '` + good + `', 'congo=t61rcWkgMzE'),
	  (UNHEX('10000000000000000000000000000002'), 'order', 'o1', 'paid', '{}', NULL, 'not-a-traceparent', 'congo=x'),
	  (UNHEX('10000000000000000000000000000003'), 'order', 'o1', 'shipped', '{}', NULL, NULL, 'congo=y'),
	  (UNHEX('10000000000000000000000000000004'), 'order', 'o1', 'packed', '{}', NULL, '` + later + `', 'congo=a,Bad=b,rojo=c\r\nX: 1,rojo=d')`); err != nil {
		t.Fatal(err)
	}
	events, _ := collect(t, cfg, start, 4)
	if len(events) != 4 {
		t.Fatalf("got %d events, want 4 (a malformed traceparent must not stop delivery)", len(events))
	}
	// A later version is carried as version 00 without what it appends;
	// the tracestate keeps its valid members.
	want := [][2]string{{good, "congo=t61rcWkgMzE"}, {"", ""}, {"", ""}, {good, "congo=a,rojo=d"}}
	for i, w := range want {
		if got := [2]string{events[i].TraceParent, events[i].TraceState}; got != w {
			t.Errorf("event %d (%s): trace context %q, want %q", i, events[i].Type, got, w)
		}
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if n := obs.bad[dbname+".outbox"]; n != 1 {
		t.Errorf("counted %d malformed traceparents of %s.outbox, want 1 (%v)", n, dbname, obs.bad)
	}
}
