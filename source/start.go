package source

import (
	"context"
	"database/sql"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
)

// StartPosition resolves checkpoint.start against the server.
func StartPosition(ctx context.Context, db *sql.DB, cfg *config.Config, info ServerInfo) (event.Position, error) {
	if g, _ := cfg.StartGTID(); g != "" {
		return event.Position{GTIDSet: g}, nil
	}
	if cfg.Checkpoint.Start == "earliest" {
		return EarliestPosition(ctx, db, info)
	}
	return CurrentPosition(ctx, db, info)
}
