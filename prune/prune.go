package prune

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/internal/defaults"
	"github.com/outbox-relay/outbox-relay/internal/sqlident"
	"github.com/outbox-relay/outbox-relay/retry"
	"github.com/outbox-relay/outbox-relay/source"
)

// Options tune a Pruner; config.Prune holds them, with their defaults.
type Options struct {
	OlderThan       time.Duration
	SafetyMargin    time.Duration
	BatchSize       int
	Pause           time.Duration
	Rate            int // rows per second; 0: no cap beyond Pause
	PartitionsAhead int
	LockWaitTimeout time.Duration
	// DryRun computes and reports, and changes nothing.
	DryRun   bool
	Logger   *slog.Logger
	Observer Observer
}

// OptionsFrom returns the Options of a loaded (defaulted) config.
func OptionsFrom(c config.Prune) Options {
	o := Options{OlderThan: c.OlderThan, SafetyMargin: c.SafetyMargin, BatchSize: c.BatchSize, Pause: c.Pause,
		Rate: c.Rate, LockWaitTimeout: c.LockWaitTimeout}
	if c.PartitionsAhead != nil {
		o.PartitionsAhead = *c.PartitionsAhead
	}
	return o
}

// Observer receives what prune does, for metrics. Methods must not block.
type Observer interface {
	// Pruned is called after each batch of rows deleted.
	Pruned(table string, rows int)
	// PartitionDropped and PartitionCreated are called for each partition.
	PartitionDropped(table string)
	PartitionCreated(table string)
	// TableStats reports a table's estimated rows and bytes and its oldest
	// row's timestamp (zero when empty).
	TableStats(table string, rows, bytes int64, oldest time.Time)
	// Done is called at the end of each Run.
	Done(at time.Time, err error)
}

// Table is an outbox table and its timestamp column.
type Table struct {
	Schema, Name, Column string
}

// FullName is "schema.table".
func (t Table) FullName() string { return t.Schema + "." + t.Name }

func (t Table) quoted() string { return ident(t.Schema) + "." + ident(t.Name) }

// TablesFrom lists the configured outbox tables.
func TablesFrom(cfg *config.Config) []Table {
	var out []Table
	for _, t := range cfg.Tables {
		schema, name := t.SchemaTable()
		col := t.Columns.CreatedAt
		if col == "" {
			col = "created_at"
		}
		out = append(out, Table{Schema: schema, Name: name, Column: col})
	}
	return out
}

// Pruner prunes the outbox tables of one source server.
type Pruner struct {
	db     *sql.DB
	info   source.ServerInfo
	store  checkpoint.Store
	sinks  []string
	tables []Table
	opts   Options
	log    *slog.Logger
}

// New returns a Pruner for the tables on db (the source server: the primary),
// bounded by the checkpoints in store of the named sinks (every pipeline:
// config.PipelineNames). It does not connect yet.
func New(db *sql.DB, info source.ServerInfo, store checkpoint.Store, sinks []string, tables []Table, opts Options) *Pruner {
	defaults.Logger(&opts.Logger)
	defaults.Positive(&opts.BatchSize, config.DefaultPruneBatchSize)
	if opts.LockWaitTimeout < time.Second {
		opts.LockWaitTimeout = config.DefaultPruneLockWaitTimeout
	}
	return &Pruner{db: db, info: info, store: store, sinks: sinks, tables: tables, opts: opts, log: opts.Logger}
}

// TableResult is what one Run did (or, dry, would do) to one table.
type TableResult struct {
	Table string
	// Mode is "rows" or "partitions".
	Mode string
	// Rows deleted (dry run: that would be).
	Rows int64
	// Dropped and Created name partitions (dry run: that would be).
	Dropped, Created []string
	// Skipped says why nothing was done, when so.
	Skipped string
	// Stats after the run.
	TableRows, TableBytes int64
	Oldest                time.Time
}

// Result is one Run.
type Result struct {
	Horizon Horizon
	Tables  []TableResult
	DryRun  bool
}

// Run prunes every table once, up to the horizon taken at its start. A
// table's error does not stop the others; they are joined.
func (p *Pruner) Run(ctx context.Context) (Result, error) {
	res := Result{DryRun: p.opts.DryRun}
	err := p.run(ctx, &res)
	if p.opts.Observer != nil {
		p.opts.Observer.Done(time.Now(), err)
	}
	return res, err
}

