package canal

import (
	"fmt"
	"log/slog"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
)

// RowMapper maps rows read from an outbox table (SELECT * over the text
// protocol) to events with the reader's own mapping (the same column
// mapping, headers, ids and trace context), so that a row read from the
// table and the same row read from the binlog become the same event, but
// for what only the binlog knows: Source (GTID and position) and
// CommitTime, left zero for the caller to set.
//
// Values of the text protocol are the server's text where the binlog has
// typed values; both map to the same event fields for the column types an
// outbox row holds (integers, character and binary strings, JSON,
// temporal columns as the server prints them). Two differ: a BIT column
// mapped as a header (the binlog's integer, the table's bytes) and a
// TIMESTAMP header (the binlog's is printed in the relay's time zone, the
// table's in the session's).
//
// A RowMapper is used by one goroutine at a time.
type RowMapper struct {
	r  *Reader
	tm *tableMap
}

// RowMapper returns the mapper of rows of the outbox table schema.name (one
// of Config.Tables). names are the table's columns in the order SELECT *
// returns them; binaryLen[i] is the declared length n of column i when it
// is BINARY(n) (information_schema.COLUMNS: DATA_TYPE 'binary',
// CHARACTER_OCTET_LENGTH), else 0: a BINARY(16) id is rendered as a UUID,
// as from the binlog.
func (r *Reader) RowMapper(schema, name string, names []string, binaryLen []int) (*RowMapper, error) {
	t := r.tables[schema][name]
	if t == nil {
		return nil, fmt.Errorf("canal: %s.%s is not a configured outbox table", schema, name)
	}
	f, err := fieldsOf(t, names)
	if err != nil {
		return nil, err
	}
	if len(binaryLen) != len(names) {
		return nil, fmt.Errorf("canal: %d binary lengths for %d columns", len(binaryLen), len(names))
	}
	// No dec: a SELECT's temporal values are the server's text already.
	tm := &tableMap{table: t, name: t.FullName(), fields: f, width: len(names), idBin: binaryLen[f.id]}
	tm.traceParentPath, tm.traceStatePath = config.PayloadPath(t.Columns.TraceParent), config.PayloadPath(t.Columns.TraceState)
	return &RowMapper{r: r, tm: tm}, nil
}

// Event returns the event of row (values []byte, string or nil). key is
// the row's primary key as text: a row whose id column is empty or NULL is
// given GeneratedID of the table and that key (the binlog's generated id
// names the transaction, which the table does not know).
func (m *RowMapper) Event(row []any, key string) (*event.Event, error) {
	e := new(event.Event)
	if err := m.tm.fill(e, row); err != nil {
		return nil, fmt.Errorf("table %s: %w", m.tm.name, err)
	}
	if !finishTrace(e) {
		m.r.badTraceParent(e)
	}
	if e.ID == "" {
		e.ID = GeneratedID(e.Table, event.Source{File: "primary key " + key}, 0)
		m.r.log.Warn("outbox row with an empty or NULL id: delivered with a generated id", slog.String("table", e.Table),
			slog.String("primary_key", key), slog.String("event_id", e.ID))
	}
	return e, nil
}
