package mysqlprimary

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// parseFiles decodes every event of every binlog file with go-mysql's parser,
// checksums verified, JSON rendered as MySQL text.
func parseFiles(t *testing.T, s *Server) []*replication.BinlogEvent {
	t.Helper()
	p := replication.NewBinlogParser()
	p.SetVerifyChecksum(true)
	p.SetRenderJSONAsMySQLText(true)
	p.SetParseTime(true)
	var out []*replication.BinlogEvent
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.files {
		for _, e := range f.events {
			ev, err := p.Parse(e.data)
			if err != nil {
				t.Fatalf("parse %s event at %s:%d: %v", replication.EventType(e.typ), f.name, e.pos, err)
			}
			if ev.Header.LogPos != e.pos+uint32(len(e.data)) {
				t.Fatalf("%s at %d: log_pos %d, want %d", ev.Header.EventType, e.pos, ev.Header.LogPos, e.pos+uint32(len(e.data)))
			}
			out = append(out, ev)
		}
	}
	return out
}

func types(evs []*replication.BinlogEvent) string {
	var names []string
	for _, e := range evs {
		names = append(names, e.Header.EventType.String())
		if tp, ok := e.Event.(*replication.TransactionPayloadEvent); ok {
			for _, in := range tp.Events {
				names = append(names, "  "+in.Header.EventType.String())
			}
		}
	}
	return strings.Join(names, "\n")
}

