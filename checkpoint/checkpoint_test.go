package checkpoint_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
)

// cp is checkpoint n; even ones have a commit time, odd ones do not (as
// saved by an earlier version, or before the first transaction).
func cp(n int) checkpoint.Checkpoint {
	c := checkpoint.Checkpoint{Flavor: "mariadb", ServerID: 1,
		Position:  event.Position{GTIDSet: fmt.Sprintf("0-1-%d", n), File: "binlog.000001", Pos: uint32(n), ServerID: 1},
		UpdatedAt: time.Unix(int64(n), 0).UTC()}
	if n%2 == 0 {
		c.CommitTime = time.Unix(int64(n)-1, 0).UTC()
	}
	return c
}

func TestFileStoreRoundTripAndReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "cp.json")
	st, err := checkpoint.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := st.Load(ctx, "a"); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Fatalf("Load of a new store = %v, want ErrNotFound", err)
	}
	if err := st.Save(ctx, "a", cp(1)); err != nil {
		t.Fatal(err)
	}
	if err := st.Save(ctx, "b", cp(2)); err != nil {
		t.Fatal(err)
	}
	st2, err := checkpoint.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]checkpoint.Checkpoint{"a": cp(1), "b": cp(2)} {
		got, err := st2.Load(ctx, k)
		if err != nil || got != want {
			t.Fatalf("reopened %s = %+v, %v; want %+v", k, got, err, want)
		}
	}
}

func TestFileStoreRefusesACorruptFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cp.json")
	os.WriteFile(path, []byte(`{"version":1,"checkpoints":{"a":`), 0o644)
	if _, err := checkpoint.OpenFile(path); err == nil {
		t.Fatal("a torn file was accepted")
	}
}

// A file that does not decode is refused with what is wrong and where (the
// sink's key and the field, with the shape it must have), and advice that
// loses no event: never to move the file away and start from
// checkpoint.start.
func TestFileStoreErrorsSayWhatIsWrongAndLoseNothing(t *testing.T) {
	const head = `{"version": 1, "checkpoints": {"out": {"flavor": "mariadb", "position": {"gtid_set": "0-1-4"}, "updated_at": "2026-12-01T00:00:00Z"`
	for _, tc := range []struct {
		name, doc string
		want      []string
	}{
		{"a torn file", `{"version":1,"checkpoints":{"a":`,
			[]string{"not valid JSON", "at byte 32", "restore the file from a backup", "Do not remove it, or move it away, alone", "checkpoint.start to gtid:<the oldest of the sinks' positions>", "skips nothing"}},
		{"acked is a string", head + `, "acked": "e1"}}}`,
			[]string{`holds checkpoint "out" of the wrong shape: field acked is a JSON string`, `where it must be {"events": {"<GTID of a transaction>": ["<event id>", ...]}, "read_through": "<GTID>"}`,
				`removing the "acked" field of checkpoint "out" alone is safe`, "none is skipped"}},
		{"acked events is a list", head + `, "acked": {"events": ["e1"]}}}}`,
			[]string{`checkpoint "out" of the wrong shape: field acked.events is a JSON array`, `where it must be {"<GTID of a transaction>": ["<event id>", ...]}`}},
		{"a transaction's ids are a string", head + `, "acked": {"events": {"0-1-5": "e1"}}}}}`,
			[]string{`field acked.events is a JSON string`, "a list of event ids under each transaction's GTID"}},
		{"an id is a number", head + `, "acked": {"events": {"0-1-5": [7]}}}}}`,
			[]string{`field acked.events is a JSON number`, "a list of event ids, each a string"}},
		{"the position is a string", `{"version": 1, "checkpoints": {"out": {"position": "0-1-4"}}}`,
			[]string{`checkpoint "out" of the wrong shape: field position is a JSON string`, `{"gtid_set": "<GTID set>"`, "restore the file from a backup"}},
		{"checkpoints is a list", `{"version": 1, "checkpoints": []}`,
			[]string{"is not a checkpoint file: field checkpoints is a JSON array", "an object of checkpoints by sink"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cp.json")
			if err := os.WriteFile(path, []byte(tc.doc), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := checkpoint.OpenFile(path)
			if err == nil {
				t.Fatal("the file was accepted")
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q:\n%v", want, err)
				}
			}
			if tc.name != "a torn file" && strings.Contains(err.Error(), "not valid JSON") {
				t.Errorf("valid JSON of the wrong shape is reported as invalid JSON: %v", err)
			}
			if strings.Contains(err.Error(), "move it away to start") {
				t.Errorf("the advice skips every sink's events since its checkpoint: %v", err)
			}
			if b, _ := os.ReadFile(path); string(b) != tc.doc {
				t.Error("the refused file was changed")
			}
		})
	}
}

