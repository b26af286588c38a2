package mysqlprimary

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/go-mysql-org/go-mysql/replication"
)

// readEvents splits concatenated raw events and parses them.
func readEvents(t *testing.T, b []byte) []*replication.BinlogEvent {
	t.Helper()
	p := replication.NewBinlogParser()
	p.SetVerifyChecksum(true)
	p.SetRenderJSONAsMySQLText(true)
	var out []*replication.BinlogEvent
	for len(b) > 0 {
		n := binary.LittleEndian.Uint32(b[9:])
		ev, err := p.Parse(b[:n])
		if err != nil {
			t.Fatalf("parse %s: %v", replication.EventType(b[4]), err)
		}
		out = append(out, ev)
		b = b[n:]
	}
	return out
}

// TestMatchesDoltGolden compares what the scripted primary writes for a
// table and row with what Dolt, an independent MySQL-protocol server, wrote
// for the same CREATE TABLE and INSERT (testdata/dolt-outbox.events, made by
// captureDolt with binlog_row_metadata=FULL). TestMatchesAFreshDoltCapture
// does the same against a Dolt running now.
func TestMatchesDoltGolden(t *testing.T) {
	golden, err := os.ReadFile("testdata/dolt-outbox.events")
	if err != nil {
		t.Fatal(err)
	}
	matchesDolt(t, golden)
}

