package gateway

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/defaults"
	"github.com/outbox-relay/outbox-relay/internal/every"
	"github.com/outbox-relay/outbox-relay/pipeline"
	"github.com/outbox-relay/outbox-relay/position"
)

// Defaults of HubConfig.
const (
	DefaultQueueTxns  = config.DefaultGatewayQueue
	DefaultMaxCatchUp = config.DefaultMaxCatchUp
	// markEvery is how often an endpoint with no events of its own is
	// handed the shared stream's position, so its cursor moves, and how
	// often the hub looks for endpoints to let go idle.
	markEvery = 250 * time.Millisecond
	// DefaultLinger: see HubConfig.Linger.
	DefaultLinger = 2 * time.Second
	// DefaultYieldAfter is how long a catch-up stream may wait on a full
	// queue while another endpoint waits for a stream before it gives its
	// stream up.
	DefaultYieldAfter = 2 * time.Second
	// DefaultDetachAfter: see HubConfig.DetachAfter.
	DefaultDetachAfter = config.DefaultDetachAfter
	detachWindow       = 10 * time.Second
	// DefaultMaxAwake: see HubConfig.MaxAwake. An awake endpoint costs
	// about 100 KB of RSS at a burst's peak (its pipeline's goroutines and
	// buffers, its queue, its connection, and the garbage collector's
	// headroom: with 4,096 awake, one event to each of 100,000 endpoints
	// peaked 0.4 GB above what the relay holds once they are idle again;
	// 10,000 woken at once took it from 51 MB to 651 MB), so the default
	// keeps a burst within about 0.4 GB.
	DefaultMaxAwake = config.DefaultMaxAwake
	// awakeRecheck is how often the shared stream, waiting at MaxAwake,
	// looks again for awake endpoints that hold nothing, to let them go.
	awakeRecheck = 20 * time.Millisecond
	// awakeStall is how long the shared stream waits at MaxAwake while no
	// awake endpoint can be let go before it goes on past the bound.
	awakeStall = detachWindow
)

// HubConfig configures a Hub.
type HubConfig struct {
	// Name is the sink's name, for logs.
	Name string
	// Flavor is the server's ("mysql" or "mariadb"), to compare positions.
	Flavor string
	// Covers, if set, is the order of the source's positions: whether
	// have is at or after want (a Kafka partition's offsets, package
	// gateway/kafkasource). Nil: the binlog's, GTID containment for Flavor.
	Covers func(have, want event.Position) bool
	// Start is where the shared stream begins (see startOf).
	Start event.Position
	// Open returns a binlog stream: slot 0 is the shared stream, 1 to
	// MaxCatchUp the catch-up streams (each needs its own replica id).
	Open func(slot int) pipeline.Source
	// QueueTxns is each endpoint's queue between the shared stream and its
	// pipeline, in transactions that hold events for it. Default 256.
	QueueTxns int
	// MaxCatchUp caps the catch-up streams open at once. Default 4.
	MaxCatchUp int
	// YieldAfter: see DefaultYieldAfter.
	YieldAfter time.Duration
	// DetachAfter is how long, in all within 10s, an endpoint's full queue
	// may make the shared stream wait before it is detached. Default 500ms.
	DetachAfter time.Duration
	// Failing, if set, reports whether an endpoint's last attempts failed:
	// a failing endpoint with a full queue is detached at once, without
	// making the shared stream wait for it.
	Failing func(endpoint string) bool
	// Linger is how long an endpoint that a gateway woke for an event stays
	// awake after its last event before it may go idle (once it holds
	// nothing unsaved): a busy endpoint keeps its pipeline between events.
	// Default 2s.
	Linger time.Duration
	// MaxAwake caps the endpoints the hub keeps awake at once: those it
	// woke (wake) while they are on the shared stream, but those whose
	// sink was built ahead, which stay awake. When the stream
	// must wake one more and MaxAwake are awake, it waits (it skips no
	// event) and meanwhile lets go at once, Linger or not, every awake
	// endpoint that holds nothing (release). An endpoint whose last
	// attempts failed (Failing) does not count: a receiver that is down
	// does not hold the stream back. If none can be let go for 10s (every
	// awake endpoint is stuck), the stream goes on past the bound until
	// fewer than MaxAwake are awake again. Default DefaultMaxAwake;
	// negative: no bound.
	MaxAwake int
	// Observer, if set, is told about detaches and re-joins.
	Observer Observer
	Logger   *slog.Logger

	// clock measures the shared stream's waits for full queues. Nil: the
	// real one; a test gives its own, so that what the hub decides does
	// not depend on how fast a loaded machine runs the endpoints.
	clock clock
}

