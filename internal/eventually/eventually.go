// Package eventually waits, in tests, for a condition that something else
// makes true: a relay's delivery, a checkpoint file, a metric. It is the one
// polling loop of the tests; the limit only guards against a hang, and no
// test claims anything about how soon the condition holds.
package eventually

import (
	"testing"
	"time"
)

// maxPoll is the longest wait between two checks of a condition.
const maxPoll = 50 * time.Millisecond

// Within checks cond until it holds, first after a millisecond and then
// at most every 50 ms; when limit passes first, it runs each onFail (to
// show a log; nil ones are skipped) and fails t, naming what it waited for.
// cond runs on the calling goroutine.
func Within(t testing.TB, limit time.Duration, what string, cond func() bool, onFail ...func()) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for poll := time.Millisecond; !cond(); poll = min(2*poll, maxPoll) {
		if time.Now().After(deadline) {
			for _, f := range onFail {
				if f != nil {
					f()
				}
			}
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(poll)
	}
}
