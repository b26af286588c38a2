// Package relaytest starts relays for tests, the one way every package's
// tests do: a test says only what differs (its config, and in
// relay.Options the stdout, logger or registry), and shares how a relay is
// started, stopped and waited for.
//
// A Run is used from the test's goroutine; Stop may be called more than
// once (every call returns the first's answer). Every relay has stopped
// when its test's cleanups that were registered before Start run (its
// t.TempDir among them), or the test has failed naming the goroutines that
// kept it running.
package relaytest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/relay"
)

// StopWithin is how long a relay may take to return once its context has
// ended, before the test fails: a guard against a hang, not a claim about
// how fast a relay stops.
const StopWithin = 30 * time.Second

// labelKey is the goroutine label (runtime/pprof) every goroutine of a
// relay started here carries, with its Run's name: the goroutines a relay
// started inherit it, so a relay that does not stop is shown by its own
// goroutines, not every goroutine of the test binary.
const labelKey = "relaytest"

// started numbers the relays of the process, for their labels.
var started atomic.Int64

// Run is a relay a test started with Start.
type Run struct {
	cfg    *config.Config
	cancel context.CancelFunc
	name   string        // the value of its goroutines' labelKey label
	ended  chan struct{} // closed when Run has returned runErr
	runErr error
	once   sync.Once
	err    error
}

// Parse is config.Parse of yaml; an error fails the test.
func Parse(t testing.TB, yaml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Stderr is a logger to the test process's stderr of level and above, for
// a relay whose errors a test wants to see.
func Stderr(level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// Start runs relay.New(cfg, opts).Run in the background until Stop or the
// end of the test. At the end of the test it is cancelled and waited for
// (StopWithin at most: then the test fails, listing the relay's goroutines),
// so that nothing it does outlives the test: a last checkpoint save into a
// t.TempDir that the test's cleanup removes next, say. Run's error is not
// judged then: StopAtEnd does that.
func Start(t testing.TB, cfg *config.Config, opts relay.Options) *Run {
	t.Helper()
	return start(t, cfg, relay.New(cfg, opts).Run, StopWithin)
}

// start runs run in the background as Start does, waiting at most within
// at the end of the test.
func start(t testing.TB, cfg *config.Config, run func(context.Context) error, within time.Duration) *Run {
	ctx, cancel := context.WithCancel(context.Background())
	r := &Run{cfg: cfg, cancel: cancel, ended: make(chan struct{}),
		name: fmt.Sprintf("%s#%d", t.Name(), started.Add(1))}
	go pprof.Do(ctx, pprof.Labels(labelKey, r.name), func(ctx context.Context) {
		defer close(r.ended)
		r.runErr = run(ctx)
	})
	t.Cleanup(func() {
		r.cancel()
		if !r.wait(within) {
			t.Errorf("the relay did not stop within %v of the test's end; its goroutines:\n%s", within, r.goroutines())
		}
	})
	return r
}

// Config is the relay's configuration.
func (r *Run) Config() *config.Config { return r.cfg }

// Stop cancels the relay (as SIGTERM does), waits for Run (StopWithin at
// most: then the test fails, listing the relay's goroutines) and returns
// its error, nil for a clean stop. Every call returns the first's answer.
func (r *Run) Stop(t testing.TB) error {
	t.Helper()
	r.once.Do(func() {
		r.cancel()
		if !r.wait(StopWithin) {
			t.Fatalf("the relay did not stop within %v of its context's end; its goroutines:\n%s", StopWithin, r.goroutines())
		}
		r.err = r.runErr
		if errors.Is(r.err, context.Canceled) {
			r.err = nil
		}
	})
	return r.err
}

// StopClean is Stop, failing the test (without stopping it) when Run
// returned an error.
func (r *Run) StopClean(t testing.TB) {
	t.Helper()
	if err := r.Stop(t); err != nil {
		t.Errorf("relay: %v", err)
	}
}

// StopAtEnd stops the relay when the test ends, as StopClean.
func (r *Run) StopAtEnd(t testing.TB) *Run {
	t.Cleanup(func() { r.StopClean(t) })
	return r
}

// Exited waits up to within for the relay to stop by itself (0: does not
// wait); ok is false when it still runs. err is Run's error, which Stop
// then returns too.
func (r *Run) Exited(within time.Duration) (err error, ok bool) {
	if !r.wait(within) {
		return nil, false
	}
	r.once.Do(func() { r.err = r.runErr })
	return r.runErr, true
}

// wait reports whether Run returned within d (0: has returned).
func (r *Run) wait(d time.Duration) bool {
	if d <= 0 {
		select {
		case <-r.ended:
			return true
		default:
			return false
		}
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-r.ended:
		return true
	case <-timer.C:
		return false
	}
}

// goroutines returns the stacks of the goroutines that carry r's label:
// the relay's own, and those its libraries started for it.
func (r *Run) goroutines() string {
	var all bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&all, 1); err != nil {
		return fmt.Sprintf("(goroutine profile: %v)", err)
	}
	label := fmt.Sprintf("%q:%q", labelKey, r.name)
	var out strings.Builder
	for _, g := range strings.Split(all.String(), "\n\n") {
		if strings.Contains(g, label) {
			out.WriteString(g)
			out.WriteString("\n\n")
		}
	}
	if out.Len() == 0 {
		return "(none carries its label)"
	}
	return out.String()
}
