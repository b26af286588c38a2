package gateway

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/sink"
)

// awakeFixture is a gateway of n endpoints, one tenant each ("a0", …),
// with at most maxAwake awake at once, on a clock the test moves (so that
// no endpoint is let go for its Linger and the stream never stalls unless
// the test says so: every release seen is one the bound made), each
// endpoint's writes held until the test lets them go.
func awakeFixture(t *testing.T, n, maxAwake int) (*fixture, *fakeClock, chan struct{}) {
	f := newFixture(t, 0)
	clk := newFakeClock()
	f.cfg.Hub.clock = clk
	f.cfg.Hub.MaxAwake = maxAwake
	hold := make(chan struct{})
	for i := range n {
		key := fmt.Sprintf("hooks/a%d", i)
		r := &recorder{hold: hold}
		f.recs[key] = r
		f.cfg.Endpoints = append(f.cfg.Endpoints, Endpoint{Key: key, Open: func() (sink.Sink, error) { return r, nil }, Filter: tenantFilter(fmt.Sprintf("a%d", i))})
	}
	return f, clk, hold
}

// free lets the writes of the endpoints whose key which selects go at once.
func (f *fixture) free(which func(key string) bool) {
	free := make(chan struct{})
	close(free)
	for key, r := range f.recs {
		if which(key) {
			r.hold = free
		}
	}
}

// waitEach waits until endpoints from to to-1 of an awakeFixture each have
// one event.
func (f *fixture) waitEach(from, to int, what string) {
	for i := from; i < to; i++ {
		key := fmt.Sprintf("hooks/a%d", i)
		waitFor(f.t, key+" to get "+what, func() bool { return len(f.recs[key].ids()) == 1 })
	}
}

// tenants returns the tenants of endpoints from to to-1 of an awakeFixture.
func tenants(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("a%d", i))
	}
	return out
}

// hubFigures reads the hub's count of awake endpoints, the most at once,
// and its stalls, once the stream is not waiting (it holds the lock).
func hubFigures(g *Gateway) (awake, peak, overs int) {
	g.hub.Lock()
	defer g.hub.Unlock()
	return g.hub.awake, g.hub.peakAwake, g.hub.overs
}

// One event to each of 20 endpoints with at most 3 awake: the stream wakes
// 3 and waits (their writes are held: none is delivered, no fourth wakes);
// once they deliver, each is let go at once (the clock does not move: no
// Linger passes) and the next wake in turn. Every endpoint gets its events
// once and in order, including those of the transactions after the burst,
// and never more than 3 are awake.
func TestTheSharedStreamWaitsAtMaxAwakeAndLosesNothing(t *testing.T) {
	const n, limit = 20, 3
	f, clk, hold := awakeFixture(t, n, limit)
	g, stop := f.runFor(t)
	f.b.commit(tenants(0, n)...)
	f.b.commit(tenants(0, n)...)
	f.b.commit("a0", "a19")
	waitFor(t, "the stream to wait at the bound", func() bool {
		if got := awakeOf(g); got > limit {
			t.Fatalf("%d pipelines, want at most MaxAwake %d", got, limit)
		}
		waits, _ := g.hub.AwakeWaits()
		return waits > 0
	})
	if got := awakeOf(g); got != limit {
		t.Fatalf("%d pipelines while the stream waits at MaxAwake %d", got, limit)
	}
	for key, r := range f.recs {
		if got := r.ids(); len(got) > 0 {
			t.Fatalf("%s delivered %v while its write was held", key, got)
		}
	}
	close(hold)
	f.waitAll()
	waitFor(t, "the stream to hand on the last transaction", func() bool { return seq(g.hub.Position()) == 3 })
	awake, peak, overs := hubFigures(g)
	if peak != limit || overs != 0 {
		t.Errorf("at most %d awake at once (%d stalls past the bound), want %d and none", peak, overs, limit)
	}
	if awake > limit {
		t.Errorf("%d awake after the burst, want at most %d", awake, limit)
	}
	waits, _ := g.hub.AwakeWaits()
	t.Logf("%d endpoints, %d awake at most, %d waits at the bound", n, peak, waits)
	// The last ones woken go idle after their Linger (an awake endpoint
	// may re-send its in-flight events after a restart; an idle one none).
	waitFor(t, "the last endpoints to be let go after their Linger", func() bool {
		g.hub.Lock()
		defer g.hub.Unlock()
		clk.Advance(DefaultLinger)
		g.hub.sweepLocked()
		return g.hub.awake == 0
	})
	waitIdle(t, g, f.store)
	// Once idle, no endpoint keeps a cursor of its own: the shared one
	// passed them all, and they were deleted.
	for key := range f.recs {
		waitFor(t, key+"'s own cursor to be deleted", func() bool {
			_, err := f.store.Load(t.Context(), key)
			return err != nil
		})
	}
	stop()

	// Restarted from what was saved: nothing is sent again.
	for key := range f.recs {
		f.recs[key] = &recorder{}
	}
	for i := range f.cfg.Endpoints {
		r := f.recs[f.cfg.Endpoints[i].Key]
		f.cfg.Endpoints[i].Open = func() (sink.Sink, error) { return r, nil }
	}
	_, stop = f.runFor(t)
	f.b.commit(tenants(0, n)...)
	for i := range n {
		key := fmt.Sprintf("hooks/a%d", i)
		want := f.b.want(fmt.Sprintf("a%d", i))
		want = want[len(want)-1:]
		waitFor(t, key+" to get the event after the restart", func() bool { return len(f.recs[key].ids()) > 0 })
		if got := f.recs[key].ids(); !slices.Equal(got, want) {
			t.Fatalf("after the restart %s got %v, want %v (nothing sent twice)", key, got, want)
		}
	}
	stop()
}

