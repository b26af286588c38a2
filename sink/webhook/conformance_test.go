package webhook_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink/sinktest"
	"github.com/outbox-relay/outbox-relay/sink/webhook"
)

// receiver is an httptest endpoint that keeps each 2xx request's id and
// body, answers 503 while broken and 400 to a poisoned event.
type receiver struct {
	mu     sync.Mutex
	got    []sinktest.Received
	broken bool
	budget int // requests answered before breaking; <0 unlimited
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	id := r.Header.Get("webhook-id")
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.budget == 0 {
		rc.broken, rc.budget = true, -1
	}
	if rc.budget > 0 {
		rc.budget--
	}
	switch {
	case rc.broken:
		w.WriteHeader(http.StatusServiceUnavailable)
	case strings.HasSuffix(id, "-poison"):
		w.WriteHeader(http.StatusBadRequest)
	default:
		rc.got = append(rc.got, sinktest.Received{ID: id, Payload: body})
		w.WriteHeader(http.StatusNoContent)
	}
}

func (rc *receiver) Break()         { rc.mu.Lock(); rc.broken = true; rc.mu.Unlock() }
func (rc *receiver) BreakMidWrite() { rc.mu.Lock(); rc.budget = 100; rc.mu.Unlock() }
func (rc *receiver) Heal()          { rc.mu.Lock(); rc.broken, rc.budget = false, -1; rc.mu.Unlock() }

func (rc *receiver) read(*testing.T, int) []sinktest.Received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]sinktest.Received(nil), rc.got...)
}

// The raw body carries the event id (webhook-id) and the payload bytes; type,
// aggregate, source and extra columns are only in the envelope (some of
// them) or not sent at all.
func TestConformance(t *testing.T) {
	sinktest.Run(t, sinktest.Harness{
		New: func(t *testing.T) *sinktest.Target {
			rc := &receiver{budget: -1}
			srv := httptest.NewServer(rc)
			t.Cleanup(srv.Close)
			e, err := webhook.NewEndpoint(webhook.EndpointConfig{
				Name: "conformance", URL: srv.URL, Timeout: 5 * time.Second,
				Retry: webhook.RetryConfig{MaxAttempts: 10000, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond},
			}, nil)
			if err != nil {
				t.Fatal(err)
			}
			return &sinktest.Target{Sink: e, Read: rc.read, Fault: rc,
				Poison: func(e *event.Event) { e.ID += "-poison" }}
		},
	})
}
