// Package stdout is a sink that writes each event as one JSON line, for trying
// outbox-relay out and for piping into other tools.
//
// A Write is acknowledged once its lines are written and flushed to the
// underlying writer. Every sink of the process writing to the same writer
// (the live sink and a replay's, both on os.Stdout) writes through one
// shared buffer under one lock, held from a batch's first byte to its
// flush: a batch's lines are never interleaved with another sink's, and no
// line is ever cut by another's. A Sink's Write is not called concurrently
// (the pipeline's contract); Writes of different Sinks may be.
package stdout

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/event/jsonline"
	"github.com/outbox-relay/outbox-relay/sink"
)

// Config is the stdout sink's `stdout:` section (it may be left out).
type Config struct {
	// Pretty indents each event over several lines. Default false (one line each).
	Pretty bool `yaml:"pretty"`
}

// Sink writes JSON lines to W.
type Sink struct {
	cfg     Config
	o       *output
	closed  bool
	payload bytes.Buffer // a compacted payload, reused
}

var _ sink.Local = (*Sink)(nil)

// WritesLocally implements sink.Local: Write writes to a pipe or file.
func (*Sink) WritesLocally() {}

// output is what every Sink writing to one writer shares: its buffer, and
// the lock a Write holds from its batch's first byte to its flush.
type output struct {
	mu   sync.Mutex
	out  io.Writer
	w    *bufio.Writer
	torn bool // a failed write may have left a partial line
	refs int  // Sinks not closed; guarded by outputsMu
}

// outputs are the shared outputs by writer: one process, one stdout, one
// buffer. A writer that cannot be a map key (not comparable) gets an
// output of its own.
var (
	outputsMu sync.Mutex
	outputs   = map[io.Writer]*output{}
)

func outputFor(w io.Writer) *output {
	if !reflect.TypeOf(w).Comparable() {
		return &output{out: w, w: bufio.NewWriterSize(w, 64<<10), refs: 1}
	}
	outputsMu.Lock()
	defer outputsMu.Unlock()
	o := outputs[w]
	if o == nil {
		o = &output{out: w, w: bufio.NewWriterSize(w, 64<<10)}
		outputs[w] = o
	}
	o.refs++
	return o
}

// release drops a Sink's hold on o; the last one forgets it.
func (o *output) release() {
	outputsMu.Lock()
	defer outputsMu.Unlock()
	if o.refs--; o.refs == 0 && outputs[o.out] == o {
		delete(outputs, o.out)
	}
}

// New returns a sink writing to w (os.Stdout when nil). Sinks given the
// same writer share one buffer and lock (see the package comment).
func New(cfg Config, w io.Writer) *Sink {
	if w == nil {
		w = os.Stdout
	}
	return &Sink{cfg: cfg, o: outputFor(w)}
}

// Line is the JSON document written per event (package jsonline).
type Line = jsonline.Line

// Connect implements sink.Sink.
func (s *Sink) Connect(context.Context) error { return nil }

// Write implements sink.Sink. A failed write fails the whole batch,
// retriably; the next write starts on a new line, so a line torn by the
// failure stands alone and is not glued to the next event.
func (s *Sink) Write(_ context.Context, batch []*event.Event) error {
	o := s.o
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := s.write(o.w, batch); err != nil {
		// bufio.Writer keeps its first error for ever: start afresh.
		o.w.Reset(o.out)
		o.torn = true
		return err
	}
	return nil
}

// write writes batch to w, the shared buffer, whose lock the caller holds.
func (s *Sink) write(w *bufio.Writer, batch []*event.Event) error {
	if s.o.torn {
		if err := w.WriteByte('\n'); err != nil {
			return err
		}
		s.o.torn = false
	}
	if s.cfg.Pretty {
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		for _, e := range batch {
			if err := enc.Encode(ToLine(e)); err != nil {
				return fmt.Errorf("write event %s: %w", e.ID, err)
			}
		}
		return w.Flush()
	}
	for _, e := range batch {
		// The line is built in the writer's own free space when it fits:
		// no copy, and the payload is validated and compacted in one pass.
		if _, err := w.Write(s.appendLine(w.AvailableBuffer(), e)); err != nil {
			return fmt.Errorf("write event %s: %w", e.ID, err)
		}
	}
	return w.Flush()
}

// appendLine appends e's line, byte for byte what encoding/json writes for
// ToLine(e) (without HTML escaping), and a newline.
func (s *Sink) appendLine(b []byte, e *event.Event) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, e.ID)
	if e.Type != "" {
		b = append(b, `,"type":`...)
		b = appendString(b, e.Type)
	}
	if e.AggregateType != "" {
		b = append(b, `,"aggregate_type":`...)
		b = appendString(b, e.AggregateType)
	}
	b = append(b, `,"aggregate_id":`...)
	b = appendString(b, e.AggregateID)
	b = append(b, `,"table":`...)
	b = appendString(b, e.Table)
	b = append(b, `,"commit_time":`...)
	if y := e.CommitTime.Year(); y >= 0 && y <= 9999 {
		b = append(b, '"')
		b = e.CommitTime.AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	} else {
		b = append(b, `null`...) // not from a binlog; encoding/json fails on it
	}
	if e.Source.GTID != "" {
		b = append(b, `,"gtid":`...)
		b = appendString(b, e.Source.GTID)
	}
	if e.Source.File != "" {
		b = append(b, `,"binlog_file":`...)
		b = appendString(b, e.Source.File)
	}
	if e.Source.Pos != 0 {
		b = append(b, `,"binlog_pos":`...)
		b = strconv.AppendUint(b, uint64(e.Source.Pos), 10)
	}
	if len(e.Headers) > 0 {
		// A JSON object: sorted keys, the last of a repeated key wins.
		hs := make(map[string]string, len(e.Headers))
		for _, h := range e.Headers {
			hs[h.Key] = h.Value
		}
		b = append(b, `,"headers":{`...)
		for i, k := range slices.Sorted(maps.Keys(hs)) {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
			b = append(b, ':')
			b = appendString(b, hs[k])
		}
		b = append(b, '}')
	}
	b = append(b, `,"payload":`...)
	s.payload.Reset()
	switch {
	case e.Payload == nil:
		b = append(b, `null,"payload_encoding":"sql_null"`...)
	case json.Compact(&s.payload, e.Payload) == nil:
		b = append(b, s.payload.Bytes()...)
	default:
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, e.Payload)
		b = append(b, `","payload_encoding":"base64"`...)
	}
	return append(b, "}\n"...)
}

// appendString appends v as a JSON string, escaped as encoding/json does
// without HTML escaping: quotes, backslashes and control characters
// escaped, invalid UTF-8 replaced by U+FFFD, U+2028 and U+2029 escaped.
func appendString(b []byte, v string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(v); {
		if c := v[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, v[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(v[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, v[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, v[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, v[start:]...)
	return append(b, '"')
}

// Close implements sink.Sink: it flushes what is buffered (nothing, after
// a Write that succeeded) and lets go of the shared output.
func (s *Sink) Close(context.Context) error {
	s.o.mu.Lock()
	err := s.o.w.Flush()
	s.o.mu.Unlock()
	if !s.closed {
		s.closed = true
		s.o.release()
	}
	return err
}

// ToLine renders e (jsonline.From).
func ToLine(e *event.Event) Line { return jsonline.From(e) }
