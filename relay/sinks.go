package relay

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/source"
)

// targets builds the targets of sink s: its sink, built by its registered
// kind, or, for a fan-out kind (a gateway), one per endpoint of its
// configuration.
func (r *Relay) targets(s config.Sink) ([]Target, error) {
	if fo, ok := gateway.FanOutFor(s); ok {
		eps, err := fo.Endpoints(r.fanOutParams(s, "", nil, nil))
		if err != nil {
			return nil, err
		}
		var out []Target
		for _, e := range eps {
			out = append(out, Target{Name: e.Key, Sink: e.Sink, Open: e.Open, Gateway: s.Name, Filter: e.Filter})
		}
		return out, nil
	}
	k, ok := sink.KindOf(s.Type)
	if !ok || k.New == nil || s.Config == nil {
		return nil, fmt.Errorf("type %q is not supported by this build", s.Type)
	}
	var stdout io.Writer
	if r.opts.Stdout != nil {
		stdout = r.opts.Stdout
	}
	out, err := k.New(sink.Params{Name: s.Name, Config: s.Config, Stdout: stdout, Retry: r.retry,
		Logger: r.log.With(slog.String("sink", s.Name))})
	if err != nil {
		return nil, err
	}
	return []Target{{Name: s.Name, Sink: out}}, nil
}

// fanOutParams are what a fan-out kind builds the endpoints of sink s with:
// the relay's health, retry policy, logger and metrics, the cursors' store,
// and a partition's key suffix and shared request slots (the Kafka-sourced
// gateway).
func (r *Relay) fanOutParams(s config.Sink, suffix string, store checkpoint.Store, slots chan struct{}) gateway.FanOutParams {
	p := gateway.FanOutParams{Sink: s.Name, Config: s.Config, Suffix: suffix, Store: store, Health: r.health,
		Retry: r.retry, Slots: slots, Logger: r.log}
	if r.attempts != nil {
		p.Attempts = r.attempts
	}
	if r.gateways != nil {
		gm := r.gateways.Sink(s.Name)
		p.States = gm
		p.Observer = func(key string) any { return gm.Endpoint(key).Retries() }
	}
	return p
}

// TableTargets builds the enabled endpoints of every fan-out sink's
// endpoints table, read from the source now (for dlq replay: the running
// relay follows the table on its stream). As when the relay runs, a row
// that cannot be used is skipped with an error log, and a row with the name
// of an endpoint of the configuration is refused: it never gets that
// endpoint's dead letters.
func (r *Relay) TableTargets(ctx context.Context) ([]Target, error) {
	var out []Target
	var db *sql.DB
	for _, s := range r.cfg.Sinks {
		fo, ok := gateway.FanOutFor(s)
		if !ok {
			continue
		}
		table, err := fo.Table(r.fanOutParams(s, "", nil, nil))
		if err != nil {
			return nil, err
		}
		if table == nil {
			continue
		}
		if db == nil {
			if db, err = source.Open(ctx, r.cfg.Source); err != nil {
				return nil, err
			}
			defer db.Close()
		}
		eps, err := table.Load(ctx, db)
		if err != nil {
			return nil, err
		}
		for _, e := range eps {
			if !e.Held { // off or invalid: not run
				out = append(out, Target{Name: e.Key, Sink: e.Sink, Open: e.Open, Gateway: s.Name, Filter: e.Filter})
			}
		}
	}
	return out, nil
}
