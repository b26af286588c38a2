package canal

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/google/uuid"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/printable"
	"github.com/outbox-relay/outbox-relay/position"
	"github.com/outbox-relay/outbox-relay/retry"
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
	// Flavor is "mysql" or "mariadb". Required (see source.ReadInfo to detect it).
	Flavor string
	// GTIDMode says the server has GTIDs on (source.ServerInfo.GTIDMode): positions
	// then always carry the executed GTID set, whatever the start.
	GTIDMode bool

	// Tables are the outbox tables. At least one.
	Tables []Table
	// Watch are other tables whose inserted, updated and deleted rows are
	// handed on with their transaction (event.Txn.Changes), read from the
	// same stream; they need binlog_row_metadata=FULL and
	// binlog_row_image=FULL like the outbox tables. Default none: rows of
	// tables that are not outbox tables are then never decoded.
	Watch []Watched
	// Own lists tables that only the relay itself writes ("schema.table":
	// its checkpoint table, when the checkpoint store is on the source
	// server). A transaction whose rows are all in these tables, with no
	// event and no watched change, is not handed on: a checkpoint save is
	// then not a transaction that moves the position and asks for another
	// save (an idle relay would write one every checkpoint.min_interval).
	Own []string

	// HeartbeatPeriod asks the server for a heartbeat when the binlog is idle.
	// Default 5s.
	HeartbeatPeriod time.Duration
	// ReadTimeout ends a connection that received nothing, not even a
	// heartbeat, for this long. Default 3 × HeartbeatPeriod.
	ReadTimeout time.Duration
	// Retry is the wait between reconnect attempts: the relay's policy
	// (retry.FromConfig), capped at source.max_reconnect_backoff. Zero
	// fields: retry's defaults. A server that refuses connections is
	// retried at least every Retry.Probe, so its return is noticed at once.
	Retry retry.Policy

	// Pick, if set, chooses the server to read from pos (Host, Port and TLS
	// above are then unused): at start, and when the stream has failed for
	// FailoverAfter without reading a transaction, or the server no longer
	// has the position. An error wrapping position.ErrLost or position.ErrNotInHistory
	// ends Run; any other is retried.
	Pick func(ctx context.Context, pos event.Position) (Endpoint, error)
	// FailoverAfter is how long a failing stream is retried on its server
	// before Pick is asked again. Default 10s.
	FailoverAfter time.Duration

	// Observer, if set, is told about what the reader sees (for metrics).
	Observer Observer

	Logger *slog.Logger
}

// Observer receives counts from the reader. Its methods are called one at a
// time, from the goroutine that reads the stream (doc.go), and must not block.
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
	// Server is called when the reader starts reading a server (its
	// "host:port"): at start, and after each failover (failover true).
	Server(addr string, failover bool)
}

// Endpoint is a server to read the binlog from.
type Endpoint struct {
	Host string
	Port uint16
	TLS  *tls.Config
}

// Addr is "host:port".
func (e Endpoint) Addr() string { return net.JoinHostPort(e.Host, strconv.Itoa(int(e.Port))) }

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
	// TraceParent and TraceState are the W3C trace context columns; empty
	// when not mapped. A value "$.a.b" names a field of the payload's JSON
	// instead (a string at that path of objects).
	TraceParent string
	TraceState  string
}

// FullName is "schema.table".
func (t Table) FullName() string { return t.Schema + "." + t.Name }

