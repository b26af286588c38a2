package backfill

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/defaults"
	"github.com/outbox-relay/outbox-relay/internal/sqlident"
	"github.com/outbox-relay/outbox-relay/position"
)

// DefaultChunkSize is the rows a chunk reads when Config.ChunkSize is 0.
const DefaultChunkSize = 1000

// Config says which table to read, how, and against which binlog.
type Config struct {
	// DB is a pool on the source server the binlog is read from (the
	// snapshots' positions are that server's). Required.
	DB *sql.DB
	// Reader is a binlog reader whose tables include Schema.Table. Its
	// mapping turns rows into events (canal.RowMapper), and, unless Follow
	// is set, run from the backfill's start it reads which rows a chunk's
	// snapshot saw were committed after the start (it needs a replica
	// server id of its own then). Required.
	Reader *canal.Reader
	// Follow, if set, is the binlog reader run from the backfill's start
	// instead of Reader (a reader guarded against a replica id in use).
	Follow Binlog
	// Until, when set, is the binlog position the backfill reads the table
	// as of, instead of now (Start): the rows committed before it. The
	// server must still hold the binlog from there (a replay's window
	// end).
	Until event.Position
	// Flavor is the source's: "mariadb" reads each chunk at its snapshot's
	// binlog position, "mysql" (and Dolt) between gtid_executed
	// watermarks (package doc).
	Flavor string
	// Schema and Table name the outbox table.
	Schema, Table string
	// Where is a condition on the table's columns that a row must meet
	// (sqlident.CheckCondition), e.g. "status = 'pending'". Default none.
	Where string
	// CreatedAt is the table's insert time column, needed by Since.
	CreatedAt string
	// Since, when > 0, reads only rows whose CreatedAt is at most this old
	// when Run starts (the server's clock).
	Since time.Duration
	// After and Before, when set, read only rows whose CreatedAt is at or
	// after After and before Before (a replay's --since and --until).
	After, Before time.Time
	// ChunkSize is the rows read per chunk (one SELECT, one short
	// snapshot, one transaction handed on). Default DefaultChunkSize.
	ChunkSize int
	Logger    *slog.Logger
}

// Binlog is a binlog reader (canal.Reader, pipeline.Source).
type Binlog interface {
	Run(ctx context.Context, from event.Position, handle func(context.Context, *event.Txn) error) error
}

// Source reads an outbox table's rows as a pipeline.Source: Run hands them
// on in primary key order, a chunk per transaction, and returns nil once
// the table is read. Its positions are the start's binlog position (Start)
// with the table's cursor (event.Position.Table), so a pipeline that saves
// them resumes after the last chunk it acknowledged.
type Source struct {
	cfg   Config
	log   *slog.Logger
	table string
}

// New checks cfg and returns a Source.
func New(cfg Config) (*Source, error) {
	switch {
	case cfg.DB == nil || cfg.Reader == nil:
		return nil, errors.New("backfill: DB and Reader are required")
	case cfg.Schema == "" || cfg.Table == "":
		return nil, errors.New("backfill: name the outbox table (schema and table)")
	case cfg.Since < 0:
		return nil, fmt.Errorf("backfill: since %s is negative", cfg.Since)
	case (cfg.Since > 0 || !cfg.After.IsZero() || !cfg.Before.IsZero()) && cfg.CreatedAt == "":
		return nil, fmt.Errorf("backfill %s.%s: since needs the table's insert time column: set tables[].columns.created_at", cfg.Schema, cfg.Table)
	case cfg.ChunkSize < 0:
		return nil, fmt.Errorf("backfill: chunk size %d is negative", cfg.ChunkSize)
	}
	if err := sqlident.CheckCondition(cfg.Where); err != nil {
		return nil, fmt.Errorf("backfill %s.%s: %w", cfg.Schema, cfg.Table, err)
	}
	if cfg.ChunkSize == 0 {
		cfg.ChunkSize = DefaultChunkSize
	}
	defaults.Logger(&cfg.Logger)
	if cfg.Follow == nil {
		cfg.Follow = cfg.Reader
	}
	t := cfg.Schema + "." + cfg.Table
	return &Source{cfg: cfg, table: t, log: cfg.Logger.With(slog.String("backfill", t))}, nil
}

