package attempts

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
)

// MySQL keeps attempts in a table (default outbox_relay_attempts) of the
// checkpoint database, created on first use. Its id grows with the order
// rows are stored; it is indexed for the searches Query makes: by sink and
// endpoint, event id, tenant, status, outcome (each with id, so a search
// reads newest first without sorting) and by time (ranges and pruning).
// Names, ids and the tenant compare as bytes, as the relay's keys do
// everywhere (VARBINARY columns); its text columns are utf8mb4, whatever
// the database's default, and a table of an earlier version is brought
// up to date on open (checkpoint.UpgradeTable).
type MySQL struct {
	db       *sql.DB
	table    string
	readOnly bool
}

// maxRowsPerInsert caps the rows of one multi-row INSERT (17 placeholders
// each, well under the server's 65535 and its max_allowed_packet).
const maxRowsPerInsert = 500

// OpenMySQL opens the store on db (the checkpoint database), creating
// table (empty: the default) if it does not exist.
func OpenMySQL(ctx context.Context, db *sql.DB, table string) (*MySQL, error) {
	table, err := tableName(table)
	if err != nil {
		return nil, err
	}
	err = checkpoint.CreateSideTable(ctx, db, "attempts", table,
		"id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,"+
			"at DATETIME(6) NOT NULL,"+
			"sink VARBINARY(255) NOT NULL,"+
			"endpoint VARBINARY(255) NOT NULL,"+
			"tenant VARBINARY(255) NOT NULL DEFAULT '',"+
			"event_id VARBINARY(255) NOT NULL,"+
			"event_type VARCHAR(255) NOT NULL DEFAULT '',"+
			"attempt INT NOT NULL,"+
			"status SMALLINT UNSIGNED NOT NULL DEFAULT 0,"+
			"error_class VARCHAR(16) NOT NULL DEFAULT '',"+
			"error TEXT NULL,"+
			"outcome VARCHAR(16) NOT NULL,"+
			"duration_ns BIGINT NOT NULL,"+
			"answer VARBINARY("+fmt.Sprint(AnswerLimit)+") NULL,"+
			"replay VARBINARY(255) NOT NULL DEFAULT '',"+
			"committed DATETIME(6) NULL,"+
			"gtid TEXT NULL,"+
			"binlog_file VARCHAR(512) NOT NULL DEFAULT '',"+
			"binlog_pos INT UNSIGNED NOT NULL DEFAULT 0,"+
			"KEY ix_endpoint (sink, endpoint, id),"+
			"KEY ix_event (event_id, id),"+
			"KEY ix_tenant (tenant, id),"+
			"KEY ix_status (status, id),"+
			"KEY ix_outcome (outcome, id),"+
			"KEY ix_at (at)")
	if err != nil {
		return nil, err
	}
	if err := checkpoint.UpgradeTable(ctx, db, "attempts", table, nil); err != nil {
		return nil, err
	}
	return &MySQL{db: db, table: table}, nil
}

// OpenMySQLReadOnly opens the store on db for reading only (the attempts
// command, which may run as a user that can only SELECT): it creates
// nothing, a missing table reads as no attempts, and Append and Prune
// return ErrReadOnly.
func OpenMySQLReadOnly(db *sql.DB, table string) (*MySQL, error) {
	table, err := tableName(table)
	if err != nil {
		return nil, err
	}
	return &MySQL{db: db, table: table, readOnly: true}, nil
}

func tableName(table string) (string, error) {
	return checkpoint.SideTableName("attempts", table, config.DefaultAttemptsTable)
}

const mysqlColumns = "at, sink, endpoint, tenant, event_id, event_type, attempt, status, error_class, error, outcome, duration_ns, answer, replay, committed, gtid, binlog_file, binlog_pos"

// Append implements Store: multi-row INSERTs of up to maxRowsPerInsert
// rows, in one transaction, so the batch's ids grow in its order. A
// statement the store refuses for a value it cannot keep
// (checkpoint.Refused) is written again row by row: the rows it takes are
// stored, and the ones it refuses are named in a *RefusedError.
func (m *MySQL) Append(ctx context.Context, batch []Attempt) error {
	if m.readOnly {
		return ErrReadOnly
	}
	if len(batch) == 0 {
		return nil
	}
	tx, err := m.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store %d attempts: %w", len(batch), err)
	}
	defer tx.Rollback()
	const row = "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
	insert := "INSERT INTO `" + m.table + "` (" + mysqlColumns + ") VALUES " + row
	var refused *RefusedError
	for off := 0; off < len(batch); off += maxRowsPerInsert {
		chunk := batch[off:min(off+maxRowsPerInsert, len(batch))]
		args := make([]any, 0, len(chunk)*18)
		for i := range chunk {
			args = appendRow(args, normal(chunk[i]))
		}
		_, err := tx.ExecContext(ctx, insert+strings.Repeat(","+row, len(chunk)-1), args...)
		if checkpoint.Refused(err) {
			// The refused statement is undone alone; the transaction goes
			// on, one row at a time.
			for i := range chunk {
				_, err := tx.ExecContext(ctx, insert, args[i*18:(i+1)*18]...)
				if checkpoint.Refused(err) {
					if refused == nil {
						refused = &RefusedError{Batch: batch, Errs: map[int]error{}}
					}
					refused.Errs[off+i] = err
					continue
				}
				if err != nil {
					return checkpoint.Denied(ctx, m.db, fmt.Errorf("store %d attempts in table %q: %w", len(chunk), m.table, err))
				}
			}
			continue
		}
		if err != nil {
			return checkpoint.Denied(ctx, m.db, fmt.Errorf("store %d attempts in table %q: %w", len(chunk), m.table, err))
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store attempts in table %q: %w", m.table, err)
	}
	if refused != nil {
		return refused
	}
	return nil
}