// clock is the time the hub decides detaches by.
type clock interface {
	Now() time.Time
	// After returns a channel that receives once d has passed, and a
	// function that stops it.
	After(d time.Duration) (<-chan time.Time, func())
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) After(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTimer(d)
	return t.C, func() { t.Stop() }
}

// Observer receives what the hub does, for metrics. Methods must not block.
type Observer interface {
	// State is called when an endpoint's tap changes state.
	State(endpoint string, s State)
	// Held is called for an endpoint that does not run (stopped, disabled,
	// off, invalid) with its cursor: its events after cursor, committed
	// since since, wait for it.
	Held(endpoint string, cursor event.Position, since time.Time)
}

// AwakeObserver is implemented by an Observer that also follows the bound
// on awake endpoints (HubConfig.MaxAwake): SinkMetrics, for the gateway's
// awake and max_awake series. Several hubs may share one (the scaled-out
// gateway's partitions): what each reports adds up. Methods are called
// under the hub's lock and must not block.
type AwakeObserver interface {
	// Awake is called with each change of the endpoints the hub counts
	// awake (those MaxAwake bounds, failing ones included): +1 when it
	// wakes one, -1 when one leaves the shared stream (let go idle,
	// detached, stopped). Once every pipeline of the hub's gateway has
	// ended, its calls add up to 0.
	Awake(delta int)
	// AwakeWait is called when the shared stream begins a wait at MaxAwake
	// (began, d 0), then, while it waits and as the wait ends, with the
	// time waited since the last call on the hub's clock (d > 0).
	AwakeWait(began bool, d time.Duration)
}

// Hub reads the shared stream and hands each transaction to the taps
// attached to it.
type Hub struct {
	cfg   HubConfig
	log   *slog.Logger
	obs   Observer
	aobs  AwakeObserver // obs's, or one that does nothing
	slots chan int      // free catch-up slot numbers
	queue atomic.Int32  // taps waiting for a slot

	// wake and release, set by a gateway that lets endpoints go idle, are
	// called under mu: wake (by dispatch) for an idle tap with events of a
	// transaction, to return the endpoint's new tap attached at at (the
	// position before the transaction), or nil to pass it over; release
	// (by the sweep) for an attached tap that has had no event for Linger
	// and holds nothing, to let the endpoint go idle (true) or not yet.
	wake    func(idle *Tap, at event.Position, commit time.Time) *Tap
	release func(t *Tap) bool

	mu     sync.Mutex
	pos    event.Position // after the last transaction handed on (or Start)
	commit time.Time
	// prev and prevCommit are pos and commit before the transaction
	// dispatch hands on.
	prev       event.Position
	prevCommit time.Time
	// floor, when set, is the shared cursor at start, ahead of Start:
	// idle taps without a cursor of their own have every transaction it
	// covers.
	floor *event.Position
	// attached are the taps on the shared stream with a queue (an idle
	// tap is in the index only).
	attached map[*Tap]struct{}
	// byHeader indexes attached taps that select on one header value (a
	// tenant): header key → value → taps; byType those that select on
	// aggregate types named exactly: type → taps. The others are in plain.
	// An event is offered to the taps of its values and to the plain ones:
	// routing costs per event, not per endpoint per event.
	byHeader map[string]map[string]tapSet
	byType   map[string]tapSet
	plain    map[*Tap]struct{}
	// touched is handOn's scratch: the taps given events of the
	// transaction, in the order of their first; each collects them in its
	// scratch.
	touched []*Tap
	// awake counts the attached taps that wake returned (Tap.woken), but
	// those of sinks built ahead (keep): the endpoints MaxAwake bounds.
	// over: the stream stalled at the bound (awakeStall) and goes on past
	// it until fewer are awake.
	awake int
	over  bool
	// credit is the wakes a look at the bound found room for (failing
	// endpoints do not count), taken before the next look; looked is when
	// the last look was.
	credit int
	looked time.Time
	// peakAwake is the most awake at once; overs counts the stalls.
	peakAwake, overs int
	// done is closed when Run's context ends: a wait at MaxAwake gives up.
	done <-chan struct{}
	// Waits counts the waits at MaxAwake, and WaitedNanos their time.
	waits, waitedNanos atomic.Int64
}

