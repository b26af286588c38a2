package checkpoint_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
)

// withAcked is checkpoint n listing events acknowledged beyond it.
func withAcked(n int) checkpoint.Checkpoint {
	c := cp(n)
	c.Acked = &checkpoint.Acked{Events: map[string][]string{"0-1-9": {"e9a", "e9b"}, "0-1-12": {"e12"}}, ReadThrough: "0-1-13"}
	return c
}

// The list of events acknowledged beyond the position is saved and loaded
// by the file store, and a file written before the list existed loads
// without one.
func TestFileStoreKeepsTheAcknowledgedList(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cp.json")
	old := `{"version": 1, "checkpoints": {"old": {"flavor": "mariadb", "position": {"gtid_set": "0-1-3"}, "updated_at": "2025-01-01T00:00:00Z"}}}`
	if err := os.WriteFile(path, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := checkpoint.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if got, err := st.Load(ctx, "old"); err != nil || got.Acked != nil || got.Position.GTIDSet != "0-1-3" {
		t.Fatalf("a checkpoint without the list = %+v, %v", got, err)
	}
	if err := st.Save(ctx, "a", withAcked(8)); err != nil {
		t.Fatal(err)
	}
	if err := st.SaveMany(ctx, map[string]checkpoint.Checkpoint{"b": withAcked(10)}); err != nil {
		t.Fatal(err)
	}
	st2, err := checkpoint.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]checkpoint.Checkpoint{"a": withAcked(8), "b": withAcked(10)} {
		if got, err := st2.Load(ctx, k); err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("reopened %s = %+v (%+v), %v; want %+v", k, got, got.Acked, err, want)
		}
	}
	if !withAcked(8).Acked.Contains("0-1-9", "e9b") || withAcked(8).Acked.Contains("0-1-12", "e9b") || withAcked(8).Acked.Len() != 3 {
		t.Fatal("Contains or Len is wrong")
	}
}

// A checkpoint table of 0.4 (no acked column) is read as it is by a
// read-only store and gains the column when opened for writing; the list
// is saved and loaded by Save and SaveMany, and a save without one clears
// it.
func TestMySQLStoreKeepsTheAcknowledgedList(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{NoBinlog: true})
	db := srv.DB(t, srv.NewDatabase(t))
	ctx := context.Background()
	if _, err := db.Exec("CREATE TABLE cp_v3 (name VARCHAR(255) NOT NULL PRIMARY KEY, flavor VARCHAR(16) NOT NULL, " +
		"server_uuid VARCHAR(64) NOT NULL DEFAULT '', server_id INT UNSIGNED NOT NULL DEFAULT 0, gtid_set TEXT NOT NULL, " +
		"binlog_file VARCHAR(512) NOT NULL DEFAULT '', binlog_pos INT UNSIGNED NOT NULL DEFAULT 0, updated_at DATETIME(6) NOT NULL, " +
		"commit_time DATETIME(6) NULL, disabled VARCHAR(1024) NOT NULL DEFAULT '')"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO cp_v3 VALUES ('a', 'mariadb', '', 1, '0-1-1', 'binlog.000001', 1, FROM_UNIXTIME(1), NULL, '')"); err != nil {
		t.Fatal(err)
	}
	ro, err := checkpoint.OpenMySQLReadOnly(db, "cp_v3")
	if err != nil {
		t.Fatal(err)
	}
	v3 := cp(1)
	v3.Position.ServerID = 0 // no binlog_server_id: whose binlog it is, is unknown
	if got, err := ro.Load(ctx, "a"); err != nil || got != v3 {
		t.Fatalf("read-only Load of a 0.4 table = %+v, %v; want %+v", got, err, v3)
	}
	st, err := checkpoint.OpenMySQL(ctx, db, "cp_v3", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Save(ctx, "a", withAcked(4)); err != nil {
		t.Fatal(err)
	}
	if err := st.SaveMany(ctx, map[string]checkpoint.Checkpoint{"b": withAcked(6), "c": cp(2)}); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]checkpoint.Checkpoint{"a": withAcked(4), "b": withAcked(6), "c": cp(2)} {
		if got, err := ro.Load(ctx, k); err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("Load %s = %+v (%+v), %v; want %+v", k, got, got.Acked, err, want)
		}
	}
	if err := st.Save(ctx, "a", cp(8)); err != nil {
		t.Fatal(err)
	}
	if got, err := st.Load(ctx, "a"); err != nil || got != cp(8) {
		t.Fatalf("Load after a save without a list = %+v (%+v), %v", got, got.Acked, err)
	}

	// A list of the wrong shape is named as such, with a way out that
	// skips nothing.
	if _, err := db.Exec(`UPDATE cp_v3 SET acked = '{"events": ["e1"]}' WHERE name = 'a'`); err != nil {
		t.Fatal(err)
	}
	_, err = st.Load(ctx, "a")
	for _, want := range []string{`checkpoint "a"`, "field acked.events is a JSON array", `where it must be {"<GTID of a transaction>": ["<event id>", ...]}`, "set it to NULL", "none is skipped"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Load of a list of the wrong shape = %v; want an error with %q", err, want)
		}
	}
}
