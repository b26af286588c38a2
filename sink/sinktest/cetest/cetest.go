// Package cetest reads a sink's CloudEvents output with the CloudEvents Go
// SDK, as a consumer would, and compares it with the event sent. For
// protocols whose SDK binding is a module of its own (Kafka, AMQP, NATS) it
// hands the message's headers to the SDK's binding machinery with the
// binding's prefix, as those bindings do; HTTP requests are read by the
// SDK's HTTP binding itself (in the webhook tests). It is a sink test kit,
// beside the conformance suite (package sinktest) it builds on; it lives
// under sink/ so that internal/ imports no package of the sinks.
package cetest

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/binding/spec"

	"github.com/outbox-relay/outbox-relay/event"
)

// Message is a protocol message: its headers (or application properties),
// its content type and its body.
type Message struct {
	// Prefix of the CloudEvents attribute headers: "ce_" (Kafka), "ce-"
	// (HTTP, NATS), "cloudEvents:" (AMQP).
	Prefix      string
	Headers     map[string]string
	ContentType string
	Body        []byte
}

type message struct{ Message }

func (m *message) ReadEncoding() binding.Encoding {
	switch {
	case format.Lookup(m.ContentType) != nil && strings.HasPrefix(m.ContentType, "application/cloudevents"):
		return binding.EncodingStructured
	case m.Headers[m.Prefix+"specversion"] != "":
		return binding.EncodingBinary
	}
	return binding.EncodingUnknown
}

func (m *message) ReadStructured(ctx context.Context, w binding.StructuredWriter) error {
	if m.ReadEncoding() != binding.EncodingStructured {
		return binding.ErrNotStructured
	}
	return w.SetStructuredEvent(ctx, format.Lookup(m.ContentType), bytes.NewReader(m.Body))
}

func (m *message) ReadBinary(ctx context.Context, w binding.BinaryWriter) error {
	if m.ReadEncoding() != binding.EncodingBinary {
		return binding.ErrNotBinary
	}
	sv := spec.WithPrefix(m.Prefix).Version(m.Headers[m.Prefix+"specversion"])
	for k, v := range m.Headers {
		if a := sv.Attribute(k); a != nil {
			if err := w.SetAttribute(a, v); err != nil {
				return err
			}
		} else if name, ok := strings.CutPrefix(k, m.Prefix); ok {
			if err := w.SetExtension(name, v); err != nil {
				return err
			}
		}
	}
	if m.ContentType != "" {
		if err := w.SetAttribute(sv.AttributeFromKind(spec.DataContentType), m.ContentType); err != nil {
			return err
		}
	}
	return w.SetData(bytes.NewReader(m.Body))
}

func (m *message) Finish(error) error { return nil }

// Read decodes m with the SDK.
func Read(t *testing.T, m Message) *cloudevents.Event {
	t.Helper()
	ce, err := binding.ToEvent(context.Background(), &message{m})
	if err != nil {
		t.Fatalf("the CloudEvents SDK cannot read the message (%s, content type %q): %v", m.Prefix, m.ContentType, err)
	}
	return ce
}

// Check fails t unless ce is e's CloudEvent with source.
func Check(t *testing.T, e *event.Event, ce *cloudevents.Event, source string) {
	t.Helper()
	if err := ce.Validate(); err != nil {
		t.Fatalf("event %s: the SDK finds the CloudEvent invalid: %v", e.ID, err)
	}
	typ := e.Type
	if typ == "" {
		typ = e.AggregateType
	}
	if ce.ID() != e.ID || ce.Source() != source || ce.Type() != typ || ce.Subject() != e.AggregateID ||
		!ce.Time().Equal(e.CommitTime) || ce.SpecVersion() != "1.0" || ce.DataContentType() != "application/json" {
		t.Fatalf("event %s: CloudEvent id %q source %q type %q subject %q time %s spec %s content type %q; want %q %q %q %q %s 1.0 application/json",
			e.ID, ce.ID(), ce.Source(), ce.Type(), ce.Subject(), ce.Time(), ce.SpecVersion(), ce.DataContentType(),
			e.ID, source, typ, e.AggregateID, e.CommitTime)
	}
	data := ce.Data()
	want := e.Payload
	if json.Valid(e.Payload) {
		// Structured mode embeds JSON: the SDK hands back its bytes.
		if !jsonEqual(data, want) {
			t.Fatalf("event %s: data %q, want %q", e.ID, data, want)
		}
	} else if !bytes.Equal(data, want) {
		t.Fatalf("event %s: data %q, want the payload bytes %q", e.ID, data, want)
	}
	tp, _ := ce.Extensions()["traceparent"].(string)
	if tp != e.TraceParent {
		t.Fatalf("event %s: traceparent extension %q, want %q", e.ID, tp, e.TraceParent)
	}
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

func (m *message) version() spec.Version {
	return spec.WithPrefix(m.Prefix).Version(m.Headers[m.Prefix+"specversion"])
}

// GetAttribute implements binding.MessageMetadataReader.
func (m *message) GetAttribute(k spec.Kind) (spec.Attribute, any) {
	sv := m.version()
	if sv == nil {
		return nil, nil
	}
	a := sv.AttributeFromKind(k)
	if a == nil {
		return nil, nil
	}
	if k == spec.DataContentType && m.ContentType != "" {
		return a, m.ContentType
	}
	if v, ok := m.Headers[a.PrefixedName()]; ok {
		return a, v
	}
	return a, nil
}

// GetExtension implements binding.MessageMetadataReader.
func (m *message) GetExtension(name string) any {
	if v, ok := m.Headers[m.Prefix+name]; ok {
		return v
	}
	return nil
}
