package gateway

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/sink"
)

// awakeOf returns how many of g's endpoints have a pipeline.
func awakeOf(g *Gateway) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.live)
}

// waitIdle waits until every endpoint of g has gone idle and the shared
// cursor is saved at the shared stream's position.
func waitIdle(t *testing.T, g *Gateway, store checkpoint.Store) {
	t.Helper()
	waitFor(t, "every endpoint to go idle", func() bool { return awakeOf(g) == 0 })
	waitFor(t, "the shared cursor to reach the shared stream", func() bool {
		cp, err := store.Load(t.Context(), g.cfg.SharedKey)
		return err == nil && cp.Position == g.hub.Position()
	})
}

// An idle endpoint costs no goroutine: with 1,000 endpoints that have all
// delivered events and gone idle, the process runs as many goroutines as
// with one. (Before, each endpoint kept its pipeline's goroutine, waiting
// on its tap: 1,000 more.)
func TestAnIdleEndpointHasNoGoroutine(t *testing.T) {
	run := func(n int) int {
		f := newFixture(t, n)
		f.cfg.Hub.Linger = time.Millisecond
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		g, done := f.run(ctx)
		commitMany(f.b, 30) // every tenant's endpoints get events
		f.waitAll()
		waitIdle(t, g, f.store)
		got := settledGoroutines(t, 5*time.Second)
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		return got
	}
	one := run(1)
	many := run(1000)
	t.Logf("goroutines once idle: %d with 1 endpoint, %d with 1,000", one, many)
	if many > one+2 {
		t.Fatalf("1,000 idle endpoints run %d goroutines, one runs %d: an idle endpoint costs %.2f", many, one, float64(many-one)/999)
	}
}

// settledGoroutines returns the goroutine count once it has not changed for
// half a second (or the least seen within limit).
func settledGoroutines(t *testing.T, limit time.Duration) int {
	t.Helper()
	least, last, since := runtime.NumGoroutine(), -1, time.Now()
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		n := runtime.NumGoroutine()
		least = min(least, n)
		if n != last {
			last, since = n, time.Now()
		} else if time.Since(since) > 500*time.Millisecond {
			return n
		}
	}
	t.Logf("goroutines did not settle within %s", limit)
	return least
}

// quiet adds n endpoints to f that no event is for.
func (f *fixture) quiet(n int) {
	for i := range n {
		r := &recorder{}
		f.cfg.Endpoints = append(f.cfg.Endpoints, Endpoint{Key: fmt.Sprintf("hooks/quiet%d", i),
			Open: func() (sink.Sink, error) { return r, nil }, Filter: tenantFilter(fmt.Sprintf("quiet%d", i))})
	}
}

// A save writes the shared cursor and what moved: one event to one
// endpoint among 1 or 10,000 idle ones leaves a checkpoint file (what each
// save of the file store writes) of the same size. (Before, every endpoint
// kept a cursor of its own in it: 10,000 more.)
func TestASavesBytesDoNotGrowWithIdleEndpoints(t *testing.T) {
	size := func(idle int) int64 {
		f := newFixture(t, 1)
		f.quiet(idle)
		f.cfg.Hub.Linger = time.Millisecond
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		g, done := f.run(ctx)
		f.b.commit("t0")
		f.waitAll()
		waitIdle(t, g, f.store)
		waitFor(t, "the busy endpoint's own cursor to be passed and deleted", func() bool {
			_, err := f.store.Load(t.Context(), "hooks/ep0")
			return err != nil
		})
		st, err := os.Stat(f.path)
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		return st.Size()
	}
	one, many := size(1), size(10000)
	t.Logf("checkpoint file after one event: %d bytes with 1 idle endpoint, %d with 10,000", one, many)
	if many > 2*one {
		t.Fatalf("a save writes %d bytes with 10,000 idle endpoints, %d with 1", many, one)
	}
}

// gatedClose is a recorder whose Close waits for gate: a pipeline let go
// idle has not ended while it waits.
type gatedClose struct {
	*recorder
	gate chan struct{}
}

func (s gatedClose) Close(ctx context.Context) error {
	select {
	case <-s.gate:
	case <-ctx.Done():
	}
	return nil
}

