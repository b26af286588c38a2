package checkpoint

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/go-sql-driver/mysql"
)

// MySQL keeps checkpoints in a table (default outbox_relay_checkpoints) of a
// database reached through its own connection. The table is created on first
// use. The relay never treats writes to this table as outbox events: only the
// configured outbox tables produce events.
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

// OpenMySQL opens the store on db, creating table if it does not exist.
func OpenMySQL(ctx context.Context, db *sql.DB, table string) (*MySQL, error) {
	if table == "" {
		table = "outbox_relay_checkpoints"
	}
	if !identRe.MatchString(table) {
		return nil, fmt.Errorf("checkpoint table name %q: use letters, digits, _ and $ only", table)
	}
	_, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS `"+table+"` ("+
		"name VARCHAR(255) NOT NULL PRIMARY KEY,"+
		"flavor VARCHAR(16) NOT NULL,"+
		"server_uuid VARCHAR(64) NOT NULL DEFAULT '',"+
		"server_id INT UNSIGNED NOT NULL DEFAULT 0,"+
		"gtid_set TEXT NOT NULL,"+
		"binlog_file VARCHAR(512) NOT NULL DEFAULT '',"+
		"binlog_pos INT UNSIGNED NOT NULL DEFAULT 0,"+
		"updated_at DATETIME(6) NOT NULL,"+
		"commit_time DATETIME(6) NULL"+
		") ENGINE=InnoDB")
	if err != nil {
		return nil, fmt.Errorf("create checkpoint table %q: %w", table, err)
	}
	// A table of an earlier version has no commit_time: add it. Earlier
	// versions name their columns, so they keep working on the new table
	// (their saves leave commit_time as it was: older, never newer, than
	// the position, which only holds pruning back).
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = 'commit_time'", table).Scan(&n); err != nil {
		return nil, fmt.Errorf("inspect checkpoint table %q: %w", table, err)
	}
	if n == 0 {
		if _, err := db.ExecContext(ctx, "ALTER TABLE `"+table+"` ADD COLUMN commit_time DATETIME(6) NULL"); err != nil && !isDuplicateColumn(err) {
			return nil, fmt.Errorf("add commit_time to checkpoint table %q: %w", table, err)
		}
	}
	return &MySQL{db: db, table: table}, nil
}

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
		table = "outbox_relay_checkpoints"
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

// Load implements Store.
func (m *MySQL) Load(ctx context.Context, key string) (Checkpoint, error) {
	var cp Checkpoint
	err := m.db.QueryRowContext(ctx, "SELECT flavor, server_uuid, server_id, gtid_set, binlog_file, binlog_pos, updated_at, commit_time FROM `"+m.table+"` WHERE name = ?", key).
		Scan(&cp.Flavor, &cp.ServerUUID, &cp.ServerID, &cp.Position.GTIDSet, &cp.Position.File, &cp.Position.Pos, dbTime{&cp.UpdatedAt}, dbTime{&cp.CommitTime})
	if isUnknownColumn(err) { // a table of an earlier version, opened read-only
		cp = Checkpoint{}
		err = m.db.QueryRowContext(ctx, "SELECT flavor, server_uuid, server_id, gtid_set, binlog_file, binlog_pos, updated_at FROM `"+m.table+"` WHERE name = ?", key).
			Scan(&cp.Flavor, &cp.ServerUUID, &cp.ServerID, &cp.Position.GTIDSet, &cp.Position.File, &cp.Position.Pos, dbTime{&cp.UpdatedAt})
	}
	if errors.Is(err, sql.ErrNoRows) || m.readOnly && IsMissingTable(err) {
		return Checkpoint{}, ErrNotFound
	}
	if err != nil {
		return Checkpoint{}, fmt.Errorf("load checkpoint %q: %w", key, err)
	}
	cp.UpdatedAt = cp.UpdatedAt.UTC()
	if !cp.CommitTime.IsZero() {
		cp.CommitTime = cp.CommitTime.UTC()
	}
	return cp, nil
}

// Save implements Store: one transaction. Once Lock has taken the store's
// lock, the transaction first reads this relay's epoch row in the fencing
// table FOR UPDATE and writes only if the epoch is still the one Lock set:
// a relay that another one has taken over from gets ErrFenced, and never
// writes again.
func (m *MySQL) Save(ctx context.Context, key string, cp Checkpoint) error {
	if m.readOnly {
		return ErrReadOnly
	}
	epoch, err := m.lease.epochForSave()
	if err != nil {
		return fmt.Errorf("save checkpoint %q: %w", key, err)
	}
	if epoch == 0 { // not locked (checkpoint.lock: false, or a tool): unfenced
		if _, err := m.db.ExecContext(ctx, m.upsert(), m.upsertArgs(key, cp)...); err != nil {
			return fmt.Errorf("save checkpoint %q: %w", key, err)
		}
		return nil
	}
	tx, err := m.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("save checkpoint %q: %w", key, err)
	}
	defer tx.Rollback()
	var cur uint64
	err = tx.QueryRowContext(ctx, "SELECT epoch FROM `"+FenceTable+"` WHERE name = ? FOR UPDATE", m.table).Scan(&cur)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		m.lease.lose()
		return fmt.Errorf("save checkpoint %q: %w (the fencing row of %s in %s is gone)", key, ErrFenced, m.table, FenceTable)
	case err != nil:
		return fmt.Errorf("save checkpoint %q: %w", key, err)
	case cur != epoch:
		m.lease.lose()
		return fmt.Errorf("save checkpoint %q: %w (fencing epoch %d, this relay's %d)", key, ErrFenced, cur, epoch)
	}
	if _, err := tx.ExecContext(ctx, m.upsert(), m.upsertArgs(key, cp)...); err != nil {
		return fmt.Errorf("save checkpoint %q: %w", key, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("save checkpoint %q: %w", key, err)
	}
	return nil
}

func (m *MySQL) upsert() string {
	return "INSERT INTO `" + m.table + "` (name, flavor, server_uuid, server_id, gtid_set, binlog_file, binlog_pos, updated_at, commit_time) " +
		"VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE flavor=VALUES(flavor), server_uuid=VALUES(server_uuid), " +
		"server_id=VALUES(server_id), gtid_set=VALUES(gtid_set), binlog_file=VALUES(binlog_file), binlog_pos=VALUES(binlog_pos), updated_at=VALUES(updated_at), commit_time=VALUES(commit_time)"
}

func (m *MySQL) upsertArgs(key string, cp Checkpoint) []any {
	var commit any // NULL: unknown
	if !cp.CommitTime.IsZero() {
		commit = cp.CommitTime.UTC().Truncate(time.Microsecond)
	}
	return []any{key, cp.Flavor, cp.ServerUUID, cp.ServerID, cp.Position.GTIDSet, cp.Position.File, cp.Position.Pos, cp.UpdatedAt.UTC().Truncate(time.Microsecond), commit}
}

// Close implements Store; the caller owns db and closes it.
func (m *MySQL) Close() error { return nil }

// String renders the checkpoint as JSON, for logs and messages.
func (cp Checkpoint) String() string {
	b, _ := json.Marshal(cp)
	return string(b)
}
