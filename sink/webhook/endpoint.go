package webhook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/outbox-relay/outbox-relay/attempts"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/redact"
	"github.com/outbox-relay/outbox-relay/sink"
)

// ErrEndpointDisabled is the permanent failure of every event of an endpoint
// that answered 410 Gone, the event it answered to and every later one.
var ErrEndpointDisabled = errors.New("endpoint disabled: 410 Gone")

// ErrPredecessorAbandoned is the (retriable) failure of an event whose
// aggregate had an earlier event abandoned by a cancelled Write: sending it
// would overtake that event, so it is handed back to be written again after
// it.
var ErrPredecessorAbandoned = errors.New("an earlier event of the same aggregate was abandoned by a cancelled write; write this event again after it")

// errClosed is returned by Write after Close.
var errClosed = errors.New("webhook endpoint is closed")

// DeliveryError describes the permanent failure of one event. Write reports
// it wrapped in sink.Permanent, inside a *sink.BatchError; read it with
// errors.As to fill a dead letter.
type DeliveryError struct {
	// Attempts is the number of HTTP attempts made (0 when none was).
	Attempts int
	// First and Last are the starts of the first and last attempts.
	First, Last time.Time
	// Status is the last response's status, 0 when none arrived.
	Status int
	// Err says why.
	Err error
}

func (e *DeliveryError) Error() string { return e.Err.Error() }

// Tenant implements sink.Owned: the tenant of the endpoint's row
// (EndpointConfig.Tenant), "" for an endpoint of no tenant.
func (e *Endpoint) Tenant() string { return e.cfg.Tenant }

// AttemptReport implements sink.AttemptReporter.
func (e *DeliveryError) AttemptReport() (int, time.Time, time.Time) {
	return e.Attempts, e.First, e.Last
}
func (e *DeliveryError) Unwrap() error { return e.Err }

// Endpoint is the sink for one webhook endpoint. It implements sink.Sink and
// sink.Submitter; see the package doc for its guarantees.
type Endpoint struct {
	cfg       EndpointConfig
	keys      [][]byte
	signer    *signer       // nil: no secrets, requests go unsigned
	fixed     []headerField // headers every request carries (fixedHeader)
	log       *slog.Logger
	obs       Observer
	url       *url.URL        // cfg.URL, without its userinfo (sent as basic auth)
	transport *http.Transport // shared: see transportFor
	release   func()          // lets go of transport
	limiter   *rate.Limiter   // nil: unlimited
	egress    *egressPolicy
	dial      func(ctx context.Context, network, addr string) (net.Conn, error)
	scrub     *redact.Replacer // hides configured secrets in what is recorded

	workers   sync.WaitGroup
	callbacks sync.WaitGroup // goroutines calling Submit's ack

	mu    sync.Mutex
	lanes map[string]*lane
	ready []*delivery // lane heads due for an attempt, in FIFO order
	// running is the number of workers: one is started when an event is
	// readied, none waits and fewer than max_concurrency run, and a worker
	// ends once ready has stayed empty for workerLinger (up to twice
	// that), so an idle endpoint has none.
	running int
	// idle are the workers waiting for a lane head (lingerLocked), the
	// latest last: readyLocked hands one the head instead of starting a
	// worker.
	idle []*worker
	// linger is workerLinger (tests shorten or lengthen it); spawned
	// counts the workers started; ended is when a worker last ended.
	linger   time.Duration
	spawned  int
	ended    time.Time
	started  bool
	closed   bool
	disabled bool
	probing  bool // a probe goroutine runs
	// mayWaitUnreachable: a lane head may be waiting after a connection
	// failure; false after wakeUnreachableLocked readied them all, so a
	// delivery does not scan every lane when none waits.
	mayWaitUnreachable bool
	closing            chan struct{} // closed by Close
	// watch watches the Submit ctx of the latest call: the calls of one
	// ctx (a pipeline passes the same to every Submit) share one
	// context.AfterFunc instead of registering one each.
	watch *ctxWatch
	// The endpoint's run of failed attempts, for its throttled log lines:
	// one when it starts failing, at most one per logEvery while it goes on,
	// one when it delivers again. failingSince is zero while it delivers.
	failingSince time.Time
	failedRun    int       // failed attempts in the run
	lastFailLog  time.Time // when the run was last logged

	probeEvery time.Duration // cfg.Policy's Probe; tests shorten it
	logEvery   time.Duration // DefaultFailureLogInterval; tests shorten it
	// carry, if set, is what the endpoint's sinks hand on to each other
	// (idle.go): its limiter is carry's, its run of failures is read from
	// carry when it is made and written back when it closes.
	carry *carried
}