// An event for an endpoint that has just been let go idle, whose pipeline
// has not ended yet (its sink's Close waits), wakes it again: the new
// pipeline starts once the old one has ended, and every event is
// delivered once. Driven by the hub's clock and sweep, not by sleeping. A
// restart from what was saved then sends the endpoint nothing again.
func TestAnEventAsTheEndpointIsReleasedIsDeliveredOnce(t *testing.T) {
	f := newFixture(t, 1)
	clk := newFakeClock()
	f.cfg.Hub.clock = clk
	rec := f.recs["hooks/ep0"]
	gate := make(chan struct{})
	f.cfg.Endpoints[0].Open = func() (sink.Sink, error) { return gatedClose{rec, gate}, nil }
	ctx, cancel := context.WithCancel(t.Context())
	g, done := f.run(ctx)
	f.b.commit("t0")
	f.waitAll()
	release := func() bool {
		g.hub.Lock()
		defer g.hub.Unlock()
		clk.Advance(DefaultLinger)
		g.hub.sweepLocked()
		return g.Tap("hooks/ep0").idle
	}
	waitFor(t, "ep0 to be let go idle", release)
	f.b.commit("t0") // its pipeline is still ending, in its sink's Close
	waitFor(t, "ep0 to be woken again", func() bool {
		g.hub.Lock()
		defer g.hub.Unlock()
		return !g.Tap("hooks/ep0").idle
	})
	if n := awakeOf(g); n != 2 {
		t.Fatalf("%d pipelines of ep0, want 2: the released one, ending, and the new one, waiting for it", n)
	}
	if got := rec.ids(); len(got) != 1 {
		t.Fatalf("delivered %v before the released pipeline ended", got)
	}
	close(gate)
	f.waitAll()
	waitFor(t, "ep0 to be let go idle again", release)
	waitIdle(t, g, f.store)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// Restarted from what was saved: the next event is the first it gets.
	f.recs["hooks/ep0"] = &recorder{}
	f.cfg.Endpoints[0].Open = func() (sink.Sink, error) { return f.recs["hooks/ep0"], nil }
	f.cfg.Hub.clock = nil
	ctx, cancel = context.WithCancel(t.Context())
	defer cancel()
	_, done = f.run(ctx)
	f.b.commit("t0")
	waitFor(t, "the event after the restart", func() bool { return len(f.recs["hooks/ep0"].ids()) > 0 })
	if got, want := f.recs["hooks/ep0"].ids(), f.b.want("t0")[2:]; !slices.Equal(got, want) {
		t.Fatalf("after the restart ep0 got %v, want %v (nothing sent twice)", got, want)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A checkpoint file of a version before the shared cursor (a cursor per
// endpoint, none shared) works: every endpoint resumes from its own cursor
// and gets every event after it once; then the shared cursor passes those
// cursors and they are deleted; a restart from that sends nothing twice.
func TestAnOldCheckpointFileRestartsWithoutLoss(t *testing.T) {
	f := newFixture(t, 10)
	f.cfg.Hub.Linger = time.Millisecond
	commitMany(f.b, 30)
	old := map[string]checkpoint.Checkpoint{}
	for key := range f.recs {
		old[key] = checkpoint.Checkpoint{Position: pos(12), UpdatedAt: time.Now().UTC()}
	}
	if err := f.store.(checkpoint.BatchSaver).SaveMany(t.Context(), old); err != nil {
		t.Fatal(err)
	}
	after := func(tn string, n int) []string {
		var out []string
		f.b.mu.Lock()
		defer f.b.mu.Unlock()
		for _, txn := range f.b.txns[n:] {
			for _, e := range txn.Events {
				if e.Headers[0].Value == tn {
					out = append(out, e.ID)
				}
			}
		}
		return out
	}
	ctx, cancel := context.WithCancel(t.Context())
	g, done := f.run(ctx)
	commitMany(f.b, 30)
	for key, r := range f.recs {
		want := after(f.tenant(key), 12)
		waitFor(t, key+" to receive its events after its cursor", func() bool { return len(r.ids()) >= len(want) })
		if got := r.ids(); !slices.Equal(got, want) {
			t.Fatalf("%s got %v, want %v", key, got, want)
		}
	}
	waitIdle(t, g, f.store)
	waitFor(t, "the endpoints' own cursors to be passed and deleted", func() bool {
		all, err := f.store.(checkpoint.Lister).List(t.Context())
		return err == nil && len(all) == 1
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	n := len(f.b.txns)
	for key := range f.recs {
		r := &recorder{}
		f.recs[key] = r
		for i := range f.cfg.Endpoints {
			if f.cfg.Endpoints[i].Key == key {
				f.cfg.Endpoints[i].Open = func() (sink.Sink, error) { return r, nil }
			}
		}
	}
	ctx, cancel = context.WithCancel(t.Context())
	defer cancel()
	_, done = f.run(ctx)
	commitMany(f.b, 10)
	for key, r := range f.recs {
		want := after(f.tenant(key), n)
		waitFor(t, key+" to receive its events after the restart", func() bool { return len(r.ids()) >= len(want) })
		if got := r.ids(); !slices.Equal(got, want) {
			t.Fatalf("after the restart %s got %v, want %v", key, got, want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
