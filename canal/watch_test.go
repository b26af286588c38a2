package canal_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/event"
)

// collectTxns reads transactions from start until done says stop.
func collectTxns(t *testing.T, cfg canal.Config, start event.Position, done func([]*event.Txn) bool) []*event.Txn {
	t.Helper()
	r, err := canal.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var txns []*event.Txn
	errDone := errors.New("done")
	err = r.Run(ctx, start, func(ctx context.Context, txn *event.Txn) error {
		txns = append(txns, txn)
		if done(txns) {
			return errDone
		}
		return nil
	})
	if !errors.Is(err, errDone) {
		t.Fatalf("reader stopped with %v after %d transactions", err, len(txns))
	}
	return txns
}

const watchedDDL = `CREATE TABLE hooks (
  id VARCHAR(64) PRIMARY KEY,
  url VARCHAR(2048) NOT NULL,
  n INT NULL,
  tiny TINYINT(1) NOT NULL DEFAULT 1,
  u BIGINT UNSIGNED NULL,
  m MEDIUMINT UNSIGNED NULL,
  f DOUBLE NULL,
  fl FLOAT NULL,
  dec2 DECIMAL(10,2) NULL,
  dt DATETIME(6) NULL,
  d DATE NULL,
  tm TIME NULL,
  y YEAR NULL,
  e ENUM('red','green') NULL,
  s SET('x','y','z') NULL,
  j JSON NULL,
  b BLOB NULL,
  txt TEXT NULL,
  bits BIT(8) NULL
)`

