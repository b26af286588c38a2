package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/deadletter"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/sink/stdout"
	"github.com/outbox-relay/outbox-relay/sink/webhook"
)

// A dead letter whose event the endpoint's filter no longer selects is not
// "delivered" by being filtered out: replay keeps it and says why.
func TestDLQReplayKeepsARecordTheFilterNoLongerSelects(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "relay.yaml")
	os.WriteFile(cfgPath, []byte(fmt.Sprintf(`
tables: [{name: shop.outbox}]
checkpoint: {path: %s}
sinks:
  - name: hooks
    type: webhook
    webhook: {endpoints: [{name: a, url: "%s", filter: {event_types: ["order.*"]}}]}
`, filepath.Join(dir, "cp.json"), srv.URL)), 0o600)
	store, err := deadletter.OpenFile(filepath.Join(dir, "dead-letters"))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Put(context.Background(), deadletter.Letter{Sink: "hooks/a", Reason: "410", First: time.Now(), Last: time.Now(),
		Event: &event.Event{ID: "e1", AggregateID: "a", Type: "invoice.paid", Payload: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := mainCode(context.Background(), []string{"dlq", "replay", "--config", cfgPath, "--all"}, &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), "no longer selects it") {
		t.Fatalf("replay exited %d: %s%s", code, out.String(), errOut.String())
	}
	if hits.Load() != 0 {
		t.Fatal("the filtered event was sent")
	}
	if recs, _ := store.List(context.Background(), deadletter.Filter{}); len(recs) != 1 {
		t.Fatalf("the record was not kept: %d left", len(recs))
	}
}

// A dead letter of an endpoint that exists only in the endpoints table is
// replayed to it: replay reads the table.
func TestDLQReplayReachesATableEndpoint(t *testing.T) {
	var hits atomic.Int32
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer hook.Close()
	srv := testserver.Start(t, testserver.Options{ServerID: 16})
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	if _, err := db.Exec(webhook.EndpointsTableSchema); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO outbox_endpoints (id, url) VALUES ('b', ?)`, hook.URL+"/hook"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "relay.yaml")
	os.WriteFile(cfgPath, []byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root}
tables: [{name: %[2]s.outbox}]
checkpoint: {path: %[3]s}
sinks:
  - name: hooks
    type: webhook
    webhook: {endpoints_table: {table: %[2]s.outbox_endpoints, defaults: {egress: {allow: [127.0.0.1]}}}}
`, srv.Port, dbname, filepath.Join(dir, "cp.json"))), 0o600)
	store, err := deadletter.OpenFile(filepath.Join(dir, "dead-letters"))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Put(context.Background(), deadletter.Letter{Sink: "hooks/b", Reason: "503 for too long", First: time.Now(), Last: time.Now(),
		Event: &event.Event{ID: "e1", AggregateID: "a", Type: "order.paid", Payload: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := mainCode(context.Background(), []string{"dlq", "replay", "--config", cfgPath, "--sink", "hooks"}, &out, &errOut); code != 0 {
		t.Fatalf("replay exited %d: %s%s", code, out.String(), errOut.String())
	}
	if hits.Load() != 1 || !strings.Contains(out.String(), "replayed 1 dead letters") {
		t.Fatalf("replay: %d requests, %q", hits.Load(), out.String())
	}
	if recs, _ := store.List(context.Background(), deadletter.Filter{}); len(recs) != 0 {
		t.Fatalf("the replayed record was kept: %d left", len(recs))
	}
}

// dlq list --json prints each record's event as the stdout sink writes it
// (snake_case keys, a JSON payload as JSON), not Go's field names and a
// base64 payload.
func TestDLQListJSONPrintsTheStdoutSinksEventShape(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "relay.yaml")
	os.WriteFile(cfgPath, []byte(fmt.Sprintf(`
tables: [{name: shop.outbox}]
checkpoint: {path: %s}
sinks: [{name: out, type: stdout}]
`, filepath.Join(dir, "cp.json"))), 0o600)
	store, err := deadletter.OpenFile(filepath.Join(dir, "dead-letters"))
	if err != nil {
		t.Fatal(err)
	}
	events := []*event.Event{
		{ID: "e1", AggregateType: "order", AggregateID: "o-1", Type: "order.paid", Table: "shop.outbox",
			CommitTime: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Payload: []byte(`{"amount": 12}`),
			Headers: []event.Header{{Key: "tenant", Value: "t1"}}},
		{ID: "e2", AggregateID: "o-2", Table: "shop.outbox", Payload: []byte{0xff, 0x00}},
	}
	for _, e := range events {
		if err := store.Put(context.Background(), deadletter.Letter{Sink: "out", Reason: "rejected", First: time.Now(), Last: time.Now(), Event: e}); err != nil {
			t.Fatal(err)
		}
	}
	var out, errOut bytes.Buffer
	if code := mainCode(context.Background(), []string{"dlq", "list", "--config", cfgPath, "--json"}, &out, &errOut); code != 0 {
		t.Fatalf("dlq list --json exited %d: %s", code, errOut.String())
	}
	// What the stdout sink writes for the same events.
	var sunk bytes.Buffer
	if err := stdout.New(stdout.Config{}, &sunk).Write(context.Background(), events); err != nil {
		t.Fatal(err)
	}
	want := strings.Split(strings.TrimSpace(sunk.String()), "\n")
	got := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(got) != len(events) {
		t.Fatalf("want %d lines, got:\n%s", len(events), out.String())
	}
	for i, line := range got {
		var rec struct {
			ID, Sink, Reason string
			Event            json.RawMessage `json:"event"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("line %d is not JSON: %v\n%s", i, err, line)
		}
		var gotEv, wantEv any
		json.Unmarshal(rec.Event, &gotEv)
		json.Unmarshal([]byte(want[i]), &wantEv)
		if !reflect.DeepEqual(gotEv, wantEv) {
			t.Errorf("record %d: event\n%s\nwant the stdout sink's\n%s", i, rec.Event, want[i])
		}
		if rec.Sink != "out" || rec.Reason != "rejected" || rec.ID == "" {
			t.Errorf("record %d: the record's own fields are lost: %s", i, line)
		}
	}
	if !strings.Contains(got[0], `"payload":{"amount":12}`) || strings.Contains(out.String(), "AggregateID") {
		t.Errorf("want snake_case keys and the JSON payload as JSON:\n%s", out.String())
	}
}

// Replay reads the endpoints table as the relay does: a row with the name
// of an endpoint of the configuration (here in another case) never gets
// that endpoint's dead letters, and a row that cannot be used does not
// stop the others'.
func TestDLQReplayNeverHandsAConfiguredEndpointsLettersToARow(t *testing.T) {
	var configured, row, attacker atomic.Int32
	server := func(n *atomic.Int32) string {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { n.Add(1) }))
		t.Cleanup(s.Close)
		return s.URL + "/hook"
	}
	configuredURL, rowURL, attackerURL := server(&configured), server(&row), server(&attacker)
	srv := testserver.Start(t, testserver.Options{ServerID: 17})
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	if _, err := db.Exec(webhook.EndpointsTableSchema); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO outbox_endpoints (id, url) VALUES ('BILLING', ?), ('b', ?), ('bad', 'http://10.1.2.3/hook')`, attackerURL, rowURL); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "relay.yaml")
	os.WriteFile(cfgPath, []byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root}
tables: [{name: %[2]s.outbox}]
checkpoint: {path: %[3]s}
sinks:
  - name: hooks
    type: webhook
    webhook:
      endpoints: [{name: billing, url: "%[4]s"}]
      endpoints_table: {table: %[2]s.outbox_endpoints, defaults: {egress: {allow: [127.0.0.1]}}}
`, srv.Port, dbname, filepath.Join(dir, "cp.json"), configuredURL)), 0o600)
	store, err := deadletter.OpenFile(filepath.Join(dir, "dead-letters"))
	if err != nil {
		t.Fatal(err)
	}
	for i, sink := range []string{"hooks/billing", "hooks/b"} {
		if err := store.Put(context.Background(), deadletter.Letter{Sink: sink, Reason: "503 for too long", First: time.Now(), Last: time.Now(),
			Event: &event.Event{ID: fmt.Sprintf("e%d", i), AggregateID: "a", Type: "order.paid", Payload: []byte(`{}`)}}); err != nil {
			t.Fatal(err)
		}
	}
	var out, errOut bytes.Buffer
	if code := mainCode(context.Background(), []string{"dlq", "replay", "--config", cfgPath, "--sink", "hooks"}, &out, &errOut); code != 0 {
		t.Fatalf("replay exited %d: %s%s", code, out.String(), errOut.String())
	}
	if configured.Load() != 1 || row.Load() != 1 || attacker.Load() != 0 {
		t.Fatalf("replay: configured endpoint %d requests, table endpoint %d, the clashing row's url %d; want 1, 1, 0 (%s%s)",
			configured.Load(), row.Load(), attacker.Load(), out.String(), errOut.String())
	}
	if !strings.Contains(errOut.String(), `row \"BILLING\" refused: endpoint hooks/billing`) && !strings.Contains(errOut.String(), `row "BILLING" refused: endpoint hooks/billing`) {
		t.Errorf("no error log of the refused row: %s", errOut.String())
	}
}

