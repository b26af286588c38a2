package kafka

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink/internal/route"
)

func TestDefaults(t *testing.T) {
	var c Config
	c.Defaults()
	want := Config{
		Topic: "outbox.event.{{.AggregateType}}", Key: "{{.AggregateID}}",
		BatchSize: 1000, BatchBytes: 1 << 20, Compression: "none",
		ClientID: "outbox-relay", RequestTimeout: 10 * time.Second,
		CreateTopics: CreateTopicsConfig{Partitions: 3, ReplicationFactor: 1},
	}
	if c.Topic != want.Topic || c.Key != want.Key || c.BatchSize != want.BatchSize ||
		c.BatchBytes != want.BatchBytes || c.Linger != want.Linger || c.Compression != want.Compression ||
		c.ClientID != want.ClientID || c.RequestTimeout != want.RequestTimeout || c.CreateTopics != want.CreateTopics {
		t.Errorf("Defaults() = %+v, want %+v", c, want)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*Config)
		wantErr string // "" for valid
	}{
		{"defaults with a broker are valid", func(c *Config) {}, ""},
		{"no brokers is an error", func(c *Config) { c.Brokers = nil }, "kafka.brokers: at least one broker"},
		{"a broker without a port is an error", func(c *Config) { c.Brokers = []string{"kafka1"} }, `kafka.brokers[0]: "kafka1" is not host:port`},
		{"an IPv6 broker is accepted", func(c *Config) { c.Brokers = []string{"[::1]:9092", "kafka-0.kafka.svc:9093"} }, ""},
		{"credentials in a broker are refused", func(c *Config) { c.Brokers = []string{"relay:PW@127.0.0.1"} }, `kafka.brokers[0]: holds an "@"`},
		{"credentials with a port are refused", func(c *Config) { c.Brokers = []string{"relay:PW@127.0.0.1:9092"} }, `kafka.brokers[0]: holds an "@"`},
		{"a scheme is refused", func(c *Config) { c.Brokers = []string{"kafka://k:9092"} }, `kafka.brokers[0]: has a scheme (kafka://)`},
		{"a port that is not a number is refused", func(c *Config) { c.Brokers = []string{"relay:PW"} }, `kafka.brokers[0]: host "relay": the port is not a number`},
		{"a port out of range is refused", func(c *Config) { c.Brokers = []string{"k:70000"} }, `kafka.brokers[0]: host "k": the port`},
		{"too many colons are refused", func(c *Config) { c.Brokers = []string{"relay:PW:k:9092"} }, `kafka.brokers[0]: is not host:port`},
		{"a path is refused", func(c *Config) { c.Brokers = []string{"k/x:9092"} }, `kafka.brokers[0]: the host has a character ('/')`},
		{"an unknown compression names the field and value", func(c *Config) { c.Compression = "zip" },
			`kafka.compression: "zip" is not one of none, gzip, snappy, lz4, zstd`},
		{"every compression codec is accepted", func(c *Config) { c.Compression = "zstd" }, ""},
		{"a fixed topic is accepted", func(c *Config) { c.Topic = "orders" }, ""},
		{"a fixed topic with a space is an error", func(c *Config) { c.Topic = "my orders" }, `kafka.topic: "my orders"`},
		{"a template that does not parse is an error", func(c *Config) { c.Topic = "orders.{{.AggregateType" }, "kafka.topic:"},
		{"a template naming an unknown field is an error", func(c *Config) { c.Topic = "orders.{{.Aggregate}}" }, "kafka.topic:"},
		{"a template with functions and headers is accepted", func(c *Config) { c.Topic = `{{lower .AggregateType}}.{{.Header "tenant"}}` }, ""},
		{"a key template naming an unknown field is an error", func(c *Config) { c.Key = "{{.Nope}}" }, "kafka.key:"},
		{"a zero batch size after defaults is an error", func(c *Config) { c.BatchSize = -1 }, "kafka.batch_size: -1"},
		{"tiny batch bytes are an error", func(c *Config) { c.BatchBytes = 10 }, "kafka.batch_bytes: 10"},
		{"a negative linger is an error", func(c *Config) { c.Linger = -time.Second }, "kafka.linger: -1s"},
		{"an invalid dead-letter topic is an error", func(c *Config) { c.DeadLetterTopic = "dl/q" }, `kafka.dead_letter_topic: "dl/q"`},
		{"zero-less partitions below -1 are an error", func(c *Config) { c.CreateTopics.Partitions = -2 }, "kafka.create_topics.partitions: -2"},
		{"broker-default partitions and replication are accepted", func(c *Config) {
			c.CreateTopics.Partitions, c.CreateTopics.ReplicationFactor = -1, -1
		}, ""},
		{"tls fields without tls.enabled are an error", func(c *Config) { c.TLS.CAFile = "ca.pem" }, "kafka.tls.enabled: false"},
		{"a cert without its key is an error", func(c *Config) { c.TLS = TLSConfig{Enabled: true, CertFile: "c.pem"} }, "kafka.tls: cert_file"},
		{"an unknown sasl mechanism is an error", func(c *Config) { c.SASL.Mechanism = "gssapi" }, `kafka.sasl.mechanism: "gssapi"`},
		{"sasl without a username is an error", func(c *Config) { c.SASL = SASLConfig{Mechanism: "plain", Password: "x"} }, "kafka.sasl.username"},
		{"sasl with two password sources is an error", func(c *Config) {
			c.SASL = SASLConfig{Mechanism: "scram-sha-512", Username: "u", Password: "x", PasswordEnv: "X"}
		}, "kafka.sasl: set exactly one of password, password_file, password_env (2 are set)"},
		{"sasl with a password file is accepted", func(c *Config) {
			c.SASL = SASLConfig{Mechanism: "scram-sha-256", Username: "u", PasswordFile: "/run/secrets/kafka"}
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Config{Brokers: []string{"127.0.0.1:9092"}}
			c.Defaults()
			tt.edit(&c)
			err := c.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("Validate() = nil, want an error containing %q", tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("Validate() = %q, want it to contain %q", err, tt.wantErr)
			case err != nil && strings.Contains(err.Error(), "PW"):
				t.Fatalf("Validate() = %q: it echoes the password", err)
			}
		})
	}
}