// Endpoints whose receivers are down (their attempts fail, their writes
// never return) do not count toward MaxAwake: with 2 awake at most and 2
// such endpoints woken first, the 8 others still get their events.
func TestFailingEndpointsDoNotHoldTheStreamAtMaxAwake(t *testing.T) {
	const n, limit = 10, 2
	f, _, _ := awakeFixture(t, n, limit)
	down := map[string]bool{"hooks/a0": true, "hooks/a1": true}
	f.cfg.Hub.Failing = func(key string) bool { return down[key] }
	f.free(func(key string) bool { return !down[key] })
	g, stop := f.runFor(t)
	f.b.commit(tenants(0, n)...)
	f.waitEach(2, n, "its event")
	waitFor(t, "the stream to hand the transaction on", func() bool { return seq(g.hub.Position()) == 1 })
	if _, _, overs := hubFigures(g); overs != 0 {
		t.Errorf("the stream stalled %d times, want none: failing endpoints do not count", overs)
	}
	stop()
}

// When every awake endpoint is stuck (its write never returns) and none
// is failing, the stream waits at MaxAwake no longer than awakeStall on
// its clock, then goes on past the bound: the others get their events.
func TestStuckEndpointsStallTheStreamAtMostAwakeStall(t *testing.T) {
	const n, limit = 6, 2
	f, clk, _ := awakeFixture(t, n, limit)
	f.b.commit(tenants(0, limit)...) // a0 and a1 wake first, and stay stuck
	f.b.commit(tenants(limit, n)...)
	f.free(func(key string) bool { i, _ := strconv.Atoi(strings.TrimPrefix(key, "hooks/a")); return i >= limit })
	g, stop := f.runFor(t)
	waitFor(t, "the stream to wait at the bound", func() bool { waits, _ := g.hub.AwakeWaits(); return waits > 0 })
	for i := limit; i < n; i++ {
		if got := f.recs[fmt.Sprintf("hooks/a%d", i)].ids(); len(got) > 0 {
			t.Fatalf("a%d got %v before the stall was over", i, got)
		}
	}
	clk.Advance(awakeStall)
	f.waitEach(limit, n, "its event past the bound")
	if _, _, overs := hubFigures(g); overs != 1 {
		t.Errorf("%d stalls, want 1", overs)
	}
	stop()
}