func (p *Pruner) run(ctx context.Context, res *Result) error {
	h, err := p.Horizon(ctx)
	res.Horizon = h
	if err != nil {
		return err
	}
	if h.OpenTxnUnknown != "" {
		p.log.Warn("prune: "+h.OpenTxnUnknown, slog.String("safety_margin", p.opts.SafetyMargin.String()))
	}
	p.log.Info("prune horizon", slog.Time("cutoff", h.Cutoff), slog.String("held_by", h.HeldBy), slog.Bool("dry_run", p.opts.DryRun))
	acc := p.access(ctx)
	var errs []error
	for _, t := range p.tables {
		tr, err := p.table(ctx, t, h.Cutoff, acc)
		if err != nil {
			err = fmt.Errorf("prune %s: %w", t.FullName(), err)
			errs = append(errs, err)
			tr.Skipped = err.Error()
		}
		res.Tables = append(res.Tables, tr)
		if ctx.Err() != nil {
			break
		}
	}
	return errors.Join(errs...)
}

// meta is what prune needs to know of a table.
type meta struct {
	dataType string // timestamp or datetime
	pk       []string
	indexed  bool // the timestamp column leads an index
	parts    *partitioning
}

func (p *Pruner) table(ctx context.Context, t Table, cutoff time.Time, acc access) (TableResult, error) {
	tr := TableResult{Table: t.FullName(), Mode: "rows"}
	// Without SELECT the table's columns are invisible: say so, not that
	// they are missing.
	if err := acc.need(t, "read it", "SELECT"); err != nil {
		return tr, err
	}
	conn, err := p.db.Conn(ctx)
	if err != nil {
		return tr, err
	}
	defer conn.Close()
	m, err := inspect(ctx, conn, t)
	if err != nil {
		return tr, err
	}
	if m.parts != nil {
		tr.Mode = "partitions"
		err = acc.need(t, "drop the partitions every sink acknowledged and create partitions ahead (ALTER TABLE … DROP PARTITION needs both)", "ALTER", "DROP")
	} else {
		err = acc.need(t, "delete the rows every sink acknowledged", "DELETE")
	}
	if err != nil {
		return tr, err // before anything is counted, dry run or not
	}
	// A TIMESTAMP column compares in UTC, exactly (no daylight-saving
	// fold). A DATETIME column holds the producers' session time: the
	// server's time_zone, which this session keeps.
	if m.dataType == "timestamp" {
		if _, err := conn.ExecContext(ctx, "SET SESSION time_zone = '+00:00'"); err != nil {
			return tr, err
		}
	}
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET SESSION lock_wait_timeout = %d", int(p.opts.LockWaitTimeout/time.Second))); err != nil {
		return tr, err
	}
	lock := lockName(t)
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)", lock).Scan(&got); err != nil {
		return tr, fmt.Errorf("GET_LOCK(%q): %w", lock, err)
	}
	if !got.Valid || got.Int64 != 1 {
		tr.Skipped = "another prune of this table is running (it holds GET_LOCK " + lock + ")"
		return tr, nil
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "DO RELEASE_LOCK(?)", lock)

	switch {
	case m.parts != nil:
		err = p.partitions(ctx, conn, t, m, cutoff, &tr)
	case cutoff.IsZero():
		tr.Skipped = "held back: nothing is acknowledged by every sink yet"
	default:
		err = p.rows(ctx, conn, t, m, cutoff, &tr)
	}
	if serr := p.stats(ctx, conn, t, m, &tr); serr != nil && err == nil {
		p.log.Warn("prune: read table statistics", slog.String("table", t.FullName()), slog.Any("err", serr))
	}
	return tr, err
}

