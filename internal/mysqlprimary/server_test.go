package mysqlprimary

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	_ "github.com/go-sql-driver/mysql"

	"github.com/outbox-relay/outbox-relay/internal/testserver"
)

// syncer is a go-mysql BinlogSyncer as the relay configures one.
func syncer(t *testing.T, s *Server, heartbeat time.Duration) *replication.BinlogSyncer {
	t.Helper()
	cfg := replication.BinlogSyncerConfig{
		ServerID:              testserver.ServerID(),
		Flavor:                gomysql.MySQLFlavor,
		Host:                  "127.0.0.1",
		Port:                  s.Port(),
		User:                  s.User(),
		Password:              s.Password(),
		HeartbeatPeriod:       heartbeat,
		DisableRetrySync:      true,
		RenderJSONAsMySQLText: true,
		Logger:                slog.New(slog.DiscardHandler),
	}
	if heartbeat > 0 {
		cfg.ReadTimeout = 10 * heartbeat
	}
	sy := replication.NewBinlogSyncer(cfg)
	t.Cleanup(sy.Close)
	return sy
}

// txn is what a stream delivered for one transaction.
type txn struct {
	gtid  string   // from the GTID event
	ids   []string // outbox ids (column 1) of inserted rows
	end   string   // what ended it: XID, QUERY text, or XA_PREPARE
	gset  string   // the syncer's GTID set at the end (XID/QUERY GSet)
	file  string
	pos   uint32
	inner bool // rows came inside a TRANSACTION_PAYLOAD_EVENT
}

// reader collects transactions from a streamer.
type reader struct {
	t         *testing.T
	st        *replication.BinlogStreamer
	file      string
	cur       *txn
	heartbeat int
	rotations []string
}

func (r *reader) next(timeout time.Duration) (*txn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		ev, err := r.st.GetEvent(ctx)
		if err != nil {
			return nil, err
		}
		if t := r.on(ev, false); t != nil {
			return t, nil
		}
	}
}

func (r *reader) on(ev *replication.BinlogEvent, inner bool) *txn {
	switch e := ev.Event.(type) {
	case *replication.RotateEvent:
		r.file = string(e.NextLogName)
		r.rotations = append(r.rotations, fmt.Sprintf("%s:%d", e.NextLogName, e.Position))
	case *replication.HeartbeatEvent:
		r.heartbeat++
	case *replication.GTIDEvent:
		r.cur = &txn{}
		if ev.Header.EventType == replication.ANONYMOUS_GTID_EVENT {
			r.cur.gtid = "ANONYMOUS"
		} else {
			g, _ := e.GTIDNext()
			r.cur.gtid = g.String()
		}
	case *replication.GtidTaggedLogEvent:
		g, _ := e.GTIDNext()
		r.cur = &txn{gtid: g.String()}
	case *replication.RowsEvent:
		for _, row := range e.Rows {
			r.cur.ids = append(r.cur.ids, fmt.Sprint(row[1]))
		}
		r.cur.inner = inner
	case *replication.TransactionPayloadEvent:
		for _, in := range e.Events {
			if t := r.on(in, true); t != nil {
				return t
			}
		}
	case *replication.XIDEvent:
		return r.finish("XID", e.GSet, ev)
	case *replication.QueryEvent:
		if string(e.Query) == "BEGIN" || strings.HasPrefix(string(e.Query), "XA START") || strings.HasPrefix(string(e.Query), "XA END") {
			return nil
		}
		return r.finish(string(e.Query), e.GSet, ev)
	case *replication.GenericEvent:
		if ev.Header.EventType == replication.XA_PREPARE_LOG_EVENT {
			return r.finish("XA_PREPARE", nil, ev)
		}
	}
	return nil
}

func (r *reader) finish(end string, gset gomysql.GTIDSet, ev *replication.BinlogEvent) *txn {
	t := r.cur
	if t == nil {
		r.t.Fatalf("%s without a GTID event", end)
	}
	r.cur = nil
	t.end, t.file, t.pos = end, r.file, ev.Header.LogPos
	if gset != nil {
		t.gset = gset.String()
	}
	return t
}