// Reader reads outbox events from the binlog.
type Reader struct {
	cfg    Config
	tables map[string]map[string]*Table // schema -> table -> outbox table
	watch  map[string]map[string]string // schema -> table -> "schema.table" of a watched table; nil when none
	own    map[string]map[string]bool   // schema -> table of Config.Own; nil when none
	log    *slog.Logger
	// badTraceLogged is set once a malformed traceparent was logged (Run's goroutine only).
	badTraceLogged bool
	// resolved is the last table map resolved of each outbox table (Run's
	// goroutine only).
	resolved map[*Table]*tableMap
	// decodeWhole decodes every column of an outbox row, as go-mysql does,
	// rather than only those used (narrow.go); tests compare the two.
	decodeWhole bool
	// narrowed counts the rows events decoded narrow, unknown those of
	// outbox tables decoded whole because a value's length could not be
	// told (for tests).
	narrowed, unknown atomic.Int64
	// direct counts the rows events decoded straight into events (direct.go).
	direct atomic.Int64
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
	if cfg.FailoverAfter <= 0 {
		cfg.FailoverAfter = 10 * time.Second
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
	for _, w := range cfg.Watch {
		switch {
		case w.Schema == "" || w.Name == "":
			return nil, fmt.Errorf("canal: watched table %q: give both its schema and its name", w.FullName())
		case r.tables[w.Schema][w.Name] != nil:
			return nil, fmt.Errorf("canal: table %s is both an outbox table and a watched table; watch another table", w.FullName())
		case r.watch[w.Schema][w.Name] != "":
			return nil, fmt.Errorf("canal: table %s is watched twice; list it once", w.FullName())
		}
		if r.watch == nil {
			r.watch = map[string]map[string]string{}
		}
		if r.watch[w.Schema] == nil {
			r.watch[w.Schema] = map[string]string{}
		}
		r.watch[w.Schema][w.Name] = w.FullName()
	}
	for _, t := range cfg.Own {
		schema, name, ok := strings.Cut(t, ".")
		if !ok {
			return nil, fmt.Errorf("canal: own table %q: give it as schema.table", t)
		}
		if r.own == nil {
			r.own = map[string]map[string]bool{}
		}
		if r.own[schema] == nil {
			r.own[schema] = map[string]bool{}
		}
		r.own[schema][name] = true
	}
	return r, nil
}

// Handler receives each committed transaction in binlog order. It may block
// (that is the backpressure: the binlog is the buffer). An error from it ends
// Run with that error.
type Handler = func(ctx context.Context, txn *event.Txn) error

// Run streams from the position after from and calls handle for every
// transaction, until ctx ends (then it returns ctx.Err()), handle fails, or
// the position is lost (position.ErrLost). Stream errors are retried forever.
func (r *Reader) Run(ctx context.Context, from event.Position, handle Handler) error {
	pos := from
	bo := retry.Backoff{Policy: r.cfg.Retry}
	cur := Endpoint{Host: r.cfg.Host, Port: r.cfg.Port, TLS: r.cfg.TLS}
	if r.cfg.Pick != nil {
		var err error
		if cur, err = r.pick(ctx, pos, &bo); err != nil {
			return err
		}
	}
	if r.cfg.Observer != nil {
		r.cfg.Observer.Server(cur.Addr(), false)
	}
	var lastErr error
	failingSince := time.Time{}
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			wait := bo.Next(lastErr)
			if r.cfg.Observer != nil {
				r.cfg.Observer.Reconnect()
			}
			r.log.Warn("binlog stream reconnecting", slog.Int("attempt", attempt), slog.Duration("wait", wait), slog.String("server", cur.Addr()), slog.String("from", pos.String()))
			if err := retry.Sleep(ctx, wait); err != nil {
				return err
			}
		}
		progressed := false
		err := r.stream(ctx, cur, pos, func(ctx context.Context, txn *event.Txn) error {
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
		if errors.Is(err, errFatal) || (r.cfg.Pick == nil && errors.Is(err, position.ErrLost)) {
			return err
		}
		if progressed || failingSince.IsZero() {
			failingSince = time.Now()
		}
		if progressed {
			bo.Reset()
		}
		lastErr = err
		r.log.Warn("binlog stream error", slog.Any("err", err), slog.String("server", cur.Addr()), slog.String("resume_from", pos.String()))
		if r.cfg.Pick != nil && (errors.Is(err, position.ErrLost) || time.Since(failingSince) >= r.cfg.FailoverAfter) {
			next, err := r.pick(ctx, pos, &bo)
			if err != nil {
				return err
			}
			if next.Addr() != cur.Addr() {
				r.log.Warn("binlog source failover", slog.String("from_server", cur.Addr()), slog.String("to_server", next.Addr()), slog.String("resume_from", pos.String()))
				if r.cfg.Observer != nil {
					r.cfg.Observer.Server(next.Addr(), true)
				}
				cur = next
				bo.Reset()
				attempt = -1 // connect to the new server at once
			}
			failingSince = time.Now()
		}
	}
}

// pick asks Pick for a server until it names one, retrying with backoff
// while none is usable; a position no server can serve ends it.
func (r *Reader) pick(ctx context.Context, pos event.Position, bo *retry.Backoff) (Endpoint, error) {
	for {
		ep, err := r.cfg.Pick(ctx, pos)
		if err == nil {
			return ep, nil
		}
		if errors.Is(err, position.ErrLost) || errors.Is(err, position.ErrNotInHistory) || errors.Is(err, errFatal) || ctx.Err() != nil {
			return Endpoint{}, err
		}
		wait := bo.Next(err)
		r.log.Warn("no source server usable; retrying", slog.Any("err", err), slog.Duration("wait", wait), slog.String("from", pos.String()))
		if err := retry.Sleep(ctx, wait); err != nil {
			return Endpoint{}, err
		}
	}
}

type handlerError struct{ err error }

func (h handlerError) Error() string { return h.err.Error() }

var errFatal = errors.New("fatal binlog error")

// stream runs one syncer from pos until an error.
//
// The executed GTID set is tracked here, for both flavors and every kind of
// start, from the start set (a GTID start), the first file's PREVIOUS_GTIDS
// (MySQL) or GTID list (MariaDB) event (a file start), and each transaction's
// GTID event; go-mysql's own tracking (GTID starts only) is not used.
func (r *Reader) stream(ctx context.Context, ep Endpoint, pos event.Position, handle Handler) error {
	narrow := &narrowCache{r: r} // the syncer's goroutine's
	st := &txnState{file: pos.File, last: pos, server: ep.Addr()}
	var end inlineEnd
	first := true
	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID:              r.cfg.ServerID,
		Flavor:                r.cfg.Flavor,
		Host:                  ep.Host,
		Port:                  ep.Port,
		User:                  r.cfg.User,
		Password:              r.cfg.Password,
		TLSConfig:             ep.TLS,
		HeartbeatPeriod:       r.cfg.HeartbeatPeriod,
		ReadTimeout:           r.cfg.ReadTimeout,
		Dialer:                lazyDeadlineDialer(deadlineSlack(r.cfg.ReadTimeout)),
		DisableRetrySync:      true, // a fresh syncer per attempt, from our own position
		DiscardGTIDSet:        true, // tracked by txnState, for every kind of start
		RenderJSONAsMySQLText: true,
		// Temporal columns as time.Time, not fmt.Sprintf'd strings: every
		// column of an outbox row is decoded, and formatting a DATETIME was
		// the costliest part of it. The few mapped ones are formatted as
		// go-mysql would have (tableMap.str).
		ParseTime:           true,
		FillZeroLogPos:      r.cfg.Flavor == mysql.MariaDBFlavor,
		EventCacheCount:     1, // the stream's end alone travels by go-mysql's channel (inline.go)
		RowsEventDecodeFunc: func(re *replication.RowsEvent, data []byte) error { return r.decodeRows(narrow, re, data) },
		Logger:              LibraryLogger(r.log),
		// Each event is handled on the syncer's goroutine as it is parsed
		// (inline.go).
		SynchronousEventHandler: inline(func(ev *replication.BinlogEvent) error {
			if r.cfg.Observer != nil {
				if first {
					r.cfg.Observer.Connected()
					first = false
				}
				r.cfg.Observer.BinlogEvent()
			}
			return r.onEvent(ctx, st, ev, handle)
		}, &end),
	})
	defer syncer.Close()

	var (
		streamer *replication.BinlogStreamer
		err      error
	)
	mode, err := r.startMode(pos)
	if err != nil {
		return err
	}
	switch mode {
	case startGTID:
		st.exec, err = mysql.ParseGTIDSet(r.cfg.Flavor, pos.GTIDSet)
		if err != nil {
			return fmt.Errorf("%w: parse GTID set %q: %v", errFatal, pos.GTIDSet, err)
		}
		streamer, err = syncer.StartSyncGTID(st.exec.Clone())
	case startFileTracked:
		// GTIDs are on but the position has none: read the file from its
		// start, take the executed set from its PREVIOUS_GTIDS / GTID list
		// event, and skip the transactions up to pos (handed on before).
		st.track = true
		if pos.Pos > 4 {
			st.skipFile, st.skipTo = pos.File, pos.Pos
		}
		streamer, err = syncer.StartSync(mysql.Position{Name: pos.File, Pos: 4})
	default:
		streamer, err = syncer.StartSync(mysql.Position{Name: pos.File, Pos: max(pos.Pos, 4)})
	}
	if err != nil {
		return classifyDump(err, pos.GTIDSet)
	}
	return end.wait(ctx, streamer, pos.GTIDSet)
}

