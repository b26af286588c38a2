package canal

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outbox-relay/outbox-relay/event"
)

// Config says which server to read and which tables are outbox tables.
type Config struct {
	Host     string
	Port     uint16
	User     string
	Password string
	TLS      *tls.Config

	// ServerID is the replica id the reader registers with; it must differ
	// from the server's own and from every other replica's. Required.
	ServerID uint32
	// Flavor is "mysql" or "mariadb". Required (see Inspect to detect it).
	Flavor string

	// Tables are the outbox tables. At least one.
	Tables []Table

	// HeartbeatPeriod asks the server for a heartbeat when the binlog is idle.
	// Default 5s.
	HeartbeatPeriod time.Duration
	// ReadTimeout ends a connection that received nothing, not even a
	// heartbeat, for this long. Default 3 × HeartbeatPeriod.
	ReadTimeout time.Duration
	// MaxBackoff caps the wait between reconnect attempts. Default 30s.
	MaxBackoff time.Duration
	// EventCacheCount is how many raw events go-mysql buffers. Default 512.
	EventCacheCount int

	// Observer, if set, is told about what the reader sees (for metrics).
	Observer Observer

	Logger *slog.Logger
}

// Observer receives counts from the reader. Its methods are called from the
// goroutine running Run and must not block.
type Observer interface {
	// BinlogEvent is called for every binlog event read.
	BinlogEvent()
	// OutboxEvents is called with the number of events extracted from table.
	OutboxEvents(table string, n int)
	// Heartbeat is called when the server sends a heartbeat on an idle binlog.
	Heartbeat()
	// Reconnect is called before each reconnect attempt.
	Reconnect()
	// Connected is called when a new stream delivered its first event.
	Connected()
	// Transaction is called for each committed transaction read, before it
	// is handed on, with its commit time (binlog header, 1 s resolution).
	Transaction(commit time.Time)
}

// Table is one outbox table and how its columns map to an event.
type Table struct {
	Schema string
	Name   string
	// Columns name the table's columns that hold each event field.
	Columns Columns
	// Headers are extra columns sent as headers, in this order.
	Headers []string
}

// Columns maps event fields to column names. ID, AggregateID and Payload are
// required; AggregateType and Type may be empty (not mapped).
type Columns struct {
	ID            string
	AggregateType string
	AggregateID   string
	Type          string
	Payload       string
}

// FullName is "schema.table".
func (t Table) FullName() string { return t.Schema + "." + t.Name }

// ErrPositionLost is returned by Run when the server no longer has the binlog
// the reader must resume from (purged), or rejects the position as foreign.
var ErrPositionLost = errors.New("binlog position is no longer available on the server")

// Reader reads outbox events from the binlog.
type Reader struct {
	cfg    Config
	tables map[string]map[string]*Table // schema -> table -> outbox table
	log    *slog.Logger
}

