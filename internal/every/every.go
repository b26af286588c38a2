// Package every runs a function on a period until told to stop: the one
// ticker loop of the relay's background work (saves, syncs, sweeps,
// probes, commits). Tick holds no state of its own beyond its ticker,
// stopped when it returns.
package every

import "time"

// Tick calls f every d, the first time d after it is called, until done
// is closed or f returns false. It returns then, on the caller's goroutine:
// f is never called after done is closed and seen (a tick and done at once
// may be taken in either order, as a select takes them).
func Tick(done <-chan struct{}, d time.Duration, f func() bool) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		if !f() {
			return
		}
	}
}
