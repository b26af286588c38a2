package pipeline

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink"
)

// here runs the loop on the caller's goroutine when nothing runs it, and
// leaves the work to the running loop (or to release) otherwise.
func TestOnDemandHere(t *testing.T) {
	cases := []struct {
		name    string
		running bool
		held    bool
		wantRan bool
	}{
		{name: "an idle loop runs on the calling goroutine", wantRan: true},
		{name: "a running loop is left to see the work", running: true},
		{name: "a held loop waits for release", held: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var work atomic.Int64
			work.Store(1)
			var ran int
			o := &onDemand{running: c.running, held: c.held,
				rest: func() bool { return work.Load() == 0 },
				run: func() bool {
					ran++ // unsynchronized: the race detector fails a run on another goroutine
					work.Store(0)
					return false
				}}
			o.here()
			if got := ran == 1; got != c.wantRan {
				t.Fatalf("ran %d times on the calling goroutine, want ran=%v", ran, c.wantRan)
			}
			if c.wantRan {
				o.mu.Lock()
				running := o.running
				o.mu.Unlock()
				if running {
					t.Fatal("the loop still counts as running after here returned")
				}
				o.wait() // returns: here's run is done
			}
		})
	}
}

// queuingSink is a sink.Queuer that acknowledges each event as it is
// submitted.
type queuingSink struct{ scriptSink }

func (q *queuingSink) SubmitOnlyQueues() {}

func (q *queuingSink) Submit(_ context.Context, batch []*event.Event, ack func(int, error)) {
	for i, e := range batch {
		q.mu.Lock()
		q.delivered = append(q.delivered, e.ID)
		q.mu.Unlock()
		ack(i, nil)
	}
}

// A Queuer's transaction is handed on from the source's goroutine; if the
// fence then waits (its lease is being confirmed), ending Run's ctx still
// ends Run, after DrainTimeout: the reader is not left waiting on a
// delivery context that only its own return would end.
func TestAQueuersDeliveryOnTheSourcesGoroutineDoesNotHoldUpTheStop(t *testing.T) {
	queuer, local := &queuingSink{}, &localSink{}
	t.Run("a Queuer", func(t *testing.T) { deliveryOnTheSourcesGoroutineStops(t, queuer, &queuer.scriptSink) })
	// A Local sink's Write of a transaction that came to a waiting source.
	t.Run("a Local sink", func(t *testing.T) { deliveryOnTheSourcesGoroutineStops(t, local, &local.scriptSink) })
}

func deliveryOnTheSourcesGoroutineStops(t *testing.T, sk sink.Sink, s *scriptSink) {
	var block atomic.Bool
	var fencedOnce sync.Once
	fenced := make(chan struct{})
	cfg := Config{Name: "s", Sink: sk, Store: &memStore{}, Start: event.Position{File: "b.1", Pos: 4},
		CheckpointInterval: time.Hour, DrainTimeout: 10 * time.Millisecond,
		Fence: func(ctx context.Context) error {
			if !block.Load() {
				return nil
			}
			fencedOnce.Do(func() { close(fenced) })
			<-ctx.Done()
			return ctx.Err()
		}}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := txns(2, 1)
	src := sourceFunc(func(ctx context.Context, _ event.Position, handle func(context.Context, *event.Txn) error) error {
		if err := handle(ctx, ts[0]); err != nil {
			return err
		}
		for len(s.got()) == 0 && ctx.Err() == nil {
			time.Sleep(time.Millisecond) // the first delivered: the delivery goroutine is done or ending
		}
		p.delivering.wait()               // ended: the next is handed on from here
		time.Sleep(2 * DefaultTrickleGap) // and comes to a waiting source
		block.Store(true)
		if err := handle(ctx, ts[1]); err != nil {
			return err
		}
		<-ctx.Done()
		return ctx.Err()
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, src) }()
	select {
	case <-fenced:
	case err := <-done:
		t.Fatalf("Run returned %v before the second delivery asked the fence", err)
	case <-time.After(20 * time.Second):
		t.Fatal("the second delivery never asked the fence")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after its ctx ended while a delivery waited on the fence")
	}
}

// drainFrom stops DrainTimeout after ctx ends, unless undone first.
func TestDrainFrom(t *testing.T) {
	p := &Pipeline{cfg: Config{DrainTimeout: time.Millisecond}}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	undo := p.drainFrom(ctx, func() { close(stopped) })
	defer undo()
	cancel()
	select {
	case <-stopped:
	case <-time.After(20 * time.Second):
		t.Fatal("stop was not called after ctx ended")
	}

	var calls atomic.Int32
	ctx2, cancel2 := context.WithCancel(context.Background())
	p.drainFrom(ctx2, func() { calls.Add(1) })()
	cancel2()
	if calls.Load() != 0 {
		t.Fatal("stop was called though undone before ctx ended")
	}
}
