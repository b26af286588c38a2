package webhook

// This file owns how events come in: Submit and Write, the batch of a call
// (writeCall) and its events on their way (delivery), each queued in its
// aggregate's lane, and the watch on the Submit ctx (ctxWatch) that abandons
// a call's undone events when the ctx ends.

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink"
)

// writeCall is one submitted batch waiting for its events.
type writeCall struct {
	// deliveries are the batch's events. They are allocated in chunks
	// of deliveryChunk (small objects, not one large array per batch),
	// the one of a batch of one with the call.
	deliveries []*delivery
	one        [1]delivery
	onePtr     [1]*delivery
	ack        func(i int, err error)
	done       <-chan struct{} // closed when the stream stops: the Submit ctx's Done (see Write)
	// Guarded by Endpoint.mu.
	pending int   // events not yet done
	ctxErr  error // the Submit ctx ended first
	// watch is the watch of the Submit ctx while pending (nil: a ctx
	// that never ends); prev and next link its calls, oldest first.
	watch      *ctxWatch
	prev, next *writeCall
}

// ctxWatch watches one Submit ctx for the calls made with it that are
// pending: when it ends, they are abandoned. Guarded by Endpoint.mu.
type ctxWatch struct {
	ctx         context.Context
	done        <-chan struct{} // ctx.Done(): a ctx is recognised by it
	stop        func() bool     // stops the context.AfterFunc
	first, last *writeCall
	fired       bool // ctx ended: calls made since get a watch of their own
}

// deliveryChunk is how many deliveries of a batch are allocated together.
const deliveryChunk = 16

// delivery is one event on its way to the endpoint.
type delivery struct {
	ev       *event.Event
	body     []byte
	call     *writeCall
	idx      int
	lane     *lane
	enqueued time.Time

	// Written under Endpoint.mu by the worker running the current attempt.
	attempts    int
	first, last time.Time
	lastStatus  int
	lastOutcome string

	// Guarded by Endpoint.mu.
	done        bool
	cancel      context.CancelFunc // set while an attempt runs
	timer       *time.Timer        // set while waiting for a retry
	timerGen    int                // which timer may ready it
	unreachable bool               // waiting after a connection failure
}

// Submit implements sink.Submitter: it queues the batch's events behind the
// earlier events of their aggregates and returns without waiting (it never
// blocks: the pipeline bounds what is in flight). ack is called once per
// event, from another goroutine, as soon as it is delivered (nil) or has
// failed permanently (a sink.Permanent error), or with ctx.Err() once ctx
// ends first; see the package doc. Events that the filter rejects are
// acknowledged at once, without a request.
func (e *Endpoint) Submit(ctx context.Context, batch []*event.Event, ack func(i int, err error)) {
	e.submit(ctx, ctx.Done(), batch, ack)
}

// SubmitOnlyQueues implements sink.Queuer: Submit never blocks.
func (e *Endpoint) SubmitOnlyQueues() {}

// submit is Submit, with stopped the signal that the stream stops (read
// when a permanently failed event's ack has returned: see failHeadLocked).
// For Submit it is ctx's end: the pipeline ends a Submit ctx inside the ack
// when it stops.
func (e *Endpoint) submit(ctx context.Context, stopped <-chan struct{}, batch []*event.Event, ack func(i int, err error)) {
	failAll := func(err error) {
		for i := range batch {
			ack(i, err)
		}
	}
	if err := ctx.Err(); err != nil {
		failAll(err)
		return
	}
	if !e.start() {
		failAll(errClosed)
		return
	}
	c := &writeCall{ack: ack, done: stopped}
	var chunk []delivery
	if len(batch) == 1 {
		c.deliveries, chunk = c.onePtr[:0], c.one[:0]
	} else {
		c.deliveries = make([]*delivery, 0, len(batch))
	}
	now := time.Now()
	for i, ev := range batch {
		if ev == nil || !e.cfg.Filter.Match(ev) {
			ack(i, nil) // filtered out: acknowledged without a request
			continue
		}
		if len(chunk) == cap(chunk) {
			chunk = make([]delivery, 0, min(deliveryChunk, len(batch)-i))
		}
		chunk = append(chunk, delivery{
			ev: ev, body: requestBody(&e.cfg, ev), call: c, idx: i, enqueued: now,
		})
		c.deliveries = append(c.deliveries, &chunk[len(chunk)-1])
	}
	if len(c.deliveries) == 0 {
		return
	}

	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		e.mu.Unlock() // ack may call Write
		for _, d := range c.deliveries {
			ack(d.idx, errClosed)
		}
		e.mu.Lock()
		return
	}
	c.pending = len(c.deliveries)
	e.watchCallLocked(c, ctx)
	for _, d := range c.deliveries {
		if e.disabled {
			e.obs.Failed(ReasonDisabled)
			e.finishLocked(d, sink.Permanent(&DeliveryError{Err: ErrEndpointDisabled}))
			continue
		}
		l := e.lanes[d.ev.AggregateID]
		if l == nil {
			l = &lane{key: d.ev.AggregateID}
			e.lanes[l.key] = l
		}
		d.lane = l
		l.q = append(l.q, d)
		if len(l.q) == 1 && !l.held {
			e.readyLocked(d)
		}
	}
}