// expect reads len(want) transactions and checks their GTIDs, then that
// nothing else arrives for a moment.
func (r *reader) expect(want ...string) []*txn {
	r.t.Helper()
	var got []*txn
	for range want {
		t, err := r.next(5 * time.Second)
		if err != nil {
			r.t.Fatalf("after %d of %d transactions: %v", len(got), len(want), err)
		}
		got = append(got, t)
	}
	var gtids []string
	for _, t := range got {
		gtids = append(gtids, t.gtid)
	}
	if strings.Join(gtids, " ") != strings.Join(want, " ") {
		r.t.Fatalf("transactions %v, want %v", gtids, want)
	}
	if t, err := r.next(300 * time.Millisecond); err == nil {
		r.t.Fatalf("unexpected transaction %s", t.gtid)
	}
	return got
}

func startGTID(t *testing.T, s *Server, set string) *reader {
	t.Helper()
	g, err := gomysql.ParseMysqlGTIDSet(set)
	if err != nil {
		t.Fatal(err)
	}
	st, err := syncer(t, s, 0).StartSyncGTID(g)
	if err != nil {
		t.Fatal(err)
	}
	return &reader{t: t, st: st}
}

func TestStreamByGTIDSetGetsExactlyTheMissingTransactions(t *testing.T) {
	const u = "aaaaaaaa-0000-0000-0000-000000000001"
	s := Start(t, Options{ServerUUID: u})
	g1 := s.Insert(OutboxRow(1, "e1", "a", "1", "t", `{}`))
	g2 := s.Insert(OutboxRow(2, "e2", "a", "1", "t", `{}`), OutboxRow(3, "e3", "a", "1", "t", `{}`))
	s.Rotate()
	g3 := s.Insert(OutboxRow(4, "e4", "a", "1", "t", `{}`))

	t.Run("an empty set starts at the first transaction", func(t *testing.T) {
		r := startGTID(t, s, "")
		got := r.expect(g1, g2, g3)
		if strings.Join(got[1].ids, ",") != "e2,e3" || got[1].end != "XID" {
			t.Errorf("second transaction %+v", got[1])
		}
		if got[2].gset != u+":1-3" || got[2].file != "binlog.000002" {
			t.Errorf("last transaction's GTID set %q file %s", got[2].gset, got[2].file)
		}
		g4 := s.Insert(OutboxRow(5, "e5", "a", "1", "t", `{}`))
		r.expect(g4)
	})
	t.Run("a set with the first two starts in the second file", func(t *testing.T) {
		r := startGTID(t, s, u+":1-2")
		got := r.expect(g3, u+":4")
		if r.rotations[0] != "binlog.000002:4" {
			t.Errorf("started at %v, want the second file (its PREVIOUS_GTIDS is in the set)", r.rotations)
		}
		if got[0].gset != u+":1-3" {
			t.Errorf("GTID set %q", got[0].gset)
		}
	})
	t.Run("a set with a hole gets the hole", func(t *testing.T) {
		r := startGTID(t, s, u+":1,"+u+":3-4")
		r.expect(g2)
		if r.heartbeat == 0 {
			t.Errorf("no heartbeat after the skipped transactions (MySQL sends one)")
		}
	})
	t.Run("a set with everything waits for new transactions", func(t *testing.T) {
		r := startGTID(t, s, s.GTIDExecuted())
		r.expect()
		g := s.Insert(OutboxRow(6, "e6", "a", "1", "t", `{}`))
		r.expect(g)
	})
}

func TestStreamByFileAndPosition(t *testing.T) {
	s := Start(t, Options{})
	g1 := s.Insert(OutboxRow(1, "e1", "a", "1", "t", `{}`))
	file, pos := s.Position()
	g2 := s.Insert(OutboxRow(2, "e2", "a", "1", "t", `{}`))
	s.Rotate()
	g3 := s.Exec("CREATE TABLE t (a INT)")

	st, err := syncer(t, s, 0).StartSync(gomysql.Position{Name: "binlog.000001", Pos: 4})
	if err != nil {
		t.Fatal(err)
	}
	r := &reader{t: t, st: st}
	got := r.expect(g1, g2, g3)
	if got[0].gset != "" {
		t.Errorf("go-mysql computed a GTID set %q after a file/position start", got[0].gset)
	}
	if got[2].end != "CREATE TABLE t (a INT)" {
		t.Errorf("DDL ended with %q", got[2].end)
	}

	st, err = syncer(t, s, 0).StartSync(gomysql.Position{Name: file, Pos: pos})
	if err != nil {
		t.Fatal(err)
	}
	r = &reader{t: t, st: st}
	r.expect(g2, g3)

	_, err = syncer(t, s, 0).StartSync(gomysql.Position{Name: "binlog.000009", Pos: 4})
	if err == nil {
		st, _ := syncer(t, s, 0).StartSync(gomysql.Position{Name: "binlog.000009", Pos: 4})
		_, err = (&reader{t: t, st: st}).next(2 * time.Second)
	}
	var me *gomysql.MyError
	if !errors.As(err, &me) || me.Code != 1236 {
		t.Errorf("unknown file: %v, want error 1236", err)
	}
}