type startMode int

const (
	startFile        startMode = iota // file/position; no GTIDs to track
	startGTID                         // COM_BINLOG_DUMP_GTID from the position's set
	startFileTracked                  // file start, GTIDs tracked from the file's header events
)

// startMode chooses how to ask the server for pos. With GTIDs on, a position
// without a GTID set is either the start of a file before any GTID (an
// empty set: a GTID start, which every MySQL-protocol server serves) or a
// file/position saved before GTIDs were tracked (read that file from its
// start, so the executed set is known from then on).
func (r *Reader) startMode(pos event.Position) (startMode, error) {
	switch {
	case pos.GTIDSet != "":
		return startGTID, nil
	case r.cfg.Flavor == mysql.MariaDBFlavor && pos.File == "":
		return startGTID, nil
	case r.cfg.Flavor == mysql.MariaDBFlavor:
		return startFileTracked, nil // MariaDB always has GTIDs
	case r.cfg.GTIDMode && pos.Pos <= 4:
		return startGTID, nil
	case r.cfg.GTIDMode:
		return startFileTracked, nil
	case pos.File == "":
		return 0, fmt.Errorf("%w: no start position (gtid_mode is OFF, so a file and position are needed)", errFatal)
	}
	return startFile, nil
}

// ignoredSet is how a server that read no GTID set from a dump names the
// set it was sent, in its error 1236.
const ignoredSet = "The GTID set sent by the replica is ''"

// classifyDump is classify for the errors of a dump asked from GTID set
// sent. A server that answers as if the set were empty when it was not
// ignored it (Dolt reads it only with BINLOG_THROUGH_GTID, which go-mysql
// does not send, and refuses a dump that arrives while a commit is in
// flight as "purged", naming that commit): its refusal says nothing of
// our position, and the dump is retried.
func classifyDump(err error, sent string) error {
	var me *mysql.MyError
	if sent != "" && errors.As(err, &me) && me.Code == 1236 && strings.Contains(me.Message, ignoredSet) {
		return fmt.Errorf("the server ignored the GTID set the dump sent and refused it while a commit was in flight; retried: %s (error %d)", me.Message, me.Code)
	}
	return classify(err)
}

// classify turns the server's refusal to serve a position into
// position.ErrLost, and refusals that no retry can cure into errFatal.
func classify(err error) error {
	var me *mysql.MyError
	if errors.As(err, &me) {
		if isSameServerID(me.Code, me.Message) { // another replica took our server_id: not retried
			return fmt.Errorf("%w: %w: %s (error %d)", errFatal, ErrServerIDInUse, me.Message, me.Code)
		}
		switch me.Code {
		case 1236: // ER_MASTER_FATAL_ERROR_READING_BINLOG: purged, or unknown GTID
			return fmt.Errorf("%w: %s (error %d); `outbox-relay check` shows the gap and the recovery choices (remove the sink's checkpoint and start from checkpoint.start: earliest or current)", position.ErrLost, me.Message, me.Code)
		case 1045, 1227, 1044: // access denied, missing privilege
			return fmt.Errorf("%w: %s (error %d): grant REPLICATION SLAVE and REPLICATION CLIENT to the relay's user", errFatal, me.Message, me.Code)
		case 1047, 1235: // ER_UNKNOWN_COM_ERROR, ER_NOT_SUPPORTED_YET: no binlog dump here
			return fmt.Errorf("%w: the server refused the binlog dump command: %s (error %d); point the relay at a MySQL or MariaDB server (or a replica) that serves replication, with log_bin on", errFatal, me.Message, me.Code)
		}
	}
	return err
}

// txnState is the reader's view of the transaction in progress.
type txnState struct {
	server string // "host:port" being read
	file   string
	inTxn  bool // a BEGIN (or XA START) was read
	gtid   string
	events []*event.Event
	tables map[uint64]*tableMap
	// changes and watched: the rows and TABLE_MAPs of watched tables; nil
	// when the reader watches none.
	changes []event.Change
	watched map[uint64]*watchMap

	// exec is the executed GTID set including the transaction in progress;
	// nil when GTIDs are off, or until a file start's header event.
	exec  mysql.GTIDSet
	track bool // file start: take exec from the first PREVIOUS_GTIDS / GTID list
	// checksum: the file's events end with a CRC32 (its FORMAT_DESCRIPTION says).
	checksum bool
	// fileServer is the server_id of the server whose binlog file is being
	// read (its FORMAT_DESCRIPTION event's), 0 until that event.
	fileServer uint32
	// skipFile/skipTo: a tracked file start resumes a position inside the
	// file; transactions ending at or before it were handed on already.
	skipFile string
	skipTo   uint32
	// had: the transaction in progress is in exec already, a server that
	// ignored the dump's GTID set sent it again (Dolt reads the set only
	// with BINLOG_THROUGH_GTID, which go-mysql does not send): it was
	// handed on before, or is before the start, and is not handed on.
	had bool

	// own: the transaction has rows in a table of Config.Own; others: in
	// any other table.
	own, others bool

	xa       string                // the XA transaction in progress (its xid as logged), "" if none
	prepared map[string]preparedXA // XA PREPAREd rows waiting for XA COMMIT / ROLLBACK
	// hold is where a restart must resume while prepared holds rows: the
	// position before the oldest of those transactions. Positions handed
	// on stay there, so a checkpoint never skips a prepared transaction.
	hold *event.Position
	last event.Position // the position after the last transaction read
}

// preparedXA is what an XA PREPAREd transaction holds until its XA COMMIT.
type preparedXA struct {
	events  []*event.Event
	changes []event.Change
}