// matchesDolt compares the scripted primary's events with captured Dolt ones.
func matchesDolt(t *testing.T, captured []byte) {
	t.Helper()
	dolt := readEvents(t, captured)

	s := Start(t, Options{})
	// Dolt stores every JSON number as a double and sorts keys bytewise:
	// encode the document its way, so that the bytes can be compared.
	doc, err := encodeJSON(goldenDoc, jsonDolt)
	if err != nil {
		t.Fatal(err)
	}
	row := goldenRow()
	row[5] = doc
	s.Commit(Txn{Writes: []Write{{Table: goldenTable, Rows: [][]any{row}}}})
	mine := parseFiles(t, s)

	kinds := func(evs []*replication.BinlogEvent) []replication.EventType {
		var out []replication.EventType
		for _, e := range evs {
			out = append(out, e.Header.EventType)
		}
		return out
	}
	if !slices.Equal(kinds(dolt), kinds(mine)) {
		t.Fatalf("event types: dolt %v, mine %v", kinds(dolt), kinds(mine))
	}
	find := func(evs []*replication.BinlogEvent, typ replication.EventType) *replication.BinlogEvent {
		for _, e := range evs {
			if e.Header.EventType == typ {
				return e
			}
		}
		t.Fatalf("no %s", typ)
		return nil
	}

	t.Run("the transaction starts with BEGIN in the table's schema", func(t *testing.T) {
		d, m := find(dolt, replication.QUERY_EVENT).Event.(*replication.QueryEvent), find(mine, replication.QUERY_EVENT).Event.(*replication.QueryEvent)
		if string(d.Query) != string(m.Query) || string(d.Schema) != string(m.Schema) {
			t.Errorf("dolt %q in %q, mine %q in %q", d.Query, d.Schema, m.Query, m.Schema)
		}
	})

	t.Run("table maps agree on types, metadata, nullability and names", func(t *testing.T) {
		d, m := find(dolt, replication.TABLE_MAP_EVENT).Event.(*replication.TableMapEvent), find(mine, replication.TABLE_MAP_EVENT).Event.(*replication.TableMapEvent)
		checks := []struct {
			what      string
			dolt, got any
		}{
			{"schema", string(d.Schema), string(m.Schema)},
			{"table", string(d.Table), string(m.Table)},
			{"column types", fmt.Sprint(d.ColumnType), fmt.Sprint(m.ColumnType)},
			{"column metadata", fmt.Sprint(d.ColumnMeta), fmt.Sprint(m.ColumnMeta)},
			{"null bitmap", fmt.Sprint(d.NullBitmap), fmt.Sprint(m.NullBitmap)},
			{"column names", fmt.Sprint(d.ColumnNameString()), fmt.Sprint(m.ColumnNameString())},
		}
		for _, c := range checks {
			if c.dolt != c.got {
				t.Errorf("%s: dolt %v, mine %v", c.what, c.dolt, c.got)
			}
		}
		// Known differences, asserted so that a change on either side shows:
		// Dolt writes a collation for every column (0 for non-character
		// ones) where MySQL writes one per character column, and its
		// default collation is utf8mb4_0900_bin (309), not _ai_ci (255).
		if fmt.Sprint(d.ColumnCharset) != "[0 309 309 309 309 0]" {
			t.Errorf("dolt column charsets now %v", d.ColumnCharset)
		}
		if fmt.Sprint(m.CollationMap()) != "map[1:255 2:255 3:255 4:255]" {
			t.Errorf("my collations %v", m.CollationMap())
		}
		// MySQL writes signedness for numeric columns and the primary key
		// with binlog_row_metadata=FULL; Dolt writes neither.
		if d.SignednessBitmap != nil || d.PrimaryKey != nil {
			t.Errorf("dolt now writes signedness %x / primary key %v", d.SignednessBitmap, d.PrimaryKey)
		}
		if m.SignednessBitmap == nil || fmt.Sprint(m.PrimaryKey) != "[0]" {
			t.Errorf("mine lacks signedness %x / primary key %v", m.SignednessBitmap, m.PrimaryKey)
		}
	})

	t.Run("row images are byte for byte equal, binary JSON included", func(t *testing.T) {
		d, m := find(dolt, replication.WRITE_ROWS_EVENTv2), find(mine, replication.WRITE_ROWS_EVENTv2)
		// After table id (6) and flags (2): Dolt does not set STMT_END_F on
		// the statement's last rows event; MySQL does.
		body := func(e *replication.BinlogEvent) []byte {
			return e.RawData[replication.EventHeaderSize+8 : len(e.RawData)-4]
		}
		if !bytes.Equal(body(d), body(m)) {
			t.Errorf("row images differ:\ndolt %x\nmine %x", body(d), body(m))
		}
		if f := binary.LittleEndian.Uint16(d.RawData[replication.EventHeaderSize+6:]); f != 0 {
			t.Errorf("dolt rows flags now %x", f)
		}
		got := fmt.Sprint(d.Event.(*replication.RowsEvent).Rows[0][5])
		if want := `{"a":-3.0,"customer":{"name":"Zoë","vip":false},"items":[1.0,2.5,"x",null,true],"total":10.0}`; got != want {
			t.Errorf("dolt document renders %s", got)
		}
	})

	t.Run("MySQL's layout of the same document differs from Dolt's as documented", func(t *testing.T) {
		mysqlDoc, err := EncodeJSON(goldenDoc)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(mysqlDoc, doc) {
			t.Fatal("MySQL and Dolt layouts should differ (integers, key order)")
		}
		tbl := Table{Schema: "app", Name: "d", Columns: []Column{{Name: "j", Type: JSONType}}}
		body, err := writeRowsBody(7, tbl, [][]any{{mysqlDoc}}, true)
		if err != nil {
			t.Fatal(err)
		}
		p := replication.NewBinlogParser()
		p.SetRenderJSONAsMySQLText(true)
		for _, e := range []event{{typ: evFormatDescription, body: fdeBody("8.0.36", 0)}, {typ: evTableMap, body: tableMapBody(7, tbl, "8.0.36")}} {
			if _, err := p.Parse(e.encode(0, true)); err != nil {
				t.Fatal(err)
			}
		}
		ev, err := p.Parse(event{typ: evWriteRowsV2, body: body}.encode(0, true))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := fmt.Sprint(ev.Event.(*replication.RowsEvent).Rows[0][0]), `{"a":-3,"items":[1,2.5,"x",null,true],"total":10,"customer":{"vip":false,"name":"Zoë"}}`; got != want {
			t.Errorf("MySQL layout renders %s, want %s", got, want)
		}
	})

	t.Run("Dolt writes a 5.6-era format description and GTID event", func(t *testing.T) {
		fd := dolt[0].Event.(*replication.FormatDescriptionEvent)
		g := find(dolt, replication.GTID_EVENT).Event.(*replication.GTIDEvent)
		if len(fd.EventTypeHeaderLengths) != 35 || g.SequenceNumber != 0 || g.TransactionLength != 0 {
			t.Errorf("dolt now writes %d event types, sequence %d, length %d", len(fd.EventTypeHeaderLengths), g.SequenceNumber, g.TransactionLength)
		}
		mg := find(mine, replication.GTID_EVENT).Event.(*replication.GTIDEvent)
		if mg.SequenceNumber != 1 || mg.TransactionLength == 0 {
			t.Errorf("mine: sequence %d length %d", mg.SequenceNumber, mg.TransactionLength)
		}
	})
}
