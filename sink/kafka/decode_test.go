package kafka

import (
	"reflect"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/event"
)

func TestEventOfReadsBackWhatTheSinkProduces(t *testing.T) {
	commit := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	base := event.Event{ID: "e1", Type: "order.created", AggregateType: "order", AggregateID: "o-7",
		Table: "shop.outbox", CommitTime: commit, Source: event.Source{GTID: "0-1-42", File: "bin.000003", Pos: 1234},
		Headers: []event.Header{{Key: "tenant", Value: "acme"}, {Key: "trace", Value: "t1"}}}
	for _, tc := range []struct {
		name     string
		envelope bool
		writer   string
		payload  []byte
	}{
		{"a JSON payload, plain value", false, "", []byte(`{"total":12}`)},
		{"a plain value with the sink's writer headers", false, "kafka-orders", []byte(`{"total":12}`)},
		{"a JSON payload in the envelope", true, "kafka-orders", []byte(`{"total":12}`)},
		{"a binary payload in the envelope", true, "", []byte{0, 1, 2, 0xff}},
		{"a SQL NULL payload in the envelope", true, "", nil},
		{"an empty payload, plain value", false, "", []byte{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(Config{Brokers: []string{"127.0.0.1:1"}, Topic: "orders", Envelope: tc.envelope, Writer: tc.writer}, nil)
			if err != nil {
				t.Fatal(err)
			}
			e := base
			e.Payload = tc.payload
			m, err := s.message(&e)
			if err != nil {
				t.Fatal(err)
			}
			m.Headers = s.withWriter(m.Headers, 3)
			got, err := EventOf(m, tc.envelope)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*got, e) {
				t.Fatalf("read back\n%+v\nproduced\n%+v", *got, e)
			}
		})
	}
}

func TestEventOfRefusesAMessageNotOfTheSink(t *testing.T) {
	m := kafkago.Message{Topic: "orders", Key: []byte("k"), Value: []byte("{}"),
		Headers: []kafkago.Header{{Key: "id", Value: []byte("x")}, {Key: "tenant", Value: []byte("acme")}}}
	if _, err := EventOf(m, false); err == nil {
		t.Fatal("a message with other headers was read back as an event")
	}
}