// inspect checks the timestamp column and reads the primary key, whether
// the column is indexed, and the table's partitioning.
func inspect(ctx context.Context, conn *sql.Conn, t Table) (meta, error) {
	var m meta
	var def sql.NullString
	var extra string
	err := conn.QueryRowContext(ctx, "SELECT LOWER(DATA_TYPE), COLUMN_DEFAULT, LOWER(EXTRA) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND COLUMN_NAME = ?",
		t.Schema, t.Name, t.Column).Scan(&m.dataType, &def, &extra)
	fix := fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), ADD INDEX (%s)", t.quoted(), ident(t.Column), ident(t.Column))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return m, fmt.Errorf("table %s has no column %s: prune matches rows by a time the server sets at INSERT; add one (%s), or name it with tables[].columns.created_at", t.FullName(), t.Column, fix)
	case err != nil:
		return m, fmt.Errorf("inspect column %s: %w", t.Column, err)
	}
	if m.dataType != "timestamp" && m.dataType != "datetime" {
		return m, fmt.Errorf("column %s.%s is a %s: prune needs a TIMESTAMP or DATETIME with DEFAULT CURRENT_TIMESTAMP", t.FullName(), t.Column, m.dataType)
	}
	if !def.Valid || !strings.HasPrefix(strings.ToLower(def.String), "current_timestamp") {
		d := "none"
		if def.Valid {
			d = def.String
		}
		return m, fmt.Errorf("column %s.%s has no DEFAULT CURRENT_TIMESTAMP (its default is %s), so the application sets it and prune cannot trust it: "+
			"ALTER TABLE %s MODIFY %s %s(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), and stop writing it from the application", t.FullName(), t.Column, d, t.quoted(), ident(t.Column), strings.ToUpper(m.dataType))
	}
	if strings.Contains(extra, "on update") {
		return m, fmt.Errorf("column %s.%s is ON UPDATE CURRENT_TIMESTAMP: an UPDATE of an old row would hide it from prune and a later one would not say when it was committed; drop ON UPDATE, or name another column with tables[].columns.created_at", t.FullName(), t.Column)
	}
	rows, err := conn.QueryContext(ctx, "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX", t.Schema, t.Name)
	if err != nil {
		return m, err
	}
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			rows.Close()
			return m, err
		}
		m.pk = append(m.pk, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return m, err
	}
	var n int
	if err := conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND COLUMN_NAME = ? AND SEQ_IN_INDEX = 1", t.Schema, t.Name, t.Column).Scan(&n); err != nil {
		return m, err
	}
	m.indexed = n > 0
	if m.parts, err = readPartitioning(ctx, conn, t); err != nil {
		return m, err
	}
	if m.parts == nil && len(m.pk) == 0 {
		return m, fmt.Errorf("table %s has no primary key: prune deletes in batches by primary key", t.FullName())
	}
	return m, nil
}

// rows deletes, in batches by primary key, the committed rows whose
// timestamp is before cutoff.
func (p *Pruner) rows(ctx context.Context, conn *sql.Conn, t Table, m meta, cutoff time.Time, tr *TableResult) error {
	col := ident(t.Column)
	before := col + " < FROM_UNIXTIME(?)"
	arg := unixArg(cutoff)
	if p.opts.DryRun {
		return conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+t.quoted()+" WHERE "+before, arg).Scan(&tr.Rows)
	}
	pkCols := make([]string, len(m.pk))
	for i, c := range m.pk {
		pkCols[i] = ident(c)
	}
	pkList := strings.Join(pkCols, ", ")
	tuple := "(" + strings.TrimSuffix(strings.Repeat("?, ", len(m.pk)), ", ") + ")"
	var last []any // keyset: the last key of the previous batch (no index on the column)
	zero := 0
	for {
		started := time.Now()
		// A consistent read: only committed rows, no locks.
		q := "SELECT " + pkList + " FROM " + t.quoted() + " WHERE " + before
		args := []any{arg}
		if m.indexed {
			q += " ORDER BY " + col + " LIMIT ?"
		} else {
			if last != nil {
				q += " AND (" + pkList + ") > " + tuple
				args = append(args, last...)
			}
			q += " ORDER BY " + pkList + " LIMIT ?"
		}
		args = append(args, p.opts.BatchSize)
		keys, err := selectKeys(ctx, conn, q, args, len(m.pk))
		if err != nil {
			return fmt.Errorf("select a batch: %w", err)
		}
		if len(keys) == 0 {
			return nil
		}
		last = keys[len(keys)-1]
		var in []string
		dargs := make([]any, 0, len(keys)*len(m.pk)+1)
		for _, k := range keys {
			in = append(in, tuple)
			dargs = append(dargs, k...)
		}
		dargs = append(dargs, arg)
		del := "DELETE FROM " + t.quoted() + " WHERE (" + pkList + ") IN (" + strings.Join(in, ", ") + ") AND " + before
		if len(m.pk) == 1 {
			del = "DELETE FROM " + t.quoted() + " WHERE " + pkList + " IN (" + strings.TrimSuffix(strings.Repeat("?, ", len(keys)), ", ") + ") AND " + before
		}
		r, err := conn.ExecContext(ctx, del, dargs...)
		if err != nil {
			return fmt.Errorf("delete a batch: %w%s", err, deniedHint(err, t, "DELETE"))
		}
		n, _ := r.RowsAffected()
		tr.Rows += n
		if p.opts.Observer != nil && n > 0 {
			p.opts.Observer.Pruned(t.FullName(), int(n))
		}
		if n == 0 {
			// Selected but gone (another prune, or the application): go on,
			// unless it keeps happening with an index walk that cannot move.
			if zero++; m.indexed && zero > 3 {
				return nil
			}
		} else {
			zero = 0
		}
		if len(keys) < p.opts.BatchSize {
			return nil
		}
		if err := retry.Sleep(ctx, p.wait(len(keys), time.Since(started))); err != nil {
			return err
		}
	}
}

