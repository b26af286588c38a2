package pipeline

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/pipeline/pipelinetest"
	"github.com/outbox-relay/outbox-relay/sink"
)

// countingSink acknowledges everything at once.
type countingSink = pipelinetest.CountingSink

// BenchmarkPipelineOverhead measures what the pipeline itself costs per
// event (batching, acks, watermark, limits) with a sink that acknowledges at
// once: the ceiling it puts on any real sink.
func BenchmarkPipelineOverhead(b *testing.B) {
	s := &countingSink{}
	benchmarkOverhead(b, s, &s.N, 10)
}

// countingQueuer is a sink.Queuer, as a webhook endpoint is, that
// acknowledges each event as it is submitted and counts them.
type countingQueuer struct{ countingSink }

func (*countingQueuer) SubmitOnlyQueues() {}

func (q *countingQueuer) Submit(_ context.Context, batch []*event.Event, ack func(int, error)) {
	for i := range batch {
		ack(i, nil)
	}
	q.N.Add(int64(len(batch)))
}

// BenchmarkQueuerOverhead is BenchmarkPipelineOverhead for a sink.Queuer,
// whose queue from the source holds queuerItems events rather than
// BatchSize: transactions of one event (a gateway endpoint's, mostly) and
// of 100, more than that queue holds.
func BenchmarkQueuerOverhead(b *testing.B) {
	for _, perTxn := range []int{1, 100} {
		b.Run(fmt.Sprintf("events_per_txn=%d", perTxn), func(b *testing.B) {
			s := &countingQueuer{}
			benchmarkOverhead(b, s, &s.N, perTxn)
		})
	}
}

