package gateway

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/eventually"
)

// An idle endpoint costs the gateway one goroutine, its pipeline's (which
// waits on its tap for the shared stream's next transaction), and nothing
// else: no goroutine of its tap, none to deliver or to save while nothing
// is in flight. Measured after every endpoint delivered events (so each
// has run its delivery and its saves), with 10 and with 1,000 endpoints.
// The goroutines that delivered and saved end once their work is done,
// which on a loaded machine can be seconds after the last delivery (a
// thousand saves wait their turn): the count with 1,000 is waited for
// until it is within the bound, and the wait's limit only guards against
// goroutines that never end.
func TestIdleEndpointCostsOnlyItsPipelinesGoroutine(t *testing.T) {
	run := func(n int, measure func() int) int {
		f := newFixture(t, n)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		_, done := f.run(ctx)
		commitMany(f.b, 30) // every tenant's endpoints get events
		f.waitAll()
		g := measure()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		return g
	}
	small := run(10, func() int { return settledGoroutines(t, 5*time.Second) })
	const endpoints = 1000
	per := func(large int) float64 { return float64(large-small) / (endpoints - 10) }
	large := run(endpoints, func() int {
		last := 0
		eventually.Within(t, time.Minute, "the goroutines of 1,000 idle endpoints to come down to one each", func() bool {
			last = runtime.NumGoroutine()
			return per(last) <= 1.01
		}, func() {
			t.Logf("an idle endpoint costs %.3f goroutines, want 1 (its pipeline's): %d with 10 endpoints, %d with 1,000", per(last), small, last)
		})
		return last
	})
	t.Logf("idle goroutines: %d with 10 endpoints, %d with 1,000: %.3f per endpoint", small, large, per(large))
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