// snapshot is an open consistent-snapshot transaction and the binlog
// position the chunk read in it is handed on at: on MariaDB the one it
// sees exactly (every transaction before it, none after); on MySQL a high
// watermark set once the chunk is read (mark).
type snapshot struct {
	conn *sql.Conn
	pos  event.Position
}

// mariaDB reports whether the source names its snapshots' binlog positions
// (MariaDB); the others (MySQL, Dolt) are read between GTID watermarks.
func (s *Source) mariaDB() bool { return s.cfg.Flavor == "mariadb" }

// open starts a consistent snapshot on a connection of its own.
//
// MariaDB names the binlog position of the snapshot (binlog_snapshot_file
// and binlog_snapshot_position, read inside it), which no other statement
// can: a position read before or after the snapshot may be off by the
// transactions committing meanwhile. The GTID position at that point
// (BINLOG_GTID_POS, which reads the binlog file from its start: costly on
// a big file) is looked up only when withGTID is set: a start's, not every
// chunk's.
//
// MySQL names none: the chunk's position is its high watermark, the
// server's gtid_executed read once the chunk's SELECT is done (mark).
// READ ONLY is not asked there: Dolt refuses it beside WITH CONSISTENT
// SNAPSHOT.
func (s *Source) open(ctx context.Context, withGTID bool) (*snapshot, error) {
	conn, err := s.cfg.DB.Conn(ctx)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			conn.Close()
		}
	}()
	begin := "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"
	if !s.mariaDB() {
		begin = "START TRANSACTION WITH CONSISTENT SNAPSHOT"
	}
	for _, q := range []string{"SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ", begin} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return nil, fmt.Errorf("backfill: %s: %w", q, err)
		}
	}
	if !s.mariaDB() {
		ok = true
		return &snapshot{conn: conn}, nil
	}
	var file string
	var pos uint32
	rows, err := conn.QueryContext(ctx, "SHOW STATUS LIKE 'binlog_snapshot_%'")
	if err != nil {
		return nil, fmt.Errorf("backfill: read the snapshot's binlog position: %w", err)
	}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			rows.Close()
			return nil, err
		}
		switch strings.ToLower(k) {
		case "binlog_snapshot_file":
			file = v
		case "binlog_snapshot_position":
			_, err = fmt.Sscan(v, &pos)
		}
	}
	rows.Close()
	if err != nil || rows.Err() != nil {
		return nil, fmt.Errorf("backfill: read the snapshot's binlog position: %w", errors.Join(err, rows.Err()))
	}
	if file == "" {
		return nil, errors.New("backfill: the server reports no binlog_snapshot_file: binary logging is off; start it with log_bin")
	}
	p := event.Position{File: file, Pos: pos}
	if withGTID {
		if p.GTIDSet, err = gtidAt(ctx, conn, file, pos); err != nil {
			return nil, err
		}
		var serverID uint32
		if err := conn.QueryRowContext(ctx, "SELECT @@server_id").Scan(&serverID); err == nil {
			p.ServerID = serverID
		}
	}
	ok = true
	return &snapshot{conn: conn, pos: p}, nil
}

// querier is a pool, a connection or a transaction.
type querier interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}

// gtidAt is MariaDB's GTID position at file:pos.
func gtidAt(ctx context.Context, q querier, file string, pos uint32) (string, error) {
	var gtid sql.NullString
	if err := q.QueryRowContext(ctx, "SELECT BINLOG_GTID_POS(?, ?)", file, pos).Scan(&gtid); err != nil {
		return "", fmt.Errorf("backfill: GTID position of %s:%d: %w", file, pos, err)
	}
	return gtid.String, nil
}