// tableMap is a TABLE_MAP event of an outbox table with column indexes resolved.
type tableMap struct {
	table *Table
	name  string
	fields
	// width is the number of columns of a row: the table map's, or the
	// columns used when the rows were decoded narrow (narrow.go).
	width                           int
	traceParentPath, traceStatePath []string
	idBin                           int                        // declared length of a binary id column, 0 otherwise
	ev                              *replication.TableMapEvent // nil for rows of a SELECT (RowMapper)
	// dec is the fractional digits of each temporal column (DATETIME,
	// TIMESTAMP), -1 for the others: a time.Time value is formatted with
	// it. Nil for rows of a SELECT, whose values are the server's text.
	dec []int8
	// narrow is this table map for rows decoded narrow; nil in itself.
	narrow *tableMap
}

// outboxTable returns the outbox table a TABLE_MAP event names, or nil. It
// runs for every rows event of every table, so it does not allocate.
func (r *Reader) outboxTable(e *replication.TableMapEvent) *Table {
	return r.tables[string(e.Schema)][string(e.Table)]
}

func (r *Reader) decodeRows(narrow *narrowCache, re *replication.RowsEvent, data []byte) error {
	pos, err := re.DecodeHeader(data)
	if err != nil {
		return err
	}
	if re.Table == nil {
		return nil
	}
	t := r.outboxTable(re.Table)
	if t == nil {
		if r.watch != nil && r.watchedTable(re.Table) != "" {
			return re.DecodeData(pos, data) // every row change of a watched table
		}
		return nil // neither an outbox nor a watched table: never decoded
	}
	if re.Type() != replication.EnumRowsEventTypeInsert {
		return nil // UPDATE and DELETE of the outbox are ignored
	}
	return narrow.decode(t, re, pos, data) // only the columns an event is made of
}

func (r *Reader) onEvent(ctx context.Context, st *txnState, ev *replication.BinlogEvent, handle Handler) error {
	switch e := ev.Event.(type) {
	case *replication.RotateEvent:
		st.file = rotateName(ev, e)
	case *replication.FormatDescriptionEvent:
		st.checksum = e.ChecksumAlgorithm == replication.BINLOG_CHECKSUM_ALG_CRC32
		st.fileServer = ev.Header.ServerID
	case *replication.PreviousGTIDsEvent:
		if st.track && st.exec == nil {
			set, err := previousGTIDs(ev, st.checksum)
			if err != nil {
				return fmt.Errorf("%w: PREVIOUS_GTIDS %q: %v", errFatal, e.GTIDSets, err)
			}
			st.exec = set
		}
	case *replication.MariadbGTIDListEvent:
		if st.track && st.exec == nil {
			set, _ := mysql.ParseMariadbGTIDSet("")
			for i := range e.GTIDs {
				_ = set.(*mysql.MariadbGTIDSet).AddSet(&e.GTIDs[i])
			}
			st.exec = set
		}
	case *replication.GtidTaggedLogEvent:
		st.begin()
		u, err := uuid.FromBytes(e.SID)
		if err != nil {
			return fmt.Errorf("%w: tagged GTID event: %v", errFatal, err)
		}
		st.gtid = fmt.Sprintf("%s:%s:%d", u, e.Tag, e.GNO)
		if st.exec != nil {
			st.had = executed(st.exec, u, e.Tag, e.GNO)
			st.exec.(*mysql.MysqlGTIDSet).AddGTIDWithTag(u, e.Tag, e.GNO)
		}
	case *replication.GTIDEvent:
		st.begin()
		if ev.Header.EventType == replication.ANONYMOUS_GTID_EVENT {
			return nil // gtid_mode OFF (or a transaction from before it): no GTID
		}
		u, err := uuid.FromBytes(e.SID)
		if err != nil {
			return fmt.Errorf("%w: GTID event: %v", errFatal, err)
		}
		st.gtid = fmt.Sprintf("%s:%d", u, e.GNO)
		if st.exec != nil {
			st.had = executed(st.exec, u, mysql.Tag{}, e.GNO)
			st.exec.(*mysql.MysqlGTIDSet).AddGTID(u, e.GNO)
		}
	case *replication.MariadbGTIDEvent:
		st.begin()
		st.gtid = e.GTID.String()
		st.inTxn = !e.IsStandalone()
		if st.exec != nil {
			_ = st.exec.(*mysql.MariadbGTIDSet).AddSet(&e.GTID)
		}
	case *replication.TableMapEvent:
		if r.own[string(e.Schema)][string(e.Table)] { // no allocation per table map
			st.own = true
		} else {
			st.others = true
		}
		t := r.outboxTable(e)
		if t == nil {
			if r.watch != nil {
				return r.watchTableMap(st, e)
			}
			return nil
		}
		// Every transaction has its own table map: what was resolved from
		// the last one of the table holds while its shape does.
		tm := r.resolved[t]
		if tm == nil || !sameShape(tm.ev, e) {
			var err error
			if tm, err = resolve(t, e); err != nil {
				return fmt.Errorf("%w: %v", errFatal, err)
			}
			if r.resolved == nil {
				r.resolved = map[*Table]*tableMap{}
			}
			r.resolved[t] = tm
		}
		if st.tables == nil {
			st.tables = map[uint64]*tableMap{}
		}
		st.tables[e.TableID] = tm
	case *replication.RowsEvent:
		if len(e.Rows) == 0 {
			return nil
		}
		tm := st.tables[e.TableID]
		if tm == nil {
			if wm := st.watched[e.TableID]; wm != nil {
				return wm.addChanges(st, e)
			}
			return nil
		}
		if e.Type() != replication.EnumRowsEventTypeInsert {
			return nil
		}
		st.events = slices.Grow(st.events, len(e.Rows)) // one allocation for a transaction of one rows event
		if _, ok := only(e.Rows[0]).(*event.Event); ok {
			// Decoded straight into events (direct.go).
			for _, row := range e.Rows {
				st.events = append(st.events, row[0].(*event.Event))
			}
			if r.cfg.Observer != nil {
				r.cfg.Observer.OutboxEvents(tm.name, len(e.Rows))
			}
			return nil
		}
		evs := make([]event.Event, len(e.Rows)) // one allocation for the rows event's events
		for i, row := range e.Rows {
			if err := tm.fill(&evs[i], row); err != nil {
				return fmt.Errorf("%w: table %s: %v", errFatal, tm.name, err)
			}
			st.events = append(st.events, &evs[i])
		}
		if r.cfg.Observer != nil {
			r.cfg.Observer.OutboxEvents(tm.name, len(e.Rows))
		}
	case *replication.QueryEvent:
		return r.onQuery(ctx, st, ev, bytes.TrimSpace(e.Query), handle)
	case *replication.XIDEvent:
		return r.commit(ctx, st, ev, handle)
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
		switch ev.Header.EventType {
		case replication.HEARTBEAT_EVENT, replication.HEARTBEAT_LOG_EVENT_V2:
			if r.cfg.Observer != nil {
				r.cfg.Observer.Heartbeat()
			}
		case replication.XA_PREPARE_LOG_EVENT:
			return r.xaPrepare(ctx, st, ev, e.Data, handle)
		}
	}
	return nil
}

