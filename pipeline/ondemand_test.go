package pipeline

import (
	"sync/atomic"
	"testing"
)

// here runs the loop on the caller's goroutine when nothing runs it, and
// leaves the work to the running loop (or to release) otherwise.
func TestOnDemandHere(t *testing.T) {
	cases := []struct {
		name    string
		running bool
		held    bool
		wantRan bool
	}{
		{name: "an idle loop runs on the calling goroutine", wantRan: true},
		{name: "a running loop is left to see the work", running: true},
		{name: "a held loop waits for release", held: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var work atomic.Int64
			work.Store(1)
			var ran int
			o := &onDemand{running: c.running, held: c.held,
				rest: func() bool { return work.Load() == 0 },
				run: func() bool {
					ran++ // unsynchronized: the race detector fails a run on another goroutine
					work.Store(0)
					return false
				}}
			o.here()
			if got := ran == 1; got != c.wantRan {
				t.Fatalf("ran %d times on the calling goroutine, want ran=%v", ran, c.wantRan)
			}
			if c.wantRan {
				o.mu.Lock()
				running := o.running
				o.mu.Unlock()
				if running {
					t.Fatal("the loop still counts as running after here returned")
				}
				o.wait() // returns: here's run is done
			}
		})
	}
}