// executed is a MySQL source's GTID watermark: its gtid_executed now (a
// global value, the server's current one inside a snapshot too), as a
// position. Every transaction a snapshot started before it sees is in it:
// MySQL adds a GTID to gtid_executed as the transaction commits, and the
// watermark is read after the snapshot's reads. With gtid_mode OFF there is
// none, and the error says what to set.
func (s *Source) executed(ctx context.Context, q querier) (event.Position, error) {
	var set, mode string
	var serverID uint32
	if err := q.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_executed, @@GLOBAL.gtid_mode, @@server_id").Scan(&set, &mode, &serverID); err != nil {
		return event.Position{}, fmt.Errorf("backfill: read the server's gtid_executed: %w", err)
	}
	if !strings.EqualFold(mode, "ON") {
		return event.Position{}, fmt.Errorf("backfill: the source's gtid_mode is %s; a backfill on %s reads each chunk between two gtid_executed watermarks: set gtid_mode=ON (with enforce_gtid_consistency=ON)", mode, s.cfg.Flavor)
	}
	return event.Position{GTIDSet: strings.ReplaceAll(set, "\n", ""), ServerID: serverID}, nil
}

// mark sets a MySQL snapshot's position, once its chunk is read: the
// high watermark (executed).
func (s *Source) mark(ctx context.Context, sn *snapshot) error {
	if s.mariaDB() {
		return nil
	}
	p, err := s.executed(ctx, sn.conn)
	sn.pos = p
	return err
}

func (sn *snapshot) close() {
	_, _ = sn.conn.ExecContext(context.Background(), "COMMIT")
	sn.conn.Close()
}

// Start returns where a backfill begins now: the binlog position P of a
// consistent snapshot, with the table's cursor at its start. The backfill
// hands on exactly the rows committed before P (and retained, and meeting
// the filter); a live stream of the same sink that starts at P hands on
// the rest, with none twice.
func (s *Source) Start(ctx context.Context) (event.Position, error) {
	if !s.cfg.Until.IsZero() {
		p := s.cfg.Until
		p.Table = &event.TableCursor{Table: s.table}
		return p, nil
	}
	var p event.Position
	if s.mariaDB() {
		sn, err := s.open(ctx, true)
		if err != nil {
			return event.Position{}, err
		}
		sn.close()
		p = sn.pos
	} else {
		var err error
		if p, err = s.executed(ctx, s.cfg.DB); err != nil {
			return event.Position{}, err
		}
	}
	p.Table = &event.TableCursor{Table: s.table}
	return p, nil
}

// Run implements pipeline.Source. It reads the table from after from's
// cursor (from the start when from has no cursor: from Start), a chunk at
// a time, and hands each chunk on as one transaction whose position is
// from's binlog position with the chunk's last key; the last one is Done.
// It returns nil once the table is read, at once when from is Done.
//
// Each chunk is read in a consistent snapshot of its own at binlog
// position G ≥ P (no long read view is held between chunks); the rows it
// holds that were committed between P and G — their INSERTs are in the
// binlog there — are dropped, since the live stream from P delivers them.
// A reader of the binlog from P (Config.Reader) lists their ids; it holds
// one id per outbox row inserted into this table since P, for as long as
// Run runs.
func (s *Source) Run(ctx context.Context, from event.Position, handle func(context.Context, *event.Txn) error) error {
	if from.Table == nil {
		p, err := s.Start(ctx)
		if err != nil {
			return err
		}
		from = p
	}
	if from.Table.Table != s.table {
		return fmt.Errorf("backfill: the position's cursor is of table %s, this backfill reads %s", from.Table.Table, s.table)
	}
	if from.Table.Done {
		return nil
	}
	tab, err := s.inspect(ctx)
	if err != nil {
		return err
	}
	start := from
	start.Table = nil

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f := newFollower(s.cfg.Flavor, start, s.table)
	var wg sync.WaitGroup
	wg.Go(func() {
		err := s.cfg.Follow.Run(ctx, start, f.handle)
		f.fail(err)
	})
	defer wg.Wait()
	defer cancel()

	bounds, err := s.bounds(ctx)
	if err != nil {
		return err
	}
	end, err := s.end(ctx, tab)
	if err != nil {
		return err
	}
	key := from.Table.Key
	for {
		var rows []*event.Event
		var last []string
		var g event.Position
		if end != nil { // an empty table: no row committed before P
			if rows, last, g, err = s.chunk(ctx, tab, key, end, bounds); err != nil {
				return err
			}
		}
		var byGTID func() (string, error)
		if s.mariaDB() {
			byGTID = func() (string, error) { return gtidAt(ctx, s.cfg.DB, g.File, g.Pos) }
		}
		if err := f.wait(ctx, g, byGTID); err != nil {
			return err
		}
		txn := &event.Txn{Position: start}
		cur := &event.TableCursor{Table: s.table, Key: key}
		if len(rows) > 0 {
			cur.Key = last
		}
		cur.Done = len(rows) < s.cfg.ChunkSize
		txn.Position.Table = cur
		for _, r := range rows {
			if f.committedAfter(r.ID) {
				continue
			}
			txn.Events = append(txn.Events, r)
		}
		if err := handle(ctx, txn); err != nil {
			return err
		}
		if cur.Done {
			s.log.Info("backfill done", slog.String("as_of", start.String()))
			return nil
		}
		key = cur.Key
	}
}

