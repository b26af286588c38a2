package relaytest

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeT collects a test's cleanups and failures, to run and read them.
type fakeT struct {
	testing.TB
	cleanups []func()
	errors   []string
}

func (f *fakeT) Helper()           {}
func (f *fakeT) Name() string      { return "TestFake" }
func (f *fakeT) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }
func (f *fakeT) Errorf(format string, args ...any) {
	f.errors = append(f.errors, strings.TrimSpace(fmt.Sprintf(format, args...)))
}

// end runs the cleanups, last registered first, as testing does.
func (f *fakeT) end() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

// The end of the test waits for a relay that takes a while to stop after
// its context ends (its last checkpoint save, say): what it does before
// returning is done when the cleanups registered before it run.
func TestTheEndOfTheTestWaitsForTheRelay(t *testing.T) {
	ft := &fakeT{}
	var saved atomic.Bool
	start(ft, nil, func(ctx context.Context) error {
		<-ctx.Done()
		time.Sleep(20 * time.Millisecond) // the last save
		saved.Store(true)
		return ctx.Err()
	}, time.Minute)
	ft.end()
	if !saved.Load() {
		t.Error("the test's cleanup returned before the relay had stopped")
	}
	if len(ft.errors) > 0 {
		t.Errorf("a relay that stopped failed the test: %v", ft.errors)
	}
}

// A relay that does not stop fails the test (rather than hanging it), and
// the failure shows the relay's own goroutines, those it started among
// them, and not the rest of the process's.
func TestARelayThatDoesNotStopFailsNamingItsGoroutines(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	go elsewhere(release)
	ft := &fakeT{}
	start(ft, nil, func(ctx context.Context) error {
		go stuckChild(release)
		stuckRun(release)
		return nil
	}, 50*time.Millisecond)
	ft.end()
	if len(ft.errors) != 1 {
		t.Fatalf("failures %q, want one", ft.errors)
	}
	msg := ft.errors[0]
	for _, want := range []string{"did not stop within 50ms", "relaytest.stuckRun", "relaytest.stuckChild"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the failure does not name %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "relaytest.elsewhere") {
		t.Errorf("the failure lists a goroutine that is not the relay's:\n%s", msg)
	}
}

func stuckRun(release <-chan struct{})   { <-release }
func stuckChild(release <-chan struct{}) { <-release }
func elsewhere(release <-chan struct{})  { <-release }
