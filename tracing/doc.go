// Package tracing emits the relay's own OpenTelemetry spans: one span per
// delivered event, the hop from the source transaction's commit to the
// sink's acknowledgement, as the child of the trace context the row carried
// (event.TraceParent). It is off unless tracing.enabled is set; the
// exporter (OTLP over HTTP or gRPC), its endpoint and headers, the sampler
// and the resource come from the standard OTEL_* environment variables.
//
// A Tracer is safe for concurrent use. Its Observer wraps a pipeline's
// observer: the span of an event is made when the pipeline settles it
// (acknowledged or failed for good), with the commit time as its start, so
// that nothing is held per event while it is in flight but its retries.
package tracing
