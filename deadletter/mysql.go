package deadletter

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
)

// MySQL keeps records in a table (default outbox_relay_dead_letters), created
// on first use, in the checkpoint database: utf8mb4 whatever the database's
// default, its id, sink, event id and aggregate id binary (compared as
// bytes: "hooks/strase" never selects "hooks/straße"). A record is kept
// whole in a LONGBLOB; a value too long for its column is kept there in a
// form that fits (checkpoint.FitKey, FitText). Its column tenant (bytes,
// with an index by tenant and id) holds the record's tenant, so that a
// tenant's List reads its own rows only. A table of an earlier version is
// brought up to date on open (checkpoint.UpgradeTable, then the tenant
// column, AddSideColumn); its rows are of no tenant.
type MySQL struct {
	db       *sql.DB
	table    string
	readOnly bool
}

// OpenMySQL opens the store on db.
func OpenMySQL(ctx context.Context, db *sql.DB, table string) (*MySQL, error) {
	table, err := checkpoint.SideTableName("dead-letter", table, config.DefaultDeadLetterTable)
	if err != nil {
		return nil, err
	}
	err = checkpoint.CreateSideTable(ctx, db, "dead-letter", table,
		"id VARBINARY(64) NOT NULL PRIMARY KEY,"+
			"sink VARBINARY(255) NOT NULL,"+
			"tenant "+tenantColumn.Def+","+
			"event_id VARBINARY(255) NOT NULL,"+
			"aggregate_id VARBINARY(255) NOT NULL,"+
			"reason TEXT NOT NULL,"+
			"attempts INT NOT NULL,"+
			"first_failed DATETIME(6) NOT NULL,"+
			"last_failed DATETIME(6) NOT NULL,"+
			"stored DATETIME(6) NOT NULL,"+
			"record LONGBLOB NOT NULL,"+
			"KEY ix_sink_stored (sink, stored),"+
			"KEY "+tenantColumn.Index)
	if err != nil {
		return nil, err
	}
	if err := checkpoint.UpgradeTable(ctx, db, "dead-letter", table, nil, keyColumns...); err != nil {
		return nil, err
	}
	if err := checkpoint.AddSideColumn(ctx, db, "dead-letter", table, tenantColumn, nil); err != nil {
		return nil, err
	}
	return &MySQL{db: db, table: table}, nil
}

// tenantColumn is the column of a record's tenant, added to a table of an
// earlier version.
var tenantColumn = checkpoint.SideColumn{Name: "tenant", Def: "VARBINARY(255) NOT NULL DEFAULT ''", Index: "ix_tenant (tenant, id)"}

// keyColumns are the table's binary columns, and their sizes: a longer
// value is kept in FitKey's form there, and whole in the record.
var keyColumns = []checkpoint.KeyColumn{{Name: "id", Size: 64}, {Name: "sink", Size: keySize}, {Name: "event_id", Size: keySize}, {Name: "aggregate_id", Size: keySize}}

// keySize is the size of the sink, tenant, event_id and aggregate_id
// columns.
const keySize = 255

// reasonSize is the size of the reason column, in bytes (TEXT): a longer
// reason is cut there, and kept whole in the record.
const reasonSize = 65535

// OpenMySQLReadOnly opens the store on db for reading only (dlq list): it
// creates nothing, a missing table lists as empty, and Put and Delete return
// ErrReadOnly.
func OpenMySQLReadOnly(db *sql.DB, table string) (*MySQL, error) {
	table, err := checkpoint.SideTableName("dead-letter", table, config.DefaultDeadLetterTable)
	if err != nil {
		return nil, err
	}
	return &MySQL{db: db, table: table, readOnly: true}, nil
}

