package relay

import (
	"log/slog"

	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/switchover"
)

// claiming returns s wrapped so that it claims each row of a table under
// switch-over before sending it (switchover.Sink), or s itself when no table is.
// The live streams, the webhook gateways' endpoints and the backfills all
// wrap their sinks here; a replay does not (it sends a window again on
// purpose).
func (a *assembly) claiming(name string, s sink.Sink) sink.Sink {
	tables := switchover.Tables(a.cfg)
	if tables == nil {
		return s
	}
	obs := a.switchOverMetrics()
	// A plain sink: one batch at a time (a sink.Submitter's batches would
	// need their claims ordered with their deliveries), and no read-back on
	// a restart (what a crash re-sends is claimed by the relay: it is sent
	// again, as after any crash).
	return switchover.NewSink(s, name, a.src.db, tables, obs, a.r.log.With(slog.String("sink", name)))
}

// switchOverMetrics returns the assembly's switch-over metrics, registered
// on the relay's metrics on first use; nil without metrics.
func (a *assembly) switchOverMetrics() *switchover.Metrics {
	if a.r.metrics == nil {
		return nil
	}
	a.switchOverOnce.Do(func() {
		m, err := switchover.NewMetrics(a.r.metrics)
		if err != nil {
			a.r.log.Warn("switch-over metrics not exposed", slog.Any("err", err))
		}
		a.switchOver = m
	})
	return a.switchOver
}
