package pipeline

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
)

// handoffSource is a Source that is a Handoff: its Run hands nothing on
// itself; the test calls the TryHandler it was given, from its own
// goroutine, as a gateway's shared stream does.
type handoffSource struct {
	try     chan TryHandler
	running chan context.Context
}

func (s *handoffSource) Handoff(try TryHandler) { s.try <- try }

func (s *handoffSource) Run(ctx context.Context, _ event.Position, _ func(context.Context, *event.Txn) error) error {
	s.running <- ctx
	<-ctx.Done()
	return ctx.Err()
}

// runHandoff runs a pipeline of cfg over a handoffSource and returns the
// TryHandler it gave the source, the source's Run context, and stop, which
// ends the run and waits for it.
func runHandoff(t *testing.T, cfg Config) (p *Pipeline, try TryHandler, runCtx context.Context, stop func()) {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	src := &handoffSource{try: make(chan TryHandler, 1), running: make(chan context.Context, 1)}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, src) }()
	return p, <-src.try, <-src.running, func() { cancel(); <-done }
}

// A TryHandler waits for nothing. With a fence asked before each delivery
// (a MySQL checkpoint's lease, which a renewal may hold), a Queuer's
// transaction is handed to the delivery goroutine, not submitted on the
// try's: the try returns while the fence holds, and the event is delivered
// once it opens. With no room in MaxInFlight, the try hands on nothing and
// says so; once there is room, it hands on again.
func TestATryHandlerWaitsForNothing(t *testing.T) {
	gate := make(chan struct{})
	q := &queuingSink{}
	_, try, runCtx, stop := runHandoff(t, Config{Name: "s", Sink: q, Store: &memStore{}, Start: event.Position{File: "b.1", Pos: 4},
		CheckpointInterval: time.Millisecond, MaxInFlight: 2,
		Fence: func(ctx context.Context) error {
			select {
			case <-gate:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}})

	ts := txns(4, 1)
	// tryAsync calls try on a goroutine of its own and returns its result;
	// a try that waited on the fence would never return.
	tryAsync := func(txn *event.Txn) bool {
		t.Helper()
		res := make(chan bool, 1)
		go func() {
			handed, err := try(runCtx, txn)
			if err != nil {
				t.Error(err)
			}
			res <- handed
		}()
		select {
		case handed := <-res:
			return handed
		case <-t.Context().Done():
			t.Fatal("the try waited (for the fence)")
			return false
		}
	}
	if !tryAsync(ts[0]) || !tryAsync(ts[1]) {
		t.Fatal("a try with room in MaxInFlight handed nothing on")
	}
	if tryAsync(ts[2]) {
		t.Fatal("a try with MaxInFlight (2) events unacknowledged handed a third on")
	}
	q.mu.Lock()
	early := slices.Clone(q.delivered)
	q.mu.Unlock()
	if len(early) > 0 {
		t.Fatalf("delivered %v while the fence held", early)
	}
	close(gate)
	delivered := func() []string { q.mu.Lock(); defer q.mu.Unlock(); return slices.Clone(q.delivered) }
	for len(delivered()) < 2 && t.Context().Err() == nil {
		time.Sleep(time.Millisecond)
	}
	// The first two acknowledged and, soon after, saved: room for the third.
	for !tryAsync(ts[2]) {
		time.Sleep(time.Millisecond)
	}
	for len(delivered()) < 3 && t.Context().Err() == nil {
		time.Sleep(time.Millisecond)
	}
	stop()
	if got, want := delivered(), []string{"e0", "e1", "e2"}; !slices.Equal(got, want) {
		t.Errorf("delivered %v, want %v", got, want)
	}
}

// With a batch Linger, a Queuer's batch waits for more events: a try hands
// it to the delivery goroutine rather than wait on the caller's.
func TestATryHandlerDoesNotLingerForABatch(t *testing.T) {
	q := &queuingSink{}
	p, try, runCtx, stop := runHandoff(t, Config{Name: "s", Sink: q, Store: &memStore{}, Start: event.Position{File: "b.1", Pos: 4},
		CheckpointInterval: time.Millisecond, Linger: time.Hour, DrainTimeout: time.Millisecond})
	// Connected, and the delivery loop its connection kicked has ended:
	// nothing else delivers, so a try that submitted here would linger.
	for {
		o := p.delivering
		o.mu.Lock()
		idle := !o.held && !o.running
		o.mu.Unlock()
		if idle {
			break
		}
		time.Sleep(time.Millisecond)
	}
	res := make(chan bool, 1)
	go func() {
		handed, _ := try(runCtx, txns(1, 1)[0])
		res <- handed
	}()
	select {
	case handed := <-res:
		if !handed {
			t.Error("a try with room handed nothing on")
		}
	case <-t.Context().Done():
		t.Fatal("the try waited for the batch's Linger")
	}
	stop()
}