// only is row's one value, or nil.
func only(row []any) any {
	if len(row) != 1 {
		return nil
	}
	return row[0]
}

// previousGTIDs decodes a PREVIOUS_GTIDS event's set from the event's bytes
// (without the checksum, when the file's FORMAT_DESCRIPTION announced one).
// go-mysql's PreviousGTIDsEvent.GTIDSets text is wrong for tagged GTIDs
// (MySQL 8.4) of a UUID without untagged ones: it drops the UUID ("u:t:1"
// reads ":t:1") or, after another UUID, files them under that one
// ("a:1-2,b:t:1" reads "a:1-2:t:1").
func previousGTIDs(ev *replication.BinlogEvent, checksum bool) (mysql.GTIDSet, error) {
	body := ev.RawData
	if checksum {
		body = body[:max(len(body)-replication.BinlogChecksumLength, 0)]
	}
	if len(body) < replication.EventHeaderSize {
		return nil, fmt.Errorf("event of %d bytes", len(ev.RawData))
	}
	return mysql.DecodeMysqlGTIDSet(body[replication.EventHeaderSize:])
}

// onQuery handles a QUERY event: transaction boundaries, XA statements, and
// statements that are transactions of their own (DDL).
func (r *Reader) onQuery(ctx context.Context, st *txnState, ev *replication.BinlogEvent, q []byte, handle Handler) error {
	switch {
	case bytes.EqualFold(q, []byte("BEGIN")):
		st.inTxn = true
		return nil
	case bytes.EqualFold(q, []byte("COMMIT")):
		return r.commit(ctx, st, ev, handle)
	case bytes.EqualFold(q, []byte("ROLLBACK")):
		// Only changes of non-transactional tables survive a ROLLBACK in
		// the binlog: no outbox rows; a watched table's changes did happen.
		st.events = nil
		return r.commit(ctx, st, ev, handle)
	case hasPrefixFold(q, "XA START "), hasPrefixFold(q, "XA BEGIN "):
		st.inTxn = true
		st.xa = xid(q[len("XA START "):])
		return nil
	case hasPrefixFold(q, "XA END "):
		return nil
	case hasPrefixFold(q, "XA COMMIT "):
		id := xid(q[len("XA COMMIT "):])
		if st.inTxn && st.xa == id {
			return r.commit(ctx, st, ev, handle) // XA COMMIT … ONE PHASE
		}
		// The second phase of a prepared transaction: its own GTID, its
		// rows were read at XA PREPARE.
		st.events = append(st.events, st.prepared[id].events...)
		st.changes = append(st.changes, st.prepared[id].changes...)
		st.release(id)
		return r.commit(ctx, st, ev, handle)
	case hasPrefixFold(q, "XA ROLLBACK "):
		st.events, st.changes = nil, nil
		st.release(xid(q[len("XA ROLLBACK "):]))
		return r.commit(ctx, st, ev, handle)
	case st.inTxn:
		return nil // a statement inside a transaction (SAVEPOINT, ...)
	default:
		return r.commit(ctx, st, ev, handle) // DDL: its own transaction
	}
}

// xaPrepare ends the first phase of an XA transaction: a one-phase commit
// releases its rows now; otherwise they wait for the XA COMMIT that names the
// same xid, and until then the positions handed on stay before this
// transaction. data is the XA_PREPARE event's body: one_phase (1 byte),
// formatID, gtrid_length, bqual_length (4 bytes each), then gtrid and bqual.
func (r *Reader) xaPrepare(ctx context.Context, st *txnState, ev *replication.BinlogEvent, data []byte, handle Handler) error {
	if len(data) < 13 {
		return fmt.Errorf("%w: XA_PREPARE event of %d bytes", errFatal, len(data))
	}
	if data[0] != 0 {
		return r.commit(ctx, st, ev, handle) // one_phase
	}
	format := binary.LittleEndian.Uint32(data[1:])
	gl, bl := int(binary.LittleEndian.Uint32(data[5:])), int(binary.LittleEndian.Uint32(data[9:]))
	if gl < 0 || bl < 0 || 13+gl+bl > len(data) {
		return fmt.Errorf("%w: XA_PREPARE event: bad xid lengths %d, %d", errFatal, gl, bl)
	}
	// The form XA COMMIT / XA ROLLBACK are logged with: X'gtrid',X'bqual',formatID.
	id := fmt.Sprintf("x'%x',x'%x',%d", data[13:13+gl], data[13+gl:13+gl+bl], format)
	if len(st.events) > 0 || len(st.changes) > 0 {
		if st.prepared == nil {
			st.prepared = map[string]preparedXA{}
		}
		st.prepared[id] = preparedXA{events: st.events, changes: st.changes}
		if st.hold == nil {
			h := st.last
			st.hold = &h
		}
	}
	st.events, st.changes = nil, nil
	return r.commit(ctx, st, ev, handle) // moves the executed set; no events
}

// release forgets a prepared transaction once it is committed or rolled back.
func (st *txnState) release(id string) {
	delete(st.prepared, id)
	if len(st.prepared) == 0 {
		st.hold = nil
	}
}

