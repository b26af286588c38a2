package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/pipeline"
	"github.com/outbox-relay/outbox-relay/retry"
)

// Tap is one endpoint's source (a pipeline.Source): its events come from the
// shared stream while it is attached, from a catch-up stream of its own
// while it is not.
//
// An idle endpoint's tap (idleTap) is only this struct, in the hub's index:
// what a running tap needs (its queue, its channels, its filter history)
// is its tapQueue, made with it by Hub.Tap and nil for an idle one.
type Tap struct {
	hub    *Hub
	name   string
	filter atomic.Pointer[Filter] // for the transactions after the last of older
	state  atomic.Int32
	// *tapQueue is nil for an idle tap.
	*tapQueue

	// Guarded by hub.mu.
	// indexed: in the hub's index (attached, or idle).
	indexed bool
	// idle: the endpoint has no pipeline; the tap has no queue and is
	// only in the index, for the hub to wake the endpoint (HubConfig's
	// wake) when it has events. cursor is then the endpoint's own saved
	// cursor (nil: it has none, it is at the shared cursor): the hub does
	// not wake it for a transaction cursor covers.
	idle   bool
	cursor *event.Position
	// scratch collects its events of the transaction handOn hands on.
	scratch []*event.Event
}

// tapQueue is what a tap with a pipeline has beside an idle one's.
type tapQueue struct {
	// older are the filters it had before, oldest first, each for the
	// transactions up to its until (SetFilterLocked); a catch-up stream
	// matches with them.
	vmu   sync.Mutex
	older []filterVersion
	queue txnQueue // transactions for its pipeline
	// direct lets the hub hand the pipeline a transaction itself.
	direct direct
	// detached receives, when the hub takes it off the shared stream, the
	// position of the last transaction it was handed.
	detached chan event.Position
	// finish, closed by Finish, makes Run hand on what is queued and end.
	finish     chan struct{}
	finishOnce sync.Once
	// queued counts the transactions put in queue that Run has not yet handed
	// on in full (its pipeline has them, in its tracker, once they are
	// handed on): 0 with the hub's lock held means the tap holds nothing.
	queued atomic.Int32
	// released: the gateway let the endpoint go idle; Run's end does not
	// report it stopped.
	released atomic.Bool

	// Guarded by hub.mu.
	// lastEvent is when the hub last handed it events (or attached it).
	lastEvent time.Time
	// keep: its endpoint is not let go idle (a sink built ahead, which its
	// pipeline closes when it ends, cannot be used again).
	keep bool
	// woken: the hub woke its endpoint and it is on the shared stream
	// (Hub.awake counts it, MaxAwake bounds it).
	woken bool
	// onDemand, set before its pipeline starts and never changed: the
	// hub woke its endpoint, which is let go once idle (pipeline.Woken).
	onDemand bool
	// Guarded by hub.mu while attached.
	sent event.Position  // the last position put in queue
	skip *event.Position // attached ahead of the shared stream: skip what this covers
	// The shared stream's waits on a full queue, within the window from waitFrom.
	waitFrom time.Time
	waited   time.Duration
}

// direct is how the shared stream hands an attached tap's pipeline a
// transaction on its own goroutine (the pipeline's TryHandler), rather than
// queue it and wake Run's goroutine for it: at a steady trickle to one
// endpoint, that wake was one more thread woken per event than a bare
// client's. It does so only while Run waits with nothing queued (parked),
// so the pipeline gets its transactions in order, and one at a time: mu is
// held by the hub for the whole call, and by Run to leave its wait, so Run
// hands on nothing until a call has ended.
type direct struct {
	mu  sync.Mutex
	try pipeline.TryHandler // nil until the pipeline gives it (Handoff)
	ctx context.Context     // Run's, for try
	// parked: Run waits with nothing queued, and hands on nothing.
	parked bool
	// err is a call's error, for Run to return: the pipeline stops.
	err error
}

// Handoff implements pipeline.Handoff.
func (t *Tap) Handoff(try pipeline.TryHandler) {
	t.direct.mu.Lock()
	t.direct.try = try
	t.direct.mu.Unlock()
}

