package deadletter_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/deadletter"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
)

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

// tenants stores records of tenants acme and globex, one of no tenant and,
// when legacy is set, one stored as an earlier version stored them (legacy
// puts it); each tenant's List returns its own and nothing else, and the
// operator's (no Tenant) all of them.
func tenants(t *testing.T, st deadletter.Store, legacy func()) {
	ctx := context.Background()
	long := strings.Repeat("t", 300) // longer than the MySQL column
	put := func(tenant, id string) {
		t.Helper()
		err := st.Put(ctx, deadletter.Letter{Sink: "hooks/orders", Tenant: tenant, Reason: "400", Attempts: 1, First: time.Now(), Last: time.Now(),
			Event: &event.Event{ID: id, AggregateID: "a", Payload: []byte(`{}`)}})
		if err != nil {
			t.Fatal(err)
		}
	}
	put("acme", "acme-1")
	put("globex", "globex-1")
	put("", "nobody-1")
	put(long+"a", "long-a")
	put(long+"b", "long-b") // the same first 255 bytes as long-a's tenant
	put("acme", "acme-2")
	put("ACME", "upper-1") // tenants compare as bytes: no collation folds them
	put("acme ", "space-1")
	want := 8
	if legacy != nil {
		legacy()
		want++
	}
	ids := func(f deadletter.Filter) []string {
		t.Helper()
		recs, err := st.List(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range recs {
			if f.Tenant != "" && r.Tenant != f.Tenant {
				t.Errorf("tenant %.10q's List returned a record of tenant %.10q", f.Tenant, r.Tenant)
			}
			out = append(out, r.Event.ID)
		}
		return out
	}
	for tenant, want := range map[string]string{"acme": "acme-1 acme-2", "ACME": "upper-1", "acme ": "space-1", "globex": "globex-1", "initech": "", long + "a": "long-a", long + "b": "long-b"} {
		if got := strings.Join(ids(deadletter.Filter{Tenant: tenant}), " "); got != want {
			t.Errorf("tenant %.10q lists %q, want %q", tenant, got, want)
		}
	}
	if got := ids(deadletter.Filter{}); len(got) != want {
		t.Errorf("the operator lists %v, want %d records", got, want)
	}
	all, _ := st.List(ctx, deadletter.Filter{})
	// A tenant's filter with ids: only its own of them.
	var every []string
	for _, r := range all {
		every = append(every, r.ID)
	}
	if got := strings.Join(ids(deadletter.Filter{Tenant: "globex", IDs: every}), " "); got != "globex-1" {
		t.Errorf("globex with every id lists %q, want globex-1", got)
	}
}

func TestFileStoreKeepsEachRecordsTenant(t *testing.T) {
	dir := t.TempDir() + "/dl"
	st, err := deadletter.OpenFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	tenants(t, st, func() {
		// A record of an earlier version: no tenant in its name or body.
		b := []byte(`{"id": "20250101T000000.000000000Z-000001", "sink": "hooks/orders", "event": {"ID": "legacy-1", "AggregateID": "a"}, "reason": "400", "attempts": 1, "stored": "2025-01-01T00:00:00Z"}`)
		if err := os.WriteFile(dir+"/20250101T000000.000000000Z-000001.json", b, 0o600); err != nil {
			t.Fatal(err)
		}
	})
	// A tenant's List opens only its own files: one of another tenant
	// that does not decode is not read.
	if err := os.WriteFile(dir+"/20250101T000000.000000000Z-000002-t0000000000000000.json", []byte("not JSON"), 0o600); err != nil {
		t.Fatal(err)
	}
	if recs, err := st.List(context.Background(), deadletter.Filter{Tenant: "acme"}); err != nil || len(recs) != 2 {
		t.Errorf("acme's List with another tenant's broken file: %d records, %v", len(recs), err)
	}
	if _, err := st.List(context.Background(), deadletter.Filter{}); err == nil {
		t.Error("the operator's List read past a broken file")
	}
}

func TestMySQLStoreKeepsEachRecordsTenant(t *testing.T) {
	db := srv.DB(t, srv.NewDatabase(t))
	st, err := deadletter.OpenMySQL(context.Background(), db, "")
	if err != nil {
		t.Fatal(err)
	}
	tenants(t, st, nil)
	// A tenant's List reads its own rows only: one of another tenant that
	// does not decode is not read.
	if _, err := db.Exec(`INSERT INTO outbox_relay_dead_letters (id, sink, tenant, event_id, aggregate_id, reason, attempts, first_failed, last_failed, stored, record) VALUES ('x', 'hooks/orders', 'other', 'e', 'a', '', 1, NOW(6), NOW(6), NOW(6), 'not JSON')`); err != nil {
		t.Fatal(err)
	}
	if recs, err := st.List(context.Background(), deadletter.Filter{Tenant: "acme"}); err != nil || len(recs) != 2 {
		t.Errorf("acme's List with another tenant's broken row: %d records, %v", len(recs), err)
	}
	if _, err := st.List(context.Background(), deadletter.Filter{}); err == nil {
		t.Error("the operator's List read past a broken row")
	}
	var plan string
	var x []any
	rows, err := db.Query("EXPLAIN SELECT record FROM outbox_relay_dead_letters WHERE tenant = 'acme' ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	cols, _ := rows.Columns()
	for rows.Next() {
		x = make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range x {
			ptrs[i] = &x[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		for i, c := range cols {
			if c == "key" && x[i] != nil {
				plan = string(x[i].([]byte))
			}
		}
	}
	rows.Close()
	if plan != "ix_tenant" {
		t.Errorf("a tenant's List uses index %q, want ix_tenant", plan)
	}
}

// A table of an earlier version (no tenant column) gains it when the store
// is opened: its records are the operator's, never a tenant's; a
// read-only store on the old table lists no record for a tenant.
func TestMySQLStoreAddsTheTenantColumnToAnOldTable(t *testing.T) {
	db := srv.DB(t, srv.NewDatabase(t))
	ctx := context.Background()
	// The table as the version before made it, with one record.
	if _, err := db.Exec("CREATE TABLE outbox_relay_dead_letters (id VARCHAR(64) NOT NULL PRIMARY KEY, sink VARCHAR(255) NOT NULL, event_id VARCHAR(255) NOT NULL, aggregate_id VARCHAR(255) NOT NULL, reason TEXT NOT NULL, attempts INT NOT NULL, first_failed DATETIME(6) NOT NULL, last_failed DATETIME(6) NOT NULL, stored DATETIME(6) NOT NULL, record LONGBLOB NOT NULL, KEY ix_sink_stored (sink, stored)) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO outbox_relay_dead_letters VALUES ('20250101T000000.000000000Z-000001', 'hooks/orders', 'legacy-1', 'a', '400', 1, NOW(6), NOW(6), NOW(6), '{"id": "20250101T000000.000000000Z-000001", "sink": "hooks/orders", "event": {"ID": "legacy-1", "AggregateID": "a"}, "reason": "400", "attempts": 1}')`); err != nil {
		t.Fatal(err)
	}
	ro, err := deadletter.OpenMySQLReadOnly(db, "")
	if err != nil {
		t.Fatal(err)
	}
	if recs, err := ro.List(ctx, deadletter.Filter{Tenant: "acme"}); err != nil || len(recs) != 0 {
		t.Errorf("read-only, old table: acme lists %d records, %v", len(recs), err)
	}
	if recs, err := ro.List(ctx, deadletter.Filter{}); err != nil || len(recs) != 1 {
		t.Errorf("read-only, old table: the operator lists %d records, %v", len(recs), err)
	}
	st, err := deadletter.OpenMySQL(ctx, db, "")
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'outbox_relay_dead_letters' AND INDEX_NAME = 'ix_tenant'").Scan(&n); err != nil || n != 2 {
		t.Errorf("ix_tenant has %d columns (%v), want 2", n, err)
	}
	// Opened again (a second start, or a second relay): nothing to do.
	if _, err := deadletter.OpenMySQL(ctx, db, ""); err != nil {
		t.Fatal(err)
	}
	tenants(t, st, func() {}) // the old record is there already
}

var srv *testserver.Server

func TestMain(m *testing.M) { testserver.Main(m, testserver.Options{NoBinlog: true}, &srv) }

func latin1Database(t *testing.T, srv *testserver.Server, charset string) *sql.DB {
	t.Helper()
	name := srv.NewDatabase(t)
	srv.Exec(t, "ALTER DATABASE "+name+" CHARACTER SET "+charset)
	return srv.DB(t, name)
}

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
