// Package jsonline is an event as one JSON document: the line the stdout
// sink writes per event, and what `outbox-relay dlq list --json` prints of a
// dead letter's event. A leaf: it imports only package event.
package jsonline

import (
	"encoding/base64"
	"encoding/json"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
)

// Line is the JSON document of one event.
type Line struct {
	ID              string            `json:"id"`
	Type            string            `json:"type,omitempty"`
	AggregateType   string            `json:"aggregate_type,omitempty"`
	AggregateID     string            `json:"aggregate_id"`
	Table           string            `json:"table"`
	CommitTime      time.Time         `json:"commit_time"`
	GTID            string            `json:"gtid,omitempty"`
	BinlogFile      string            `json:"binlog_file,omitempty"`
	BinlogPos       uint32            `json:"binlog_pos,omitempty"`
	Headers         map[string]string `json:"headers,omitempty"`
	Payload         json.RawMessage   `json:"payload"`
	PayloadEncoding string            `json:"payload_encoding,omitempty"`
}

// From renders e. A payload that is valid JSON is embedded as JSON (the
// encoder compacts its white space so each event stays one line; Kafka and
// webhook sinks send the stored bytes untouched) with no payload_encoding;
// any other payload is a base64 string with payload_encoding "base64"; a SQL
// NULL payload is null with payload_encoding "sql_null", so it differs from a
// stored JSON null.
func From(e *event.Event) Line {
	l := Line{ID: e.ID, Type: e.Type, AggregateType: e.AggregateType, AggregateID: e.AggregateID,
		Table: e.Table, CommitTime: e.CommitTime, GTID: e.Source.GTID, BinlogFile: e.Source.File, BinlogPos: e.Source.Pos}
	if len(e.Headers) > 0 {
		l.Headers = make(map[string]string, len(e.Headers))
		for _, h := range e.Headers {
			l.Headers[h.Key] = h.Value
		}
	}
	switch {
	case e.Payload == nil:
		l.Payload = json.RawMessage("null")
		l.PayloadEncoding = "sql_null"
	case json.Valid(e.Payload):
		l.Payload = json.RawMessage(e.Payload)
	default:
		b, _ := json.Marshal(base64.StdEncoding.EncodeToString(e.Payload))
		l.Payload = b
		l.PayloadEncoding = "base64"
	}
	return l
}
