package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/pipeline"
	"github.com/outbox-relay/outbox-relay/sink"
)

var (
	_ canal.Observer              = (*SourceObserver)(nil)
	_ pipeline.Observer           = (*PipelineObserver)(nil)
	_ pipeline.DeadLetterObserver = (*PipelineObserver)(nil)
)

// clock is a settable time source for the scrape-time gauges.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newTest(t *testing.T) (*Metrics, *prometheus.Registry, *clock) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	m, err := New(reg, "v1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	m.SetClock(c.now)
	return m, reg, c
}

// populated feeds one sink's observers every kind of fact.
func populated(t *testing.T) (*Metrics, *prometheus.Registry, *clock) {
	m, reg, c := newTest(t)
	src := m.Source("kafka", "shop.outbox")
	p := m.Pipeline("kafka")
	src.Server("replica-a:3306", false)
	src.Server("replica-b:3306", true)
	src.Connected()
	src.BinlogEvent()
	src.OutboxEvents("shop.outbox", 3)
	src.Transaction(c.t.Add(-2 * time.Second))
	e := &event.Event{ID: "1", CommitTime: c.t.Add(-time.Second)}
	p.Delivered(e, c.t)
	p.Failed(e, errors.New("boom"), false)
	p.Failed(e, sink.Permanent(errors.New("rejected")), true)
	p.DeadLettered(e, "rejected")
	p.InFlight(2, 400, c.t.Add(-5*time.Second))
	p.CheckpointSaved(event.Position{File: "bin.000002", Pos: 4}, c.t)
	p.SinkUp(true)
	m.SetBinaryLogs([]string{"bin.000001", "bin.000002", "bin.000003"})
	return m, reg, c
}

func TestMetricsPassPromlint(t *testing.T) {
	_, reg, _ := populated(t)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) < len(Names) {
		t.Fatalf("gathered %d metric families, want at least %d", len(mfs), len(Names))
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

func TestEveryNamesMetricIsRegisteredAndNoOther(t *testing.T) {
	_, reg, _ := populated(t)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, mf := range mfs {
		got[mf.GetName()] = true
	}
	for _, name := range Names {
		if !got[name] {
			t.Errorf("%s is documented but not exposed", name)
		}
		delete(got, name)
	}
	for name := range got {
		t.Errorf("%s is exposed but not in Names", name)
	}
}

func TestScrapeTimeGauges(t *testing.T) {
	m, reg, c := populated(t)
	c.t = c.t.Add(10 * time.Second)
	for _, tc := range []struct {
		name, metric string
		want         float64
	}{
		{"lag is now minus the last commit read", "outbox_relay_replication_lag_seconds", 12},
		{"oldest age is now minus the oldest in-flight commit", "outbox_relay_oldest_unacked_age_seconds", 15},
		{"the checkpoint's file has one older file before it", "outbox_relay_checkpoint_binlog_purge_margin_files", 1},
		{"the checkpoint's file has one newer file after it", "outbox_relay_checkpoint_binlog_behind_files", 1},
		{"the server has three files", "outbox_relay_source_binary_logs", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := gaugeValue(t, reg, tc.metric); got != tc.want {
				t.Fatalf("%s = %v, want %v", tc.metric, got, tc.want)
			}
		})
	}
	src := m.Source("kafka")
	src.Heartbeat()
	c.t = c.t.Add(3 * time.Second)
	if got := gaugeValue(t, reg, "outbox_relay_replication_lag_seconds"); got != 0 {
		t.Fatalf("lag after a heartbeat = %v, want 0 (caught up)", got)
	}
	src.Reconnect()
	c.t = c.t.Add(4 * time.Second)
	if got := gaugeValue(t, reg, "outbox_relay_replication_lag_seconds"); got != 7 {
		t.Fatalf("lag 4s after a reconnect, 7s after the last heartbeat = %v, want 7 (behind since that heartbeat)", got)
	}
	if got := testutil.ToFloat64(m.connected.WithLabelValues("kafka")); got != 0 {
		t.Fatalf("source_connected after Reconnect = %v, want 0", got)
	}
}

