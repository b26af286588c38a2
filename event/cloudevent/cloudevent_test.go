package cloudevent

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
)

func TestValidateNamesTheFieldAndTheFix(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"off is valid", Config{}, ""},
		{"binary is valid", Config{Mode: Binary, DataContentType: "application/json"}, ""},
		{"an unknown mode names binary and structured", Config{Mode: "json"}, `kafka.cloudevents.mode: "json": use binary or structured`},
		{"a content type that is not a media type", Config{Mode: Binary, DataContentType: "json;;"}, "kafka.cloudevents.datacontenttype"},
		{"a source with a line break", Config{Mode: Binary, Source: "a\nb"}, "kafka.cloudevents.source"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.cfg.Validate("kafka.cloudevents")
			if (err == nil) != (c.want == "") || (err != nil && !strings.Contains(err.Error(), c.want)) {
				t.Fatalf("Validate() = %v, want %q", err, c.want)
			}
		})
	}
}

func TestStructuredKeepsJSONAndEncodesTheRest(t *testing.T) {
	c := Config{Mode: Structured}
	c.Defaults()
	commit := time.Unix(1700000000, 0)
	for _, tc := range []struct {
		name    string
		payload []byte
		key     string
		want    string
	}{
		{"a JSON payload is data, its bytes as stored", []byte(`{"b": 1.0,  "a":[1]}`), "data", `{"b": 1.0,  "a":[1]}`},
		{"bytes that are not JSON are data_base64", []byte{0xff, 0x00}, "data_base64", `"/wA="`},
		{"a NULL payload has no data", nil, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := c.Structured(&event.Event{ID: "e", Table: "shop.outbox", AggregateID: "o1", AggregateType: "order", CommitTime: commit, Payload: tc.payload})
			var m map[string]json.RawMessage
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatalf("not JSON: %s", b)
			}
			if string(m["type"]) != `"order"` || string(m["source"]) != `"/outbox-relay/shop.outbox"` || string(m["time"]) != `"2023-11-14T22:13:20Z"` {
				t.Errorf("attributes of %s", b)
			}
			_, hasData := m["data"]
			_, hasB64 := m["data_base64"]
			if tc.key == "" && (hasData || hasB64) || tc.key != "" && string(m[tc.key]) != tc.want {
				t.Errorf("%s: %s = %s, want %s", b, tc.key, m[tc.key], tc.want)
			}
		})
	}
}

func TestHeaderValueEncodesWhatTheHTTPBindingSays(t *testing.T) {
	for in, want := range map[string]string{
		"mysql://db:3306/shop.outbox": "mysql://db:3306/shop.outbox",
		"a b":                         "a%20b",
		`50% "off"`:                   "50%25%20%22off%22",
		"héllo":                       "h%C3%A9llo",
		"line\nbreak":                 "line%0Abreak",
	} {
		if got := HeaderValue(in); got != want {
			t.Errorf("HeaderValue(%q) = %q, want %q", in, got, want)
		}
	}
}

// The default source is a URI reference of the event's table that names no
// host (a webhook url chosen by a table's rows must not learn the source
// database's address); a configured source is used as it is.
func TestSourceNamesNoHostUnlessConfigured(t *testing.T) {
	e := &event.Event{ID: "e", Table: "shop.outbox"}
	for _, c := range []struct {
		name   string
		source string
		want   string
	}{
		{"the default is the table under /outbox-relay/", "", "/outbox-relay/shop.outbox"},
		{"a configured source is used as it is", "urn:example:billing", "urn:example:billing"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := Config{Mode: Binary, Source: c.source}
			cfg.Defaults()
			if got := cfg.SourceOf(e); got != c.want {
				t.Fatalf("SourceOf = %q, want %q", got, c.want)
			}
			var attr string
			cfg.Attributes(e, func(name, v string) {
				if name == "source" {
					attr = v
				}
			})
			if attr != c.want {
				t.Fatalf("source attribute %q, want %q", attr, c.want)
			}
		})
	}
}
