// Package event defines the outbox event and the binlog position that the
// reader, the pipeline, the sinks and the checkpoint stores share.
//
// It is a leaf package: it imports nothing of outbox-relay's, so every other
// package can depend on it without cycles. Values are plain data; an Event is
// not modified after the reader hands it to the pipeline, so it may be read
// from several goroutines at once.
package event

import (
	"fmt"
	"strings"
	"time"
)

// Event is one outbox row, committed in the source database.
type Event struct {
	// ID is the outbox row's event id (a BINARY(16) id is rendered as a UUID
	// string). Sinks use it as the idempotency key receivers deduplicate on.
	ID string
	// AggregateType routes the event (Kafka topic suffix, webhook filter).
	AggregateType string
	// AggregateID orders the event: events of one aggregate are delivered in
	// commit order. It is the Kafka message key.
	AggregateID string
	// Type is the event type, e.g. "order.created".
	Type string
	// Payload is the payload column's bytes exactly as the server stored them:
	// never decoded and re-encoded. It is read-only: the reader may cut the
	// payloads of one rows event from one buffer (each capped at its end).
	Payload []byte
	// Headers are the extra columns configured as headers, in config order.
	Headers []Header
	// TraceParent and TraceState are the W3C trace context of the request
	// that wrote the row (columns.traceparent and columns.tracestate), as
	// ParseTraceParent and BoundTraceState leave them: "" when the table
	// maps none, the row holds NULL, or the traceparent is malformed (the
	// reader drops both then). Sinks carry them as their ecosystem does: a
	// traceparent header, a field, an HTTP header.
	TraceParent string
	TraceState  string

	// Table is the source table as "schema.table".
	Table string
	// CommitTime is the commit timestamp of the source transaction (second
	// precision: the binlog's own).
	CommitTime time.Time
	// Source is where the event was read: its transaction's GTID and the
	// binlog position just after that transaction.
	Source Source
}

// Header is an extra column delivered beside the payload.
type Header struct {
	Key   string
	Value string
}

// HeaderReplay is the header a replayed event carries (package replay): its
// value is the replay job's id. Live events never carry it. Sinks carry it
// as they carry the extra columns (a Kafka, NATS or RabbitMQ header, a Redis
// field, a stdout header); the webhook sink as its webhook-replay HTTP
// header, and the NATS sink also makes it part of the Nats-Msg-Id, so that
// JetStream's duplicate window does not drop a replayed event as a copy of
// the live one.
const HeaderReplay = "relay_replay"

// Replay returns the value of the event's HeaderReplay header: the id of
// the replay job re-sending it, "" for a live event.
func (e *Event) Replay() string {
	for i := len(e.Headers) - 1; i >= 0; i-- {
		if e.Headers[i].Key == HeaderReplay {
			return e.Headers[i].Value
		}
	}
	return ""
}

// Source locates an event's transaction in the binlog.
type Source struct {
	// GTID is the transaction's own GTID ("" when GTIDs are off).
	GTID string
	// File and Pos are the binlog coordinates of the end of the transaction.
	File string
	Pos  uint32
}

// Size is an estimate of the event's memory in bytes, used for in-flight limits.
func (e *Event) Size() int {
	n := 160 + len(e.ID) + len(e.AggregateType) + len(e.AggregateID) + len(e.Type) +
		len(e.Payload) + len(e.Table) + len(e.Source.GTID) + len(e.Source.File) +
		len(e.TraceParent) + len(e.TraceState)
	for _, h := range e.Headers {
		n += 32 + len(h.Key) + len(h.Value)
	}
	return n
}

