package rabbitmq_test

import (
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/event/cloudevent"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/rabbitmq"
	"github.com/outbox-relay/outbox-relay/sink/sinktest"
	"github.com/outbox-relay/outbox-relay/sink/sinktest/cetest"
)

// AMQP protocol binding: binary mode puts the attributes in application
// properties named cloudEvents:<attribute> and datacontenttype in
// content-type; structured mode a JSON document in the body. The SDK reads
// both as the event's CloudEvent.
func TestCloudEventsAreReadByTheSDK(t *testing.T) {
	sinktest.RequireServer(t, "rabbitmq")
	cetest.EachMode(t, func(t *testing.T, ce cloudevent.Config) (sink.Sink, func(int) cetest.Message) {
		name, ch := boundQueue(t)
		cfg := rabbitmq.Config{Addr: sharedServer, Exchange: name, Timeout: 3 * time.Second, CloudEvents: ce}
		cfg.Defaults()
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		s, err := rabbitmq.New(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s, func(i int) cetest.Message {
			m, ok, err := ch.Get(name, true)
			if err != nil || !ok {
				t.Fatalf("get message %d: %v (found %v)", i, err, ok)
			}
			msg := cetest.Message{Prefix: "cloudEvents:", Headers: map[string]string{}, ContentType: m.ContentType, Body: m.Body}
			for k, v := range m.Headers {
				if s, ok := v.(string); ok {
					msg.Headers[k] = s
				}
			}
			return msg
		}
	})
}