// handDirect hands txn to t's pipeline on the caller's goroutine (the
// hub's, under its lock) if Run waits with nothing queued and the pipeline
// takes it without waiting; it reports whether it did.
func (t *Tap) handDirect(txn *event.Txn) bool {
	d := &t.direct
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.parked || d.try == nil || d.err != nil || t.queue.len() > 0 {
		return false
	}
	handed, err := d.try(d.ctx, txn)
	if err != nil {
		// As if queued and then handed on by Run: the pipeline stops
		// with err, and txn is not acknowledged.
		d.err = err
		signal(t.queue.ready)
		return true
	}
	return handed
}

// park marks Run waiting with nothing queued; unpark ends that, once a
// call of the hub's has ended, and returns that call's error.
func (t *Tap) park() {
	t.direct.mu.Lock()
	t.direct.parked = true
	t.direct.mu.Unlock()
}

func (t *Tap) unpark() error {
	t.direct.mu.Lock()
	defer t.direct.mu.Unlock()
	t.direct.parked = false
	return t.direct.err
}

// Tap returns a source for the endpoint name whose events f selects. It
// joins the shared stream when its pipeline starts it.
func (h *Hub) Tap(name string, f Filter) *Tap { return h.tapOf(name, &f) }

// tapOf is Tap with f shared (a Filter is not changed once a tap has it:
// SetFilterLocked gives the tap another).
func (h *Hub) tapOf(name string, f *Filter) *Tap {
	t := &Tap{hub: h, name: name, tapQueue: &tapQueue{queue: newTxnQueue(h.cfg.QueueTxns), detached: make(chan event.Position, 1), finish: make(chan struct{})}}
	t.filter.Store(f)
	t.state.Store(int32(Stopped))
	return t
}

// idleTap returns the tap of an idle endpoint: no queue, no pipeline; put
// in the index (indexLocked), it lets the hub wake the endpoint.
func (h *Hub) idleTap(name string, f *Filter, cursor *event.Position) *Tap {
	t := &Tap{hub: h, name: name, idle: true, cursor: cursor}
	t.filter.Store(f)
	t.state.Store(int32(Attached))
	return t
}

// Woken implements pipeline.Woken: the pipeline reading t is a wake of an
// endpoint that is let go once idle (not one whose sink was built ahead,
// or that the gateway started), so it logs its start and end at Debug.
func (t *Tap) Woken() bool { return t.tapQueue != nil && t.onDemand }

// put puts txn in t's queue if there is room.
func (t *Tap) put(txn *event.Txn) bool {
	t.queued.Add(1)
	if t.queue.push(txn) {
		return true
	}
	t.queued.Add(-1)
	return false
}

// RemoveLocked takes t off the shared stream for good (its endpoint was
// disabled or deleted): it gets no event of a later transaction. Its
// pipeline is stopped by its owner.
func (h *Hub) RemoveLocked(t *Tap) { h.removeLocked(t) }

// Lock and Unlock hold the hub between transactions.
func (h *Hub) Lock()   { h.mu.Lock() }
func (h *Hub) Unlock() { h.mu.Unlock() }

// State returns where t's events come from now.
func (t *Tap) State() State { return State(t.state.Load()) }

func (t *Tap) setState(s State) {
	if State(t.state.Swap(int32(s))) != s {
		t.hub.obs.State(t.name, s)
	}
}

func (t *Tap) matches(e *event.Event) bool { return t.filter.Load().matches(e) }

func (f *Filter) matches(e *event.Event) bool { return f.Match == nil || f.Match(e) }

// filterVersion is a filter a tap had for the transactions up to until.
type filterVersion struct {
	until event.Position
	f     *Filter
}

// filterAt returns the filter of the transaction at pos, dropping the
// versions for transactions before it: a stream reads on in order.
func (t *Tap) filterAt(pos event.Position) *Filter {
	t.vmu.Lock()
	defer t.vmu.Unlock()
	for len(t.older) > 0 && !t.hub.covers(t.older[0].until, pos) {
		t.older = t.older[1:]
	}
	if len(t.older) > 0 {
		return t.older[0].f
	}
	return t.filter.Load()
}

// errJoined stops a catch-up stream that has re-joined the shared one.
var errJoined = errors.New("re-joined the shared stream")

// errYield stops a catch-up stream that gives its slot to a waiting endpoint.
var errYield = errors.New("gave the catch-up stream to a waiting endpoint")

