package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/defaults"
	"github.com/outbox-relay/outbox-relay/pipeline"
	"github.com/outbox-relay/outbox-relay/sink"
)

// DefaultRejoinWindow: endpoints whose cursors' commit times are within
// this of the newest start on the shared stream after a restart; older
// ones catch up on their own.
const DefaultRejoinWindow = time.Minute

// DefaultDisableAfter: an endpoint whose attempts have all failed for five
// days is disabled (Svix's figure).
const DefaultDisableAfter = config.DefaultDisableAfter

// Endpoint is one endpoint of the gateway.
type Endpoint struct {
	// Key is its checkpoint key and name in logs and metrics ("sink/endpoint").
	Key string
	// Sink is the endpoint's sink, built ahead (static endpoints, tests);
	// nil when Open builds it, or when the endpoint is Held.
	Sink sink.Sink
	// Open, if set, builds the endpoint's sink when it wakes; the gateway
	// closes that sink when it lets the endpoint go idle. Sink is then nil.
	// An Open error stops that endpoint (Config.Stopped), its events kept
	// behind its cursor; the others go on. It is called on the endpoint's
	// own goroutine, never under the hub's lock.
	Open   func() (sink.Sink, error)
	Filter Filter
	// Held says the endpoint does not run (its table row is off, or cannot
	// be used; Sink is nil): the gateway does not start it, but keeps its
	// cursor, saving one at Config.Start when it has none, so that once it
	// runs (Start) it sends every event after the point it came into being.
	Held bool
}

// Build returns the endpoint's sink: Sink, or one Open builds (nil, and no
// error, for a Held endpoint, which has neither). The caller closes one
// Open built.
func (e Endpoint) Build() (sink.Sink, error) {
	if e.Sink != nil || e.Open == nil {
		return e.Sink, nil
	}
	s, err := e.Open()
	if err != nil {
		return nil, fmt.Errorf("endpoint %s: open its sink: %w", e.Key, err)
	}
	return s, nil
}

// Config wires a gateway.
type Config struct {
	Hub HubConfig
	// Store holds the endpoints' cursors; Run reads them to pick the
	// shared stream's start.
	Store checkpoint.Store
	// SharedKey, when set, is the key of the sink's shared cursor (see
	// SharedKey): endpoints go idle between events, with no pipeline, and
	// keep a cursor of their own only by exception (see the package
	// doc). The store should then be a checkpoint.BatchWriter, so that the
	// shared cursor and the cursors it passes are written at once. Empty:
	// every endpoint runs a pipeline, each with its own cursor, always.
	SharedKey string
	// Writer, if set, writes the shared cursor and the cursors it saves
	// and deletes (the pipelines' checkpoint.GroupCommit: they go into
	// the pipelines' next write instead of a write of their own). Nil:
	// Store.
	Writer checkpoint.BatchWriter
	// Start is where an endpoint with no cursor begins.
	Start event.Position
	// Identity is stored with the cursors the gateway saves itself, for
	// endpoints that do not run and have none (Endpoint.Held, HoldLocked):
	// the pipelines' checkpoint identity (flavor, server id/uuid).
	Identity checkpoint.Checkpoint
	// Endpoints are the endpoints known at start.
	Endpoints []Endpoint
	// NewPipeline builds an endpoint's pipeline; start is where it begins
	// when it has no cursor.
	NewPipeline func(key string, s sink.Sink, start event.Position) (*pipeline.Pipeline, error)
	// Stopped, if set, is called when an endpoint's pipeline stops with an
	// error other than the end of ctx: the other endpoints go on.
	Stopped func(key string, err error)
	// RejoinWindow: see DefaultRejoinWindow.
	RejoinWindow time.Duration
	// Health, if set, is told every endpoint's attempts (by the sinks'
	// observers); with DisableAfter > 0, an endpoint whose attempts have
	// all failed for DisableAfter is disabled: its pipeline stops, its
	// checkpoint says why (checkpoint.Checkpoint.Disabled), and it stays
	// so, across restarts, until enabled again.
	Health       *Health
	DisableAfter time.Duration
	Logger       *slog.Logger
	// Settled, if set, is called (on a goroutine the gateway waits for)
	// once a wave of at least settleWave woken endpoints has gone idle
	// again (fewer than an eighth of its peak are awake), and once at the
	// start of Run with settleWave endpoints or more (what reading them
	// took is garbage then): the relay gives that memory back to the system
	// (debug.FreeOSMemory), which the Go runtime would otherwise keep, up to
	// twice the live heap, for minutes.
	Settled func()
}

