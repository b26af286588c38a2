package relay_test

import (
	"encoding/hex"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/internal/otlptest"
	"github.com/outbox-relay/outbox-relay/internal/receiver"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/relaytest"
)

// tracedRun runs a relay with a Kafka and a webhook sink over an outbox
// table with a traceparent column, commits a row with a sampled
// traceparent and one with a malformed one, waits until both sinks have
// both, stops the relay (which flushes its spans) and returns what the
// sinks got.
func tracedRun(t *testing.T, tracing bool) (*collector, *receiver.Receiver) {
	k := startKafka(t)
	dbname, _ := newOutbox(t)
	db := srv.DB(t, dbname)
	if _, err := db.Exec(`ALTER TABLE outbox ADD COLUMN traceparent VARCHAR(64) NULL, ADD COLUMN tracestate VARCHAR(256) NULL`); err != nil {
		t.Fatal(err)
	}
	hook := receiver.Start(t, nil)
	cfg, err := config.Parse(fmt.Appendf(nil, `
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %s.outbox, columns: {traceparent: traceparent, tracestate: tracestate}}]
checkpoint: {path: %s, interval: 200ms}
tracing: {enabled: %v}
sinks:
  - {name: kafka, type: kafka, kafka: {brokers: [%s], create_topics: {enabled: true}}}
  - {name: hooks, type: webhook, webhook: {endpoints: [{name: a, url: "%s", body: envelope}]}}
`, srv.Port, testserver.ServerID(), dbname, filepath.Join(t.TempDir(), "cp.json"), tracing, k.ListenAddrs()[0], hook.URL))
	if err != nil {
		t.Fatal(err)
	}
	rl := startRelay(t, cfg, relay.Options{Logger: relaytest.Stderr(slog.LevelError)})
	waitForCheckpoint(t, cfg.Checkpoint.Path)
	time.Sleep(500 * time.Millisecond) // the endpoint's pipeline saves its start too
	c := collect(t, k.ListenAddrs(), "outbox.event.order")
	if _, err := db.Exec(`INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, traceparent, tracestate) VALUES
	  ('traced', 'order', 'o1', 'created', '{}', ?, 'congo=t61rcWkgMzE'),
	  ('malformed', 'order', 'o1', 'paid', '{}', 'bogus', NULL)`, rowParent); err != nil {
		t.Fatal(err)
	}
	c.waitFor(t, 2, 30*time.Second)
	for deadline := time.Now().Add(30 * time.Second); hook.Unique() < 2 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if err := rl.stop(t); err != nil {
		t.Fatalf("relay: %v", err)
	}
	return c, hook
}

const (
	rowTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	rowSpan   = "00f067aa0ba902b7"
	rowParent = "00-" + rowTrace + "-" + rowSpan + "-01"
)

// A trace crosses the relay: the row's traceparent reaches the Kafka record
// and the webhook request, and each sink's span (exported over OTLP) is its
// child with the messaging attributes. A malformed traceparent is dropped
// and its event delivered all the same.
func TestTraceCrossesTheRelay(t *testing.T) {
	rc := &otlptest.Receiver{}
	rc.StartHTTP(t)
	c, hook := tracedRun(t, true)

	for _, r := range c.records() {
		want := map[string]string{"traced": rowParent, "malformed": ""}[r.headers["id"]]
		if r.headers["traceparent"] != want {
			t.Errorf("kafka record %s: traceparent %q, want %q", r.headers["id"], r.headers["traceparent"], want)
		}
	}
	for _, d := range hook.Accepted("") {
		want := map[string]string{"traced": rowParent, "malformed": ""}[d.EventID]
		if d.TraceParent != want {
			t.Errorf("webhook request %s: traceparent %q, want %q", d.EventID, d.TraceParent, want)
		}
	}
	checkRelaySpans(t, rc.Spans())
}

// checkRelaySpans checks that the traced row has a span per sink, each the
// child of the row's traceparent with the GTID and table.
func checkRelaySpans(t *testing.T, spans []*tracepb.Span) {
	t.Helper()
	children := map[string]bool{}
	for _, s := range spans {
		a := otlptest.Attrs(s)
		if a["messaging.message.id"] != "traced" {
			continue
		}
		if hex.EncodeToString(s.TraceId) != rowTrace || hex.EncodeToString(s.ParentSpanId) != rowSpan {
			t.Errorf("span %q is in trace %x under %x, want the row's %s under %s", s.Name, s.TraceId, s.ParentSpanId, rowTrace, rowSpan)
		}
		if a["outbox_relay.gtid"] == "" || a["outbox_relay.table"] == "" {
			t.Errorf("span %q lacks the GTID or table: %v", s.Name, a)
		}
		children[a["messaging.system"]+" "+a["messaging.destination.name"]] = true
		t.Logf("span as OTLP JSON: %s", protojson.Format(s))
	}
	for _, want := range []string{"kafka kafka", "webhook hooks/a"} {
		if !children[want] {
			t.Errorf("no span of the traced row for %q (got %v)", want, children)
		}
	}
}

// With tracing off (the default) nothing is exported, even with the OTEL_*
// variables set; the row's trace context is carried all the same.
func TestTracingOffExportsNothing(t *testing.T) {
	rc := &otlptest.Receiver{}
	rc.StartHTTP(t)
	c, _ := tracedRun(t, false)
	if n := rc.Posts(); n != 0 {
		t.Errorf("the receiver got %d exports with tracing off, want 0", n)
	}
	for _, r := range c.records() {
		if r.headers["id"] == "traced" && r.headers["traceparent"] != rowParent {
			t.Errorf("kafka record: traceparent %q, want %q", r.headers["traceparent"], rowParent)
		}
	}
}

// The same trace through a real OpenTelemetry Collector (OTLP receiver,
// file exporter; $OUTBOX_RELAY_OTELCOL, built by .ci/run): the spans it
// writes are the children of the row's traceparent, with the attributes.
func TestTraceReachesARealCollector(t *testing.T) {
	col := otlptest.StartCollector(t)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", col.Endpoint)
	c, hook := tracedRun(t, true)
	if len(c.records()) < 2 || hook.Unique() < 2 {
		t.Fatalf("delivered %d records and %d requests, want 2 each", len(c.records()), hook.Unique())
	}
	checkRelaySpans(t, col.Spans(t))
}
