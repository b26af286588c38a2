package relay

import (
	"context"
	"fmt"
	"slices"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/gateway/scaled"
)

// The scaled-out gateway (package gateway/scaled) is handed finished
// values: the relay starts its parts (GatewayParts) and is its replay
// Targets.
var _ scaled.Targets = (*Relay)(nil)

// GatewayParts starts what a replica of the scaled-out gateway serving the
// webhook sink named webhook runs with (scaled.Parts): it registers the
// relay's metrics and, when http.listen is set, serves them as Run does;
// opens the dead letters and the attempts record; and builds the sink's
// endpoints' parameters, reporting to them. stop closes them, the attempts
// record first: call it once scaled.Run returned.
func (r *Relay) GatewayParts(ctx context.Context, webhook string) (p scaled.Parts, stop func(), err error) {
	i := slices.IndexFunc(r.cfg.Sinks, func(s config.Sink) bool { return s.Name == webhook })
	if i < 0 {
		return p, nil, fmt.Errorf("gateway: no webhook sink named %q in the configuration", webhook)
	}
	m, stopMetrics, err := r.startMetrics()
	if err != nil {
		return p, nil, err
	}
	r.metrics = m
	dl, closeDL, err := r.openDeadLetters(ctx)
	if err != nil {
		stopMetrics()
		return p, nil, err
	}
	closeAttempts, err := r.openAttempts(ctx)
	if err != nil {
		closeDL()
		stopMetrics()
		return p, nil, err
	}
	return scaled.Parts{Logger: r.log, Retry: r.retry, Health: r.health, Metrics: m, Gateways: r.gateways,
			Endpoints: r.fanOutParams(r.cfg.Sinks[i], "", nil, nil), DeadLetters: dl, Targets: r},
		func() { closeAttempts(); closeDL(); stopMetrics() }, nil
}
