package canal

// This file owns LibraryLogger: the logger every go-mysql syncer is given,
// which demotes the library's chatty records and never logs its config.

import (
	"context"
	"log/slog"

	"github.com/go-mysql-org/go-mysql/replication"
)

// LibraryLogger is the logger to give every go-mysql BinlogSyncer (the
// reader's, the audit's): its records go to log, tagged component=go-mysql,
// its chatty Info records (every connect, every binlog rotation, the
// syncer's whole config) at Debug, and never the syncer's config itself,
// which holds the password.
func LibraryLogger(log *slog.Logger) *slog.Logger {
	if log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(demoteInfo{log.Handler()}).With(slog.String("component", "go-mysql"))
}

// demoteInfo logs go-mysql's chatty Info records at Debug and drops any
// attribute holding a BinlogSyncerConfig; its warnings and errors pass
// unchanged.
type demoteInfo struct{ slog.Handler }

func (d demoteInfo) Enabled(ctx context.Context, l slog.Level) bool {
	if l == slog.LevelInfo {
		l = slog.LevelDebug
	}
	return d.Handler.Enabled(ctx, l)
}

func (d demoteInfo) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelInfo {
		r.Level = slog.LevelDebug
	}
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		switch a.Value.Any().(type) {
		case replication.BinlogSyncerConfig, *replication.BinlogSyncerConfig:
			out.AddAttrs(slog.String(a.Key, "(not logged: it holds the password)"))
		default:
			out.AddAttrs(a)
		}
		return true
	})
	return d.Handler.Handle(ctx, out)
}

func (d demoteInfo) WithAttrs(as []slog.Attr) slog.Handler {
	return demoteInfo{d.Handler.WithAttrs(as)}
}
func (d demoteInfo) WithGroup(n string) slog.Handler { return demoteInfo{d.Handler.WithGroup(n)} }
