package rabbitmq_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink/internal/route"
	"github.com/outbox-relay/outbox-relay/sink/rabbitmq"
	"github.com/outbox-relay/outbox-relay/sink/sinktest"
)

const sharedServer = "127.0.0.1:5672"

func admin(t *testing.T) (*amqp.Connection, *amqp.Channel) {
	t.Helper()
	conn, err := amqp.Dial("amqp://guest:guest@" + sharedServer + "/")
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return conn, ch
}

// readQueue gets every message of queue without acknowledging it, so a
// later read sees them again.
// boundQueue declares an exchange and a queue, both named name (unique),
// the queue bound to the exchange for outbox.event.order, deleted when t
// ends; it returns the name and a channel to read the queue with.
func boundQueue(t *testing.T) (name string, ch *amqp.Channel) {
	t.Helper()
	name = "t" + sinktest.Unique()
	conn, ch := admin(t)
	t.Cleanup(func() {
		ch.QueueDelete(name, false, false, false)
		ch.ExchangeDelete(name, false, false)
		conn.Close()
	})
	if err := ch.ExchangeDeclare(name, "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(name, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(name, "outbox.event.order", name, false, nil); err != nil {
		t.Fatal(err)
	}
	return name, ch
}

func readQueue(queue string) func(t *testing.T, n int) []sinktest.Received {
	return func(t *testing.T, n int) []sinktest.Received {
		t.Helper()
		conn, ch := admin(t)
		defer conn.Close()
		var out []sinktest.Received
		for deadline := time.Now().Add(5 * time.Second); ; {
			m, ok, err := ch.Get(queue, false)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				out = append(out, received(m))
				continue
			}
			if len(out) >= n || time.Now().After(deadline) {
				return out
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

func received(m amqp.Delivery) sinktest.Received {
	s := func(k string) string { x, _ := m.Headers[k].(string); return x }
	hs := map[string]string{}
	for k, v := range m.Headers {
		if x, ok := v.(string); ok {
			hs[k] = x
		}
	}
	pos, _ := m.Headers[route.HeaderBinlogPos].(int64)
	if m.MessageId != s(route.HeaderID) || m.Type != s(route.HeaderType) || m.DeliveryMode != amqp.Persistent {
		return sinktest.Received{ID: m.MessageId + " (message_id, type or delivery mode disagree with the headers: " + strconv.Itoa(int(m.DeliveryMode)) + ")"}
	}
	return sinktest.Received{ID: m.MessageId, Type: m.Type, AggregateType: s(route.HeaderAggregateType),
		AggregateID: s(route.HeaderAggregateID), Table: s(route.HeaderTable), GTID: s(route.HeaderGTID),
		BinlogFile: s(route.HeaderBinlogFile), BinlogPos: uint32(pos), Headers: hs,
		TraceParent: s(route.HeaderTraceParent), TraceState: s(route.HeaderTraceState), Payload: m.Body}
}

func TestConformance(t *testing.T) {
	sinktest.RequireServer(t, "rabbitmq")
	sinktest.Run(t, sinktest.Harness{
		Carries: sinktest.All,
		New: func(t *testing.T) *sinktest.Target {
			name, _ := boundQueue(t)
			link := sinktest.StartLink(t, sharedServer)
			s, err := rabbitmq.New(rabbitmq.Config{Addr: link.Addr(), Exchange: name, Timeout: 3 * time.Second}, nil)
			if err != nil {
				t.Fatal(err)
			}
			return &sinktest.Target{Sink: s, Read: readQueue(name), Fault: link,
				Poison: func(e *event.Event) { e.AggregateType = "poison" }}
		},
		Limits: []sinktest.Limit{
			{Name: "a message id over AMQP's 255-byte short string", Exceed: func(e *event.Event) { e.ID += strings.Repeat("x", 256) }},
			{Name: "a type over AMQP's 255-byte short string", Exceed: func(e *event.Event) { e.Type = strings.Repeat("t", 256) }},
			{Name: "a header name over AMQP's 255-byte short string", Exceed: func(e *event.Event) {
				e.Headers = append(e.Headers, event.Header{Key: strings.Repeat("k", 256), Value: "v"})
			}},
			{Name: "headers larger than the broker's frame_max", Exceed: func(e *event.Event) {
				e.Headers = append(e.Headers, event.Header{Key: "big", Value: strings.Repeat("v", 200<<10)})
			}},
		},
	})
}
