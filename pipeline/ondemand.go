package pipeline

import (
	"sync"
	"time"
)

// deliveryLinger is how long a pipeline's delivery goroutine waits for the
// next transaction before it ends.
const deliveryLinger = 5 * time.Millisecond

// onDemand runs a loop on a goroutine of its own only while it has work, so
// that an idle pipeline (a gateway's quiet endpoint) keeps no goroutine
// waiting: kick, called after work was added, starts run unless it runs or
// is held; run does the work there is and returns, and the goroutine ends
// unless rest, asked under the same lock as kick, says more was added
// meanwhile. Whoever adds work calls kick after adding it, so work added
// while the goroutine ends is either seen by rest or starts a new one.
//
// With linger set, a goroutine that ran out of work waits up to linger for
// a kick before it ends: at a steady trickle (a transaction every few
// milliseconds) each one then wakes the waiting goroutine instead of
// starting a new one, whose stack would grow again on the way to the sink
// (a new goroutine per event cost the relay to stdout ~8 % of its CPU at
// 2,000 transactions a second).
type onDemand struct {
	// run does the work there is; stop ends the goroutine whatever rest
	// says (its context ended).
	run func() (stop bool)
	// rest reports whether no work is left.
	rest   func() bool
	linger time.Duration

	mu      sync.Mutex
	running bool
	held    bool // kick starts nothing until release
	// waiting: the goroutine runs and waits (up to linger) for a kick,
	// which it gets on wake.
	waiting bool
	wake    chan struct{}
	timer   *time.Timer // the linger's, made once, used by the goroutine alone
	wg      sync.WaitGroup
	// start is loop as a func value, made once: a kick starts the
	// goroutine with it, allocating nothing (a method value, or
	// WaitGroup.Go's wrapper, costs an allocation per start, and a
	// gateway's quiet endpoint starts one per event).
	start func()
}

// kick starts run unless it runs or is held; a goroutine waiting for work
// is woken instead.
func (o *onDemand) kick() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.waiting {
		o.waiting = false
		o.wake <- struct{}{} // buffered, and sent to once per wait
		return
	}
	if o.running || o.held {
		return
	}
	o.running = true
	if o.start == nil {
		o.start = o.loop
	}
	o.wg.Add(1)
	go o.start()
}

// release lets kick start run, and kicks.
func (o *onDemand) release() {
	o.mu.Lock()
	o.held = false
	o.mu.Unlock()
	o.kick()
}

func (o *onDemand) loop() {
	defer o.wg.Done()
	for {
		stop := o.run()
		o.mu.Lock()
		if !stop && o.linger > 0 && o.rest() && o.await() {
			o.mu.Unlock()
			continue // kicked: run again
		}
		if stop || o.rest() {
			o.running = false
			o.mu.Unlock()
			return
		}
		o.mu.Unlock()
	}
}

// await waits, o.mu held (and held again on return), up to linger for a
// kick; it reports whether one came.
func (o *onDemand) await() bool {
	if o.wake == nil {
		o.wake = make(chan struct{}, 1)
		o.timer = time.NewTimer(o.linger)
	} else {
		o.timer.Reset(o.linger)
	}
	o.waiting = true
	o.mu.Unlock()
	kicked := false
	select {
	case <-o.wake:
		kicked = true
	case <-o.timer.C:
	}
	o.timer.Stop()
	o.mu.Lock()
	if !kicked && !o.waiting {
		<-o.wake // kicked as the linger ended: take the kick
		kicked = true
	}
	o.waiting = false
	return kicked
}

// wait waits for the goroutine, if one runs: call it once nothing kicks
// (a goroutine waiting for a kick ends within linger).
func (o *onDemand) wait() { o.wg.Wait() }
