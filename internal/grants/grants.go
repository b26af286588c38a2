// Package grants reads what a MySQL or MariaDB account may do, from SHOW
// GRANTS, so that a command can say which GRANT to run before a statement
// fails with "command denied". It holds no state; its functions are safe
// for concurrent use.
package grants

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"

	driver "github.com/go-sql-driver/mysql"
)

// Grant is one "GRANT privs ON object TO ..." line of SHOW GRANTS.
type Grant struct {
	Privs   map[string]bool // upper-case privilege names, "ALL PRIVILEGES" for ALL
	Columns map[string]bool // privileges granted on some columns only
	DB      string          // "*" for *.*; a pattern with % and _ at db level
	Table   string          // "*" for db.* and *.*
}

var grantRe = regexp.MustCompile(`(?is)^GRANT\s+(.+?)\s+ON\s+(.+?)\s+TO\s+`)

// Parse reads SHOW GRANTS lines. Role grants ("GRANT role TO user"),
// PROXY, and routine grants are skipped: MariaDB lists the active roles'
// privileges as lines of their own.
func Parse(lines []string) []Grant {
	var out []Grant
	for _, l := range lines {
		m := grantRe.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil {
			continue
		}
		obj := strings.TrimSpace(m[2])
		up := strings.ToUpper(obj)
		if strings.HasPrefix(up, "FUNCTION ") || strings.HasPrefix(up, "PROCEDURE ") || strings.HasPrefix(up, "PACKAGE ") {
			continue
		}
		if strings.HasPrefix(up, "TABLE ") {
			obj = strings.TrimSpace(obj[len("TABLE "):])
		}
		db, table, ok := splitObject(obj)
		if !ok {
			continue
		}
		g := Grant{Privs: map[string]bool{}, Columns: map[string]bool{}, DB: db, Table: table}
		for _, p := range splitPrivs(m[1]) {
			name, cols, hasCols := strings.Cut(p, "(")
			name = strings.ToUpper(strings.Join(strings.Fields(name), " "))
			if name == "PROXY" {
				continue
			}
			if name == "ALL" {
				name = "ALL PRIVILEGES"
			}
			if hasCols && strings.TrimSpace(cols) != "" {
				g.Columns[name] = true
			} else {
				g.Privs[name] = true
			}
		}
		out = append(out, g)
	}
	return out
}

// splitPrivs splits "SELECT (`a`, `b`), INSERT" at commas outside parentheses.
func splitPrivs(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, r := range s {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	return append(out, strings.TrimSpace(s[start:]))
}

// splitObject splits `db`.`table` (or db.*, *.*, *) into unquoted parts.
func splitObject(s string) (db, table string, ok bool) {
	var parts []string
	var cur strings.Builder
	quoted := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '`' && quoted && i+1 < len(s) && s[i+1] == '`':
			cur.WriteByte('`')
			i++
		case c == '`':
			quoted = !quoted
		case c == '.' && !quoted:
			parts = append(parts, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(c)
		}
	}
	parts = append(parts, cur.String())
	switch len(parts) {
	case 1:
		if parts[0] == "*" {
			return "*", "*", true
		}
		return "", "", false
	case 2:
		return parts[0], parts[1], true
	}
	return "", "", false
}

// DBMatches reports whether a db-level grant's name (with % and _ wildcards,
// \ escaping them) covers db.
func DBMatches(pattern, db string) bool {
	if pattern == "*" {
		return true
	}
	var re strings.Builder
	re.WriteString("^")
	for i := 0; i < len(pattern); i++ {
		switch c := pattern[i]; {
		case c == '\\' && i+1 < len(pattern):
			i++
			re.WriteString(regexp.QuoteMeta(string(pattern[i])))
		case c == '%':
			re.WriteString(".*")
		case c == '_':
			re.WriteString(".")
		default:
			re.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	re.WriteString("$")
	ok, _ := regexp.MatchString(re.String(), db)
	return ok
}

// Global reports whether g is on *.*.
func (g Grant) Global() bool { return g.DB == "*" && g.Table == "*" }

// Has reports whether g holds one of names (ALL PRIVILEGES holds every one).
func (g Grant) Has(names ...string) bool {
	if g.Privs["ALL PRIVILEGES"] {
		return true
	}
	for _, n := range names {
		if g.Privs[n] {
			return true
		}
	}
	return false
}

// Covers reports whether g is on schema.table: global, on the database
// (wildcards included), or on the table.
func (g Grant) Covers(schema, table string) bool {
	return g.Global() || (g.Table == "*" && DBMatches(g.DB, schema)) || (g.DB == schema && g.Table == table)
}

// Missing returns those of privs that no grant gives on schema.table.
func Missing(gs []Grant, schema, table string, privs ...string) []string {
	var out []string
	for _, p := range privs {
		found := false
		for _, g := range gs {
			if g.Covers(schema, table) && g.Has(p) {
				found = true
				break
			}
		}
		if !found {
			out = append(out, p)
		}
	}
	return out
}

// Lines returns SHOW GRANTS of the current account (its active roles'
// grants included).
func Lines(ctx context.Context, db interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}) ([]string, error) {
	rows, err := db.QueryContext(ctx, "SHOW GRANTS")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var l string
		if err := rows.Scan(&l); err != nil {
			return nil, err
		}
		lines = append(lines, l)
	}
	return lines, rows.Err()
}

// Account is CURRENT_USER() as 'user'@'host', ready for a GRANT statement.
func Account(ctx context.Context, db interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) (string, error) {
	var user string
	if err := db.QueryRowContext(ctx, "SELECT CURRENT_USER()").Scan(&user); err != nil {
		return "", fmt.Errorf("read the current account: %w", err)
	}
	name, host, _ := strings.Cut(user, "@")
	return QuoteAccount(name, host), nil
}

// QuoteAccount is 'name'@'host'.
func QuoteAccount(name, host string) string {
	return "'" + strings.ReplaceAll(name, "'", "''") + "'@'" + strings.ReplaceAll(host, "'", "''") + "'"
}

// Statement is "GRANT privs ON `schema`.`table` TO account;".
func Statement(privs []string, schema, table, account string) string {
	return fmt.Sprintf("GRANT %s ON %s.%s TO %s;", strings.Join(privs, ", "), ident(schema), ident(table), account)
}

func ident(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

// Denied reports whether err is the server refusing a statement for lack
// of a privilege (Dolt sends every such refusal as error 1105, "... denied
// to user ...").
func Denied(err error) bool {
	var me *driver.MySQLError
	if !errors.As(err, &me) {
		return false
	}
	switch me.Number {
	case 1044, 1045, 1142, 1143, 1227:
		return true
	}
	return strings.Contains(me.Message, "denied")
}
