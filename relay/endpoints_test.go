package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/receiver"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/relaytest"
	"github.com/outbox-relay/outbox-relay/sink/webhook"
)

// Endpoints as data: rows inserted, updated and deleted in the endpoints
// table while producers commit take effect for the transactions committed
// after the one that changed the row, on the sink's one shared stream.
func TestEndpointsTableChangesTakeEffectAfterTheirTransaction(t *testing.T) {
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	for _, q := range []string{
		`CREATE TABLE outbox (seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, id VARCHAR(64) NOT NULL UNIQUE,
		  aggregatetype VARCHAR(64) NOT NULL, aggregateid VARCHAR(64) NOT NULL, type VARCHAR(64) NOT NULL,
		  payload JSON NOT NULL, tenant VARCHAR(32) NOT NULL)`,
		webhook.EndpointsTableSchema,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	a, b := receiver.Start(t, nil), receiver.Start(t, nil)
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	// "static" is read at start; "late" is inserted mid-stream.
	if _, err := db.Exec(`INSERT INTO outbox_endpoints (id, url, secrets, tenant) VALUES ('static', ?, ?, 't1')`, a.URL+"/hook", secret); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %[3]s.outbox, headers: [tenant]}]
checkpoint: {path: %[4]s, interval: 100ms}
sinks:
  - name: hooks
    type: webhook
    webhook:
      endpoints_table:
        table: %[3]s.outbox_endpoints
        tenant_header: tenant
        defaults: {body: envelope, egress: {allow: [127.0.0.1]}}
