package prune

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/source"
)

// OpenPrimary connects to the first configured source server that is a
// writable primary (CheckPrimary): with source.servers, the relay may
// read a replica, but prune deletes on the primary.
func OpenPrimary(ctx context.Context, cfg *config.Config) (*sql.DB, source.ServerInfo, error) {
	var info source.ServerInfo
	db, err := source.OpenWhere(ctx, cfg.Source, func(ctx context.Context, db *sql.DB) (err error) {
		if info, err = source.Inspect(ctx, db, cfg.Source); err != nil {
			return err
		}
		return CheckPrimary(ctx, db)
	})
	if err != nil {
		return nil, info, fmt.Errorf("no writable primary among the source servers: %w", err)
	}
	return db, info, nil
}

// NewFromConfig returns the pruner of cfg's outbox tables on db, bounded by the
// checkpoints in store of every pipeline: every webhook endpoint included,
// those of an endpoints table too (every checkpoint the store holds under
// such a sink's name, read when the store can list its keys).
func NewFromConfig(db *sql.DB, info source.ServerInfo, store checkpoint.Store, cfg *config.Config, opts Options) *Pruner {
	return New(db, info, store, Keys(context.Background(), store, cfg), TablesFrom(cfg), opts)
}

// Keys are the checkpoint keys that bound prune: the configured
// pipelines, every key of a webhook sink with an endpoints table, and a
// webhook sink's shared cursor (gateway.SharedKey), in place of its
// endpoints without a cursor of their own.
func Keys(ctx context.Context, store checkpoint.Store, cfg *config.Config) []string {
	keys := cfg.PipelineNames()
	l, ok := store.(checkpoint.Lister)
	if !ok {
		return keys
	}
	all, err := l.List(ctx)
	// A webhook sink's endpoints without a cursor of their own are at its
	// shared cursor: it bounds prune for them, in their place.
	for _, s := range cfg.Sinks {
		shared := gateway.SharedKey(s.Name)
		if _, ok := all[shared]; !ok || err != nil {
			continue
		}
		keys = slices.DeleteFunc(keys, func(k string) bool {
			_, own := all[k]
			return !own && strings.HasPrefix(k, s.Name+"/")
		})
		keys = append(keys, shared)
	}
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
