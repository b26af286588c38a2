package check

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"

	driver "github.com/go-sql-driver/mysql"

	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/internal/sqlident"
)

// grant is one "GRANT privs ON object TO ..." line of SHOW GRANTS.
type grant struct {
	privs   map[string]bool // upper-case privilege names, "ALL PRIVILEGES" as ALL
	columns map[string]bool // privileges granted on some columns only
	db      string          // "*" for *.*; a pattern with % and _ at db level
	table   string          // "*" for db.* and *.*
}

var grantRe = regexp.MustCompile(`(?is)^GRANT\s+(.+?)\s+ON\s+(.+?)\s+TO\s+`)

// parseGrants reads SHOW GRANTS lines. Role grants ("GRANT role TO user"),
// PROXY, and routine grants are skipped: MariaDB lists the active roles'
// privileges as lines of their own.
func parseGrants(lines []string) []grant {
	var out []grant
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
		g := grant{privs: map[string]bool{}, columns: map[string]bool{}, db: db, table: table}
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
				g.columns[name] = true
			} else {
				g.privs[name] = true
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

// dbMatches reports whether a db-level grant's name (with % and _ wildcards,
// \ escaping them) covers db.
func dbMatches(pattern, db string) bool {
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

func (g grant) global() bool { return g.db == "*" && g.table == "*" }

func (g grant) has(names ...string) bool {
	if g.privs["ALL PRIVILEGES"] {
		return true
	}
	for _, n := range names {
		if g.privs[n] {
			return true
		}
	}
	return false
}

// privileges is what the relay's user may do, as far as the relay cares.
type privileges struct {
	replSlave  bool
	replClient bool
	// selectOn holds each table the user may SELECT; columnsOnly the tables
	// with SELECT on some columns only.
	selectOn    map[string]bool
	columnsOnly map[string]bool
}

// evaluate decides, from parsed grants, the privileges the relay needs.
// REPLICATION SLAVE (MariaDB ≥ 10.5.1 also REPLICATION REPLICA) is what the
// binlog dump needs: MariaDB's REPLICATION SLAVE ADMIN is for managing a
// replica and does not allow it. REPLICATION CLIENT is called BINLOG MONITOR
// on MariaDB ≥ 10.5; on MySQL SUPER also allows what it does.
func evaluate(grants []grant, flavor string, tables []config.Table) privileges {
	p := privileges{selectOn: map[string]bool{}, columnsOnly: map[string]bool{}}
	client := []string{"REPLICATION CLIENT", "BINLOG MONITOR"}
	if flavor == flavorMySQL {
		client = append(client, "SUPER")
	}
	for _, g := range grants {
		if g.global() {
			p.replSlave = p.replSlave || g.has("REPLICATION SLAVE", "REPLICATION REPLICA")
			p.replClient = p.replClient || g.has(client...)
		}
		for _, t := range tables {
			schema, name := t.SchemaTable()
			covers := g.global() || (g.table == "*" && dbMatches(g.db, schema)) || (g.db == schema && g.table == name)
			if !covers {
				continue
			}
			if g.has("SELECT") {
				p.selectOn[t.Name] = true
			} else if g.columns["SELECT"] {
				p.columnsOnly[t.Name] = true
			}
		}
	}
	return p
}

func privilegesResult(ctx context.Context, db *sql.DB, s server, cfg *config.Config) Result {
	lines, err := showGrants(ctx, db)
	if err != nil {
		return privilegesByUse(ctx, db, s, cfg, err)
	}
	return privilegesDecision(evaluate(parseGrants(lines), s.flavor, cfg.Tables), s.user, s.flavor, cfg.Tables)
}

// privilegesByUse judges the privileges by trying them, for a server that
// will not show the account its own grants (MySQL and MariaDB always do;
// Dolt wants SELECT on mysql.* for it). SHOW BINARY LOGS needs REPLICATION
// CLIENT and a SELECT ... LIMIT 0 needs SELECT on the table; REPLICATION
// SLAVE cannot be tried without starting a binlog dump, so at best this is
// a WARN.
func privilegesByUse(ctx context.Context, db *sql.DB, s server, cfg *config.Config, grantsErr error) Result {
	p := privileges{replSlave: true, selectOn: map[string]bool{}, columnsOnly: map[string]bool{}}
	_, err := canal.BinaryLogs(ctx, db)
	p.replClient = err == nil || !denied(err)
	for _, t := range cfg.Tables {
		schema, name := t.SchemaTable()
		rows, err := db.QueryContext(ctx, "SELECT * FROM "+sqlident.Table(schema, name)+" LIMIT 0")
		if err == nil {
			rows.Close()
		}
		p.selectOn[t.Name] = err == nil || !denied(err)
	}
	r := privilegesDecision(p, s.user, s.flavor, cfg.Tables)
	if r.Status == Fail {
		r.Detail += fmt.Sprintf(" (found by trying them: SHOW GRANTS failed: %v)", grantsErr)
		return r
	}
	r.Status = Warn
	r.Detail = fmt.Sprintf("SHOW GRANTS failed (%v): REPLICATION CLIENT and SELECT on every outbox table were not refused when tried; REPLICATION SLAVE is not checked", grantsErr)
	r.Fix = "make sure " + s.user + " has REPLICATION SLAVE (GRANT REPLICATION SLAVE ON *.* TO " + s.user + ";): without it the relay fails at its first binlog read"
	return r
}

// denied reports whether err is the server refusing a statement for lack
// of a privilege (Dolt sends every such refusal as error 1105, "... denied
// to user ...").
func denied(err error) bool {
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

func privilegesDecision(p privileges, user, flavor string, tables []config.Table) Result {
	r := Result{Name: NamePrivileges}
	var missing, fixes []string
	var global []string
	if !p.replSlave {
		missing = append(missing, "REPLICATION SLAVE (to read the binlog)")
		global = append(global, "REPLICATION SLAVE")
	}
	if !p.replClient {
		name := "REPLICATION CLIENT"
		if flavor == flavorMariaDB {
			name = "REPLICATION CLIENT (BINLOG MONITOR)"
		}
		missing = append(missing, name+" (to read binlog positions and files)")
		global = append(global, "REPLICATION CLIENT")
	}
	if len(global) > 0 {
		fixes = append(fixes, fmt.Sprintf("GRANT %s ON *.* TO %s;", strings.Join(global, ", "), user))
	}
	for _, t := range tables {
		if p.selectOn[t.Name] {
			continue
		}
		schema, name := t.SchemaTable()
		what := "SELECT on " + t.Name
		if p.columnsOnly[t.Name] {
			what += " (granted on some columns only)"
		}
		missing = append(missing, what)
		fixes = append(fixes, fmt.Sprintf("GRANT SELECT ON `%s`.`%s` TO %s;", schema, name, user))
	}
	if len(missing) == 0 {
		r.Detail = fmt.Sprintf("%s has REPLICATION SLAVE, REPLICATION CLIENT and SELECT on every outbox table", user)
		return r
	}
	r.Status = Fail
	r.Detail = fmt.Sprintf("%s lacks %s", user, strings.Join(missing, ", "))
	r.Fix = strings.Join(fixes, " ")
	return r
}

func showGrants(ctx context.Context, db *sql.DB) ([]string, error) {
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