// Inserts, updates and deletes of a watched table arrive as Changes of
// their own transaction, in binlog order, beside the outbox events committed
// with them; rows of tables neither watched nor outbox never show.
func TestWatchedTableChangesArriveWithTheirTransaction(t *testing.T) {
	dbname, db, cfg := setup(t)
	if _, err := db.Exec(watchedDDL); err != nil {
		t.Fatal(err)
	}
	cfg.Watch = []canal.Watched{{Schema: dbname, Name: "hooks"}}
	start := serverPosition(t, db, false)
	stmts := []string{
		// one transaction: a watched insert, an outbox row, a watched update, an unwatched row
		`BEGIN;
		 INSERT INTO hooks VALUES ('a', 'https://a.example/', -7, 1, 18446744073709551615, 16777215, 2.5, 1.1, 12345678.90,
		   '2024-05-06 07:08:09.000450', '2024-05-06', '-01:02:03', 2024, 'green', 'x,z', '{"k": [1, 2]}', x'00ff', 'some text', b'00000101');
		 INSERT INTO outbox VALUES (UNHEX('00112233445566778899AABBCCDDEE00'), 'order', 'o1', 'created', '{}', NULL);
		 UPDATE hooks SET url = 'https://a2.example/', n = NULL WHERE id = 'a';
		 INSERT INTO orders VALUES (1, 'not watched');
		 COMMIT`,
		// only watched rows, no outbox row
		`INSERT INTO hooks (id, url, u) VALUES ('b', 'https://b.example/', 5), ('c', 'https://c.example/', NULL)`,
		`UPDATE hooks SET tiny = 0 WHERE id IN ('b', 'c')`,
		`DELETE FROM hooks WHERE id = 'a'`,
		`INSERT INTO outbox VALUES (UNHEX('00112233445566778899AABBCCDDEE01'), 'order', 'o1', 'last', '{}', NULL)`,
	}
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	txns := collectTxns(t, cfg, start, func(txns []*event.Txn) bool {
		last := txns[len(txns)-1]
		return len(last.Events) == 1 && last.Events[0].Type == "last"
	})
	var withChanges []*event.Txn
	for _, txn := range txns {
		if len(txn.Changes) > 0 {
			withChanges = append(withChanges, txn)
		}
		for _, c := range txn.Changes {
			if c.Table != dbname+".hooks" {
				t.Errorf("a change of table %s, want only %s.hooks", c.Table, dbname)
			}
		}
	}
	if len(withChanges) != 4 {
		t.Fatalf("%d transactions with changes, want 4", len(withChanges))
	}

	first := withChanges[0]
	if len(first.Events) != 1 || first.Events[0].Type != "created" {
		t.Errorf("the first transaction's events = %v, want the outbox row committed with the changes", first.Events)
	}
	if got := ops(first.Changes); got != "insert,update" {
		t.Fatalf("first transaction ops %s, want insert,update", got)
	}
	wantInsert := map[string]any{
		"id": "a", "url": "https://a.example/", "n": int64(-7), "tiny": int64(1),
		"u": uint64(18446744073709551615), "m": int64(16777215), "f": 2.5, "fl": 1.1, "dec2": "12345678.90",
		"dt": "2024-05-06 07:08:09.000450", "d": "2024-05-06", "tm": "-01:02:03", "y": "2024",
		"e": "green", "s": "x,z", "j": `{"k": [1, 2]}`, "b": "\x00\xff", "txt": "some text", "bits": int64(5),
	}
	if !reflect.DeepEqual(first.Changes[0].Row, wantInsert) {
		t.Errorf("insert row\n got %#v\nwant %#v", first.Changes[0].Row, wantInsert)
	}
	wantUpdate := clone(wantInsert)
	wantUpdate["url"], wantUpdate["n"] = "https://a2.example/", nil
	if !reflect.DeepEqual(first.Changes[1].Row, wantUpdate) {
		t.Errorf("update row (the after image)\n got %#v\nwant %#v", first.Changes[1].Row, wantUpdate)
	}
	if !reflect.DeepEqual(first.Changes[1].Before, wantInsert) || first.Changes[0].Before != nil {
		t.Errorf("update's before image\n got %#v\nwant %#v (and none for the insert: %#v)", first.Changes[1].Before, wantInsert, first.Changes[0].Before)
	}

	if got := ops(withChanges[1].Changes); got != "insert,insert" || len(withChanges[1].Events) != 0 {
		t.Errorf("the multi-row insert: ops %s, %d events; want insert,insert and none", got, len(withChanges[1].Events))
	}
	upd := withChanges[2].Changes
	if ops(upd) != "update,update" || upd[0].Row["id"] != "b" || upd[1].Row["id"] != "c" ||
		upd[0].Row["tiny"] != int64(0) || upd[0].Row["u"] != int64(5) || upd[1].Row["u"] != nil ||
		upd[0].Before["id"] != "b" || upd[0].Before["tiny"] == int64(0) || upd[1].Before["id"] != "c" {
		t.Errorf("the two-row update: %v", upd)
	}
	del := withChanges[3].Changes
	if ops(del) != "delete" || !reflect.DeepEqual(del[0].Row, wantUpdate) || del[0].Before != nil {
		t.Errorf("the delete: %v, want one delete with the row's before image %v", del, wantUpdate)
	}

	// Positions: each transaction's own, strictly increasing; resuming
	// after the first transaction with changes starts at the next one.
	for i := 1; i < len(withChanges); i++ {
		if withChanges[i].Position.Pos <= withChanges[i-1].Position.Pos && withChanges[i].Position.File == withChanges[i-1].Position.File {
			t.Errorf("position %d (%s) is not after %d (%s)", i, withChanges[i].Position, i-1, withChanges[i-1].Position)
		}
	}
	rest := collectTxns(t, cfg, first.Position, func(txns []*event.Txn) bool {
		for _, x := range txns {
			if len(x.Changes) > 0 {
				return true
			}
		}
		return false
	})
	var next *event.Txn
	for _, x := range rest {
		if len(x.Changes) > 0 {
			next = x
		}
	}
	if next.Position != withChanges[1].Position || ops(next.Changes) != "insert,insert" {
		t.Errorf("resumed after the first: next changes %s at %s, want insert,insert at %s", ops(next.Changes), next.Position, withChanges[1].Position)
	}
}