// New checks cfg and returns a Reader.
func New(cfg Config) (*Reader, error) {
	if cfg.ServerID == 0 {
		return nil, errors.New("canal: server_id must be set to a non-zero id unused by the server and its replicas")
	}
	if cfg.Flavor != mysql.MySQLFlavor && cfg.Flavor != mysql.MariaDBFlavor {
		return nil, fmt.Errorf("canal: flavor %q: want mysql or mariadb", cfg.Flavor)
	}
	if len(cfg.Tables) == 0 {
		return nil, errors.New("canal: no outbox tables configured")
	}
	if cfg.HeartbeatPeriod <= 0 {
		cfg.HeartbeatPeriod = 5 * time.Second
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = 3 * cfg.HeartbeatPeriod
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 30 * time.Second
	}
	if cfg.EventCacheCount <= 0 {
		cfg.EventCacheCount = 512
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Reader{cfg: cfg, tables: map[string]map[string]*Table{}, log: cfg.Logger}
	for i := range cfg.Tables {
		t := &cfg.Tables[i]
		if t.Columns.ID == "" || t.Columns.AggregateID == "" || t.Columns.Payload == "" {
			return nil, fmt.Errorf("canal: table %s: the id, aggregate_id and payload columns must be mapped", t.FullName())
		}
		if r.tables[t.Schema] == nil {
			r.tables[t.Schema] = map[string]*Table{}
		}
		r.tables[t.Schema][t.Name] = t
	}
	return r, nil
}

// Handler receives each committed transaction in binlog order. It may block
// (that is the backpressure: the binlog is the buffer). An error from it ends
// Run with that error.
type Handler = func(ctx context.Context, txn *event.Txn) error

// Run streams from the position after from and calls handle for every
// transaction, until ctx ends (then it returns ctx.Err()), handle fails, or
// the position is lost (ErrPositionLost). Stream errors are retried forever.
func (r *Reader) Run(ctx context.Context, from event.Position, handle Handler) error {
	pos := from
	backoff := time.Duration(0)
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			backoff = min(max(2*backoff, 250*time.Millisecond), r.cfg.MaxBackoff)
			wait := backoff/2 + rand.N(backoff/2+1)
			if r.cfg.Observer != nil {
				r.cfg.Observer.Reconnect()
			}
			r.log.Warn("binlog stream reconnecting", slog.Int("attempt", attempt), slog.Duration("wait", wait), slog.String("from", pos.String()))
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(wait):
			}
		}
		progressed := false
		err := r.stream(ctx, pos, func(ctx context.Context, txn *event.Txn) error {
			if err := handle(ctx, txn); err != nil {
				return handlerError{err}
			}
			pos = txn.Position
			progressed = true
			return nil
		})
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var he handlerError
		if errors.As(err, &he) {
			return he.err
		}
		if errors.Is(err, ErrPositionLost) || errors.Is(err, errFatal) {
			return err
		}
		if progressed {
			backoff = 0
		}
		r.log.Warn("binlog stream error", slog.Any("err", err), slog.String("resume_from", pos.String()))
	}
}

type handlerError struct{ err error }

func (h handlerError) Error() string { return h.err.Error() }

var errFatal = errors.New("fatal binlog error")

// stream runs one syncer from pos until an error.
func (r *Reader) stream(ctx context.Context, pos event.Position, handle Handler) error {
	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID:              r.cfg.ServerID,
		Flavor:                r.cfg.Flavor,
		Host:                  r.cfg.Host,
		Port:                  r.cfg.Port,
		User:                  r.cfg.User,
		Password:              r.cfg.Password,
		TLSConfig:             r.cfg.TLS,
		HeartbeatPeriod:       r.cfg.HeartbeatPeriod,
		ReadTimeout:           r.cfg.ReadTimeout,
		DisableRetrySync:      true, // a fresh syncer per attempt, from our own position
		RenderJSONAsMySQLText: true,
		FillZeroLogPos:        r.cfg.Flavor == mysql.MariaDBFlavor,
		EventCacheCount:       r.cfg.EventCacheCount,
		RowsEventDecodeFunc:   r.decodeRows,
		Logger:                slog.New(demoteInfo{r.log.Handler()}).With(slog.String("component", "go-mysql")),
	})
	defer syncer.Close()

	var (
		streamer *replication.BinlogStreamer
		err      error
	)
	st := &txnState{file: pos.File}
	if pos.GTIDSet != "" || (pos.File == "" && r.cfg.Flavor == mysql.MariaDBFlavor) {
		var gset mysql.GTIDSet
		gset, err = mysql.ParseGTIDSet(r.cfg.Flavor, pos.GTIDSet)
		if err != nil {
			return fmt.Errorf("%w: parse GTID set %q: %v", errFatal, pos.GTIDSet, err)
		}
		streamer, err = syncer.StartSyncGTID(gset)
	} else {
		if pos.File == "" {
			return fmt.Errorf("%w: no start position", errFatal)
		}
		if r.cfg.Flavor == mysql.MariaDBFlavor {
			// MariaDB always has GTIDs: track them ourselves from the
			// GTID list event at the start of the file.
			st.ownGTID, _ = mysql.ParseMariadbGTIDSet("")
		}
		streamer, err = syncer.StartSync(mysql.Position{Name: pos.File, Pos: max(pos.Pos, 4)})
	}
	if err != nil {
		return classify(err)
	}
	for first := true; ; first = false {
		ev, err := streamer.GetEvent(ctx)
		if err != nil {
			return classify(err)
		}
		if r.cfg.Observer != nil {
			if first {
				r.cfg.Observer.Connected()
			}
			r.cfg.Observer.BinlogEvent()
		}
		if err := r.onEvent(ctx, st, ev, handle); err != nil {
			return err
		}
	}
}

