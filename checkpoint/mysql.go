package checkpoint

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
)

// MySQL keeps checkpoints in a table (default outbox_relay_checkpoints) of a
// database reached through its own connection. The table is created on first
// use. The relay never treats writes to this table as outbox events: only the
// configured outbox tables produce events.
//
// Keys compare as bytes, as everywhere else in the relay: the name column is
// VARBINARY, so "wh/billing", "wh/BILLING", "wh/billing " and "wh/bíllíng"
// are four rows, and a save, load or delete of one never reaches another.
// (A character column would compare them with its collation: case- and
// accent-insensitive by default, and, PAD SPACE, blind to trailing spaces —
// utf8mb4_bin included.) The other text columns are utf8mb4, whatever the
// database's default (TableOptions), and a reason for disabling an
// endpoint is cut to its column (FitText). A table of an earlier version
// is brought up to date on open (UpgradeTable).
type MySQL struct {
	db       *sql.DB
	table    string
	readOnly bool
	// LockTimeout is how long the server keeps the lock of a holder that
	// went silent (frozen, cut off): the lock connection's wait_timeout.
	// Set it before Lock. Default DefaultLockTimeout.
	LockTimeout time.Duration
	lease       lease
	waited      bool
}

var identRe = regexp.MustCompile(`^[A-Za-z0-9_$]{1,64}$`)

// ValidTableName reports whether name can be used, unquoted of any risk, as
// the table of a MySQL store (checkpoints or dead letters).
func ValidTableName(name string) bool { return identRe.MatchString(name) }

// OpenMySQL opens the store on db, creating table if it does not exist, and
// bringing a table of an earlier version up to date (its text columns made
// utf8mb4 and its name column binary, UpgradeTable: an info line to log,
// when not nil, for each).
func OpenMySQL(ctx context.Context, db *sql.DB, table string, log *slog.Logger) (*MySQL, error) {
	if table == "" {
		table = config.DefaultCheckpointTable
	}
	if !identRe.MatchString(table) {
		return nil, fmt.Errorf("checkpoint table name %q: use letters, digits, _ and $ only", table)
	}
	_, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS `"+table+"` ("+
		"name "+KeyColumnType(keyColumnSize)+" NOT NULL PRIMARY KEY,"+
		"flavor VARCHAR(16) NOT NULL,"+
		"server_uuid VARCHAR(64) NOT NULL DEFAULT '',"+
		"server_id INT UNSIGNED NOT NULL DEFAULT 0,"+
		"gtid_set TEXT NOT NULL,"+
		"binlog_file VARCHAR(512) NOT NULL DEFAULT '',"+
		"binlog_pos INT UNSIGNED NOT NULL DEFAULT 0,"+
		"updated_at DATETIME(6) NOT NULL,"+
		"commit_time DATETIME(6) NULL,"+
		"disabled VARCHAR("+fmt.Sprint(disabledSize)+") NOT NULL DEFAULT '',"+
		"acked MEDIUMTEXT NULL,"+
		"binlog_server_id INT UNSIGNED NOT NULL DEFAULT 0,"+
		"record MEDIUMTEXT NULL,"+
		"table_cursor TEXT NULL"+
		") "+TableOptions)
	if err != nil {
		return nil, Denied(ctx, db, fmt.Errorf("create checkpoint table %q: %w", table, err))
	}
	// A table of an earlier version has no commit_time: add it. Earlier
	// versions name their columns, so they keep working on the new table
	// (their saves leave commit_time as it was: older, never newer, than
	// the position, which only holds pruning back).
	// Likewise disabled (0.4) and acked (0.5; an earlier version's save
	// leaves it as it was, listing events of transactions its position now
	// covers, which a restart ignores), and binlog_server_id (the server
	// whose binlog binlog_file is; an earlier version's save leaves it as it
	// was, which is right while that version reads the same server, and
	// else can only make a resume refuse, never skip).
	for _, c := range []struct{ name, def string }{
		{"commit_time", "DATETIME(6) NULL"},
		{"disabled", "VARCHAR(1024) NOT NULL DEFAULT ''"},
		{"acked", "MEDIUMTEXT NULL"},
		{"binlog_server_id", "INT UNSIGNED NOT NULL DEFAULT 0"},
		{"record", "MEDIUMTEXT NULL"},
		{"table_cursor", "TEXT NULL"},
	} {
		var n int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = ?", table, c.name).Scan(&n); err != nil {
			return nil, Denied(ctx, db, fmt.Errorf("inspect checkpoint table %q: %w", table, err))
		}
		if n == 0 {
			if _, err := db.ExecContext(ctx, "ALTER TABLE `"+table+"` ADD COLUMN "+c.name+" "+c.def); err != nil && !isDuplicateColumn(err) {
				return nil, Denied(ctx, db, fmt.Errorf("add %s to checkpoint table %q: %w", c.name, table, err))
			}
		}
	}
	if err := UpgradeTable(ctx, db, "checkpoint", table, log, KeyColumn{"name", keyColumnSize}); err != nil {
		return nil, err
	}
	return &MySQL{db: db, table: table}, nil
}