// MariaDB's utf8mb4 collations take "ß" for "s" and "ı" for "i": with the
// dead letters in a table compared that way, `dlq list --sink hooks/strase`
// listed hooks/straße's letters and `dlq purge --sink hooks/strase`
// deleted them. The table's keys are binary: each command reaches only the
// sink it names.
func TestDLQListAndPurgeTellStraßeFromStrase(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{NoBinlog: true})
	name := srv.NewDatabase(t)
	srv.Exec(t, "ALTER DATABASE "+name+" CHARACTER SET utf8mb4") // its default collation, utf8mb4_general_ci
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "relay.yaml")
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf(`
tables: [{name: shop.outbox}]
checkpoint: {store: mysql, dsn: "root@tcp(127.0.0.1:%d)/%s"}
sinks:
  - name: hooks
    type: webhook
    webhook: {endpoints: [{name: straße, url: "http://127.0.0.1:1/"}, {name: ıd, url: "http://127.0.0.1:1/"}]}
`, srv.Port, name)), 0o600); err != nil {
		t.Fatal(err)
	}
	store, err := deadletter.OpenMySQL(context.Background(), srv.DB(t, name), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, sink := range []string{"hooks/straße", "hooks/ıd"} {
		if err := store.Put(context.Background(), deadletter.Letter{Sink: sink, Reason: "400", First: time.Now(), Last: time.Now(),
			Event: &event.Event{ID: "e-" + sink, AggregateID: "a", Payload: []byte(`{}`)}}); err != nil {
			t.Fatal(err)
		}
	}
	cli := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := mainCode(context.Background(), append(args, "--config", cfgPath), &out, &errOut); code != 0 {
			t.Fatalf("%v exited %d: %s%s", args, code, out.String(), errOut.String())
		}
		return out.String()
	}
	for _, lookalike := range []string{"hooks/strase", "hooks/id"} {
		if out := cli("dlq", "list", "--sink", lookalike); !strings.Contains(out, "0 dead letters") {
			t.Errorf("dlq list --sink %s:\n%s\nwant none", lookalike, out)
		}
		if out := cli("dlq", "purge", "--sink", lookalike); !strings.Contains(out, "purged 0 dead letters") {
			t.Errorf("dlq purge --sink %s: %s, want none purged", lookalike, out)
		}
	}
	for _, sink := range []string{"hooks/straße", "hooks/ıd"} {
		if out := cli("dlq", "list", "--sink", sink); !strings.Contains(out, "1 dead letters") || !strings.Contains(out, "e-"+sink) {
			t.Errorf("dlq list --sink %s after the lookalikes' purges:\n%s\nwant its letter", sink, out)
		}
	}
}
