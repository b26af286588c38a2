package mysqlprimary

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// goldenTable and goldenDoc are the table and row captured from Dolt in
// testdata/dolt-outbox.events and rebuilt by the scripted primary.
var goldenTable = Table{Schema: "app", Name: "outbox", PrimaryKey: []int{0}, Columns: []Column{
	{Name: "seq", Type: BigInt},
	{Name: "id", Type: Varchar, Length: 64},
	{Name: "aggregatetype", Type: Varchar, Length: 64},
	{Name: "aggregateid", Type: Varchar, Length: 64},
	{Name: "type", Type: Varchar, Length: 64},
	{Name: "payload", Type: JSONType},
}}

const goldenDoc = `{"total": 10, "items": [1, 2.5, "x", null, true], "customer": {"name": "Zoë", "vip": false}, "a": -3}`

const goldenSQL = `CREATE TABLE outbox (
  seq BIGINT NOT NULL PRIMARY KEY,
  id VARCHAR(64) NOT NULL,
  aggregatetype VARCHAR(64) NOT NULL,
  aggregateid VARCHAR(64) NOT NULL,
  type VARCHAR(64) NOT NULL,
  payload JSON NOT NULL
)`

func goldenRow() []any { return []any{int64(1), "e1", "order", "o1", "created", JSON(goldenDoc)} }

// TestCaptureDoltGolden rewrites testdata/dolt-outbox.events from a Dolt
// binlog primary. It runs only with MYSQLPRIMARY_CAPTURE_DOLT set to the dolt
// binary: go test -run TestCaptureDoltGolden ./internal/mysqlprimary/
func TestCaptureDoltGolden(t *testing.T) {
	dolt := os.Getenv("MYSQLPRIMARY_CAPTURE_DOLT")
	if dolt == "" {
		t.Skip("set MYSQLPRIMARY_CAPTURE_DOLT to a dolt binary to recapture the golden stream")
	}
	home := t.TempDir()
	dir := filepath.Join(home, "app")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) {
		cmd := exec.Command(dolt, args...)
		cmd.Dir, cmd.Env = dir, append(os.Environ(), "HOME="+home)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("dolt %v: %v\n%s", args, err, out)
		}
	}
	run("config", "--global", "--add", "user.name", "capture")
	run("config", "--global", "--add", "user.email", "capture@example.com")
	run("init")
	run("sql", "-q", "SET @@PERSIST.log_bin=1; SET @@PERSIST.gtid_mode='ON'; SET @@PERSIST.enforce_gtid_consistency='ON'; SET @@PERSIST.server_id=1; SET @@PERSIST.binlog_row_metadata='FULL';")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	srv := exec.Command(dolt, "sql-server", "--host", "127.0.0.1", "--port", fmt.Sprint(port))
	srv.Dir, srv.Env = dir, append(os.Environ(), "HOME="+home)
	srv.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-srv.Process.Pid, syscall.SIGKILL); _ = srv.Wait() })

	db, err := sql.Open("mysql", fmt.Sprintf("root@tcp(127.0.0.1:%d)/app", port))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for deadline := time.Now().Add(60 * time.Second); db.Ping() != nil; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("dolt sql-server did not start")
		}
	}
	if _, err := db.Exec(goldenSQL); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO outbox VALUES (1, 'e1', 'order', 'o1', 'created', ?)", goldenDoc); err != nil {
		t.Fatal(err)
	}

	sy := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{ServerID: 99, Flavor: "mysql", Host: "127.0.0.1", Port: uint16(port), User: "root"})
	defer sy.Close()
	st, err := sy.StartSyncGTID(mustGTIDSet(""))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Keep FORMAT_DESCRIPTION and PREVIOUS_GTIDS, then the transaction with
	// the outbox row: its GTID event through its XID.
	var keep, txn [][]byte
	for {
		ev, err := st.GetEvent(ctx)
		if err != nil {
			t.Fatal(err)
		}
		raw := append([]byte(nil), ev.RawData...)
		switch ev.Header.EventType {
		case replication.FORMAT_DESCRIPTION_EVENT, replication.PREVIOUS_GTIDS_EVENT:
			keep = append(keep, raw)
		case replication.GTID_EVENT:
			txn = [][]byte{raw}
		default:
			txn = append(txn, raw)
		}
		if r, ok := ev.Event.(*replication.RowsEvent); ok && string(r.Table.Table) != "outbox" {
			txn = nil
		}
		if _, ok := ev.Event.(*replication.XIDEvent); ok && len(txn) > 3 {
			break
		}
	}
	var out []byte
	for _, e := range append(keep, txn...) {
		out = append(out, e...)
	}
	if err := os.WriteFile("testdata/dolt-outbox.events", out, 0o644); err != nil {
		t.Fatal(err)
	}
	_ = gomysql.MySQLFlavor
	t.Logf("wrote %d bytes", len(out))
}