func TestSASLConfigLogValueHidesThePassword(t *testing.T) {
	v := SASLConfig{Mechanism: "plain", Username: "u", Password: "hunter2"}.LogValue()
	if strings.Contains(v.String(), "hunter2") {
		t.Fatalf("LogValue() = %s, shows the password", v)
	}
}

func TestTopicTemplate(t *testing.T) {
	e := &event.Event{
		ID: "e1", AggregateType: "Order", AggregateID: "o-17", Type: "order.created", Table: "shop.outbox",
		Headers: []event.Header{{Key: "tenant", Value: "acme"}},
	}
	tests := []struct {
		name, template, want string
	}{
		{"the default routes like Debezium's outbox router", config.DefaultOf(Config{}, "topic"), "outbox.event.Order"},
		{"a fixed topic is used as is", "orders", "orders"},
		{"a single field is rendered", "{{.AggregateID}}", "o-17"},
		{"fields and text combine", "orders.{{.AggregateType}}", "orders.Order"},
		{"lower and upper are available", "{{lower .AggregateType}}.{{upper .Type}}", "order.ORDER.CREATED"},
		{"a header is looked up by name", `{{.Header "tenant"}}.{{.AggregateType}}`, "acme.Order"},
		{"a missing header renders empty", `x{{.Header "nope"}}`, "x"},
		{"source fields are reachable", "{{.Table}}", "shop.outbox"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ft, err := route.Parse("kafka.topic", tt.template)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ft.Render(e)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("render(%q) = %q, want %q", tt.template, got, tt.want)
			}
		})
	}
}

