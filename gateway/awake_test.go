package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/pipeline"
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

// lingerUntil moves the hub's clock on by the Linger, and sweeps, until
// at most left endpoints are awake: the others were let go.
func lingerUntil(t *testing.T, g *Gateway, clk *fakeClock, left int) {
	waitFor(t, "the woken endpoints to be let go after their Linger", func() bool {
		g.hub.Lock()
		defer g.hub.Unlock()
		clk.Advance(DefaultLinger)
		g.hub.sweepLocked()
		return g.hub.awake <= left
	})
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
	lingerUntil(t, g, clk, 0)
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
	lingerUntil(t, g, clk, 0)
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

// logLine is a log record a test kept: its level, message and the sink
// attribute of its logger (an endpoint's pipeline logs with its key).
type logLine struct {
	level     slog.Level
	msg, sink string
}

// logLines keeps every record logged through it, at every level.
type logLines struct {
	mu    *sync.Mutex
	lines *[]logLine
	sink  string
}

func newLogLines() logLines { return logLines{mu: &sync.Mutex{}, lines: &[]logLine{}} }

func (l logLines) Enabled(context.Context, slog.Level) bool { return true }
func (l logLines) WithGroup(string) slog.Handler            { return l }
func (l logLines) WithAttrs(as []slog.Attr) slog.Handler {
	for _, a := range as {
		if a.Key == "sink" {
			l.sink = a.Value.String()
		}
	}
	return l
}

func (l logLines) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	*l.lines = append(*l.lines, logLine{r.Level, r.Message, l.sink})
	l.mu.Unlock()
	return nil
}

// count returns how many records at level had message msg and, unless
// sink is "", were logged by sink.
func (l logLines) count(level slog.Level, msg, sink string) (n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, x := range *l.lines {
		if x.level == level && x.msg == msg && (sink == "" || x.sink == sink) {
			n++
		}
	}
	return n
}

// at returns the records logged at level or above.
func (l logLines) at(level slog.Level) (out []logLine) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, x := range *l.lines {
		if x.level >= level {
			out = append(out, x)
		}
	}
	return out
}

// Waking and letting go endpoints logs at Debug: 30 endpoints woken by
// one event each and let go after their Linger log their pipelines' starts
// at Debug, and no Info line of their own (nor at the gateway's end). An
// endpoint whose sink was built ahead (not let go: not woken on demand)
// still logs its start at Info, and one whose writes fail still logs them
// at Warn.
func TestWakesAndReleasesLogAtDebug(t *testing.T) {
	const n = 30
	f, clk, _ := awakeFixture(t, n, 0)
	f.free(func(string) bool { return true })
	logs := newLogLines()
	f.cfg.Logger = slog.New(logs)
	static := &recorder{}
	f.cfg.Endpoints = append(f.cfg.Endpoints,
		Endpoint{Key: "hooks/static", Sink: static, Filter: tenantFilter("static")},
		Endpoint{Key: "hooks/down", Open: func() (sink.Sink, error) { return failingSink{}, nil }, Filter: tenantFilter("down")})
	g, stop := f.runFor(t)
	f.b.commit(append(tenants(0, n), "static", "down")...)
	f.waitEach(0, n, "its event")
	waitFor(t, "the endpoint built ahead to get its event", func() bool { return len(static.ids()) == 1 })
	waitFor(t, "the failing endpoint to log its failure", func() bool {
		return logs.count(slog.LevelWarn, "sink write failed; retrying", "hooks/down") > 0
	})
	lingerUntil(t, g, clk, 1) // the failing one holds its event
	waitFor(t, "the pipelines let go to end", func() bool { return awakeOf(g) == 2 })
	for i := range n {
		key := fmt.Sprintf("hooks/a%d", i)
		if got := logs.count(slog.LevelDebug, "pipeline starting", key); got != 1 {
			t.Errorf("%s logged its start %d times at Debug, want once", key, got)
		}
	}
	if got := logs.count(slog.LevelInfo, "pipeline starting", "hooks/static"); got != 1 {
		t.Errorf("the endpoint built ahead logged its start %d times at Info, want once", got)
	}
	stop() // the pipelines still awake end, with their final saves
	var info []logLine
	for _, l := range logs.at(slog.LevelInfo) {
		if l.level == slog.LevelInfo && l.sink != "hooks/static" && l.msg != "webhook gateway starting" {
			info = append(info, l)
		}
	}
	if len(info) > 0 {
		t.Errorf("%d Info lines for %d wakes and releases, want none: %v", len(info), n, info)
	}
}

// failingSink is an endpoint's sink whose every write fails, as a
// receiver that answers 503 does.
type failingSink struct{}

func (failingSink) Connect(context.Context) error { return nil }
func (failingSink) Close(context.Context) error   { return nil }
func (failingSink) Write(context.Context, []*event.Event) error {
	return errors.New("receiver answered 503 Service Unavailable")
}

// loadFails is a store whose reads fail: a pipeline on it fails before it
// reads its source.
type loadFails struct{ checkpoint.Store }

func (loadFails) Load(context.Context, string) (checkpoint.Checkpoint, error) {
	return checkpoint.Checkpoint{}, errors.New("checkpoint store unreachable")
}

// A woken endpoint whose pipeline fails before it reads its tap (its
// checkpoint cannot be read) is off the shared stream once it has
// stopped: it is not counted awake (by the hub, for MaxAwake, nor in
// outbox_relay_gateway_awake_endpoints), and once the others are let go
// none is.
func TestAnEndpointThatFailsAtItsWakeIsNotCountedAwake(t *testing.T) {
	f, clk, _ := awakeFixture(t, 3, 0)
	f.free(func(string) bool { return true })
	_, gm, reg, _ := newMetricsTest(t)
	f.cfg.Hub.Observer = gm.Sink("hooks")
	stopped := make(chan string, 1)
	f.cfg.Stopped = func(key string, err error) { stopped <- key }
	newPipeline := f.cfg.NewPipeline
	f.cfg.NewPipeline = func(key string, s sink.Sink, start event.Position) (*pipeline.Pipeline, error) {
		if key != "hooks/a1" {
			return newPipeline(key, s, start)
		}
		return pipeline.New(pipeline.Config{Name: key, Sink: s, Store: loadFails{f.store}, Start: start})
	}
	g, stop := f.runFor(t)
	f.b.commit(tenants(0, 3)...)
	f.waitEach(0, 1, "its event")
	f.waitEach(2, 3, "its event")
	if key := <-stopped; key != "hooks/a1" {
		t.Fatalf("%s stopped, want hooks/a1", key)
	}
	// Once the other two are let go (after their Linger) and every
	// pipeline has ended: the hub's count is read only then, not as soon
	// as it reads 1, which a loaded machine can show while one of the
	// others is still awake and the failed one already uncounted.
	waitFor(t, "the others to be let go and every pipeline to end", func() bool {
		g.hub.Lock()
		clk.Advance(DefaultLinger)
		g.hub.sweepLocked()
		g.hub.Unlock()
		return awakeOf(g) == 0
	})
	g.hub.Lock()
	awake := g.hub.awake
	g.hub.Unlock()
	if awake != 0 {
		t.Errorf("the hub counts %d endpoints awake once the others were let go, want 0: the one that failed at its wake is still counted", awake)
	}
	if got := gathered(t, reg, "outbox_relay_gateway_awake_endpoints", map[string]string{"sink": "hooks"}); got != 0 {
		t.Errorf("outbox_relay_gateway_awake_endpoints is %v, want 0", got)
	}
	stop()
}
