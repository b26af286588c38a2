package relay_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/deadletter"
	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/internal/eventually"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/receiver"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/sink/webhook"
)

// rowsRelay runs a relay whose webhook sink "hooks" has the endpoints of
// yaml (may be empty) and the endpoints table outbox_endpoints of dbname,
// serving /endpoints and /metrics on a free port. Its checkpoints are in a
// file, or (newRowsRelayMySQL) in the table cp of dbname.
type rowsRelay struct {
	cfg  *config.Config
	http string
	logs *countingHandler
}

func newRowsRelay(t *testing.T, dbname string, yaml string, logKeys ...string) *rowsRelay {
	t.Helper()
	return newRowsRelayStore(t, dbname, fmt.Sprintf("{path: %s, interval: 100ms}", filepath.Join(t.TempDir(), "cp.json")), yaml, logKeys...)
}

// newRowsRelayMySQL is newRowsRelay with checkpoint.store: mysql, in the
// table cp of dbname.
func newRowsRelayMySQL(t *testing.T, dbname string, yaml string, logKeys ...string) *rowsRelay {
	t.Helper()
	return newRowsRelayStore(t, dbname, fmt.Sprintf(`{store: mysql, dsn: "root@tcp(127.0.0.1:%d)/%s", table: cp, interval: 100ms}`, srv.Port, dbname), yaml, logKeys...)
}

func newRowsRelayStore(t *testing.T, dbname, checkpoint, yaml string, logKeys ...string) *rowsRelay {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	endpoints := ""
	if yaml != "" {
		endpoints = "\n      endpoints:\n        - " + yaml
	}
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %s.outbox}]
checkpoint: %s
http: {listen: "%s"}
sinks:
  - name: hooks
    type: webhook
    webhook:%s
      endpoints_table:
        table: %[3]s.outbox_endpoints
        defaults: {body: envelope, egress: {allow: [127.0.0.1]}}
