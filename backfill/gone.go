package backfill

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/internal/sqlident"
)

// Gone is what an outbox table can say of the rows of a window it no
// longer holds (prune deleted them; the binlog that had them is purged).
//
// The table keeps no record of what was deleted, and prune keeps none
// either, so the count is bounded, not exact: prune deletes the oldest rows
// first, so the rows of the window that are gone are those created from
// Since up to the oldest row the table still holds (Oldest). How many they
// were is known only as an upper bound, from an integer primary key
// (AUTO_INCREMENT): KeysBelow values were used below the oldest row's key,
// by rows of the window and before it, and by transactions rolled back.
type Gone struct {
	Table string
	// Since is the window's start.
	Since time.Time
	// Oldest is the insert time (created_at, the server's time zone as
	// written) of the oldest row the table holds; zero when it is empty.
	Oldest string
	// Lost says whether the window begins before Oldest: rows of it may
	// be gone.
	Lost bool
	// KeysBelow is, for a single integer primary key, its oldest row's key
	// minus one: at most so many rows were inserted before it. -1 when the
	// key is not a single integer column.
	KeysBelow int64
}

func (g Gone) String() string {
	if !g.Lost {
		return fmt.Sprintf("%s holds every row created since %s (its oldest row was created %s)", g.Table, g.Since.Format(time.RFC3339), g.Oldest)
	}
	s := fmt.Sprintf("%s no longer holds the rows created from %s to %s (the oldest it holds): prune deleted them, and the binlog that had them is purged; they cannot be sent", g.Table, g.Since.Format(time.RFC3339), g.Oldest)
	if g.Oldest == "" {
		s = fmt.Sprintf("%s holds no row: the rows created since %s are gone (pruned, the binlog purged); they cannot be sent", g.Table, g.Since.Format(time.RFC3339))
	}
	if g.KeysBelow >= 0 {
		s += fmt.Sprintf("; how many is not recorded: at most %d (the primary key values below the oldest row's, which rows before the window used too)", g.KeysBelow)
	} else {
		s += "; how many is not recorded (the primary key is not one integer column, whose gap would bound it)"
	}
	return s
}

// CreatedAt is the insert time column of outbox table t in cfg
// (tables[].columns.created_at, as prune has it): what the table source
// reads a window's rows by, and Pruned judges what is gone by.
func CreatedAt(cfg *config.Config, t canal.Table) string {
	for _, ct := range cfg.Tables {
		if s, n := ct.SchemaTable(); s == t.Schema && n == t.Name && ct.Columns.CreatedAt != "" {
			return ct.Columns.CreatedAt
		}
	}
	return "created_at"
}

// Pruned says what table schema.name (insert time column createdAt) no
// longer holds of a window starting at since.
func Pruned(ctx context.Context, db *sql.DB, schema, name, createdAt string, since time.Time) (Gone, error) {
	g := Gone{Table: schema + "." + name, Since: since.UTC(), KeysBelow: -1}
	var pk []string
	var intKey bool
	rows, err := db.QueryContext(ctx, `SELECT s.COLUMN_NAME, c.DATA_TYPE FROM information_schema.STATISTICS s JOIN information_schema.COLUMNS c
		ON c.TABLE_SCHEMA = s.TABLE_SCHEMA AND c.TABLE_NAME = s.TABLE_NAME AND c.COLUMN_NAME = s.COLUMN_NAME
		WHERE s.TABLE_SCHEMA = ? AND s.TABLE_NAME = ? AND s.INDEX_NAME = 'PRIMARY' ORDER BY s.SEQ_IN_INDEX`, schema, name)
	if err != nil {
		return g, fmt.Errorf("read the primary key of %s: %w", g.Table, err)
	}
	for rows.Next() {
		var c, typ string
		if err := rows.Scan(&c, &typ); err != nil {
			rows.Close()
			return g, err
		}
		pk = append(pk, c)
		intKey = strings.HasSuffix(strings.ToLower(typ), "int")
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return g, err
	}
	tbl := sqlident.Table(schema, name)
	var oldest sql.NullString
	if err := db.QueryRowContext(ctx, "SELECT CAST(MIN("+sqlident.Quote(createdAt)+") AS CHAR) FROM "+tbl).Scan(&oldest); err != nil {
		return g, fmt.Errorf("read the oldest row of %s by %s: %w (name the insert time column with tables[].columns.created_at)", g.Table, createdAt, err)
	}
	g.Oldest = oldest.String
	// The window's start on the server's clock, as created_at is written.
	var start string
	if err := db.QueryRowContext(ctx, "SELECT CAST(NOW(6) - INTERVAL TIMESTAMPDIFF(MICROSECOND, ?, UTC_TIMESTAMP(6)) MICROSECOND AS CHAR)",
		g.Since.Format("2006-01-02 15:04:05.999999")).Scan(&start); err != nil {
		return g, err
	}
	g.Lost = !oldest.Valid || oldest.String > start
	if len(pk) == 1 && intKey && oldest.Valid {
		var min sql.NullInt64
		if err := db.QueryRowContext(ctx, "SELECT MIN("+sqlident.Quote(pk[0])+") FROM "+tbl).Scan(&min); err != nil {
			return g, err
		}
		if min.Valid {
			g.KeysBelow = min.Int64 - 1
		}
	}
	return g, nil
}
