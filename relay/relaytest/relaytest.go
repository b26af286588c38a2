// Package relaytest starts relays for tests, the one way every package's
// tests do: a test says only what differs (its config, and in
// relay.Options the stdout, logger or registry), and shares how a relay is
// started, stopped and waited for.
//
// A Run is used from the test's goroutine; Stop may be called more than
// once (every call returns the first's answer).
package relaytest

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/relay"
)

// Run is a relay a test started with Start.
type Run struct {
	cfg    *config.Config
	cancel context.CancelFunc
	done   chan error
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
// end of the test (which cancels it without waiting).
func Start(t testing.TB, cfg *config.Config, opts relay.Options) *Run {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &Run{cfg: cfg, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- relay.New(cfg, opts).Run(ctx) }()
	t.Cleanup(cancel)
	return r
}

// Config is the relay's configuration.
func (r *Run) Config() *config.Config { return r.cfg }

// Stop cancels the relay (as SIGTERM does), waits for Run (30 s at most:
// then the test fails) and returns its error, nil for a clean stop. Every
// call returns the first's answer.
func (r *Run) Stop(t testing.TB) error {
	t.Helper()
	r.once.Do(func() {
		r.cancel()
		select {
		case r.err = <-r.done:
		case <-time.After(30 * time.Second):
			t.Fatal("the relay did not stop within 30s of its context's end")
		}
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
	if within <= 0 {
		select {
		case err = <-r.done:
		default:
			return nil, false
		}
	} else {
		select {
		case err = <-r.done:
		case <-time.After(within):
			return nil, false
		}
	}
	r.once.Do(func() { r.err = err })
	return err, true
}
