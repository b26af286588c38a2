package relay

import (
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/gateway/scaled"
)

// The scaled-out gateway (package gateway/scaled) runs as the relay's own
// run loop: a Relay is its scaled.Assembly, and Start assembles the parts
// it uses, once.
var _ scaled.Assembly = (*Relay)(nil)

// Config is the relay's configuration.
func (r *Relay) Config() *config.Config { return r.cfg }

// Start registers the relay's metrics and, when http.listen is set, serves
// them as Run does, until stop is called; the Parts report to them: the
// relay's logger, retry policy, webhook health, metrics, and how it builds
// a fan-out sink's endpoints, opens the attempts record and the dead
// letters.
func (r *Relay) Start() (p *scaled.Parts, stop func(), err error) {
	m, stop, err := r.startMetrics()
	if err != nil {
		return nil, nil, err
	}
	r.metrics = m
	return &scaled.Parts{Logger: r.log, Retry: r.retry, Health: r.health, Metrics: m, Gateways: r.gateways,
		FanOutParams: r.fanOutParams, OpenAttempts: r.openAttempts, OpenDeadLetters: r.openDeadLetters}, stop, nil
}