// bounds are the values of the CreatedAt conditions (tables' conds):
// on the server's clock, in its time zone, as the column's DEFAULT
// CURRENT_TIMESTAMP is, taken once, so every chunk has the same.
func (s *Source) bounds(ctx context.Context) ([]any, error) {
	local := func(t time.Time) (string, error) {
		var c string
		err := s.cfg.DB.QueryRowContext(ctx, "SELECT CAST(NOW(6) - INTERVAL TIMESTAMPDIFF(MICROSECOND, ?, UTC_TIMESTAMP(6)) MICROSECOND AS CHAR)",
			t.UTC().Format("2006-01-02 15:04:05.999999")).Scan(&c)
		if err != nil {
			return "", fmt.Errorf("backfill: read the server's clock: %w", err)
		}
		return c, nil
	}
	var out []any
	after := s.cfg.After
	if s.cfg.Since > 0 {
		var c string
		if err := s.cfg.DB.QueryRowContext(ctx, "SELECT CAST(UTC_TIMESTAMP(6) AS CHAR)").Scan(&c); err != nil {
			return nil, fmt.Errorf("backfill: read the server's clock: %w", err)
		}
		now, err := time.Parse("2006-01-02 15:04:05.999999", c)
		if err != nil {
			return nil, fmt.Errorf("backfill: the server's clock %q: %w", c, err)
		}
		if t := now.Add(-s.cfg.Since); t.After(after) {
			after = t
		}
	}
	for _, t := range []time.Time{after, s.cfg.Before} {
		if !t.IsZero() {
			c, err := local(t)
			if err != nil {
				return nil, err
			}
			out = append(out, c)
		}
	}
	return out, nil
}

// table is what Run learnt of the outbox table.
type table struct {
	mapper *canal.RowMapper
	cols   int
	pk     []int // indexes of the primary key's columns among the row's
	pkName []string
	binary []bool // per primary key column: compared as bytes (hex in the cursor)
	// layouts format a temporal column's value as the server prints it
	// (a pool with parseTime scans it as a time.Time); "" for the others.
	layouts []string
	query   string // the chunk SELECT after the first
	first   string // the first chunk's SELECT (no cursor yet)
	last    string // the SELECT of the table's last primary key (end)
}

