package relay

import (
	"context"
	"log/slog"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/prune"
)

// pruneLoop prunes at once, then every prune.schedule, until ctx ends. It
// runs only once this relay holds the checkpoint lock: a standby never
// prunes.
func (r *Relay) pruneLoop(ctx context.Context, store checkpoint.Store) {
	every := r.cfg.Prune.Schedule
	log := r.log.With(slog.String("component", "prune"))
	opts := prune.OptionsFrom(r.cfg.Prune)
	opts.Logger = log
	if r.metrics != nil {
		pm, err := prune.NewMetrics(r.metrics)
		if err != nil {
			log.Error("prune metrics not registered; prune runs without them", slog.Any("err", err))
		} else {
			opts.Observer = pm
		}
	}
	log.Info("scheduled prune on", slog.Duration("every", every), slog.Duration("older_than", opts.OlderThan), slog.Duration("safety_margin", opts.SafetyMargin))
	for {
		r.pruneOnce(ctx, store, opts, log)
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

func (r *Relay) pruneOnce(ctx context.Context, store checkpoint.Store, opts prune.Options, log *slog.Logger) {
	db, info, err := prune.OpenPrimary(ctx, r.cfg)
	if err != nil {
		if ctx.Err() == nil {
			log.Error("prune: no primary to prune on; retried at the next schedule", slog.Any("err", err))
		}
		return
	}
	defer db.Close()
	res, err := prune.NewFromConfig(db, info, store, r.cfg, opts).Run(ctx)
	for _, t := range res.Tables {
		log.Info("prune done", slog.String("table", t.Table), slog.String("mode", t.Mode), slog.Int64("rows", t.Rows),
			slog.Any("dropped", t.Dropped), slog.Any("created", t.Created), slog.String("skipped", t.Skipped),
			slog.Time("cutoff", res.Horizon.Cutoff), slog.String("held_by", res.Horizon.HeldBy))
	}
	if err != nil && ctx.Err() == nil {
		log.Error("prune failed; retried at the next schedule", slog.Any("err", err))
	}
}
