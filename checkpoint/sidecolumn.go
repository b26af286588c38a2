package checkpoint

// This file owns what a side table (SideTableName) adds after it was first
// created: a column and its index, on the first start of the version that
// needs them (the form of a key too long for its column is FitKey's).

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
)

// SideColumn is a column a side table gained in a later version: its
// definition, and the index that serves it (empty: none).
type SideColumn struct {
	Name string // tenant
	Def  string // VARBINARY(255) NOT NULL DEFAULT ''
	// Index is the index's name and its columns: "ix_tenant (tenant, id)".
	Index string
}

// AddSideColumn adds c to table (a side table of what, "dead-letter") when
// it does not have it yet, with its index, in one ALTER TABLE, and logs one
// info line when it does (log may be nil). Rows stored before get the
// column's default. Two processes starting at once may both try: the one
// that comes second finds the column there (or is told it is: MySQL's
// duplicate column 1060) and goes on. A statement refused for want of a
// privilege is told with the GRANT that would let it run (Denied).
func AddSideColumn(ctx context.Context, db *sql.DB, what, table string, c SideColumn, log *slog.Logger) error {
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = ?", table, c.Name).Scan(&n); err != nil {
		return Denied(ctx, db, fmt.Errorf("inspect %s table %q: %w", what, table, err))
	}
	if n > 0 {
		return nil
	}
	alter := "ALTER TABLE `" + table + "` ADD COLUMN " + c.Name + " " + c.Def
	if c.Index != "" {
		alter += ", ADD KEY " + c.Index
	}
	if _, err := db.ExecContext(ctx, alter); err != nil {
		if isDuplicateColumn(err) {
			return nil
		}
		return Denied(ctx, db, fmt.Errorf("%s table %q: add column %s: %w; run %s as a user with ALTER on it", what, table, c.Name, err, alter))
	}
	if log != nil {
		log.Info(what+" table upgraded: column "+c.Name+" added", slog.String("table", table), slog.String("column", c.Name))
	}
	return nil
}

// IsUnknownColumn reports whether err is MySQL's "unknown column" (1054):
// a side table of an earlier version, read by a read-only store.
func IsUnknownColumn(err error) bool { return isUnknownColumn(err) }
