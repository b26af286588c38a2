// Package switchover is the claim that makes a switch-over from a polling
// worker exactly once (tables[].switch_over; docs/replay.md): Check runs at
// the relay's start, NewSink wraps each sink of a pipeline so that it
// claims a batch's rows before sending them, and Metrics counts what the
// claims decided. The relay assembles them (package relay); this package
// holds the protocol.
//
// A Sink is used by one pipeline at a time, as any sink.Sink; Metrics'
// methods are safe for concurrent use, and a nil *Metrics counts nothing.
package switchover

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/grants"
	"github.com/outbox-relay/outbox-relay/metrics"
	"github.com/outbox-relay/outbox-relay/sink"
)

// Table is an outbox table under switch-over (tables[].switch_over):
// its quoted name, id and status columns, and the statuses.
type Table struct {
	schema, name, id, status string // quoted: `schema`, `schema`.`table`, `id`, `status`
	pending, claimed         string
}

// Tables returns the tables of cfg under switch-over, by
// "schema.table", or nil.
func Tables(cfg *config.Config) map[string]Table {
	var out map[string]Table
	for _, t := range cfg.Tables {
		so := t.SwitchOver
		if so == nil {
			continue
		}
		if out == nil {
			out = map[string]Table{}
		}
		s, n := t.SchemaTable()
		out[t.Name] = Table{schema: quoteIdent(s), name: quoteIdent(s) + "." + quoteIdent(n), id: quoteIdent(t.Columns.ID),
			status: quoteIdent(so.StatusColumn), pending: so.Pending, claimed: so.Claimed}
	}
	return out
}

func quoteIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

