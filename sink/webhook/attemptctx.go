package webhook

import (
	"context"
	"sync"
	"time"
)

// attemptCtx is the context of a worker's attempts and the timer of their
// timeout, reused from attempt to attempt: a context.WithDeadline per
// attempt costs a context, a timer, a channel and, once the transport
// derives its own context from it, a map of children, each allocated per
// delivery. The context lives until an attempt is cancelled (it timed
// out, or its delivery was dropped: abort), and the next attempt then gets
// a new one (renew). An endpoint keeps the idle ones of its workers
// (Endpoint.actxs), at most max_concurrency.
//
// A worker runs one attempt at a time with it (arm, send, disarm); abort
// may come from any goroutine.
type attemptCtx struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	timer  *time.Timer

	mu sync.Mutex
	// deadline is when the armed attempt times out; zero while none is
	// armed. The timer's function checks it: a timer that fires for an
	// attempt that has ended (Stop came too late) cancels nothing.
	deadline time.Time
}

// renew gives a a live context if its last one was cancelled.
func (a *attemptCtx) renew() {
	if a.ctx == nil || a.ctx.Err() != nil {
		a.ctx, a.cancel = context.WithCancelCause(context.Background())
	}
}

// arm starts an attempt that times out at start+timeout and returns its
// context, which ends with cause context.DeadlineExceeded then, or
// context.Canceled on abort.
func (a *attemptCtx) arm(start time.Time, timeout time.Duration) context.Context {
	a.renew()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.deadline = start.Add(timeout)
	if a.timer == nil {
		a.timer = time.AfterFunc(timeout, a.expire)
	} else {
		a.timer.Reset(timeout)
	}
	return a.ctx
}

// disarm ends the attempt armed: its timeout no longer applies.
func (a *attemptCtx) disarm() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.deadline = time.Time{}
	a.timer.Stop()
}

// expire cancels the attempt armed if its deadline has passed.
func (a *attemptCtx) expire() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.deadline.IsZero() || time.Now().Before(a.deadline) {
		return // the attempt it was set for has ended
	}
	a.deadline = time.Time{}
	a.cancel(context.DeadlineExceeded)
}

// abort cancels the attempt running (its delivery was dropped).
func (a *attemptCtx) abort() { a.cancel(context.Canceled) }

// takeAttemptCtx returns an idle attempt context of e's, or a new one.
func (e *Endpoint) takeAttemptCtx() *attemptCtx {
	e.mu.Lock()
	defer e.mu.Unlock()
	if n := len(e.actxs); n > 0 {
		a := e.actxs[n-1]
		e.actxs[n-1] = nil
		e.actxs = e.actxs[:n-1]
		return a
	}
	return &attemptCtx{}
}

// putAttemptCtx keeps a, idle, for e's next worker.
func (e *Endpoint) putAttemptCtx(a *attemptCtx) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.actxs = append(e.actxs, a)
}
