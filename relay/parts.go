package relay

import (
	"context"
	"log/slog"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/deadletter"
	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/metrics"
	"github.com/outbox-relay/outbox-relay/retry"
)

// Parts are what a relay shares with a run loop of another package (the
// scaled-out gateway, package gateway/scaled) so that it runs as Run's
// own: its metrics, served as Run serves them, its webhook endpoints'
// health, its one retry policy, its logger and its dead letters.
type Parts struct {
	Logger   *slog.Logger
	Retry    retry.Policy
	Health   *gateway.Health
	Metrics  *metrics.Metrics
	Gateways *gateway.Metrics // the fan-out sinks' metrics, on Metrics
	r        *Relay
}

// Config is the relay's configuration.
func (r *Relay) Config() *config.Config { return r.cfg }

// Start registers the relay's metrics and, when http.listen is set, serves
// them as Run does, until stop is called; Parts hold them.
func (r *Relay) Start() (p *Parts, stop func(), err error) {
	m, stop, err := r.startMetrics()
	if err != nil {
		return nil, nil, err
	}
	r.metrics = m
	return &Parts{Logger: r.log, Retry: r.retry, Health: r.health, Metrics: m, Gateways: r.gateways, r: r}, stop, nil
}

// FanOutParams are what a fan-out kind builds the endpoints of sink s
// with, as the relay builds them (suffix and slots: gateway.FanOutParams).
func (p *Parts) FanOutParams(s config.Sink, suffix string, store checkpoint.Store, slots chan struct{}) gateway.FanOutParams {
	return p.r.fanOutParams(s, suffix, store, slots)
}

// OpenAttempts opens the attempts record (attempts.enabled), which the
// endpoints FanOutParams builds report to, with its metrics; close stores
// what is queued. Call it once the replica may deliver, and close it after
// its endpoints stopped.
func (p *Parts) OpenAttempts(ctx context.Context) (close func(), err error) {
	return p.r.openAttempts(ctx)
}

// OpenDeadLetters opens the configured dead-letter store for writing (nil
// when none is configured).
func (p *Parts) OpenDeadLetters(ctx context.Context) (deadletter.Putter, func(), error) {
	return p.r.openDeadLetters(ctx)
}
