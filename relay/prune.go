package relay

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/prune"
	"github.com/outbox-relay/outbox-relay/source"
)

// OpenPrimary connects to the first configured source server that is a
// writable primary (prune.CheckPrimary): with source.servers, the relay may
// read a replica, but prune deletes on the primary.
func OpenPrimary(ctx context.Context, cfg *config.Config) (*sql.DB, source.ServerInfo, error) {
	var info source.ServerInfo
	db, err := source.OpenWhere(ctx, cfg.Source, func(ctx context.Context, db *sql.DB) (err error) {
		if info, err = source.Inspect(ctx, db, cfg.Source); err != nil {
			return err
		}
		return prune.CheckPrimary(ctx, db)
	})
	if err != nil {
		return nil, info, fmt.Errorf("no writable primary among the source servers: %w", err)
	}
	return db, info, nil
}

// NewPruner returns the pruner of cfg's outbox tables on db, bounded by the
// checkpoints in store of every pipeline: every webhook endpoint included,
// those of an endpoints table too (every checkpoint the store holds under
// such a sink's name, read when the store can list its keys).
func NewPruner(db *sql.DB, info source.ServerInfo, store checkpoint.Store, cfg *config.Config, opts prune.Options) *prune.Pruner {
	return prune.New(db, info, store, PruneKeys(context.Background(), store, cfg), prune.TablesFrom(cfg), opts)
}

// PruneKeys are the checkpoint keys that bound prune: the configured
// pipelines, and every key of a webhook sink with an endpoints table.
func PruneKeys(ctx context.Context, store checkpoint.Store, cfg *config.Config) []string {
	keys := cfg.PipelineNames()
	l, ok := store.(checkpoint.Lister)
	if !ok {
		return keys
	}
	all, err := l.List(ctx)
	for _, s := range cfg.Sinks {
		if !gateway.HasTable(s) {
			continue
		}
		if err != nil {
			// A key with no checkpoint holds prune back, and says why.
			keys = append(keys, fmt.Sprintf("%s/(its endpoints table's checkpoints could not be listed: %v)", s.Name, err))
			continue
		}
		for k := range all {
			if strings.HasPrefix(k, s.Name+"/") && !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	return keys
}

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
	db, info, err := OpenPrimary(ctx, r.cfg)
	if err != nil {
		if ctx.Err() == nil {
			log.Error("prune: no primary to prune on; retried at the next schedule", slog.Any("err", err))
		}
		return
	}
	defer db.Close()
	res, err := NewPruner(db, info, store, r.cfg, opts).Run(ctx)
	for _, t := range res.Tables {
		log.Info("prune done", slog.String("table", t.Table), slog.String("mode", t.Mode), slog.Int64("rows", t.Rows),
			slog.Any("dropped", t.Dropped), slog.Any("created", t.Created), slog.String("skipped", t.Skipped),
			slog.Time("cutoff", res.Horizon.Cutoff), slog.String("held_by", res.Horizon.HeldBy))
	}
	if err != nil && ctx.Err() == nil {
		log.Error("prune failed; retried at the next schedule", slog.Any("err", err))
	}
}
