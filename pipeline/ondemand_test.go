package pipeline

import (
	"bytes"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/eventually"
)

// goroutineID is the calling goroutine's number, from its stack's header.
func goroutineID() string {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	return string(bytes.Fields(b)[1])
}

// With a linger, work kicked after the goroutine ran out of it is done by
// the same goroutine, woken, not by a new one: at a trickle, no goroutine
// (and no stack growing again) per transaction.
func TestAKickWakesTheLingeringGoroutineInsteadOfStartingOne(t *testing.T) {
	var work, stop atomic.Int64
	ran := make(chan string, 1)
	o := &onDemand{linger: time.Hour, rest: func() bool { return work.Load() == 0 }}
	o.run = func() bool {
		work.Store(0)
		ran <- goroutineID()
		return stop.Load() == 1
	}
	ids := map[string]bool{}
	for range 5 {
		work.Add(1)
		o.kick()
		ids[<-ran] = true
		// Kick again only once the goroutine ran out of work: it waits
		// for a kick (or, without a linger, has ended).
		eventually.Within(t, time.Minute, "the goroutine to run out of work", func() bool {
			o.mu.Lock()
			defer o.mu.Unlock()
			return o.waiting || !o.running
		})
	}
	if len(ids) != 1 {
		t.Errorf("5 kicks ran on %d goroutines, want 1 woken each time", len(ids))
	}
	stop.Store(1)
	work.Add(1)
	o.kick()
	<-ran
	o.wait() // a run that says stop ends the goroutine at once, linger or not
}

// Without a kick, the lingering goroutine ends once the linger is over.
func TestTheLingeringGoroutineEndsWithoutAKick(t *testing.T) {
	ran := make(chan struct{}, 1)
	o := &onDemand{linger: time.Millisecond, rest: func() bool { return true }, run: func() bool { ran <- struct{}{}; return false }}
	o.kick()
	<-ran
	o.wait()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.running || o.waiting {
		t.Errorf("running %v, waiting %v after the goroutine ended", o.running, o.waiting)
	}
}