// settleWave is the least wave of woken endpoints whose end calls
// Config.Settled: a wake costs about 40 KB, so a wave this large has held
// tens of megabytes.
const settleWave = 1000

// Gateway runs the endpoints of one webhook sink on one hub.
type Gateway struct {
	cfg Config
	hub *Hub
	log *slog.Logger
	// from are the cursors of cfg.Endpoints read by New (until Run has
	// started them; then nil, as own is).
	from []event.Position
	// held are the cursors, read or saved by New, of the endpoints that do
	// not run (Endpoint.Held, disabled): Run shows them.
	held []heldCursor

	// own says which of cfg.Endpoints had a cursor of their own at New.
	own []bool
	// byException: cfg.SharedKey is set (see Config.SharedKey).
	byException bool

	mu sync.Mutex
	// running are the endpoints started: idle (an idle tap in the hub's
	// index, no pipeline) or awake (a pipeline), by key.
	running  map[string]*running
	disabled map[string]Endpoint
	stopping map[string]<-chan struct{} // the last stopped pipeline of a key, closed when it has
	// pollEvery is how often disabled endpoints' checkpoints are read
	// (default disabledPoll; tests shorten it).
	pollEvery time.Duration
	wg        sync.WaitGroup
	// live are the endpoints' pipelines that have not returned, with their
	// endpoint: Run opens it and, when its context ends (or it returns),
	// cancels each with that context's cause and closes it (nil); start
	// and wake refuse while it is nil.
	live map[*awake]*running
	// peakLive is the most entries live had since the last wave settled.
	peakLive int
	// The shared cursor (byException; see shared.go), guarded by mu;
	// saving is held by each of its writes (saveShared).
	shared sharedCursor
	saving sync.Mutex
}

// running is a started endpoint. Its fields are guarded by the gateway's
// mu and, where they change what the hub sees, changed under the hub's
// lock too.
type running struct {
	// ep is the endpoint; its Filter is the one its idle taps match with.
	ep  Endpoint
	tap *Tap   // idle (in the hub's index, no queue), or its pipeline's
	run *awake // its pipeline; nil while idle (or once it has stopped)
	// last is the last pipeline it had, which may still be ending: a new
	// one waits for it.
	last *awake
	// writing, while a write of the shared cursor saves or deletes its
	// cursor, is closed once that write is done: a pipeline woken meanwhile
	// starts after it, and reads its outcome.
	writing <-chan struct{}
}

// awake is one run of an endpoint's pipeline.
type awake struct {
	p      atomic.Pointer[pipeline.Pipeline] // once built
	cancel context.CancelCauseFunc
	done   chan struct{} // closed once it has returned
	// base is where it started (where the endpoint woke: the position
	// before its first transaction), and its commit time: until it has a
	// durable cursor (pipeline.Stored), the shared cursor stays at or
	// before base.
	base       event.Position
	baseCommit time.Time
}