func TestEventsDecodeWithGoMySQLParser(t *testing.T) {
	s := Start(t, Options{ServerUUID: "3e11fa47-71ca-11e1-9e33-c80aa9429562", ServerID: 7})
	full := Table{Schema: "app", Name: "kinds", PrimaryKey: []int{0}, Columns: []Column{
		{Name: "n", Type: Int},
		{Name: "u", Type: BigInt, Unsigned: true},
		{Name: "v", Type: Varchar, Length: 10, Nullable: true},
		{Name: "c", Type: Char, Length: 100},
		{Name: "b", Type: Binary, Length: 16},
		{Name: "vb", Type: Varbinary, Length: 8},
		{Name: "tx", Type: Text},
		{Name: "at", Type: DateTime, Fsp: 6},
		{Name: "doc", Type: JSONType, Nullable: true},
	}}
	at := time.Date(2024, 2, 29, 23, 59, 58, 123456000, time.UTC)
	uid := []byte{0x01, 0x8f, 0x3e, 0x4c, 0x7a, 0x1b, 0x7c, 0x00, 0x80, 0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x00}
	g1 := s.Commit(Txn{Writes: []Write{{Table: full, Rows: [][]any{
		{-5, uint64(1) << 63, "héllo", "pad  ", uid, []byte{0, 1}, "long text", at, JSON(`{"b": [1, 2.5, "x", null, true, false], "a": {"n": -70000}}`)},
		{2147483647, 0, nil, "", []byte{}, []byte{}, "", at, nil},
	}}}})
	g2 := s.Exec("CREATE TABLE t (a INT)")
	s.Commit(Txn{Compressed: true, Writes: []Write{{Table: s.Outbox(), Rows: [][]any{OutboxRow(1, "e1", "order", "o1", "created", `{"total": 10}`)}}}})
	s.Rotate()
	s.Insert(OutboxRow(2, "e2", "order", "o2", "created", `[]`))

	evs := parseFiles(t, s)
	want := strings.Join([]string{
		"FormatDescriptionEvent", "PreviousGTIDsEvent",
		"GTIDEvent", "QueryEvent", "TableMapEvent", "WriteRowsEventV2", "XIDEvent",
		"GTIDEvent", "QueryEvent",
		"GTIDEvent", "TransactionPayloadEvent", "  QueryEvent", "  TableMapEvent", "  WriteRowsEventV2", "  XIDEvent",
		"RotateEvent",
		"FormatDescriptionEvent", "PreviousGTIDsEvent",
		"GTIDEvent", "QueryEvent", "TableMapEvent", "WriteRowsEventV2", "XIDEvent",
	}, "\n")
	if got := types(evs); got != want {
		t.Fatalf("event types:\n%s\nwant:\n%s", got, want)
	}

	fde := evs[0].Event.(*replication.FormatDescriptionEvent)
	if fde.ServerVersion != "8.0.36" || fde.ChecksumAlgorithm != replication.BINLOG_CHECKSUM_ALG_CRC32 || len(fde.EventTypeHeaderLengths) != 41 {
		t.Errorf("format description: version %q checksum %d types %d", fde.ServerVersion, fde.ChecksumAlgorithm, len(fde.EventTypeHeaderLengths))
	}
	if evs[0].Header.ServerID != 7 {
		t.Errorf("server id %d", evs[0].Header.ServerID)
	}

	gtid := evs[2].Event.(*replication.GTIDEvent)
	next, _ := gtid.GTIDNext()
	if next.String() != g1 || g1 != "3e11fa47-71ca-11e1-9e33-c80aa9429562:1" {
		t.Errorf("first GTID %s, Commit returned %s", next, g1)
	}
	if gtid.SequenceNumber != 1 || gtid.LastCommitted != 0 || gtid.ImmediateServerVersion != 80036 {
		t.Errorf("gtid clocks: seq %d last %d version %d", gtid.SequenceNumber, gtid.LastCommitted, gtid.ImmediateServerVersion)
	}
	var txnLen uint64
	for _, e := range evs[2:7] {
		txnLen += uint64(e.Header.EventSize)
	}
	if gtid.TransactionLength != txnLen {
		t.Errorf("transaction length %d, events add up to %d", gtid.TransactionLength, txnLen)
	}
	if q := evs[3].Event.(*replication.QueryEvent); string(q.Query) != "BEGIN" || string(q.Schema) != "app" {
		t.Errorf("begin query %q schema %q", q.Query, q.Schema)
	}

	tm := evs[4].Event.(*replication.TableMapEvent)
	if got := strings.Join(tm.ColumnNameString(), ","); got != "n,u,v,c,b,vb,tx,at,doc" {
		t.Errorf("column names %s", got)
	}
	if um := tm.UnsignedMap(); !um[1] || um[0] || len(um) != 2 {
		t.Errorf("unsigned map %v", um)
	}
	if cm := tm.CollationMap(); cm[2] != 255 || cm[3] != 255 || cm[4] != 63 || cm[5] != 63 || cm[6] != 255 || len(cm) != 5 {
		t.Errorf("collation map %v", cm)
	}
	if pk := tm.PrimaryKey; len(pk) != 1 || pk[0] != 0 {
		t.Errorf("primary key %v", pk)
	}
	if nb := tm.Nullable; nb != nil {
		if ok, _ := nb(2); !ok {
			t.Errorf("column v is nullable")
		}
	}
	if vis := tm.VisibilityMap(); len(vis) != 9 || !vis[8] {
		t.Errorf("visibility %v", vis)
	}
	// CHAR(100) utf8mb4 is 400 bytes: the length spills into the type byte.
	if meta := tm.ColumnMeta[3]; int(meta&0xff)|int(((meta>>4)&0x300)^0x300) != 400 {
		t.Errorf("char meta %x", meta)
	}

	rows := evs[5].Event.(*replication.RowsEvent)
	if len(rows.Rows) != 2 {
		t.Fatalf("rows %d", len(rows.Rows))
	}
	r := rows.Rows[0]
	wantRow := []any{int32(-5), uint64(1) << 63, "héllo", "pad", string(uid[:15]), "\x00\x01", "long text", at, `{"a":{"n":-70000},"b":[1,2.5,"x",null,true,false]}`}
	for i, w := range wantRow {
		got := r[i]
		if b, ok := got.([]byte); ok {
			got = string(b)
		}
		if tt, ok := got.(time.Time); ok {
			got = tt.UTC()
		}
		if fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("row 0 column %s: %#v, want %#v", tm.ColumnNameString()[i], got, w)
		}
	}
	if r := rows.Rows[1]; r[2] != nil || r[8] != nil || r[0] != int32(2147483647) {
		t.Errorf("row 1: %#v", r)
	}

	if q := evs[8].Event.(*replication.QueryEvent); string(q.Query) != "CREATE TABLE t (a INT)" {
		t.Errorf("ddl %q", q.Query)
	}
	if g := evs[7].Event.(*replication.GTIDEvent); g.GNO != 2 || g.CommitFlag != 1 || !strings.HasSuffix(g2, ":2") {
		t.Errorf("ddl gtid %d flag %d (%s)", g.GNO, g.CommitFlag, g2)
	}

	tp := evs[10].Event.(*replication.TransactionPayloadEvent)
	inner := tp.Events[2].Event.(*replication.RowsEvent)
	if got := fmt.Sprint(inner.Rows[0][5]); got != `{"total":10}` {
		t.Errorf("compressed row payload %s", got)
	}
	if tp.CompressionType != replication.ZSTD || tp.UncompressedSize == 0 {
		t.Errorf("payload compression %d uncompressed %d", tp.CompressionType, tp.UncompressedSize)
	}
	if g := evs[9].Event.(*replication.GTIDEvent); g.TransactionLength != uint64(evs[9].Header.EventSize+evs[10].Header.EventSize) {
		t.Errorf("compressed transaction length %d", g.TransactionLength)
	}

	rot := evs[11].Event.(*replication.RotateEvent)
	if string(rot.NextLogName) != "binlog.000002" || rot.Position != 4 {
		t.Errorf("rotate to %s:%d", rot.NextLogName, rot.Position)
	}
	prev := evs[13].Event.(*replication.PreviousGTIDsEvent)
	if prev.GTIDSets != "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-3" {
		t.Errorf("previous GTIDs %q", prev.GTIDSets)
	}
	if g := evs[14].Event.(*replication.GTIDEvent); g.SequenceNumber != 1 || g.LastCommitted != 0 {
		t.Errorf("sequence numbers restart per file: seq %d last %d", g.SequenceNumber, g.LastCommitted)
	}
}

