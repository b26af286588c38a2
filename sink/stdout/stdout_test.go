package stdout

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
)

func TestWriteOneJSONLinePerEvent(t *testing.T) {
	var buf bytes.Buffer
	s := New(Config{}, &buf)
	evs := []*event.Event{
		{ID: "1", AggregateID: "a", Type: "t", Payload: []byte(`{"x": [1, 2.50]}`), Headers: []event.Header{{Key: "tenant", Value: "acme"}},
			Table: "db.outbox", CommitTime: time.Unix(10, 0).UTC(), Source: event.Source{GTID: "0-1-9", File: "binlog.000001", Pos: 42}},
		{ID: "2", AggregateID: "a", Payload: []byte{0xff, 0x00}},
		{ID: "3", AggregateID: "b"},
		{ID: "4", AggregateID: "b", Payload: []byte("null")},
	}
	if err := s.Write(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("got %d lines, want 4:\n%s", len(lines), buf.String())
	}
	var l Line
	if err := json.Unmarshal([]byte(lines[0]), &l); err != nil {
		t.Fatal(err)
	}
	if string(l.Payload) != `{"x":[1,2.50]}` || l.Headers["tenant"] != "acme" || l.GTID != "0-1-9" || l.BinlogPos != 42 {
		t.Fatalf("line 0 = %+v (payload %s)", l, l.Payload)
	}
	json.Unmarshal([]byte(lines[1]), &l)
	if l.PayloadEncoding != "base64" || string(l.Payload) != `"/wA="` {
		t.Fatalf("a payload that is not JSON must be base64: %s", lines[1])
	}
	l = Line{}
	json.Unmarshal([]byte(lines[2]), &l)
	if string(l.Payload) != "null" || l.PayloadEncoding != "sql_null" {
		t.Fatalf("a SQL NULL payload must be null with payload_encoding sql_null: %s", lines[2])
	}
	l = Line{}
	json.Unmarshal([]byte(lines[3]), &l)
	if string(l.Payload) != "null" || l.PayloadEncoding != "" {
		t.Fatalf("a JSON null payload must be null with no payload_encoding: %s", lines[3])
	}
}