// NewHub returns a hub; Run starts its shared stream.
func NewHub(cfg HubConfig) *Hub {
	defaults.Positive(&cfg.QueueTxns, DefaultQueueTxns)
	defaults.Positive(&cfg.MaxCatchUp, DefaultMaxCatchUp)
	defaults.Positive(&cfg.DetachAfter, DefaultDetachAfter)
	defaults.Positive(&cfg.YieldAfter, DefaultYieldAfter)
	defaults.Positive(&cfg.Linger, DefaultLinger)
	if cfg.MaxAwake == 0 {
		cfg.MaxAwake = DefaultMaxAwake
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.clock == nil {
		cfg.clock = realClock{}
	}
	h := &Hub{
		cfg: cfg, log: cfg.Logger.With(slog.String("sink", cfg.Name)), obs: cfg.Observer,
		slots: make(chan int, cfg.MaxCatchUp), pos: cfg.Start,
		attached: map[*Tap]struct{}{}, byHeader: map[string]map[string]tapSet{},
		byType: map[string]tapSet{}, plain: map[*Tap]struct{}{},
	}
	for i := 1; i <= cfg.MaxCatchUp; i++ {
		h.slots <- i
	}
	if h.obs == nil {
		h.obs = nopObserver{}
	}
	h.aobs, _ = h.obs.(AwakeObserver)
	if h.aobs == nil {
		h.aobs = nopObserver{}
	}
	return h
}

// covers reports whether position have is at or after want in the
// source's order (HubConfig.Covers).
func (h *Hub) covers(have, want event.Position) bool { return coversOf(h.cfg)(have, want) }

// coversOf is the order of c's source: c.Covers, or the binlog's.
func coversOf(c HubConfig) func(have, want event.Position) bool {
	if c.Covers != nil {
		return c.Covers
	}
	return func(have, want event.Position) bool { return position.Covers(c.Flavor, have, want) }
}

// Position returns the shared stream's position: after the last transaction
// it handed on.
func (h *Hub) Position() event.Position {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pos
}

// Run reads the shared stream until ctx ends or it fails for good. It calls
// changed, if not nil, with every transaction that changed rows of a watched
// table, under the hub's lock and before the transaction's events are handed
// on, so that endpoint changes take effect at that transaction (see AttachAt).
func (h *Hub) Run(ctx context.Context, changed func(*event.Txn)) error {
	stop := make(chan struct{})
	defer close(stop)
	h.mu.Lock()
	h.done = ctx.Done()
	h.mu.Unlock()
	go h.markLoop(stop)
	return h.cfg.Open(0).Run(ctx, h.Position(), func(_ context.Context, txn *event.Txn) error {
		h.dispatch(txn, changed)
		return nil
	})
}

// dispatch hands txn's events to the attached taps whose filter matches
// them, then calls changed. A tap whose queue stays full is detached before
// this transaction: it catches up from the last transaction it was handed.
func (h *Hub) dispatch(txn *event.Txn, changed func(*event.Txn)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.prev, h.prevCommit = h.pos, h.commit
	switch {
	case !txn.Held:
		h.pos, h.commit = txn.Position, txn.CommitTime
	case txn.Position != h.pos:
		h.pos, h.commit = txn.Position, time.Time{} // the commit time of the transaction that ends there is not known
	}
	if h.floor != nil && !h.covers(*h.floor, h.pos) {
		h.floor = nil // the shared stream has passed it
	}
	if len(txn.Events) > 0 {
		h.handOn(txn)
	}
	if changed != nil && len(txn.Changes) > 0 {
		changed(txn)
	}
}

func (h *Hub) handOn(txn *event.Txn) {
	var e *event.Event
	add := func(t *Tap) {
		if !t.matches(e) {
			return
		}
		if len(t.scratch) == 0 {
			h.touched = append(h.touched, t)
		}
		t.scratch = append(t.scratch, e)
	}
	for _, e = range txn.Events {
		for key, values := range h.byHeader {
			for _, hd := range e.Headers {
				if hd.Key == key {
					values[hd.Value].each(add)
				}
			}
		}
		h.byType[e.AggregateType].each(add)
		for t := range h.plain {
			add(t)
		}
	}
	touched := h.touched
	// An endpoint alone in a transaction may be handed it on this
	// goroutine (Tap.handDirect): one with many leaves each endpoint's
	// share to its own goroutine, beside the others.
	alone := len(touched) == 1
	now := h.cfg.clock.Now()
	// The awake taps first, then the idle ones, which may have to wait to
	// wake (MaxAwake): an awake tap still holding events of this
	// transaction in its scratch could not be let go meanwhile.
	for _, waking := range []bool{false, true} {
		for i, t := range touched {
			if t == nil || t.idle != waking {
				continue
			}
			touched[i] = nil
			h.handTo(t, txn, now, alone)
		}
	}
	h.touched = touched[:0]
}

// handTo hands t its events of txn, collected in its scratch, waking it
// first if it is idle; alone: t is the only endpoint with events in txn.
func (h *Hub) handTo(t *Tap, txn *event.Txn, now time.Time, alone bool) {
	var out *event.Txn
	var has *event.Position
	switch {
	case !t.idle:
		has = t.skip
	case t.cursor != nil:
		has = t.cursor
	default:
		has = h.floor
	}
	if has == nil || !h.covers(*has, txn.Position) {
		out = newTxn(t.scratch, txn)
	}
	if cap(t.scratch) > maxScratch {
		t.scratch = nil // a large transaction's: not kept
	} else {
		clear(t.scratch) // reused: it keeps no event
		t.scratch = t.scratch[:0]
	}
	if out == nil {
		return // it read this transaction on its own stream, or has it
	}
	if t.idle {
		h.roomLocked()
		if t = h.wake(t, h.prev, h.prevCommit); t == nil {
			return
		}
		if !t.keep { // a sink built ahead stays awake: it cannot be let go
			t.woken = true
			h.awake++
			h.peakAwake = max(h.peakAwake, h.awake)
			h.aobs.Awake(1)
		}
	}
	t.skip = nil
	t.lastEvent = now
	if alone && t.handDirect(out) || h.offer(t, out) {
		t.sent = txn.Position
	} else {
		h.detachLocked(t)
	}
}

// maxScratch caps the scratch a tap keeps between transactions.
const maxScratch = 64

// roomLocked returns once the hub may wake one more endpoint (MaxAwake):
// at once below the bound; at it, after letting go every awake endpoint
// that holds nothing and, if that is not enough, waiting for more to
// settle. It looks (relieveLocked, a pass over the awake endpoints) at
// most every awakeRecheck, each look letting go every endpoint that
// settled since the last, and a look that finds room for more than one
// (failing endpoints do not count) lets that many wake before the next.
// It holds the hub's lock throughout, as offer does: the transaction
// being handed on stays whole. It gives up waiting when Run's context
// ends (the gateway, stopping, wakes no one: the events wait behind the
// shared cursor) and after awakeStall on the hub's clock with no endpoint
// let go (every awake endpoint is stuck: the stream goes on past the
// bound, h.over, until fewer are awake).
func (h *Hub) roomLocked() {
	limit := h.cfg.MaxAwake
	if limit < 0 || h.wake == nil || h.awake < limit {
		h.over, h.credit = false, 0
		return
	}
	if h.over {
		return
	}
	if h.credit > 0 {
		h.credit--
		return
	}
	clk := h.cfg.clock
	began := clk.Now()
	progress := began
	// counted: a wait began (at began), counted in waits; its time is
	// added to waitedNanos (and told the observer) up to mark as it goes,
	// so that a long wait shows while it lasts.
	counted, mark := false, began
	addWaited := func() {
		now := clk.Now()
		if d := now.Sub(mark); d > 0 {
			h.waitedNanos.Add(int64(d))
			h.aobs.AwakeWait(false, d)
		}
		mark = now
	}
	defer func() {
		if counted {
			addWaited()
		}
	}()
	for {
		// The pace of the looks is a poll, not a decision: the stall is
		// measured on the hub's clock.
		if wait := awakeRecheck - time.Since(h.looked); wait > 0 {
			if !counted {
				counted = true
				h.waits.Add(1)
				h.aobs.AwakeWait(true, 0)
			}
			recheck := time.NewTimer(wait)
			select {
			case <-recheck.C:
			case <-h.done:
				recheck.Stop()
				return
			}
			addWaited()
		}
		h.looked = time.Now()
		released, stuck := h.relieveLocked()
		if n := h.awake - stuck; n < limit {
			h.credit = limit - n - 1
			return
		}
		now := clk.Now()
		if released > 0 {
			progress = now
		}
		if now.Sub(progress) >= awakeStall {
			h.over = true
			h.overs++
			h.log.Warn("every awake endpoint holds events it has not delivered and none is failing: the shared stream goes on past gateway.max_awake until fewer are awake",
				slog.Int("awake", h.awake), slog.Int("max_awake", limit))
			return
		}
	}
}

// relieveLocked lets go, at once, every awake endpoint the hub woke that
// holds nothing (release decides), whatever its Linger, except those with
// events of the transaction being handed on (their scratch), and counts
// those left whose last attempts failed (Failing).
func (h *Hub) relieveLocked() (released, stuck int) {
	for t := range h.attached {
		if !t.woken {
			continue
		}
		if h.release != nil && !t.keep && len(t.scratch) == 0 && t.queued.Load() == 0 && h.release(t) {
			released++
			continue
		}
		if h.cfg.Failing != nil && h.cfg.Failing(t.name) {
			stuck++
		}
	}
	return released, stuck
}

// AwakeWaits returns how many times the shared stream has waited at
// MaxAwake, and for how long in all.
func (h *Hub) AwakeWaits() (int64, time.Duration) {
	return h.waits.Load(), time.Duration(h.waitedNanos.Load())
}

// newTxn returns the transaction handed to a tap: evs (copied: the tap's
// scratch is reused) at txn's position. Its events are allocated with it
// when there is one (an endpoint of a thousand gets one event of a
// transaction, or none).
func newTxn(evs []*event.Event, txn *event.Txn) *event.Txn {
	if len(evs) == 1 {
		one := &struct {
			txn event.Txn
			ev  [1]*event.Event
		}{}
		one.ev[0] = evs[0]
		one.txn = event.Txn{Events: one.ev[:], Position: txn.Position, CommitTime: txn.CommitTime, Held: txn.Held}
		return &one.txn
	}
	return &event.Txn{Events: slices.Clone(evs), Position: txn.Position, CommitTime: txn.CommitTime, Held: txn.Held}
}

// offer puts txn in t's queue. A full queue is waited for, so that a burst
// (a backlog at start) slows the shared stream down instead of detaching
// every endpoint; but an endpoint that has made the stream wait DetachAfter
// in all within detachWindow is not keeping up: offer then gives up, and t
// is detached. Unless no other attached endpoint has room in its queue (t
// is alone on the stream, or every endpoint is behind): detaching t would
// then let no one go faster, and its catch-up stream would decode the
// binlog a second time beside the shared one. Such an endpoint is waited
// for as long as it takes transactions, as a plain sink is; one that takes
// none for DetachAfter is detached.
func (h *Hub) offer(t *Tap, txn *event.Txn) bool {
	if t.put(txn) {
		return true
	}
	if h.cfg.Failing != nil && h.cfg.Failing(t.name) {
		return false
	}
	clk := h.cfg.clock
	now := clk.Now()
	if now.Sub(t.waitFrom) > detachWindow {
		t.waitFrom, t.waited = now, 0
	}
	left := h.cfg.DetachAfter - t.waited
	switch {
	case !h.holdsBackLocked(t):
		left = h.cfg.DetachAfter // a stall, not the waits in all
	case left <= 0:
		return false
	}
	timeout, stop := clk.After(left)
	defer stop()
	t.queued.Add(1)
	for {
		if t.queue.push(txn) {
			t.waited += clk.Now().Sub(now)
			return true
		}
		select {
		case <-t.queue.room:
		case <-timeout:
			t.queued.Add(-1)
			t.waited += clk.Now().Sub(now)
			return false
		}
	}
}

// holdsBackLocked reports whether waiting for t's full queue holds back
// another attached tap: one with room in its queue.
func (h *Hub) holdsBackLocked(t *Tap) bool {
	for o := range h.attached {
		if o != t && !o.queue.full() {
			return true
		}
	}
	return false
}

// markLoop sweeps the attached taps every markEvery.
func (h *Hub) markLoop(stop <-chan struct{}) {
	every.Tick(stop, markEvery, func() bool {
		h.mu.Lock()
		h.sweepLocked()
		h.mu.Unlock()
		return true
	})
}

// sweepLocked lets go idle the attached taps that have had no event for
// Linger and hold nothing (release), and hands the others with no events
// pending the shared stream's position, so that their cursors move over
// transactions without events for them. A tap past its linger is handed no
// position: it settles, and goes idle at the next sweep.
func (h *Hub) sweepLocked() {
	now := h.cfg.clock.Now()
	for t := range h.attached {
		if t.skip != nil {
			if h.covers(*t.skip, h.pos) {
				continue // the tap is ahead of the shared stream
			}
			t.skip = nil
		}
		if h.release != nil && !t.keep && now.Sub(t.lastEvent) >= h.cfg.Linger {
			if t.queued.Load() == 0 {
				h.release(t)
			}
			continue
		}
		if t.sent == h.pos || t.queue.len() > 0 {
			continue
		}
		if t.put(&event.Txn{Position: h.pos, CommitTime: h.commit}) {
			t.sent = h.pos
		}
	}
}

// join attaches t if it has read every transaction the shared stream has
// handed on (its position pos covers the hub's): from the next transaction
// the shared stream hands it its events, skipping those pos already holds.
func (h *Hub) join(t *Tap, pos event.Position) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.pos.IsZero() && !h.covers(pos, h.pos) {
		return false
	}
	h.attachLocked(t, pos)
	return true
}

