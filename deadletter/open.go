package deadletter

import (
	"context"
	"database/sql"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
)

// Open opens the configured dead-letter store; nil when
// dead_letter.store is none.
func Open(ctx context.Context, cfg *config.Config) (Store, func(), error) {
	return open(ctx, cfg, false)
}

// OpenReadOnly opens the configured dead-letter store for
// reading only (dlq list): it creates no table or directory, and a missing
// one lists as empty.
func OpenReadOnly(ctx context.Context, cfg *config.Config) (Store, func(), error) {
	return open(ctx, cfg, true)
}

func open(ctx context.Context, cfg *config.Config, readOnly bool) (Store, func(), error) {
	switch cfg.DeadLetter.Store {
	case "none":
		return nil, func() {}, nil
	case "mysql":
		st, db, err := checkpoint.OpenTable(cfg, readOnly,
			func(db *sql.DB) (*MySQL, error) { return OpenMySQL(ctx, db, cfg.DeadLetter.Table) },
			func(db *sql.DB) (*MySQL, error) { return OpenMySQLReadOnly(db, cfg.DeadLetter.Table) })
		if err != nil {
			return nil, nil, err
		}
		return st, func() { db.Close() }, nil
	default:
		if readOnly {
			return OpenFileReadOnly(Dir(cfg)), func() {}, nil
		}
		st, err := OpenFile(Dir(cfg))
		if err != nil {
			return nil, nil, err
		}
		return st, func() {}, nil
	}
}

// Dir is the file store's directory: dead_letter.path (its
// default, beside the checkpoint file, is config's).
func Dir(cfg *config.Config) string { return cfg.DeadLetter.Path }