// New reads the endpoints' cursors and returns a gateway whose shared
// stream starts where startOf says.
func New(ctx context.Context, cfg Config) (*Gateway, error) {
	defaults.Logger(&cfg.Logger)
	defaults.Positive(&cfg.RejoinWindow, DefaultRejoinWindow)
	var cursors []Cursor
	from := make([]event.Position, len(cfg.Endpoints))
	fresh := false // an endpoint without a cursor starts at cfg.Start
	disabled := map[string]Endpoint{}
	// One read of every cursor where the store can list them (thousands of
	// endpoints on a MySQL store: one query, not one per endpoint).
	load := func(key string) (checkpoint.Checkpoint, error) { return cfg.Store.Load(ctx, key) }
	if l, ok := cfg.Store.(checkpoint.Lister); ok && (len(cfg.Endpoints) > 1 || cfg.SharedKey != "") {
		all, err := l.List(ctx)
		if err != nil {
			return nil, fmt.Errorf("list checkpoints: %w", err)
		}
		load = func(key string) (checkpoint.Checkpoint, error) {
			if cp, ok := all[key]; ok {
				return cp, nil
			}
			return checkpoint.Checkpoint{}, checkpoint.ErrNotFound
		}
	}
	// The shared cursor: an endpoint without a cursor of its own is there.
	var shared sharedCursor
	start := cfg.Start
	if cfg.SharedKey != "" {
		cp, err := load(cfg.SharedKey)
		switch {
		case err == nil:
			shared = sharedCursor{pos: cp.Position, commit: cp.CommitTime, saved: true}
			start = cp.Position
		case !errors.Is(err, checkpoint.ErrNotFound):
			return nil, fmt.Errorf("load the shared cursor %q: %w", cfg.SharedKey, err)
		default:
			shared = sharedCursor{pos: cfg.Start}
		}
	}
	own := make([]bool, len(cfg.Endpoints))
	var held []heldCursor // endpoints that do not run, and their cursors
	for i, ep := range cfg.Endpoints {
		cp, err := load(ep.Key)
		own[i] = err == nil
		if ep.Held {
			switch {
			case errors.Is(err, checkpoint.ErrNotFound) && start.IsZero():
				// No start to hold it at: it starts where the stream is
				// when it runs (a gateway without a start, in tests).
			case errors.Is(err, checkpoint.ErrNotFound):
				cp = cfg.Identity
				cp.Position, cp.UpdatedAt = start, time.Now().UTC()
				if err := cfg.Store.Save(ctx, ep.Key, cp); err != nil {
					return nil, fmt.Errorf("save the cursor of endpoint %q, which does not run: %w", ep.Key, err)
				}
				held = append(held, heldCursor{ep.Key, cp, true})
			case err != nil:
				return nil, fmt.Errorf("load checkpoint %q: %w", ep.Key, err)
			default:
				held = append(held, heldCursor{ep.Key, cp, false})
			}
			continue
		}
		switch {
		case errors.Is(err, checkpoint.ErrNotFound):
			fresh = true
			from[i] = start
		case err != nil:
			return nil, fmt.Errorf("load checkpoint %q: %w", ep.Key, err)
		case cp.Disabled != "":
			disabled[ep.Key] = ep
			held = append(held, heldCursor{ep.Key, cp, false})
			cfg.Logger.Warn("endpoint is disabled: not started (enable it with `outbox-relay endpoints enable`); its events after its cursor wait for it",
				slog.String("endpoint", ep.Key), slog.String("reason", cp.Disabled), slog.String("cursor", cp.Position.String()))
		default:
			cursors = append(cursors, Cursor{Position: cp.Position, Commit: cp.CommitTime})
			from[i] = cp.Position
		}
	}
	if fresh || len(cursors) == 0 {
		cursors = append(cursors, Cursor{Position: start})
	}
	hc := cfg.Hub
	hc.Start = startOf(coversOf(hc), cursors, cfg.RejoinWindow)
	if cfg.Health != nil && hc.Failing == nil {
		hc.Failing = func(key string) bool { return !cfg.Health.FailingSince(key).IsZero() }
	}
	hc.Logger = cfg.Logger
	shared.owned = map[string]struct{}{}
	g := &Gateway{cfg: cfg, hub: NewHub(hc), from: from, own: own, byException: cfg.SharedKey != "", shared: shared,
		log:     cfg.Logger.With(slog.String("sink", hc.Name)),
		running: map[string]*running{}, disabled: disabled, stopping: map[string]<-chan struct{}{}, held: held}
	if g.byException {
		g.hub.wake, g.hub.release = g.wakeLocked, g.releaseLocked
		if fresh && start != g.hub.pos {
			p := start // the endpoints without a cursor have what the stream reads up to here
			g.hub.floor = &p
		}
	}
	if n := countNew(held); n > 0 {
		g.log.Warn("endpoints that do not run (their table row is off or cannot be used) had no cursor: each was given one here, and gets every event after it once it runs",
			slog.Int("endpoints", n), slog.String("cursor", start.String()))
	}
	return g, nil
}

// heldCursor is the cursor of an endpoint that does not run; created: the
// gateway saved it, the endpoint had none.
type heldCursor struct {
	key     string
	cp      checkpoint.Checkpoint
	created bool
}

func countNew(held []heldCursor) (n int) {
	for _, h := range held {
		if h.created {
			n++
		}
	}
	return n
}

