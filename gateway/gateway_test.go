package gateway

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
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

// binlog is an in-memory MariaDB-flavored binlog: transaction n ends at
// GTID position "0-1-n". Streams opened on it read from a position to the
// live end and wait for more, like a replica.
type binlog struct {
	mu    sync.Mutex
	cond  *sync.Cond
	txns  []*event.Txn
	opens map[int]int // slot → streams opened
	open  map[int]int // slot → streams open now
	max   int         // most catch-up streams open at once
}

func newBinlog() *binlog {
	b := &binlog{opens: map[int]int{}, open: map[int]int{}}
	b.cond = sync.NewCond(&b.mu)
	return b
}

func pos(n int) event.Position { return event.Position{GTIDSet: "0-1-" + strconv.Itoa(n)} }

func seq(p event.Position) int {
	n, err := strconv.Atoi(p.GTIDSet[strings.LastIndexByte(p.GTIDSet, '-')+1:])
	if err != nil {
		panic(err)
	}
	return n
}

// commit appends a transaction with one event per tenant given (aggregate
// "<tenant>-agg"), or none.
func (b *binlog) commit(tenants ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(b.txns) + 1
	txn := &event.Txn{Position: pos(n), CommitTime: time.Unix(int64(n), 0)}
	for i, tn := range tenants {
		txn.Events = append(txn.Events, &event.Event{
			ID: fmt.Sprintf("%d.%d", n, i), AggregateID: tn + "-agg", Type: "t",
			Headers: []event.Header{{Key: "tenant", Value: tn}},
		})
	}
	b.txns = append(b.txns, txn)
	b.cond.Broadcast()
}

type stream struct {
	b    *binlog
	slot int
}

func (b *binlog) Open(slot int) pipeline.Source { return stream{b, slot} }

func (s stream) Run(ctx context.Context, from event.Position, handle func(context.Context, *event.Txn) error) error {
	b := s.b
	b.mu.Lock()
	b.opens[s.slot]++
	b.open[s.slot]++
	if s.slot > 0 {
		n := 0
		for sl, c := range b.open {
			if sl > 0 {
				n += c
			}
		}
		b.max = max(b.max, n)
	}
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.open[s.slot]--
		b.mu.Unlock()
	}()
	stop := context.AfterFunc(ctx, func() { b.mu.Lock(); b.cond.Broadcast(); b.mu.Unlock() })
	defer stop()
	next := seq(from) // index of the first transaction after from
	for {
		b.mu.Lock()
		for next >= len(b.txns) && ctx.Err() == nil {
			b.cond.Wait()
		}
		if ctx.Err() != nil {
			b.mu.Unlock()
			return ctx.Err()
		}
		txn := b.txns[next]
		b.mu.Unlock()
		if err := handle(ctx, txn); err != nil {
			return err
		}
		next++
	}
}

// recorder is a sink that keeps what it was written; while gate is closed
// (held) its writes wait.
type recorder struct {
	mu    sync.Mutex
	got   []string
	hold  chan struct{} // nil: never waits
	delay time.Duration // each write takes this long (a slow endpoint)
	// took, if set, is called after each write's delay: a test's clock
	// is moved on by what the write takes in the hub's eyes.
	took func()
}

func (r *recorder) Connect(context.Context) error { return nil }
func (r *recorder) Close(context.Context) error   { return nil }
func (r *recorder) Write(ctx context.Context, batch []*event.Event) error {
	r.mu.Lock()
	hold, delay, took := r.hold, r.delay, r.took
	r.mu.Unlock()
	if delay > 0 {
		time.Sleep(delay)
	}
	if took != nil {
		took()
	}
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range batch {
		r.got = append(r.got, e.ID)
	}
	return nil
}

func (r *recorder) ids() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

func tenantFilter(tn string) Filter {
	return Filter{Header: "tenant", Value: tn, Match: func(e *event.Event) bool {
		for _, h := range e.Headers {
			if h.Key == "tenant" && h.Value == tn {
				return true
			}
		}
		return false
	}}
}

// want lists the ids of tn's events in b, in order.
func (b *binlog) want(tn string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, txn := range b.txns {
		for _, e := range txn.Events {
			if e.Headers[0].Value == tn {
				out = append(out, e.ID)
			}
		}
	}
	return out
}