// A process saving checkpoints in a loop is SIGKILLed at many moments; the
// file left behind always parses and holds one of the saved checkpoints.
func TestFileStoreSurvivesSIGKILLDuringSave(t *testing.T) {
	if os.Getenv("CHECKPOINT_SAVER") != "" {
		saver(os.Getenv("CHECKPOINT_SAVER"))
		return
	}
	path := filepath.Join(t.TempDir(), "cp.json")
	last := 0
	for round := range 20 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestFileStoreSurvivesSIGKILLDuringSave$")
		cmd.Env = append(os.Environ(), "CHECKPOINT_SAVER="+path)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 1)
		out.Read(buf) // the saver is running
		time.Sleep(time.Duration(1+round%7) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		st, err := checkpoint.OpenFile(path)
		if err != nil {
			t.Fatalf("round %d: after SIGKILL the checkpoint file is unreadable: %v", round, err)
		}
		got, err := st.Load(context.Background(), "sink")
		if err != nil && !errors.Is(err, checkpoint.ErrNotFound) {
			t.Fatal(err)
		}
		n := int(got.Position.Pos)
		if err == nil && got != cp(n) {
			t.Fatalf("round %d: checkpoint %+v is not one that was saved", round, got)
		}
		if n < last {
			t.Fatalf("round %d: checkpoint went back from %d to %d", round, last, n)
		}
		last = n
	}
	if last == 0 {
		t.Fatal("no save completed in any round")
	}
}

func saver(path string) {
	st, err := checkpoint.OpenFile(path)
	if err != nil {
		os.Exit(3)
	}
	start := 0
	if c, err := st.Load(context.Background(), "sink"); err == nil {
		start = int(c.Position.Pos)
	}
	os.Stdout.Write([]byte("x"))
	for n := start + 1; ; n++ {
		if err := st.Save(context.Background(), "sink", cp(n)); err != nil {
			os.Stderr.WriteString(err.Error())
			os.Exit(4)
		}
	}
}