// Hub returns the gateway's hub.
func (g *Gateway) Hub() *Hub { return g.hub }

// Run runs the shared stream and every endpoint until ctx ends. An
// endpoint's fatal error stops that endpoint only (Config.Stopped); the
// shared stream's stops them all, and Run returns it.
func (g *Gateway) Run(ctx context.Context, changed func(g *Gateway, txn *event.Txn)) error {
	g.mu.Lock()
	g.live = map[*awake]*running{}
	g.mu.Unlock()
	// end stops the endpoints' pipelines with cause (a lost checkpoint lock
	// stops them without saving), then the shared stream: once ctx ends, or
	// when the stream has failed.
	streamCtx, stopStream := context.WithCancelCause(context.WithoutCancel(ctx))
	end := func(cause error) {
		g.stopAll(cause)
		stopStream(cause)
	}
	defer context.AfterFunc(ctx, func() { end(context.Cause(ctx)) })()
	defer end(context.Canceled)
	g.log.Info("webhook gateway starting", slog.Int("endpoints", len(g.cfg.Endpoints)), slog.String("from", g.hub.Position().String()))
	// Endpoints whose cursor covers the shared stream's start are on it
	// before it reads its first transaction; the others catch up.
	g.hub.Lock()
	for key := range g.disabled {
		g.hub.obs.State(key, Disabled)
	}
	for _, h := range g.held {
		g.hub.obs.Held(h.key, h.cp.Position, heldSince(h.cp))
	}
	g.held = nil
	for i, ep := range g.cfg.Endpoints {
		if ep.Held || g.disabled[ep.Key].Key != "" {
			continue
		}
		if g.byException && g.hub.covers(g.from[i], g.hub.pos) {
			// On the shared stream, idle until it has events.
			var cursor *event.Position
			if g.own[i] {
				c := g.from[i] // not a pointer into from, which is let go
				cursor = &c
			}
			if err := g.idleLocked(ep, cursor); err != nil {
				g.hub.Unlock()
				end(context.Canceled)
				g.wg.Wait()
				return err
			}
			continue
		}
		if err := g.start(ep, g.from[i], g.hub.covers(g.from[i], g.hub.pos)); err != nil {
			g.hub.Unlock()
			end(context.Canceled)
			g.wg.Wait()
			return err
		}
	}
	g.hub.Unlock()
	if g.cfg.Settled != nil && len(g.cfg.Endpoints) >= settleWave {
		g.wg.Go(g.cfg.Settled)
	}
	// Each started endpoint has its record: the list and the cursors read
	// at New are not kept (100,000 rows: 18 MB).
	g.cfg.Endpoints, g.from, g.own = nil, nil, nil
	var onChange func(*event.Txn)
	if changed != nil {
		onChange = func(txn *event.Txn) { changed(g, txn) }
	}
	var health sync.WaitGroup
	health.Go(func() { g.watchHealth(streamCtx) })
	if g.byException {
		health.Go(func() { g.keepShared(streamCtx) })
	}
	err := g.hub.Run(streamCtx, onChange)
	end(context.Canceled)
	health.Wait()
	g.wg.Wait()
	if g.byException {
		// Every pipeline has returned: the shared cursor's last save. It
		// deletes no cursor it passes (the next run's saves do): the
		// scaled-out gateway's partition may have a new owner by now,
		// whose pipelines write those keys again.
		saveCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		if serr := g.saveShared(saveCtx, false); serr != nil {
			g.log.Error("the shared cursor's last save failed (its endpoints send again, after a restart, what they sent since the one before)", slog.Any("err", serr))
		}
		cancel()
	}
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		err = nil
	}
	if err != nil {
		err = fmt.Errorf("shared stream: %w", err)
	}
	return err
}

// StartLocked starts a new endpoint on the shared stream at its current
// position (call it from Run's changed function, under the hub's lock).
func (g *Gateway) StartLocked(ep Endpoint) error {
	if !g.byException {
		return g.start(ep, g.hub.pos, true)
	}
	// Idle at the shared stream's position, which its cursor, saved with
	// the next write of the shared cursor, keeps: it never gets an event
	// of a transaction before this one.
	p := g.hub.pos
	if err := g.idleLocked(ep, &p); err != nil {
		return err
	}
	if !p.IsZero() {
		cp := g.cfg.Identity
		cp.Position, cp.CommitTime, cp.UpdatedAt = p, g.hub.commit, time.Now().UTC()
		g.mu.Lock()
		g.shared.pend(ep.Key, cp)
		g.mu.Unlock()
	}
	return nil
}

