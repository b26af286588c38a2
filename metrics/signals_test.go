package metrics_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/eventually"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/relay"
)

// logLines is the relay's JSON log, written by many goroutines.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// find returns the records with msg whose attribute key is value.
func (l *logLines) find(msg, key, value string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(l.buf.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == msg && rec[key] == value {
			out = append(out, rec)
		}
	}
	return out
}

func insertEvent(t *testing.T, r testRelay, id string) {
	t.Helper()
	if _, err := r.db.Exec("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES (?, 'order', 'a1', 'created', ?)",
		id, outboxtest.Payload(id, 0)); err != nil {
		t.Fatal(err)
	}
}

// A Redis sink that is down at start is the sink's outage, not the
// source's: the binlog stream connects (source_connected 1), sink_up is 0,
// and /readyz names the sink and its connect error, not the stream.
func TestASinkDownAtStartIsNamedAsTheSink(t *testing.T) {
	closed := freeAddr(t) // nothing listens: connections are refused
	r := startRelay(t, fmt.Sprintf(`[{name: cache, type: redis, redis: {addr: %q, stream: signals, timeout: 500ms}}]`, closed),
		relay.Options{Logger: slog.New(slog.DiscardHandler)})
	sink := map[string]string{"sink": "cache"}
	eventually.Within(t, 30*time.Second, "source_connected{sink=cache} = 1 while Redis is down", func() bool {
		v, _ := value(scrape(t, r.base), "outbox_relay_source_connected", sink)
		return v == 1
	})
	insertEvent(t, r, "s1")
	var body string
	eventually.Within(t, 30*time.Second, "/readyz to name the sink's connect error", func() bool {
		var code int
		code, body = get(t, r.base+"/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "sink cache: not connected (retrying): connect to redis "+closed)
	})
	if strings.Contains(body, "binlog stream not connected") {
		t.Errorf("/readyz blames the binlog stream for the sink's outage:\n%s", body)
	}
	mfs := scrape(t, r.base)
	if v, ok := value(mfs, "outbox_relay_sink_up", sink); !ok || v != 0 {
		t.Errorf("sink_up{sink=cache} = %v (present %v), want 0", v, ok)
	}
	if v, _ := value(mfs, "outbox_relay_source_connected", sink); v != 1 {
		t.Errorf("source_connected{sink=cache} = %v once the stream is up, want 1", v)
	}
}

// A webhook endpoint's trouble is its own: one refusing connections is
// logged at once and its failures count as reason "connection"; one
// answering 503 for longer than the readiness threshold (1 s here, 2 min
// by default) does not make the relay unready.
func TestAWebhookEndpointsTroubleIsItsOwn(t *testing.T) {
	busy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer busy.Close()
	closed := freeAddr(t)
	var logs logLines
	const threshold = time.Second
	r := startRelay(t, fmt.Sprintf(`
  - name: hooks
    type: webhook
    webhook:
      endpoints:
        - {name: refused, url: "http://%s/hook", retry: {initial_backoff: 100ms, max_backoff: 200ms, max_attempts: 1000}}
        - {name: busy, url: %q, retry: {initial_backoff: 100ms, max_backoff: 200ms, max_attempts: 1000}}
`, closed, busy.URL), relay.Options{ReadyCheckpointAge: threshold,
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	eventually.Within(t, 30*time.Second, "/readyz to answer 200", func() bool {
		code, _ := getQuiet(r.base + "/readyz")
		return code == http.StatusOK
	})
	insertEvent(t, r, "w1")
	inserted := time.Now()

	eventually.Within(t, 10*time.Second, "a log line of the endpoint refusing connections", func() bool {
		return len(logs.find("webhook endpoint failing; its events are retried", "endpoint", "refused")) > 0
	})
	t.Logf("endpoint refusing connections logged %s after the insert", time.Since(inserted).Round(time.Millisecond))
	rec := logs.find("webhook endpoint failing; its events are retried", "endpoint", "refused")[0]
	if out, _ := rec["outcome"].(string); !strings.Contains(out, "connection refused") {
		t.Errorf("the line's outcome is %q, want the refusal", out)
	}
	eventually.Within(t, 10*time.Second, `failed_total{reason="connection"} and {reason="retriable"} (the 503s) to count`, func() bool {
		mfs := scrape(t, r.base)
		conn, _ := value(mfs, "outbox_relay_events_failed_total", map[string]string{"sink": "hooks", "reason": "connection"})
		other, _ := value(mfs, "outbox_relay_events_failed_total", map[string]string{"sink": "hooks", "reason": "retriable"})
		return conn > 0 && other > 0
	})
	// Both endpoints hold the event, unacknowledged, for well past the
	// threshold: the relay stays ready.
	eventually.Within(t, 30*time.Second, "both endpoints to hold the event for 3× the threshold", func() bool {
		var eps map[string][]struct {
			Endpoint   string  `json:"endpoint"`
			LagSeconds float64 `json:"lag_seconds"`
		}
		resp, err := http.Get(r.base + "/endpoints")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		if json.NewDecoder(resp.Body).Decode(&eps) != nil || len(eps["hooks"]) != 2 {
			return false
		}
		for _, e := range eps["hooks"] {
			if e.LagSeconds < 3*threshold.Seconds() {
				return false
			}
		}
		return true
	})
	if code, body := get(t, r.base+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz = %d %q while one endpoint answers 503 and one refuses connections, want 200 (their trouble is theirs)", code, body)
	}
}