// Put implements Putter (one autocommitted INSERT).
func (m *MySQL) Put(ctx context.Context, dl Letter) error {
	if m.readOnly {
		return ErrReadOnly
	}
	now := time.Now()
	r := recordOf(dl, newID(now), now)
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = m.db.ExecContext(ctx, "INSERT INTO `"+m.table+"` (id, sink, tenant, event_id, aggregate_id, reason, attempts, first_failed, last_failed, stored, record) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
		r.ID, checkpoint.FitKey(r.Sink, keySize), checkpoint.FitKey(r.Tenant, keySize), checkpoint.FitKey(r.Event.ID, keySize), checkpoint.FitKey(r.Event.AggregateID, keySize),
		checkpoint.FitText(r.Reason, reasonSize), r.Attempts, nz(r.First), nz(r.Last), r.Stored, b)
	if err != nil {
		return fmt.Errorf("store dead letter for event %s: %w", dl.Event.ID, err)
	}
	return nil
}

func nz(t time.Time) time.Time {
	if t.IsZero() {
		return time.Unix(0, 0).UTC()
	}
	return t
}

// List implements Store: a page (f.After, f.Limit) is read by the primary
// key ("id > ? ORDER BY id LIMIT n"; a tenant's by its index on (tenant,
// id)), whatever the table's size.
func (m *MySQL) List(ctx context.Context, f Filter) ([]Record, error) {
	var out []Record
	want := f.Limit
	for {
		recs, last, n, err := m.list(ctx, f)
		if err != nil {
			return nil, err
		}
		out = append(out, recs...)
		if want <= 0 || n < f.Limit || len(out) >= want {
			return out, nil
		}
		// The limit took rows of another tenant of the same FitKey: read on.
		f.After, f.Limit = last, want-len(out)
	}
}

// list reads the records of f from the table, once, and returns with them
// the id of the last row read and how many rows it read.
func (m *MySQL) list(ctx context.Context, f Filter) (out []Record, last string, n int, err error) {
	q := "SELECT id, record FROM `" + m.table + "` WHERE 1=1"
	var args []any
	if len(f.IDs) > 0 {
		q += " AND id IN (?" + strings.Repeat(",?", len(f.IDs)-1) + ")"
		for _, id := range f.IDs {
			args = append(args, id)
		}
	}
	if f.Sink != "" {
		q += " AND (sink = ? OR sink LIKE ?)"
		args = append(args, checkpoint.FitKey(f.Sink, keySize), strings.NewReplacer(`\`, `\\`, "%", `\%`, "_", `\_`).Replace(f.Sink)+"/%")
	}
	if f.Tenant != "" {
		q += " AND tenant = ?"
		args = append(args, checkpoint.FitKey(f.Tenant, keySize))
	}
	if !f.Since.IsZero() {
		q += " AND stored >= ?"
		args = append(args, f.Since.UTC())
	}
	if !f.Until.IsZero() {
		q += " AND stored < ?"
		args = append(args, f.Until.UTC())
	}
	if f.After != "" {
		q += " AND id > ?"
		args = append(args, f.After)
	}
	q += " ORDER BY id"
	if f.Limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", f.Limit)
	}
	rows, err := m.db.QueryContext(ctx, q, args...)
	if m.readOnly && checkpoint.IsMissingTable(err) {
		return nil, "", 0, nil
	}
	if m.readOnly && f.Tenant != "" && checkpoint.IsUnknownColumn(err) {
		return nil, "", 0, nil // a table of an earlier version: no record has a tenant
	}
	if err != nil {
		return nil, "", 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&last, &b); err != nil {
			return nil, "", 0, err
		}
		n++
		var r Record
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, "", 0, err
		}
		if f.Tenant != "" && r.Tenant != f.Tenant {
			continue // another tenant's of the same FitKey
		}
		out = append(out, r)
	}
	return out, last, n, rows.Err()
}

// Delete implements Store.
func (m *MySQL) Delete(ctx context.Context, ids ...string) error {
	if m.readOnly {
		return ErrReadOnly
	}
	if len(ids) == 0 {
		return nil
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	_, err := m.db.ExecContext(ctx, "DELETE FROM `"+m.table+"` WHERE id IN (?"+strings.Repeat(",?", len(ids)-1)+")", args...)
	return err
}

// Close implements Store; the caller owns db.
func (m *MySQL) Close() error { return nil }