// The store works on a caller's *sql.DB whatever its DSN options: with
// parseTime (DATETIME as time.Time) and without (DATETIME as text).
func TestMySQLStore(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{NoBinlog: true})
	name := srv.NewDatabase(t)
	plain, err := sql.Open("mysql", strings.Replace(srv.DSN(name), "&parseTime=true", "", 1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { plain.Close() })
	for _, tc := range []struct {
		name string
		db   *sql.DB
	}{{"a DSN with parseTime", srv.DB(t, name)}, {"a DSN without parseTime", plain}} {
		t.Run(tc.name, func(t *testing.T) {
			db := tc.db
			ctx := context.Background()
			st, err := checkpoint.OpenMySQL(ctx, db, "cp_"+strings.ReplaceAll(tc.name, " ", "_"), nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.Load(ctx, "a"); !errors.Is(err, checkpoint.ErrNotFound) {
				t.Fatalf("Load = %v", err)
			}
			for _, n := range []int{1, 2} {
				if err := st.Save(ctx, "a", cp(n)); err != nil {
					t.Fatal(err)
				}
			}
			got, err := st.Load(ctx, "a")
			if err != nil || got != cp(2) {
				t.Fatalf("Load = %+v, %v; want %+v", got, err, cp(2))
			}
			if _, err := checkpoint.OpenMySQL(ctx, db, "bad name; DROP", nil); err == nil {
				t.Fatal("an unsafe table name was accepted")
			}
		})
	}
}

// A checkpoint table of a version without commit_time is read as it is by a
// read-only store, and gains the column when opened for writing.
func TestMySQLStoreUpgradesATableWithoutCommitTime(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{NoBinlog: true})
	db := srv.DB(t, srv.NewDatabase(t))
	ctx := context.Background()
	if _, err := db.Exec("CREATE TABLE cp_v1 (name VARCHAR(255) NOT NULL PRIMARY KEY, flavor VARCHAR(16) NOT NULL, " +
		"server_uuid VARCHAR(64) NOT NULL DEFAULT '', server_id INT UNSIGNED NOT NULL DEFAULT 0, gtid_set TEXT NOT NULL, " +
		"binlog_file VARCHAR(512) NOT NULL DEFAULT '', binlog_pos INT UNSIGNED NOT NULL DEFAULT 0, updated_at DATETIME(6) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO cp_v1 VALUES ('a', 'mariadb', '', 1, '0-1-1', 'binlog.000001', 1, FROM_UNIXTIME(1))"); err != nil {
		t.Fatal(err)
	}
	ro, err := checkpoint.OpenMySQLReadOnly(db, "cp_v1")
	if err != nil {
		t.Fatal(err)
	}
	v1 := cp(1).Position
	v1.ServerID = 0 // no binlog_server_id: whose binlog it is, is unknown
	if got, err := ro.Load(ctx, "a"); err != nil || got.Position != v1 || !got.CommitTime.IsZero() {
		t.Fatalf("read-only Load of a v1 table = %+v, %v", got, err)
	}
	st, err := checkpoint.OpenMySQL(ctx, db, "cp_v1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Save(ctx, "a", cp(4)); err != nil {
		t.Fatal(err)
	}
	if got, err := ro.Load(ctx, "a"); err != nil || got != cp(4) {
		t.Fatalf("Load after the upgrade = %+v, %v; want %+v", got, err, cp(4))
	}
	if _, err := checkpoint.OpenMySQL(ctx, db, "cp_v1", nil); err != nil {
		t.Fatalf("reopening an upgraded table: %v", err)
	}
}

// Relays whose checkpoint tables have one name in two databases of one
// server are not each other's standby: each takes its own lock at once
// (GET_LOCK names are server-wide), and each is fenced only by its own.
func TestMySQLStoresInTwoDatabasesLockApart(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{NoBinlog: true})
	ctx := context.Background()
	var released []func()
	defer func() {
		for _, r := range released {
			r()
		}
	}()
	for i := range 2 {
		name := srv.NewDatabase(t)
		db := srv.DB(t, name)
		s, err := checkpoint.OpenMySQL(ctx, db, "outbox_relay_checkpoints", nil)
		if err != nil {
			t.Fatal(err)
		}
		lctx, cancel := context.WithTimeout(ctx, time.Minute)
		release, _, err := s.Lock(lctx)
		cancel()
		if err != nil {
			t.Fatalf("relay %d: %v (it waited for the other database's relay)", i, err)
		}
		released = append(released, release)
		if s.LockWaited() {
			t.Fatalf("relay %d waited for the lock of another database's relay", i)
		}
		if held, err := checkpoint.MySQLLockHeld(ctx, db, "outbox_relay_checkpoints"); err != nil || !held {
			t.Fatalf("relay %d: MySQLLockHeld = %v, %v; want held", i, held, err)
		}
	}
	// A long name stays unique: the server's 64 characters end in a hash.
	a := checkpoint.MySQLLockName(strings.Repeat("d", 60)+"1", "outbox_relay_checkpoints")
	b := checkpoint.MySQLLockName(strings.Repeat("d", 60)+"2", "outbox_relay_checkpoints")
	if a == b || len(a) > 64 || len(b) > 64 {
		t.Errorf("long lock names %q and %q: want distinct, at most 64 characters", a, b)
	}
}