// DefaultFailureLogInterval is the least time between two "still failing"
// log lines of one endpoint.
const DefaultFailureLogInterval = time.Minute

// lane is the FIFO of one aggregate's undone events; only its head is ever
// attempted.
type lane struct {
	key string
	q   []*delivery
	// held: the former head failed permanently and its ack has not
	// returned; the next event waits for the pipeline's decision.
	held bool
}

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

// NewEndpoint validates cfg, applies its defaults and returns the endpoint's
// sink. A nil logger discards logs. No request is made until Write.
func NewEndpoint(cfg EndpointConfig, logger *slog.Logger) (*Endpoint, error) {
	return makeEndpoint(cfg, logger, nil, false)
}

// makeEndpoint is NewEndpoint, handed on what carry keeps (nil: nothing);
// checked says cfg has its defaults applied and is valid (decoded from a
// row of the endpoints table), so neither is done again.
func makeEndpoint(cfg EndpointConfig, logger *slog.Logger, carry *carried, checked bool) (*Endpoint, error) {
	if !checked {
		if err := cfg.Validate(); err != nil {
			return nil, err
		}
		cfg = cfg.WithDefaults()
	}
	cfg.Secrets = slices.Clone(cfg.Secrets)
	cfg.Headers = maps.Clone(cfg.Headers)
	cfg.Filter.EventTypes = slices.Clone(cfg.Filter.EventTypes)
	cfg.Filter.AggregateTypes = slices.Clone(cfg.Filter.AggregateTypes)
	cfg.Filter.Headers = maps.Clone(cfg.Filter.Headers)

	keys := make([][]byte, len(cfg.Secrets))
	for i, s := range cfg.Secrets {
		k, err := parseSecret(s)
		if err != nil { // Validate has checked; kept for safety
			return nil, fmt.Errorf("webhook endpoint %q: secrets[%d]: %w", cfg.Name, i, err)
		}
		keys[i] = k
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With(slog.String("sink_type", "webhook"), slog.String("endpoint", cfg.Name))
	if len(keys) == 0 {
		logger.Warn("webhook endpoint has no secrets: requests are sent unsigned; set secrets")
	}
	obs := cfg.Observer
	if obs == nil {
		obs = nopObserver{}
	}

	policy, err := cfg.Egress.compile(cfg.FromData, cfg.Resolver)
	if err != nil { // Validate has checked; kept for safety
		return nil, fmt.Errorf("webhook endpoint %q: %w", cfg.Name, err)
	}
	dial := (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	if policy.deny || cfg.Resolver != nil {
		dial = policy.dialContext
	}
	u, err := url.Parse(cfg.URL)
	if err != nil { // Validate has checked; kept for safety
		return nil, fmt.Errorf("webhook endpoint %q: url: %s", cfg.Name, urlError(cfg.URL, err))
	}
	fixed := fixedHeader(cfg.Headers, u)
	u.User = nil
	var limiter *rate.Limiter
	switch {
	case carry != nil:
		limiter = carry.limiterFor(cfg.RateLimit)
	case cfg.RateLimit > 0:
		limiter = rate.NewLimiter(rate.Limit(cfg.RateLimit), 1)
	}
	// Shared by the endpoints that dial alike (transportFor); the workers
	// bound each endpoint's requests, and so its connections.
	tr, releaseTransport := carry.transport(func() (*http.Transport, func()) {
		return transportFor(policy, cfg.Resolver != nil, dial)
	})
	e := &Endpoint{
		cfg:       cfg,
		keys:      keys,
		fixed:     fieldsOf(fixed),
		log:       logger,
		obs:       obs,
		url:       u,
		transport: tr,
		release:   releaseTransport,
		limiter:   limiter,
		egress:    policy,
		dial:      dial,
		scrub:     redact.NewReplacer(cfg.secretValues()...),
		lanes:     make(map[string]*lane),
		closing:   make(chan struct{}),
		linger:    workerLinger,

		probeEvery: cfg.Policy.WithDefaults().Probe,
		logEvery:   DefaultFailureLogInterval,
		carry:      carry,
	}
	carry.handTo(e)
	if len(keys) > 0 {
		e.signer = newSigner(keys)
	}
	return e, nil
}

// Name returns the endpoint's configured name.
func (e *Endpoint) Name() string { return e.cfg.Name }

// Connect readies the endpoint. It makes no request (probing a webhook
// receiver could have side effects) and starts no goroutine: workers start
// when events are due and end when none is.
func (e *Endpoint) Connect(ctx context.Context) error {
	if !e.start() {
		return errClosed
	}
	return nil
}

// start lets the endpoint start workers (as events become due); it reports
// false when the endpoint is closed.
func (e *Endpoint) start() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	e.started = true
	return true
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

// Close stops the workers, cancels requests in flight and fails every
// undone event with a retriable error, then waits for the workers and for
// the ack callbacks it started.
func (e *Endpoint) Close(ctx context.Context) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	close(e.closing)
	if w := e.watch; w != nil {
		e.watch = nil
		if w.first == nil {
			w.stop()
		}
	}
	for _, l := range e.lanes {
		e.dropLocked(l, 0, func(*delivery) error { return errClosed })
	}
	e.ready = nil
	e.mu.Unlock()

	done := make(chan struct{})
	go func() {
		e.workers.Wait()
		e.callbacks.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("close webhook endpoint %q: %w", e.cfg.Name, ctx.Err())
	}
	e.mu.Lock()
	e.carry.takeFrom(e)
	e.mu.Unlock()
	e.release()
	return nil
}

// readyLocked queues d, a lane head, for an attempt, and wakes a lingering
// worker for it, or starts one unless max_concurrency of them run: each
// runs what is ready until nothing is (for workerLinger at a steady rate).
func (e *Endpoint) readyLocked(d *delivery) {
	e.ready = append(e.ready, d)
	if n := len(e.idle); n > 0 {
		w := e.idle[n-1] // the latest to wait: the others may expire
		e.idle = e.idle[:n-1]
		w.idle = false
		w.wake <- struct{}{} // its one token: never blocks
		return
	}
	if e.running < e.cfg.MaxConcurrency && e.started && !e.closed {
		e.running++
		e.spawned++
		e.workers.Add(1)
		// A worker lingers only at a steady rate: when the last one ended
		// within its linger (a gateway's thousand endpoints at a few events
		// a second each start one per event, as before, and keep no timer).
		go e.worker(!e.ended.IsZero() && time.Since(e.ended) < e.linger)
	}
}

// finishLocked marks d done with err (nil: delivered), stops its timer or
// request, and hands the result to its batch's ack.
// It does not touch d's lane.
func (e *Endpoint) finishLocked(d *delivery, err error) {
	e.finishLockedThen(d, err, nil)
}

// finishLockedThen is finishLocked, calling then (if not nil) once ack has
// returned.
func (e *Endpoint) finishLockedThen(d *delivery, err error, then func()) {
	c := e.doneLocked(d)
	// ack may block (a dead-letter write) or call back into the endpoint:
	// never under the lock.
	e.callbacks.Add(1)
	go func() {
		defer e.callbacks.Done()
		c.ack(d.idx, err)
		if then != nil {
			then()
		}
	}()
}

// deliveredLocked finishes d, delivered, and moves its lane on; it
// returns d's batch, whose ack the calling worker makes once it has let go
// of the lock, instead of starting a goroutine for it: a delivery costs no
// goroutine of its own. (An ack of a delivered event releases it in the
// pipeline's tracker and returns: it neither blocks nor waits for the
// endpoint.)
func (e *Endpoint) deliveredLocked(d *delivery) *writeCall {
	c := e.doneLocked(d)
	e.advanceLaneLocked(d)
	return c
}

// doneLocked marks d done, stops its timer or request and returns its
// batch, with d counted out of it.
func (e *Endpoint) doneLocked(d *delivery) *writeCall {
	d.done = true
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	if d.cancel != nil {
		d.cancel()
		d.cancel = nil
	}
	c := d.call
	c.pending--
	if c.pending == 0 {
		e.unwatchLocked(c)
	}
	return c
}

// failHeadLocked finishes d, the head of its lane, with a permanent failure.
// The lane's next event is not sent until d's ack has returned: in it the
// pipeline decides whether the stream goes on (d is in the dead-letter store)
// or stops (no store: it ends the Submit ctx). If it stopped, the
// aggregate's later events are dropped as ErrPredecessorAbandoned, never
// sent ahead of d, which will be delivered again after a restart.
func (e *Endpoint) failHeadLocked(d *delivery, err error) {
	l := d.lane
	l.q[0] = nil
	l.q = l.q[1:]
	l.held = true
	e.finishLockedThen(d, err, func() { e.releaseLane(l, d.call) })
}

// releaseLane lets l go on after its failed head's ack returned (c is the
// head's batch).
func (e *Endpoint) releaseLane(l *lane, c *writeCall) {
	e.mu.Lock()
	defer e.mu.Unlock()
	l.held = false
	stopped := false
	select {
	case <-c.done:
		stopped = true
	default:
	}
	switch {
	case len(l.q) == 0:
		if e.lanes[l.key] == l {
			delete(e.lanes, l.key)
		}
	case stopped:
		e.dropLocked(l, 0, func(*delivery) error { return ErrPredecessorAbandoned })
	case !e.closed:
		e.readyLocked(l.q[0])
	}
}

// advanceLaneLocked takes d, done, off the head of its lane and readies
// the lane's next event, or removes the lane when it is empty.
func (e *Endpoint) advanceLaneLocked(d *delivery) {
	l := d.lane
	l.q[0] = nil
	l.q = l.q[1:]
	if len(l.q) == 0 {
		delete(e.lanes, l.key)
		return
	}
	e.readyLocked(l.q[0])
}

// dropLocked finishes the events of l from index from on, each with
// errFor's error, and removes l when it is left empty.
func (e *Endpoint) dropLocked(l *lane, from int, errFor func(*delivery) error) {
	for i := from; i < len(l.q); i++ {
		e.finishLocked(l.q[i], errFor(l.q[i]))
		l.q[i] = nil
	}
	l.q = l.q[:from]
	if from == 0 && !l.held && e.lanes[l.key] == l {
		delete(e.lanes, l.key)
	}
}

// workerLinger is how long a worker with nothing due waits for the next
// lane head before it ends (between one and two workerLinger), when it was
// started within workerLinger of the end of the last: at a steady rate (a
// transaction every few milliseconds) the next event then wakes a worker
// whose stack has grown already, instead of starting a goroutine that
// grows its stack again on the way into the HTTP client (runtime.newstack
// was 8 % of the relay's CPU for one endpoint at 2,000 events a second);
// an endpoint that has had no event for twice workerLinger has no
// goroutine.
const workerLinger = 20 * time.Millisecond

// worker is a running worker's state, once it has waited for work.
// Guarded by Endpoint.mu.
type worker struct {
	// wake receives one token when readyLocked hands it a lane head or its
	// linger is over (quit); it is made at its first wait, with expiry.
	wake chan struct{}
	// expiry fires every workerLinger while the worker runs: a worker that
	// waits and took nothing since the last is told to quit. One timer
	// per worker, not one per wait: a wait costs no timer operation.
	expiry  *time.Timer
	idle    bool // in Endpoint.idle, waiting on wake
	used    bool // took a lane head since expiry last fired
	quit    bool
	done    bool // ended: expiry does nothing
	lingers bool // it waits when nothing is due (a steady rate)
}

// worker runs attempts until none is due (has been for workerLinger, if it
// lingers) or the endpoint closes.
func (e *Endpoint) worker(lingers bool) {
	defer e.workers.Done()
	w := &worker{lingers: lingers}
	defer func() {
		if w.expiry != nil {
			w.expiry.Stop()
		}
	}()
	for {
		d, ok := e.next(w)
		if !ok {
			return
		}
		e.attempt(d)
	}
}

// next takes a due lane head for w, waiting for one while w lingers. When
// none is due by the end of its linger or the endpoint is closed it
// reports false, and the calling worker ends.
func (e *Endpoint) next(w *worker) (*delivery, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for {
		if len(e.ready) == 0 && !e.closed && e.lingerLocked(w) {
			continue
		}
		if len(e.ready) == 0 || e.closed {
			e.running--
			w.done = true
			e.ended = time.Now()
			return nil, false
		}
		d := e.ready[0]
		e.ready[0] = nil
		if len(e.ready) == 1 {
			e.ready = e.ready[:0] // emptied: its array is reused
		} else {
			e.ready = e.ready[1:]
		}
		if d.done {
			continue
		}
		w.used = true
		return d, true
	}
}

// lingerLocked waits, with e.mu let go meanwhile, for readyLocked to hand
// w a lane head, for its linger to be over, or for Close; it reports
// false once w is to quit. One worker at a time lingers: a steady rate
// needs one, and on a backlog the others end when nothing is due, as
// before, instead of each being woken in turn.
func (e *Endpoint) lingerLocked(w *worker) bool {
	if w.quit || !w.lingers || len(e.idle) > 0 {
		return false
	}
	if w.wake == nil {
		w.wake = make(chan struct{}, 1)
		w.expiry = time.AfterFunc(e.linger, func() { e.expire(w) })
	}
	w.idle = true
	e.idle = append(e.idle, w)
	e.mu.Unlock()
	select {
	case <-w.wake:
	case <-e.closing:
	}
	e.mu.Lock()
	if w.idle { // Close: no token came
		e.unidleLocked(w)
	}
	return !w.quit
}

// expire ends w's linger if it waits and took nothing since the last
// expiry; otherwise it lets w linger one more workerLinger.
func (e *Endpoint) expire(w *worker) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case w.done:
	case w.idle && !w.used:
		e.unidleLocked(w)
		w.quit = true
		w.wake <- struct{}{}
	default:
		w.used = false
		w.expiry.Reset(e.linger)
	}
}

