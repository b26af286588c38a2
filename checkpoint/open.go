package checkpoint

import (
	"context"
	"database/sql"
	"log/slog"

	"github.com/outbox-relay/outbox-relay/config"
)

// Open opens the checkpoint store cfg configures (store: file
// or mysql); close releases what it opened.
func Open(ctx context.Context, cfg *config.Config, log *slog.Logger) (Store, func(), error) {
	return open(ctx, cfg, false, log)
}

// OpenReadOnly opens the configured checkpoint store for reading only
// (status): it creates no table, file or directory, and a missing one reads
// as no checkpoints.
func OpenReadOnly(ctx context.Context, cfg *config.Config) (Store, func(), error) {
	return open(ctx, cfg, true, nil)
}

// OpenTable opens the database of checkpoint.dsn and a store of one of
// its tables on it (checkpoints, dead letters, attempts): by openReadOnly
// when readOnly, else by open. The caller closes db after the store; when
// the store does not open, OpenTable closes db.
func OpenTable[S any](cfg *config.Config, readOnly bool, open, openReadOnly func(db *sql.DB) (S, error)) (st S, db *sql.DB, err error) {
	if db, err = OpenDB(cfg.Checkpoint.DSN.Reveal()); err != nil {
		return st, nil, err
	}
	if readOnly {
		open = openReadOnly
	}
	if st, err = open(db); err != nil {
		db.Close()
		return st, nil, err
	}
	return st, db, nil
}

func open(ctx context.Context, cfg *config.Config, readOnly bool, log *slog.Logger) (Store, func(), error) {
	switch cfg.Checkpoint.Store {
	case "mysql":
		st, db, err := OpenTable(cfg, readOnly,
			func(db *sql.DB) (*MySQL, error) { return OpenMySQL(ctx, db, cfg.Checkpoint.Table, log) },
			func(db *sql.DB) (*MySQL, error) { return OpenMySQLReadOnly(db, cfg.Checkpoint.Table) })
		if err != nil {
			return nil, nil, err
		}
		st.LockTimeout = cfg.Checkpoint.LockTimeout
		return st, func() { db.Close() }, nil
	default:
		openFile := OpenFile
		if readOnly {
			openFile = OpenFileReadOnly
		}
		st, err := openFile(cfg.Checkpoint.Path)
		if err != nil {
			return nil, nil, err
		}
		return st, func() {}, nil
	}
}