// Check fails, before anything is read or sent, when the relay's
// account may not UPDATE a table under switch-over (naming the GRANT to
// run), or when the table's id or status column cannot be used to claim
// rows (a BINARY id: the claim compares ids as the event carries them).
func Check(ctx context.Context, db *sql.DB, cfg *config.Config) error {
	for _, t := range cfg.Tables {
		if t.SwitchOver == nil {
			continue
		}
		s, n := t.SchemaTable()
		var idType string
		err := db.QueryRowContext(ctx, `SELECT DATA_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND COLUMN_NAME = ?`,
			s, n, t.Columns.ID).Scan(&idType)
		if err != nil {
			return fmt.Errorf("tables %s: switch_over: read the type of its id column %q: %w", t.Name, t.Columns.ID, err)
		}
		if strings.Contains(strings.ToLower(idType), "binary") || strings.Contains(strings.ToLower(idType), "blob") {
			return fmt.Errorf("tables %s: switch_over: its id column %q is %s; this build claims rows by an integer or text id only: switch over without the claim (docs/replay.md, at-least-once procedure)", t.Name, t.Columns.ID, idType)
		}
		var one int
		err = db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND COLUMN_NAME = ?`,
			s, n, t.SwitchOver.StatusColumn).Scan(&one)
		if err != nil {
			return err
		}
		if one == 0 {
			return fmt.Errorf("tables %s: switch_over.status_column: the table has no column %q: name the poller's status column", t.Name, t.SwitchOver.StatusColumn)
		}
		account, err := grants.Account(ctx, db)
		if err != nil {
			continue // the UPDATE says it itself
		}
		lines, err := grants.Lines(ctx, db)
		if err != nil {
			continue
		}
		if missing := grants.Missing(grants.Parse(lines), s, n, "UPDATE"); len(missing) > 0 {
			return fmt.Errorf("tables %s: switch_over: %s lacks UPDATE on %s, which the relay needs to claim rows while a polling worker runs: run %s (and REVOKE it once switch_over is removed)",
				t.Name, account, t.Name, grants.Statement(missing, s, n, account))
		}
	}
	return nil
}

// NewSink returns s wrapped so that it claims each row of tables (Tables)
// before sending it; name is the sink's, for the metrics and the log.
func NewSink(s sink.Sink, name string, db *sql.DB, tables map[string]Table, m *Metrics, log *slog.Logger) *Sink {
	return &Sink{Sink: s, name: name, db: db, tables: tables, obs: m, log: log}
}

// Sink is the arbiter between the relay and a polling worker still
// running on the same outbox table: before a batch is sent, it claims the
// batch's rows of tables under switch-over in one short transaction
// (SELECT id, status … FOR UPDATE, then UPDATE … SET status = claimed for
// the rows still pending), and sends only the rows that are the relay's:
// those it claimed now, and those already claimed (by this relay before a
// crash, or by another of its sinks). The others the poller claimed (its
// SELECT … FOR UPDATE SKIP LOCKED and its status update commit first): they
// are dropped, counted and logged at debug. A row the table no longer holds
// (pruned) is sent: no poller can have it. The row lock orders the two
// claims, so each row has one owner; on a server without row locks (Dolt)
// the later of two claims of a row fails at commit (1213) and is retried.
type Sink struct {
	sink.Sink
	name   string
	db     *sql.DB
	tables map[string]Table
	obs    *Metrics
	log    *slog.Logger
}

// Tenant implements sink.Owned: the wrapped sink's tenant, which its dead
// letters keep.
func (c *Sink) Tenant() string { return sink.TenantOf(c.Sink) }

func (c *Sink) Write(ctx context.Context, batch []*event.Event) error {
	keep, err := c.claim(ctx, batch)
	if err != nil {
		return err
	}
	if len(keep) == 0 {
		return nil
	}
	out := make([]*event.Event, len(keep))
	for i, k := range keep {
		out[i] = batch[k]
	}
	return c.Sink.Write(ctx, out)
}

// claim claims batch's rows and returns the indexes of those to send, in
// order. An error leaves nothing claimed (the transaction rolls back) and
// the pipeline retries the batch.
func (c *Sink) claim(ctx context.Context, batch []*event.Event) ([]int, error) {
	byTable := map[string][]int{}
	var keep []int
	for i, e := range batch {
		if _, ok := c.tables[e.Table]; ok {
			byTable[e.Table] = append(byTable[e.Table], i)
		}
	}
	if len(byTable) == 0 {
		for i := range batch {
			keep = append(keep, i)
		}
		return keep, nil
	}
	drop := map[int]bool{}
	// The claim's connection has a current database, a table's schema:
	// Dolt commits no transaction on a connection without one (MySQL and
	// MariaDB need none; the statements name their tables in full).
	conn, err := c.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("switch-over claim: %w", err)
	}
	defer conn.Close()
	for table := range byTable {
		if _, err := conn.ExecContext(ctx, "USE "+c.tables[table].schema); err != nil {
			return nil, fmt.Errorf("switch-over claim: %w", err)
		}
		break
	}
	// READ COMMITTED: the rows are locked by primary key, with no gap
	// locks that would make the application's inserts wait or deadlock.
	tx, err := conn.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return nil, fmt.Errorf("switch-over claim: %w", err)
	}
	defer tx.Rollback()
	for table, idx := range byTable {
		t := c.tables[table]
		args := make([]any, len(idx))
		for j, i := range idx {
			args[j] = batch[i].ID
		}
		in := strings.TrimSuffix(strings.Repeat("?,", len(idx)), ",")
		rows, err := tx.QueryContext(ctx, "SELECT CAST("+t.id+" AS CHAR), "+t.status+" FROM "+t.name+" WHERE "+t.id+" IN ("+in+") FOR UPDATE", args...)
		if err != nil {
			return nil, fmt.Errorf("switch-over claim on %s: %w%s", table, err, deniedHint(err, table))
		}
		status := map[string]string{}
		for rows.Next() {
			var id string
			var st sql.NullString
			if err := rows.Scan(&id, &st); err != nil {
				rows.Close()
				return nil, err
			}
			status[id] = st.String
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("switch-over claim on %s: %w", table, err)
		}
		var pending []any
		var dropped []string
		for _, i := range idx {
			id := batch[i].ID
			st, held := status[id]
			switch {
			case !held || st == t.claimed:
			case st == t.pending:
				pending = append(pending, id)
			default:
				drop[i] = true
				dropped = append(dropped, id)
			}
		}
		if len(pending) > 0 {
			in := strings.TrimSuffix(strings.Repeat("?,", len(pending)), ",")
			args := append([]any{t.claimed}, pending...)
			if _, err := tx.ExecContext(ctx, "UPDATE "+t.name+" SET "+t.status+" = ? WHERE "+t.id+" IN ("+in+")", args...); err != nil {
				return nil, fmt.Errorf("switch-over claim on %s: %w%s", table, err, deniedHint(err, table))
			}
		}
		c.obs.Claimed(c.name, table, len(idx)-len(dropped))
		c.obs.Dropped(c.name, table, len(dropped))
		if len(dropped) > 0 {
			c.log.Debug("switch-over: rows the polling worker claimed are left to it", slog.String("table", table), slog.Any("ids", dropped))
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("switch-over claim: commit: %w", err)
	}
	for i := range batch {
		if !drop[i] {
			keep = append(keep, i)
		}
	}
	return keep, nil
}

func deniedHint(err error, table string) string {
	if !grants.Denied(err) {
		return ""
	}
	s, n, _ := strings.Cut(table, ".")
	return fmt.Sprintf(": grant the relay's user UPDATE on %s (GRANT UPDATE ON %s.%s TO <user>;) or remove tables[].switch_over", table, quoteIdent(s), quoteIdent(n))
}

// MetricNames lists the metric families of a switch-over from a
// polling worker (tables[].switch_over). They are not in metrics.Names:
// they exist once a sink claims rows.
var MetricNames = []string{
	"outbox_relay_switchover_claimed_total",
	"outbox_relay_switchover_dropped_total",
}

// switchOverMetrics counts what the switch-over's claim decided; nil counts
// nothing. Its methods are safe for concurrent use.
type switchOverMetrics struct {
	claimed, dropped *prometheus.CounterVec
}

// Metrics counts what the switch-over's claims decided; nil counts
// nothing. Its methods are safe for concurrent use.
type Metrics struct {
	claimed, dropped *prometheus.CounterVec
}

// NewMetrics registers the switch-over's metrics on m.
func NewMetrics(m *metrics.Metrics) (*Metrics, error) {
	const namespace = metrics.Namespace
	o := &Metrics{
		claimed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "switchover_claimed_total",
			Help: "Rows a sink's pipeline claimed (or found claimed by the relay) and sent, during a switch-over from a polling worker, per sink and table."}, []string{"sink", "table"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "switchover_dropped_total",
			Help: "Rows a sink's pipeline did not send during a switch-over because the polling worker had claimed them, per sink and table."}, []string{"sink", "table"}),
	}
	if err := m.Register(o.claimed, o.dropped); err != nil {
		return nil, err
	}
	return o, nil
}

// Claimed counts n rows of table that sink sent as the relay's.
func (o *Metrics) Claimed(sink, table string, n int) {
	if o != nil && n > 0 {
		o.claimed.WithLabelValues(sink, table).Add(float64(n))
	}
}

// Dropped counts n rows of table that sink left to the poller.
func (o *Metrics) Dropped(sink, table string, n int) {
	if o != nil && n > 0 {
		o.dropped.WithLabelValues(sink, table).Add(float64(n))
	}
}