// unidleLocked takes w, waiting, off the idle list.
func (e *Endpoint) unidleLocked(w *worker) {
	w.idle = false
	if i := slices.Index(e.idle, w); i >= 0 {
		e.idle = slices.Delete(e.idle, i, i+1)
	}
}

// watchLocked gives d a context that is cancelled when d is dropped
// (settle, or its finish, calls d.cancel), ending at deadline if it is not
// zero. It returns nil when d was dropped already.
func (e *Endpoint) watchLocked(d *delivery, deadline time.Time) context.Context {
	if d.done {
		return nil
	}
	var ctx context.Context
	if deadline.IsZero() {
		ctx, d.cancel = context.WithCancel(context.Background())
	} else {
		ctx, d.cancel = context.WithDeadline(context.Background(), deadline)
	}
	return ctx
}

// retryTimer readies d again when its wait is over.
func (e *Endpoint) retryTimer(d *delivery, gen int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if d.done || e.closed || d.timer == nil || d.timerGen != gen {
		return // dropped, or readied early by a probe
	}
	d.timer = nil
	e.readyLocked(d)
}

// wakeUnreachableLocked readies at once every lane head waiting after a
// connection failure: the endpoint is reachable again.
func (e *Endpoint) wakeUnreachableLocked() {
	if !e.mayWaitUnreachable {
		return
	}
	e.mayWaitUnreachable = false
	for _, l := range e.lanes {
		if len(l.q) == 0 {
			continue
		}
		d := l.q[0]
		if d.unreachable && d.timer != nil && !d.done {
			d.timer.Stop()
			d.timer = nil
			d.unreachable = false
			e.readyLocked(d)
		}
	}
}