// benchmarkOverhead runs b.N events in transactions of perTxn through a
// pipeline to s, which counts them in n, and reports events/s.
func benchmarkOverhead(b *testing.B, s sink.Sink, n *atomic.Int64, perTxn int) {
	txns := make([]*event.Txn, b.N/perTxn+1)
	for i := range txns {
		t := &event.Txn{Position: event.Position{File: "b.1", Pos: uint32(i + 5)}}
		for k := range perTxn {
			t.Events = append(t.Events, &event.Event{ID: fmt.Sprint(i, k), AggregateID: "a", Payload: []byte(`{"k": 1}`)})
		}
		txns[i] = t
	}
	want := int64(len(txns) * perTxn)
	p, err := New(Config{Name: "bench", Sink: s, Store: &memStore{}, Start: event.Position{File: "b.1", Pos: 4}, BatchSize: 1000})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	b.ResetTimer()
	start := time.Now()
	go func() { done <- p.Run(ctx, &fakeSource{Txns: txns}) }()
	for n.Load() < want {
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	<-done
	b.ReportMetric(float64(want)/elapsed.Seconds(), "events/s")
}

// BenchmarkTrackerOutOfOrderSaves is the tracker's share of a sink whose
// acknowledgements arrive out of order (Kafka's partitions): transactions
// of 10 keyed events, each event acknowledged with its partition's batch
// (4 partitions, 100 events a batch, in turn), and a checkpoint taken and
// encoded as the file store does every 1,000 events. It reports the cost
// per event, allocations included.
func BenchmarkTrackerOutOfOrderSaves(b *testing.B) {
	const perTxn, parts, batch, saveEvery = 10, 4, 100, 1000
	tr := newTracker(pos(-1), 10000, 1<<30)
	tr.readBack = true
	var pending [parts][]*item
	var slots [parts][batch]item // reused once released: the benchmark allocates nothing itself
	keys := make([]string, 1024)
	evs := make([]event.Event, 1024*perTxn)
	for i := range keys {
		keys[i] = fmt.Sprintf("0-1-%d", i+1)
		for k := range perTxn {
			evs[i*perTxn+k].ID = fmt.Sprintf("0192a0c4-5b7e-7d3a-9f1e-%012d", i*perTxn+k)
		}
	}
	b.ResetTimer()
	b.ReportAllocs()
	n := 0
	for i := 0; n < b.N; i++ {
		e := tr.addKey(pos(i), time.Time{}, perTxn, perTxn, keys[i%len(keys)])
		for k := range perTxn {
			p := (i + k) % parts
			it := &slots[p][len(pending[p])]
			*it = item{ev: &evs[(i%len(keys))*perTxn+k], txn: e, size: 1}
			pending[p] = append(pending[p], it)
			if len(pending[p]) == batch {
				tr.release(pending[p])
				pending[p] = pending[p][:0]
			}
			n++
			if n%saveEvery == 0 {
				s := tr.take()
				if len(s.acked) > 0 || s.readThrough != "" {
					a := checkpoint.Acked{Events: s.acked, ReadThrough: s.readThrough}
					if _, err := a.MarshalJSON(); err != nil {
						b.Fatal(err)
					}
				}
				tr.saved()
			}
		}
	}
}

// submitSink is a sink.Submitter that acknowledges each event from a
// goroutine of its own, as a webhook endpoint does, and signals each.
type submitSink struct{ acked chan struct{} }

func (s *submitSink) Connect(context.Context) error { return nil }
func (s *submitSink) Close(context.Context) error   { return nil }
func (s *submitSink) Write(context.Context, []*event.Event) error {
	panic("a Submitter is written through Submit")
}
func (s *submitSink) Submit(_ context.Context, batch []*event.Event, ack func(int, error)) {
	go func() {
		for i := range batch {
			ack(i, nil)
			s.acked <- struct{}{}
		}
	}()
}

// pacedSource hands out one transaction of one event at a time, each once
// the one before was acknowledged: a gateway's endpoint, which has little
// in flight, so that its pipeline's delivery and saving go idle between
// events.
type pacedSource struct {
	txns  []*event.Txn
	acked chan struct{}
}

func (s *pacedSource) Run(ctx context.Context, _ event.Position, handle func(context.Context, *event.Txn) error) error {
	for _, t := range s.txns {
		if err := handle(ctx, t); err != nil {
			return err
		}
		select {
		case <-s.acked:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	<-ctx.Done()
	return ctx.Err()
}

// BenchmarkPipelineOneEventAtATime is what a gateway endpoint's pipeline
// costs per event, allocations included: transactions of one event, each
// handed on once the one before was acknowledged by a Submitter, and a
// checkpoint saved after each (a gateway's thousand endpoints each save
// about once per delivery). What the benchmark's source and sink allocate
// (one goroutine per event) is counted too.
func BenchmarkPipelineOneEventAtATime(b *testing.B) {
	txns := make([]*event.Txn, b.N)
	for i := range txns {
		txns[i] = &event.Txn{Position: event.Position{GTIDSet: fmt.Sprintf("0-1-%d", i+5)}, Events: []*event.Event{
			{ID: fmt.Sprint(i), AggregateID: "a", Payload: []byte(`{"k": 1}`), Source: event.Source{GTID: fmt.Sprintf("0-1-%d", i+5)}}}}
	}
	s := &submitSink{acked: make(chan struct{})}
	st := &memStore{}
	p, err := New(Config{Name: "bench", Sink: s, Store: st, Start: event.Position{GTIDSet: "0-1-4"}, MaxInFlight: 10, CheckpointGap: time.Nanosecond})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	b.ReportAllocs()
	b.ResetTimer()
	go func() { done <- p.Run(ctx, &pacedSource{txns: txns, acked: s.acked}) }()
	want := txns[len(txns)-1].Position
	for {
		st.mu.Lock()
		cp := st.cps["bench"]
		st.mu.Unlock()
		if cp.Position == want {
			break
		}
		time.Sleep(100 * time.Microsecond)
	}
	b.StopTimer()
	cancel()
	<-done
}

// BenchmarkTrackerListing is one checkpoint's listing of the events
// acknowledged beyond the watermark, built anew (the list changed since the
// last save): 200 events of 100 transactions, behind one unacknowledged.
func BenchmarkTrackerListing(b *testing.B) {
	tr := newTracker(pos(-1), 10000, 1<<30)
	tr.addKey(pos(0), time.Time{}, 1, 1, "0-1-1")
	for i := 1; i <= 100; i++ {
		e := tr.addKey(pos(i), time.Time{}, 2, 2, fmt.Sprintf("0-1-%d", i+1))
		tr.ackLocked(e, 1, fmt.Sprint("a", i))
		tr.ackLocked(e, 1, fmt.Sprint("b", i))
	}
	b.ReportAllocs()
	for b.Loop() {
		tr.listChanged = true
		if m := tr.listLocked(); len(m) != 100 {
			b.Fatalf("%d transactions listed, want 100", len(m))
		}
	}
}
