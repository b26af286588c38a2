package checkpoint_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
)

// In a database in latin1 (MariaDB's default until 11.6), the checkpoint
// and fencing tables are utf8mb4 all the same: an endpoint's disabled
// reason quoting its answer ("refusé ✓ 🙂", error 1366 in latin1), longer
// than its column (error 1406), and a record of the relay's own with any
// text are kept; a fencing table of an earlier version (its name a latin1
// character column) is made utf8mb4 with a binary name by the first Lock.
func TestMySQLStoreInALatin1DatabaseKeepsAnyText(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{NoBinlog: true})
	name := srv.NewDatabase(t)
	srv.Exec(t, "ALTER DATABASE "+name+" CHARACTER SET latin1")
	db := srv.DB(t, name)
	ctx := context.Background()
	if _, err := db.Exec("CREATE TABLE " + checkpoint.FenceTable + " (name VARCHAR(255) NOT NULL PRIMARY KEY, epoch BIGINT UNSIGNED NOT NULL, " +
		"holder VARCHAR(255) NOT NULL DEFAULT '', taken_at DATETIME(6) NOT NULL) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	st, err := checkpoint.OpenMySQL(ctx, db, "cp", nil)
	if err != nil {
		t.Fatal(err)
	}
	release, _, err := st.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	c := cp(2)
	reason := "endpoint disabled: it answered 400 Bad Request: refusé ✓ 🙂 " + strings.Repeat("é", 1500)
	c.Disabled = reason
	c.Record = `{"job": "rejouer ✓ 🙂"}`
	if err := st.Save(ctx, "hooks/bad", c); err != nil {
		t.Fatalf("Save: %v", err)
	}
	got, err := st.Load(ctx, "hooks/bad")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(reason, got.Disabled) || !utf8.ValidString(got.Disabled) || len(got.Disabled) > 1024 || len(got.Disabled) < 1000 || got.Record != c.Record {
		t.Errorf("Load: disabled %d bytes %.80q, record %q: want the reason cut to its column in UTF-8, the record whole", len(got.Disabled), got.Disabled, got.Record)
	}
	for _, table := range []string{"cp", checkpoint.FenceTable} {
		var others int
		if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? "+
			"AND (CHARACTER_SET_NAME <> 'utf8mb4' OR (COLUMN_NAME = 'name' AND DATA_TYPE <> 'varbinary'))", table).Scan(&others); err != nil || others != 0 {
			t.Errorf("table %s: %d columns in another character set, or its name not binary (%v)", table, others, err)
		}
	}
}

// FitKey keeps a key that fits as it is, and one too long as its start and
// a hash: within the column, apart from another long key of the same
// start, and the form the upgrade of an earlier version's table gives it
// in SQL (TestMySQLStoreUpgradesALatin1Table, package deadletter).
func TestFitKey(t *testing.T) {
	short := strings.Repeat("a", 255)
	if got := checkpoint.FitKey(short, 255); got != short {
		t.Errorf("a key of 255 bytes: %q", got)
	}
	a, b := checkpoint.FitKey(short+"1", 255), checkpoint.FitKey(short+"2", 255)
	if len(a) != 255 || a == b || !strings.HasPrefix(a, short[:238]+"#") {
		t.Errorf("two long keys: %q, %q", a, b)
	}
	if got := checkpoint.FitText("ab\xffcé", 4); got != "ab" {
		t.Errorf("FitText cut %q", got)
	}
}

// A checkpoint table of an earlier version in a latin1 database (its name
// a latin1 character column) is converted to utf8mb4 before its name is
// made binary: a key written in latin1 ("hooks/café") is then found by its
// UTF-8, as every key is saved from then on, and the table keeps any text.
func TestMySQLStoreUpgradesALatin1CheckpointTable(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{NoBinlog: true})
	name := srv.NewDatabase(t)
	srv.Exec(t, "ALTER DATABASE "+name+" CHARACTER SET latin1")
	db := srv.DB(t, name)
	ctx := context.Background()
	if _, err := db.Exec("CREATE TABLE cp (name VARCHAR(255) NOT NULL PRIMARY KEY, flavor VARCHAR(16) NOT NULL, " +
		"server_uuid VARCHAR(64) NOT NULL DEFAULT '', server_id INT UNSIGNED NOT NULL DEFAULT 0, gtid_set TEXT NOT NULL, " +
		"binlog_file VARCHAR(512) NOT NULL DEFAULT '', binlog_pos INT UNSIGNED NOT NULL DEFAULT 0, updated_at DATETIME(6) NOT NULL, " +
		"commit_time DATETIME(6) NULL, disabled VARCHAR(1024) NOT NULL DEFAULT '', acked MEDIUMTEXT NULL)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO cp (name, flavor, server_id, gtid_set, binlog_file, binlog_pos, updated_at) VALUES ('hooks/café', 'mariadb', 1, '0-1-1', 'binlog.000001', 1, FROM_UNIXTIME(1))"); err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	st, err := checkpoint.OpenMySQL(ctx, db, "cp", slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"its text columns are now utf8mb4", "its column name is now VARBINARY(255)"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the upgrade's log does not say %q:\n%s", want, logs.String())
		}
	}
	if got, err := st.Load(ctx, "hooks/café"); err != nil || got.Position.GTIDSet != "0-1-1" {
		t.Fatalf("the latin1 row by its UTF-8 key: %+v, %v", got, err)
	}
	c := cp(3)
	c.Disabled = "refusé ✓"
	if err := st.Save(ctx, "hooks/café", c); err != nil {
		t.Fatalf("Save after the upgrade: %v", err)
	}
	if got, err := st.Load(ctx, "hooks/café"); err != nil || got.Disabled != "refusé ✓" {
		t.Fatalf("Load after the upgrade: %+v, %v", got, err)
	}
}
