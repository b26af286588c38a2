package webhook

// This file owns the workers and one attempt: a worker takes due lane heads
// (next) and attempts each (attempt: the rate limiter, the gateway's slots,
// the request with its timeout); settle applies the outcome (delivered, 410
// Gone, permanent, retried after a timer); record writes the attempts
// record; failureLocked and logFailed are the endpoint's log lines.

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/outbox-relay/outbox-relay/attempts"
	"github.com/outbox-relay/outbox-relay/sink"
)

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

// lingerers is how many of an endpoint's workers linger at once. At a
// steady rate an event often comes while the last one's request is still
// under way: with one lingering worker, busy then, the endpoint started a
// worker for it, which grew its stack on its way into the HTTP client and
// ended again (at 2,000 events a second to one endpoint, 1,000 goroutines
// started a second). With two, the second is woken instead.
const lingerers = 2

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
// false once w is to quit. At most lingerers workers linger at a time: on
// a backlog the others end when nothing is due, as before, instead of each
// being woken in turn.
func (e *Endpoint) lingerLocked(w *worker) bool {
	if w.quit || !w.lingers || len(e.idle) >= lingerers {
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
