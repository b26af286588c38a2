package check

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/internal/grants"
	"github.com/outbox-relay/outbox-relay/internal/sqlident"
	"github.com/outbox-relay/outbox-relay/sink/webhook"
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
		if wc := webhook.Section(s); wc != nil && wc.EndpointsTable != nil {
			tc := wc.EndpointsTable.WithDefaults()
			r, rows := endpointsTableResult(ctx, db, cfg, s, tc)
			out = append(out, r)
			out = append(out, tableInsecureResults(s.Name, tc, rows)...)
		}
	}
	return out
}

// endpointsTableResult reads a webhook sink's endpoints table as the relay
// will at start, and returns the usable rows with its result. A table that cannot be read FAILs (the relay does not
// start); bad rows WARN: the relay skips their endpoints (state invalid)
// and runs the others, and an UPDATE that fixes a row starts it, without
// a restart.
func endpointsTableResult(ctx context.Context, db *sql.DB, cfg *config.Config, sc config.Sink, tc webhook.TableConfig) (Result, []webhook.TableEndpoint) {
	sink := sc.Name
	rows, bad, err := tc.Load(ctx, db)
	if err != nil {
		fix := "make the table as deploy/outbox_endpoints.sql declares it"
		switch msg := err.Error(); {
		case strings.Contains(msg, "does not exist"):
			fix = "create it with deploy/outbox_endpoints.sql, or fix endpoints_table.table"
		case strings.Contains(msg, "GRANT"):
			fix = fmt.Sprintf("GRANT SELECT ON %s TO the relay's user", tc.Table)
		}
		return Result{Name: NameTables, Status: Fail, Detail: fmt.Sprintf("sink %s: endpoints table: %v", sink, err), Fix: fix}, nil
	}
	if h := tc.TenantHeader; h != "" {
		found := false
		for _, t := range cfg.Tables {
			found = found || slices.Contains(t.Headers, h)
		}
		if !found {
			return Result{Name: NameTables, Status: Fail,
				Detail: fmt.Sprintf("sink %s: endpoints_table.tenant_header %q is not a header of any outbox table, so no event has it and no endpoint with a tenant gets anything", sink, h),
				Fix:    fmt.Sprintf("add %q to tables[].headers (a column of the outbox table), or name the header that holds the tenant", h)}, rows
		}
	}
	static := webhook.NewStaticNames(webhook.Section(sc).Endpoints)
	var problems, fixes []string
	egress, clash := false, false
	for _, b := range bad {
		if _, ok := static.Taken(b.ID); ok {
			continue // named below, with the clash
		}
		problems = append(problems, b.Error())
		var ee *webhook.EgressError
		egress = egress || errors.As(b, &ee)
	}
	enabled, usable := 0, 0
	for _, r := range rows {
		if _, ok := static.Taken(r.ID); ok {
			continue
		}
		usable++
		if r.Enabled {
			enabled++
		}
	}
	for _, id := range append(webhook.RowIDs(rows), webhook.BadRowIDs(bad)...) {
		if name, ok := static.Taken(id); ok {
			clash = true
			problems = append(problems, fmt.Sprintf("endpoints table %s, row %q: has the name of endpoint %s/%s of the configuration; the relay refuses the row (the configured endpoint runs as configured)", tc.Table, id, sink, name))
		}
	}
	summary := fmt.Sprintf("sink %s: endpoints table %s: %d endpoints, %d enabled", sink, tc.Table, usable, enabled)
	if len(problems) == 0 {
		return Result{Name: NameTables, Status: Pass, Detail: summary}, rows
	}
	if clash {
		fixes = append(fixes, "rename a row that has the name of an endpoint of the configuration (UPDATE … SET id = 'another-name')")
	}
	if egress {
		fixes = append(fixes, "for a url the egress policy refuses: correct the url, or, if the address is intended, add it to endpoints_table.defaults.egress.allow")
	}
	fixes = append(fixes, "fix each row named with an UPDATE: a running relay starts its endpoint at once, no restart needed")
	return Result{Name: NameTables, Status: Warn,
		Detail: fmt.Sprintf("%s; %d row(s) cannot be used: the relay skips their endpoints (state invalid) and runs the others:\n%s", summary, len(problems), strings.Join(problems, "\n")),
		Fix:    strings.Join(fixes, "; ")}, rows
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
				fixes = append(fixes, fmt.Sprintf("an event id should be unique across tables and restores: use CHAR(36) or BINARY(16) UUIDs for %s", col))
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
