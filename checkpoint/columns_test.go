package checkpoint_test

import (
	"context"
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
// start, and the same as the SQL of MigrateKeyColumns gives it.
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
