package checkpoint

// This file owns what the relay's own tables in the checkpoint database
// (checkpoints, the fencing row, cursors, dead letters, attempts) hold
// whatever the database's defaults: their character set, their key
// columns, and the form of a value too long for its column.

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"unicode/utf8"

	"github.com/go-sql-driver/mysql"
)

// TableOptions end the CREATE TABLE of each of the relay's own tables:
// utf8mb4 with a binary collation, whatever the database's default (a
// MariaDB database is latin1 — cp1252 — unless told otherwise, and
// refuses "refusé ✓" or an emoji with error 1366). Keys are binary columns
// (KeyColumnType) and compare as bytes.
const TableOptions = "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"

// KeyColumnType is the type of a key column of size bytes: bytes,
// compared as bytes (no collation, no padding: trailing spaces count).
func KeyColumnType(size int) string { return fmt.Sprintf("VARBINARY(%d)", size) }

// keyHashLen is the length of the hash that ends a key too long for its
// column (FitKey): "#" and 16 hex digits.
const keyHashLen = 17

// FitKey returns s as a key column of n bytes (n > keyHashLen) keeps it:
// s itself when it fits, else its first n-17 bytes, "#" and the first 16
// hex digits of the SHA-256 of the whole, so two long keys stay apart and
// a search by prefix still finds it. The full value is kept elsewhere
// (a dead letter's record): the column is for finding it. The form is the
// one migrateKeyColumns gives the rows of an earlier version in SQL.
func FitKey(s string, n int) string {
	if len(s) <= n {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return s[:n-keyHashLen] + "#" + hex.EncodeToString(sum[:8])
}

// FitText returns s as a utf8mb4 text column of n bytes keeps it: valid
// UTF-8 (each invalid byte sequence becomes U+FFFD, which any receiver's
// answer may hold) cut to at most n bytes at a character boundary.
func FitText(s string, n int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// KeyColumn names a key column of a table and its size in bytes.
type KeyColumn struct {
	Name string
	Size int
}

// UpgradeTable brings a table of the relay's own, created by an earlier
// version in the database's default character set, up to date: every
// character column utf8mb4 (a table rebuild, once, lossless: latin1 and
// utf8mb3 are subsets), then each of keys a binary key column
// (migrateKeyColumns). what names the table for errors and the log
// ("dead-letter"); log, when not nil, gets one info line per change.
func UpgradeTable(ctx context.Context, db *sql.DB, what, table string, log *slog.Logger, keys ...KeyColumn) error {
	if err := convertTable(ctx, db, what, table, log); err != nil {
		return err
	}
	return migrateKeyColumns(ctx, db, what, table, log, keys...)
}

// convertTable converts table to utf8mb4 when a character column of it,
// or its default, is in another character set.
func convertTable(ctx context.Context, db *sql.DB, what, table string, log *slog.Logger) error {
	var others int
	var def sql.NullString
	err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? "+
		"AND CHARACTER_SET_NAME IS NOT NULL AND CHARACTER_SET_NAME <> 'utf8mb4'", table).Scan(&others)
	if err == nil {
		err = db.QueryRowContext(ctx, "SELECT TABLE_COLLATION FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?", table).Scan(&def)
	}
	if err != nil {
		return Denied(ctx, db, fmt.Errorf("inspect %s table %q: %w", what, table, err))
	}
	const charset = "CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
	switch {
	case others > 0:
		if _, err := db.ExecContext(ctx, "ALTER TABLE `"+table+"` CONVERT TO "+charset); err != nil {
			return Denied(ctx, db, fmt.Errorf("%s table %q: convert it to utf8mb4, so that it keeps any text: %w; run ALTER TABLE `%s` CONVERT TO %s as a user with ALTER on it", what, table, err, table, charset))
		}
		if log != nil {
			log.Info(fmt.Sprintf("%s table upgraded: its text columns are now utf8mb4 (%d were in another character set, which refuses some text)", what, others),
				slog.String("table", table), slog.String("was", def.String))
		}
	case !strings.HasPrefix(def.String, "utf8mb4"):
		// Only the default of columns added later: no rebuild.
		if _, err := db.ExecContext(ctx, "ALTER TABLE `"+table+"` DEFAULT "+charset); err != nil {
			return Denied(ctx, db, fmt.Errorf("%s table %q: make its default character set utf8mb4: %w", what, table, err))
		}
	}
	return nil
}

// migrateKeyColumns makes each of cols of table (in db's current database)
// a key column (KeyColumnType of its size) when it is not one: a character
// column compares with a collation, which takes one key for another (case,
// accents, "ß" for "s", trailing spaces). A value longer than the new
// column (a utf8mb4 character column holds up to 4 bytes a character)
// takes FitKey's form, computed in SQL. Each change is one info line to
// log, when not nil. The character columns must be utf8mb4 already
// (UpgradeTable), so the bytes kept are the UTF-8 the relay writes.
func migrateKeyColumns(ctx context.Context, db *sql.DB, what, table string, log *slog.Logger, cols ...KeyColumn) error {
	type change struct {
		KeyColumn
		typ    string
		octets int64
	}
	var todo []change
	for _, c := range cols {
		var typ string
		var octets sql.NullInt64
		err := db.QueryRowContext(ctx, "SELECT DATA_TYPE, CHARACTER_OCTET_LENGTH FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = ?", table, c.Name).Scan(&typ, &octets)
		if err != nil {
			return Denied(ctx, db, fmt.Errorf("inspect %s table %q: %w", what, table, err))
		}
		if !strings.EqualFold(typ, "varbinary") || octets.Int64 != int64(c.Size) {
			todo = append(todo, change{c, typ, octets.Int64})
		}
	}
	if len(todo) == 0 {
		return nil
	}
	fail := func(err error) error {
		var stmts []string
		for _, c := range todo {
			stmts = append(stmts, fmt.Sprintf("MODIFY `%s` %s NOT NULL", c.Name, KeyColumnType(c.Size)))
		}
		return Denied(ctx, db, fmt.Errorf("%s table %q: make its key columns binary, so that keys compare as bytes: %w; run ALTER TABLE `%s` %s as a user with ALTER on it",
			what, table, err, table, strings.Join(stmts, ", ")))
	}
	// The values too long for their new column, counted in one scan.
	counts := make([]string, len(todo))
	long := make([]any, len(todo))
	for i, c := range todo {
		counts[i] = fmt.Sprintf("COALESCE(SUM(LENGTH(`%s`) > %d), 0)", c.Name, c.Size)
		long[i] = new(int64)
	}
	if err := db.QueryRowContext(ctx, "SELECT "+strings.Join(counts, ", ")+" FROM `"+table+"`").Scan(long...); err != nil {
		return fail(err)
	}
	var modify []string
	for i, c := range todo {
		if *long[i].(*int64) > 0 {
			// Those rows first take FitKey's form, in a column as wide
			// as the old one so that no byte of a character is lost.
			if _, err := db.ExecContext(ctx, fmt.Sprintf("ALTER TABLE `%s` MODIFY `%s` VARBINARY(%d) NOT NULL", table, c.Name, max(c.octets, int64(c.Size)))); err != nil {
				return fail(err)
			}
			// Bytes, as FitKey cuts: the column is binary by now, and
			// CAST says so whatever it was. (Each argument is indexed: a
			// verb after %[2]s takes argument 3, which once made the
			// WHERE compare with 238 and take keys that fit for long.)
			if _, err := db.ExecContext(ctx, fmt.Sprintf("UPDATE `%[1]s` SET `%[2]s` = CONCAT(LEFT(CAST(`%[2]s` AS BINARY), %[3]d), '#', LEFT(SHA2(`%[2]s`, 256), 16)) WHERE LENGTH(`%[2]s`) > %[4]d",
				table, c.Name, c.Size-keyHashLen, c.Size)); err != nil {
				return fail(err)
			}
		}
		modify = append(modify, fmt.Sprintf("MODIFY `%s` %s NOT NULL", c.Name, KeyColumnType(c.Size)))
	}
	// One statement: the table is rebuilt once.
	if _, err := db.ExecContext(ctx, "ALTER TABLE `"+table+"` "+strings.Join(modify, ", ")); err != nil {
		return fail(err)
	}
	if log != nil {
		for _, c := range todo {
			log.Info(fmt.Sprintf("%s table upgraded: its column %s is now %s, so keys compare as bytes (they compared with the %s column's collation, which can take one key for another: case, accents, trailing spaces)", what, c.Name, KeyColumnType(c.Size), c.typ),
				slog.String("table", table), slog.String("column", c.Name), slog.String("was", c.typ))
		}
	}
	return nil
}

// Refused reports whether err is the store refusing a value of the record
// written, rather than failing to write at all: a value too long (1406),
// not in the column's character set (1366), out of range (1264), a row or
// packet too large (1118, 1153, 1162, 1301), a NULL where none is allowed
// (1048), a bad date (1292), a CHECK constraint (4025), a trigger's SIGNAL
// (1644), or the driver's own "packet too large". Writing the same record
// again is refused again; other records go in.
func Refused(err error) bool {
	if errors.Is(err, mysql.ErrPktTooLarge) {
		return true
	}
	var me *mysql.MySQLError
	if !errors.As(err, &me) {
		return false
	}
	switch me.Number {
	case 1048, 1118, 1153, 1162, 1264, 1292, 1301, 1366, 1406, 1644, 3819, 4025:
		return true
	}
	return false
}