// Start starts an endpoint that is not running (not under the hub's lock):
// from its cursor, or from the shared stream's position when it has none,
// joining the shared stream or catching up first. Its pipeline runs until
// it is stopped or Run ends; once Run has ended (or before it started),
// Start returns an error wrapping context.Canceled.
func (g *Gateway) Start(ep Endpoint) error { return g.start(ep, g.hub.Position(), false) }

// Go runs f on a goroutine that Run waits for before it returns: what a
// change of an endpoint leaves to do once its pipeline has stopped (waiting
// on StopLocked's channel), such as dropping a deleted endpoint's cursor or
// starting it again, so that nothing of the gateway touches its store once
// Run has returned. Call it from Run's changed function, or from a
// goroutine of Go's; f must return once the endpoints' pipelines have
// ended (Run ends them first; Start refuses then).
func (g *Gateway) Go(f func()) { g.wg.Go(f) }

// StopLocked takes an endpoint off the shared stream at its current
// position and stops its pipeline once it has delivered what it was given
// (at most stopGrace) and saved its cursor.
// It returns a channel closed once the pipeline has stopped.
func (g *Gateway) StopLocked(key string) <-chan struct{} { return g.stopLocked(key, stopGrace) }

// stopLocked is StopLocked with grace for the pipeline to deliver what it holds.
func (g *Gateway) stopLocked(key string, grace time.Duration) <-chan struct{} {
	g.mu.Lock()
	r := g.running[key]
	delete(g.running, key)
	last := g.stopping[key]
	var a *awake
	if r != nil {
		a = r.run
		if a == nil {
			a = r.last // idle: its last pipeline may still be ending
		}
		if a != nil {
			g.stopping[key] = a.done
		}
	}
	stopping := g.live == nil
	g.mu.Unlock()
	if r == nil {
		if last != nil {
			return last // it was stopped earlier: done when that one is
		}
		c := make(chan struct{})
		close(c)
		return c
	}
	g.hub.RemoveLocked(r.tap)
	if r.run == nil {
		// Idle: off the index now, it needs a cursor of its own where the
		// shared stream is (it has every event up to here), or the shared
		// cursor would pass its next events.
		if r.tap.idle && g.byException && !stopping {
			r.tap.setState(Stopped) // it does not run: its cursor shows
			g.keepCursorLocked(key, r)
		}
		if a == nil {
			c := make(chan struct{})
			close(c)
			return c
		}
		return a.done
	}
	// It gets no later transaction, but hands on what it was given (the
	// transactions up to this one) and drains, for at most stopGrace.
	r.tap.Finish()
	go func() {
		select {
		case <-a.done:
		case <-time.After(grace):
			a.cancel(nil)
		}
	}()
	return a.done
}

// stopGrace bounds how long a stopped endpoint may take to hand on and
// deliver what it holds before it is cancelled (what it did not deliver is
// delivered again when it starts again, from its cursor).
const stopGrace = 10 * time.Second

// Tap returns a started endpoint's tap (while it is idle, its idle tap:
// in the hub's index, with no queue), or nil. Under the hub's lock, it is
// the tap SetFilterLocked changes.
func (g *Gateway) Tap(key string) *Tap {
	g.mu.Lock()
	defer g.mu.Unlock()
	if r := g.running[key]; r != nil {
		return r.tap
	}
	return nil
}

// Keys returns the started endpoints' keys, idle or awake.
func (g *Gateway) Keys() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]string, 0, len(g.running))
	for k := range g.running {
		out = append(out, k)
	}
	return out
}

