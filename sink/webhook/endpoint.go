package webhook

// This file owns the Endpoint itself: what it is made of and how it is
// made (NewEndpoint, from a checked EndpointConfig), connected and closed,
// and the errors its events fail with (ErrEndpointDisabled,
// ErrPredecessorAbandoned, DeliveryError). The delivery: submit.go takes
// the events in, lanes.go keeps each aggregate's order, attempt.go runs
// the workers and settles each attempt (the request itself: send.go),
// probe.go notices an endpoint that comes back.

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

	"github.com/outbox-relay/outbox-relay/internal/redact"
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
