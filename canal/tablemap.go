package canal

// This file owns the table map of an outbox table: which columns of a
// TABLE_MAP event (or a SELECT) hold each event field, resolved once per
// table shape, and how a decoded row becomes an event, its values rendered
// as go-mysql's text.

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
)

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