// classify turns the server's refusal to serve a position into ErrPositionLost.
func classify(err error) error {
	var me *mysql.MyError
	if errors.As(err, &me) {
		switch me.Code {
		case 1236: // ER_MASTER_FATAL_ERROR_READING_BINLOG: purged, or unknown GTID
			return fmt.Errorf("%w: %s (error %d); `outbox-relay check` shows the gap and the recovery choices (remove the sink's checkpoint and start from checkpoint.start: earliest or current)", ErrPositionLost, me.Message, me.Code)
		case 1045, 1227, 1044: // access denied, missing privilege
			return fmt.Errorf("%w: %s (error %d): grant REPLICATION SLAVE and REPLICATION CLIENT to the relay's user", errFatal, me.Message, me.Code)
		}
	}
	return err
}

// txnState is the reader's view of the transaction in progress.
type txnState struct {
	file    string
	inTxn   bool // a BEGIN was read
	gtid    string
	events  []*event.Event
	tables  map[uint64]*tableMap
	ownGTID mysql.GTIDSet // MariaDB GTID position tracked locally (file/pos starts)
}

// tableMap is a TABLE_MAP event of an outbox table with column indexes resolved.
type tableMap struct {
	table   *Table
	name    string
	id      int
	aggType int
	aggID   int
	typ     int
	payload int
	headers []int
	idBin   int // declared length of a binary id column, 0 otherwise
	ev      *replication.TableMapEvent
}

// outboxTable returns the outbox table a TABLE_MAP event names, or nil. It
// runs for every rows event of every table, so it does not allocate.
func (r *Reader) outboxTable(e *replication.TableMapEvent) *Table {
	return r.tables[string(e.Schema)][string(e.Table)]
}

func (r *Reader) decodeRows(re *replication.RowsEvent, data []byte) error {
	pos, err := re.DecodeHeader(data)
	if err != nil {
		return err
	}
	if re.Table == nil || r.outboxTable(re.Table) == nil {
		return nil // not an outbox table: never decoded
	}
	if re.Type() != replication.EnumRowsEventTypeInsert {
		return nil // UPDATE and DELETE of the outbox are ignored
	}
	return re.DecodeData(pos, data)
}