type fixture struct {
	t     *testing.T
	b     *binlog
	store checkpoint.Store
	path  string // the store's file
	recs  map[string]*recorder
	cfg   Config
}

func newFixture(t *testing.T, endpoints int) *fixture {
	path := filepath.Join(t.TempDir(), "cp.json")
	store, err := checkpoint.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, b: newBinlog(), store: store, path: path, recs: map[string]*recorder{}}
	// The endpoints' pipelines save through one GroupCommit, as the relay
	// gives them (relay/assemble.go): each saves what it acknowledged at
	// once, and those saves are written together.
	saver := checkpoint.NewGroupCommit(store)
	f.cfg = Config{
		Hub:   HubConfig{Name: "hooks", Flavor: "mariadb", QueueTxns: 4, MaxCatchUp: 2, YieldAfter: 50 * time.Millisecond, Open: f.b.Open},
		Store: store, Start: pos(0), SharedKey: SharedKey("hooks"),
		NewPipeline: func(key string, s sink.Sink, start event.Position) (*pipeline.Pipeline, error) {
			// The pipelines log where the gateway does (nil: nowhere), as the
			// relay's do.
			return pipeline.New(pipeline.Config{Name: key, Sink: s, Store: saver, Start: start,
				MaxInFlight: 8, CheckpointInterval: 20 * time.Millisecond, DrainTimeout: 300 * time.Millisecond, Logger: f.cfg.Logger})
		},
	}
	for i := range endpoints {
		tn := fmt.Sprintf("t%d", i%5)
		key := fmt.Sprintf("hooks/ep%d", i)
		r := &recorder{}
		f.recs[key] = r
		f.cfg.Endpoints = append(f.cfg.Endpoints, Endpoint{Key: key, Open: func() (sink.Sink, error) { return r, nil }, Filter: tenantFilter(tn)})
	}
	return f
}

func (f *fixture) tenant(key string) string {
	if n, ok := strings.CutPrefix(key, "hooks/a"); ok {
		return "a" + n // awakeFixture's: a tenant each
	}
	n, _ := strconv.Atoi(strings.TrimPrefix(key, "hooks/ep"))
	return fmt.Sprintf("t%d", n%5)
}

func (f *fixture) run(ctx context.Context) (*Gateway, chan error) {
	g, err := New(ctx, f.cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx, nil) }()
	return g, done
}

// waitFor polls cond until it holds (the test's own deadline bounds it).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		if t.Context().Err() != nil {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (f *fixture) waitAll() {
	for key, r := range f.recs {
		want := f.b.want(f.tenant(key))
		waitFor(f.t, key+" to receive its events", func() bool { return len(r.ids()) >= len(want) })
		if got := r.ids(); !slices.Equal(got, want) {
			f.t.Fatalf("%s received %d events %v, want %d %v", key, len(got), got, len(want), want)
		}
	}
}

func commitMany(b *binlog, n int) {
	for i := range n {
		switch i % 3 {
		case 0:
			b.commit(fmt.Sprintf("t%d", i%5))
		case 1:
			b.commit(fmt.Sprintf("t%d", i%5), fmt.Sprintf("t%d", (i+1)%5))
		default:
			b.commit() // no outbox rows
		}
	}
}

// Endpoints that keep up are never detached: one stream serves them all.
// Keeping up is judged on the hub's clock, here one of the test's that does
// not move (the endpoints' writes take no time): on a loaded machine a
// pipeline that is not scheduled for DetachAfter of wall time would
// otherwise be detached, as the hub is meant to do with a slow endpoint.
func TestEveryEndpointGetsItsEventsOnceFromOneStream(t *testing.T) {
	f := newFixture(t, 20)
	f.cfg.Hub.clock = newFakeClock()
	ctx, cancel := context.WithCancel(t.Context())
	_, done := f.run(ctx)
	commitMany(f.b, 300)
	f.waitAll()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if f.b.opens[0] != 1 || len(f.b.opens) != 1 {
		t.Fatalf("streams opened per slot: %v, want only the shared one, once", f.b.opens)
	}
}