// Two relays on one MySQL store: when the second takes the lock (here: the
// first's lock connection is killed), the first's saves fail with ErrFenced,
// in the save's own transaction, and so does its Fence; the second saves.
// The checkpoint table of an earlier version (no fencing table) is used as
// it is.
func TestMySQLStoreFencesTheOldHolder(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{NoBinlog: true})
	name := srv.NewDatabase(t)
	db := srv.DB(t, name)
	ctx := context.Background()
	// A table as earlier versions created it, with a saved row.
	if _, err := db.Exec("CREATE TABLE `cp_old` (name VARCHAR(255) NOT NULL PRIMARY KEY, flavor VARCHAR(16) NOT NULL," +
		"server_uuid VARCHAR(64) NOT NULL DEFAULT '', server_id INT UNSIGNED NOT NULL DEFAULT 0, gtid_set TEXT NOT NULL," +
		"binlog_file VARCHAR(512) NOT NULL DEFAULT '', binlog_pos INT UNSIGNED NOT NULL DEFAULT 0, updated_at DATETIME(6) NOT NULL) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	old, err := checkpoint.OpenMySQL(ctx, db, "cp_old", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Save(ctx, "a", cp(1)); err != nil { // unlocked: unfenced, as before
		t.Fatal(err)
	}
	a, err := checkpoint.OpenMySQL(ctx, db, "cp_old", nil)
	if err != nil {
		t.Fatal(err)
	}
	a.LockTimeout = 2 * time.Second
	releaseA, lostA, err := a.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer releaseA()
	if a.LockWaited() || a.Epoch() == 0 {
		t.Fatalf("first lock: waited %v, epoch %d", a.LockWaited(), a.Epoch())
	}
	if got, err := a.Load(ctx, "a"); err != nil || got != cp(1) {
		t.Fatalf("the earlier version's checkpoint: %+v, %v", got, err)
	}
	if err := a.Fence(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Save(ctx, "a", cp(2)); err != nil {
		t.Fatal(err)
	}
	b, err := checkpoint.OpenMySQL(ctx, db, "cp_old", nil)
	if err != nil {
		t.Fatal(err)
	}
	type locked struct {
		release func()
		err     error
	}
	bLocked := make(chan locked, 1)
	go func() {
		release, _, err := b.Lock(ctx)
		bLocked <- locked{release, err}
	}()
	var holder int64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var waiting int
		db.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'SELECT GET_LOCK%'").Scan(&waiting)
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second store never waited for the lock")
		}
	}
	if err := db.QueryRow("SELECT IS_USED_LOCK(?)", checkpoint.MySQLLockName(name, "cp_old")).Scan(&holder); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(fmt.Sprintf("KILL %d", holder)); err != nil {
		t.Fatal(err)
	}
	l := <-bLocked
	if l.err != nil {
		t.Fatal(l.err)
	}
	defer l.release()
	if !b.LockWaited() || b.Epoch() != a.Epoch()+1 {
		t.Fatalf("takeover: waited %v, epoch %d after %d", b.LockWaited(), b.Epoch(), a.Epoch())
	}
	// A has not noticed yet, or has: either way its save is refused.
	if err := a.Save(ctx, "a", cp(1)); !errors.Is(err, checkpoint.ErrFenced) {
		t.Fatalf("the old holder's save = %v, want ErrFenced", err)
	}
	if err := b.Save(ctx, "a", cp(3)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lostA:
	case <-time.After(10 * time.Second):
		t.Fatal("the old holder never noticed its lost lock")
	}
	if err := a.Fence(ctx); !errors.Is(err, checkpoint.ErrFenced) {
		t.Fatalf("the old holder's Fence = %v, want ErrFenced", err)
	}
	if err := a.Save(ctx, "a", cp(9)); !errors.Is(err, checkpoint.ErrFenced) {
		t.Fatalf("the old holder's later save = %v, want ErrFenced", err)
	}
	if got, err := b.Load(ctx, "a"); err != nil || got != cp(3) {
		t.Fatalf("checkpoint = %+v, %v; want the new holder's %+v", got, err, cp(3))
	}
}

