package rabbitmq_test

import (
	"context"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/event/cloudevent"
	"github.com/outbox-relay/outbox-relay/internal/cetest"
	"github.com/outbox-relay/outbox-relay/sink/rabbitmq"
	"github.com/outbox-relay/outbox-relay/sink/sinktest"
)

// AMQP protocol binding: binary mode puts the attributes in application
// properties named cloudEvents:<attribute> and datacontenttype in
// content-type; structured mode a JSON document in the body. The SDK reads
// both as the event's CloudEvent.
func TestCloudEventsAreReadByTheSDK(t *testing.T) {
	sinktest.Require(t, "rabbitmq", sharedServer)
	for _, mode := range []string{cloudevent.Binary, cloudevent.Structured} {
		t.Run(mode, func(t *testing.T) {
			name := "t" + sinktest.Unique()
			conn, ch := admin(t)
			defer func() {
				ch.QueueDelete(name, false, false, false)
				ch.ExchangeDelete(name, false, false)
				conn.Close()
			}()
			if err := ch.ExchangeDeclare(name, "topic", true, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := ch.QueueDeclare(name, true, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
			if err := ch.QueueBind(name, "outbox.event.order", name, false, nil); err != nil {
				t.Fatal(err)
			}
			cfg := rabbitmq.Config{Addr: sharedServer, Exchange: name, Timeout: 3 * time.Second,
				CloudEvents: cloudevent.Config{Mode: mode, Origin: "mysql://db.example:3306"}}
			cfg.Defaults()
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			s, err := rabbitmq.New(cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if err := s.Connect(ctx); err != nil {
				t.Fatal(err)
			}
			defer s.Close(ctx)
			evs := sinktest.Events("ce", 40, 3)
			if err := s.Write(ctx, evs); err != nil {
				t.Fatal(err)
			}
			for i, e := range evs {
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
				cetest.Check(t, e, cetest.Read(t, msg), "mysql://db.example:3306/shop.outbox")
			}
		})
	}
}
