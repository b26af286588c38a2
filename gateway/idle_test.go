package gateway

import (
	"context"
	"runtime"
	"testing"
	"time"
)

// An idle endpoint costs the gateway one goroutine, its pipeline's (which
// waits on its tap for the shared stream's next transaction), and nothing
// else: no goroutine of its tap, none to deliver or to save while nothing
// is in flight. Measured after every endpoint delivered events (so each
// has run its delivery and its saves), with 10 and with 1,000 endpoints.
func TestIdleEndpointCostsOnlyItsPipelinesGoroutine(t *testing.T) {
	idle := func(n int) int {
		f := newFixture(t, n)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		_, done := f.run(ctx)
		commitMany(f.b, 30) // every tenant's endpoints get events
		f.waitAll()
		g := settledGoroutines(t, 5*time.Second)
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		return g
	}
	small, large := idle(10), idle(1000)
	per := float64(large-small) / 990
	t.Logf("idle goroutines: %d with 10 endpoints, %d with 1,000: %.3f per endpoint", small, large, per)
	if per > 1.01 {
		t.Fatalf("an idle endpoint costs %.3f goroutines, want 1 (its pipeline's)", per)
	}
}

// settledGoroutines returns the goroutine count once it has not changed for
// half a second (or the least seen within limit).
func settledGoroutines(t *testing.T, limit time.Duration) int {
	t.Helper()
	least, last, since := runtime.NumGoroutine(), -1, time.Now()
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		n := runtime.NumGoroutine()
		least = min(least, n)
		if n != last {
			last, since = n, time.Now()
		} else if time.Since(since) > 500*time.Millisecond {
			return n
		}
	}
	t.Logf("goroutines did not settle within %s", limit)
	return least
}