// A relay frozen in the middle of a save holds the fencing row until the
// server drops its connection; OpenDB bounds that with the connections'
// wait_timeout (unless the DSN sets one), so a standby is not kept waiting
// for hours, and a standby that takes the lock meanwhile waits for the row
// instead of failing.
func TestOpenDBBoundsAFrozenSavesLocks(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{NoBinlog: true})
	name := srv.NewDatabase(t)
	dsn := strings.Replace(srv.DSN(name), "&parseTime=true", "", 1)
	db, err := checkpoint.OpenDB(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var wt int
	if err := db.QueryRow("SELECT @@SESSION.wait_timeout").Scan(&wt); err != nil || wt != 30 {
		t.Fatalf("wait_timeout = %d, %v; want 30 on the store's connections", wt, err)
	}
	own, err := checkpoint.OpenDB(dsn + "&wait_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	if err := own.QueryRow("SELECT @@SESSION.wait_timeout").Scan(&wt); err != nil || wt != 2 {
		t.Fatalf("wait_timeout = %d, %v; want the DSN's 2", wt, err)
	}
	// A frozen save: a transaction holding the fencing row, on a connection
	// the server drops after 2 s of silence.
	st, err := checkpoint.OpenMySQL(context.Background(), db, "cp", nil)
	if err != nil {
		t.Fatal(err)
	}
	unlock, _, err := st.Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	unlock()
	frozen, err := own.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer frozen.Close()
	tx, err := frozen.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var epoch uint64
	if err := tx.QueryRow("SELECT epoch FROM " + checkpoint.FenceTable + " WHERE name = 'cp' FOR UPDATE").Scan(&epoch); err != nil {
		t.Fatal(err)
	}
	// The next holder bumps the epoch once the server has dropped it.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	unlock, _, err = st.Lock(ctx)
	if err != nil {
		t.Fatalf("the lock could not be taken while a dropped connection held the fencing row: %v", err)
	}
	defer unlock()
	if got := st.Epoch(); got != epoch+1 {
		t.Fatalf("epoch %d, want %d", got, epoch+1)
	}
}

// Keys compare as bytes: ids that a collation would take for one
// (case, accents, trailing spaces) are rows of their own, and saving or
// deleting one never touches another.
func TestMySQLStoreKeysCompareAsBytes(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{NoBinlog: true})
	db := srv.DB(t, srv.NewDatabase(t))
	ctx := context.Background()
	st, err := checkpoint.OpenMySQL(ctx, db, "cp", nil)
	if err != nil {
		t.Fatal(err)
	}
	checkKeysCompareAsBytes(t, st)
}

// lookalikes are keys a case- and accent-insensitive, PAD SPACE collation
// takes for "wh/billing".
var lookalikes = []string{"wh/BILLING", "wh/billing ", "wh/bíllíng", "wh/Billing  "}