// ParseTraceParent returns the W3C traceparent the relay carries for s, and
// whether s is one it can carry and continue, by the W3C Trace Context rules:
// "<version>-<32 hex trace id>-<16 hex parent id>-<2 hex flags>", lower-case,
// with neither id all zeros. Version 00 is exactly 55 characters. A later
// version (any but "ff", which is invalid) is at least 55, its first 55 read
// as version 00, and when longer its character 55 is '-'; what follows is
// that version's, which the relay does not know: it carries the first 55 as
// version 00, so nothing unchecked (a line break) is passed on.
func ParseTraceParent(s string) (string, bool) {
	if len(s) < 55 || (len(s) > 55 && s[55] != '-') {
		return "", false
	}
	if s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return "", false
	}
	version, trace, parent, flags := s[0:2], s[3:35], s[36:52], s[53:55]
	if !lowerHex(version) || version == "ff" || (version == "00" && len(s) != 55) {
		return "", false
	}
	if !lowerHex(trace) || !lowerHex(parent) || !lowerHex(flags) ||
		strings.Trim(trace, "0") == "" || strings.Trim(parent, "0") == "" {
		return "", false
	}
	if version == "00" {
		return s, true
	}
	return "00" + s[2:55], true
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Bounds of a tracestate the relay carries (W3C Trace Context: a vendor
// may cut a longer one; these are what it must at least pass on).
const (
	MaxTraceStateMembers = 32
	MaxTraceStateLen     = 512
	// traceStateLongMember: members longer than this go first when the
	// tracestate is over MaxTraceStateLen.
	traceStateLongMember = 128
)

// BoundTraceState returns the tracestate the relay carries for s: its list
// members that are valid by the W3C Trace Context rules (key=value, the key
// lower-case "vendor" or "tenant@system" of the allowed characters and
// lengths, the value 1 to 256 printable ASCII characters other than ',' and
// '=', not ending in a space), in order, without empty members, optional
// white space, or a key already seen; at most MaxTraceStateMembers, and at
// most MaxTraceStateLen characters: over that, members longer than 128
// characters are dropped first, then members from the end. "" when none is
// left. It never fails: a tracestate is advice, and never the reason an
// event is not delivered.
func BoundTraceState(s string) string {
	if s == "" {
		return ""
	}
	var members []string
	seen := map[string]bool{}
	for m := range strings.SplitSeq(s, ",") {
		m = strings.Trim(m, " \t")
		k, v, ok := strings.Cut(m, "=")
		if m == "" || !ok || !traceStateKey(k) || !traceStateValue(v) || seen[k] {
			continue
		}
		seen[k] = true
		members = append(members, m)
		if len(members) == MaxTraceStateMembers {
			break
		}
	}
	n := len(members) - 1 // the commas
	for _, m := range members {
		n += len(m)
	}
	if n > MaxTraceStateLen {
		kept := members[:0]
		for _, m := range members {
			if len(m) > traceStateLongMember {
				n -= len(m) + 1
				continue
			}
			kept = append(kept, m)
		}
		members = kept
		for n > MaxTraceStateLen && len(members) > 0 {
			n -= len(members[len(members)-1]) + 1
			members = members[:len(members)-1]
		}
	}
	return strings.Join(members, ",")
}

// traceStateKey reports whether k is a tracestate key: a simple key
// (lcalpha, then up to 255 of lcalpha, digit, "_-*/"), or tenant@system
// (tenant: lcalpha or digit, then up to 240; system: lcalpha, then up to 13).
func traceStateKey(k string) bool {
	tenant, system, multi := strings.Cut(k, "@")
	if !multi {
		return len(k) >= 1 && len(k) <= 256 && lcalpha(k[0]) && keyChars(k[1:])
	}
	return len(tenant) >= 1 && len(tenant) <= 241 && (lcalpha(tenant[0]) || digit(tenant[0])) && keyChars(tenant[1:]) &&
		len(system) >= 1 && len(system) <= 14 && lcalpha(system[0]) && keyChars(system[1:])
}

func keyChars(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !lcalpha(c) && !digit(c) && c != '_' && c != '-' && c != '*' && c != '/' {
			return false
		}
	}
	return true
}

func lcalpha(c byte) bool { return c >= 'a' && c <= 'z' }
func digit(c byte) bool   { return c >= '0' && c <= '9' }

// traceStateValue reports whether v is a tracestate value: 1 to 256 of
// 0x20-0x7e other than ',' and '=', the last not a space.
func traceStateValue(v string) bool {
	if len(v) < 1 || len(v) > 256 || v[len(v)-1] == ' ' {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e || c == ',' || c == '=' {
			return false
		}
	}
	return true
}