func TestTaggedAndAnonymousGTIDEvents(t *testing.T) {
	s := Start(t, Options{Version: "8.4.2", ServerUUID: "896e7882-18fe-11ef-ab88-22222d34d411"})
	plain := s.Insert(OutboxRow(1, "e1", "a", "1", "t", `{}`))
	tagged := s.Commit(Txn{Tag: "Orders", Writes: []Write{{Table: s.Outbox(), Rows: [][]any{OutboxRow(2, "e2", "a", "1", "t", `{}`)}}}})
	explicit := s.Commit(Txn{GTID: "896e7882-18fe-11ef-ab88-22222d34d411:orders:7", Writes: []Write{{Table: s.Outbox(), Rows: [][]any{OutboxRow(3, "e3", "a", "1", "t", `{}`)}}}})
	if plain != "896e7882-18fe-11ef-ab88-22222d34d411:1" || tagged != "896e7882-18fe-11ef-ab88-22222d34d411:orders:1" || explicit != "896e7882-18fe-11ef-ab88-22222d34d411:orders:7" {
		t.Fatalf("GTIDs %s %s %s", plain, tagged, explicit)
	}
	s.Rotate()
	evs := parseFiles(t, s)
	fde := evs[0].Event.(*replication.FormatDescriptionEvent)
	if len(fde.EventTypeHeaderLengths) != 42 {
		t.Errorf("8.4 format description describes %d types, want 42", len(fde.EventTypeHeaderLengths))
	}
	var tags []string
	for _, e := range evs {
		if g, ok := e.Event.(*replication.GtidTaggedLogEvent); ok {
			next, err := g.GTIDNext()
			if err != nil {
				t.Fatal(err)
			}
			tags = append(tags, next.String())
			var n uint64
			if g.TransactionLength < uint64(e.Header.EventSize) || g.ImmediateServerVersion != 80402 || g.SequenceNumber == 0 || g.ImmediateCommitTimestamp == 0 {
				t.Errorf("tagged event fields: %+v (%d)", g.GTIDEvent, n)
			}
		}
	}
	if got := strings.Join(tags, " "); got != tagged+" "+explicit {
		t.Errorf("tagged GTID events %s", got)
	}
	if got := s.GTIDExecuted(); got != "896e7882-18fe-11ef-ab88-22222d34d411:1:orders:1:7" {
		t.Errorf("gtid_executed %s", got)
	}
	prev := evs[len(evs)-1].Event.(*replication.PreviousGTIDsEvent)
	if prev.GTIDSets != "896e7882-18fe-11ef-ab88-22222d34d411:1:orders:1:7" {
		t.Errorf("previous GTIDs (tagged format) %q", prev.GTIDSets)
	}

	off := Start(t, Options{GTIDMode: "OFF"})
	if g := off.Insert(OutboxRow(1, "e1", "a", "1", "t", `{}`)); g != "ANONYMOUS" {
		t.Errorf("gtid_mode OFF commit returned %s", g)
	}
	evs = parseFiles(t, off)
	if evs[2].Header.EventType != replication.ANONYMOUS_GTID_EVENT {
		t.Fatalf("want an anonymous GTID event, got %s", evs[2].Header.EventType)
	}
	if g := evs[2].Event.(*replication.GTIDEvent); g.GNO != 0 || !bytes.Equal(g.SID, make([]byte, 16)) {
		t.Errorf("anonymous GTID sid %x gno %d", g.SID, g.GNO)
	}
}