// Run implements pipeline.Source: it hands the pipeline, from position from,
// every transaction with events for the endpoint, and the positions of
// those without, until ctx ends or a catch-up stream fails for good.
//
// While the tap is attached, Run's goroutine (the pipeline's) is the only
// one it uses: it waits for the shared stream's transactions and for a
// detach. Only off the shared stream does a goroutine of its own (rejoin)
// wait for room and read a catch-up stream, and it ends once the tap is
// attached again: an idle endpoint costs the hub no goroutine.
func (t *Tap) Run(ctx context.Context, from event.Position, handle func(context.Context, *event.Txn) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	h := t.hub
	t.direct.mu.Lock()
	t.direct.ctx, t.direct.err = ctx, nil
	t.direct.mu.Unlock()
	defer func() {
		// No call of the hub's after Run: one under way has ended.
		t.direct.mu.Lock()
		t.direct.try, t.direct.ctx, t.direct.parked = nil, nil, false
		t.direct.mu.Unlock()
	}()
	// detached is t.detached while t is attached (nil while rejoin runs);
	// rejoined receives rejoin's end.
	var detached <-chan event.Position
	rejoined := make(chan error, 1)
	var rejoining sync.WaitGroup
	off := func(pos event.Position) {
		if h.join(t, pos) {
			t.setState(Attached)
			detached = t.detached
			return
		}
		detached = nil
		rejoining.Go(func() { rejoined <- t.rejoin(ctx, pos) })
	}
	defer func() {
		cancel()
		rejoining.Wait()
		if !t.released.Load() {
			// A released tap is off the shared stream already: its end
			// needs no lock the stream may hold while it waits at MaxAwake.
			h.mu.Lock()
			h.removeLocked(t)
			h.mu.Unlock()
		}
		if !t.released.Load() {
			t.setState(Stopped)
		}
		// What is left in the queue is not acknowledged: the cursor stays
		// before it. Empty the queue for the next Run.
		for t.queue.pop() != nil {
			t.queued.Add(-1)
		}
		select {
		case <-t.detached:
		default:
		}
	}()
	// A tap the gateway attached when it started it is on the shared
	// stream already (or was, until a detach that says where it was).
	if t.State() != Stopped {
		detached = t.detached
	} else {
		off(from)
	}
	for {
		// A call of the hub's that failed stops the pipeline, as the
		// handler's error would.
		if err := t.unpark(); err != nil {
			return err
		}
		// What is queued is handed on first: a detach or a finish comes
		// after the transactions put before it.
		if txn := t.queue.pop(); txn != nil {
			err := handle(ctx, txn)
			t.queued.Add(-1)
			if err != nil {
				return err
			}
			continue
		}
		t.park()
		select {
		case <-t.queue.ready:
		case pos := <-detached:
			t.logDetach(pos)
			off(pos)
		case err := <-rejoined:
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return err
			}
			detached = t.detached
		case <-ctx.Done():
			return ctx.Err()
		case <-t.finish:
			// Taken off the shared stream (RemoveLocked): hand on what it
			// was given, then end; the pipeline drains and saves.
			if err := t.unpark(); err != nil {
				return err
			}
			for txn := t.queue.pop(); txn != nil; txn = t.queue.pop() {
				err := handle(ctx, txn)
				t.queued.Add(-1)
				if err != nil {
					return err
				}
			}
			return nil
		}
	}
}

// Finish makes Run hand its pipeline what is queued and return: call it
// once the tap is off the shared stream.
func (t *Tap) Finish() { t.finishOnce.Do(func() { close(t.finish) }) }

// rejoin keeps t's queue fed while it is off the shared stream, from pos:
// it waits for room, then reads a catch-up stream of its own, until t is
// attached again (nil) or ctx ends or the stream fails for good.
func (t *Tap) rejoin(ctx context.Context, pos event.Position) error {
	h := t.hub
	for {
		t.setState(Waiting)
		// Take a stream only once the endpoint has room: one that is down
		// would hold it while the others wait.
		if err := t.waitForRoom(ctx); err != nil {
			return err
		}
		if h.join(t, pos) {
			t.setState(Attached)
			return nil
		}
		slot, err := h.acquire(ctx)
		if err != nil {
			return err
		}
		t.setState(CatchingUp)
		next, joined, err := t.catchUp(ctx, slot, pos)
		h.slots <- slot
		pos = next
		switch {
		case joined:
			t.setState(Attached)
			return nil
		case err != nil:
			return err
		}
	}
}

