package tracing_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/otlptest"
	"github.com/outbox-relay/outbox-relay/pipeline"
	"github.com/outbox-relay/outbox-relay/pipeline/pipelinetest"
	"github.com/outbox-relay/outbox-relay/tracing"
)

// benchTracer is the tracer of a benchmark's mode: nil for "off", else one
// exporting over OTLP/HTTP to a receiver in the process, sampling nothing
// ("sampling=0") or everything ("sampling=1").
func benchTracer(b *testing.B, mode string) *tracing.Tracer {
	if mode == "off" {
		return nil
	}
	rc := &otlptest.Receiver{}
	rc.StartHTTP(b)
	b.Setenv("OTEL_TRACES_SAMPLER", map[string]string{"sampling=0": "always_off", "sampling=1": "parentbased_always_on"}[mode])
	tr, err := tracing.New(context.Background(), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tr.Shutdown(context.Background()) })
	return tr
}

// BenchmarkPipelineTracing is the pipeline's own ceiling (a sink that
// acknowledges at once, events with a sampled traceparent) with tracing
// off, on with sampling 0 (OTEL_TRACES_SAMPLER=always_off: no span is
// recorded) and on with sampling 1 (parentbased_always_on: every event's
// span is built and exported over OTLP/HTTP to a receiver in the process).
// Run it with -count so that the three alternate on a shared machine.
func BenchmarkPipelineTracing(b *testing.B) {
	for _, mode := range []string{"off", "sampling=0", "sampling=1"} {
		b.Run(mode, func(b *testing.B) {
			tr := benchTracer(b, mode)
			const perTxn = 10
			txns := make([]*event.Txn, b.N/perTxn+1)
			commit := time.Now()
			for i := range txns {
				t := &event.Txn{Position: event.Position{File: "b.1", Pos: uint32(i + 5)}}
				for k := range perTxn {
					t.Events = append(t.Events, &event.Event{ID: fmt.Sprint(i, k), AggregateID: "a", Payload: []byte(`{"k": 1}`),
						Table: "shop.outbox", CommitTime: commit, Source: event.Source{GTID: fmt.Sprint("0-1-", i)},
						TraceParent: fmt.Sprintf("00-%032x-%016x-01", i+1, k+1)})
				}
				txns[i] = t
			}
			want := int64(len(txns) * perTxn)
			s := &pipelinetest.CountingSink{}
			p, err := pipeline.New(pipeline.Config{Name: "bench", Sink: s, Store: memStore{}, Start: event.Position{File: "b.1", Pos: 4},
				BatchSize: 1000, Observer: tracing.Observer(tr, "kafka", "bench", nopObserver{})})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			b.ResetTimer()
			start := time.Now()
			go func() { done <- p.Run(ctx, &pipelinetest.Source{Txns: txns}) }()
			for s.N.Load() < want {
				time.Sleep(time.Millisecond)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			cancel()
			<-done
			b.ReportMetric(float64(want)/elapsed.Seconds(), "events/s")
		})
	}
}

type memStore struct{}

func (memStore) Load(context.Context, string) (checkpoint.Checkpoint, error) {
	return checkpoint.Checkpoint{}, checkpoint.ErrNotFound
}
func (memStore) Save(context.Context, string, checkpoint.Checkpoint) error { return nil }
func (memStore) Close() error                                              { return nil }

// BenchmarkSpan is the span alone: what one acknowledged event costs the
// pipeline's goroutine in Observer.Delivered, by mode (export happens on
// the SDK's batch goroutine; at sampling 1 its queue drops spans when the
// exporter falls behind, it never blocks delivery).
func BenchmarkSpan(b *testing.B) {
	for _, mode := range []string{"off", "sampling=0", "sampling=1"} {
		b.Run(mode, func(b *testing.B) {
			tr := benchTracer(b, mode)
			obs := tracing.Observer(tr, "kafka", "bench", nopObserver{})
			e := &event.Event{ID: "e-1", AggregateID: "a", Table: "shop.outbox", CommitTime: time.Now(), Source: event.Source{GTID: "0-1-5"},
				TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				obs.Delivered(e, time.Now())
			}
		})
	}
}