func (r *Reader) onEvent(ctx context.Context, st *txnState, ev *replication.BinlogEvent, handle Handler) error {
	switch e := ev.Event.(type) {
	case *replication.RotateEvent:
		st.file = string(e.NextLogName)
	case *replication.MariadbGTIDListEvent:
		if st.ownGTID != nil && st.ownGTID.IsEmpty() {
			for i := range e.GTIDs {
				_ = st.ownGTID.(*mysql.MariadbGTIDSet).AddSet(&e.GTIDs[i])
			}
		}
	case *replication.GTIDEvent:
		st.begin()
		if u, err := uuidString(e.SID); err == nil {
			st.gtid = fmt.Sprintf("%s:%d", u, e.GNO)
		}
	case *replication.MariadbGTIDEvent:
		st.begin()
		st.gtid = e.GTID.String()
		st.inTxn = !e.IsStandalone()
		if st.ownGTID != nil {
			_ = st.ownGTID.(*mysql.MariadbGTIDSet).AddSet(&e.GTID)
		}
	case *replication.TableMapEvent:
		t := r.outboxTable(e)
		if t == nil {
			return nil
		}
		tm, err := resolve(t, e)
		if err != nil {
			return fmt.Errorf("%w: %v", errFatal, err)
		}
		if st.tables == nil {
			st.tables = map[uint64]*tableMap{}
		}
		st.tables[e.TableID] = tm
	case *replication.RowsEvent:
		if len(e.Rows) == 0 || e.Type() != replication.EnumRowsEventTypeInsert {
			return nil
		}
		tm := st.tables[e.TableID]
		if tm == nil {
			return nil
		}
		for _, row := range e.Rows {
			evt, err := tm.toEvent(row)
			if err != nil {
				return fmt.Errorf("%w: table %s: %v", errFatal, tm.name, err)
			}
			st.events = append(st.events, evt)
		}
		if r.cfg.Observer != nil {
			r.cfg.Observer.OutboxEvents(tm.name, len(e.Rows))
		}
	case *replication.QueryEvent:
		q := bytes.TrimSpace(e.Query)
		switch {
		case bytes.EqualFold(q, []byte("BEGIN")):
			st.inTxn = true
			return nil
		case bytes.EqualFold(q, []byte("COMMIT")):
			return r.commit(ctx, st, ev, e.GSet, handle)
		case bytes.EqualFold(q, []byte("ROLLBACK")):
			st.events = nil // only non-transactional changes survived; none are ours
			return r.commit(ctx, st, ev, e.GSet, handle)
		case st.inTxn:
			return nil // a statement inside a transaction (SAVEPOINT, ...)
		default:
			return r.commit(ctx, st, ev, e.GSet, handle) // DDL: its own transaction
		}
	case *replication.XIDEvent:
		return r.commit(ctx, st, ev, e.GSet, handle)
	case *replication.TransactionPayloadEvent:
		for _, inner := range e.Events {
			if err := r.onEvent(ctx, st, inner, handle); err != nil {
				return err
			}
		}
	case *replication.HeartbeatEvent:
		if r.cfg.Observer != nil {
			r.cfg.Observer.Heartbeat()
		}
	case *replication.GenericEvent:
		if ev.Header.EventType == replication.HEARTBEAT_EVENT || ev.Header.EventType == replication.HEARTBEAT_LOG_EVENT_V2 {
			if r.cfg.Observer != nil {
				r.cfg.Observer.Heartbeat()
			}
		}
	}
	return nil
}

func (st *txnState) begin() {
	st.inTxn = false
	st.gtid = ""
	st.events = nil
	st.tables = nil
}

func (r *Reader) commit(ctx context.Context, st *txnState, ev *replication.BinlogEvent, gset mysql.GTIDSet, handle Handler) error {
	pos := event.Position{File: st.file, Pos: ev.Header.LogPos}
	switch {
	case gset != nil:
		pos.GTIDSet = gset.String()
	case st.ownGTID != nil:
		pos.GTIDSet = st.ownGTID.String()
	}
	commitTime := time.Unix(int64(ev.Header.Timestamp), 0).UTC()
	for _, e := range st.events {
		e.CommitTime = commitTime
		e.Source = event.Source{GTID: st.gtid, File: pos.File, Pos: pos.Pos}
	}
	txn := &event.Txn{Events: st.events, Position: pos, CommitTime: commitTime}
	st.begin()
	if r.cfg.Observer != nil {
		r.cfg.Observer.Transaction(commitTime)
	}
	return handle(ctx, txn)
}

func uuidString(b []byte) (string, error) {
	if len(b) != 16 {
		return "", errors.New("bad sid")
	}
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}

// ColumnsMissingError is returned when the binlog carries no column names.
func missingMetadata(table string) error {
	return fmt.Errorf("table %s: the binlog has no column names; set binlog_row_metadata=FULL on the server (MySQL 8.0.1+, MariaDB 10.5+) and restart the relay", table)
}