func (s *Source) inspect(ctx context.Context) (*table, error) {
	rows, err := s.cfg.DB.QueryContext(ctx, "SELECT COLUMN_NAME, DATA_TYPE, COALESCE(CHARACTER_OCTET_LENGTH, 0), COALESCE(DATETIME_PRECISION, 0) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION", s.cfg.Schema, s.cfg.Table)
	if err != nil {
		return nil, fmt.Errorf("backfill: read the columns of %s: %w", s.table, err)
	}
	var names, types []string
	var lengths []int
	var layouts []string
	for rows.Next() {
		var name, typ string
		var length, prec int
		if err := rows.Scan(&name, &typ, &length, &prec); err != nil {
			rows.Close()
			return nil, err
		}
		names, types, lengths = append(names, name), append(types, strings.ToLower(typ)), append(lengths, length)
		layouts = append(layouts, timeLayout(strings.ToLower(typ), prec))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("backfill: outbox table %s does not exist, or the relay's user cannot SELECT it: grant SELECT on it", s.table)
	}
	if s.cfg.Since > 0 || !s.cfg.After.IsZero() || !s.cfg.Before.IsZero() {
		found := false
		for _, n := range names {
			found = found || strings.EqualFold(n, s.cfg.CreatedAt)
		}
		if !found {
			return nil, fmt.Errorf("backfill: selecting rows by age needs the table's insert time column, and %s has no column %s: add one (DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)), or name it with tables[].columns.created_at", s.table, s.cfg.CreatedAt)
		}
	}
	// The primary key's columns in the key's order.
	krows, err := s.cfg.DB.QueryContext(ctx, "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX", s.cfg.Schema, s.cfg.Table)
	if err != nil {
		return nil, fmt.Errorf("backfill: read the primary key of %s: %w", s.table, err)
	}
	t := &table{cols: len(names), layouts: layouts}
	for krows.Next() {
		var c string
		if err := krows.Scan(&c); err != nil {
			krows.Close()
			return nil, err
		}
		for i, n := range names {
			if strings.EqualFold(n, c) {
				t.pk, t.pkName = append(t.pk, i), append(t.pkName, n)
				t.binary = append(t.binary, binaryType(types[i]))
			}
		}
	}
	krows.Close()
	if err := krows.Err(); err != nil {
		return nil, err
	}
	if len(t.pk) == 0 {
		return nil, fmt.Errorf("backfill: outbox table %s has no primary key; a backfill reads it in primary key order: add one (e.g. seq BIGINT AUTO_INCREMENT PRIMARY KEY)", s.table)
	}
	binLen := make([]int, len(names))
	for i := range names {
		if types[i] == "binary" {
			binLen[i] = lengths[i]
		}
	}
	if t.mapper, err = s.cfg.Reader.RowMapper(s.cfg.Schema, s.cfg.Table, names, binLen); err != nil {
		return nil, fmt.Errorf("backfill: %w", err)
	}
	var order, desc []string
	for _, n := range t.pkName {
		order, desc = append(order, sqlident.Quote(n)), append(desc, sqlident.Quote(n)+" DESC")
	}
	t.last = "SELECT " + strings.Join(order, ", ") + " FROM " + sqlident.Table(s.cfg.Schema, s.cfg.Table) + " ORDER BY " + strings.Join(desc, ", ") + " LIMIT 1"
	base := "SELECT * FROM " + sqlident.Table(s.cfg.Schema, s.cfg.Table) + " WHERE "
	var conds []string
	if s.cfg.Where != "" {
		conds = append(conds, "("+s.cfg.Where+")")
	}
	var checkArgs []any
	if s.cfg.Since > 0 || !s.cfg.After.IsZero() {
		conds = append(conds, sqlident.Quote(s.cfg.CreatedAt)+" >= ?")
		checkArgs = append(checkArgs, "2000-01-01 00:00:00")
	}
	if !s.cfg.Before.IsZero() {
		conds = append(conds, sqlident.Quote(s.cfg.CreatedAt)+" < ?")
		checkArgs = append(checkArgs, "2000-01-01 00:00:00")
	}
	tail := " ORDER BY " + strings.Join(order, ", ") + fmt.Sprintf(" LIMIT %d", s.cfg.ChunkSize)
	upTo := "NOT " + after(t.pkName) // the key is at or before the end's (Run)
	t.first = base + strings.Join(append(conds, upTo), " AND ") + tail
	t.query = base + strings.Join(append(conds, after(t.pkName), upTo), " AND ") + tail
	// The filter's columns and syntax, checked by the server once.
	check := "SELECT 1 FROM " + sqlident.Table(s.cfg.Schema, s.cfg.Table) + " WHERE " + strings.Join(append(conds, "TRUE"), " AND ") + " LIMIT 0"
	if r, err := s.cfg.DB.QueryContext(ctx, check, checkArgs...); err != nil {
		if s.cfg.Where != "" {
			return nil, fmt.Errorf("backfill %s: the server refused the where filter %q: %w; it is one condition on the table's columns, e.g. status = 'pending'", s.table, s.cfg.Where, err)
		}
		return nil, fmt.Errorf("backfill %s: %w", s.table, err)
	} else {
		r.Close()
	}
	return t, nil
}