func TestPurgedGTIDsFailTheDumpWith1236(t *testing.T) {
	const u = "bbbbbbbb-0000-0000-0000-000000000001"
	s := Start(t, Options{ServerUUID: u})
	s.Insert(OutboxRow(1, "e1", "a", "1", "t", `{}`))
	s.Insert(OutboxRow(2, "e2", "a", "1", "t", `{}`))
	if got := s.Purge(""); got != u+":1-2" {
		t.Fatalf("gtid_purged %q", got)
	}
	g3 := s.Insert(OutboxRow(3, "e3", "a", "1", "t", `{}`))

	r := startGTID(t, s, u+":1")
	_, err := r.next(5 * time.Second)
	var me *gomysql.MyError
	if !errors.As(err, &me) || me.Code != 1236 || !strings.Contains(me.Message, "missing transactions are '"+u+":2'") {
		t.Fatalf("dump needing a purged GTID: %v", err)
	}
	startGTID(t, s, u+":1-2").expect(g3)

	st, err := syncer(t, s, 0).StartSync(gomysql.Position{Name: "binlog.000001", Pos: 4})
	if err == nil {
		_, err = (&reader{t: t, st: st}).next(5 * time.Second)
	}
	if !errors.As(err, &me) || me.Code != 1236 {
		t.Fatalf("dump of a purged file: %v", err)
	}
}

func TestRejectedDump(t *testing.T) {
	s := Start(t, Options{RejectDump: 1047})
	s.Insert(OutboxRow(1, "e1", "a", "1", "t", `{}`))
	r := startGTID(t, s, "")
	_, err := r.next(5 * time.Second)
	var me *gomysql.MyError
	if !errors.As(err, &me) || me.Code != 1047 {
		t.Fatalf("got %v, want error 1047", err)
	}
}

func TestHeartbeatsWhenIdle(t *testing.T) {
	s := Start(t, Options{})
	st, err := syncer(t, s, 100*time.Millisecond).StartSyncGTID(mustGTIDSet(""))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for n := 0; n < 3; {
		ev, err := st.GetEvent(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if h, ok := ev.Event.(*replication.HeartbeatEvent); ok {
			if h.Filename != "binlog.000001" || ev.Header.LogPos == 0 {
				t.Errorf("heartbeat %+v at %d", h, ev.Header.LogPos)
			}
			n++
		}
	}

	fixed := Start(t, Options{Heartbeat: -1})
	st, err = syncer(t, fixed, 50*time.Millisecond).StartSyncGTID(mustGTIDSet(""))
	if err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	for {
		ev, err := st.GetEvent(ctx2)
		if err != nil {
			break
		}
		if _, ok := ev.Event.(*replication.HeartbeatEvent); ok {
			t.Fatal("heartbeat from a server told to send none")
		}
	}
}

func TestCompressedXAAndTaggedTransactionsStream(t *testing.T) {
	const u = "cccccccc-0000-0000-0000-000000000001"
	s := Start(t, Options{Version: "8.4.2", ServerUUID: u})
	r := startGTID(t, s, "")
	w := Write{Table: s.Outbox(), Rows: [][]any{OutboxRow(1, "x1", "a", "1", "t", `{}`)}}
	g1 := s.Commit(Txn{Compressed: true, Writes: []Write{w}})
	g2 := s.XAPrepare("xa1", w)
	g3 := s.XACommit("xa1")
	g4 := s.Commit(Txn{Tag: "batch", Writes: []Write{w}})
	got := r.expect(g1, g2, g3, g4)
	if !got[0].inner || got[0].end != "XID" {
		t.Errorf("compressed transaction %+v", got[0])
	}
	if got[0].gset != u+":1" {
		t.Errorf("GTID set of the XID inside the payload %q", got[0].gset)
	}
	if got[1].end != "XA_PREPARE" || got[2].end != "XA COMMIT X'786131',X'',1" {
		t.Errorf("XA ends %q, %q", got[1].end, got[2].end)
	}
	if got[3].gtid != u+":batch:1" || got[3].gset != u+":1-3:batch:1" {
		t.Errorf("tagged transaction %+v", got[3])
	}
	// Restart after the tagged one: nothing is replayed.
	startGTID(t, s, s.GTIDExecuted()).expect()
}

func TestKillConnectionsEndsStreams(t *testing.T) {
	s := Start(t, Options{})
	g := s.Insert(OutboxRow(1, "e1", "a", "1", "t", `{}`))
	r := startGTID(t, s, "")
	r.expect(g)
	deadline := time.Now().Add(5 * time.Second)
	for s.Streams() != 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	s.KillConnections()
	if _, err := r.next(5 * time.Second); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("stream after KillConnections: %v", err)
	}
	// The server still accepts new streams.
	startGTID(t, s, "").expect(g)
}