// anyUnreachableLocked reports whether a lane head waits after a connection
// failure.
func (e *Endpoint) anyUnreachableLocked() bool {
	for _, l := range e.lanes {
		if len(l.q) > 0 && l.q[0].unreachable && l.q[0].timer != nil {
			return true
		}
	}
	return false
}

// probe runs while events wait after connection failures: every probeEvery
// it opens (and closes) a TCP connection to the url's host, which sends no
// request, and once one succeeds it readies those events at once, however
// long their backoff. So an endpoint that comes back after a long outage is
// noticed within about a second, while each event's attempts still back off.
func (e *Endpoint) probe() {
	defer e.workers.Done()
	addr := probeAddr(e.cfg.URL)
	t := time.NewTicker(e.probeEvery)
	defer t.Stop()
	for {
		select {
		case <-e.closing:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), e.probeEvery)
		c, err := e.dial(ctx, "tcp", addr)
		cancel()
		if err == nil {
			_ = c.Close()
		}
		e.mu.Lock()
		switch {
		case e.closed:
		case err == nil:
			e.wakeUnreachableLocked()
		case e.anyUnreachableLocked():
			e.mu.Unlock()
			continue
		}
		e.probing = false
		e.mu.Unlock()
		return
	}
}

// probeAddr is the host:port a probe connects to.
func probeAddr(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	if u.Port() != "" {
		return u.Host
	}
	port := "80"
	if u.Scheme == "https" {
		port = "443"
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// attempt makes one attempt to deliver d and settles the outcome. The
// attempt's context ends after the endpoint's timeout, or when d is
// dropped; the rate limiter and the gateway's slots are waited for first,
// under a context of their own (made only when one is configured).
func (e *Endpoint) attempt(d *delivery) {
	if e.limiter != nil || e.cfg.Slots != nil {
		e.mu.Lock()
		ctx := e.watchLocked(d, time.Time{})
		e.mu.Unlock()
		if ctx == nil {
			return // dropped meanwhile
		}
		if e.limiter != nil {
			if err := e.limiter.Wait(ctx); err != nil {
				e.settle(d, outcome{kind: cancelled})
				return
			}
		}
		if e.cfg.Slots != nil {
			select {
			case e.cfg.Slots <- struct{}{}:
				defer func() { <-e.cfg.Slots }()
			case <-ctx.Done():
				e.settle(d, outcome{kind: cancelled})
				return
			}
		}
	}
	start := time.Now()
	e.mu.Lock()
	if d.cancel != nil {
		d.cancel()
		d.cancel = nil
	}
	ctx := e.watchLocked(d, start.Add(e.cfg.Timeout))
	disabled := e.disabled
	if ctx != nil && !disabled {
		// Under the lock: a 410 on another lane reads them to dead-letter d.
		if d.attempts == 0 {
			d.first = start
		}
		d.last = start
		d.attempts++
	}
	e.mu.Unlock()
	switch {
	case ctx == nil:
		return // dropped meanwhile
	case disabled:
		e.settle(d, outcome{kind: gone})
		return
	}
	o := e.send(ctx, d, start)
	if o.kind != cancelled {
		o.start, o.dur, o.attempted = start, time.Since(start), true
		e.obs.Attempt(o.status, o.dur)
	}
	e.settle(d, o)
}

// settle applies the outcome of d's attempt.
func (e *Endpoint) settle(d *delivery, o outcome) {
	var after func() // logging, done without the lock
	e.mu.Lock()
	if d.cancel != nil {
		d.cancel()
		d.cancel = nil
	}
	if d.done { // dropped meanwhile (cancelled write, 410 elsewhere, Close)
		n := d.attempts
		e.mu.Unlock()
		if e.cfg.Attempts != nil && o.attempted {
			// Sent again later (a restart), unless it was delivered now.
			result := attempts.OutcomeRetry
			if o.kind == delivered {
				result = attempts.OutcomeDelivered
			}
			e.record(d, n, o, result)
		}
		return
	}
	// result is the attempt's outcome for the attempts record.
	var result string
	if o.kind != cancelled {
		d.lastStatus, d.lastOutcome = o.status, o.desc
	}
	if o.kind == retryable && e.disabled {
		o.kind = gone
	}
	var acked *writeCall // d's batch, whose ack this worker calls once unlocked
	switch o.kind {
	case delivered:
		result = attempts.OutcomeDelivered
		e.obs.Delivered(time.Since(d.enqueued))
		acked = e.deliveredLocked(d)
		e.wakeUnreachableLocked() // reachable again: no need to wait out the backoff
		if !e.failingSince.IsZero() {
			failedFor, failed := time.Since(e.failingSince), e.failedRun
			e.failingSince, e.failedRun = time.Time{}, 0
			after = func() {
				e.log.Info("webhook endpoint delivers again", slog.Duration("failed_for", failedFor.Round(time.Millisecond)),
					slog.Int("failed_attempts", failed))
			}
		}

	case gone:
		result = attempts.OutcomeFailed
		first := !e.disabled
		e.disabled = true
		n := 0
		for _, l := range e.lanes {
			n += len(l.q)
			e.dropLocked(l, 0, func(x *delivery) error {
				e.obs.Failed(ReasonDisabled)
				return sink.Permanent(e.deliveryError(x, ErrEndpointDisabled))
			})
		}
		if first {
			after = func() {
				e.log.Error("webhook endpoint answered 410 Gone: the events it holds go to the dead-letter store, and the gateway disables it (state disabled) until it is enabled again",
					slog.String("event_id", d.ev.ID), slog.Int("undone_events", n))
			}
		}

	case permanent:
		result = attempts.OutcomeFailed
		e.obs.Failed(o.reason)
		err := e.deliveryError(d, o.err)
		e.failHeadLocked(d, sink.Permanent(err))
		after = func() { e.logFailed(d, err) }

	case retryable, cancelled:
		if o.kind == cancelled { // cannot happen: a request is cancelled only when dropped
			e.readyLocked(d)
			break
		}
		now := time.Now()
		failing := e.failureLocked(o, now)
		wait, ok := e.retryWait(d, o, now)
		if !ok {
			result = attempts.OutcomeFailed
			e.obs.Failed(ReasonRetryBudget)
			err := e.deliveryError(d, fmt.Errorf("retry budget exhausted after %d attempts over %s: last %s",
				d.attempts, now.Sub(d.first).Round(time.Millisecond), o.desc))
			e.failHeadLocked(d, sink.Permanent(err))
			after = func() {
				if failing != nil {
					failing()
				}
				e.logFailed(d, err)
			}
			break
		}
		result = attempts.OutcomeRetry
		e.obs.Retry(o.err)
		d.timerGen++
		gen := d.timerGen
		d.timer = time.AfterFunc(wait, func() { e.retryTimer(d, gen) })
		d.unreachable = o.conn
		e.mayWaitUnreachable = e.mayWaitUnreachable || o.conn
		if o.conn && wait > e.probeEvery && !e.probing && !e.closed {
			e.probing = true
			e.workers.Add(1)
			go e.probe()
		}
		attempts := d.attempts
		after = func() {
			if failing != nil {
				failing()
			}
			e.log.Debug("webhook attempt failed; retrying", slog.String("event_id", d.ev.ID),
				slog.String("aggregate_id", d.ev.AggregateID), slog.Int("attempt", attempts),
				slog.String("outcome", o.desc), slog.Duration("wait", wait))
		}
	}
	n := d.attempts
	e.mu.Unlock()
	if acked != nil {
		acked.ack(d.idx, nil)
	}
	if e.cfg.Attempts != nil && o.attempted {
		e.record(d, n, o, result)
	}
	if after != nil {
		after()
	}
}

// record tells the attempts record about attempt n of d, o, whose outcome
// is result (an attempts.Outcome*). Called without the lock; the Recorder
// never blocks.
func (e *Endpoint) record(d *delivery, n int, o outcome, result string) {
	ev := d.ev
	a := attempts.Attempt{
		Time: o.start, Sink: e.cfg.Sink, Endpoint: e.cfg.Name, Tenant: e.cfg.Tenant,
		EventID: ev.ID, EventType: ev.Type, Number: n,
		Status: o.status, Class: o.class, Outcome: result, Duration: o.dur, Answer: o.answer,
		Replay: ev.Replay(), Committed: ev.CommitTime,
		GTID: ev.Source.GTID, File: ev.Source.File, Pos: ev.Source.Pos,
	}
	if o.err != nil && result != attempts.OutcomeDelivered {
		a.Error = o.err.Error() // secrets hidden (send, classify)
	}
	e.cfg.Attempts.Record(a)
}

// failureLocked counts the retriable failure o in the endpoint's run of
// failures and returns the log line due, if any: one when the run starts
// (at its first failed attempt), then at most one per logEvery.
func (e *Endpoint) failureLocked(o outcome, now time.Time) func() {
	e.failedRun++
	switch {
	case e.failingSince.IsZero():
		e.failingSince, e.lastFailLog = now, now
		return func() {
			e.log.Warn("webhook endpoint failing; its events are retried", slog.String("outcome", o.desc))
		}
	case now.Sub(e.lastFailLog) >= e.logEvery:
		e.lastFailLog = now
		since, failed := e.failingSince, e.failedRun
		return func() {
			e.log.Warn("webhook endpoint still failing; its events are retried", slog.String("outcome", o.desc),
				slog.Duration("failing_for", now.Sub(since).Round(time.Second)), slog.Int("failed_attempts", failed))
		}
	}
	return nil
}

func (e *Endpoint) deliveryError(d *delivery, err error) *DeliveryError {
	return &DeliveryError{Attempts: d.attempts, First: d.first, Last: d.last, Status: d.lastStatus, Err: err}
}

func (e *Endpoint) logFailed(d *delivery, err *DeliveryError) {
	e.log.Warn("webhook event failed permanently; it goes to the dead-letter store",
		slog.String("event_id", d.ev.ID), slog.String("aggregate_id", d.ev.AggregateID),
		slog.String("event_type", d.ev.Type), slog.Int("attempts", err.Attempts), slog.Any("err", err.Err))
}
