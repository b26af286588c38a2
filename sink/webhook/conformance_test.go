package webhook_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink"
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
		rc.got = append(rc.got, received(id, r.Header, body))
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

// received decodes a request as the receiver sees it: webhook-id, the
// percent-encoded metadata headers, the raw body.
func received(id string, h http.Header, body []byte) sinktest.Received {
	get := func(k string) string {
		v, err := url.PathUnescape(h.Get(k))
		if err != nil {
			return "undecodable " + h.Get(k)
		}
		return v
	}
	pos, _ := strconv.ParseUint(get(webhook.HeaderBinlogPos), 10, 32)
	return sinktest.Received{ID: id, Type: get(webhook.HeaderEventType), AggregateType: get(webhook.HeaderAggregateType),
		AggregateID: get(webhook.HeaderAggregateID), GTID: get(webhook.HeaderGTID), BinlogFile: get(webhook.HeaderBinlogFile),
		BinlogPos: uint32(pos), Table: get(webhook.HeaderTable),
		TraceParent: h.Get("traceparent"), TraceState: h.Get("tracestate"), Payload: body}
}

// A raw body request carries the event id (webhook-id), type, aggregate and
// source position in headers, and the payload bytes as the body; extra
// columns are not sent.
func TestConformance(t *testing.T) {
	sinktest.Run(t, sinktest.Harness{
		Carries: sinktest.Carries{Type: true, Aggregate: true, Source: true, Trace: true},
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
		Limits: []sinktest.Limit{
			{Name: "a line break in its id (the webhook-id header)", Exceed: func(e *event.Event) { e.ID += "\r\nX-Injected: 1" }},
		},
	})
}

// Metadata of any bytes (a line break, non-ASCII, a percent sign, bytes
// that are not UTF-8) reaches the receiver intact through the
// percent-encoded headers, and the request is not refused for an invalid
// header value.
func TestMetadataHeadersCarryAnyBytes(t *testing.T) {
	rc := &receiver{budget: -1}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	e, err := webhook.NewEndpoint(webhook.EndpointConfig{Name: "meta", URL: srv.URL, Timeout: 5 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := e.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	ev := sinktest.Events("meta", 1, 1)[0]
	ev.AggregateID, ev.Type, ev.AggregateType = "a\r\nb: ü 100%", "caf\xe9\x00", "order/line item"
	if err := sink.Deliver(ctx, e, []*event.Event{ev}); err != nil {
		t.Fatal(err)
	}
	got := rc.read(t, 1)
	if len(got) != 1 || got[0].AggregateID != ev.AggregateID || got[0].Type != ev.Type || got[0].AggregateType != ev.AggregateType {
		t.Fatalf("received %+v, want aggregate id %q, type %q, aggregate type %q", got, ev.AggregateID, ev.Type, ev.AggregateType)
	}
}