// xid normalises the xid of an XA statement as logged (X'..',X'..',n),
// dropping a trailing ONE PHASE, so XA START and XA COMMIT match.
func xid(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.Index(strings.ToUpper(s), " ONE PHASE"); i >= 0 {
		s = s[:i]
	}
	return strings.ToLower(strings.ReplaceAll(s, " ", ""))
}

func hasPrefixFold(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && strings.EqualFold(string(b[:len(prefix)]), prefix)
}

// executed reports whether MySQL GTID set exec holds uuid:tag:gno.
func executed(exec mysql.GTIDSet, u uuid.UUID, tag mysql.Tag, gno int64) bool {
	m, ok := exec.(*mysql.MysqlGTIDSet)
	return ok && (*m)[u][tag].Contain(mysql.IntervalSlice{{Start: gno, Stop: gno + 1}})
}

func (st *txnState) begin() {
	st.had = false
	st.inTxn = false
	st.gtid = ""
	st.events = nil
	st.tables = nil
	st.changes = nil
	st.watched = nil
	st.own, st.others = false, false
	st.xa = ""
}

func (r *Reader) commit(ctx context.Context, st *txnState, ev *replication.BinlogEvent, handle Handler) error {
	pos := event.Position{File: st.file, Pos: ev.Header.LogPos, Server: st.server, ServerID: st.fileServer}
	if st.exec != nil {
		pos.GTIDSet = st.exec.String()
	}
	if st.skipTo > 0 {
		if st.file == st.skipFile && pos.Pos <= st.skipTo {
			st.begin() // handed on before the restart
			return nil
		}
		st.skipTo = 0
	}
	if st.had {
		st.begin() // in the start set: a server that ignored it sent it
		return nil
	}
	if st.own && !st.others && len(st.events) == 0 && len(st.changes) == 0 && st.xa == "" {
		st.begin() // the relay's own write (a checkpoint save): nothing to hand on
		return nil
	}
	commitTime := time.Unix(int64(ev.Header.Timestamp), 0).UTC()
	for i, e := range st.events {
		e.CommitTime = commitTime
		e.Source = event.Source{GTID: st.gtid, File: pos.File, Pos: pos.Pos}
		if !finishTrace(e) {
			r.badTraceParent(e)
		}
		if e.ID == "" {
			e.ID = GeneratedID(e.Table, e.Source, i)
			r.log.Warn("outbox row with an empty or NULL id: delivered with a generated id", slog.String("table", e.Table),
				slog.String("gtid", e.Source.GTID), slog.Int("row", i), slog.String("event_id", e.ID))
		}
	}
	st.last = pos
	if st.hold != nil {
		pos = *st.hold
	}
	txn := &event.Txn{Events: st.events, Changes: st.changes, Position: pos, CommitTime: commitTime, Held: st.hold != nil}
	st.begin()
	if r.cfg.Observer != nil {
		r.cfg.Observer.Transaction(commitTime)
	}
	return handle(ctx, txn)
}

// finishTrace sets e's trace context to what the relay carries (ParseTraceParent,
// BoundTraceState), and reports false when its traceparent is malformed
// (left as read: the caller drops it and counts it).
func finishTrace(e *event.Event) bool {
	if e.TraceParent == "" {
		return true
	}
	tp, ok := event.ParseTraceParent(e.TraceParent)
	if !ok {
		return false
	}
	e.TraceParent, e.TraceState = tp, event.BoundTraceState(e.TraceState)
	return true
}

// TraceObserver is implemented by an Observer that also counts the rows
// whose traceparent column held no valid W3C traceparent.
type TraceObserver interface {
	// TraceParentMalformed is called for each such row of table.
	TraceParentMalformed(table string)
}

// badTraceParent drops e's malformed trace context (the event is delivered
// without one), logs it the first time and counts it.
func (r *Reader) badTraceParent(e *event.Event) {
	if !r.badTraceLogged {
		r.badTraceLogged = true
		r.log.Warn("outbox row with a malformed traceparent: delivered without trace context (logged once; see outbox_relay_traceparent_malformed_total)",
			slog.String("table", e.Table), slog.String("event_id", e.ID), slog.String("traceparent", printable.String(e.TraceParent)))
	}
	e.TraceParent, e.TraceState = "", ""
	if o, ok := r.cfg.Observer.(TraceObserver); ok {
		o.TraceParentMalformed(e.Table)
	}
}

// ColumnsMissingError is returned when the binlog carries no column names.
func missingMetadata(table string) error {
	return fmt.Errorf("table %s: the binlog has no column names; set binlog_row_metadata=FULL on the server (MySQL 8.0.1+, MariaDB 10.5+) and restart the relay", table)
}

// fields are the columns of a table map that an event's fields are read
// from (-1: not mapped).
type fields struct {
	id, aggType, aggID, typ, payload int
	headers                          []int
	// traceParent and traceState are the trace context columns, -1 when
	// not mapped or read from the payload (the paths then).
	traceParent, traceState int
}

// fieldColumns finds the columns of t's fields in table map e. It only
// reads e: the syncer's goroutine (narrow.go) and Run's call it on the same
// table map (go-mysql's ColumnNameString would cache its strings in it).
func fieldColumns(t *Table, e *replication.TableMapEvent) (fields, error) {
	if len(e.ColumnName) == 0 {
		return fields{}, missingMetadata(t.FullName())
	}
	return fieldsOf(t, e.ColumnName)
}