// keyColumnSize is the size, in bytes, of the name column: a checkpoint's
// key.
const keyColumnSize = 255

// disabledSize is the size of the disabled column, in characters: a
// longer reason (an endpoint's answer) is cut (FitText, in bytes).
const disabledSize = 1024

func isDuplicateColumn(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1060
}

// isUnknownColumn reports MySQL's "unknown column" (1054): a table of an
// earlier version, read by a read-only store.
func isUnknownColumn(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1054
}

// OpenMySQLReadOnly opens the store on db for reading only (for status and
// check, which may run as a user that can only SELECT): it creates nothing,
// a missing table reads as no checkpoints, and Save returns ErrReadOnly.
func OpenMySQLReadOnly(db *sql.DB, table string) (*MySQL, error) {
	if table == "" {
		table = config.DefaultCheckpointTable
	}
	if !identRe.MatchString(table) {
		return nil, fmt.Errorf("checkpoint table name %q: use letters, digits, _ and $ only", table)
	}
	return &MySQL{db: db, table: table, readOnly: true}, nil
}

// IsMissingTable reports whether err is MySQL's "table doesn't exist" (1146).
func IsMissingTable(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1146
}

// columns are a checkpoint row's columns after name, in the order scanRow
// and upsertArgs use; columnsV1 those of a table of an earlier version.
const (
	columns   = "flavor, server_uuid, server_id, gtid_set, binlog_file, binlog_pos, updated_at, commit_time, disabled, acked, binlog_server_id, record, table_cursor"
	columnsV6 = "flavor, server_uuid, server_id, gtid_set, binlog_file, binlog_pos, updated_at, commit_time, disabled, acked, binlog_server_id, record"
	columnsV5 = "flavor, server_uuid, server_id, gtid_set, binlog_file, binlog_pos, updated_at, commit_time, disabled, acked, binlog_server_id"
	columnsV4 = "flavor, server_uuid, server_id, gtid_set, binlog_file, binlog_pos, updated_at, commit_time, disabled, acked"
	columnsV3 = "flavor, server_uuid, server_id, gtid_set, binlog_file, binlog_pos, updated_at, commit_time, disabled"
	columnsV2 = "flavor, server_uuid, server_id, gtid_set, binlog_file, binlog_pos, updated_at, commit_time"
	columnsV1 = "flavor, server_uuid, server_id, gtid_set, binlog_file, binlog_pos, updated_at"
)

// Load implements Store.
func (m *MySQL) Load(ctx context.Context, key string) (Checkpoint, error) {
	all, err := m.query(ctx, " WHERE name = ?", key)
	if err != nil {
		return Checkpoint{}, Denied(ctx, m.db, fmt.Errorf("load checkpoint %q: %w", key, err))
	}
	cp, ok := all[key]
	if !ok {
		return Checkpoint{}, ErrNotFound
	}
	return cp, nil
}

// List implements Lister.
func (m *MySQL) List(ctx context.Context) (map[string]Checkpoint, error) {
	all, err := m.query(ctx, "")
	if err != nil {
		return nil, Denied(ctx, m.db, fmt.Errorf("list checkpoints in %q: %w", m.table, err))
	}
	return all, nil
}

// query reads the rows that where (empty, or " WHERE …") selects. A table of
// an earlier version (no commit_time) is read as it is; a missing table
// reads as empty on a read-only store.
func (m *MySQL) query(ctx context.Context, where string, args ...any) (map[string]Checkpoint, error) {
	all, err := m.queryColumns(ctx, columns, where, args)
	// A table of an earlier version, opened read-only: each earlier
	// version's columns, newest first.
	for _, cols := range []string{columnsV6, columnsV5, columnsV4, columnsV3, columnsV2, columnsV1} {
		if !isUnknownColumn(err) {
			break
		}
		all, err = m.queryColumns(ctx, cols, where, args)
	}
	if m.readOnly && IsMissingTable(err) {
		return map[string]Checkpoint{}, nil
	}
	return all, err
}