`, srv.Port, testserver.ServerID(), dbname, checkpoint, addr, endpoints)))
	if err != nil {
		t.Fatal(err)
	}
	return &rowsRelay{cfg: cfg, http: addr, logs: newCountingHandler(logKeys...)}
}

// run starts the relay; stop ends it and fails the test on its error.
func (rr *rowsRelay) run(t *testing.T) (stop func()) {
	t.Helper()
	rl := startRelay(t, rr.cfg, relay.Options{Logger: slog.New(rr.logs)})
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		if err := rl.stop(t); err != nil {
			t.Fatalf("relay: %v", err)
		}
	}
	t.Cleanup(stop)
	if rr.cfg.Checkpoint.Store != "mysql" {
		waitForCheckpoint(t, rr.cfg.Checkpoint.Path)
		return stop
	}
	eventually.Within(t, 30*time.Second, "the relay to save a checkpoint", func() bool {
		all, err := rr.checkpoints(t)
		return err == nil && len(all) > 0
	})
	return stop
}

func (rr *rowsRelay) count(key string) int64 {
	for i, k := range rr.logs.keys {
		if k == key {
			return rr.logs.counts[i].Load()
		}
	}
	panic("no log key " + key)
}

// endpoints reads /endpoints by endpoint.
func (rr *rowsRelay) endpoints(t *testing.T) map[string]gateway.EndpointStats {
	t.Helper()
	resp, err := http.Get("http://" + rr.http + "/endpoints")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var all map[string][]gateway.EndpointStats
	if err := json.NewDecoder(resp.Body).Decode(&all); err != nil {
		t.Fatal(err)
	}
	out := map[string]gateway.EndpointStats{}
	for _, e := range all["hooks"] {
		out[e.Endpoint] = e
	}
	return out
}

// metric returns the /metrics line that starts with prefix ("" if none).
func (rr *rowsRelay) metric(t *testing.T, prefix string) string {
	t.Helper()
	resp, err := http.Get("http://" + rr.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for line := range strings.SplitSeq(string(body), "\n") {
		if strings.HasPrefix(line, prefix) {
			return line
		}
	}
	return ""
}

// events commits n transactions of one or two events each (a workload of
// its own, ids unique across calls) and returns how many events.
var eventsSeq int

func events(t *testing.T, db *sql.DB, n int) int {
	t.Helper()
	eventsSeq++
	w := &outboxtest.Workload{Prefix: fmt.Sprintf("w%d-", eventsSeq)}
	outboxtest.Produce(context.Background(), t, db, w, 1, n, []int{1, 2}, 3)
	return w.Events()
}

// checkpoint is the cursor of endpoint key as gateway.CursorOf reads it:
// its own, or, once it went idle and its sink's shared cursor passed it
// (which deletes its own: on a loaded machine an endpoint goes idle
// between two of a test's steps), the shared one.
func (rr *rowsRelay) checkpoint(t *testing.T, key string) (checkpoint.Checkpoint, error) {
	t.Helper()
	if rr.cfg.Checkpoint.Store == "mysql" {
		all, err := rr.checkpoints(t)
		if err != nil {
			return checkpoint.Checkpoint{}, err
		}
		cp, ok := all[key]
		if sink, _, _ := strings.Cut(key, "/"); !ok {
			cp, ok = all[gateway.SharedKey(sink)]
		}
		if !ok {
			return cp, checkpoint.ErrNotFound
		}
		return cp, nil
	}
	st, err := checkpoint.OpenFile(rr.cfg.Checkpoint.Path)
	if err != nil {
		t.Fatal(err)
	}
	cp, _, err := gateway.CursorOf(context.Background(), st, key)
	return cp, err
}

// checkpoints lists the checkpoints of a relay of newRowsRelayMySQL, as
// stored: a read-only store, which reads the table as it is.
func (rr *rowsRelay) checkpoints(t *testing.T) (map[string]checkpoint.Checkpoint, error) {
	t.Helper()
	db, err := checkpoint.OpenDB(rr.cfg.Checkpoint.DSN.Reveal())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	st, err := checkpoint.OpenMySQLReadOnly(db, rr.cfg.Checkpoint.Table)
	if err != nil {
		t.Fatal(err)
	}
	return st.List(context.Background())
}

// A row of the endpoints table with the name of an endpoint of the
// configuration can neither stop, re-enable, redirect nor remove it: not
// inserted disabled, nor enabled with another url, nor updated, nor
// deleted, nor read at start, nor replayed after a restart. The row is
// refused with one error log naming it; the configured endpoint gets every
// event and keeps its checkpoint; nothing reaches the row's url.
func TestATableRowCannotTakeOverAnEndpointOfTheConfiguration(t *testing.T) {
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	for _, q := range []string{outboxtest.Schema, webhook.EndpointsTableSchema} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	billing, probe := receiver.Start(t, nil), receiver.Start(t, nil)
	attacker, attacker2 := receiver.Start(t, nil), receiver.Start(t, nil)
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.Exec(q, args...); err != nil {
			t.Fatal(err)
		}
	}
	// "probe" is a row of the table that gets every event: once it has an
	// event committed after a row change, the relay has applied that change.
	exec(`INSERT INTO outbox_endpoints (id, url) VALUES ('probe', ?)`, probe.URL+"/hook")
	const refused = "refused: endpoint hooks/billing is in the configuration"
	rr := newRowsRelay(t, dbname, fmt.Sprintf(`{name: billing, url: "%s/hook", body: envelope}`, billing.URL),
		refused, "the row refused for the name of an endpoint of the configuration was deleted")
	stop := rr.run(t)
	total := 0
	produce := func() {
		t.Helper()
		total += events(t, db, 3)
		eventually.Within(t, 60*time.Second, "billing and probe to get every event", func() bool {
			return billing.Unique() >= total && probe.Unique() >= total
		})
	}
	produce()
	// The cursor before the row changes, to replay them after a restart.
	saved, err := os.ReadFile(rr.cfg.Checkpoint.Path)
	if err != nil {
		t.Fatal(err)
	}

	exec(`INSERT INTO outbox_endpoints (id, url, enabled) VALUES ('billing', ?, 0)`, attacker.URL+"/hook")
	produce()
	exec(`UPDATE outbox_endpoints SET enabled = 1 WHERE id = 'billing'`)
	produce()
	exec(`UPDATE outbox_endpoints SET url = ? WHERE id = 'billing'`, attacker2.URL+"/hook")
	produce()
	exec(`DELETE FROM outbox_endpoints WHERE id = 'billing'`)
	produce()
	if n := rr.count(refused); n != 1 {
		t.Errorf("%d error logs of the refused row, want 1", n)
	}
	if n := rr.count("the row refused for the name of an endpoint of the configuration was deleted"); n != 1 {
		t.Errorf("%d logs of the refused row's deletion, want 1", n)
	}
	if _, err := rr.checkpoint(t, "hooks/billing"); err != nil {
		t.Fatalf("the configured endpoint's checkpoint after the row's DELETE: %v", err)
	}
	// Read at start, and the changes replayed from the older cursor.
	exec(`INSERT INTO outbox_endpoints (id, url, enabled) VALUES ('billing', ?, 1)`, attacker.URL+"/hook")
	stop()
	if err := os.WriteFile(rr.cfg.Checkpoint.Path, saved, 0o600); err != nil {
		t.Fatal(err)
	}
	stop = rr.run(t)
	produce()
	exec(`DELETE FROM outbox_endpoints WHERE id = 'billing'`)
	produce()
	stop()
	if n := rr.count(refused); n < 2 {
		t.Errorf("%d error logs of the refused row over two runs, want one per run", n)
	}
	if n := len(attacker.Accepted("")) + len(attacker2.Accepted("")); n != 0 {
		t.Errorf("the row's urls got %d events of the configured endpoint", n)
	}
	if billing.Unique() != total {
		t.Errorf("the configured endpoint got %d of %d events", billing.Unique(), total)
	}
	if _, err := rr.checkpoint(t, "hooks/billing"); err != nil {
		t.Errorf("the configured endpoint's checkpoint: %v", err)
	}

	// Disabled for failing, it is not enabled by a row's UPDATE.
	st, err := checkpoint.OpenFile(rr.cfg.Checkpoint.Path)
	if err != nil {
		t.Fatal(err)
	}
	cp, _, err := gateway.CursorOf(context.Background(), st, "hooks/billing")
	if err != nil {
		t.Fatal(err)
	}
	cp.Disabled = "failing since yesterday"
	if err := st.Save(context.Background(), "hooks/billing", cp); err != nil {
		t.Fatal(err)
	}
	before := billing.Unique()
	stop = rr.run(t)
	exec(`INSERT INTO outbox_endpoints (id, url, enabled) VALUES ('billing', ?, 1)`, attacker.URL+"/hook")
	exec(`UPDATE outbox_endpoints SET url = ? WHERE id = 'billing'`, billing.URL+"/hook")
	total += events(t, db, 3)
	eventually.Within(t, 60*time.Second, "probe to get every event", func() bool { return probe.Unique() >= total })
	if e := rr.endpoints(t)["hooks/billing"]; e.State != "disabled" {
		t.Errorf("/endpoints: the disabled configured endpoint is %q after the row's UPDATE, want disabled", e.State)
	}
	stop()
	if billing.Unique() != before || len(attacker.Accepted("")) != 0 {
		t.Errorf("a row's UPDATE enabled the disabled configured endpoint: it got %d more events", billing.Unique()-before)
	}
	if cp, err := rr.checkpoint(t, "hooks/billing"); err != nil || cp.Disabled == "" {
		t.Errorf("the configured endpoint after a row's UPDATE: %+v, %v; want still disabled", cp, err)
	}
}

// With the MySQL checkpoint store, rows whose ids a collation, or a
// reader, takes for a configured endpoint's name ("BILLING", "billing ",
// "bíllíng") are refused as "billing" itself is: inserted enabled, disabled
// or deleted, none of them runs, saves or deletes a checkpoint, and the
// configured endpoint gets every event and keeps its checkpoint, over a
// restart. A renamed row stops its endpoint at the rename: once renamed and
// deleted, the endpoint of the old id gets no event committed after. The
// checkpoint table, created by an earlier version with a collated name
// column, is migrated on the first start, with one log line.
func TestLookalikeAndRenamedRowsWithTheMySQLStore(t *testing.T) {
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	for _, q := range []string{outboxtest.Schema, webhook.EndpointsTableSchema,
		// The checkpoint table as versions before the binary key column
		// created it.
		"CREATE TABLE cp (name VARCHAR(255) NOT NULL PRIMARY KEY, flavor VARCHAR(16) NOT NULL, " +
			"server_uuid VARCHAR(64) NOT NULL DEFAULT '', server_id INT UNSIGNED NOT NULL DEFAULT 0, gtid_set TEXT NOT NULL, " +
			"binlog_file VARCHAR(512) NOT NULL DEFAULT '', binlog_pos INT UNSIGNED NOT NULL DEFAULT 0, updated_at DATETIME(6) NOT NULL, " +
			"commit_time DATETIME(6) NULL, disabled VARCHAR(1024) NOT NULL DEFAULT '', acked MEDIUMTEXT NULL) DEFAULT CHARSET=utf8mb4",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	billing, probe, attacker, acme := receiver.Start(t, nil), receiver.Start(t, nil), receiver.Start(t, nil), receiver.Start(t, nil)
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.Exec(q, args...); err != nil {
			t.Fatal(err)
		}
	}
	exec(`INSERT INTO outbox_endpoints (id, url) VALUES ('probe', ?)`, probe.URL+"/hook")
	const (
		refused  = "refused: endpoint hooks/billing is in the configuration"
		upgraded = "checkpoint table upgraded"
	)
	rr := newRowsRelayMySQL(t, dbname, fmt.Sprintf(`{name: billing, url: "%s/hook", body: envelope}`, billing.URL), refused, upgraded)
	stop := rr.run(t)
	total := 0
	// produce commits events with ids starting with prefix and waits for
	// billing and probe to have every event: the relay has then applied
	// every row change committed before.
	produce := func(prefix string) {
		t.Helper()
		w := &outboxtest.Workload{Prefix: prefix}
		outboxtest.Produce(context.Background(), t, db, w, 1, 3, []int{1, 2}, 3)
		total += w.Events()
		eventually.Within(t, 60*time.Second, "billing and probe to get every event", func() bool {
			return billing.Unique() >= total && probe.Unique() >= total
		})
	}
	produce("start-")
	lookalikes := []string{"BILLING", "billing ", "bíllíng"}
	for i, id := range lookalikes {
		exec(`INSERT INTO outbox_endpoints (id, url) VALUES (?, ?)`, id, attacker.URL+"/hook")
		produce(fmt.Sprintf("l%d-on-", i))
		exec(`UPDATE outbox_endpoints SET enabled = 0 WHERE id = ?`, id)
		produce(fmt.Sprintf("l%d-off-", i))
		exec(`DELETE FROM outbox_endpoints WHERE id = ?`, id)
		produce(fmt.Sprintf("l%d-gone-", i))
		if _, err := rr.checkpoint(t, "hooks/billing"); err != nil {
			t.Fatalf("after the row %q was inserted, disabled and deleted, the configured endpoint's checkpoint: %v", id, err)
		}
	}
	if n := rr.count(refused); n != int64(len(lookalikes)) {
		t.Errorf("%d error logs refusing a row for hooks/billing, want one per row (%q)", n, lookalikes)
	}
	if n := len(attacker.Accepted("")); n != 0 {
		t.Errorf("the lookalike rows' url got %d events", n)
	}
	all, err := rr.checkpoints(t)
	if err != nil {
		t.Fatal(err)
	}
	for k := range all {
		if k != "hooks/billing" && webhook.FoldName(k) == webhook.FoldName("hooks/billing") {
			t.Errorf("a lookalike row saved a checkpoint, %q", k)
		}
	}

	// Renamed, then deleted: the old id's endpoint gets nothing after.
	exec(`INSERT INTO outbox_endpoints (id, url) VALUES ('acme', ?)`, acme.URL+"/hook")
	produce("acme-")
	eventually.Within(t, 60*time.Second, "acme to get the events committed after its row", func() bool {
		return len(acme.Accepted("")) > 0
	})
	exec(`UPDATE outbox_endpoints SET id = 'acme-old' WHERE id = 'acme'`)
	produce("renamed-")
	eventually.Within(t, 60*time.Second, "the renamed endpoint hooks/acme to be gone from /endpoints", func() bool {
		eps := rr.endpoints(t)
		_, old := eps["hooks/acme"]
		_, renamed := eps["hooks/acme-old"]
		return !old && renamed
	})
	exec(`DELETE FROM outbox_endpoints WHERE id = 'acme-old'`)
	produce("deleted-")
	produce("after-")
	for _, r := range acme.Accepted("") {
		if strings.HasPrefix(r.EventID, "deleted-") || strings.HasPrefix(r.EventID, "after-") {
			t.Fatalf("the endpoint of a row renamed then deleted got event %s, committed after the DELETE", r.EventID)
		}
	}
	eventually.Within(t, 60*time.Second, "the cursors of hooks/acme and hooks/acme-old to be dropped", func() bool {
		all, err := rr.checkpoints(t)
		_, old := all["hooks/acme"]
		_, renamed := all["hooks/acme-old"]
		return err == nil && !old && !renamed
	})

	// Over a restart, billing resumes from its own checkpoint.
	stop()
	stop = rr.run(t)
	produce("restarted-")
	stop()
	if billing.Unique() != total {
		t.Errorf("the configured endpoint got %d of %d events", billing.Unique(), total)
	}
	if n := rr.count(upgraded); n != 1 {
		t.Errorf("%d log lines of the checkpoint table's upgrade over two starts, want 1", n)
	}
}

// A row the relay cannot use (here: a url the egress policy refuses) does
// not stop the relay: its endpoint is invalid — in /endpoints, in the
// gateway_endpoints gauge, with one error log — and the other endpoints
// deliver. An UPDATE that fixes the row starts it; a bad row deleted is
// logged as removed, not as a row that cannot be used.
func TestABadRowIsInvalidAndTheOtherEndpointsRun(t *testing.T) {
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	for _, q := range []string{outboxtest.Schema, webhook.EndpointsTableSchema} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	good, fixed := receiver.Start(t, nil), receiver.Start(t, nil)
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.Exec(q, args...); err != nil {
			t.Fatal(err)
		}
	}
	exec(`INSERT INTO outbox_endpoints (id, url) VALUES ('good', ?), ('bad', 'http://10.1.2.3/hook'), ('off', ?)`, good.URL+"/hook", good.URL+"/off")
	exec(`UPDATE outbox_endpoints SET enabled = 0 WHERE id = 'off'`)
	const (
		skipped   = "a row cannot be used: its endpoint is skipped"
		unusable  = "a changed row cannot be used"
		goneInfo  = "a row of an endpoint that was not running was deleted"
		refusedBy = "endpoints_table.defaults.egress.allow"
	)
	rr := newRowsRelay(t, dbname, "", skipped, unusable, goneInfo)
	stop := rr.run(t)
	total := events(t, db, 5)
	eventually.Within(t, 60*time.Second, "the good endpoint to get every event", func() bool { return good.Unique() >= total })
	eps := rr.endpoints(t)
	if e := eps["hooks/bad"]; e.State != "invalid" || !strings.Contains(e.Invalid, refusedBy) {
		t.Errorf("/endpoints hooks/bad: %+v; want state invalid and why, naming %s", e, refusedBy)
	}
	if e := eps["hooks/off"]; e.State != "off" {
		t.Errorf("/endpoints hooks/off: state %q, want off", e.State)
	}
	if m := rr.metric(t, `outbox_relay_gateway_endpoints{sink="hooks",state="invalid"}`); !strings.HasSuffix(m, " 1") {
		t.Errorf("gauge of invalid endpoints: %q, want 1", m)
	}
	if n := rr.count(skipped); n != 1 {
		t.Errorf("%d error logs of the bad row, want 1", n)
	}
	// Fixed while running, it starts from its cursor: it gets what is
	// committed after (and, TestAnEndpointThatDoesNotRunLosesNothing,
	// what was committed while it was invalid).
	exec(`UPDATE outbox_endpoints SET url = ? WHERE id = 'bad'`, fixed.URL+"/hook")
	after := events(t, db, 5)
	total += after
	eventually.Within(t, 60*time.Second, "the fixed endpoint to get the events after its fix", func() bool {
		return fixed.Unique() >= after && good.Unique() >= total
	})
	eventually.Within(t, 10*time.Second, "/endpoints to show the fixed endpoint running", func() bool {
		return rr.endpoints(t)["hooks/bad"].State == "attached"
	})
	// A bad row inserted then deleted: invalid, then removed (info).
	exec(`INSERT INTO outbox_endpoints (id, url) VALUES ('typo', 'http://10.9.9.9/')`)
	exec(`DELETE FROM outbox_endpoints WHERE id = 'typo'`)
	total += events(t, db, 1)
	eventually.Within(t, 60*time.Second, "the good endpoint to get every event", func() bool { return good.Unique() >= total })
	eventually.Within(t, 10*time.Second, "/endpoints to drop the deleted row's endpoint", func() bool {
		_, listed := rr.endpoints(t)["hooks/typo"]
		return !listed
	})
	stop()
	if n := rr.count(unusable); n != 0 {
		t.Errorf("%d error logs %q for a bad row inserted and deleted, want none", n, unusable)
	}
	if rr.count(skipped) != 2 || rr.count(goneInfo) != 1 {
		t.Errorf("bad row inserted and deleted: %d invalid logs (want 2 in all), %d removal logs (want 1)", rr.count(skipped), rr.count(goneInfo))
	}
}

// An endpoint that answers 410 Gone is disabled at once, in every output:
// its checkpoint says why (and keeps it disabled across restarts),
// /endpoints and the gateway_endpoints gauge say disabled. The events it
// held are dead letters; the later ones wait behind its cursor and are
// delivered once it is enabled: nothing is lost.
func TestAnEndpointAnswering410IsDisabledAndLosesNothing(t *testing.T) {
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	for _, q := range []string{outboxtest.Schema, webhook.EndpointsTableSchema} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	var gone atomic.Bool
	gone.Store(true)
	good := receiver.Start(t, nil)
	hook := receiver.Start(t, func(*http.Request, []byte, time.Duration) receiver.Reply {
		if gone.Load() {
			return receiver.Reply{Status: http.StatusGone}
		}
		return receiver.Reply{Status: http.StatusOK}
	})
	rr := newRowsRelay(t, dbname, fmt.Sprintf(`{name: good, url: "%s/hook", body: envelope}
        - {name: gone, url: "%s/hook", body: envelope}`, good.URL, hook.URL))
	stop := rr.run(t)
	total := events(t, db, 10)
	eventually.Within(t, 60*time.Second, "the 410 endpoint to be disabled", func() bool {
		cp, _ := rr.checkpoint(t, "hooks/gone")
		return strings.Contains(cp.Disabled, "410")
	})
	total += events(t, db, 10)
	eventually.Within(t, 60*time.Second, "the good endpoint to get every event", func() bool { return good.Unique() >= total })
	if e := rr.endpoints(t)["hooks/gone"]; e.State != "disabled" || e.Cursor == "" {
		t.Errorf("/endpoints: the 410 endpoint is %q with cursor %q, want disabled, and the cursor its events wait behind", e.State, e.Cursor)
	}
	if m := rr.metric(t, `outbox_relay_gateway_endpoints{sink="hooks",state="disabled"}`); !strings.HasSuffix(m, " 1") {
		t.Errorf("gauge of disabled endpoints: %q, want 1", m)
	}
	stop()
	// Still disabled after a restart.
	stop = rr.run(t)
	total += events(t, db, 2)
	eventually.Within(t, 60*time.Second, "the good endpoint to get every event", func() bool { return good.Unique() >= total })
	if e := rr.endpoints(t)["hooks/gone"]; e.State != "disabled" || e.Cursor == "" {
		t.Errorf("/endpoints after a restart: the 410 endpoint is %q with cursor %q, want disabled, and the cursor its events wait behind", e.State, e.Cursor)
	}
	stop()
	// Enabled (what `outbox-relay endpoints enable` writes), with the
	// receiver back: it gets every event that is not a dead letter.
	gone.Store(false)
	st, err := checkpoint.OpenFile(rr.cfg.Checkpoint.Path)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := st.Load(context.Background(), "hooks/gone")
	if err != nil {
		t.Fatal(err)
	}
	cp.Disabled = ""
	if err := st.Save(context.Background(), "hooks/gone", cp); err != nil {
		t.Fatal(err)
	}
	dl, err := deadletter.OpenFile(deadletter.Dir(rr.cfg))
	if err != nil {
		t.Fatal(err)
	}
	recs, err := dl.List(context.Background(), deadletter.Filter{Sink: "hooks/gone"})
	if err != nil {
		t.Fatal(err)
	}
	dead := map[string]bool{}
	for _, r := range recs {
		dead[r.Event.ID] = true
		if !strings.Contains(r.Reason, "410") {
			t.Errorf("dead letter reason %q does not say 410", r.Reason)
		}
	}
	stop = rr.run(t)
	eventually.Within(t, 60*time.Second, "the enabled endpoint to get every event that is not a dead letter", func() bool {
		return hook.Unique()+len(dead) >= total
	})
	stop()
	for _, d := range hook.Accepted("") {
		if dead[d.EventID] {
			t.Errorf("event %s is a dead letter and was delivered too", d.EventID)
		}
	}
	if len(dead) >= total {
		t.Errorf("all %d events are dead letters: the 410 did not stop the endpoint", total)
	}
	t.Logf("%d events: %d dead letters (held when it answered 410), %d delivered once enabled", total, len(dead), hook.Unique())
}

// An endpoint of the endpoints table that does not run loses nothing
// (docs/gateway.md, Endpoint states): a row invalid or off when the relay
// starts, one inserted invalid or off while it runs, and one turned off
// while it ran each keep a cursor where they stopped or came into being,
// across a restart, shown in /endpoints and in the held-cursor gauge; once
// the row is fixed or enabled, each gets every event committed since.
func TestAnEndpointThatDoesNotRunLosesNothing(t *testing.T) {
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	for _, q := range []string{outboxtest.Schema, webhook.EndpointsTableSchema} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.Exec(q, args...); err != nil {
			t.Fatal(err)
		}
	}
	names := []string{"good", "bad-start", "off-start", "bad-live", "off-live", "run-off"}
	rx := map[string]*receiver.Receiver{}
	for _, n := range names {
		rx[n] = receiver.Start(t, nil)
	}
	refused := "http://10.1.2.3/hook" // the egress policy refuses it
	exec(`INSERT INTO outbox_endpoints (id, url, enabled) VALUES ('good', ?, 1), ('bad-start', ?, 1), ('off-start', ?, 0), ('run-off', ?, 1)`,
		rx["good"].URL+"/hook", refused, rx["off-start"].URL+"/hook", rx["run-off"].URL+"/hook")
	rr := newRowsRelay(t, dbname, "")
	stop := rr.run(t)
	// Applied at their transactions: every event after them is theirs.
	exec(`INSERT INTO outbox_endpoints (id, url, enabled) VALUES ('bad-live', ?, 1), ('off-live', ?, 0)`, refused, rx["off-live"].URL+"/hook")
	exec(`UPDATE outbox_endpoints SET enabled = 0 WHERE id = 'run-off'`)
	total := events(t, db, 10)
	eventually.Within(t, 60*time.Second, "the good endpoint to get every event", func() bool { return rx["good"].Unique() >= total })
	held := func(when string) {
		t.Helper()
		var eps map[string]gateway.EndpointStats
		eventually.Within(t, 10*time.Second, "/endpoints to show every endpoint that does not run with its cursor", func() bool {
			eps = rr.endpoints(t)
			for _, n := range names[1:] {
				if eps["hooks/"+n].Cursor == "" {
					return false
				}
			}
			return true
		}, func() { t.Logf("%s: /endpoints: %+v", when, eps) })
		for n, want := range map[string]string{"bad-start": "invalid", "bad-live": "invalid", "off-start": "off", "off-live": "off", "run-off": "off"} {
			if e := eps["hooks/"+n]; e.State != want || e.HeldSince.IsZero() {
				t.Errorf("%s: /endpoints hooks/%s: %+v; want state %s, its cursor and since when its events wait", when, n, e, want)
			}
		}
		if m := rr.metric(t, `outbox_relay_gateway_held_cursor_age_seconds{sink="hooks"}`); m == "" {
			t.Errorf("%s: no held-cursor gauge of the sink", when)
		}
	}
	held("running")
	stop()
	total += events(t, db, 5) // while the relay is stopped
	stop = rr.run(t)
	total += events(t, db, 5)
	eventually.Within(t, 60*time.Second, "the good endpoint to get every event", func() bool { return rx["good"].Unique() >= total })
	held("after a restart")
	// Fixed and enabled: each gets every event since it came into being.
	exec(`UPDATE outbox_endpoints SET url = ? WHERE id = 'bad-start'`, rx["bad-start"].URL+"/hook")
	exec(`UPDATE outbox_endpoints SET url = ? WHERE id = 'bad-live'`, rx["bad-live"].URL+"/hook")
	exec(`UPDATE outbox_endpoints SET enabled = 1 WHERE id IN ('off-start', 'off-live', 'run-off')`)
	total += events(t, db, 5)
	eventually.Within(t, 60*time.Second, "every endpoint to get every event", func() bool {
		for _, n := range names {
			if rx[n].Unique() < total {
				return false
			}
		}
		return true
	}, func() {
		for _, n := range names {
			t.Logf("%s got %d of %d events", n, rx[n].Unique(), total)
		}
	})
	eventually.Within(t, 10*time.Second, "/endpoints to show them running, without a held cursor", func() bool {
		eps := rr.endpoints(t)
		for _, n := range names {
			if e := eps["hooks/"+n]; !slices.Contains([]string{"attached", "waiting", "catching_up"}, e.State) || e.Cursor != "" {
				return false
			}
		}
		return true
	})
	stop()
}

// An endpoint whose pipeline stopped on an error (here: its checkpoint
// says another server flavor) is stopped, with its cursor and since when
// its events wait in /endpoints, while the others deliver; once the cause
// is fixed and the relay restarted, it resumes from that cursor and gets
// every event committed while it was stopped.
func TestAStoppedEndpointKeepsItsCursorAndLosesNothing(t *testing.T) {
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	for _, q := range []string{outboxtest.Schema, webhook.EndpointsTableSchema} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	good, st := receiver.Start(t, nil), receiver.Start(t, nil)
	if _, err := db.Exec(`INSERT INTO outbox_endpoints (id, url) VALUES ('good', ?), ('st', ?)`, good.URL+"/hook", st.URL+"/hook"); err != nil {
		t.Fatal(err)
	}
	rr := newRowsRelay(t, dbname, "")
	stop := rr.run(t)
	total := events(t, db, 5)
	eventually.Within(t, 60*time.Second, "both endpoints to get every event", func() bool { return good.Unique() >= total && st.Unique() >= total })
	stop()
	store, err := checkpoint.OpenFile(rr.cfg.Checkpoint.Path)
	if err != nil {
		t.Fatal(err)
	}
	setFlavor := func(flavor string) string {
		t.Helper()
		cp, err := store.Load(context.Background(), "hooks/st")
		if err != nil {
			t.Fatal(err)
		}
		was := cp.Flavor
		cp.Flavor = flavor
		if err := store.Save(context.Background(), "hooks/st", cp); err != nil {
			t.Fatal(err)
		}
		return was
	}
	flavor := setFlavor("mysql") // the source is MariaDB: its pipeline stops
	rl := startRelay(t, rr.cfg, relay.Options{Logger: slog.New(rr.logs)})
	waiting := events(t, db, 5)
	total += waiting
	eventually.Within(t, 60*time.Second, "the good endpoint to get every event", func() bool { return good.Unique() >= total })
	var e gateway.EndpointStats
	eventually.Within(t, 10*time.Second, "/endpoints to show hooks/st stopped with its cursor", func() bool {
		e = rr.endpoints(t)["hooks/st"]
		return e.State == "stopped" && e.Cursor != "" && !e.HeldSince.IsZero()
	}, func() { t.Logf("/endpoints hooks/st: %+v", e) })
	if !strings.Contains(e.Stopped, "mysql") {
		t.Errorf("/endpoints hooks/st says it stopped on %q, want the checkpoint's flavor", e.Stopped)
	}
	if err := rl.stop(t); err == nil || !strings.Contains(err.Error(), "hooks/st") {
		t.Fatalf("relay: %v; want the stopped endpoint's error", err)
	}
	if got := st.Unique(); got != total-waiting {
		t.Fatalf("the stopped endpoint got %d events, want the %d before it stopped", got, total-waiting)
	}
	setFlavor(flavor)
	stop = rr.run(t)
	total += events(t, db, 2)
	eventually.Within(t, 60*time.Second, "the endpoint, fixed, to get every event committed while it was stopped", func() bool {
		return st.Unique() >= total && good.Unique() >= total
	}, func() { t.Logf("hooks/st got %d of %d", st.Unique(), total) })
	stop()
}
