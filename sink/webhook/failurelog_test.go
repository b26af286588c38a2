package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/retry"
)

// logLines is a JSON log written by several goroutines, read as lines.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// with returns the records whose msg is msg.
func (l *logLines) with(msg string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(l.buf.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// retryErrors records the errors Observer.Retry is given.
type retryErrors struct {
	nopObserver
	mu   sync.Mutex
	errs []error
}

func (o *retryErrors) Retry(err error) {
	o.mu.Lock()
	o.errs = append(o.errs, err)
	o.mu.Unlock()
}

func (o *retryErrors) all() []error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]error(nil), o.errs...)
}

const (
	logFailing      = "webhook endpoint failing; its events are retried"
	logStillFailing = "webhook endpoint still failing; its events are retried"
	logRecovered    = "webhook endpoint delivers again"
)

// An endpoint that fails says so once when it starts failing, at most once
// per interval while it goes on, and once when it delivers again (with the
// failed attempts of the run), however many attempts fail in between.
func TestAFailingEndpointLogsWhenItStartsAtMostOncePerIntervalAndWhenItRecovers(t *testing.T) {
	for _, tc := range []struct {
		name      string
		every     time.Duration
		wantStill int
	}{
		{"an interval longer than the outage logs no line between", time.Hour, 0},
		{"a zero interval logs every further failure", 0, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n atomic.Int32
			srv := newServer(t, nil, func(w http.ResponseWriter, _ *http.Request, _ request) {
				if n.Add(1) <= 5 {
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				w.WriteHeader(http.StatusNoContent)
			})
			var logs logLines
			cfg := testConfig(srv.URL)
			cfg.Secrets = nil
			obs := &retryErrors{}
			cfg.Observer = obs
			e, err := NewEndpoint(cfg, slog.New(slog.NewJSONHandler(&logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			e.logEvery = tc.every
			defer e.Close(context.Background())
			if err := write(t, e, ev("e1", "a")); err != nil {
				t.Fatalf("Write = %v, want delivered after 5 failures", err)
			}
			// The line is written just after the event's ack.
			for deadline := time.Now().Add(5 * time.Second); len(logs.with(logRecovered)) == 0 && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond)
			}
			if got := len(logs.with(logFailing)); got != 1 {
				t.Errorf("%d %q lines, want 1", got, logFailing)
			}
			if got := len(logs.with(logStillFailing)); got != tc.wantStill {
				t.Errorf("%d %q lines, want %d", got, logStillFailing, tc.wantStill)
			}
			rec := logs.with(logRecovered)
			if len(rec) != 1 || rec[0]["failed_attempts"] != float64(5) {
				t.Errorf("%q lines: %v, want one with failed_attempts 5", logRecovered, rec)
			}
			for _, err := range obs.all() {
				if err == nil || !strings.Contains(err.Error(), "503") {
					t.Errorf("Retry(%v), want the 503 it answered", err)
				}
			}
		})
	}
}

// An endpoint that refuses connections is logged at its first failed
// attempt, not when the event's retries run out, and its retries are
// reported with the connection error (so they count as reason
// "connection").
func TestAnEndpointRefusingConnectionsIsLoggedAtOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // connections are refused

	var logs logLines
	cfg := testConfig("http://" + addr + "/hook")
	cfg.Retry = RetryConfig{MaxAttempts: 30, InitialBackoff: time.Hour, MaxBackoff: time.Hour}
	obs := &retryErrors{}
	cfg.Observer = obs
	e, err := NewEndpoint(cfg, slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.Submit(ctx, []*event.Event{ev("e1", "a")}, func(int, error) {})

	deadline := time.Now().Add(10 * time.Second)
	for len(logs.with(logFailing)) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no %q line 10s after the first refused attempt", logFailing)
		}
		time.Sleep(10 * time.Millisecond)
	}
	rec := logs.with(logFailing)[0]
	if out, _ := rec["outcome"].(string); !strings.Contains(out, "connection refused") {
		t.Errorf("outcome %q, want the refusal", out)
	}
	errs := obs.all()
	if len(errs) != 1 || !retry.IsConnectionError(errs[0]) {
		t.Fatalf("Retry saw %v, want one connection error", errs)
	}
}