func TestSlowEndpointDetachesCatchesUpAndRejoins(t *testing.T) {
	f := newFixture(t, 6)
	slow := f.recs["hooks/ep0"]
	slow.hold = make(chan struct{})
	ctx, cancel := context.WithCancel(t.Context())
	g, done := f.run(ctx)
	commitMany(f.b, 200)
	// The others get everything while ep0 is stuck.
	for key, r := range f.recs {
		if key == "hooks/ep0" {
			continue
		}
		want := f.b.want(f.tenant(key))
		waitFor(t, key, func() bool { return len(r.ids()) >= len(want) })
	}
	if s := g.Tap("hooks/ep0").State(); s == Attached {
		t.Fatalf("the stuck endpoint is still %s", s)
	}
	close(slow.hold)
	waitFor(t, "ep0 to re-join", func() bool { return g.Tap("hooks/ep0").State() == Attached })
	commitMany(f.b, 60) // after the re-join, on the shared stream
	f.waitAll()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if f.b.opens[1]+f.b.opens[2] == 0 {
		t.Fatalf("no catch-up stream was opened: %v", f.b.opens)
	}
	if f.b.max > f.cfg.Hub.MaxCatchUp {
		t.Fatalf("%d catch-up streams open at once, want at most %d", f.b.max, f.cfg.Hub.MaxCatchUp)
	}
}

// An endpoint alone on the stream holds no one back: however long the
// stream waits for its full queue in all, it is not detached while it takes
// transactions (a catch-up stream would only decode the binlog a second
// time). Once it takes none for DetachAfter, it is.
//
// The hub measures its waits on a clock of the test's, moved on by 20 ms
// per write: the stream waits 20 ms per transaction, far more than
// DetachAfter in all, whereas between two transactions it takes at most
// the writes in flight (MaxInFlight 8) pass, 160 ms. So the endpoint takes
// transactions by the hub's clock however slowly the machine runs it, and
// is detached only once it is stuck and the test moves the clock on.
func TestAnEndpointAloneIsWaitedForWhileItTakesTransactions(t *testing.T) {
	f := newFixture(t, 1)
	clk := newFakeClock()
	f.cfg.Hub.clock = clk
	f.cfg.Hub.DetachAfter = 200 * time.Millisecond
	r := f.recs["hooks/ep0"]
	// Each write: the stream waits for the full queue (the real delay)
	// 20 ms in the hub's eyes.
	r.delay, r.took = 5*time.Millisecond, func() { clk.Advance(20 * time.Millisecond) }
	ctx, cancel := context.WithCancel(t.Context())
	g, done := f.run(ctx)
	commitMany(f.b, 600)
	f.waitAll()
	if s := g.Tap("hooks/ep0").State(); s != Attached {
		t.Errorf("the slow endpoint alone on the stream is %s, want %s", s, Attached)
	}
	if len(f.b.opens) != 1 {
		t.Errorf("streams opened per slot: %v, want only the shared one", f.b.opens)
	}
	if waited := clk.Since(time.Time{}); waited <= f.cfg.Hub.DetachAfter {
		t.Fatalf("the endpoint's writes took %s in all, not more than DetachAfter: the case tests nothing", waited)
	}

	// Stuck: it takes nothing, and is detached once DetachAfter passes.
	r.mu.Lock()
	r.delay, r.took, r.hold = 0, nil, make(chan struct{})
	hold := r.hold
	r.mu.Unlock()
	commitMany(f.b, 200)
	waitFor(t, "the stuck endpoint to be detached", func() bool {
		clk.Advance(50 * time.Millisecond)
		return g.Tap("hooks/ep0").State() != Attached
	})
	close(hold)
	f.waitAll()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// fakeClock is a hub's clock that moves only when Advance is called.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers map[*fakeTimer]struct{}
}

