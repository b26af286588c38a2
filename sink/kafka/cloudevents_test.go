package kafka_test

import (
	"context"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/event/cloudevent"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/kafka"
	"github.com/outbox-relay/outbox-relay/sink/sinktest/cetest"
)

// In both modes the CloudEvents SDK reads every record (consumed with
// kafka-go) as the event's CloudEvent: id, source, type, subject, time,
// datacontenttype, data and the trace context extension.
func TestCloudEventsAreReadByTheSDK(t *testing.T) {
	cetest.EachMode(t, func(t *testing.T, ce cloudevent.Config) (sink.Sink, func(int) cetest.Message) {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "outbox.event.order"))
		if err != nil {
			t.Fatalf("start kfake: %v", err)
		}
		t.Cleanup(c.Close)
		cfg := kafka.Config{Brokers: c.ListenAddrs(), RequestTimeout: 2 * time.Second, CloudEvents: ce}
		cfg.Defaults()
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		s, err := kafka.New(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: c.ListenAddrs(), Topic: "outbox.event.order", Partition: 0, MaxWait: 100 * time.Millisecond})
		t.Cleanup(func() { r.Close() })
		return s, func(i int) cetest.Message {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			m, err := r.ReadMessage(ctx)
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
			return msg
		}
	})
}