func resolve(t *Table, e *replication.TableMapEvent) (*tableMap, error) {
	names := e.ColumnNameString()
	if len(names) == 0 {
		return nil, missingMetadata(t.FullName())
	}
	idx := make(map[string]int, len(names))
	for i, n := range names {
		idx[strings.ToLower(n)] = i
	}
	find := func(field, col string) (int, error) {
		if col == "" {
			return -1, nil
		}
		i, ok := idx[strings.ToLower(col)]
		if !ok {
			return 0, fmt.Errorf("table %s has no column %q (mapped to %s); fix the table's column mapping or the table", t.FullName(), col, field)
		}
		return i, nil
	}
	tm := &tableMap{table: t, name: t.FullName(), ev: e}
	var err error
	if tm.id, err = find("id", t.Columns.ID); err != nil {
		return nil, err
	}
	if tm.aggType, err = find("aggregate_type", t.Columns.AggregateType); err != nil {
		return nil, err
	}
	if tm.aggID, err = find("aggregate_id", t.Columns.AggregateID); err != nil {
		return nil, err
	}
	if tm.typ, err = find("type", t.Columns.Type); err != nil {
		return nil, err
	}
	if tm.payload, err = find("payload", t.Columns.Payload); err != nil {
		return nil, err
	}
	for _, h := range t.Headers {
		i, err := find("header", h)
		if err != nil {
			return nil, err
		}
		tm.headers = append(tm.headers, i)
	}
	if e.ColumnType[tm.id] == mysql.MYSQL_TYPE_STRING && e.CollationMap()[tm.id] == 63 {
		// BINARY(n): the declared length is in the column metadata.
		meta := e.ColumnMeta[tm.id]
		length := int(meta&0xff) | int(((meta>>4)&0x300)^0x300)
		tm.idBin = length
	}
	return tm, nil
}

func (tm *tableMap) toEvent(row []any) (*event.Event, error) {
	if len(row) != len(tm.ev.ColumnType) {
		return nil, fmt.Errorf("row has %d columns, table map %d", len(row), len(tm.ev.ColumnType))
	}
	e := &event.Event{Table: tm.name}
	if tm.idBin == 16 {
		b := asBytes(row[tm.id])
		if len(b) <= 16 {
			var u [16]byte
			copy(u[:], b) // MySQL may strip trailing zero bytes of BINARY
			e.ID = fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
		} else {
			e.ID = fmt.Sprintf("%x", b)
		}
	} else {
		e.ID = asString(row[tm.id])
	}
	if e.ID == "" {
		return nil, fmt.Errorf("event id column %q is empty or NULL", tm.table.Columns.ID)
	}
	if tm.aggType >= 0 {
		e.AggregateType = asString(row[tm.aggType])
	}
	e.AggregateID = asString(row[tm.aggID])
	if tm.typ >= 0 {
		e.Type = asString(row[tm.typ])
	}
	if p := row[tm.payload]; p != nil {
		e.Payload = bytes.Clone(asBytes(p))
	}
	for i, c := range tm.headers {
		if v := row[c]; v != nil {
			e.Headers = append(e.Headers, event.Header{Key: tm.table.Headers[i], Value: asString(v)})
		}
	}
	return e, nil
}

func asBytes(v any) []byte {
	switch x := v.(type) {
	case nil:
		return nil
	case []byte:
		return x
	case string:
		return []byte(x)
	default:
		return []byte(asString(v))
	}
}

func asString(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case []byte:
		return string(x)
	case fmt.Stringer:
		return x.String()
	default:
		return fmt.Sprint(x)
	}
}

// demoteInfo logs go-mysql's chatty Info records (every connect, every
// binlog rotation) at Debug; its warnings and errors pass unchanged.
type demoteInfo struct{ slog.Handler }

func (d demoteInfo) Enabled(ctx context.Context, l slog.Level) bool {
	if l == slog.LevelInfo {
		l = slog.LevelDebug
	}
	return d.Handler.Enabled(ctx, l)
}

func (d demoteInfo) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelInfo {
		r.Level = slog.LevelDebug
	}
	return d.Handler.Handle(ctx, r)
}

func (d demoteInfo) WithAttrs(as []slog.Attr) slog.Handler {
	return demoteInfo{d.Handler.WithAttrs(as)}
}
func (d demoteInfo) WithGroup(n string) slog.Handler { return demoteInfo{d.Handler.WithGroup(n)} }
