package metrics_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	amqp "github.com/rabbitmq/amqp091-go"
	goredis "github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/internal/eventually"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/metrics"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/relaytest"
	"github.com/outbox-relay/outbox-relay/sink/sinktest"
)

var srv *testserver.Server

func TestMain(m *testing.M) { testserver.Main(m, testserver.Options{ServerID: 1}, &srv) }

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// scrape reads /metrics into metric families by name.
func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics = %d", resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return mfs
}

// value is the value of the series of name whose labels include want.
func value(mfs map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	mf := mfs[name]
	if mf == nil {
		return 0, false
	}
next:
	for _, m := range mf.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		}
	}
	return 0, false
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A relay with http.listen serves every documented metric once events flow,
// counts exactly the events it delivered, reports 0 lag once a heartbeat
// says it is caught up, and is live and ready; the listener is gone after
// the relay stops.
func TestRunningRelayExposesEveryDocumentedMetric(t *testing.T) {
	r := runRelay(t, `[{name: out, type: stdout}]`)
	db, dbname, base := r.db, r.dbname, r.base
	if code, body := get(t, base+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d %q", code, body)
	}

	const txns, perTxn = 5, 4
	for i := range txns {
		tx, err := db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		for j := range perTxn {
			id := fmt.Sprintf("m-%d-%d", i, j)
			if _, err := tx.Exec("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES (?, 'order', ?, 'created', ?)",
				id, fmt.Sprintf("a%d", j), outboxtest.Payload(id, j)); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	const want = txns * perTxn
	sinkLabel := map[string]string{"sink": "out"}
	var mfs map[string]*dto.MetricFamily
	eventually.Within(t, 30*time.Second, "20 deliveries, a checkpoint save and a heartbeat after them", func() bool {
		mfs = scrape(t, base)
		d, _ := value(mfs, "outbox_relay_events_delivered_total", sinkLabel)
		lag, _ := value(mfs, "outbox_relay_replication_lag_seconds", sinkLabel)
		_, saved := value(mfs, "outbox_relay_checkpoint_binlog_purge_margin_files", sinkLabel)
		inflight, _ := value(mfs, "outbox_relay_in_flight_events", sinkLabel)
		return d == want && saved && lag == 0 && inflight == 0
	})

	for _, name := range metrics.Names {
		if mfs[name] == nil {
			t.Errorf("%s is documented but the running relay does not expose it", name)
		}
	}
	for name := range mfs {
		if strings.HasPrefix(name, "outbox_relay_") && !contains(metrics.Names, name) {
			t.Errorf("the relay exposes %s, which is not in metrics.Names (document it)", name)
		}
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		ok     func(float64) bool
		want   string
	}{
		{"outbox_relay_outbox_events_total", map[string]string{"sink": "out", "table": dbname + ".outbox"}, eq(want), "20"},
		{"outbox_relay_delivery_latency_seconds", sinkLabel, eq(want), "20 observations"},
		{"outbox_relay_binlog_events_total", sinkLabel, func(v float64) bool { return v >= txns*3 }, ">= 15 (GTID, rows, XID per transaction)"},
		{"outbox_relay_source_heartbeats_total", sinkLabel, func(v float64) bool { return v >= 1 }, ">= 1"},
		{"outbox_relay_source_connected", sinkLabel, eq(1), "1"},
		{"outbox_relay_sink_up", sinkLabel, eq(1), "1"},
		{"outbox_relay_checkpoint_saves_total", sinkLabel, func(v float64) bool { return v >= 1 }, ">= 1"},
		{"outbox_relay_checkpoint_binlog_purge_margin_files", sinkLabel, func(v float64) bool { return v >= 0 }, ">= 0"},
		{"outbox_relay_events_failed_total", map[string]string{"sink": "out", "reason": "retriable"}, eq(0), "0"},
		{"outbox_relay_events_dead_lettered_total", map[string]string{"sink": "out", "reason": "permanent"}, eq(0), "0"},
		{"outbox_relay_oldest_unacked_age_seconds", sinkLabel, eq(0), "0"},
		{"outbox_relay_build_info", map[string]string{"version": "v9.9.9-test"}, eq(1), "1"},
	} {
		got, ok := value(mfs, c.name, c.labels)
		if !ok || !c.ok(got) {
			t.Errorf("%s%v = %v (present %v), want %s", c.name, c.labels, got, ok, c.want)
		}
	}
	if code, body := get(t, base+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz when caught up = %d %q", code, body)
	}

	if err := r.stop(); err != nil {
		t.Fatalf("relay: %v", err)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Fatal("the HTTP listener still answers after the relay stopped")
	}
}

// testRelay is a relay run by runRelay.
type testRelay struct {
	db     *sql.DB // of its outbox database
	dbname string
	base   string       // of its HTTP listener: "http://127.0.0.1:port"
	stop   func() error // ends it and returns its error
}

// runRelay runs a relay (version v9.9.9-test) on a fresh outbox database
// of srv with the sinks of sinksYAML and http.listen on a free port, and
// waits until /readyz answers 200.
func runRelay(t *testing.T, sinksYAML string) testRelay {
	t.Helper()
	r := startRelay(t, sinksYAML, relay.Options{
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	eventually.Within(t, 30*time.Second, "/readyz to answer 200", func() bool {
		code, _ := getQuiet(r.base + "/readyz")
		return code == http.StatusOK
	})
	return r
}

// startRelay runs a relay as runRelay does, with opts (Stdout and Version
// set here), and waits only until it serves HTTP, not until it is ready.
func startRelay(t *testing.T, sinksYAML string, opts relay.Options) testRelay {
	t.Helper()
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	if _, err := db.Exec(outboxtest.Schema); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	cfg, err := config.Parse(fmt.Appendf(nil, `
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %s.outbox}]
checkpoint: {path: %s, interval: 200ms, start: current}
sinks: %s
http: {listen: %q}
`, srv.Port, testserver.ServerID(), dbname, filepath.Join(t.TempDir(), "cp.json"), sinksYAML, addr))
	if err != nil {
		t.Fatal(err)
	}
	opts.Stdout, opts.Version = io.Discard, "v9.9.9-test"
	r := relaytest.Start(t, cfg, opts)
	stop := func() error { return r.Stop(t) }
	t.Cleanup(func() { _ = stop() })
	base := "http://" + addr
	eventually.Within(t, 30*time.Second, "/healthz to answer 200", func() bool {
		code, _ := getQuiet(base + "/healthz")
		return code == http.StatusOK
	})
	return testRelay{db: db, dbname: dbname, base: base, stop: stop}
}

func eq(want float64) func(float64) bool { return func(v float64) bool { return v == want } }

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func getQuiet(url string) (int, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// A relay with a NATS JetStream, a Redis Streams and a RabbitMQ sink beside
// a stdout one exposes each sink's series as it does the others': every
// event counted delivered and its latency observed, sink_up 1, nothing in
// flight, and a series of the metric the dashboard's $sink choices come
// from, so each sink is on the dashboard.
func TestEverySinkTypeHasItsSeries(t *testing.T) {
	sinktest.Require(t, "nats-server (JetStream)", "127.0.0.1:4222")
	sinktest.Require(t, "redis-server", "127.0.0.1:6379")
	sinktest.Require(t, "rabbitmq", "127.0.0.1:5672")
	u := sinktest.Unique()
	// RabbitMQ: a queue bound to amq.topic for this test's routing keys, so
	// that no message returns unroutable.
	conn, err := amqp.Dial("amqp://guest:guest@127.0.0.1:5672/")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("m"+u, false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	defer ch.QueueDelete("m"+u, false, false, false)
	if err := ch.QueueBind("m"+u, "m"+u+".#", "amq.topic", false, nil); err != nil {
		t.Fatal(err)
	}
	rd := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
	defer rd.Close()
	defer rd.Del(context.Background(), "m"+u+":outbox")
	nc, err := natsgo.Connect("nats://127.0.0.1:4222")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	defer js.DeleteStream(context.Background(), "M"+u)

	r := runRelay(t, fmt.Sprintf(`
  - {name: out, type: stdout}
  - {name: js, type: nats, nats: {urls: ["nats://127.0.0.1:4222"], stream: M%s, subject: "m%s.{{.AggregateType}}", create_stream: {enabled: true, subjects: ["m%s.>"], storage: memory}}}
  - {name: rd, type: redis, redis: {addr: "127.0.0.1:6379", stream: "m%s:outbox"}}
  - {name: mq, type: rabbitmq, rabbitmq: {addr: "127.0.0.1:5672", exchange: amq.topic, routing_key: "m%s.{{.AggregateType}}"}}`, u, u, u, u, u))
	db, base := r.db, r.base
	const want = 12
	for i := range want {
		id := fmt.Sprintf("s-%d", i)
		if _, err := db.Exec("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES (?, 'order', ?, 'created', ?)",
			id, fmt.Sprintf("a%d", i%3), outboxtest.Payload(id, i)); err != nil {
			t.Fatal(err)
		}
	}
	sinks := []string{"out", "js", "rd", "mq"}
	var mfs map[string]*dto.MetricFamily
	// A scrape gathers the collectors concurrently: the delivered counter
	// may be read after an event the latency histogram was read before.
	// Wait for a scrape in which both hold every event.
	eventually.Within(t, 60*time.Second, "every sink to deliver every event, with its latency", func() bool {
		mfs = scrape(t, base)
		for _, s := range sinks {
			l := map[string]string{"sink": s}
			d, _ := value(mfs, "outbox_relay_events_delivered_total", l)
			n, _ := value(mfs, "outbox_relay_delivery_latency_seconds", l)
			if d != want || n != want {
				return false
			}
		}
		return true
	})
	dash, _ := readDashboard(t)
	choices := sinkVariable(t, dash)
	for _, s := range sinks {
		l := map[string]string{"sink": s}
		if v, ok := value(mfs, "outbox_relay_sink_up", l); !ok || v != 1 {
			t.Errorf("sink %s: outbox_relay_sink_up = %v (present %v), want 1", s, v, ok)
		}
		if v, ok := value(mfs, "outbox_relay_delivery_latency_seconds", l); !ok || v != want {
			t.Errorf("sink %s: %v latency observations (present %v), want %d", s, v, ok, want)
		}
		if _, ok := value(mfs, choices, l); !ok {
			t.Errorf("sink %s has no %s series: it is not among the dashboard's $sink choices", s, choices)
		}
	}
	if err := r.stop(); err != nil {
		t.Fatalf("relay: %v", err)
	}
}
