package pipeline

import "sync"

// onDemand runs a loop on a goroutine of its own only while it has work, so
// that an idle pipeline (a gateway's quiet endpoint) keeps no goroutine
// waiting: kick, called after work was added, starts run unless it runs or
// is held; run does the work there is and returns, and the goroutine ends
// unless rest, asked under the same lock as kick, says more was added
// meanwhile. Whoever adds work calls kick after adding it, so work added
// while the goroutine ends is either seen by rest or starts a new one.
type onDemand struct {
	// run does the work there is; stop ends the goroutine whatever rest
	// says (its context ended).
	run func() (stop bool)
	// rest reports whether no work is left.
	rest func() bool

	mu      sync.Mutex
	running bool
	held    bool // kick starts nothing until release
	wg      sync.WaitGroup
	// start is loop as a func value, made once: a kick starts the
	// goroutine with it, allocating nothing (a method value, or
	// WaitGroup.Go's wrapper, costs an allocation per start, and a
	// gateway's quiet endpoint starts one per event).
	start func()
}

// kick starts run unless it runs or is held.
func (o *onDemand) kick() {
	o.mu.Lock()
	defer o.mu.Unlock()
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

// here does what kick does, but runs run on the calling goroutine (and
// returns when it is done) instead of starting one, unless run runs already
// or is held (then it does nothing: the running loop sees the new work).
func (o *onDemand) here() {
	o.mu.Lock()
	if o.running || o.held {
		o.mu.Unlock()
		return
	}
	o.running = true
	o.wg.Add(1)
	o.mu.Unlock()
	o.loop()
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
		if stop || o.rest() {
			o.running = false
			o.mu.Unlock()
			return
		}
		o.mu.Unlock()
	}
}

// wait waits for the goroutine, if one runs: call it once nothing kicks.
func (o *onDemand) wait() { o.wg.Wait() }