type fakeTimer struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{timers: map[*fakeTimer]struct{}{}} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Since returns how far the clock has moved past t.
func (c *fakeClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

func (c *fakeClock) After(d time.Duration) (<-chan time.Time, func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ft := &fakeTimer{at: c.now.Add(d), ch: make(chan time.Time, 1)}
	if d <= 0 {
		ft.ch <- c.now
		return ft.ch, func() {}
	}
	c.timers[ft] = struct{}{}
	return ft.ch, func() {
		c.mu.Lock()
		delete(c.timers, ft)
		c.mu.Unlock()
	}
}

// Advance moves the clock on by d and fires the timers it passes.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for ft := range c.timers {
		if !ft.at.After(c.now) {
			ft.ch <- c.now
			delete(c.timers, ft)
		}
	}
}

func TestManyStuckEndpointsWaitTheirTurn(t *testing.T) {
	f := newFixture(t, 10)
	var holds []chan struct{}
	for i := range 6 {
		r := f.recs[fmt.Sprintf("hooks/ep%d", i)]
		r.hold = make(chan struct{})
		holds = append(holds, r.hold)
	}
	ctx, cancel := context.WithCancel(t.Context())
	_, done := f.run(ctx)
	commitMany(f.b, 200)
	for _, h := range holds {
		close(h)
	}
	commitMany(f.b, 100)
	f.waitAll()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if f.b.max > 2 {
		t.Fatalf("%d catch-up streams open at once, want at most 2", f.b.max)
	}
}

func TestRestartResumesEachCursorWithoutDuplicates(t *testing.T) {
	f := newFixture(t, 8)
	slow := f.recs["hooks/ep3"]
	slow.hold = make(chan struct{})
	ctx, cancel := context.WithCancel(t.Context())
	_, done := f.run(ctx)
	commitMany(f.b, 120)
	for key, r := range f.recs {
		if key == "hooks/ep3" {
			continue
		}
		want := f.b.want(f.tenant(key))
		waitFor(t, key, func() bool { return len(r.ids()) >= len(want) })
	}
	// Stop with ep3 stuck: its events are not acknowledged.
	go func() { time.Sleep(50 * time.Millisecond); close(slow.hold) }()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	before := map[string]int{}
	for key, r := range f.recs {
		before[key] = len(r.ids())
	}
	// Restart on the same store: every endpoint resumes at its cursor.
	ctx, cancel = context.WithCancel(t.Context())
	_, done = f.run(ctx)
	commitMany(f.b, 60)
	for key, r := range f.recs {
		want := f.b.want(f.tenant(key))
		waitFor(t, key+" after restart", func() bool { return len(r.ids()) >= len(want) })
		got := r.ids()
		if key != "hooks/ep3" && !slices.Equal(got, want) {
			t.Fatalf("%s: %d events after restart, want %d exactly once (received before restart: %d)", key, len(got), len(want), before[key])
		}
		// ep3 may see again what was in flight at the stop (at least once), but
		// nothing is missing and its first deliveries are in order.
		seen := map[string]bool{}
		var firsts []string
		for _, id := range got {
			if !seen[id] {
				seen[id] = true
				firsts = append(firsts, id)
			}
		}
		if !slices.Equal(firsts, want) {
			t.Fatalf("%s: first deliveries %v, want %v", key, firsts, want)
		}
	}
	cancel()
	<-done
}