// Position is a resumable point in the binlog: the end of a transaction.
//
// GTIDSet is the full executed GTID set (MySQL) or GTID position (MariaDB,
// one GTID per domain) including that transaction, never a single GTID. File
// and Pos are the binlog coordinates of the same point; they are used to resume
// when the server has GTIDs off.
type Position struct {
	GTIDSet string `json:"gtid_set,omitempty"`
	File    string `json:"file,omitempty"`
	Pos     uint32 `json:"pos,omitempty"`
	// Server is the "host:port" the position was read from, for humans (and
	// to tell whose File it is).
	Server string `json:"server,omitempty"`
	// ServerID is the server_id of the server whose binlog File is (the
	// one the position was read from; its binlog's FORMAT_DESCRIPTION event
	// names it), 0 when unknown. A MariaDB GTID position names only
	// (domain, origin server_id, seq_no), so two unrelated servers can both
	// hold the same one; on a server with this server_id, File and Pos tell
	// whether its binlog is the one the position was read from (package
	// source, ServerState.Gaps). Resuming elsewhere is decided by GTIDs.
	ServerID uint32 `json:"server_id,omitempty"`
	// Table, when set, is a table source's progress (package backfill):
	// the outbox table is read by primary key, consistently with the
	// binlog position the other fields name (the position the table's
	// rows are read as of: the backfill's start). Nil for a binlog
	// position.
	Table *TableCursor `json:"table,omitempty"`
}

// TableCursor is how far a table source has read an outbox table.
type TableCursor struct {
	// Table is the outbox table, "schema.table".
	Table string `json:"table"`
	// Key is the primary key of the last row handed on, one value per key
	// column in the key's order: the column's text as the server sends
	// it, or, for a binary column (BINARY, VARBINARY, BLOB), its bytes in
	// hex. Empty: no row yet.
	Key []string `json:"key,omitempty"`
	// Done says the table was read to its end: nothing is left to hand on.
	Done bool `json:"done,omitempty"`
}

// IsZero reports whether p names no position at all.
func (p Position) IsZero() bool { return p.GTIDSet == "" && p.File == "" && p.Table == nil }

func (p Position) String() string {
	if p.Server != "" {
		q := p
		q.Server = ""
		return q.String() + " on " + p.Server
	}
	if p.Table != nil {
		q := p
		q.Table = nil
		state := "key " + strings.Join(p.Table.Key, ",")
		switch {
		case p.Table.Done:
			state = "done"
		case len(p.Table.Key) == 0:
			state = "start"
		}
		return fmt.Sprintf("table %s at %s, as of %s", p.Table.Table, state, q)
	}
	switch {
	case p.GTIDSet != "" && p.File != "":
		return fmt.Sprintf("gtid %q (%s:%d)", p.GTIDSet, p.File, p.Pos)
	case p.GTIDSet != "":
		return fmt.Sprintf("gtid %q", p.GTIDSet)
	case p.File != "":
		return fmt.Sprintf("%s:%d", p.File, p.Pos)
	}
	return "(none)"
}

// Txn is one committed source transaction as the reader hands it on: the
// outbox events it inserted (possibly none), the row changes of the watched
// tables it made (possibly none) and the position just after it. A
// transaction with neither still moves the position forward.
type Txn struct {
	Events []*Event
	// Changes are the inserted, updated and deleted rows of the tables the
	// reader watches (not outbox tables), in binlog order. Empty when the
	// reader watches none.
	Changes    []Change
	Position   Position
	CommitTime time.Time
	// Held says Position is held back at the end of an earlier
	// transaction (canal, while a prepared XA transaction with outbox
	// events waits for its XA COMMIT): CommitTime is this transaction's,
	// not the one of the transaction that ends at Position.
	Held bool
}

// ChangeOp is what a statement did to a row of a watched table.
type ChangeOp uint8

// The row operations, as the binlog's rows events name them.
const (
	Insert ChangeOp = iota + 1
	Update
	Delete
)

func (op ChangeOp) String() string {
	switch op {
	case Insert:
		return "insert"
	case Update:
		return "update"
	case Delete:
		return "delete"
	}
	return fmt.Sprintf("ChangeOp(%d)", uint8(op))
}

// Change is one row of a watched table inserted, updated or deleted by a
// transaction.
type Change struct {
	// Table is the table as "schema.table".
	Table string
	Op    ChangeOp
	// Row is the row after the change (Insert, Update) or before it
	// (Delete), keyed by column name as the table defines it. Values are
	// normalized: SQL NULL is nil; integers are int64 (an unsigned value
	// above math.MaxInt64 is uint64); FLOAT and DOUBLE are float64;
	// character, binary, BLOB, TEXT, JSON, ENUM, SET and DECIMAL values are
	// string; DATE, TIME, DATETIME, TIMESTAMP and YEAR are string as the
	// server prints them ("2024-05-01 12:00:00.123456"; TIMESTAMP in the
	// relay's local time zone); BIT is int64.
	Row map[string]any
	// Before is an Update's row before the change, normalized as Row is
	// (nil for Insert and Delete): it tells a change of the row's key (a
	// renamed id) from a change of its other columns.
	Before map[string]any
}
