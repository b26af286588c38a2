package webhook

import (
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// What the kind keeps of an endpoint while it is idle. The gateway holds
// an idle endpoint as a compact record and builds its sink (an *Endpoint)
// with gateway.Endpoint.Open when an event wakes it, closing that sink
// once everything it held is acknowledged and saved. What must survive a
// sink lives here, outside it, owned by the kind:
//
//   - the row's columns (rowColumns, in a tableRow), from which Open
//     decodes its config again, or the configuration's EndpointConfig of
//     a static endpoint;
//   - carried: the rate limiter (a woken endpoint gets no fresh token),
//     the run of failed attempts behind its throttled log lines, and its
//     hold on the shared transport; nil until the endpoint first wakes.
//
// Its health (failing since, a 410) is the gateway's (gateway.Health,
// by key), which no sink owns, so disable_after counts across sinks. The
// transport of its egress policy and the gateway's slots are shared by
// every endpoint and never closed by one.

// carried is what the successive sinks of one endpoint hand on to each
// other: while it wakes and goes idle, and when its row changes. Safe for
// concurrent use; its methods accept a nil receiver (an endpoint made by
// NewEndpoint, which hands on nothing).
type carried struct {
	mu      sync.Mutex
	limiter *rate.Limiter
	// tr is the shared transport of the endpoint's egress policy, held
	// for as long as the endpoint exists: a sink that closes lets go of
	// nothing shared, so the connections kept alive for the endpoint's
	// host survive its going idle (until idleConnTimeout).
	tr *http.Transport
	// The run of failed attempts (Endpoint.failureLocked).
	failingSince, lastFailLog time.Time
	failedRun                 int
}

// limiterFor returns the endpoint's limiter at perSecond attempts a
// second (nil: unlimited): the same one each time, with its tokens, its
// limit set anew when the row's has changed.
func (c *carried) limiterFor(perSecond float64) *rate.Limiter {
	if perSecond <= 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.limiter == nil {
		c.limiter = rate.NewLimiter(rate.Limit(perSecond), 1)
	} else if c.limiter.Limit() != rate.Limit(perSecond) {
		c.limiter.SetLimit(rate.Limit(perSecond))
	}
	return c.limiter
}

// transport returns the transport take returns and the function a sink
// calls once closed: without c, take's; with c, the transport c took at
// the endpoint's first sink, kept, and a release that lets go of nothing.
func (c *carried) transport(take func() (*http.Transport, func())) (*http.Transport, func()) {
	if c == nil {
		return take()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tr == nil {
		c.tr, _ = take()
	}
	return c.tr, func() {}
}

// handTo gives e, a new sink, the run of failures its predecessors left.
func (c *carried) handTo(e *Endpoint) {
	if c == nil {
		return
	}
	c.mu.Lock()
	e.failingSince, e.lastFailLog, e.failedRun = c.failingSince, c.lastFailLog, c.failedRun
	c.mu.Unlock()
}

// takeFrom keeps the run of failures of e, a sink that closes (under e.mu).
func (c *carried) takeFrom(e *Endpoint) {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.failingSince, c.lastFailLog, c.failedRun = e.failingSince, e.lastFailLog, e.failedRun
	c.mu.Unlock()
}

// tableRow is what the kind keeps of an enabled row of the endpoints
// table: its columns as last applied and, once its endpoint has woken,
// what its sinks hand on. An UPDATE that keeps the endpoint sets its
// columns (changed), so the Open handed to the gateway decodes the row as
// it is when the endpoint wakes. Safe for concurrent use: the gateway may
// call Open outside the hub's lock.
type tableRow struct {
	mu    sync.Mutex
	cols  rowColumns
	carry *carried
}

// columns returns the row's columns.
func (r *tableRow) columns() rowColumns {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cols
}

// open returns the row's columns and what its sinks hand on, made at its
// first wake.
func (r *tableRow) open() (rowColumns, *carried) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.carry == nil {
		r.carry = &carried{}
	}
	return r.cols, r.carry
}

// changed sets the row's columns to cols and returns it (r nil: a new row).
func (r *tableRow) changed(cols rowColumns) *tableRow {
	if r == nil {
		return &tableRow{cols: cols}
	}
	r.mu.Lock()
	r.cols = cols
	r.mu.Unlock()
	return r
}