// Without Watch, rows of other tables are not decoded and Changes stays empty.
func TestNoChangesWithoutWatch(t *testing.T) {
	_, db, cfg := setup(t)
	if _, err := db.Exec(watchedDDL); err != nil {
		t.Fatal(err)
	}
	start := serverPosition(t, db, false)
	for _, q := range []string{
		`INSERT INTO hooks (id, url) VALUES ('a', 'https://a.example/')`,
		`INSERT INTO outbox VALUES (UNHEX('00112233445566778899AABBCCDDEE01'), 'order', 'o1', 'last', '{}', NULL)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	txns := collectTxns(t, cfg, start, func(txns []*event.Txn) bool { return len(txns[len(txns)-1].Events) > 0 })
	for _, x := range txns {
		if len(x.Changes) != 0 {
			t.Fatalf("changes %v with no watched table", x.Changes)
		}
	}
}

// A watched table's rows written without column names in the binlog
// (binlog_row_metadata other than FULL) stop the reader with the fix.
func TestWatchedTableWithoutFullMetadataNamesTheFix(t *testing.T) {
	dbname, db, cfg := setup(t)
	if _, err := db.Exec(watchedDDL); err != nil {
		t.Fatal(err)
	}
	cfg.Watch = []canal.Watched{{Schema: dbname, Name: "hooks"}}
	start := serverPosition(t, db, false)
	srv.Exec(t, "SET GLOBAL binlog_row_metadata = 'MINIMAL'")
	func() {
		defer srv.Exec(t, "SET GLOBAL binlog_row_metadata = 'FULL'")
		if _, err := srv.DB(t, dbname).Exec(`INSERT INTO hooks (id, url) VALUES ('a', 'https://a.example/')`); err != nil {
			t.Fatal(err)
		}
	}()
	r, err := canal.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = r.Run(ctx, start, func(context.Context, *event.Txn) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "binlog_row_metadata=FULL") || !strings.Contains(err.Error(), dbname+".hooks") {
		t.Fatalf("Run = %v, want an error naming %s.hooks and binlog_row_metadata=FULL", err, dbname)
	}
}

func TestNewRejectsABadWatchList(t *testing.T) {
	base := canal.Config{ServerID: 9, Flavor: "mariadb", Tables: []canal.Table{{Schema: "s", Name: "outbox",
		Columns: canal.Columns{ID: "id", AggregateID: "a", Payload: "p"}}}}
	for _, tc := range []struct {
		name  string
		watch []canal.Watched
		want  string
	}{
		{"an outbox table cannot be watched", []canal.Watched{{Schema: "s", Name: "outbox"}}, "both an outbox table and a watched table"},
		{"a table watched twice", []canal.Watched{{Schema: "s", Name: "h"}, {Schema: "s", Name: "h"}}, "watched twice"},
		{"a table without schema", []canal.Watched{{Name: "h"}}, "give both its schema and its name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			cfg.Watch = tc.watch
			if _, err := canal.New(cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func ops(cs []event.Change) string {
	var s []string
	for _, c := range cs {
		s = append(s, c.Op.String())
	}
	return strings.Join(s, ",")
}

func clone(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// A watched table's changes in an XA transaction are handed on at its XA
// COMMIT, with the outbox rows of it, and never after XA ROLLBACK.
func TestWatchedChangesOfXATransactionsAtCommitOnly(t *testing.T) {
	dbname, db, cfg := setup(t)
	if _, err := db.Exec(watchedDDL); err != nil {
		t.Fatal(err)
	}
	cfg.Watch = []canal.Watched{{Schema: dbname, Name: "hooks"}}
	start := serverPosition(t, db, false)
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{
		"XA START 'w'", "INSERT INTO hooks (id, url) VALUES ('x', 'https://x.example/')",
		"INSERT INTO outbox VALUES (UNHEX('000000000000000000000000000000A1'), 'order', 'o', 'xa', '{}', NULL)",
		"XA END 'w'", "XA PREPARE 'w'",
		"other: INSERT INTO outbox VALUES (UNHEX('000000000000000000000000000000A2'), 'order', 'o', 'mid', '{}', NULL)",
		"XA COMMIT 'w'",
		"XA START 'r'", "INSERT INTO hooks (id, url) VALUES ('r', 'https://r.example/')", "XA END 'r'", "XA PREPARE 'r'", "XA ROLLBACK 'r'",
		"INSERT INTO outbox VALUES (UNHEX('000000000000000000000000000000A3'), 'order', 'o', 'last', '{}', NULL)",
	} {
		var err error
		if other, ok := strings.CutPrefix(q, "other: "); ok {
			_, err = db.ExecContext(ctx, other) // committed while 'w' is prepared
		} else {
			_, err = conn.ExecContext(ctx, q)
		}
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	txns := collectTxns(t, cfg, start, func(txns []*event.Txn) bool {
		last := txns[len(txns)-1]
		return len(last.Events) == 1 && last.Events[0].Type == "last"
	})
	var got []string
	for _, x := range txns {
		for _, e := range x.Events {
			got = append(got, e.Type)
		}
		for _, c := range x.Changes {
			got = append(got, c.Op.String()+":"+c.Row["id"].(string))
		}
	}
	if s := strings.Join(got, ","); s != "mid,xa,insert:x,last" {
		t.Fatalf("handed on %s, want mid,xa,insert:x,last (x at its XA COMMIT with its outbox row; r rolled back)", s)
	}
}