func TestFailoverToAReplicaWithAnotherUUID(t *testing.T) {
	const a, b = "dddddddd-0000-0000-0000-00000000000a", "dddddddd-0000-0000-0000-00000000000b"
	primary := Start(t, Options{ServerUUID: a, ServerID: 1})
	for i := range 4 {
		primary.Insert(OutboxRow(int64(i), fmt.Sprintf("e%d", i), "a", "1", "t", `{}`))
	}
	checkpoint := a + ":1-3"

	promoted := primary.StartReplica(t, Options{ServerUUID: b, ServerID: 2}, "")
	if promoted.GTIDExecuted() != a+":1-4" {
		t.Fatalf("replica executed %s", promoted.GTIDExecuted())
	}
	gb := promoted.Insert(OutboxRow(9, "e9", "a", "1", "t", `{}`))
	got := startGTID(t, promoted, checkpoint).expect(a+":4", gb)
	if got[1].gset != a+":1-4,"+b+":1" {
		t.Errorf("after failover the set is %q", got[1].gset)
	}

	behind := primary.StartReplica(t, Options{ServerUUID: b, ServerID: 3}, a+":3-4")
	if behind.GTIDExecuted() != a+":1-2" {
		t.Fatalf("lagging replica executed %s", behind.GTIDExecuted())
	}
	// MySQL serves a replica that has more of another server's GTIDs:
	// noticing the gap is the relay's job.
	startGTID(t, behind, checkpoint).expect()

	// The old primary refuses a set with more of its own GTIDs than it has.
	r := startGTID(t, primary, a+":1-9")
	_, err := r.next(5 * time.Second)
	var me *gomysql.MyError
	if !errors.As(err, &me) || me.Code != 1236 || !strings.Contains(me.Message, "more GTIDs than the source has") {
		t.Fatalf("set ahead of the source: %v", err)
	}
}

func TestAnonymousGTIDsAndGTIDDumpRefused(t *testing.T) {
	s := Start(t, Options{GTIDMode: "OFF"})
	s.Insert(OutboxRow(1, "e1", "a", "1", "t", `{}`))
	st, err := syncer(t, s, 0).StartSync(gomysql.Position{Name: "binlog.000001", Pos: 4})
	if err != nil {
		t.Fatal(err)
	}
	got := (&reader{t: t, st: st}).expect("ANONYMOUS")
	if got[0].gset != "" {
		t.Errorf("anonymous transaction's set %q", got[0].gset)
	}
	r := startGTID(t, s, "")
	_, err = r.next(5 * time.Second)
	var me *gomysql.MyError
	if !errors.As(err, &me) || me.Code != 1236 || !strings.Contains(me.Message, "GTID_MODE") {
		t.Fatalf("GTID dump with gtid_mode OFF: %v", err)
	}
}

