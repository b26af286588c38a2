package relay

import (
	"context"
	"fmt"
	"slices"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/gateway/scaled"
)

// The scaled-out gateway (package gateway/scaled) is handed finished
// values: the relay starts its parts (gatewayParts) and is its replay
// Targets.
var _ scaled.Targets = (*Relay)(nil)

// RunGateway runs one replica of the scaled-out gateway (`outbox-relay
// gateway`, scaled.Run) until ctx ends, as the relay's own run loop, in
// named steps: kg is checked against the configuration (scaled.Check),
// then the parts the replica runs with are started (gatewayParts), the
// replica runs on them, and they are stopped once it returned.
func (r *Relay) RunGateway(ctx context.Context, kg scaled.Config) error {
	if err := scaled.Check(r.cfg, &kg); err != nil {
		return err
	}
	parts, stop, err := r.gatewayParts(ctx, kg.Webhook)
	if err != nil {
		return err
	}
	defer stop()
	return scaled.Run(ctx, r.cfg, kg, parts)
}

// gatewayParts starts what a replica of the scaled-out gateway serving the
// webhook sink named webhook runs with (scaled.Parts): it registers the
// relay's metrics and, when http.listen is set, serves them as Run does;
// opens the dead letters and the attempts record; and builds the sink's
// endpoints' parameters, reporting to them. stop closes them, the attempts
// record first: call it once scaled.Run returned.
func (r *Relay) gatewayParts(ctx context.Context, webhook string) (p scaled.Parts, stop func(), err error) {
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