func TestEnvelope(t *testing.T) {
	base := event.Event{
		ID: "e1", AggregateType: "Order", AggregateID: "o-1", Type: "order.created", Table: "shop.outbox",
		CommitTime: time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC),
		Headers:    []event.Header{{Key: "tenant", Value: "a<b"}, {Key: "trace", Value: "t1"}},
		Source:     event.Source{GTID: "u:5", File: "bin.000002", Pos: 1234},
	}
	tests := []struct {
		name        string
		payload     []byte
		wantRaw     bool // payload embedded byte for byte
		wantPayload string
	}{
		{"a JSON object is embedded byte for byte", []byte(`{ "total" : 1.0, "note": "<b>" }`), true, ""},
		{"a JSON string is embedded byte for byte", []byte(`"hello"`), true, ""},
		{"bytes that are not JSON are base64", []byte{0xff, 0x00, 'x'}, false, base64.StdEncoding.EncodeToString([]byte{0xff, 0x00, 'x'})},
		{"an empty payload is base64", []byte{}, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := base
			e.Payload = tt.payload
			got := envelope(&e)
			if !json.Valid(got) {
				t.Fatalf("envelope is not valid JSON: %s", got)
			}
			var doc struct {
				ID, Type, Timestamp, Table string
				AggregateID                string `json:"aggregate_id"`
				Source                     struct {
					GTID, File string
					Pos        uint32
				}
				Headers         map[string]string
				PayloadEncoding string          `json:"payload_encoding"`
				Payload         json.RawMessage `json:"payload"`
			}
			if err := json.Unmarshal(got, &doc); err != nil {
				t.Fatal(err)
			}
			if doc.ID != "e1" || doc.AggregateID != "o-1" || doc.Timestamp != "2024-05-06T07:08:09Z" ||
				doc.Source.GTID != "u:5" || doc.Source.File != "bin.000002" || doc.Source.Pos != 1234 ||
				doc.Headers["tenant"] != "a<b" || doc.Headers["trace"] != "t1" {
				t.Errorf("envelope metadata wrong: %s", got)
			}
			if !bytes.Contains(got, []byte(`"aggregate_type":"Order"`)) {
				t.Errorf("envelope lacks aggregate_type: %s", got)
			}
			if tt.wantRaw {
				if !bytes.HasSuffix(got, append(append([]byte(`"payload":`), tt.payload...), '}')) {
					t.Errorf("payload not embedded byte for byte: %s", got)
				}
				if doc.PayloadEncoding != "" {
					t.Errorf("payload_encoding = %q, want none", doc.PayloadEncoding)
				}
				return
			}
			var s string
			if err := json.Unmarshal(doc.Payload, &s); err != nil || s != tt.wantPayload || doc.PayloadEncoding != "base64" {
				t.Errorf("payload = %s (encoding %q), want base64 %q", doc.Payload, doc.PayloadEncoding, tt.wantPayload)
			}
		})
	}
}

func TestHeaders(t *testing.T) {
	e := &event.Event{
		ID: "e1", AggregateType: "Order", Type: "order.created", Table: "shop.outbox",
		Headers: []event.Header{{Key: "tenant", Value: "acme"}},
		Source:  event.Source{GTID: "u:5", File: "bin.000002", Pos: 1234},
	}
	var got []string
	for _, h := range headers(e) {
		got = append(got, h.Key+"="+string(h.Value))
	}
	want := "id=e1 type=order.created aggregate_type=Order gtid=u:5 binlog_file=bin.000002 binlog_pos=1234 table=shop.outbox tenant=acme"
	if strings.Join(got, " ") != want {
		t.Errorf("headers = %q, want %q", strings.Join(got, " "), want)
	}
}