func TestQueriesOverGoSQLDriver(t *testing.T) {
	s := Start(t, Options{Version: "8.0.36", ServerUUID: "eeeeeeee-0000-0000-0000-000000000001", Purged: "eeeeeeee-0000-0000-0000-000000000002:1-5"})
	s.Insert(OutboxRow(1, "e1", "a", "1", "t", `{}`))
	db, err := sql.Open("mysql", s.DSN("app"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()

	var version string
	var serverID uint32
	if err := db.QueryRowContext(ctx, "SELECT VERSION(), @@server_id").Scan(&version, &serverID); err != nil || version != "8.0.36" || serverID != 1 {
		t.Errorf("version %q id %d: %v", version, serverID, err)
	}
	var executed string
	if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_executed").Scan(&executed); err != nil || executed != "eeeeeeee-0000-0000-0000-000000000001:1,\neeeeeeee-0000-0000-0000-000000000002:1-5" {
		t.Errorf("gtid_executed %q: %v", executed, err)
	}
	rows, err := db.QueryContext(ctx, "SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?", "app", "outbox")
	if err != nil {
		t.Fatal(err)
	}
	var cols []string
	for rows.Next() {
		var n, typ string
		if err := rows.Scan(&n, &typ); err != nil {
			t.Fatal(err)
		}
		cols = append(cols, n+" "+typ)
	}
	rows.Close()
	if strings.Join(cols, ",") != "seq bigint,id varchar,aggregatetype varchar,aggregateid varchar,type varchar,payload json" {
		t.Errorf("columns %v", cols)
	}
	var file string
	var pos uint32
	var doDB, ignoreDB, set string
	if err := db.QueryRowContext(ctx, "SHOW MASTER STATUS").Scan(&file, &pos, &doDB, &ignoreDB, &set); err != nil || file != "binlog.000001" || pos == 0 {
		t.Errorf("SHOW MASTER STATUS %s %d: %v", file, pos, err)
	}
	var me *gomysql.MyError
	_ = me
	if _, err := db.ExecContext(ctx, "SHOW BINARY LOG STATUS"); err == nil || !strings.Contains(err.Error(), "1064") {
		t.Errorf("SHOW BINARY LOG STATUS on 8.0: %v, want a syntax error", err)
	}
	var name, value string
	if err := db.QueryRowContext(ctx, "SHOW GLOBAL VARIABLES LIKE 'binlog_row_%'").Scan(&name, &value); err != nil || name != "binlog_row_image" {
		t.Errorf("SHOW VARIABLES LIKE: %s=%s %v", name, value, err)
	}
	if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_slave_pos").Scan(&value); err == nil || !strings.Contains(err.Error(), "1193") {
		t.Errorf("MariaDB variable on MySQL: %v, want error 1193", err)
	}
	if _, err := db.ExecContext(ctx, "SELECT * FROM outbox"); err == nil || !strings.Contains(err.Error(), "SELECT * FROM outbox") {
		t.Errorf("unknown query: %v, want an error naming it", err)
	}
	if u := s.UnknownQueries(); len(u) != 1 {
		t.Errorf("unknown queries %q", u)
	}
	s.OnQuery(`SELECT \* FROM outbox`, func([]string) (*Result, error) {
		return &Result{Columns: []string{"n"}, Rows: [][]any{{7}}}, nil
	})
	var n int
	if err := db.QueryRowContext(ctx, "SELECT * FROM outbox").Scan(&n); err != nil || n != 7 {
		t.Errorf("OnQuery answer %d: %v", n, err)
	}

	s84 := Start(t, Options{Version: "8.4.2"})
	db84, err := sql.Open("mysql", s84.DSN(""))
	if err != nil {
		t.Fatal(err)
	}
	defer db84.Close()
	if _, err := db84.ExecContext(ctx, "SHOW MASTER STATUS"); err == nil || !strings.Contains(err.Error(), "1064") {
		t.Errorf("SHOW MASTER STATUS on 8.4: %v, want a syntax error", err)
	}
	if err := db84.QueryRowContext(ctx, "SHOW BINARY LOG STATUS").Scan(&file, &pos, &doDB, &ignoreDB, &set); err != nil {
		t.Errorf("SHOW BINARY LOG STATUS on 8.4: %v", err)
	}
}

func TestReplicaKeepsPreparedXATransactions(t *testing.T) {
	const a, b = "dddddddd-0000-0000-0000-00000000001a", "dddddddd-0000-0000-0000-00000000001b"
	primary := Start(t, Options{ServerUUID: a})
	w := Write{Table: primary.Outbox(), Rows: [][]any{OutboxRow(1, "x1", "a", "1", "t", `{}`)}}
	primary.XAPrepare("kept", w)
	primary.XAPrepare("lost", w)
	promoted := primary.StartReplica(t, Options{ServerUUID: b, ServerID: 2}, "")
	if g := promoted.XACommit("kept"); g != b+":1" {
		t.Errorf("XA COMMIT on the replica: GTID %s", g)
	}
	promoted.XARollback("lost")
	// The XA PREPARE of "lost" (a:2) never reached this replica: it cannot
	// end it (the test would fail with XAER_NOTA); "kept" it has.
	lagging := primary.StartReplica(t, Options{ServerUUID: b, ServerID: 3}, a+":2")
	lagging.XACommit("kept")
	lagging.mu.Lock()
	n := len(lagging.prepared)
	lagging.mu.Unlock()
	if n != 0 {
		t.Errorf("lagging replica has %d prepared XA transactions, want 0", n)
	}
	startGTID(t, promoted, a+":1-2").expect(b+":1", b+":2")
}
