package redis

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// SetLibraryLogger routes go-redis's own log lines, which it otherwise
// writes to stderr as "redis: <date> pool.go:770: …", to log, tagged
// component=go-redis. go-redis has one logger per process, so main calls
// this (each command, with its logger); it is safe to call concurrently
// with clients in use.
//
// Levels: a dial failure at Debug (the sink's own error, throttled, says
// the server cannot be reached), a recovered panic at Error, anything else
// at Warn.
func SetLibraryLogger(log *slog.Logger) {
	goredis.SetLogger(libraryLogger{log: log.With(slog.String("component", "go-redis"))})
}

type libraryLogger struct{ log *slog.Logger }

func (l libraryLogger) Printf(ctx context.Context, format string, v ...any) {
	msg := strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: ")
	level := slog.LevelWarn
	switch {
	case strings.Contains(msg, "failed to dial"):
		level = slog.LevelDebug
	case strings.Contains(msg, "panic"):
		level = slog.LevelError
	}
	l.log.Log(context.WithoutCancel(ctx), level, msg)
}
