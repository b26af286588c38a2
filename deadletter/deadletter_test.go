package deadletter_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/deadletter"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
)

var srv *testserver.Server

func TestMain(m *testing.M) { testserver.Main(m, testserver.Options{NoBinlog: true}, &srv) }

func exercise(t *testing.T, st deadletter.Store) {
	ctx := context.Background()
	for i := range 3 {
		name := "kafka"
		if i == 2 {
			name = "hooks/a"
		}
		err := st.Put(ctx, deadletter.Letter{Sink: name, Reason: fmt.Sprintf("reason %d", i), Attempts: i + 1,
			First: time.Now(), Last: time.Now(),
			Event: &event.Event{ID: fmt.Sprintf("e%d", i), AggregateID: "a", Payload: []byte(`{"x": 1}`), Headers: []event.Header{{Key: "k", Value: "v"}}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	all, err := st.List(ctx, deadletter.Filter{})
	if err != nil || len(all) != 3 {
		t.Fatalf("List = %d records, %v", len(all), err)
	}
	if all[0].Event.ID != "e0" || string(all[0].Event.Payload) != `{"x": 1}` || all[0].Event.Headers[0].Value != "v" || all[0].Reason != "reason 0" {
		t.Fatalf("record did not round-trip: %+v %+v", all[0], all[0].Event)
	}
	hooks, _ := st.List(ctx, deadletter.Filter{Sink: "hooks/a"})
	if len(hooks) != 1 || hooks[0].Event.ID != "e2" {
		t.Fatalf("sink filter: %+v", hooks)
	}
	// A webhook sink's name selects every endpoint's records; a sink whose
	// name merely starts the same does not match.
	for name, want := range map[string]int{"hooks": 1, "hook": 0, "kafka": 2, "kafk": 0} {
		if got, _ := st.List(ctx, deadletter.Filter{Sink: name}); len(got) != want {
			t.Errorf("sink filter %q selects %d records, want %d", name, len(got), want)
		}
	}
	future, _ := st.List(ctx, deadletter.Filter{Since: time.Now().Add(time.Hour)})
	if len(future) != 0 {
		t.Fatalf("since filter kept %d", len(future))
	}
	if err := st.Delete(ctx, all[0].ID, all[1].ID); err != nil {
		t.Fatal(err)
	}
	left, _ := st.List(ctx, deadletter.Filter{})
	if len(left) != 1 || left[0].ID != all[2].ID {
		t.Fatalf("after delete: %+v", left)
	}
}

func TestFileStore(t *testing.T) {
	st, err := deadletter.OpenFile(t.TempDir() + "/dl")
	if err != nil {
		t.Fatal(err)
	}
	exercise(t, st)
}

func TestMySQLStore(t *testing.T) {
	db := srv.DB(t, srv.NewDatabase(t))
	st, err := deadletter.OpenMySQL(context.Background(), db, "")
	if err != nil {
		t.Fatal(err)
	}
	exercise(t, st)
}

// latin1Database creates a database in latin1 (MariaDB's default until
// 11.6, whatever this server's is) and returns a connection to it.
func latin1Database(t *testing.T, srv *testserver.Server, charset string) *sql.DB {
	t.Helper()
	name := srv.NewDatabase(t)
	srv.Exec(t, "ALTER DATABASE "+name+" CHARACTER SET "+charset)
	return srv.DB(t, name)
}

// A checkpoint database in latin1 refused what a receiver answers
// ("refusé ✓": error 1366 for the ✓, an emoji likewise; MariaDB's latin1
// is cp1252, which has the curly apostrophe, kept here too) and an
// aggregate id over
// 255 characters (error 1406): the pipeline wrote the dead letter again
// without end. The table is utf8mb4 whatever the database's default, a key
// too long for its column is kept in a form that fits (a prefix and a
// hash: two long ids stay apart), and the record keeps everything whole.
func TestMySQLStoreKeepsWhatALatin1DatabaseRefused(t *testing.T) {
	db := latin1Database(t, srv, "latin1")
	ctx := context.Background()
	st, err := deadletter.OpenMySQL(ctx, db, "")
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("aggregate-é-", 30) // 360 characters, 390 bytes
	reasons := []string{
		"endpoint rejected the event with 400 Bad Request: refusé ✓",
		"endpoint rejected the event with 400 Bad Request: it’s not a valid order",
		"endpoint rejected the event with 400 Bad Request: \xff\xfe not UTF-8 🙂",
		strings.Repeat("é", 40000), // 80,000 bytes: more than a TEXT holds
	}
	for i, reason := range reasons {
		err := st.Put(ctx, deadletter.Letter{Sink: "hooks/bad", Reason: reason, Attempts: 1, First: time.Now(), Last: time.Now(),
			Event: &event.Event{ID: fmt.Sprintf("e%d-%s", i, long), AggregateID: long + fmt.Sprint(i), Payload: []byte(`{"note": "refusé ✓"}`)}})
		if err != nil {
			t.Fatalf("Put of a letter with reason %.60q: %v", reason, err)
		}
	}
	recs, err := st.List(ctx, deadletter.Filter{Sink: "hooks/bad"})
	if err != nil || len(recs) != len(reasons) {
		t.Fatalf("List = %d records, %v; want %d", len(recs), err, len(reasons))
	}
	for i, r := range recs {
		if r.Event.AggregateID != long+fmt.Sprint(i) || r.Event.ID != fmt.Sprintf("e%d-%s", i, long) || string(r.Event.Payload) != `{"note": "refusé ✓"}` {
			t.Errorf("record %d: event %q aggregate %q payload %s: not kept whole", i, r.Event.ID, r.Event.AggregateID, r.Event.Payload)
		}
		// Each byte that is not UTF-8 is a U+FFFD (as encoding/json has it).
		if want := string([]rune(reasons[i])); r.Reason != want {
			t.Errorf("record %d: reason %.80q, want %.80q", i, r.Reason, want)
		}
	}
	// The columns: a prefix and a hash, each id apart from the others.
	rows, err := db.Query("SELECT aggregate_id, reason FROM outbox_relay_dead_letters ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := map[string]bool{}
	for i := 0; rows.Next(); i++ {
		var agg []byte
		var reason string
		if err := rows.Scan(&agg, &reason); err != nil {
			t.Fatal(err)
		}
		if len(agg) > 255 || !strings.HasPrefix(long, string(agg[:200])) || seen[string(agg)] {
			t.Errorf("aggregate_id column %q: want at most 255 bytes, the id's start, unique", agg)
		}
		seen[string(agg)] = true
		if want := checkpoint.FitKey(long+fmt.Sprint(i), 255); string(agg) != want {
			t.Errorf("aggregate_id column %q, want checkpoint.FitKey's %q", agg, want)
		}
		if len(reason) > 65535 {
			t.Errorf("reason column of %d bytes", len(reason))
		}
	}
}

// A table of an earlier version — character columns in the database's
// latin1, keys compared with its collation — is made utf8mb4 with binary
// keys on open: its rows stay (a sink name in latin1 reads the same in
// UTF-8), a key longer than its new column takes checkpoint.FitKey's form,
// and what latin1 refused is kept from then on.
func TestMySQLStoreUpgradesALatin1Table(t *testing.T) {
	db := latin1Database(t, srv, "latin1")
	ctx := context.Background()
	if _, err := db.Exec("CREATE TABLE outbox_relay_dead_letters (id VARCHAR(64) NOT NULL PRIMARY KEY, sink VARCHAR(255) NOT NULL, " +
		"event_id VARCHAR(255) NOT NULL, aggregate_id VARCHAR(255) NOT NULL, reason TEXT NOT NULL, attempts INT NOT NULL, " +
		"first_failed DATETIME(6) NOT NULL, last_failed DATETIME(6) NOT NULL, stored DATETIME(6) NOT NULL, record LONGBLOB NOT NULL, " +
		"KEY ix_sink_stored (sink, stored)) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("é", 200) // 200 latin1 bytes, 400 in UTF-8
	if _, err := db.Exec("INSERT INTO outbox_relay_dead_letters VALUES ('20260101T000000.000000000Z-000001', 'hooks/straße', 'e1', ?, 'why', 1, NOW(6), NOW(6), NOW(6), ?)",
		long, `{"id":"20260101T000000.000000000Z-000001","sink":"hooks/straße","event":{"id":"e1"},"reason":"why"}`); err != nil {
		t.Fatal(err)
	}
	st, err := deadletter.OpenMySQL(ctx, db, "")
	if err != nil {
		t.Fatal(err)
	}
	var others int
	if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'outbox_relay_dead_letters' " +
		"AND (CHARACTER_SET_NAME <> 'utf8mb4' OR (COLUMN_NAME IN ('id', 'sink', 'event_id', 'aggregate_id') AND DATA_TYPE <> 'varbinary'))").Scan(&others); err != nil || others != 0 {
		t.Fatalf("%d columns are still in another character set or not binary keys (%v)", others, err)
	}
	var agg []byte
	if err := db.QueryRow("SELECT aggregate_id FROM outbox_relay_dead_letters").Scan(&agg); err != nil || string(agg) != checkpoint.FitKey(long, 255) {
		t.Fatalf("the old row's aggregate_id is %q (%v), want %q", agg, err, checkpoint.FitKey(long, 255))
	}
	if recs, err := st.List(ctx, deadletter.Filter{Sink: "hooks/straße"}); err != nil || len(recs) != 1 {
		t.Fatalf("the old row by its sink: %d records, %v", len(recs), err)
	}
	if err := st.Put(ctx, deadletter.Letter{Sink: "hooks/straße", Reason: "refusé ✓", Event: &event.Event{ID: "e2", AggregateID: "a"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := deadletter.OpenMySQL(ctx, db, ""); err != nil {
		t.Fatalf("opening the upgraded table again: %v", err)
	}
}

// MariaDB's utf8mb4 collations take "ß" for "s" and "ı" for "i": a sink
// column compared with one made `dlq list --sink hooks/strase` list
// hooks/straße's letters, and `dlq purge` (List, then Delete of what it
// listed) delete them. The columns are binary: names compare as bytes.
func TestMySQLStoreSinkNamesCompareAsBytes(t *testing.T) {
	db := latin1Database(t, srv, "utf8mb4") // its default collation: utf8mb4_general_ci
	ctx := context.Background()
	st, err := deadletter.OpenMySQL(ctx, db, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, sink := range []string{"hooks/straße", "hooks/ıd"} {
		if err := st.Put(ctx, deadletter.Letter{Sink: sink, Reason: "400", Event: &event.Event{ID: sink, AggregateID: "a"}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, lookalike := range []string{"hooks/strase", "hooks/STRASSE", "hooks/id", "hooks/ID"} {
		got, err := st.List(ctx, deadletter.Filter{Sink: lookalike})
		if err != nil || len(got) != 0 {
			t.Errorf("list --sink %s: %d records, %v; want none", lookalike, len(got), err)
		}
		// purge: what List selects is deleted.
		ids := make([]string, len(got))
		for i, r := range got {
			ids[i] = r.ID
		}
		if err := st.Delete(ctx, ids...); err != nil {
			t.Fatal(err)
		}
	}
	for _, sink := range []string{"hooks/straße", "hooks/ıd"} {
		if got, err := st.List(ctx, deadletter.Filter{Sink: sink}); err != nil || len(got) != 1 || got[0].Sink != sink {
			t.Errorf("list --sink %s after the purges of its lookalikes: %+v, %v; want its one letter", sink, got, err)
		}
	}
}