// start builds ep's pipeline and runs it. from is where it starts (its
// cursor, or its start when it has none); attach (under the hub's lock, with
// from covering the hub's position) puts it on the shared stream at once.
func (g *Gateway) start(ep Endpoint, from event.Position, attach bool) error {
	tap := g.hub.Tap(ep.Key, ep.Filter)
	tap.keep = ep.Open == nil
	if attach {
		g.hub.attachLocked(tap, from)
		tap.state.Store(int32(Attached))
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.running[ep.Key] != nil {
		if attach {
			g.hub.RemoveLocked(tap)
		}
		return fmt.Errorf("endpoint %s is already running", ep.Key)
	}
	if g.live == nil {
		if attach {
			g.hub.RemoveLocked(tap)
		}
		return fmt.Errorf("endpoint %s not started: the gateway is not running: %w", ep.Key, context.Canceled)
	}
	r := &running{ep: ep, tap: tap}
	g.running[ep.Key] = r
	g.launchLocked(ep, r, tap, from, nil, from, time.Time{})
	return nil
}

// idleLocked starts ep idle, at cursor (nil: the shared cursor): in the
// hub's index, with no pipeline until it has events. Under the hub's lock.
func (g *Gateway) idleLocked(ep Endpoint, cursor *event.Position) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.running[ep.Key] != nil {
		return fmt.Errorf("endpoint %s is already running", ep.Key)
	}
	if g.live == nil {
		return fmt.Errorf("endpoint %s not started: the gateway is not running: %w", ep.Key, context.Canceled)
	}
	r := &running{ep: ep}
	r.tap = g.hub.idleTap(ep.Key, &r.ep.Filter, cursor)
	g.hub.indexLocked(r.tap)
	g.running[ep.Key] = r
	if cursor != nil {
		g.shared.owned[ep.Key] = struct{}{}
	}
	g.hub.obs.State(ep.Key, Attached)
	return nil
}

// launchLocked runs a pipeline of endpoint ep (r) reading tap, starting at
// from when it has no cursor: once the endpoint's last pipeline has
// returned and a write of the shared cursor that saves or deletes its
// cursor is done, so that it reads what they left. base and baseCommit
// are its awake's (where it woke). g.mu is held.
func (g *Gateway) launchLocked(ep Endpoint, r *running, tap *Tap, from event.Position, after <-chan struct{}, base event.Position, baseCommit time.Time) {
	ctx, cancel := context.WithCancelCause(context.Background())
	a := &awake{cancel: cancel, done: make(chan struct{}), base: base, baseCommit: baseCommit}
	var prev <-chan struct{}
	if r.last != nil {
		prev = r.last.done
	}
	r.run, r.last = a, a
	g.live[a] = r
	g.peakLive = max(g.peakLive, len(g.live))
	g.wg.Go(func() {
		defer close(a.done)
		defer cancel(nil)
		defer func() {
			// Nothing waits for a pipeline that has returned: what it
			// held (its sink, tracker, tap) is let go with it.
			g.mu.Lock()
			delete(g.live, a)
			if g.cfg.Settled != nil && g.live != nil && g.peakLive-len(g.live) >= settleWave && len(g.live) <= g.peakLive/8 {
				g.peakLive = len(g.live)
				g.wg.Go(g.cfg.Settled)
			}
			if r.last == a {
				r.last = nil
			}
			if g.stopping[ep.Key] == a.done {
				delete(g.stopping, ep.Key)
			}
			g.mu.Unlock()
		}()
		for _, c := range []<-chan struct{}{prev, after} {
			if c != nil {
				select {
				case <-c:
				case <-ctx.Done():
				}
			}
		}
		p, err := g.build(ep, from)
		if err == nil {
			a.p.Store(p)
			err = p.Run(ctx, tap)
		}
		if tap.released.Load() {
			return // let go idle: its cursor is saved
		}
		// Off the shared stream (and not counted awake): the tap's Run
		// took it off as it ended, but a pipeline that could not be built,
		// or failed before it read its tap, never ran it. A tap let go
		// meanwhile is off it already.
		g.hub.Lock()
		if !tap.released.Load() {
			g.hub.removeLocked(tap)
		}
		g.hub.Unlock()
		if p == nil {
			tap.setState(Stopped)
		}
		if tap.released.Load() {
			return
		}
		g.ended(ep.Key, r, a, err)
	})
}

