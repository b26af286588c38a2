// Package route renders the name a message goes to (a subject, a stream key,
// a routing key) from an event, and lists the metadata headers every
// message carries, for every sink that routes (Kafka, NATS, Redis, RabbitMQ).
// A Template is safe for concurrent use: a sink renders while it writes,
// and its read-back renders again to check what it reads.
package route

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"text/template"
	"text/template/parse"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
)

// Template renders a topic or key from an event. The common forms skip
// text/template: a fixed string, and a single field such as {{.AggregateID}}.
type Template struct {
	fixed *string
	field func(*event.Event) string
	tmpl  *template.Template
	bufs  sync.Pool // of *bytes.Buffer, for tmpl's output
}

var singleFields = map[string]func(*event.Event) string{
	"{{.ID}}":            func(e *event.Event) string { return e.ID },
	"{{.AggregateType}}": func(e *event.Event) string { return e.AggregateType },
	"{{.AggregateID}}":   func(e *event.Event) string { return e.AggregateID },
	"{{.Type}}":          func(e *event.Event) string { return e.Type },
	"{{.Table}}":         func(e *event.Event) string { return e.Table },
}

// sampleEvent checks at configuration time that a template only names
// fields an event has.
var sampleEvent = &event.Event{
	ID: "id", AggregateType: "type", AggregateID: "aggregate", Type: "type", Table: "db.outbox",
	CommitTime: time.Unix(0, 0), Headers: []event.Header{{Key: "k", Value: "v"}},
	Payload: []byte("{}"),
}

// Parse parses text, the value of the config field name.
func Parse(name, text string) (*Template, error) {
	if f, ok := singleFields[strings.TrimSpace(text)]; ok {
		return &Template{field: f}, nil
	}
	t := template.New(name).Option("missingkey=error").Funcs(template.FuncMap{
		"lower": strings.ToLower,
		"upper": strings.ToUpper,
	})
	t, err := t.Parse(text)
	if err != nil {
		return nil, fmt.Errorf("%s: %q is not a valid template: %w", name, text, err)
	}
	if nodes := t.Tree.Root.Nodes; len(nodes) == 0 || (len(nodes) == 1 && nodes[0].Type() == parse.NodeText) {
		return &Template{fixed: &text}, nil
	}
	ft := &Template{tmpl: t}
	if _, err := ft.Render(sampleEvent); err != nil {
		return nil, fmt.Errorf("%s: %q: %w", name, text, err)
	}
	return ft, nil
}

// Fixed returns the template's text when it names no field.
func (t *Template) Fixed() (string, bool) {
	if t.fixed != nil {
		return *t.fixed, true
	}
	return "", false
}

// Skeleton returns the template's fixed text around its fields: every name
// the template renders starts with the first piece, ends with the last, and
// holds the others in order between them. A fixed template is one piece; a
// template with {{if}}, {{range}}, {{with}} or {{template}}, whose text
// depends on the event, is two empty pieces (every name).
func (t *Template) Skeleton() []string {
	switch {
	case t.fixed != nil:
		return []string{*t.fixed}
	case t.field != nil:
		return []string{"", ""}
	}
	pieces := []string{""}
	for _, n := range t.tmpl.Tree.Root.Nodes {
		switch n := n.(type) {
		case *parse.TextNode:
			pieces[len(pieces)-1] += string(n.Text)
		case *parse.ActionNode:
			if len(n.Pipe.Decl) > 0 { // {{$x := ...}} renders nothing
				continue
			}
			pieces = append(pieces, "")
		case *parse.CommentNode:
		default:
			return []string{"", ""}
		}
	}
	return pieces
}

// Match reports whether name has skeleton's shape: the template could have
// rendered it.
func Match(skeleton []string, name string) bool {
	if len(skeleton) == 1 {
		return name == skeleton[0]
	}
	first, last := skeleton[0], skeleton[len(skeleton)-1]
	if len(name) < len(first)+len(last) || !strings.HasPrefix(name, first) || !strings.HasSuffix(name, last) {
		return false
	}
	mid := name[len(first) : len(name)-len(last)]
	for _, p := range skeleton[1 : len(skeleton)-1] {
		i := strings.Index(mid, p)
		if i < 0 {
			return false
		}
		mid = mid[i+len(p):]
	}
	return true
}

// Glob returns skeleton as a glob pattern (Redis SCAN MATCH): its pieces,
// with the glob characters escaped, joined by "*".
func Glob(skeleton []string) string {
	esc := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`)
	out := make([]string, len(skeleton))
	for i, p := range skeleton {
		out[i] = esc.Replace(p)
	}
	return strings.Join(out, "*")
}

// Render returns the template's text for e.
func (t *Template) Render(e *event.Event) (string, error) {
	switch {
	case t.fixed != nil:
		return *t.fixed, nil
	case t.field != nil:
		return t.field(e), nil
	}
	b, _ := t.bufs.Get().(*bytes.Buffer)
	if b == nil {
		b = new(bytes.Buffer)
	}
	defer t.bufs.Put(b)
	b.Reset()
	if err := t.tmpl.Execute(b, templateData{e}); err != nil {
		return "", err
	}
	return b.String(), nil
}

// templateData is what a template sees: the event's fields, and Header.
type templateData struct{ *event.Event }

// Header returns the value of the event's header k, or "".
func (d templateData) Header(k string) string {
	for _, h := range d.Headers {
		if h.Key == k {
			return h.Value
		}
	}
	return ""
}

// Header names set on every message, before the event's extra columns: the
// names the Kafka sink uses.
const (
	HeaderID            = "id"
	HeaderType          = "type"
	HeaderAggregateType = "aggregate_type"
	HeaderAggregateID   = "aggregate_id"
	HeaderGTID          = "gtid"
	HeaderBinlogFile    = "binlog_file"
	HeaderBinlogPos     = "binlog_pos"
	HeaderTable         = "table"
	// The W3C trace context of the row (event.TraceParent), set only when
	// the row has one: the names OpenTelemetry's propagators read.
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
)

// Headers calls add for each metadata header of e (Metadata), then for
// each of its extra columns, in config order.
func Headers(e *event.Event, add func(k, v string)) {
	Metadata(e, add)
	for _, h := range e.Headers {
		add(h.Key, h.Value)
	}
}

// Metadata calls add for each metadata header of e, then for its trace
// context (traceparent, tracestate) when it has one.
func Metadata(e *event.Event, add func(k, v string)) {
	add(HeaderID, e.ID)
	add(HeaderType, e.Type)
	add(HeaderAggregateType, e.AggregateType)
	add(HeaderAggregateID, e.AggregateID)
	add(HeaderGTID, e.Source.GTID)
	add(HeaderBinlogFile, e.Source.File)
	add(HeaderBinlogPos, strconv.FormatUint(uint64(e.Source.Pos), 10))
	add(HeaderTable, e.Table)
	if e.TraceParent != "" {
		add(HeaderTraceParent, e.TraceParent)
		if e.TraceState != "" {
			add(HeaderTraceState, e.TraceState)
		}
	}
}
