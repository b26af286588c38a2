package relay

import (
	"context"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/deadletter"
)

// OpenDeadLetters opens the configured dead-letter store; nil when
// dead_letter.store is none.
func OpenDeadLetters(ctx context.Context, cfg *config.Config) (deadletter.Store, func(), error) {
	return openDeadLetters(ctx, cfg, false)
}

// OpenDeadLettersReadOnly opens the configured dead-letter store for
// reading only (dlq list): it creates no table or directory, and a missing
// one lists as empty.
func OpenDeadLettersReadOnly(ctx context.Context, cfg *config.Config) (deadletter.Store, func(), error) {
	return openDeadLetters(ctx, cfg, true)
}

func openDeadLetters(ctx context.Context, cfg *config.Config, readOnly bool) (deadletter.Store, func(), error) {
	switch cfg.DeadLetter.Store {
	case "none":
		return nil, func() {}, nil
	case "mysql":
		db, err := checkpoint.OpenDB(cfg.Checkpoint.DSN.Reveal())
		if err != nil {
			return nil, nil, err
		}
		var st *deadletter.MySQL
		if readOnly {
			st, err = deadletter.OpenMySQLReadOnly(db, cfg.DeadLetter.Table)
		} else {
			st, err = deadletter.OpenMySQL(ctx, db, cfg.DeadLetter.Table)
		}
		if err != nil {
			db.Close()
			return nil, nil, err
		}
		return st, func() { db.Close() }, nil
	default:
		if readOnly {
			return deadletter.OpenFileReadOnly(DeadLetterDir(cfg)), func() {}, nil
		}
		st, err := deadletter.OpenFile(DeadLetterDir(cfg))
		if err != nil {
			return nil, nil, err
		}
		return st, func() {}, nil
	}
}

// DeadLetterDir is the file store's directory: dead_letter.path (its
// default, beside the checkpoint file, is config's).
func DeadLetterDir(cfg *config.Config) string { return cfg.DeadLetter.Path }

func (r *Relay) openDeadLetters(ctx context.Context) (deadletter.Putter, func(), error) {
	st, closeFn, err := OpenDeadLetters(ctx, r.cfg)
	if err != nil || st == nil {
		return nil, closeFn, err
	}
	return st, closeFn, nil
}