func TestXAEvents(t *testing.T) {
	s := Start(t, Options{})
	w := Write{Table: s.Outbox(), Rows: [][]any{OutboxRow(1, "x1", "a", "1", "t", `{}`)}}
	s.XAPrepare("tx1", w)
	s.XACommit("tx1")
	s.XAPrepare("tx2", w)
	s.XARollback("tx2")
	s.XACommitOnePhase("tx3", w)
	evs := parseFiles(t, s)
	var got []string
	for _, e := range evs[2:] {
		switch x := e.Event.(type) {
		case *replication.QueryEvent:
			got = append(got, string(x.Query))
		case *replication.GenericEvent:
			if e.Header.EventType != replication.XA_PREPARE_LOG_EVENT {
				t.Errorf("unexpected generic event %s", e.Header.EventType)
				continue
			}
			b := e.RawData[replication.EventHeaderSize : len(e.RawData)-4]
			gl := binary.LittleEndian.Uint32(b[5:])
			got = append(got, fmt.Sprintf("XA_PREPARE one_phase=%d format=%d gtrid=%s", b[0], binary.LittleEndian.Uint32(b[1:]), b[13:13+gl]))
		default:
			got = append(got, e.Header.EventType.String())
		}
	}
	want := []string{
		"GTIDEvent", "XA START X'747831',X'',1", "TableMapEvent", "WriteRowsEventV2", "XA END X'747831',X'',1", "XA_PREPARE one_phase=0 format=1 gtrid=tx1",
		"GTIDEvent", "XA COMMIT X'747831',X'',1",
		"GTIDEvent", "XA START X'747832',X'',1", "TableMapEvent", "WriteRowsEventV2", "XA END X'747832',X'',1", "XA_PREPARE one_phase=0 format=1 gtrid=tx2",
		"GTIDEvent", "XA ROLLBACK X'747832',X'',1",
		"GTIDEvent", "XA START X'747833',X'',1", "TableMapEvent", "WriteRowsEventV2", "XA END X'747833',X'',1", "XA_PREPARE one_phase=1 format=1 gtrid=tx3",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("XA events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestBinaryJSONRendersAsMySQLText(t *testing.T) {
	long := strings.Repeat("x", 70000)
	// go-mysql renders MySQL's types and key order, without MySQL's spaces.
	cases := []struct{ name, in, want string }{
		{"scalars are top-level values", `"str"`, `"str"`},
		{"a top-level integer is int16", `42`, `42`},
		{"literals", `[true, false, null]`, `[true,false,null]`},
		{"object keys sort by length then bytes", `{"bb": 1, "a": 2, "ab": 3}`, `{"a":2,"ab":3,"bb":1}`},
		{"integers of every width", `[1, -40000, 3000000000, -9000000000000000000, 18446744073709551615]`, `[1,-40000,3000000000,-9000000000000000000,18446744073709551615]`},
		{"doubles keep their fraction", `[1.5, -0.25, 1e3]`, `[1.5,-0.25,1000.0]`},
		{"nested containers", `{"a": [{"b": {}}, []]}`, `{"a":[{"b":{}},[]]}`},
		{"unicode and escapes", `{"k": "é\n\"q\""}`, `{"k":"é\n\"q\""}`},
		{"a duplicate key keeps the last value", `{"a": 1, "a": 2}`, `{"a":2}`},
		{"a document over 64 KiB uses the large format", `{"big": "` + long + `"}`, `{"big":"` + long + `"}`},
	}
	tbl := Table{Schema: "app", Name: "docs", Columns: []Column{{Name: "doc", Type: JSONType}}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body, err := writeRowsBody(100, tbl, [][]any{{JSON(c.in)}}, true)
			if err != nil {
				t.Fatal(err)
			}
			p := replication.NewBinlogParser()
			p.SetRenderJSONAsMySQLText(true)
			fde := event{typ: evFormatDescription, body: fdeBody("8.0.36", 0)}
			if _, err := p.Parse(fde.encode(0, true)); err != nil {
				t.Fatal(err)
			}
			if _, err := p.Parse(event{typ: evTableMap, body: tableMapBody(100, tbl, "8.0.36")}.encode(0, true)); err != nil {
				t.Fatal(err)
			}
			ev, err := p.Parse(event{typ: evWriteRowsV2, body: body}.encode(0, true))
			if err != nil {
				t.Fatal(err)
			}
			got := fmt.Sprint(ev.Event.(*replication.RowsEvent).Rows[0][0])
			if string(got) != c.want {
				if len(got) > 200 {
					got = got[:200] + "…"
				}
				t.Errorf("got %s", got)
			}
		})
	}
}

func TestSerializationVarLenMatchesMySQLSample(t *testing.T) {
	// Values and encodings from go-mysql's tests of MySQL 8.4 output.
	if got := serialUint(90200); !bytes.Equal(got, []byte{0xc3, 0x02, 0x0b}) {
		t.Errorf("90200: %x", got)
	}
	if got := serialUint(1739823289369365); len(got) != 8 || got[0] != 0x7f {
		t.Errorf("timestamp: %x", got)
	}
	if got := serialInt(1); !bytes.Equal(got, []byte{0x04}) {
		t.Errorf("signed 1: %x", got)
	}
	if got := serialInt(123); !bytes.Equal(got, []byte{0xd9, 0x03}) {
		t.Errorf("signed 123: %x", got)
	}
	if got := serialInt(-65535); !bytes.Equal(got, []byte{0b11101011, 0b11111111, 0b00001111}) {
		t.Errorf("signed -65535: %x", got)
	}
	_ = mysql.MYSQL_TYPE_JSON
}
