// Package cloudevent maps an outbox event to a CloudEvent (CloudEvents
// 1.0): its attributes for a binding's binary content mode, and its JSON
// envelope for structured mode. It is written once here and used by every
// sink; the tests read what it writes with the CloudEvents Go SDK.
//
// The mapping: id is the event id; source is Config.Source, by default
// DefaultSourcePrefix + "<schema.table>" (a URI reference that names no
// host: a webhook url may be chosen by a table's rows, and the source
// database's address is not theirs to see); type is the event type (the aggregate type when
// the table has no type column); subject is the aggregate id; time is the
// commit time; datacontenttype is Config.DataContentType (default
// application/json); the row's W3C trace context, when it has one, is the
// distributed tracing extension (traceparent, tracestate).
//
// Functions are pure and safe for concurrent use.
package cloudevent

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"mime"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
)

// Modes of Config.Mode.
const (
	Off        = ""
	Binary     = "binary"
	Structured = "structured"
)

// ContentTypeJSON is the media type of a structured CloudEvent in JSON.
const ContentTypeJSON = "application/cloudevents+json"

// Config is a sink's cloudevents section.
type Config struct {
	// Mode is binary (the attributes in the protocol's headers or
	// properties, the payload as the body) or structured (one
	// application/cloudevents+json document holding both). Default ""
	// (off: the sink's own format).
	Mode string `yaml:"mode"`
	// Source is the CloudEvents source of every event, a URI reference.
	// Default "/outbox-relay/<schema.table>" of the event's table: it names
	// no host, and source+id stays unique across outbox tables.
	Source string `yaml:"source"`
	// DataContentType is the payload's media type. Default application/json.
	DataContentType string `yaml:"datacontenttype" derived:"application/json when mode is set"`
}

// DefaultSourcePrefix is the default source's prefix, before the event's
// "schema.table".
const DefaultSourcePrefix = "/outbox-relay/"

// On reports whether the sink speaks CloudEvents.
func (c *Config) On() bool { return c.Mode != Off }

// Defaults sets DataContentType's default when CloudEvents are on.
func (c *Config) Defaults() {
	if c.On() && c.DataContentType == "" {
		c.DataContentType = "application/json"
	}
}

// Validate checks the section, named section in its messages ("kafka.cloudevents").
func (c *Config) Validate(section string) error {
	switch c.Mode {
	case Off, Binary, Structured:
	default:
		return fmt.Errorf("%s.mode: %q: use binary or structured (or leave it out for the sink's own format)", section, c.Mode)
	}
	if c.DataContentType != "" {
		if _, _, err := mime.ParseMediaType(c.DataContentType); err != nil {
			return fmt.Errorf("%s.datacontenttype: %q is not a media type: %v", section, c.DataContentType, err)
		}
	}
	if strings.ContainsAny(c.Source, "\r\n") {
		return fmt.Errorf("%s.source: %q has a line break", section, c.Source)
	}
	return nil
}

// Attribute is one CloudEvents context attribute.
type Attribute struct{ Name, Value string }

// Attributes calls add for every context attribute of e's CloudEvent, in
// a fixed order: specversion, id, source, type, subject, time,
// datacontenttype, then traceparent and tracestate when e has them.
func (c *Config) Attributes(e *event.Event, add func(name, value string)) {
	add("specversion", "1.0")
	add("id", e.ID)
	add("source", c.SourceOf(e))
	add("type", Type(e))
	if e.AggregateID != "" {
		add("subject", e.AggregateID)
	}
	if !e.CommitTime.IsZero() {
		add("time", e.CommitTime.UTC().Format(time.RFC3339))
	}
	add("datacontenttype", c.DataContentType)
	if e.TraceParent != "" {
		add("traceparent", e.TraceParent)
		if e.TraceState != "" {
			add("tracestate", e.TraceState)
		}
	}
}

// SourceOf returns e's source attribute.
func (c *Config) SourceOf(e *event.Event) string {
	if c.Source != "" {
		return c.Source
	}
	return DefaultSourcePrefix + e.Table
}

// Type returns e's type attribute: its type, else its aggregate type, else
// "outbox.event" (the attribute is required).
func Type(e *event.Event) string {
	switch {
	case e.Type != "":
		return e.Type
	case e.AggregateType != "":
		return e.AggregateType
	}
	return "outbox.event"
}

// Structured returns e's CloudEvent as one JSON document (the JSON event
// format): the payload is "data" as it is when it is JSON and the content
// type is JSON, else "data_base64". The bytes of a JSON payload are kept
// as stored.
func (c *Config) Structured(e *event.Event) []byte {
	b := make([]byte, 0, 256+len(e.Payload)+len(e.Payload)/3)
	b = append(b, '{')
	first := true
	c.Attributes(e, func(name, value string) {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendJSONString(b, name)
		b = append(b, ':')
		b = appendJSONString(b, value)
	})
	switch {
	case e.Payload == nil:
	case isJSON(c.DataContentType) && json.Valid(e.Payload):
		b = append(b, `,"data":`...)
		b = append(b, e.Payload...)
	default:
		b = append(b, `,"data_base64":"`...)
		b = base64.StdEncoding.AppendEncode(b, e.Payload)
		b = append(b, '"')
	}
	return append(b, '}')
}

func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always encodes
	return append(b, q...)
}

// isJSON reports whether a media type is JSON (application/json, text/json,
// or any +json).
func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || mt == "text/json" || strings.HasSuffix(mt, "+json")
}

// HeaderValue percent-encodes v for an HTTP header as the HTTP protocol
// binding says (3.1.3.2): a space, '"', '%' and every byte outside
// printable ASCII become %XX of their UTF-8 bytes; every other character
// is kept, so common values (a URI, a type, a time) pass unchanged.
func HeaderValue(v string) string {
	n := 0
	for i := 0; i < len(v); i++ {
		if escape(v[i]) {
			n++
		}
	}
	if n == 0 {
		return v
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(v)+2*n)
	for i := 0; i < len(v); i++ {
		if c := v[i]; escape(c) {
			b = append(b, '%', hex[c>>4], hex[c&15])
		} else {
			b = append(b, c)
		}
	}
	return string(b)
}

func escape(c byte) bool { return c <= ' ' || c >= 0x7f || c == '"' || c == '%' }
