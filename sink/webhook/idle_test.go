package webhook

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/sink"
)

// idleTable follows an endpoints table as the gateway that wakes
// endpoints builds it (no sink until Open), its rows' urls on loopback,
// with fast retries; logs and health are returned.
func idleTable(t *testing.T) (*tableEndpoints, *logLines, *gateway.Health) {
	t.Helper()
	logs, health := &logLines{}, gateway.NewHealth()
	wc := &SinkConfig{EndpointsTable: &TableConfig{Table: "shop.outbox_endpoints", Defaults: EndpointConfig{
		Retry:  RetryConfig{MaxAttempts: 20, InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond},
		Egress: Egress{Allow: []string{"127.0.0.1"}},
	}}}
	tbl, err := followTable(gateway.FanOutParams{Sink: "hooks", Config: wc, Health: health, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	te := tbl.(followed).te
	return te, logs, health
}

// rowAt is a usable row id whose url is url, rate limited to rate (0: the
// default, unlimited).
func rowAt(id, url string, rate float64) map[string]any {
	row := goodRow()
	row["id"], row["url"] = id, url
	if rate > 0 {
		row["rate_limit"] = rate
	}
	return row
}

// openSink wakes ep: its sink, connected, closed at the end of the test
// unless closed before.
func openSink(t *testing.T, ep gateway.Endpoint) *Endpoint {
	t.Helper()
	if ep.Sink != nil || ep.Open == nil {
		t.Fatalf("endpoint %s: Sink %v, Open set %v; want no sink until Open", ep.Key, ep.Sink, ep.Open != nil)
	}
	s, err := ep.Open()
	if err != nil {
		t.Fatal(err)
	}
	e := s.(*Endpoint)
	if err := e.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e
}

// An endpoint let go and woken again is one endpoint to what outlives its
// sinks: its rate limiter keeps its tokens (no fresh burst), its run of
// failed attempts is logged as one run, its health is the gateway's, and
// the shared transport keeps its connections (closing a sink closes
// nothing shared).
func TestAnEndpointWokenAgainCarriesWhatOutlivesItsSink(t *testing.T) {
	t.Run("the rate limiter keeps its tokens", func(t *testing.T) {
		srv := newServer(t, nil, ok)
		te, _, _ := idleTable(t)
		eps := te.loadRows([]map[string]any{rowAt("slow", srv.URL, 0.001)}) // one attempt per 1,000 s
		first := openSink(t, eps[0])
		if err := write(t, first, ev("e1", "a")); err != nil {
			t.Fatal(err)
		}
		if err := first.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		again := openSink(t, eps[0])
		if again.limiter == nil {
			t.Fatal("the woken endpoint has no rate limiter")
		}
		if tokens := again.limiter.Tokens(); tokens > 0.5 {
			t.Errorf("the woken endpoint's limiter holds %.3f tokens, want the spent one not refilled (about 0): a wake must not hand it a fresh burst", tokens)
		}
	})

	t.Run("its run of failures is one run across its sinks, and its health the gateway's", func(t *testing.T) {
		// It answers 503 to every attempt of e1, and to the first of e2.
		var e2 atomic.Int32
		srv := newServer(t, nil, func(w http.ResponseWriter, _ *http.Request, req request) {
			if req.id == "e1" || e2.Add(1) == 1 {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		})
		te, logs, health := idleTable(t)
		eps := te.loadRows([]map[string]any{rowAt("flaky", srv.URL, 0)})
		key := eps[0].Key
		first := openSink(t, eps[0])
		first.Submit(context.Background(), []*event.Event{ev("e1", "a")}, func(int, error) {})
		waitFor(t, "the first failed attempt's log line", func() bool { return len(logs.with(logFailing)) == 1 })
		waitFor(t, "the first failed attempt in the gateway's Health", func() bool { return !health.FailingSince(key).IsZero() })
		if err := first.Close(context.Background()); err != nil {
			t.Fatal(err)
		}

		again := openSink(t, eps[0])
		if err := write(t, again, ev("e2", "a")); err != nil { // fails once, then is delivered
			t.Fatal(err)
		}
		waitFor(t, "the line saying it delivers again", func() bool { return len(logs.with(logRecovered)) == 1 })
		if got := len(logs.with(logFailing)); got != 1 {
			t.Errorf("%d %q lines, want 1: the woken endpoint goes on with the run its last sink began", got, logFailing)
		}
		// At least one failed attempt of the first sink, and one of this one.
		if rec := logs.with(logRecovered)[0]; rec["failed_attempts"].(float64) < 2 {
			t.Errorf("%q says failed_attempts %v, want those of both its sinks (2 or more)", logRecovered, rec["failed_attempts"])
		}
		if !health.FailingSince(key).IsZero() {
			t.Error("delivered, the endpoint still shows as failing in the gateway's Health")
		}
	})

	t.Run("closing a sink closes no shared connection", func(t *testing.T) {
		var conns atomic.Int32
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
		srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				conns.Add(1)
			}
		}
		srv.Start()
		t.Cleanup(srv.Close)
		te, _, _ := idleTable(t)
		eps := te.loadRows([]map[string]any{rowAt("quiet", srv.URL, 0)})
		for i := range 3 {
			e := openSink(t, eps[0])
			if err := write(t, e, ev("e1", "a")); err != nil {
				t.Fatal(err)
			}
			if err := e.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := conns.Load(); got != 1 {
				t.Fatalf("after wake %d, the receiver saw %d connections, want the first one kept alive and used again", i+1, got)
			}
		}
	})
}

// waitFor waits, up to 10 s, until done says what it waits for happened.
func waitFor(t *testing.T, what string, done func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !done(); {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 10 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var _ sink.Sink = (*Endpoint)(nil)