func (h *Hub) attachLocked(t *Tap, pos event.Position) {
	t.sent = pos
	t.skip = nil
	if pos != h.pos {
		p := pos
		t.skip = &p
	}
	t.lastEvent = h.cfg.clock.Now()
	h.attached[t] = struct{}{}
	h.indexLocked(t)
	h.obs.State(t.name, Attached)
}

// indexLocked files a tap (attached, or idle) under its route.
func (h *Hub) indexLocked(t *Tap) {
	t.indexed = true
	f := t.filter.Load()
	if f.Header == "" && len(f.AggregateTypes) > 0 {
		for _, at := range f.AggregateTypes {
			s := h.byType[at]
			s.add(t)
			h.byType[at] = s
		}
		return
	}
	if f.Header == "" {
		h.plain[t] = struct{}{}
		return
	}
	values := h.byHeader[f.Header]
	if values == nil {
		values = map[string]tapSet{}
		h.byHeader[f.Header] = values
	}
	s := values[f.Value]
	s.add(t)
	values[f.Value] = s
}

func (h *Hub) unindexLocked(t *Tap) {
	t.indexed = false
	f := t.filter.Load()
	if f.Header == "" && len(f.AggregateTypes) > 0 {
		for _, at := range f.AggregateTypes {
			s := h.byType[at]
			if s.remove(t); s.empty() {
				delete(h.byType, at)
			} else {
				h.byType[at] = s
			}
		}
		return
	}
	if f.Header == "" {
		delete(h.plain, t)
		return
	}
	values := h.byHeader[f.Header]
	s := values[f.Value]
	if s.remove(t); s.empty() {
		delete(values, f.Value)
	} else {
		values[f.Value] = s
	}
	if len(h.byHeader[f.Header]) == 0 {
		delete(h.byHeader, f.Header)
	}
}

