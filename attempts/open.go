package attempts

import (
	"context"
	"database/sql"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
)

// Open opens the store cfg configures for the running relay: a table in
// the checkpoint database when checkpoint.store is mysql, else the file
// attempts.path (beside the checkpoint file), waiting up to wait for
// another process to let go of it. It returns nil, nil when
// attempts.enabled is false: nothing is opened or made. Close the store
// to close what it opened.
func Open(ctx context.Context, cfg *config.Config, wait time.Duration) (Store, error) {
	if !cfg.Attempts.Enabled {
		return nil, nil
	}
	return open(ctx, cfg, false, wait)
}

// OpenReadOnly opens the configured store for reading only, as Open does
// but whether or not attempts.enabled is set: it makes no table or file
// (a missing one finds no attempts). A file the running relay holds
// cannot be opened (ErrLocked, after wait): ask the relay instead, over
// its HTTP listener (Handler).
func OpenReadOnly(ctx context.Context, cfg *config.Config, wait time.Duration) (Store, error) {
	return open(ctx, cfg, true, wait)
}

func open(ctx context.Context, cfg *config.Config, readOnly bool, wait time.Duration) (Store, error) {
	if cfg.Checkpoint.Store != "mysql" {
		if readOnly {
			return OpenFileReadOnly(cfg.Attempts.Path, wait)
		}
		return OpenFile(cfg.Attempts.Path, wait)
	}
	st, db, err := checkpoint.OpenTable(cfg, readOnly,
		func(db *sql.DB) (*MySQL, error) { return OpenMySQL(ctx, db, cfg.Attempts.Table) },
		func(db *sql.DB) (*MySQL, error) { return OpenMySQLReadOnly(db, cfg.Attempts.Table) })
	if err != nil {
		return nil, err
	}
	return ownedDB{st, db}, nil
}

// ownedDB is a MySQL store that closes its database with it.
type ownedDB struct {
	*MySQL
	db *sql.DB
}

func (o ownedDB) Close() error { return o.db.Close() }