// checkKeysCompareAsBytes saves "wh/billing" and its lookalikes, then
// deletes the lookalikes: "wh/billing" keeps its own checkpoint throughout.
func checkKeysCompareAsBytes(t *testing.T, st *checkpoint.MySQL) {
	t.Helper()
	ctx := context.Background()
	before, err := st.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Save(ctx, "wh/billing", cp(2)); err != nil {
		t.Fatal(err)
	}
	for i, k := range lookalikes {
		if err := st.Save(ctx, k, cp(10+i)); err != nil {
			t.Fatalf("save %q: %v", k, err)
		}
	}
	all, err := st.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := len(before) + 1 + len(lookalikes); len(all) != want || all["wh/billing"] != cp(2) {
		t.Fatalf("after saving the lookalikes, the store lists %d keys, wh/billing = %+v; want %d keys, wh/billing = %+v", len(all), all["wh/billing"], want, cp(2))
	}
	for i, k := range lookalikes {
		if got, err := st.Load(ctx, k); err != nil || got != cp(10+i) {
			t.Fatalf("Load(%q) = %+v, %v; want %+v", k, got, err, cp(10+i))
		}
		if err := st.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := st.Load(ctx, "wh/billing"); err != nil || got != cp(2) {
		t.Fatalf("after deleting the lookalikes, Load(wh/billing) = %+v, %v; want %+v", got, err, cp(2))
	}
}

// A table whose name column is a character column (every version before
// keys compared as bytes) is altered on open, with one log line saying so;
// its rows stay, and opening it again alters and logs nothing.
func TestMySQLStoreMigratesACollatedKeyColumnOnce(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{NoBinlog: true})
	db := srv.DB(t, srv.NewDatabase(t))
	ctx := context.Background()
	if _, err := db.Exec("CREATE TABLE cp (name VARCHAR(255) NOT NULL PRIMARY KEY, flavor VARCHAR(16) NOT NULL, " +
		"server_uuid VARCHAR(64) NOT NULL DEFAULT '', server_id INT UNSIGNED NOT NULL DEFAULT 0, gtid_set TEXT NOT NULL, " +
		"binlog_file VARCHAR(512) NOT NULL DEFAULT '', binlog_pos INT UNSIGNED NOT NULL DEFAULT 0, updated_at DATETIME(6) NOT NULL, " +
		"commit_time DATETIME(6) NULL, disabled VARCHAR(1024) NOT NULL DEFAULT '', acked MEDIUMTEXT NULL) DEFAULT CHARSET=utf8mb4"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO cp (name, flavor, server_id, gtid_set, binlog_file, binlog_pos, updated_at) VALUES ('wh/other', 'mariadb', 1, '0-1-1', 'binlog.000001', 1, FROM_UNIXTIME(1))"); err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	var st *checkpoint.MySQL
	for range 2 {
		var err error
		if st, err = checkpoint.OpenMySQL(ctx, db, "cp", log); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(logs.String(), "checkpoint table upgraded"); n != 1 {
		t.Fatalf("opening an old table twice logged %d upgrade lines, want 1:\n%s", n, logs.String())
	}
	var typ string
	if err := db.QueryRow("SELECT DATA_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'cp' AND COLUMN_NAME = 'name'").Scan(&typ); err != nil || typ != "varbinary" {
		t.Fatalf("name column is %q (%v) after the upgrade, want varbinary", typ, err)
	}
	want := cp(1).Position
	want.ServerID = 0 // the old table has no binlog_server_id: read as unknown
	if got, err := st.Load(ctx, "wh/other"); err != nil || got.Position != want {
		t.Fatalf("a row of the old table after the upgrade: %+v, %v", got, err)
	}
	checkKeysCompareAsBytes(t, st)
}

// A record of the relay's own (a replay job's, under a reserved key) is
// kept as it was saved by both stores, beside the sinks' checkpoints, which
// carry none; Reserved tells its key from a sink's or an endpoint's.
func TestStoresKeepRecordsUnderReservedKeys(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{NoBinlog: true})
	db := srv.DB(t, srv.NewDatabase(t))
	ctx := context.Background()
	my, err := checkpoint.OpenMySQL(ctx, db, "cp", nil)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "cp.json")
	file, err := checkpoint.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rec := checkpoint.Checkpoint{Record: `{"id":"j1","state":"running","note":"é \"quoted\""}`, UpdatedAt: time.Unix(7, 0).UTC()}
	for name, st := range map[string]interface {
		checkpoint.Store
		checkpoint.Lister
	}{"mysql": my, "file": file} {
		t.Run(name, func(t *testing.T) {
			if err := st.Save(ctx, "/replay/j1", rec); err != nil {
				t.Fatal(err)
			}
			if err := st.Save(ctx, "out", cp(3)); err != nil {
				t.Fatal(err)
			}
			all, err := st.List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if all["/replay/j1"] != rec || all["out"] != cp(3) {
				t.Fatalf("List = %+v; want the record %+v and the sink's checkpoint %+v", all, rec, cp(3))
			}
			if !checkpoint.Reserved("/replay/j1") || checkpoint.Reserved("out") || checkpoint.Reserved("hooks/a") {
				t.Fatal("Reserved does not tell the relay's records from sinks' and endpoints' keys")
			}
		})
	}
	reopened, err := checkpoint.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := reopened.Load(ctx, "/replay/j1"); err != nil || got != rec {
		t.Fatalf("the file reopened holds %+v, %v; want %+v", got, err, rec)
	}
}