// build builds ep's sink (Open, when it has no Sink) and pipeline.
func (g *Gateway) build(ep Endpoint, from event.Position) (*pipeline.Pipeline, error) {
	s, err := ep.Build()
	if err != nil {
		return nil, err
	}
	if s == nil {
		return nil, fmt.Errorf("endpoint %s has no sink", ep.Key)
	}
	p, err := g.cfg.NewPipeline(ep.Key, s, from)
	if err != nil {
		if ep.Sink == nil {
			closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = s.Close(closeCtx)
			cancel()
		}
		return nil, fmt.Errorf("endpoint %s: %w", ep.Key, err)
	}
	return p, nil
}

// ended is the end of pipeline a of endpoint r, which was not let go idle:
// stopped (by StopLocked, or on an error), or the gateway's end. An
// endpoint that stopped keeps a cursor of its own: if its pipeline saved
// none, the next write of the shared cursor saves one where it started.
func (g *Gateway) ended(key string, r *running, a *awake, err error) {
	if err != nil && !errors.Is(err, context.Canceled) {
		g.log.Error("endpoint stopped; the other endpoints go on; its events after its cursor wait for it (they are sent once it runs again)",
			slog.String("endpoint", key), slog.Any("err", err))
		if g.cfg.Stopped != nil {
			g.cfg.Stopped(key, err)
		}
	}
	if g.byException {
		// Saved now, before its end lets the shared cursor pass base, and
		// before whoever waits for its end (a deleted row's) goes on.
		if p := a.p.Load(); (p == nil || !p.Stored()) && !a.base.IsZero() {
			cp := g.cfg.Identity
			cp.Position, cp.CommitTime, cp.UpdatedAt = a.base, a.baseCommit, time.Now().UTC()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			g.saveStopped(ctx, key, cp, "the shared cursor stays before its events")
			cancel()
		}
		g.hub.Lock()
		g.mu.Lock()
		if r.run == a {
			r.run = nil
		}
		g.mu.Unlock()
		g.hub.Unlock()
	}
	g.showHeld(key)
}

// showHeld shows where the cursor of key, whose pipeline has just stopped
// (stopped, disabled, turned off, or restarting), holds its events: not
// when the gateway itself is stopping.
func (g *Gateway) showHeld(key string) {
	g.mu.Lock()
	stopping := g.live == nil
	g.mu.Unlock()
	if stopping {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if cp, err := g.cfg.Store.Load(ctx, key); err == nil {
		g.hub.obs.Held(key, cp.Position, heldSince(cp))
	}
}

// heldSince is since when the events after cp wait: the commit time of
// its last transaction, or, when it has none, when it was saved.
func heldSince(cp checkpoint.Checkpoint) time.Time {
	if !cp.CommitTime.IsZero() {
		return cp.CommitTime
	}
	return cp.UpdatedAt
}

// HoldLocked keeps the cursor of key, an endpoint that is not running and
// does not run now (its table row was inserted or found off, or cannot be
// used), where it is; one without a cursor gets one at the shared stream's
// position, saved before HoldLocked returns, so that once it runs it sends
// every event after this transaction and none is skipped. Call it from
// Run's changed function, under the hub's lock, and never for an endpoint
// whose pipeline runs or is stopping (its own saves are its cursor).
func (g *Gateway) HoldLocked(key string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cp, err := g.cfg.Store.Load(ctx, key)
	switch {
	case errors.Is(err, checkpoint.ErrNotFound) && g.hub.pos.IsZero():
		return nil // no position to hold it at
	case errors.Is(err, checkpoint.ErrNotFound):
		cp = g.cfg.Identity
		cp.Position, cp.CommitTime, cp.UpdatedAt = g.hub.pos, g.hub.commit, time.Now().UTC()
		if err := g.cfg.Store.Save(ctx, key, cp); err != nil {
			return fmt.Errorf("save the cursor of endpoint %s, which does not run: %w", key, err)
		}
		g.log.Warn("endpoint does not run: its cursor is kept here, and its events after it wait for it (sent once it runs)",
			slog.String("endpoint", key), slog.String("cursor", cp.Position.String()))
	case err != nil:
		return fmt.Errorf("load the cursor of endpoint %s: %w", key, err)
	}
	g.hub.obs.Held(key, cp.Position, heldSince(cp))
	return nil
}

// stopAll cancels every endpoint's pipeline with cause and lets no other
// start: Run's end. Only its first call counts.
func (g *Gateway) stopAll(cause error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for a := range g.live {
		a.cancel(cause)
	}
	g.live = nil
}
