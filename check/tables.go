package check

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/internal/grants"
	"github.com/outbox-relay/outbox-relay/internal/sqlident"
	"github.com/outbox-relay/outbox-relay/sink"
)

// Column kinds, from information_schema.COLUMNS.DATA_TYPE.
var (
	textTypes = set("char", "varchar", "tinytext", "text", "mediumtext", "longtext",
		"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob")
	payloadTypes = set("json", "char", "varchar", "tinytext", "text", "mediumtext", "longtext",
		"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob")
	integerTypes = set("tinyint", "smallint", "mediumint", "int", "integer", "bigint")
	// The binlog carries an ENUM's or SET's index, not its text.
	indexTypes = set("enum", "set")
)

func set(xs ...string) map[string]bool {
	m := map[string]bool{}
	for _, x := range xs {
		m[x] = true
	}
	return m
}

func tablesResults(ctx context.Context, db *sql.DB, s server, cfg *config.Config) []Result {
	var out []Result
	for _, t := range cfg.Tables {
		schema, name := t.SchemaTable()
		cols, err := columnTypes(ctx, db, schema, name)
		if err != nil {
			out = append(out, Result{Name: NameTables, Status: Fail,
				Detail: fmt.Sprintf("%s: cannot read its columns: %v", t.Name, err),
				Fix:    grants.Statement([]string{"SELECT"}, schema, name, s.user)})
			continue
		}
		if len(cols) == 0 {
			// information_schema hides a table the user may not read:
			// the server tells "not allowed" (1142) from "no such table"
			// (1146) when the table is read.
			if r, ok := unreadableTable(ctx, db, s, t); ok {
				out = append(out, r)
				continue
			}
		}
		out = append(out, tableDecision(t, cols))
	}
	for _, s := range cfg.Sinks {
		if k, ok := sink.KindOf(s.Type); ok && k.CheckSource != nil {
			for _, f := range k.CheckSource(ctx, db, cfg, s) {
				out = append(out, findingResult(f))
			}
		}
	}
	return out
}

// findingResult is a kind's finding as check's result.
func findingResult(f sink.Finding) Result {
	r := Result{Name: NameTables, Status: Pass, Detail: f.Detail, Fix: f.Fix}
	if f.Insecure {
		r.Name = NameInsecureSettings
	}
	switch f.Status {
	case sink.Warned:
		r.Status = Warn
	case sink.Failed:
		r.Status = Fail
	}
	return r
}

// unreadableTable reports a table whose columns information_schema did not
// show because the user may not read it (a GRANT fixes it, not a CREATE
// TABLE); ok is false when the server says it does not exist.
func unreadableTable(ctx context.Context, db *sql.DB, s server, t config.Table) (Result, bool) {
	schema, name := t.SchemaTable()
	rows, err := db.QueryContext(ctx, "SELECT * FROM "+sqlident.Table(schema, name)+" LIMIT 0")
	if err == nil {
		rows.Close()
		return Result{}, false
	}
	if !grants.Denied(err) {
		return Result{}, false
	}
	return Result{Name: NameTables, Status: Fail,
		Detail: fmt.Sprintf("%s cannot be read by %s (%v), so its columns cannot be checked", t.Name, s.user, err),
		Fix:    grants.Statement([]string{"SELECT"}, schema, name, s.user) + " (if the table does not exist, create it or fix tables[].name)"}, true
}

// columnTypes maps lower-case column names to DATA_TYPE.
func columnTypes(ctx context.Context, db *sql.DB, schema, name string) (map[string]string, error) {
	rows, err := db.QueryContext(ctx, "SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?", schema, name)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols := map[string]string{}
	for rows.Next() {
		var c, typ string
		if err := rows.Scan(&c, &typ); err != nil {
			return nil, err
		}
		cols[strings.ToLower(c)] = strings.ToLower(typ)
	}
	return cols, rows.Err()
}