func TestEndpointAttachedAtATransactionGetsOnlyLaterEvents(t *testing.T) {
	f := newFixture(t, 2)
	ctx, cancel := context.WithCancel(t.Context())
	g, err := New(ctx, f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	late := &recorder{}
	var at int
	done := make(chan error, 1)
	go func() {
		done <- g.Run(ctx, func(g *Gateway, txn *event.Txn) {
			at = seq(txn.Position)
			if err := g.StartLocked(Endpoint{Key: "hooks/late", Sink: late, Filter: tenantFilter("t1")}); err != nil {
				t.Error(err)
			}
		})
	}()
	commitMany(f.b, 50)
	f.b.mu.Lock()
	n := len(f.b.txns) + 1
	f.b.txns = append(f.b.txns, &event.Txn{Position: pos(n), Changes: []event.Change{{Table: "x.endpoints", Op: event.Insert}},
		Events: []*event.Event{{ID: "same-txn", Headers: []event.Header{{Key: "tenant", Value: "t1"}}}}})
	f.b.cond.Broadcast()
	f.b.mu.Unlock()
	commitMany(f.b, 50)
	var want []string
	for _, id := range f.b.want("t1") {
		txn, _ := strconv.Atoi(strings.Split(id, ".")[0])
		if id != "same-txn" && txn > n {
			want = append(want, id)
		}
	}
	waitFor(t, "the late endpoint", func() bool { return len(late.ids()) >= len(want) })
	if got := late.ids(); !slices.Equal(got, want) || at != n {
		t.Fatalf("endpoint created at txn %d (changed at %d) got %v, want %v", n, at, got, want)
	}
	cancel()
	<-done
}

func TestFailingEndpointIsDisabledUntilEnabled(t *testing.T) {
	f := newFixture(t, 3)
	health := NewHealth()
	f.cfg.Health, f.cfg.DisableAfter = health, 100*time.Millisecond
	bad := f.recs["hooks/ep1"]
	bad.hold = make(chan struct{}) // it never acknowledges while held
	ctx, cancel := context.WithCancel(t.Context())
	g, err := New(ctx, f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	g.pollEvery = 20 * time.Millisecond
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx, nil) }()
	commitMany(f.b, 30)
	waitFor(t, "ep1 to be running", func() bool { return g.Tap("hooks/ep1") != nil })
	health.Attempt("hooks/ep1", false) // its attempts fail from now on
	waitFor(t, "ep1 to be disabled", func() bool { return g.IsDisabled("hooks/ep1") })
	// Its checkpoint says why once disable has written it (after
	// IsDisabled says so).
	var cp checkpoint.Checkpoint
	waitFor(t, "ep1's checkpoint to say why it is disabled", func() bool {
		cp, err = f.store.Load(t.Context(), "hooks/ep1")
		return err == nil && cp.Disabled != ""
	})
	close(bad.hold)
	commitMany(f.b, 30) // committed while it is disabled: wait behind its cursor
	time.Sleep(50 * time.Millisecond)
	if g.Tap("hooks/ep1") != nil {
		t.Fatal("a disabled endpoint runs")
	}
	// Enabled through the store (what `outbox-relay endpoints enable` does):
	// it resumes from its cursor and gets every event of its tenant once.
	cp.Disabled = ""
	if err := f.store.Save(t.Context(), "hooks/ep1", cp); err != nil {
		t.Fatal(err)
	}
	f.waitAll()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A filter changed while an endpoint catches up applies at its
// transaction on the catch-up stream too: the events before it are matched
// with the old filter, those after with the new.
func TestFilterChangeAppliesAtItsTransactionWhileCatchingUp(t *testing.T) {
	f := newFixture(t, 2) // ep0 on t0, ep1 on t1
	slow := f.recs["hooks/ep0"]
	slow.hold = make(chan struct{})
	ctx, cancel := context.WithCancel(t.Context())
	g, err := New(ctx, f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- g.Run(ctx, func(g *Gateway, txn *event.Txn) {
			g.Hub().SetFilterLocked(g.Tap("hooks/ep0"), tenantFilter("t2"))
		})
	}()
	commitMany(f.b, 120) // ep0 falls behind on t0's events
	waitFor(t, "ep0 to be detached", func() bool { tp := g.Tap("hooks/ep0"); return tp != nil && tp.State() != Attached })
	f.b.mu.Lock()
	at := len(f.b.txns) + 1
	f.b.txns = append(f.b.txns, &event.Txn{Position: pos(at), Changes: []event.Change{{Table: "x.endpoints", Op: event.Update}}})
	f.b.cond.Broadcast()
	f.b.mu.Unlock()
	commitMany(f.b, 120)
	close(slow.hold)
	var want []string
	f.b.mu.Lock()
	for i, txn := range f.b.txns {
		tenant := "t0"
		if i+1 > at {
			tenant = "t2"
		}
		for _, e := range txn.Events {
			if e.Headers[0].Value == tenant {
				want = append(want, e.ID)
			}
		}
	}
	f.b.mu.Unlock()
	waitFor(t, "ep0 to catch up", func() bool { return len(slow.ids()) >= len(want) })
	if got := slow.ids(); !slices.Equal(got, want) {
		t.Fatalf("ep0 got %d events, want %d: t0's up to the change at txn %d, t2's after\ngot  %v\nwant %v", len(got), len(want), at, got, want)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// The endpoints live as long as Run: an endpoint started after Run has
// returned is refused, not left running on a context of its own.
func TestAnEndpointStartedAfterRunEndedIsRefused(t *testing.T) {
	f := newFixture(t, 3)
	ctx, cancel := context.WithCancel(t.Context())
	g, done := f.run(ctx)
	commitMany(f.b, 30)
	f.waitAll()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	err := g.Start(Endpoint{Key: "hooks/late", Sink: &recorder{}, Filter: tenantFilter("t1")})
	if !errors.Is(err, context.Canceled) || g.Tap("hooks/late") != nil {
		t.Fatalf("Start after Run returned = %v (running: %v), want an error wrapping context.Canceled and nothing running", err, g.Tap("hooks/late") != nil)
	}
}

// An endpoint that does not run keeps a cursor where it came into being:
// one Held at start gets one at Start, one held at a transaction
// (HoldLocked, as a table row inserted off or invalid) gets one there.
// Started much later, each sends every event since, none before.
func TestAHeldEndpointStartsWhereItCameIntoBeing(t *testing.T) {
	f := newFixture(t, 1)
	f.cfg.Endpoints = append(f.cfg.Endpoints, Endpoint{Key: "hooks/held", Held: true})
	ctx, cancel := context.WithCancel(t.Context())
	g, err := New(ctx, f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if cp, err := f.store.Load(ctx, "hooks/held"); err != nil || cp.Position != pos(0) {
		t.Fatalf("the held endpoint's cursor after New: %+v, %v; want one at Start", cp, err)
	}
	done := make(chan error, 1)
	go func() {
		done <- g.Run(ctx, func(g *Gateway, txn *event.Txn) {
			if err := g.HoldLocked("hooks/late"); err != nil {
				t.Error(err)
			}
		})
	}()
	commitMany(f.b, 50)
	f.b.mu.Lock()
	n := len(f.b.txns) + 1
	f.b.txns = append(f.b.txns, &event.Txn{Position: pos(n), Changes: []event.Change{{Table: "x.endpoints", Op: event.Insert}}})
	f.b.cond.Broadcast()
	f.b.mu.Unlock()
	commitMany(f.b, 50)
	f.waitAll() // the running endpoint has read past both
	held, late := &recorder{}, &recorder{}
	for key, r := range map[string]*recorder{"hooks/held": held, "hooks/late": late} {
		if err := g.Start(Endpoint{Key: key, Sink: r, Filter: tenantFilter("t1")}); err != nil {
			t.Fatal(err)
		}
	}
	all := f.b.want("t1")
	var after []string
	for _, id := range all {
		if txn, _ := strconv.Atoi(strings.Split(id, ".")[0]); txn > n {
			after = append(after, id)
		}
	}
	waitFor(t, "both held endpoints to catch up", func() bool { return len(held.ids()) >= len(all) && len(late.ids()) >= len(after) })
	if got := held.ids(); !slices.Equal(got, all) {
		t.Errorf("the endpoint held since the start got %v, want every event %v", got, all)
	}
	if got := late.ids(); !slices.Equal(got, after) {
		t.Errorf("the endpoint held at txn %d got %v, want the events after it %v", n, got, after)
	}
	cancel()
	<-done
}

// What Go started is waited for by Run: Run returns only once it has
// returned (the endpoints table's follower drops a deleted endpoint's
// cursor that way, before the store is closed).
func TestRunWaitsForWhatGoStarted(t *testing.T) {
	f := newFixture(t, 1)
	ctx, cancel := context.WithCancel(t.Context())
	g, done := f.run(ctx)
	waitFor(t, "the endpoint to start", func() bool { return len(g.Keys()) == 1 })
	release, ended := make(chan struct{}), make(chan struct{})
	g.Go(func() {
		<-release
		close(ended)
	})
	cancel()
	returned := make(chan bool)
	go func() {
		if err := <-done; err != nil {
			t.Error(err)
		}
		select {
		case <-ended:
			returned <- true
		default:
			returned <- false
		}
	}()
	close(release)
	if !<-returned {
		t.Fatal("Run returned before the goroutine Go started had")
	}
}
