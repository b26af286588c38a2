package canal

// This file owns what a Reader is given: its Config, the outbox tables and
// their column mapping (Table, Columns), the Observer it reports to, and New,
// which checks them. The reading itself: stream.go connects and retries,
// decode.go applies each binlog event, txn.go buffers the transaction in
// progress and hands it on, tablemap.go turns an outbox row into an event.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outbox-relay/outbox-relay/event"
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
