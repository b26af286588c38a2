package gateway

import (
	"context"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink"
)

// submitRecorder is a sink.Queuer (Submit only queues, as a webhook
// endpoint's does) that records each event and whether it was submitted on
// the shared stream's goroutine (the hub's dispatch on its stack) or on one
// of the endpoint's own (its Tap's Run, or its pipeline's delivery). Its acks come from a goroutine of its own,
// or, while held, once released.
type submitRecorder struct {
	mu    sync.Mutex
	got   []string
	onHub []bool
	hold  bool
	held  []func()
}

func (r *submitRecorder) Connect(context.Context) error { return nil }
func (r *submitRecorder) Close(context.Context) error   { return nil }
func (r *submitRecorder) SubmitOnlyQueues()             {}

func (r *submitRecorder) Write(ctx context.Context, batch []*event.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range batch {
		r.got = append(r.got, e.ID)
		r.onHub = append(r.onHub, false)
	}
	return nil
}

func (r *submitRecorder) Submit(ctx context.Context, batch []*event.Event, ack func(int, error)) {
	onHub := strings.Contains(string(debug.Stack()), "(*Hub).dispatch")
	ackAll := func() {
		for i := range batch {
			ack(i, nil)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range batch {
		r.got = append(r.got, e.ID)
		r.onHub = append(r.onHub, onHub)
	}
	if r.hold {
		r.held = append(r.held, ackAll)
		return
	}
	go ackAll()
}

func (r *submitRecorder) received() (ids []string, onHub []bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got), slices.Clone(r.onHub)
}

func (r *submitRecorder) release() {
	r.mu.Lock()
	held := r.held
	r.hold, r.held = false, nil
	r.mu.Unlock()
	for _, ack := range held {
		ack()
	}
}

var _ sink.Queuer = (*submitRecorder)(nil)

// parked reports whether the endpoint key is on the shared stream with its
// pipeline's goroutine waiting, nothing queued: the hub may hand it a
// transaction itself.
func parked(g *Gateway, key string) bool {
	g.hub.Lock()
	defer g.hub.Unlock()
	for t := range g.hub.attached {
		if t.name != key {
			continue
		}
		t.direct.mu.Lock()
		defer t.direct.mu.Unlock()
		return t.direct.parked && t.direct.try != nil && t.queue.len() == 0
	}
	return false
}

// An endpoint alone in a transaction, its pipeline waiting with nothing
// queued, is handed the transaction on the shared stream's goroutine: its
// own is not woken for it (at a steady trickle to one endpoint, that wake
// was one more thread woken per event than a bare client's). A transaction
// with events for two endpoints is handed to each on its own goroutine, as
// is one that comes while the endpoint's pipeline has no room
// (max_in_flight): the shared stream never waits inside a pipeline, and
// the other endpoints get their events meanwhile. Each endpoint gets its
// events once and in order throughout.
func TestAnEndpointAloneInATransactionIsHandedItOnTheStreamsGoroutine(t *testing.T) {
	f := newFixture(t, 2) // ep0 takes tenant t0's events, ep1 t1's
	f.cfg.Hub.Linger = time.Hour
	recs := map[string]*submitRecorder{}
	for i := range f.cfg.Endpoints {
		r := &submitRecorder{}
		recs[f.cfg.Endpoints[i].Key] = r
		f.cfg.Endpoints[i].Open = func() (sink.Sink, error) { return r, nil }
	}
	ep0, ep1 := recs["hooks/ep0"], recs["hooks/ep1"]
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	g, done := f.run(ctx)

	// waitGot waits until r has n events and returns where each was submitted.
	waitGot := func(r *submitRecorder, n int) []bool {
		t.Helper()
		waitFor(t, "the endpoint to receive its events", func() bool { ids, _ := r.received(); return len(ids) >= n })
		_, onHub := r.received()
		return onHub
	}
	// The first event wakes each endpoint: its pipeline starts, and is
	// handed the transaction from the endpoint's queue.
	f.b.commit("t0", "t1")
	waitGot(ep0, 1)
	waitGot(ep1, 1)

	// Alone in each transaction: handed on by the hub.
	for i := range 5 {
		waitFor(t, "ep0 to wait with nothing queued", func() bool { return parked(g, "hooks/ep0") })
		f.b.commit("t0")
		if onHub := waitGot(ep0, 2+i); !onHub[1+i] {
			t.Fatalf("event %d, alone in its transaction to a waiting endpoint, was submitted on the endpoint's goroutine, want the shared stream's", 2+i)
		}
	}

	// Both endpoints in one transaction: each on its own goroutine.
	waitFor(t, "both endpoints to wait with nothing queued", func() bool { return parked(g, "hooks/ep0") && parked(g, "hooks/ep1") })
	f.b.commit("t0", "t1")
	if onHub := waitGot(ep0, 7); onHub[6] {
		t.Error("ep0's event of a transaction with events for two endpoints was submitted on the shared stream's goroutine")
	}
	if onHub := waitGot(ep1, 2); onHub[1] {
		t.Error("ep1's event of a transaction with events for two endpoints was submitted on the shared stream's goroutine")
	}

	// ep0's acknowledgements held: its pipeline (max_in_flight 8) fills.
	waitFor(t, "ep0 to wait with nothing queued", func() bool { return parked(g, "hooks/ep0") })
	ep0.mu.Lock()
	ep0.hold = true
	ep0.mu.Unlock()
	for i := range 8 {
		waitFor(t, "ep0 to wait with nothing queued", func() bool { return parked(g, "hooks/ep0") })
		f.b.commit("t0")
		waitGot(ep0, 8+i)
	}
	// No room for the ninth: the hub queues it and goes on; ep0's goroutine
	// waits for room.
	f.b.commit("t0")
	waitFor(t, "ep1 to wait with nothing queued", func() bool { return parked(g, "hooks/ep1") })
	f.b.commit("t1")
	if onHub := waitGot(ep1, 3); !onHub[2] {
		t.Error("ep1's event, alone in its transaction, was submitted on its own goroutine")
	}
	if ids, _ := ep0.received(); len(ids) != 15 {
		t.Fatalf("ep0 received %d events with 8 unacknowledged and max_in_flight 8, want 15 (the ninth waits for room)", len(ids))
	}
	ep0.release()
	if onHub := waitGot(ep0, 16); onHub[15] {
		t.Error("ep0's event that came while its pipeline had no room was submitted on the shared stream's goroutine, want its own (which waited for room)")
	}
	ep0.release() // what the ninth's submit left held

	for key, r := range recs {
		want := f.b.want(f.tenant(key))
		waitFor(t, key+" to receive its events", func() bool { ids, _ := r.received(); return len(ids) >= len(want) })
		if ids, _ := r.received(); !slices.Equal(ids, want) {
			t.Errorf("%s received %v, want %v (each once, in order)", key, ids, want)
		}
	}
	cancel()
	if err := <-done; err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
}