// after is the condition "the row's key is after the cursor's", for key
// columns cols: (a > ?) OR (a = ? AND b > ?) …, which every server uses
// as a range on the primary key (a row constructor comparison may not be).
func after(cols []string) string {
	var or []string
	for i := range cols {
		var and []string
		for j := 0; j < i; j++ {
			and = append(and, sqlident.Quote(cols[j])+" = ?")
		}
		and = append(and, sqlident.Quote(cols[i])+" > ?")
		or = append(or, "("+strings.Join(and, " AND ")+")")
	}
	return "(" + strings.Join(or, " OR ") + ")"
}

// afterArgs are after's arguments for the cursor key.
func afterArgs(key []string, binary []bool) ([]any, error) {
	vals := make([]any, len(key))
	for i, k := range key {
		if binary[i] {
			b, err := hex.DecodeString(k)
			if err != nil {
				return nil, fmt.Errorf("backfill: cursor key %q is not hex, as a binary key column's is: %w", k, err)
			}
			vals[i] = b
		} else {
			vals[i] = k
		}
	}
	var args []any
	for i := range key {
		args = append(args, vals[:i+1]...)
	}
	return args, nil
}

func binaryType(t string) bool {
	switch t {
	case "binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob":
		return true
	}
	return false
}

// end is the table's last primary key now (nil when it is empty): read
// after the backfill's start P, it is at or after the key of every row
// committed before P, so a backfill reads up to it and no further. Rows
// inserted while it runs, after it in key order, are the live stream's: a
// table that producers keep inserting into does not move the backfill's
// end away as it reads (keyset pages that chased the table's end as it
// grew never ended on a source whose inserts outran them).
func (s *Source) end(ctx context.Context, t *table) ([]string, error) {
	vals := make([]any, len(t.pk))
	dest := make([]any, len(t.pk))
	for i := range vals {
		dest[i] = &vals[i]
	}
	err := s.cfg.DB.QueryRowContext(ctx, t.last).Scan(dest...)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("backfill: read the last primary key of %s: %w", s.table, err)
	}
	raw := make([][]byte, t.cols)
	for i, c := range t.pk {
		raw[c] = text(vals[i], t.layouts[c])
	}
	return t.key(raw), nil
}

// key is the cursor key of a row whose columns' text is raw.
func (t *table) key(raw [][]byte) []string {
	k := make([]string, len(t.pk))
	for i, c := range t.pk {
		if t.binary[i] {
			k[i] = hex.EncodeToString(raw[c])
		} else {
			k[i] = string(raw[c])
		}
	}
	return k
}

