package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/pipeline"
)

// Attribute keys of the relay's spans besides the messaging semantic
// conventions' (messaging.system, messaging.destination.name,
// messaging.message.id, messaging.operation.type).
const (
	AttrGTID        = "outbox_relay.gtid"
	AttrTable       = "outbox_relay.table"
	AttrAggregateID = "outbox_relay.aggregate_id"
	AttrEventType   = "outbox_relay.event_type"
	AttrAttempts    = "outbox_relay.attempts"
)

// Tracer makes the relay's spans and exports them. Create it with New; a
// nil *Tracer is tracing off.
type Tracer struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
}

// New returns a Tracer exporting over OTLP as the environment says:
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL
// (http/protobuf, the default, or grpc), OTEL_EXPORTER_OTLP_ENDPOINT and
// the exporter's other variables, OTEL_TRACES_SAMPLER (default
// parentbased_always_on: a row's sampled flag decides), OTEL_SERVICE_NAME
// (default outbox-relay) and OTEL_RESOURCE_ATTRIBUTES.
func New(ctx context.Context, log *slog.Logger) (*Tracer, error) {
	protocol := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var (
		exp sdktrace.SpanExporter
		err error
	)
	switch protocol {
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("tracing: OTEL_EXPORTER_OTLP_PROTOCOL=%q: the relay exports over http/protobuf or grpc; set one of those", protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: create the OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "outbox-relay")),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing: read the resource from OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	// No sampler option: the SDK reads OTEL_TRACES_SAMPLER and its
	// argument, and follows the parent by default.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	if log != nil {
		log.Info("tracing on: exporting the relay's spans over OTLP", slog.String("protocol", cmpOr(protocol, "http/protobuf")))
	}
	return &Tracer{provider: tp, tracer: tp.Tracer("github.com/outbox-relay/outbox-relay")}, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Shutdown exports the spans still buffered and stops the exporter.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// Observer returns next wrapped so that every event the pipeline settles
// gets a span. system is the sink's kind (kafka, webhook, ...), destination
// the sink's (or gateway endpoint's) name. A nil Tracer returns next
// unchanged: tracing off costs nothing.
func Observer(t *Tracer, system, destination string, next pipeline.Observer) pipeline.Observer {
	if t == nil {
		return next
	}
	o := &observer{Observer: next, t: t, name: "send " + destination,
		attrs: []attribute.KeyValue{
			attribute.String("messaging.system", system),
			attribute.String("messaging.destination.name", destination),
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.operation.name", "send"),
		}}
	if r, ok := next.(pipeline.ResumeObserver); ok {
		return &resumeObserver{o, r}
	}
	return o
}

// retried is a failed attempt of an event still in flight.
type retried struct {
	at  time.Time
	err string
}

type observer struct {
	pipeline.Observer
	t     *Tracer
	name  string
	attrs []attribute.KeyValue

	mu sync.Mutex
	// retries holds the failed attempts of the events still in flight
	// (at most the pipeline's in-flight events, and only those that failed).
	retries map[*event.Event][]retried
}

type resumeObserver struct {
	*observer
	pipeline.ResumeObserver
}

// Delivered ends the event's span at its acknowledgement.
func (o *observer) Delivered(e *event.Event, at time.Time) {
	o.Observer.Delivered(e, at)
	o.span(e, at, nil)
}

// Failed records a retried attempt, or ends the span of an event that
// failed for good as an error.
func (o *observer) Failed(e *event.Event, err error, permanent bool) {
	o.Observer.Failed(e, err, permanent)
	if permanent {
		o.span(e, time.Now(), err)
		return
	}
	o.mu.Lock()
	if o.retries == nil {
		o.retries = map[*event.Event][]retried{}
	}
	o.retries[e] = append(o.retries[e], retried{time.Now(), err.Error()})
	o.mu.Unlock()
}

func (o *observer) span(e *event.Event, end time.Time, failed error) {
	var tries []retried
	o.mu.Lock()
	if o.retries != nil {
		tries = o.retries[e]
		delete(o.retries, e)
	}
	o.mu.Unlock()
	ctx := context.Background()
	if sc, ok := Parent(e); ok {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	start := e.CommitTime
	if start.IsZero() || start.After(end) {
		start = end
	}
	_, span := o.t.tracer.Start(ctx, o.name, trace.WithSpanKind(trace.SpanKindProducer), trace.WithTimestamp(start))
	if !span.IsRecording() {
		return // not sampled: nothing more to build
	}
	span.SetAttributes(o.attrs...)
	span.SetAttributes(
		attribute.String("messaging.message.id", e.ID),
		attribute.String(AttrGTID, e.Source.GTID),
		attribute.String(AttrTable, e.Table),
		attribute.String(AttrAggregateID, e.AggregateID),
		attribute.String(AttrEventType, e.Type),
		attribute.Int(AttrAttempts, len(tries)+1),
	)
	for i, r := range tries {
		span.AddEvent("retry", trace.WithTimestamp(r.at), trace.WithAttributes(
			attribute.Int("outbox_relay.attempt", i+1), attribute.String("error.message", r.err)))
	}
	if failed != nil {
		span.RecordError(failed, trace.WithTimestamp(end))
		span.SetStatus(codes.Error, failed.Error())
		span.SetAttributes(attribute.String("error.type", "permanent"))
	}
	span.End(trace.WithTimestamp(end))
}

// Parent returns the span context of e's trace context, if it has one.
func Parent(e *event.Event) (trace.SpanContext, bool) {
	tp := e.TraceParent
	if len(tp) < 55 {
		return trace.SpanContext{}, false
	}
	tid, err1 := trace.TraceIDFromHex(tp[3:35])
	sid, err2 := trace.SpanIDFromHex(tp[36:52])
	if err1 != nil || err2 != nil {
		return trace.SpanContext{}, false
	}
	var flags trace.TraceFlags
	if strings.IndexByte("13579bdf", tp[54]) >= 0 { // the flags' low bit: sampled
		flags = trace.FlagsSampled
	}
	cfg := trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: flags, Remote: true}
	if e.TraceState != "" {
		if ts, err := trace.ParseTraceState(e.TraceState); err == nil {
			cfg.TraceState = ts
		}
	}
	sc := trace.NewSpanContext(cfg)
	return sc, sc.IsValid()
}
