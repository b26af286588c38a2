package kafka

import (
	"bytes"
	"fmt"
	"strings"
	"text/template"
	"text/template/parse"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
)

// fieldTemplate renders a topic or key from an event. The common forms skip
// text/template: a fixed string, and a single field such as {{.AggregateID}}.
type fieldTemplate struct {
	fixed *string
	field func(*event.Event) string
	tmpl  *template.Template
	buf   bytes.Buffer // Write is not concurrent, so one buffer will do
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

// parseFieldTemplate parses text, the value of the config field name.
func parseFieldTemplate(name, text string) (*fieldTemplate, error) {
	if f, ok := singleFields[strings.TrimSpace(text)]; ok {
		return &fieldTemplate{field: f}, nil
	}
	t := template.New(name).Option("missingkey=error").Funcs(template.FuncMap{
		"lower": strings.ToLower,
		"upper": strings.ToUpper,
	})
	t, err := t.Parse(text)
	if err != nil {
		return nil, fmt.Errorf("kafka.%s: %q is not a valid template: %w", name, text, err)
	}
	if nodes := t.Tree.Root.Nodes; len(nodes) == 0 || (len(nodes) == 1 && nodes[0].Type() == parse.NodeText) {
		return &fieldTemplate{fixed: &text}, nil
	}
	ft := &fieldTemplate{tmpl: t}
	if _, err := ft.render(sampleEvent); err != nil {
		return nil, fmt.Errorf("kafka.%s: %q: %w", name, text, err)
	}
	return ft, nil
}

// render returns the template's text for e.
func (t *fieldTemplate) render(e *event.Event) (string, error) {
	switch {
	case t.fixed != nil:
		return *t.fixed, nil
	case t.field != nil:
		return t.field(e), nil
	}
	t.buf.Reset()
	if err := t.tmpl.Execute(&t.buf, templateData{e}); err != nil {
		return "", err
	}
	return t.buf.String(), nil
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