// Selects reports whether the endpoint's filter selects ev: events it does
// not select are acknowledged without a request.
func (e *Endpoint) Selects(ev *event.Event) bool {
	return e.cfg.Filter.Match(ev)
}

// Write delivers batch and waits: it is Submit and a wait for every ack.
// Calls may be concurrent; their events are queued in the order the calls
// take the endpoint's lock. ctx ending while Write waits abandons the batch
// and stops the aggregates of its failed events; once Write has returned,
// ctx's end says nothing: a caller that cancels its ctx as Write returns
// does not stop the later events of a failed event's aggregate (the
// caller decides with Write's error).
func (e *Endpoint) Write(ctx context.Context, batch []*event.Event) error {
	var mu sync.Mutex
	returned := false
	stopped := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !returned {
			close(stopped)
		}
	})
	defer stop()
	result := make(chan error, 1)
	e.submit(ctx, stopped, batch, sink.Collect(len(batch), func(err error) { result <- err }))
	err := <-result
	mu.Lock()
	returned = true
	mu.Unlock()
	return err
}

// watchCallLocked has c, pending, abandoned when ctx ends. The endpoint
// keeps watching the ctx of its latest call while no call of it is
// pending, so a pipeline's calls, which share one ctx, register one
// context.AfterFunc in all, not one each.
func (e *Endpoint) watchCallLocked(c *writeCall, ctx context.Context) {
	done := ctx.Done()
	if done == nil {
		return // never ends
	}
	w := e.watch
	if w == nil || w.fired || w.done != done {
		if w != nil && w.first == nil {
			w.stop() // no call of it pending
		}
		w = &ctxWatch{ctx: ctx, done: done}
		e.watch = w
		// Registered under the lock: if ctx has ended, abandonAll runs
		// (on its own goroutine) once submit has let go of it.
		w.stop = context.AfterFunc(ctx, func() { e.abandonAll(w) })
	}
	c.watch, c.prev = w, w.last
	if w.last != nil {
		w.last.next = c
	} else {
		w.first = c
	}
	w.last = c
}

// unwatchLocked takes c, no longer pending, off its ctx's watch, and stops
// the watch once it has no call pending and is not the latest.
func (e *Endpoint) unwatchLocked(c *writeCall) {
	w := c.watch
	if w == nil {
		return
	}
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		w.first = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		w.last = c.prev
	}
	c.watch, c.prev, c.next = nil, nil, nil
	if w.first == nil && w != e.watch {
		w.stop() // never waits
	}
}

// abandonAll abandons the pending calls of w, whose ctx ended, in the
// order they were made.
func (e *Endpoint) abandonAll(w *ctxWatch) {
	e.mu.Lock()
	defer e.mu.Unlock()
	w.fired = true
	if e.watch == w {
		e.watch = nil
	}
	var calls []*writeCall // abandoning one can complete later ones
	for c := w.first; c != nil; c = c.next {
		calls = append(calls, c)
	}
	for _, c := range calls {
		e.abandonLocked(c, w.ctx)
	}
}

// abandonLocked drops c's undone events after its ctx ended, with every
// later event of their lanes, and so completes c with ctx's error.
func (e *Endpoint) abandonLocked(c *writeCall, ctx context.Context) {
	if c.pending == 0 {
		return
	}
	c.ctxErr = ctx.Err()
	for _, d := range c.deliveries {
		if d.done {
			continue
		}
		l := d.lane
		e.dropLocked(l, slices.Index(l.q, d), func(x *delivery) error {
			if x.call == c {
				return c.ctxErr
			}
			return ErrPredecessorAbandoned
		})
	}
}
