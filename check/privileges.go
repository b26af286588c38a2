package check

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/internal/grants"
	"github.com/outbox-relay/outbox-relay/internal/sqlident"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/source"
)

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
func evaluate(gs []grants.Grant, flavor string, tables []config.Table) privileges {
	p := privileges{selectOn: map[string]bool{}, columnsOnly: map[string]bool{}}
	client := []string{"REPLICATION CLIENT", "BINLOG MONITOR"}
	if flavor == flavorMySQL {
		client = append(client, "SUPER")
	}
	for _, g := range gs {
		if g.Global() {
			p.replSlave = p.replSlave || g.Has("REPLICATION SLAVE", "REPLICATION REPLICA")
			p.replClient = p.replClient || g.Has(client...)
		}
		for _, t := range tables {
			if !g.Covers(t.SchemaTable()) {
				continue
			}
			if g.Has("SELECT") {
				p.selectOn[t.Name] = true
			} else if g.Columns["SELECT"] {
				p.columnsOnly[t.Name] = true
			}
		}
	}
	return p
}

func privilegesResult(ctx context.Context, db *sql.DB, s server, cfg *config.Config) Result {
	tables := readTables(cfg)
	lines, err := grants.Lines(ctx, db)
	if err != nil {
		return privilegesByUse(ctx, db, s, tables, err)
	}
	return privilegesDecision(evaluate(grants.Parse(lines), s.flavor, tables), s.user, s.flavor, tables)
}

// readTables are the tables of the source the relay's user reads: the
// outbox tables, then those the sinks' kinds name (sink.Kind.SourceTables:
// a webhook sink's endpoints table), each once.
func readTables(cfg *config.Config) []config.Table {
	tables := slices.Clone(cfg.Tables)
	for _, sc := range cfg.Sinks {
		k, ok := sink.KindOf(sc.Type)
		if !ok || k.SourceTables == nil || sc.Config == nil {
			continue
		}
		for _, name := range k.SourceTables(sc.Config) {
			if !slices.ContainsFunc(tables, func(t config.Table) bool { return t.Name == name }) {
				tables = append(tables, config.Table{Name: name})
			}
		}
	}
	return tables
}

// privilegesByUse judges the privileges by trying them, for a server that
// will not show the account its own grants (MySQL and MariaDB always do;
// Dolt wants SELECT on mysql.* for it). SHOW BINARY LOGS needs REPLICATION
// CLIENT and a SELECT ... LIMIT 0 needs SELECT on the table; REPLICATION
// SLAVE cannot be tried without starting a binlog dump, so at best this is
// a WARN.
func privilegesByUse(ctx context.Context, db *sql.DB, s server, tables []config.Table, grantsErr error) Result {
	p := privileges{replSlave: true, selectOn: map[string]bool{}, columnsOnly: map[string]bool{}}
	_, err := source.BinaryLogs(ctx, db)
	p.replClient = err == nil || !grants.Denied(err)
	for _, t := range tables {
		schema, name := t.SchemaTable()
		rows, err := db.QueryContext(ctx, "SELECT * FROM "+sqlident.Table(schema, name)+" LIMIT 0")
		if err == nil {
			rows.Close()
		}
		p.selectOn[t.Name] = err == nil || !grants.Denied(err)
	}
	r := privilegesDecision(p, s.user, s.flavor, tables)
	if r.Status == Fail {
		r.Detail += fmt.Sprintf(" (found by trying them: SHOW GRANTS failed: %v)", grantsErr)
		return r
	}
	r.Status = Warn
	r.Detail = fmt.Sprintf("SHOW GRANTS failed (%v): REPLICATION CLIENT and SELECT on every outbox table (and endpoints table) were not refused when tried; REPLICATION SLAVE is not checked", grantsErr)
	r.Fix = "make sure " + s.user + " has REPLICATION SLAVE (GRANT REPLICATION SLAVE ON *.* TO " + s.user + ";): without it the relay fails at its first binlog read"
	return r
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
		r.Detail = fmt.Sprintf("%s has REPLICATION SLAVE, REPLICATION CLIENT and SELECT on every outbox table (and endpoints table)", user)
		return r
	}
	r.Status = Fail
	r.Detail = fmt.Sprintf("%s lacks %s", user, strings.Join(missing, ", "))
	r.Fix = strings.Join(fixes, " ")
	return r
}
