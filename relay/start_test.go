package relay_test

import (
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/relaytest"
)

// run is a relay a test started with startRelay (relaytest.Start, the one
// helper every package's tests start relays with).
type run struct{ *relaytest.Run }

// parseConfig is config.Parse of yaml; an error fails the test.
func parseConfig(t testing.TB, yaml string) *config.Config {
	t.Helper()
	return relaytest.Parse(t, yaml)
}

// startRelay runs relay.New(cfg, opts).Run in the background until stop
// or the end of the test.
func startRelay(t testing.TB, cfg *config.Config, opts relay.Options) *run {
	t.Helper()
	return &run{relaytest.Start(t, cfg, opts)}
}

// stop is relaytest.Run.Stop.
func (r *run) stop(t testing.TB) error { t.Helper(); return r.Run.Stop(t) }

// exited is relaytest.Run.Exited.
func (r *run) exited(within time.Duration) (err error, ok bool) { return r.Run.Exited(within) }