// A message's header values are capped slices (appending to one cannot
// overwrite the next), never nil; the relay_sink value is the sink's own.
func TestHeaderValuesAreCapped(t *testing.T) {
	e := &event.Event{
		ID: "e1", AggregateType: "Order", Type: "order.created", Table: "shop.outbox",
		TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", TraceState: "k=v",
		Headers: []event.Header{{Key: "tenant", Value: "acme"}, {Key: "empty"}},
		Source:  event.Source{GTID: "u:5", File: "bin.000002", Pos: 1234},
	}
	hs := headers(e)
	for i, h := range hs {
		if len(h.Value) != cap(h.Value) {
			t.Errorf("header %s: value of length %d has capacity %d; appending to it would overwrite the next", h.Key, len(h.Value), cap(h.Value))
		}
		if h.Value == nil {
			t.Errorf("header %d (%s) has a nil value, want an empty one", i, h.Key)
		}
	}
	s := &Sink{cfg: Config{Writer: "orders"}, writer: []byte("orders")}
	if a := s.withWriter(headers(e), 3); string(a[7].Value) != "orders" || string(a[8].Value) != "3" {
		t.Errorf("relay_sink %q, relay_partitions %q: want orders, 3", a[7].Value, a[8].Value)
	}
}

// A batch's records are built without an allocation per event: their keys
// and headers are written, in wire form, into one buffer for the batch.
func TestPrepareAllocatesPerBatchNotPerEvent(t *testing.T) {
	c := startCluster(t, kfake.SeedTopics(6, "t"))
	s := newSink(t, Config{Brokers: c.ListenAddrs(), Topic: "t", Writer: "w"})
	ctx := context.Background()
	evs := makeEvents(200, 50)
	ack := func(int, error) {}
	s.prepare(ctx, evs, ack, false) // the topic looked up
	if n := testing.AllocsPerRun(20, func() { s.prepare(ctx, evs, ack, false) }); n > 6 {
		t.Errorf("prepare of %d events allocates %v times, want at most 6 (the batch's queue, entries and buffer)", len(evs), n)
	}
}

// recordOf returns m as the sink's record (its headers encoded in a buffer of their own).
func recordOf(m kafkago.Message) wireRecord {
	var b []byte
	for _, h := range m.Headers {
		b = appendHeaderBytes(b, h.Key, h.Value)
	}
	return wireRecord{topic: m.Topic, key: m.Key, value: m.Value, time: m.Time, headers: b, nh: len(m.Headers)}
}

func TestMessageSizeCountsEveryPart(t *testing.T) {
	small := kafkago.Message{Key: []byte("k"), Value: []byte("v")}
	big := kafkago.Message{Key: []byte("k"), Value: bytes.Repeat([]byte("v"), 300),
		Headers: []kafkago.Header{{Key: "id", Value: []byte("e1")}}}
	if r := recordOf(small); r.size() != 4+1+1+4+1+4+1+8+1 {
		t.Errorf("size of small = %d, want %d", r.size(), 4+1+1+4+1+4+1+8+1)
	}
	if r := recordOf(big); r.size() != 4+1+1+4+1+4+300+8+1+1+2+1+2 {
		t.Errorf("size of big = %d, want %d", r.size(), 4+1+1+4+1+4+300+8+1+1+2+1+2)
	}
}

// A SQL NULL payload is an empty value, not a null one: on a compacted topic
// a null value is a tombstone that would delete the aggregate's key. In an
// envelope it is null with payload_encoding sql_null.
func TestANullPayloadIsNeverATombstone(t *testing.T) {
	e := &event.Event{ID: "e1", AggregateType: "order", AggregateID: "o-1", Payload: nil}
	cfg := Config{Brokers: []string{"127.0.0.1:1"}}
	cfg.Defaults()
	s, err := New(cfg, testLogger(t)) // never connected: message needs no broker
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.message(e)
	if err != nil {
		t.Fatal(err)
	}
	if m.Value == nil || len(m.Value) != 0 {
		t.Fatalf("value %#v, want empty and non-nil", m.Value)
	}
	env := string(envelope(e))
	if !strings.Contains(env, `"payload_encoding":"sql_null","payload":null}`) {
		t.Fatalf("envelope %s lacks the null payload", env)
	}
}