func gaugeValue(t *testing.T, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.Metric) == 1 {
			return mf.Metric[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("%s: not exactly one series gathered", name)
	return 0
}

func TestPurgeMargin(t *testing.T) {
	logs := []string{"b.999998", "b.999999", "b.1000000"}
	for _, tc := range []struct {
		name           string
		file           string
		margin, behind int
	}{
		{"the checkpoint in the oldest file has no margin", "b.999998", 0, 2},
		{"the checkpoint in the newest file is not behind", "b.1000000", 2, 0},
		{"a seven-digit suffix sorts after six digits", "b.999999", 1, 1},
		{"a purged file has margin -1", "b.000001", -1, 3},
		{"a file newer than the last poll is ahead of all", "b.1000001", 3, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, b := purgeMargin(logs, tc.file)
			if m != tc.margin || b != tc.behind {
				t.Fatalf("purgeMargin(%s) = %d, %d; want %d, %d", tc.file, m, b, tc.margin, tc.behind)
			}
		})
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestReasonClasses(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       error
		permanent bool
		want      string
	}{
		{"a permanent error is permanent", sink.Permanent(errors.New("413")), false, ReasonPermanent},
		{"the pipeline's permanent flag wins", errors.New("x"), true, ReasonPermanent},
		{"a Retry-After is backoff", sink.BackOff(errors.New("429"), time.Second), false, ReasonBackoff},
		{"a deadline is a timeout", fmt.Errorf("write: %w", context.DeadlineExceeded), false, ReasonTimeout},
		{"a net timeout is a timeout", &net.OpError{Op: "read", Err: timeoutErr{}}, false, ReasonTimeout},
		{"a refused dial is connection", &net.OpError{Op: "dial", Err: errors.New("connection refused")}, false, ReasonConnection},
		{"a broker dying mid-request is connection", fmt.Errorf("write to kafka topic %q: kafka.(*Client).Produce: %w", "orders", io.ErrUnexpectedEOF), false, ReasonConnection},
		{"a reset is connection", &net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, false, ReasonConnection},
		{"anything else is retriable", errors.New("broker says no"), false, ReasonRetriable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Reason(tc.err, tc.permanent); got != tc.want {
				t.Fatalf("Reason(%v, %v) = %s, want %s", tc.err, tc.permanent, got, tc.want)
			}
		})
	}
}