`, srv.Port, testserver.ServerID(), dbname, filepath.Join(dir, "cp.json"))))
	if err != nil {
		t.Fatal(err)
	}
	rl := startRelay(t, cfg, relay.Options{Logger: relaytest.Stderr(slog.LevelError)})
	waitForCheckpoint(t, cfg.Checkpoint.Path)

	var seq int
	commit := func(tenants ...string) []string {
		tx, err := db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, tn := range tenants {
			seq++
			id := fmt.Sprintf("e%04d", seq)
			if _, err := tx.Exec(`INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, tenant) VALUES (?, 'order', ?, 'order.created', '{}', ?)`,
				id, "agg-"+tn, tn); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		return ids
	}
	exec := func(q string, args ...any) {
		if _, err := db.Exec(q, args...); err != nil {
			t.Fatal(err)
		}
	}
	// inTxn runs q in the same transaction as one event of tenant tn.
	inTxn := func(tn, q string, args ...any) string {
		tx, err := db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		seq++
		id := fmt.Sprintf("e%04d", seq)
		if _, err := tx.Exec(q, args...); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(`INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, tenant) VALUES (?, 'order', ?, 'order.created', '{}', ?)`,
			id, "agg-"+tn, tn); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		return id
	}

	var wantA, wantB []string
	wantA = append(wantA, commit("t1", "t2")[0])
	wantA = append(wantA, commit("t1")...)
	// "late" is created in a transaction with a t2 event: it gets the
	// events committed after it, not that one.
	inTxn("t2", `INSERT INTO outbox_endpoints (id, url, secrets, tenant) VALUES ('late', ?, ?, 't2')`, b.URL+"/hook", secret)
	ids := commit("t2", "t1")
	wantB = append(wantB, ids[0])
	wantA = append(wantA, ids[1])
	ids = commit("t1", "t2")
	wantA = append(wantA, ids[0])
	wantB = append(wantB, ids[1])
	// "static" moves from tenant t1 to t3: its pipeline restarts for its
	// new tenant once it has delivered what it was handed up to then.
	switchID := inTxn("t1", `UPDATE outbox_endpoints SET tenant = 't3' WHERE id = 'static'`)
	wantA = append(wantA, switchID) // the changing transaction's own event is routed with the old filter
	ids = commit("t1", "t3")
	wantA = append(wantA, ids[1])
	// "late" is disabled, then deleted: nothing after.
	disableID := inTxn("t2", `UPDATE outbox_endpoints SET enabled = 0 WHERE id = 'late'`)
	wantB = append(wantB, disableID)
	commit("t2")
	exec(`DELETE FROM outbox_endpoints WHERE id = 'late'`)
	ids = commit("t3", "t2")
	wantA = append(wantA, ids[0])

	waitForIDs := func(rc *receiver.Receiver, want []string) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for rc.Unique() < len(want) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitForIDs(a, wantA)
	waitForIDs(b, wantB)
	// Let anything that should not arrive have its chance.
	commit("t3")
	wantA = append(wantA, fmt.Sprintf("e%04d", seq))
	waitForIDs(a, wantA)
	// A new url restarts "static" with the new row: what is committed after
	// goes to the new address, nothing is lost or sent twice.
	c := receiver.Start(t, nil)
	exec(`UPDATE outbox_endpoints SET url = ? WHERE id = 'static'`, c.URL+"/hook")
	wantC := commit("t3", "t3")
	waitForIDs(c, wantC)
	if err := rl.stop(t); err != nil {
		t.Fatalf("relay: %v", err)
	}
	// Each received exactly its events, once, in order per aggregate (one
	// aggregate per tenant): events of two aggregates may interleave.
	ids2 := func(rc *receiver.Receiver) (all []string, perAgg map[string][]string) {
		perAgg = map[string][]string{}
		for _, d := range rc.Accepted("") {
			all = append(all, d.EventID)
			perAgg[d.AggregateID] = append(perAgg[d.AggregateID], d.EventID)
		}
		slices.Sort(all)
		return all, perAgg
	}
	for name, c := range map[string]struct {
		rc   *receiver.Receiver
		want []string
	}{"static": {a, wantA}, "late": {b, wantB}, "static at its new url": {c, wantC}} {
		all, perAgg := ids2(c.rc)
		if !slices.Equal(all, c.want) {
			t.Errorf("%s endpoint got %v, want %v", name, all, c.want)
		}
		for agg, ids := range perAgg {
			if !slices.IsSorted(ids) {
				t.Errorf("%s endpoint got aggregate %s's events out of commit order: %v", name, agg, ids)
			}
		}
	}
	// The deleted endpoint's checkpoint is gone, the other's is there.
	st, err := checkpoint.OpenFile(cfg.Checkpoint.Path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Load(context.Background(), "hooks/late"); err == nil {
		t.Errorf("the deleted endpoint's checkpoint is still in the store")
	}
	if _, err := st.Load(context.Background(), "hooks/static"); err != nil {
		t.Errorf("static endpoint's checkpoint: %v", err)
	}
}

// An endpoint that answers nothing but 503 for webhook.gateway.disable_after
// is disabled: its checkpoint says why, it stays disabled across a restart,
// and once enabled it resumes from its cursor and gets every event.
func TestFailingEndpointIsDisabledAndResumesWhenEnabled(t *testing.T) {
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	if _, err := db.Exec(outboxtest.Schema); err != nil {
		t.Fatal(err)
	}
	var down atomic.Bool
	down.Store(true)
	good := receiver.Start(t, nil)
	bad := receiver.Start(t, func(*http.Request, []byte, time.Duration) receiver.Reply {
		if down.Load() {
			return receiver.Reply{Status: 503}
		}
		return receiver.Reply{Status: 200}
	})
	dir := t.TempDir()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %s.outbox}]
checkpoint: {path: %s, interval: 100ms}
sinks:
  - name: hooks
    type: webhook
    webhook:
      gateway: {disable_after: 1s}
      endpoints:
        - {name: good, url: "%s/hook", body: envelope}
        - {name: bad, url: "%s/hook", body: envelope, retry: {initial_backoff: 50ms, max_backoff: 100ms, max_attempts: 1000}}
`, srv.Port, testserver.ServerID(), dbname, filepath.Join(dir, "cp.json"), good.URL, bad.URL)))
	if err != nil {
		t.Fatal(err)
	}
	start := func() *run { return startRelay(t, cfg, relay.Options{Logger: relaytest.Stderr(slog.LevelError + 4)}) }
	stop := func(r *run) {
		if err := r.stop(t); err != nil {
			t.Fatalf("relay: %v", err)
		}
	}
	r := start()
	waitForCheckpoint(t, cfg.Checkpoint.Path)
	w := &outboxtest.Workload{}
	outboxtest.Produce(context.Background(), t, db, w, 1, 20, []int{1, 2}, 5)
	disabled := func() string {
		st, err := checkpoint.OpenFile(cfg.Checkpoint.Path)
		if err != nil {
			t.Fatal(err)
		}
		cp, _ := st.Load(context.Background(), "hooks/bad")
		return cp.Disabled
	}
	deadline := time.Now().Add(60 * time.Second)
	for disabled() == "" && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if disabled() == "" {
		t.Fatal("the failing endpoint was not disabled")
	}
	// The healthy one went on.
	for good.Unique() < w.Events() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	stop(r)
	down.Store(false)
	// Still disabled after a restart: nothing reaches it.
	r = start()
	time.Sleep(2 * time.Second)
	stop(r)
	if n := len(bad.Accepted("")); n != 0 {
		t.Fatalf("the disabled endpoint accepted %d events", n)
	}
	// Enabled (what `outbox-relay endpoints enable` writes), it resumes.
	st, err := checkpoint.OpenFile(cfg.Checkpoint.Path)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := st.Load(context.Background(), "hooks/bad")
	if err != nil {
		t.Fatal(err)
	}
	cp.Disabled = ""
	if err := st.Save(context.Background(), "hooks/bad", cp); err != nil {
		t.Fatal(err)
	}
	r = start()
	deadline = time.Now().Add(60 * time.Second)
	for bad.Unique() < w.Events() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	stop(r)
	for name, rc := range map[string]*receiver.Receiver{"good": good, "bad": bad} {
		var d []outboxtest.Delivered
		for _, g := range rc.Accepted("") {
			d = append(d, outboxtest.Delivered{ID: g.EventID, AggregateID: g.AggregateID})
		}
		t.Run(name, func(t *testing.T) { outboxtest.Check(t, w, d, false) })
	}
}
