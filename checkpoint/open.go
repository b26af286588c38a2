package checkpoint

import (
	"context"
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

func open(ctx context.Context, cfg *config.Config, readOnly bool, log *slog.Logger) (Store, func(), error) {
	switch cfg.Checkpoint.Store {
	case "mysql":
		db, err := OpenDB(cfg.Checkpoint.DSN.Reveal())
		if err != nil {
			return nil, nil, err
		}
		var st *MySQL
		if readOnly {
			st, err = OpenMySQLReadOnly(db, cfg.Checkpoint.Table)
		} else {
			st, err = OpenMySQL(ctx, db, cfg.Checkpoint.Table, log)
		}
		if err != nil {
			db.Close()
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
