package kafka_test

import (
	"context"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/event/cloudevent"
	"github.com/outbox-relay/outbox-relay/internal/cetest"
	"github.com/outbox-relay/outbox-relay/sink/kafka"
	"github.com/outbox-relay/outbox-relay/sink/sinktest"
)

// In both modes the CloudEvents SDK reads every record (consumed with
// kafka-go) as the event's CloudEvent: id, source, type, subject, time,
// datacontenttype, data and the trace context extension.
func TestCloudEventsAreReadByTheSDK(t *testing.T) {
	for _, mode := range []string{cloudevent.Binary, cloudevent.Structured} {
		t.Run(mode, func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "outbox.event.order"))
			if err != nil {
				t.Fatalf("start kfake: %v", err)
			}
			t.Cleanup(c.Close)
			cfg := kafka.Config{Brokers: c.ListenAddrs(), RequestTimeout: 2 * time.Second,
				CloudEvents: cloudevent.Config{Mode: mode, Origin: "mysql://db.example:3306"}}
			cfg.Defaults()
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			s, err := kafka.New(cfg, nil)
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
			r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: c.ListenAddrs(), Topic: "outbox.event.order", Partition: 0, MaxWait: 100 * time.Millisecond})
			defer r.Close()
			rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			for i, e := range evs {
				m, err := r.ReadMessage(rctx)
				if err != nil {
					t.Fatalf("read record %d: %v", i, err)
				}
				msg := cetest.Message{Prefix: "ce_", Headers: map[string]string{}, Body: m.Value}
				for _, h := range m.Headers {
					if h.Key == "content-type" {
						msg.ContentType = string(h.Value)
					}
					msg.Headers[h.Key] = string(h.Value)
				}
				cetest.Check(t, e, cetest.Read(t, msg), "mysql://db.example:3306/shop.outbox")
			}
		})
	}
}
