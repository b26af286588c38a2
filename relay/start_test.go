package relay_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/relay"
)

// run is a relay a test started with startRelay: tests say only what
// differs (the config; in relay.Options the stdout, logger or registry)
// and share how it is started, stopped and waited for.
type run struct {
	cfg    *config.Config
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// parseConfig is config.Parse of yaml; an error fails the test.
func parseConfig(t testing.TB, yaml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// startRelay runs relay.New(cfg, opts).Run in the background until stop
// or the end of the test.
func startRelay(t testing.TB, cfg *config.Config, opts relay.Options) *run {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &run{cfg: cfg, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- relay.New(cfg, opts).Run(ctx) }()
	t.Cleanup(cancel)
	return r
}

// stop cancels the relay (as SIGTERM does), waits for Run (30 s at most:
// then the test fails) and returns its error, nil for a clean stop. Every
// call returns the first's answer.
func (r *run) stop(t testing.TB) error {
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

// exited waits up to within for the relay to stop by itself; ok is false
// when it still runs. err is Run's error, which stop then returns too.
func (r *run) exited(within time.Duration) (err error, ok bool) {
	select {
	case err = <-r.done:
		r.once.Do(func() { r.err = err })
		return err, true
	case <-time.After(within):
		return nil, false
	}
}