func (t *Tap) logDetach(pos event.Position) {
	t.hub.log.Info("endpoint detached from the shared stream: its queue is full; it catches up on its own stream",
		slog.String("endpoint", t.name), slog.String("from", pos.String()))
}

// waitForRoom waits until t's queue is at most half full.
func (t *Tap) waitForRoom(ctx context.Context) error {
	for t.queue.len() > t.queue.max/2 {
		if err := retry.Sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// acquire waits for a free catch-up slot, in turn.
func (h *Hub) acquire(ctx context.Context) (int, error) {
	h.queue.Add(1)
	defer h.queue.Add(-1)
	select {
	case slot := <-h.slots:
		return slot, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// catchUp reads a stream of t's own from pos, putting t's transactions in
// its queue, until it re-joins the shared stream (joined), gives the stream
// up to a waiting endpoint, or fails. It returns the position of the last
// transaction it put in the queue.
func (t *Tap) catchUp(ctx context.Context, slot int, pos event.Position) (event.Position, bool, error) {
	h := t.hub
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	h.log.Info("endpoint catching up on its own stream", slog.String("endpoint", t.name), slog.Int("slot", slot), slog.String("from", pos.String()))
	var joined bool
	err := h.cfg.Open(slot).Run(ctx, pos, func(ctx context.Context, txn *event.Txn) error {
		var evs []*event.Event
		f := t.filterAt(txn.Position)
		for _, e := range txn.Events {
			if f.matches(e) {
				evs = append(evs, e)
			}
		}
		out := &event.Txn{Events: evs, Position: txn.Position, CommitTime: txn.CommitTime, Held: txn.Held}
		if len(evs) == 0 {
			// Nothing for it: hand on the position if there is room, and
			// count the transaction as read either way.
			t.put(out)
			pos = txn.Position
		} else if err := t.putWait(ctx, out); err != nil {
			return err
		} else {
			pos = txn.Position
		}
		if h.join(t, pos) {
			joined = true
			return errJoined
		}
		return nil
	})
	switch {
	case joined:
		h.log.Info("endpoint re-joined the shared stream", slog.String("endpoint", t.name), slog.String("at", pos.String()))
		return pos, true, nil
	case errors.Is(err, errYield):
		return pos, false, nil
	case ctx.Err() != nil:
		return pos, false, ctx.Err()
	case err == nil:
		err = errors.New("stream ended")
	}
	return pos, false, fmt.Errorf("endpoint %s: catch-up stream: %w", t.name, err)
}

// putWait queues txn, waiting for room; it gives up (errYield) after
// YieldAfter of waiting while another endpoint waits for a stream.
func (t *Tap) putWait(ctx context.Context, txn *event.Txn) error {
	if t.put(txn) {
		return nil
	}
	tick := time.NewTicker(t.hub.cfg.YieldAfter)
	defer tick.Stop()
	t.queued.Add(1)
	for {
		if t.queue.push(txn) {
			return nil
		}
		select {
		case <-t.queue.room:
		case <-ctx.Done():
			t.queued.Add(-1)
			return ctx.Err()
		case <-tick.C:
			if t.hub.queue.Load() > 0 {
				t.queued.Add(-1)
				return errYield
			}
		}
	}
}

// startOf returns where a hub should start, given its endpoints' cursors
// and its position order (covers): the oldest of those within window (by
// commit time) of the newest, so that endpoints that were current together
// re-join at once after a restart and one far behind catches up on its own
// stream instead of making every endpoint re-read its backlog. Cursors with
// no commit time (new endpoints) count as current.
func startOf(covers func(have, want event.Position) bool, cursors []Cursor, window time.Duration) event.Position {
	var newest time.Time
	for _, c := range cursors {
		if c.Commit.After(newest) {
			newest = c.Commit
		}
	}
	var start event.Position
	found := false
	for _, c := range cursors {
		if !c.Commit.IsZero() && c.Commit.Before(newest.Add(-window)) {
			continue
		}
		if !found || covers(start, c.Position) {
			start, found = c.Position, true
		}
	}
	return start
}

// Cursor is an endpoint's position and the commit time of its transaction.
type Cursor struct {
	Position event.Position
	Commit   time.Time
}
