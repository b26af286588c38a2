package eventually_test

import (
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/eventually"
)

// fakeT records a failure instead of ending the test.
type fakeT struct {
	testing.TB
	failed string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = format
	panic(f)
}

// A condition that becomes true ends the wait without a failure; one that
// never does fails, naming what was awaited, after running onFail.
func TestWithin(t *testing.T) {
	n := 0
	eventually.Within(t, time.Minute, "the third check", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Fatalf("checked %d times, want 3", n)
	}

	f := &fakeT{TB: t}
	shown := false
	func() {
		defer func() {
			if r := recover(); r != f {
				panic(r)
			}
		}()
		eventually.Within(f, 10*time.Millisecond, "nothing", func() bool { return false }, nil, func() { shown = true })
	}()
	if !strings.Contains(f.failed, "waiting for") || !shown {
		t.Fatalf("a condition never true: failure %q, onFail run %v", f.failed, shown)
	}
}