// fieldsOf finds the columns of t's fields among names (the table's
// columns in their order, as a TABLE_MAP event or a SELECT * lists them).
func fieldsOf[S ~string | ~[]byte](t *Table, names []S) (fields, error) {
	idx := make(map[string]int, len(names))
	for i, n := range names {
		idx[strings.ToLower(string(n))] = i
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
	var f fields
	var err error
	if f.id, err = find("id", t.Columns.ID); err != nil {
		return f, err
	}
	if f.aggType, err = find("aggregate_type", t.Columns.AggregateType); err != nil {
		return f, err
	}
	if f.aggID, err = find("aggregate_id", t.Columns.AggregateID); err != nil {
		return f, err
	}
	if f.typ, err = find("type", t.Columns.Type); err != nil {
		return f, err
	}
	if f.payload, err = find("payload", t.Columns.Payload); err != nil {
		return f, err
	}
	f.traceParent, f.traceState = -1, -1
	if config.PayloadPath(t.Columns.TraceParent) == nil {
		if f.traceParent, err = find("traceparent", t.Columns.TraceParent); err != nil {
			return f, err
		}
	}
	if config.PayloadPath(t.Columns.TraceState) == nil {
		if f.traceState, err = find("tracestate", t.Columns.TraceState); err != nil {
			return f, err
		}
	}
	for _, h := range t.Headers {
		i, err := find("header", h)
		if err != nil {
			return f, err
		}
		f.headers = append(f.headers, i)
	}
	return f, nil
}

// used returns the columns f reads, ascending, each once.
func (f fields) used() []int {
	cols := append([]int{f.id, f.aggType, f.aggID, f.typ, f.payload, f.traceParent, f.traceState}, f.headers...)
	cols = slices.DeleteFunc(cols, func(c int) bool { return c < 0 })
	slices.Sort(cols)
	return slices.Compact(cols)
}

// in returns f with each column replaced by its index in cols (which
// holds every column f reads).
func (f fields) in(cols []int) fields {
	at := func(c int) int {
		if c < 0 {
			return c
		}
		i, _ := slices.BinarySearch(cols, c)
		return i
	}
	n := fields{id: at(f.id), aggType: at(f.aggType), aggID: at(f.aggID), typ: at(f.typ), payload: at(f.payload),
		traceParent: at(f.traceParent), traceState: at(f.traceState)}
	for _, h := range f.headers {
		n.headers = append(n.headers, at(h))
	}
	return n
}

func resolve(t *Table, e *replication.TableMapEvent) (*tableMap, error) {
	f, err := fieldColumns(t, e)
	if err != nil {
		return nil, err
	}
	tm := &tableMap{table: t, name: t.FullName(), fields: f, width: len(e.ColumnType), ev: e, dec: temporalDigits(e)}
	tm.traceParentPath, tm.traceStatePath = config.PayloadPath(t.Columns.TraceParent), config.PayloadPath(t.Columns.TraceState)
	if e.ColumnType[tm.id] == mysql.MYSQL_TYPE_STRING && binaryCollation(e, tm.id) {
		// BINARY(n): the declared length is in the column metadata.
		meta := e.ColumnMeta[tm.id]
		length := int(meta&0xff) | int(((meta>>4)&0x300)^0x300)
		tm.idBin = length
	}
	// The same table map for rows decoded narrow (narrow.go): only the
	// columns used, in table order.
	cols := f.used()
	n := *tm
	n.fields, n.width, n.dec = f.in(cols), len(cols), make([]int8, len(cols))
	for i, c := range cols {
		n.dec[i] = tm.dec[c]
	}
	tm.narrow = &n
	return tm, nil
}

// binaryCollation reports whether column i has the binary collation (63),
// as BINARY(n) has. MySQL lists collations for character columns only (what
// go-mysql's CollationMap expects); Dolt lists one for every column (0 for
// the others), which CollationMap would assign to the wrong columns.
func binaryCollation(e *replication.TableMapEvent, i int) bool {
	if n := int(e.ColumnCount); len(e.ColumnCharset) == n && i < n {
		chars := 0
		for c := range n {
			if e.IsCharacterColumn(c) {
				chars++
			}
		}
		if chars != n {
			return e.ColumnCharset[i] == 63
		}
	}
	return e.CollationMap()[i] == 63
}

func (tm *tableMap) toEvent(row []any) (*event.Event, error) {
	e := new(event.Event)
	if err := tm.fill(e, row); err != nil {
		return nil, err
	}
	return e, nil
}

// fill sets e to the event of row.
func (tm *tableMap) fill(e *event.Event, row []any) error {
	if len(row) != tm.width {
		if tm.narrow != nil && len(row) == tm.narrow.width {
			return tm.narrow.fill(e, row) // decoded narrow
		}
		return fmt.Errorf("row has %d columns, table map %d", len(row), tm.width)
	}
	*e = event.Event{Table: tm.name}
	if tm.idBin == 16 {
		b := asBytes(row[tm.id])
		if len(b) <= 16 {
			var u [16]byte
			copy(u[:], b) // MySQL may strip trailing zero bytes of BINARY
			e.ID = fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
		} else {
			e.ID = fmt.Sprintf("%x", b)
		}
	} else if _, ok := row[tm.id].(time.Time); ok {
		e.ID = tm.str(row, tm.id) // a temporal id, as go-mysql's text
	} else if id, ok := intText(row[tm.id]); ok {
		e.ID = id // an integer id (AUTO_INCREMENT): its decimal text, as asBytes would give it
	} else if b := asBytes(row[tm.id]); utf8.Valid(b) {
		e.ID = string(b)
	} else {
		e.ID = hex.EncodeToString(b) // bytes that are not text: lossless and stable
	}
	// An empty or NULL id is given one at commit (GeneratedID), once the
	// transaction's GTID and position are known.
	// The aggregate type, id and event type, when they are bytes (VARCHAR),
	// are cut from one string: one allocation instead of three.
	tm.texts(row, &e.AggregateType, &e.AggregateID, &e.Type)
	if p := row[tm.payload]; p != nil {
		e.Payload = bytes.Clone(asBytes(p))
	}
	for i, c := range tm.headers {
		if v := row[c]; v != nil {
			e.Headers = append(e.Headers, event.Header{Key: tm.table.Headers[i], Value: tm.str(row, c)})
		}
	}
	if tm.traceParent >= 0 && row[tm.traceParent] != nil {
		e.TraceParent = strings.TrimSpace(tm.str(row, tm.traceParent))
	} else if tm.traceParentPath != nil {
		e.TraceParent = strings.TrimSpace(jsonField(e.Payload, tm.traceParentPath))
	}
	if e.TraceParent != "" {
		if tm.traceState >= 0 && row[tm.traceState] != nil {
			e.TraceState = strings.TrimSpace(tm.str(row, tm.traceState))
		} else if tm.traceStatePath != nil {
			e.TraceState = strings.TrimSpace(jsonField(e.Payload, tm.traceStatePath))
		}
	}
	return nil
}

// texts sets aggType, aggID and typ to the text of their columns (a
// column of index < 0 leaves its field empty), as str does; those whose
// values are bytes share one string.
func (tm *tableMap) texts(row []any, aggType, aggID, typ *string) {
	cols := [3]int{tm.aggType, tm.aggID, tm.typ}
	out := [3]*string{aggType, aggID, typ}
	var buf [256]byte
	joined := buf[:0]
	var ends [3]int
	for i, c := range cols {
		if c < 0 {
			ends[i] = len(joined)
			continue
		}
		if b, ok := row[c].([]byte); ok {
			joined = append(joined, b...)
		} else {
			*out[i] = tm.str(row, c)
		}
		ends[i] = len(joined)
	}
	if len(joined) == 0 {
		return
	}
	all := string(joined)
	start := 0
	for i, c := range cols {
		if c >= 0 {
			if _, ok := row[c].([]byte); ok {
				*out[i] = all[start:ends[i]]
			}
		}
		start = ends[i]
	}
}

// intText is the decimal text of an integer column's value.
func intText(v any) (string, bool) {
	switch x := v.(type) {
	case int64:
		return strconv.FormatInt(x, 10), true
	case int32:
		return strconv.FormatInt(int64(x), 10), true
	case uint64:
		return strconv.FormatUint(x, 10), true
	case uint32:
		return strconv.FormatUint(uint64(x), 10), true
	}
	return "", false
}

// jsonField returns the string at path in the JSON document b, or "" when
// b is not JSON or holds no string there.
func jsonField(b []byte, path []string) string {
	raw := json.RawMessage(b)
	for _, k := range path {
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) != nil {
			return ""
		}
		if raw = m[k]; raw == nil {
			return ""
		}
	}
	var v string
	if json.Unmarshal(raw, &v) != nil {
		return ""
	}
	return v
}

