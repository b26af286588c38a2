package canal

import (
	"bytes"
	"encoding/hex"
	"testing"
	"unicode/utf8"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outbox-relay/outbox-relay/event"
)

// Row-to-event mapping never fails or panics on a row of the table map's
// width, whatever the values: the id is the column's text, its hex when the
// bytes are not UTF-8, or empty (a generated id is given at commit); the
// payload is the stored bytes (nil for NULL); text fields are taken as
// stored; a column order chosen by the table map is followed.
func FuzzToEvent(f *testing.F) {
	f.Add([]byte("e-1"), "order", []byte("agg-1"), "created", []byte(`{"n": 1}`), "acme", uint8(0), uint8(0))
	f.Add([]byte{}, "", []byte{}, "", []byte("not json"), "", uint8(1), uint8(1))
	f.Add([]byte{0xc3, 0xff}, "order", []byte{'a', 0xff}, "t", []byte{0xff, 0xfe}, "", uint8(2), uint8(2))
	f.Fuzz(func(t *testing.T, id []byte, aggType string, aggID []byte, typ string, payload []byte, tenant string, nulls, order uint8) {
		names := []string{"id", "aggregatetype", "aggregateid", "type", "payload", "tenant"}
		// Rotate the columns: the mapping must follow the table map's order.
		shift := int(order) % len(names)
		names = append(names[shift:], names[:shift]...)
		values := map[string]any{"id": id, "aggregatetype": aggType, "aggregateid": aggID, "type": typ, "payload": payload, "tenant": tenant}
		for i, n := range []string{"id", "aggregatetype", "aggregateid", "type", "payload", "tenant"} {
			if nulls&(1<<i) != 0 {
				values[n] = nil
			}
		}
		tme := &replication.TableMapEvent{Schema: []byte("shop"), Table: []byte("outbox"), ColumnCount: uint64(len(names))}
		row := make([]any, len(names))
		for i, n := range names {
			tme.ColumnName = append(tme.ColumnName, []byte(n))
			typ := byte(mysql.MYSQL_TYPE_VARCHAR)
			if n == "payload" {
				typ = mysql.MYSQL_TYPE_BLOB
			}
			tme.ColumnType = append(tme.ColumnType, typ)
			tme.ColumnMeta = append(tme.ColumnMeta, 255)
			row[i] = values[n]
		}
		tbl := &Table{Schema: "shop", Name: "outbox", Headers: []string{"tenant"}, Columns: Columns{
			ID: "id", AggregateType: "aggregatetype", AggregateID: "aggregateid", Type: "type", Payload: "payload"}}
		tm, err := resolve(tbl, tme)
		if err != nil {
			t.Fatal(err)
		}
		e, err := tm.toEvent(row)
		if err != nil {
			t.Fatalf("toEvent: %v", err)
		}
		wantID := ""
		if b, _ := values["id"].([]byte); utf8.Valid(b) {
			wantID = string(b)
		} else {
			wantID = hex.EncodeToString(b)
		}
		if e.ID != wantID {
			t.Fatalf("id %q, want %q", e.ID, wantID)
		}
		if p, _ := values["payload"].([]byte); !bytes.Equal(e.Payload, p) || (values["payload"] == nil) != (e.Payload == nil) {
			t.Fatalf("payload %q, want %q (NULL: %v)", e.Payload, p, values["payload"] == nil)
		}
		if a, _ := values["aggregateid"].([]byte); e.AggregateID != string(a) {
			t.Fatalf("aggregate id %q, want %q", e.AggregateID, a)
		}
		if s, _ := values["type"].(string); e.Type != s {
			t.Fatalf("type %q, want %q", e.Type, s)
		}
		if s, _ := values["aggregatetype"].(string); e.AggregateType != s {
			t.Fatalf("aggregate type %q, want %q", e.AggregateType, s)
		}
		if s, ok := values["tenant"].(string); ok != (len(e.Headers) == 1) || (ok && e.Headers[0].Value != s) {
			t.Fatalf("headers %v, want tenant %q (NULL: %v)", e.Headers, s, !ok)
		}
		// A generated id is stable for the same row and differs by row.
		src := event.Source{GTID: "0-1-" + string(rune('0'+order%10))}
		if g := GeneratedID(e.Table, src, int(nulls)); g != GeneratedID(e.Table, src, int(nulls)) || g == GeneratedID(e.Table, src, int(nulls)+1) {
			t.Fatal("generated ids are not stable per row or not distinct between rows")
		}
		// A row of another width is an error, not a panic.
		if _, err := tm.toEvent(row[1:]); err == nil {
			t.Fatal("a row narrower than the table map was accepted")
		}
	})
}
