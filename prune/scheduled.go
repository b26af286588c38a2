package prune

import (
	"context"
	"log/slog"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/metrics"
)

// Scheduled prunes at once, then every prune.schedule of cfg, until ctx
// ends, logging each run and each failure (retried at the next schedule)
// to log; m, when not nil, is where its metrics are registered. The relay
// runs it once it holds the checkpoint lock: a standby never prunes.
func Scheduled(ctx context.Context, cfg *config.Config, store checkpoint.Store, m *metrics.Metrics, log *slog.Logger) {
	every := cfg.Prune.Schedule
	log = log.With(slog.String("component", "prune"))
	opts := OptionsFrom(cfg.Prune)
	opts.Logger = log
	if m != nil {
		pm, err := NewMetrics(m)
		if err != nil {
			log.Error("prune metrics not registered; prune runs without them", slog.Any("err", err))
		} else {
			opts.Observer = pm
		}
	}
	log.Info("scheduled prune on", slog.Duration("every", every), slog.Duration("older_than", opts.OlderThan), slog.Duration("safety_margin", opts.SafetyMargin))
	for {
		pruneOnce(ctx, cfg, store, opts, log)
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

func pruneOnce(ctx context.Context, cfg *config.Config, store checkpoint.Store, opts Options, log *slog.Logger) {
	db, info, err := OpenPrimary(ctx, cfg)
	if err != nil {
		if ctx.Err() == nil {
			log.Error("prune: no primary to prune on; retried at the next schedule", slog.Any("err", err))
		}
		return
	}
	defer db.Close()
	res, err := NewFromConfig(db, info, store, cfg, opts).Run(ctx)
	for _, t := range res.Tables {
		log.Info("prune done", slog.String("table", t.Table), slog.String("mode", t.Mode), slog.Int64("rows", t.Rows),
			slog.Any("dropped", t.Dropped), slog.Any("created", t.Created), slog.String("skipped", t.Skipped),
			slog.Time("cutoff", res.Horizon.Cutoff), slog.String("held_by", res.Horizon.HeldBy))
	}
	if err != nil && ctx.Err() == nil {
		log.Error("prune failed; retried at the next schedule", slog.Any("err", err))
	}
}
