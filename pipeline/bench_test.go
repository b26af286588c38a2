package pipeline

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
)

// countingSink acknowledges everything at once.
type countingSink struct{ n atomic.Int64 }

func (c *countingSink) Connect(context.Context) error { return nil }
func (c *countingSink) Close(context.Context) error   { return nil }
func (c *countingSink) Write(_ context.Context, batch []*event.Event) error {
	c.n.Add(int64(len(batch)))
	return nil
}

// memSource hands out its transactions, then waits for ctx.
type memSource struct{ txns []*event.Txn }

func (m *memSource) Run(ctx context.Context, _ event.Position, handle func(context.Context, *event.Txn) error) error {
	for _, t := range m.txns {
		if err := handle(ctx, t); err != nil {
			return err
		}
	}
	<-ctx.Done()
	return ctx.Err()
}

// BenchmarkPipelineOverhead measures what the pipeline itself costs per
// event (batching, acks, watermark, limits) with a sink that acknowledges at
// once: the ceiling it puts on any real sink.
func BenchmarkPipelineOverhead(b *testing.B) {
	const perTxn = 10
	txns := make([]*event.Txn, b.N/perTxn+1)
	for i := range txns {
		t := &event.Txn{Position: event.Position{File: "b.1", Pos: uint32(i + 5)}}
		for k := range perTxn {
			t.Events = append(t.Events, &event.Event{ID: fmt.Sprint(i, k), AggregateID: "a", Payload: []byte(`{"k": 1}`)})
		}
		txns[i] = t
	}
	want := int64(len(txns) * perTxn)
	s := &countingSink{}
	p, err := New(Config{Name: "bench", Sink: s, Store: &memStore{}, Start: event.Position{File: "b.1", Pos: 4}, BatchSize: 1000})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	b.ResetTimer()
	start := time.Now()
	go func() { done <- p.Run(ctx, &memSource{txns: txns}) }()
	for s.n.Load() < want {
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	<-done
	b.ReportMetric(float64(want)/elapsed.Seconds(), "events/s")
}