func TestReadiness(t *testing.T) {
	for _, tc := range []struct {
		name   string
		setup  func(m *Metrics, c *clock)
		ready  bool
		reason string
	}{
		{"no pipeline yet is not ready", func(*Metrics, *clock) {}, false, "no pipeline"},
		{"a standby says it waits for the lock, not that a stream is down", func(m *Metrics, c *clock) {
			m.Standby(true)
		}, false, "standby: waiting for the checkpoint lock, which another relay holds"},
		{"a stream not yet connected is not ready", func(m *Metrics, c *clock) {
			m.Source("a")
			m.Pipeline("a").SinkConnected(nil)
		}, false, "sink a: binlog stream not connected"},
		{"a sink down at start is named with its error, not the stream", func(m *Metrics, c *clock) {
			m.Source("a").Connected()
			m.Pipeline("a").SinkConnected(errors.New("connect to redis 127.0.0.1:1: connection refused"))
		}, false, "sink a: not connected (retrying): connect to redis 127.0.0.1:1: connection refused\n"},
		{"connected with nothing in flight is ready however old the checkpoint", func(m *Metrics, c *clock) {
			m.Source("a").Connected()
			p := m.Pipeline("a")
			p.SinkConnected(nil)
			p.InFlight(0, 0, time.Time{})
			c.t = c.t.Add(time.Hour)
		}, true, ""},
		{"events in flight with a recent save is ready", func(m *Metrics, c *clock) {
			m.Source("a").Connected()
			p := m.Pipeline("a")
			p.SinkConnected(nil)
			c.t = c.t.Add(time.Hour)
			p.CheckpointSaved(event.Position{}, c.t.Add(-time.Minute))
			p.InFlight(5, 100, c.t.Add(-time.Minute))
		}, true, ""},
		{"events in flight and no save for longer than the limit is not ready", func(m *Metrics, c *clock) {
			m.Source("a").Connected()
			m.Source("b").Connected()
			p := m.Pipeline("a")
			p.SinkConnected(nil)
			m.Pipeline("b").SinkConnected(nil)
			p.CheckpointSaved(event.Position{}, c.t)
			p.InFlight(5, 100, c.t)
			c.t = c.t.Add(3 * time.Minute)
		}, false, "sink a: 5 events in flight and the checkpoint has not advanced for 3m0s"},
		{"a sink waiting on dead letters the store does not take names the first and counts the others", func(m *Metrics, c *clock) {
			m.Source("a").Connected()
			p := m.Pipeline("a")
			p.SinkConnected(nil)
			refused := errors.New("Error 1406: Data too long")
			for _, id := range []string{"e2", "e1", "e3"} {
				p.DeadLetterWaiting(&event.Event{ID: id, Source: event.Source{GTID: "0-1-" + id}}, refused, "the fix")
			}
			p.DeadLetterWaiting(&event.Event{ID: "e3"}, nil, "")
		}, false, "sink a: waits on event e1 (GTID 0-1-e1): the dead-letter store does not take its record: Error 1406: Data too long; the fix (and 1 more events)"},
		{"a sink whose dead letters the store took is ready again", func(m *Metrics, c *clock) {
			m.Source("a").Connected()
			p := m.Pipeline("a")
			p.SinkConnected(nil)
			e := &event.Event{ID: "e1", Source: event.Source{File: "b.1", Pos: 4}}
			p.DeadLetterWaiting(e, errors.New("refused"), "the fix")
			p.DeadLetterWaiting(e, nil, "")
		}, true, ""},
		{"a reconnecting stream is not ready", func(m *Metrics, c *clock) {
			s := m.Source("a")
			m.Pipeline("a").SinkConnected(nil)
			s.Connected()
			s.Reconnect()
		}, false, "sink a: binlog stream not connected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, _, c := newTest(t)
			tc.setup(m, c)
			srv := httptest.NewServer(Handler(m, prometheus.NewRegistry(), 2*time.Minute))
			defer srv.Close()
			code, body := get(t, srv.URL+"/readyz")
			if (code == http.StatusOK) != tc.ready {
				t.Fatalf("/readyz = %d %q, want ready=%v", code, body, tc.ready)
			}
			if !tc.ready && (code != http.StatusServiceUnavailable || !strings.Contains(body, tc.reason)) {
				t.Fatalf("/readyz = %d %q, want 503 with %q", code, body, tc.reason)
			}
			if tc.ready && !strings.Contains(body, tc.reason) {
				t.Fatalf("/readyz = %d %q, want 200 with %q", code, body, tc.reason)
			}
			if strings.Contains(tc.reason, "not connected (retrying)") && strings.Contains(body, "binlog stream") {
				t.Fatalf("/readyz = %q: the sink's outage is blamed on the binlog stream", body)
			}
			if code, _ := get(t, srv.URL+"/healthz"); code != http.StatusOK {
				t.Fatalf("/healthz = %d, want 200", code)
			}
		})
	}
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

func TestNewFailsOnARegistererAlreadyHoldingTheMetricsAndUnregisterFreesIt(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg, "dev")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(reg, "dev"); err == nil {
		t.Fatal("a second New on the same registerer succeeded")
	}
	m.Unregister()
	if _, err := New(reg, "dev"); err != nil {
		t.Fatalf("New after Unregister: %v", err)
	}
}

// The pipeline observer counts what a restart skips and re-sends (the
// gateway's endpoints count on it too: gateway's
// TestEndpointMetricsCountResumesOnTheSink).
func TestPipelineObserversCountResumes(t *testing.T) {
	var _ pipeline.ResumeObserver = (*PipelineObserver)(nil)
	reg := prometheus.NewRegistry()
	m, err := New(reg, "test")
	if err != nil {
		t.Fatal(err)
	}
	o := m.Pipeline("k")
	o.Skipped("checkpoint")
	o.Skipped("readback")
	o.Skipped("readback")
	o.Resent()
	o.RecoverFellBack()
	for _, c := range []struct {
		c    prometheus.Collector
		want float64
	}{
		{m.skipped.WithLabelValues("k", "checkpoint"), 1},
		{m.skipped.WithLabelValues("k", "readback"), 2},
		{m.resent.WithLabelValues("k"), 1},
		{m.fallbacks.WithLabelValues("k"), 1},
	} {
		if got := testutil.ToFloat64(c.c); got != c.want {
			t.Errorf("%v = %v, want %v", c.c, got, c.want)
		}
	}
}