// appendRow appends the arguments of a's row of mysqlColumns to args.
func appendRow(args []any, a Attempt) []any {
	return append(args, a.Time, a.Sink, a.Endpoint, a.Tenant, a.EventID, a.EventType, a.Number,
		a.Status, a.Class, nullString(a.Error), a.Outcome, int64(a.Duration), a.Answer, a.Replay,
		nullTime(a.Committed), nullString(a.GTID), a.File, a.Pos)
}

func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }
func nullTime(t time.Time) sql.NullTime  { return sql.NullTime{Time: t, Valid: !t.IsZero()} }

// Search implements Store.
func (m *MySQL) Search(ctx context.Context, q Query) ([]Record, error) {
	q = q.stored()
	var where []string
	var args []any
	add := func(cond string, v any) {
		where = append(where, cond)
		args = append(args, v)
	}
	if q.Before > 0 {
		add("id < ?", q.Before)
	}
	if q.Sink != "" {
		add("sink = ?", q.Sink)
	}
	if q.Endpoint != "" {
		add("endpoint = ?", q.Endpoint)
	}
	if q.Tenant != "" {
		add("tenant = ?", q.Tenant)
	}
	if q.EventID != "" {
		add("event_id = ?", q.EventID)
	}
	if q.Status != 0 {
		add("status = ?", q.Status)
	}
	if q.Failed {
		add("outcome <> ?", OutcomeDelivered)
	}
	if !q.Since.IsZero() {
		add("at >= ?", micro(q.Since))
	}
	if !q.Until.IsZero() {
		add("at < ?", micro(q.Until))
	}
	s := "SELECT id, " + mysqlColumns + " FROM `" + m.table + "`"
	if len(where) > 0 {
		s += " WHERE " + strings.Join(where, " AND ")
	}
	s += fmt.Sprintf(" ORDER BY id DESC LIMIT %d", q.Size())
	rows, err := m.db.QueryContext(ctx, s, args...)
	if m.readOnly && checkpoint.IsMissingTable(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("search attempts in table %q: %w", m.table, err)
	}
	defer rows.Close()
	var out []Record
	for rows.Next() {
		var (
			r             Record
			errText, gtid sql.NullString
			committed     sql.NullTime
			dur           int64
		)
		a := &r.Attempt
		if err := rows.Scan(&r.ID, &a.Time, &a.Sink, &a.Endpoint, &a.Tenant, &a.EventID, &a.EventType, &a.Number,
			&a.Status, &a.Class, &errText, &a.Outcome, &dur, &a.Answer, &a.Replay, &committed, &gtid, &a.File, &a.Pos); err != nil {
			return nil, fmt.Errorf("search attempts in table %q: %w", m.table, err)
		}
		a.Error, a.GTID, a.Duration = errText.String, gtid.String, time.Duration(dur)
		a.Time = a.Time.UTC()
		if committed.Valid {
			a.Committed = committed.Time.UTC()
		}
		if len(a.Answer) == 0 {
			a.Answer = nil
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// pruneChunk caps the rows one DELETE removes (a short transaction).
const pruneChunk = 5000

// Prune implements Store, deleting in chunks of pruneChunk rows.
func (m *MySQL) Prune(ctx context.Context, before time.Time, keep int64) (int64, error) {
	if m.readOnly {
		return 0, ErrReadOnly
	}
	var n int64
	del := func(cond string, arg any) error {
		for {
			res, err := m.db.ExecContext(ctx, "DELETE FROM `"+m.table+"` WHERE "+cond+fmt.Sprintf(" ORDER BY id LIMIT %d", pruneChunk), arg)
			if err != nil {
				return fmt.Errorf("prune attempts in table %q: %w", m.table, err)
			}
			k, _ := res.RowsAffected()
			n += k
			if k < pruneChunk {
				return nil
			}
		}
	}
	if !before.IsZero() {
		if err := del("at < ?", micro(before)); err != nil {
			return n, err
		}
	}
	if keep > 0 {
		// The id of the newest row beyond keep: it and every older row go.
		var last int64
		err := m.db.QueryRowContext(ctx, "SELECT id FROM `"+m.table+"` ORDER BY id DESC LIMIT 1 OFFSET ?", keep).Scan(&last)
		switch {
		case err == sql.ErrNoRows:
		case err != nil:
			return n, fmt.Errorf("prune attempts in table %q: %w", m.table, err)
		default:
			if err := del("id <= ?", last); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// Close implements Store; the caller owns db.
func (m *MySQL) Close() error { return nil }
