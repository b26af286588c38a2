package canal

import (
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// The trace context can come from fields of the payload's JSON ("$.a.b")
// instead of columns: a string at that path is taken, anything else
// (absent, not a string, a payload that is not JSON) leaves it empty.
func TestTraceContextFromThePayload(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	names := []string{"id", "aggregateid", "payload"}
	tme := &replication.TableMapEvent{Schema: []byte("shop"), Table: []byte("outbox"), ColumnCount: uint64(len(names))}
	for _, n := range names {
		tme.ColumnName = append(tme.ColumnName, []byte(n))
		typ := byte(mysql.MYSQL_TYPE_VARCHAR)
		if n == "payload" {
			typ = mysql.MYSQL_TYPE_BLOB
		}
		tme.ColumnType = append(tme.ColumnType, typ)
		tme.ColumnMeta = append(tme.ColumnMeta, 255)
	}
	tbl := &Table{Schema: "shop", Name: "outbox", Columns: Columns{ID: "id", AggregateID: "aggregateid", Payload: "payload",
		TraceParent: "$.meta.traceparent", TraceState: "$.meta.tracestate"}}
	tm, err := resolve(tbl, tme)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, payload, parent, state string
	}{
		{"fields at the path are taken", `{"n":1,"meta":{"traceparent":"` + tp + `","tracestate":"k=v"}}`, tp, "k=v"},
		{"a state without a parent is not", `{"meta":{"tracestate":"k=v"}}`, "", ""},
		{"a number is not a traceparent", `{"meta":{"traceparent":42}}`, "", ""},
		{"a payload that is not JSON has none", `not json`, "", ""},
		{"no such object has none", `{"traceparent":"` + tp + `"}`, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, err := tm.toEvent([]any{[]byte("e-1"), []byte("o1"), []byte(c.payload)})
			if err != nil {
				t.Fatal(err)
			}
			if e.TraceParent != c.parent || e.TraceState != c.state {
				t.Fatalf("trace context %q %q, want %q %q", e.TraceParent, e.TraceState, c.parent, c.state)
			}
		})
	}
}