// idSpace is the UUID namespace of generated event ids.
var idSpace = uuid.MustParse("6f2b3c1e-8f0a-4d5e-9c47-0b7e1a2d3c4f")

// GeneratedID is the id given to an outbox row whose id column is empty or
// NULL: a name-based UUID (version 5) of the table, the transaction (its GTID,
// or its binlog file and end position when GTIDs are off) and the row's index
// among the transaction's outbox rows. The same row read again (after a
// restart, or by another sink) gets the same id, so receivers can still
// deduplicate; no two rows share one.
func GeneratedID(table string, src event.Source, row int) string {
	tx := src.GTID
	if tx == "" {
		tx = fmt.Sprintf("%s:%d", src.File, src.Pos)
	}
	return uuid.NewSHA1(idSpace, []byte(fmt.Sprintf("%s/%s/%d", table, tx, row))).String()
}

// fracTimeFormat[d] formats a temporal value with d fractional digits, as
// go-mysql renders one when it does not parse times.
var fracTimeFormat = [7]string{
	"2006-01-02 15:04:05",
	"2006-01-02 15:04:05.0",
	"2006-01-02 15:04:05.00",
	"2006-01-02 15:04:05.000",
	"2006-01-02 15:04:05.0000",
	"2006-01-02 15:04:05.00000",
	"2006-01-02 15:04:05.000000",
}

// str renders column c of row as text: a temporal value (a time.Time, as
// the syncer parses times) exactly as go-mysql's own string would have been
// (DATETIME as stored, TIMESTAMP in the local time zone, with the column's
// fractional digits); anything else as asString does.
func (tm *tableMap) str(row []any, c int) string {
	if t, ok := row[c].(time.Time); ok && c < len(tm.dec) && tm.dec[c] >= 0 {
		return t.Format(fracTimeFormat[tm.dec[c]])
	}
	return asString(row[c])
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
	case int64:
		return strconv.FormatInt(x, 10)
	case int32:
		return strconv.FormatInt(int64(x), 10)
	case uint64:
		return strconv.FormatUint(x, 10)
	case uint32:
		return strconv.FormatUint(uint64(x), 10)
	case fmt.Stringer:
		return x.String()
	default:
		return fmt.Sprint(x)
	}
}

// LibraryLogger is the logger to give every go-mysql BinlogSyncer (the
// reader's, the audit's): its records go to log, tagged component=go-mysql,
// its chatty Info records (every connect, every binlog rotation, the
// syncer's whole config) at Debug, and never the syncer's config itself,
// which holds the password.
func LibraryLogger(log *slog.Logger) *slog.Logger {
	if log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(demoteInfo{log.Handler()}).With(slog.String("component", "go-mysql"))
}

// demoteInfo logs go-mysql's chatty Info records at Debug and drops any
// attribute holding a BinlogSyncerConfig; its warnings and errors pass
// unchanged.
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
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		switch a.Value.Any().(type) {
		case replication.BinlogSyncerConfig, *replication.BinlogSyncerConfig:
			out.AddAttrs(slog.String(a.Key, "(not logged: it holds the password)"))
		default:
			out.AddAttrs(a)
		}
		return true
	})
	return d.Handler.Handle(ctx, out)
}

func (d demoteInfo) WithAttrs(as []slog.Attr) slog.Handler {
	return demoteInfo{d.Handler.WithAttrs(as)}
}
func (d demoteInfo) WithGroup(n string) slog.Handler { return demoteInfo{d.Handler.WithGroup(n)} }

// rotateName is the binlog file a ROTATE event names. The first ROTATE of a
// stream is artificial and comes before the FORMAT_DESCRIPTION that says
// whether events carry a checksum, so go-mysql asks the server to send it
// without one; MySQL does, Dolt does not, and go-mysql then reads the 4
// checksum bytes as the end of the name. They are dropped when they are
// the CRC32 of the rest of the event.
func rotateName(ev *replication.BinlogEvent, e *replication.RotateEvent) string {
	name, raw := e.NextLogName, ev.RawData
	if n := len(raw); n > replication.EventHeaderSize+4 && len(name) > 4 && bytes.HasSuffix(name, raw[n-4:]) &&
		crc32.ChecksumIEEE(raw[:n-4]) == binary.LittleEndian.Uint32(raw[n-4:]) {
		name = name[:len(name)-4]
	}
	return string(name)
}