// Endpoints whose sink was built ahead stay awake once woken and cannot be
// let go: they do not count toward MaxAwake, so with 1 awake at most, 4
// such endpoints all get their events without the stream stalling.
func TestEndpointsBuiltAheadDoNotCountTowardMaxAwake(t *testing.T) {
	const n, limit = 4, 1
	f, _, _ := awakeFixture(t, n, limit)
	f.free(func(string) bool { return true })
	for i := range f.cfg.Endpoints {
		f.cfg.Endpoints[i].Sink, f.cfg.Endpoints[i].Open = f.recs[f.cfg.Endpoints[i].Key], nil
	}
	g, stop := f.runFor(t)
	f.b.commit(tenants(0, n)...)
	f.waitAll()
	if awake, _, overs := hubFigures(g); awake != 0 || overs != 0 {
		t.Errorf("%d counted awake, %d stalls: endpoints built ahead count toward MaxAwake", awake, overs)
	}
	stop()
}

// The sink's series of the bound move as the shared stream waits at
// MaxAwake: one transaction for 6 endpoints with 2 awake at most, their
// writes held. While the stream waits, outbox_relay_gateway_awake_endpoints
// is 2 and the waits counter has counted the wait; the time the test moves
// the hub's clock by during the wait shows in the seconds counter before
// the wait ends. Once every endpoint has delivered and been let go, the
// gauge is back to 0, the waits counted are the hub's, and no time passed
// on the hub's clock in another wait.
func TestTheAwakeSeriesMoveAsTheStreamWaitsAtMaxAwake(t *testing.T) {
	const n, limit = 6, 2
	f, clk, hold := awakeFixture(t, n, limit)
	_, gm, reg, _ := newMetricsTest(t)
	f.cfg.Hub.Observer = gm.Sink("hooks")
	series := func(name string) float64 { return gathered(t, reg, name, map[string]string{"sink": "hooks"}) }
	if got := series("outbox_relay_gateway_max_awake_waits_total"); got != 0 {
		t.Fatalf("%v waits before any event", got)
	}
	g, stop := f.runFor(t)
	f.b.commit(tenants(0, n)...)
	waitFor(t, "the waits counter to count the stream's wait", func() bool {
		return series("outbox_relay_gateway_max_awake_waits_total") == 1
	})
	if got := series("outbox_relay_gateway_awake_endpoints"); got != limit {
		t.Errorf("%v endpoints awake while the stream waits at MaxAwake %d", got, limit)
	}
	if got := series("outbox_relay_gateway_max_awake_wait_seconds_total"); got != 0 {
		t.Errorf("%v s waited before the hub's clock moved", got)
	}
	clk.Advance(3 * time.Second) // less than awakeStall: the stream still waits
	waitFor(t, "the wait's time to show while it lasts", func() bool {
		return series("outbox_relay_gateway_max_awake_wait_seconds_total") == 3
	})
	if got := series("outbox_relay_gateway_awake_endpoints"); got != limit {
		t.Errorf("%v endpoints awake while the stream still waits, want %d", got, limit)
	}
	close(hold)
	f.waitAll()
	waitFor(t, "the stream to hand the transaction on", func() bool { return seq(g.hub.Position()) == 1 })
	waitFor(t, "the last endpoints to be let go after their Linger", func() bool {
		g.hub.Lock()
		defer g.hub.Unlock()
		clk.Advance(DefaultLinger)
		g.hub.sweepLocked()
		return g.hub.awake == 0
	})
	if got := series("outbox_relay_gateway_awake_endpoints"); got != 0 {
		t.Errorf("%v endpoints awake once every endpoint was let go, want 0", got)
	}
	waits, waited := g.hub.AwakeWaits()
	if got := series("outbox_relay_gateway_max_awake_waits_total"); got != float64(waits) || waits < 1 {
		t.Errorf("the waits counter is %v, the hub counted %d waits", got, waits)
	}
	if got := series("outbox_relay_gateway_max_awake_wait_seconds_total"); got != 3 || waited != 3*time.Second {
		t.Errorf("the seconds counter is %v and the hub waited %s, want 3s: the clock moved 3s during a wait, and in none after", got, waited)
	}
	stop()
}
