// Package stdout is a sink that writes each event as one JSON line, for trying
// outbox-relay out and for piping into other tools.
//
// A Write is acknowledged once its lines are written and flushed to the
// underlying writer. Write is not called concurrently (the pipeline's
// contract), so lines of one batch are never interleaved with another's.
package stdout

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink"
)

// Config of the stdout sink.
type Config struct {
	// Pretty indents each event over several lines. Default false (one line each).
	Pretty bool `yaml:"pretty"`
}

// Sink writes JSON lines to W.
type Sink struct {
	cfg  Config
	out  io.Writer
	w    *bufio.Writer
	torn bool // a failed write may have left a partial line
}

var _ sink.Sink = (*Sink)(nil)

// New returns a sink writing to w (os.Stdout when nil).
func New(cfg Config, w io.Writer) *Sink {
	if w == nil {
		w = os.Stdout
	}
	return &Sink{cfg: cfg, out: w, w: bufio.NewWriterSize(w, 64<<10)}
}

// Line is the JSON document written per event.
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

// Connect implements sink.Sink.
func (s *Sink) Connect(context.Context) error { return nil }

// Write implements sink.Sink. A failed write fails the whole batch,
// retriably; the next write starts on a new line, so a line torn by the
// failure stands alone and is not glued to the next event.
func (s *Sink) Write(_ context.Context, batch []*event.Event) error {
	if err := s.write(batch); err != nil {
		// bufio.Writer keeps its first error for ever: start afresh.
		s.w.Reset(s.out)
		s.torn = true
		return err
	}
	return nil
}

func (s *Sink) write(batch []*event.Event) error {
	if s.torn {
		if err := s.w.WriteByte('\n'); err != nil {
			return err
		}
		s.torn = false
	}
	enc := json.NewEncoder(s.w)
	enc.SetEscapeHTML(false)
	if s.cfg.Pretty {
		enc.SetIndent("", "  ")
	}
	for _, e := range batch {
		if err := enc.Encode(ToLine(e)); err != nil {
			return fmt.Errorf("write event %s: %w", e.ID, err)
		}
	}
	return s.w.Flush()
}

// Close implements sink.Sink.
func (s *Sink) Close(context.Context) error { return s.w.Flush() }

// ToLine renders e. A payload that is valid JSON is embedded as JSON (the
// encoder compacts its white space so each event stays one line; Kafka and
// webhook sinks send the stored bytes untouched) with no payload_encoding;
// any other payload is a base64 string with payload_encoding "base64"; a SQL
// NULL payload is null with payload_encoding "sql_null", so it differs from a
// stored JSON null.
func ToLine(e *event.Event) Line {
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
