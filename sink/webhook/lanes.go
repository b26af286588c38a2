package webhook

// This file owns the aggregates' lanes: a lane is the FIFO of one
// aggregate's undone events, only its head attempted. Readying a head for
// the workers, finishing an event (its ack, called without the lock),
// moving a lane on, holding it behind a head that failed for good until its
// ack returned, and dropping what is left.

import "time"

// lane is the FIFO of one aggregate's undone events; only its head is ever
// attempted.
type lane struct {
	key string
	q   []*delivery
	// held: the former head failed permanently and its ack has not
	// returned; the next event waits for the pipeline's decision.
	held bool
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