func (m *MySQL) queryColumns(ctx context.Context, cols, where string, args []any) (map[string]Checkpoint, error) {
	rows, err := m.db.QueryContext(ctx, "SELECT name, "+cols+" FROM `"+m.table+"`"+where, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	all := map[string]Checkpoint{}
	scanned := 1 + strings.Count(cols, ",") + 1 // the name, then each column of cols: an earlier version's table has fewer
	for rows.Next() {
		var key string
		var cp Checkpoint
		var acked, record, cursor sql.NullString
		dest := []any{&key, &cp.Flavor, &cp.ServerUUID, &cp.ServerID, &cp.Position.GTIDSet, &cp.Position.File, &cp.Position.Pos, dbTime{&cp.UpdatedAt}, dbTime{&cp.CommitTime}, &cp.Disabled, &acked, &cp.Position.ServerID, &record, &cursor}
		if err := rows.Scan(dest[:scanned]...); err != nil {
			return nil, err
		}
		if acked.Valid && acked.String != "" {
			cp.Acked = new(Acked)
			if err := json.Unmarshal([]byte(acked.String), cp.Acked); err != nil {
				return nil, fmt.Errorf("checkpoint %q: %s: set it to NULL to send the events after the checkpoint's position again (none is skipped), or mend it", key, jsonProblem("acked", err, true))
			}
		}
		if cursor.Valid && cursor.String != "" {
			cp.Position.Table = new(event.TableCursor)
			if err := json.Unmarshal([]byte(cursor.String), cp.Position.Table); err != nil {
				return nil, fmt.Errorf("checkpoint %q: %s: it is a backfill's progress; delete this checkpoint row to run that backfill again from its start", key, jsonProblem("table_cursor", err, true))
			}
		}
		if record.Valid && record.String != "" {
			cp.Record = record.String
		}
		cp.UpdatedAt = cp.UpdatedAt.UTC()
		if !cp.CommitTime.IsZero() {
			cp.CommitTime = cp.CommitTime.UTC()
		}
		all[key] = cp
	}
	return all, rows.Err()
}

// Save implements Store: one transaction. Once Lock has taken the store's
// lock, the transaction first reads this relay's epoch row in the fencing
// table FOR UPDATE and writes only if the epoch is still the one Lock set:
// a relay that another one has taken over from gets ErrFenced, and never
// writes again.
func (m *MySQL) Save(ctx context.Context, key string, cp Checkpoint) error {
	if err := m.write(ctx, 1, func(ex execer) error {
		_, err := ex.ExecContext(ctx, m.upsert(1), m.upsertArgs(nil, key, cp)...)
		return err
	}); err != nil {
		return fmt.Errorf("save checkpoint %q: %w", key, err)
	}
	return nil
}

// rowsPerStatement is how many checkpoints SaveMany writes per INSERT
// statement; more are written by several statements of one transaction.
const rowsPerStatement = 500

// SaveMany implements BatchSaver: one transaction, fenced as Save is, of one
// multi-row INSERT … ON DUPLICATE KEY UPDATE per rowsPerStatement keys,
// written in key order (two writers lock rows in the same order).
func (m *MySQL) SaveMany(ctx context.Context, cps map[string]Checkpoint) error {
	if len(cps) == 0 && !m.readOnly {
		return nil
	}
	keys := slices.Sorted(maps.Keys(cps))
	chunks := slices.Collect(slices.Chunk(keys, rowsPerStatement))
	if err := m.write(ctx, len(chunks), func(ex execer) error { return m.upsertChunks(ctx, ex, chunks, cps) }); err != nil {
		return fmt.Errorf("save %d checkpoints: %w", len(cps), err)
	}
	return nil
}

// upsertChunks writes the checkpoints of cps named by each chunk of keys
// with one multi-row INSERT … ON DUPLICATE KEY UPDATE per chunk.
func (m *MySQL) upsertChunks(ctx context.Context, ex execer, chunks [][]string, cps map[string]Checkpoint) error {
	for _, chunk := range chunks {
		args := make([]any, 0, len(chunk)*14)
		for _, k := range chunk {
			args = m.upsertArgs(args, k, cps[k])
		}
		if _, err := ex.ExecContext(ctx, m.upsert(len(chunk)), args...); err != nil {
			return err
		}
	}
	return nil
}

// WriteMany implements BatchWriter: one transaction, fenced as Save is, of
// SaveMany's INSERTs for save and one DELETE per rowsPerStatement keys of del.
func (m *MySQL) WriteMany(ctx context.Context, save map[string]Checkpoint, del []string) error {
	del = slices.DeleteFunc(slices.Clone(del), func(k string) bool { _, ok := save[k]; return ok })
	if len(save) == 0 && len(del) == 0 && !m.readOnly {
		return nil
	}
	keys := slices.Sorted(maps.Keys(save))
	chunks := slices.Collect(slices.Chunk(keys, rowsPerStatement))
	slices.Sort(del)
	dels := slices.Collect(slices.Chunk(del, rowsPerStatement))
	if err := m.write(ctx, len(chunks)+len(dels), func(ex execer) error {
		if err := m.upsertChunks(ctx, ex, chunks, save); err != nil {
			return err
		}
		for _, chunk := range dels {
			args := make([]any, len(chunk))
			for i, k := range chunk {
				args[i] = k
			}
			q := "DELETE FROM `" + m.table + "` WHERE name IN (" + strings.Repeat(", ?", len(chunk))[2:] + ")"
			if _, err := ex.ExecContext(ctx, q, args...); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("save %d checkpoints and delete %d: %w", len(save), len(del), err)
	}
	return nil
}

// Delete implements Deleter, fenced as Save is.
func (m *MySQL) Delete(ctx context.Context, key string) error {
	if err := m.write(ctx, 1, func(ex execer) error {
		_, err := ex.ExecContext(ctx, "DELETE FROM `"+m.table+"` WHERE name = ?", key)
		return err
	}); err != nil {
		return fmt.Errorf("delete checkpoint %q: %w", key, err)
	}
	return nil
}

// execer is a transaction, or the database for one unfenced statement.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// write runs the statements of do (how many: statements) as one transaction.
// Once Lock has set a fencing epoch, the transaction first reads the epoch
// row FOR UPDATE and goes on only if it is still this relay's; otherwise
// the store is fenced for good and write returns ErrFenced. Unlocked, one
// statement runs on its own (it is a transaction by itself).
func (m *MySQL) write(ctx context.Context, statements int, do func(execer) error) error {
	if m.readOnly {
		return ErrReadOnly
	}
	epoch, err := m.lease.epochForSave()
	if err != nil {
		return err
	}
	if epoch == 0 && statements == 1 { // not locked (checkpoint.lock: false, or a tool): unfenced
		return do(m.db)
	}
	tx, err := m.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if epoch != 0 {
		var cur uint64
		err = tx.QueryRowContext(ctx, "SELECT epoch FROM `"+FenceTable+"` WHERE name = ? FOR UPDATE", m.table).Scan(&cur)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			m.lease.lose()
			return fmt.Errorf("%w (the fencing row of %s in %s is gone)", ErrFenced, m.table, FenceTable)
		case err != nil:
			return err
		case cur != epoch:
			m.lease.lose()
			return fmt.Errorf("%w (fencing epoch %d, this relay's %d)", ErrFenced, cur, epoch)
		}
	}
	if err := do(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// upsert is the INSERT … ON DUPLICATE KEY UPDATE of rows checkpoints.
func (m *MySQL) upsert(rows int) string {
	values := strings.Repeat(", (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)[2:]
	return "INSERT INTO `" + m.table + "` (name, " + columns + ") " +
		"VALUES " + values + " ON DUPLICATE KEY UPDATE flavor=VALUES(flavor), server_uuid=VALUES(server_uuid), " +
		"server_id=VALUES(server_id), gtid_set=VALUES(gtid_set), binlog_file=VALUES(binlog_file), binlog_pos=VALUES(binlog_pos), updated_at=VALUES(updated_at), commit_time=VALUES(commit_time), disabled=VALUES(disabled), acked=VALUES(acked), binlog_server_id=VALUES(binlog_server_id), record=VALUES(record), table_cursor=VALUES(table_cursor)"
}

// upsertArgs appends the arguments of one row of upsert to args.
func (m *MySQL) upsertArgs(args []any, key string, cp Checkpoint) []any {
	var commit any // NULL: unknown
	if !cp.CommitTime.IsZero() {
		commit = cp.CommitTime.UTC().Truncate(time.Microsecond)
	}
	var acked any // NULL: none listed
	if cp.Acked != nil {
		b := cp.Acked.appendJSON(nil)
		acked = string(b)
	}
	var record any // NULL: not one of the relay's own records
	if cp.Record != "" {
		record = cp.Record
	}
	var cursor any // NULL: a binlog position
	if cp.Position.Table != nil {
		b, _ := json.Marshal(cp.Position.Table)
		cursor = string(b)
	}
	return append(args, key, cp.Flavor, cp.ServerUUID, cp.ServerID, cp.Position.GTIDSet, cp.Position.File, cp.Position.Pos, cp.UpdatedAt.UTC().Truncate(time.Microsecond), commit, FitText(cp.Disabled, disabledSize), acked, cp.Position.ServerID, record, cursor)
}

// Close implements Store; the caller owns db and closes it.
func (m *MySQL) Close() error { return nil }

// String renders the checkpoint as JSON, for logs and messages.
func (cp Checkpoint) String() string {
	b, _ := json.Marshal(cp)
	return string(b)
}