// detachLocked takes t off the shared stream and tells it where to catch up
// from: the last transaction it was handed. It is Waiting from now on, even
// while its pipeline (busy handing on its queue) has not read where yet.
func (h *Hub) detachLocked(t *Tap) {
	if !h.removeLocked(t) {
		return
	}
	t.setState(Waiting)
	select {
	case t.detached <- t.sent:
	default: // cannot happen: one detach per attach, and the tap reads it
	}
}

// removeLocked takes t off the shared stream (an idle tap: out of the
// index); false if it was not on it.
func (h *Hub) removeLocked(t *Tap) bool {
	if t.indexed {
		h.unindexLocked(t)
	}
	if _, ok := h.attached[t]; !ok {
		return false
	}
	delete(h.attached, t)
	if t.woken {
		t.woken = false
		h.awake--
		h.aobs.Awake(-1)
	}
	return true
}

// SetFilterLocked replaces t's filter. Called from Run's changed function,
// the change takes effect exactly after that transaction: every later
// transaction is matched with f, on the shared stream and on t's catch-up
// stream alike, and a catch-up stream that reads the transactions up to
// this one (now or after a later detach) matches them with the filter they
// had.
func (h *Hub) SetFilterLocked(t *Tap, f Filter) {
	on := t.indexed
	if on {
		h.unindexLocked(t)
	}
	if !t.idle { // an idle tap reads no catch-up stream: no history
		t.vmu.Lock()
		t.older = append(t.older, filterVersion{until: h.pos, f: t.filter.Load()})
		t.vmu.Unlock()
	}
	t.filter.Store(&f)
	if on {
		h.indexLocked(t)
	}
}

// Filter selects a tap's events.
type Filter struct {
	// Match reports whether an event is for the endpoint. Nil: every event.
	Match func(*event.Event) bool
	// Header and Value, when Header is set, say that Match accepts only
	// events with that header value (a tenant): the hub then looks the tap
	// up by value instead of asking it about every event.
	Header, Value string
	// AggregateTypes, when set (and Header is not), say that Match accepts
	// only events whose aggregate type is one of these exact values: the
	// hub then looks the tap up by the event's aggregate type.
	AggregateTypes []string
}

type nopObserver struct{}

func (nopObserver) State(string, State)                    {}
func (nopObserver) Held(string, event.Position, time.Time) {}
func (nopObserver) Awake(int)                              {}
func (nopObserver) AwakeWait(bool, time.Duration)          {}