// wait is the pause after a batch of n rows that took took: at least Pause,
// and long enough to keep under Rate.
func (p *Pruner) wait(n int, took time.Duration) time.Duration {
	w := p.opts.Pause
	if p.opts.Rate > 0 {
		if need := time.Duration(float64(n)/float64(p.opts.Rate)*float64(time.Second)) - took; need > w {
			w = need
		}
	}
	return w
}

func selectKeys(ctx context.Context, conn *sql.Conn, q string, args []any, width int) ([][]any, error) {
	rows, err := conn.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out [][]any
	for rows.Next() {
		k := make([]any, width)
		ptrs := make([]any, width)
		for i := range k {
			ptrs[i] = &k[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// stats reads the table's size estimate and its oldest row's timestamp.
func (p *Pruner) stats(ctx context.Context, conn *sql.Conn, t Table, m meta, tr *TableResult) error {
	var rows, bytes sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT TABLE_ROWS, DATA_LENGTH + INDEX_LENGTH FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?", t.Schema, t.Name).Scan(&rows, &bytes); err != nil {
		return err
	}
	tr.TableRows, tr.TableBytes = rows.Int64, bytes.Int64
	// With an index, the oldest exactly; without, the first row by key
	// (the oldest for an AUTO_INCREMENT key), not a full scan.
	q := "SELECT UNIX_TIMESTAMP(MIN(" + ident(t.Column) + ")) FROM " + t.quoted()
	if !m.indexed && len(m.pk) > 0 {
		q = "SELECT UNIX_TIMESTAMP(" + ident(t.Column) + ") FROM " + t.quoted() + " ORDER BY " + ident(m.pk[0]) + " LIMIT 1"
	}
	var oldest sql.NullString
	if err := conn.QueryRowContext(ctx, q).Scan(&oldest); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	if oldest.Valid {
		t, err := parseUnix(oldest.String)
		if err != nil {
			return err
		}
		tr.Oldest = t
	}
	if p.opts.Observer != nil {
		p.opts.Observer.TableStats(t.FullName(), tr.TableRows, tr.TableBytes, tr.Oldest)
	}
	return nil
}

// lockName is the GET_LOCK name that keeps two prunes of t apart (64 bytes
// at most).
func lockName(t Table) string {
	n := "outbox-relay-prune:" + t.FullName()
	if len(n) > 64 {
		n = n[:64]
	}
	return n
}

// ident quotes an identifier.
func ident(s string) string { return sqlident.Quote(s) }

// CheckPrimary returns an error unless db is a writable server that
// replicates from no other: rows are deleted on the primary, and replicas
// follow through the binlog.
func CheckPrimary(ctx context.Context, db *sql.DB) error {
	var ro int
	if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.read_only").Scan(&ro); err != nil {
		return fmt.Errorf("read read_only: %w", err)
	}
	if ro != 0 {
		return errors.New("the server is read_only: prune deletes on the primary, and replicas follow it")
	}
	if of, ok := source.ReplicaOf(ctx, db); ok && of != "" {
		return fmt.Errorf("the server replicates from %s: prune deletes on the primary, and replicas follow it", of)
	}
	return nil
}