// tableDecision judges one outbox table's columns (name → DATA_TYPE).
func tableDecision(t config.Table, cols map[string]string) Result {
	r := Result{Name: NameTables}
	if len(cols) == 0 {
		r.Status = Fail
		r.Detail = fmt.Sprintf("%s does not exist (or the relay's user cannot see it)", t.Name)
		schema, name := t.SchemaTable()
		r.Fix = fmt.Sprintf("create it (CREATE TABLE `%s`.`%s` (id CHAR(36) PRIMARY KEY, aggregatetype VARCHAR(64), aggregateid VARCHAR(64), type VARCHAR(64), payload JSON)), fix tables[].name, or GRANT SELECT on it", schema, name)
		return r
	}
	var fails, warns, fixes, seen []string
	field := func(key, col string, payload bool) {
		col = config.Column(col)
		if col == "" {
			return
		}
		typ, ok := cols[strings.ToLower(col)]
		switch {
		case !ok:
			fails = append(fails, fmt.Sprintf("no column %q for %s", col, key))
			fix := fmt.Sprintf("set tables[].columns.%s to an existing column of %s", key, t.Name)
			if key == "aggregate_type" || key == "type" {
				fix += ` (or "-" if the table has none)`
			}
			fixes = append(fixes, fix)
		case payload && !payloadTypes[typ]:
			fails = append(fails, fmt.Sprintf("payload column %q is %s, not a JSON/TEXT/BLOB/VARCHAR type", col, typ))
			fixes = append(fixes, fmt.Sprintf("ALTER TABLE %s MODIFY %s JSON (or LONGTEXT/LONGBLOB)", t.Name, col))
		case payload || textTypes[typ]:
			seen = append(seen, col+" "+typ)
		case integerTypes[typ]:
			warns = append(warns, fmt.Sprintf("%s column %q is %s: sent as its decimal text", key, col, typ))
			if key == "id" {
				fixes = append(fixes, fmt.Sprintf("an event id should be unique across tables and restores: keep %s if it is, or use time-ordered UUIDs (UUIDv7) in CHAR(36), which grow with inserts as a backfill's order needs and which tables[].switch_over accepts (not BINARY(16): switch_over refuses it; not random UUIDv4: a backfill sends them out of commit order)", col))
			}
		case indexTypes[typ]:
			fails = append(fails, fmt.Sprintf("%s column %q is %s: the binlog carries its index, not its text", key, col, typ))
			fixes = append(fixes, fmt.Sprintf("ALTER TABLE %s MODIFY %s VARCHAR(64)", t.Name, col))
		default:
			fails = append(fails, fmt.Sprintf("%s column %q is %s, not a string or binary type", key, col, typ))
			fixes = append(fixes, fmt.Sprintf("ALTER TABLE %s MODIFY %s VARCHAR(64) (or map tables[].columns.%s to a string column)", t.Name, col, key))
		}
	}
	c := t.Columns
	field("id", c.ID, false)
	field("aggregate_type", c.AggregateType, false)
	field("aggregate_id", c.AggregateID, false)
	field("type", c.Type, false)
	field("payload", c.Payload, true)
	for _, h := range t.Headers {
		typ, ok := cols[strings.ToLower(h)]
		switch {
		case !ok:
			fails = append(fails, fmt.Sprintf("no column %q listed in headers", h))
			fixes = append(fixes, fmt.Sprintf("remove %q from tables[].headers of %s, or add the column", h, t.Name))
		case indexTypes[typ]:
			fails = append(fails, fmt.Sprintf("header column %q is %s: the binlog carries its index, not its text", h, typ))
			fixes = append(fixes, fmt.Sprintf("ALTER TABLE %s MODIFY %s VARCHAR(64)", t.Name, h))
		}
	}
	switch {
	case len(fails) > 0:
		r.Status = Fail
		r.Detail = t.Name + ": " + strings.Join(append(fails, warns...), "; ")
	case len(warns) > 0:
		r.Status = Warn
		r.Detail = t.Name + ": " + strings.Join(warns, "; ")
	default:
		r.Detail = fmt.Sprintf("%s: %s", t.Name, strings.Join(seen, ", "))
		return r
	}
	r.Fix = strings.Join(fixes, "; ")
	if r.Fix == "" {
		r.Fix = "nothing required; use string columns to silence this"
	}
	return r
}
