package tracing_test

import (
	"context"
	"encoding/hex"
	"errors"
	"os"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/otlptest"
	"github.com/outbox-relay/outbox-relay/tracing"
)

type nopObserver = nop

type nop struct{}

func (nop) Delivered(*event.Event, time.Time)         {}
func (nop) Failed(*event.Event, error, bool)          {}
func (nop) DeadLettered(*event.Event, string)         {}
func (nop) InFlight(int, int, time.Time)              {}
func (nop) CheckpointSaved(event.Position, time.Time) {}
func (nop) SinkUp(bool)                               {}
func (nop) SinkConnected(error)                       {}

const (
	rowTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	rowSpan   = "00f067aa0ba902b7"
	rowParent = "00-" + rowTrace + "-" + rowSpan + "-01"
)

var attrs = otlptest.Attrs

// Every settled event gets a span, child of the row's traceparent, from
// the commit time to the acknowledgement, with the messaging attributes,
// its retries as events and a permanent failure as an error; exported over
// OTLP/HTTP and OTLP/gRPC as the OTEL_* variables say.
func TestSpansAreChildrenOfTheRowsTraceContext(t *testing.T) {
	for _, proto := range []string{"http/protobuf", "grpc"} {
		t.Run(proto, func(t *testing.T) {
			rc := &otlptest.Receiver{}
			if proto == "grpc" {
				rc.StartGRPC(t)
			} else {
				rc.StartHTTP(t)
			}
			t.Setenv("OTEL_TRACES_SAMPLER", "x")
			os.Unsetenv("OTEL_TRACES_SAMPLER") // the default: parentbased_always_on
			tr, err := tracing.New(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			obs := tracing.Observer(tr, "kafka", "orders", nop{})
			commit := time.Unix(1700000000, 0)
			ok := &event.Event{ID: "e-1", AggregateID: "o1", Type: "created", Table: "shop.outbox", CommitTime: commit,
				TraceParent: rowParent, TraceState: "congo=t61rcWkgMzE", Source: event.Source{GTID: "0-1-42"}}
			bad := &event.Event{ID: "e-2", AggregateID: "o1", Table: "shop.outbox", CommitTime: commit,
				TraceParent: "00-" + rowTrace + "-00f067aa0ba902b8-01", Source: event.Source{GTID: "0-1-43"}}
			obs.Failed(ok, errors.New("broker down"), false)
			obs.Failed(ok, errors.New("broker still down"), false)
			obs.Delivered(ok, commit.Add(1500*time.Millisecond))
			obs.Failed(bad, errors.New("message too large"), true)
			if err := tr.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			spans := rc.Spans()
			if len(spans) != 2 {
				t.Fatalf("received %d spans, want 2", len(spans))
			}
			byID := map[string]*tracepb.Span{}
			for _, s := range spans {
				byID[attrs(s)["messaging.message.id"]] = s
			}
			s := byID["e-1"]
			if s == nil || hex.EncodeToString(s.TraceId) != rowTrace || hex.EncodeToString(s.ParentSpanId) != rowSpan {
				t.Fatalf("span of e-1 %v: want trace %s, parent %s", s, rowTrace, rowSpan)
			}
			if s.TraceState != "congo=t61rcWkgMzE" || s.Kind != tracepb.Span_SPAN_KIND_PRODUCER || s.Name != "send orders" {
				t.Errorf("span of e-1: trace state %q, kind %v, name %q", s.TraceState, s.Kind, s.Name)
			}
			if got, want := time.Duration(s.EndTimeUnixNano-s.StartTimeUnixNano), 1500*time.Millisecond; got != want ||
				s.StartTimeUnixNano != uint64(commit.UnixNano()) {
				t.Errorf("span of e-1 lasts %s from %d, want %s from the commit time", got, s.StartTimeUnixNano, want)
			}
			a := attrs(s)
			for k, v := range map[string]string{"messaging.system": "kafka", "messaging.destination.name": "orders",
				"messaging.operation.type": "send", tracing.AttrGTID: "0-1-42", tracing.AttrTable: "shop.outbox"} {
				if a[k] != v {
					t.Errorf("span of e-1: %s = %q, want %q", k, a[k], v)
				}
			}
			if len(s.Events) != 2 || s.Events[0].Name != "retry" || s.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
				t.Errorf("span of e-1: events %v, status %v; want 2 retries and no error", s.Events, s.Status)
			}
			f := byID["e-2"]
			if f == nil || f.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || hex.EncodeToString(f.TraceId) != rowTrace {
				t.Errorf("span of the dead-lettered e-2: %v, want an error in trace %s", f, rowTrace)
			}
		})
	}
}

// Sampling follows the parent: a row whose traceparent is not sampled gets
// no span, and neither does a row without one when the sampler says 0.
func TestSamplingFollowsTheParent(t *testing.T) {
	rc := &otlptest.Receiver{}
	rc.StartHTTP(t)
	t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
	t.Setenv("OTEL_TRACES_SAMPLER_ARG", "0")
	tr, err := tracing.New(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	obs := tracing.Observer(tr, "webhook", "hooks/a", nop{})
	now := time.Now()
	obs.Delivered(&event.Event{ID: "unsampled", TraceParent: "00-" + rowTrace + "-" + rowSpan + "-00", CommitTime: now}, now)
	obs.Delivered(&event.Event{ID: "root", CommitTime: now}, now)
	obs.Delivered(&event.Event{ID: "sampled", TraceParent: rowParent, CommitTime: now}, now)
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := rc.Spans()
	if len(spans) != 1 || attrs(spans[0])["messaging.message.id"] != "sampled" {
		t.Fatalf("received %d spans (%v), want only the sampled row's", len(spans), spans)
	}
}

// Tracing off is a nil Tracer: the observer is returned unchanged.
func TestTracingOffLeavesTheObserver(t *testing.T) {
	var tr *tracing.Tracer
	var n nop
	if got := tracing.Observer(tr, "kafka", "orders", n); got != (any)(n) {
		t.Fatalf("Observer of a nil Tracer = %T, want the pipeline's observer itself", got)
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}