// chunk reads the rows after key up to the table's end in a snapshot of
// its own, and returns their events, the last row's key, and the
// snapshot's binlog position.
func (s *Source) chunk(ctx context.Context, t *table, key, end []string, bounds []any) ([]*event.Event, []string, event.Position, error) {
	args := append([]any(nil), bounds...)
	q := t.first
	for i, k := range [][]string{key, end} {
		if len(k) == 0 {
			continue
		}
		if len(k) != len(t.pk) {
			return nil, nil, event.Position{}, fmt.Errorf("backfill: the cursor's key has %d values, the primary key of %s %d columns: the table's key changed since the backfill began; remove the backfill's checkpoint to start it again", len(k), s.table, len(t.pk))
		}
		a, err := afterArgs(k, t.binary)
		if err != nil {
			return nil, nil, event.Position{}, err
		}
		args = append(args, a...)
		if i == 0 {
			q = t.query
		}
	}
	sn, err := s.open(ctx, false)
	if err != nil {
		return nil, nil, event.Position{}, err
	}
	defer sn.close()
	rows, err := sn.conn.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, nil, event.Position{}, fmt.Errorf("backfill: read %s: %w", s.table, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, nil, event.Position{}, err
	}
	if len(cols) != t.cols {
		return nil, nil, event.Position{}, fmt.Errorf("backfill: %s has %d columns, %d when the backfill began: its columns changed; restart the backfill", s.table, len(cols), t.cols)
	}
	var out []*event.Event
	var last []string
	vals := make([]any, len(cols))
	dest := make([]any, len(cols))
	raw := make([][]byte, len(cols))
	for i := range vals {
		dest[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, nil, event.Position{}, err
		}
		row := make([]any, len(cols))
		for i, v := range vals {
			raw[i] = text(v, t.layouts[i])
			if raw[i] != nil {
				row[i] = raw[i]
			}
		}
		last = t.key(raw)
		e, err := t.mapper.Event(row, strings.Join(last, ","))
		if err != nil {
			return nil, nil, event.Position{}, fmt.Errorf("backfill: %w", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, event.Position{}, fmt.Errorf("backfill: read %s: %w", s.table, err)
	}
	rows.Close()
	if err := s.mark(ctx, sn); err != nil {
		return nil, nil, event.Position{}, err
	}
	return out, last, sn.pos, nil
}

// follower reads the binlog from the backfill's start P, and lists the
// ids of the rows inserted into the table since: a chunk read at G drops
// those inserted up to G (the live stream from P has them).
type follower struct {
	flavor, table string
	mu            sync.Mutex
	changed       chan struct{} // closed and replaced when reached moves or err is set
	reached       event.Position
	ids           map[string]struct{}
	err           error
}

func newFollower(flavor string, from event.Position, table string) *follower {
	return &follower{flavor: flavor, table: table, reached: from, ids: map[string]struct{}{}, changed: make(chan struct{})}
}

func (f *follower) handle(_ context.Context, txn *event.Txn) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range txn.Events {
		if e.Table == f.table {
			f.ids[e.ID] = struct{}{}
		}
	}
	f.reached = txn.Position
	close(f.changed)
	f.changed = make(chan struct{})
	return nil
}

func (f *follower) fail(err error) {
	if err == nil {
		err = errors.New("binlog reader ended")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
	close(f.changed)
	f.changed = make(chan struct{})
}

// wait returns once the binlog has been read up to g: a GTID set (MySQL's
// watermark; an empty one, before any GTID, at once), or MariaDB's file
// and position. Binlog coordinates tell at once, but for one case: g at
// the start of a file the server has rotated to, with no transaction after
// it yet (the reader's last position is in the file before). When they
// have not told within a second, g's GTID position (gtid, looked up once;
// nil for none) is compared too.
func (f *follower) wait(ctx context.Context, g event.Position, gtid func() (string, error)) error {
	if g.GTIDSet == "" && g.File == "" {
		return nil // no transaction executed yet
	}
	slow := time.NewTimer(time.Second)
	defer slow.Stop()
	var byGTID event.Position
	for {
		f.mu.Lock()
		done := position.Covers(f.flavor, f.reached, g) || (byGTID.GTIDSet != "" && position.Covers(f.flavor, f.reached, byGTID))
		err, ch := f.err, f.changed
		f.mu.Unlock()
		switch {
		case done:
			return nil
		case err != nil && ctx.Err() == nil:
			return fmt.Errorf("backfill: read the binlog from the backfill's start: %w", err)
		}
		select {
		case <-ch:
		case <-slow.C:
			if gtid == nil {
				continue
			}
			set, err := gtid()
			if err != nil {
				return err
			}
			byGTID = event.Position{GTIDSet: set}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// committedAfter reports whether the row of event id was inserted after
// the backfill's start (as far as the binlog has been read: call it after
// wait).
func (f *follower) committedAfter(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.ids[id]
	return ok
}

// timeLayout is the layout of a temporal column of type typ and fractional
// digits prec, as the server prints it; "" for other columns.
func timeLayout(typ string, prec int) string {
	switch typ {
	case "date":
		return "2006-01-02"
	case "datetime", "timestamp":
		if prec > 0 {
			return "2006-01-02 15:04:05." + strings.Repeat("0", min(prec, 6))
		}
		return "2006-01-02 15:04:05"
	}
	return ""
}

// text is a scanned value as the server's text: bytes as they are, a
// time.Time (a pool with parseTime) in the column's layout, nil for NULL.
func text(v any, layout string) []byte {
	switch x := v.(type) {
	case nil:
		return nil
	case []byte:
		return x
	case time.Time:
		if layout == "" {
			layout = "2006-01-02 15:04:05.999999"
		}
		return []byte(x.Format(layout))
	case string:
		return []byte(x)
	default:
		return fmt.Append(nil, x)
	}
}
