package redis_test

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/event/cloudevent"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/redis"
	"github.com/outbox-relay/outbox-relay/sink/sinktest"
	"github.com/outbox-relay/outbox-relay/sink/sinktest/cetest"
)

// Redis has no CloudEvents binding: binary mode writes ce_<attribute>
// fields beside the payload (the Kafka binding's names), structured mode a
// JSON document in the payload field. The SDK reads both as the event's
// CloudEvent.
func TestCloudEventsAreReadByTheSDK(t *testing.T) {
	sinktest.RequireServer(t, "redis")
	cetest.EachMode(t, func(t *testing.T, ce cloudevent.Config) (sink.Sink, func(int) cetest.Message) {
		key := "t" + sinktest.Unique() + ":ce"
		cfg := redis.Config{Addr: sharedServer, Stream: key, Timeout: 2 * time.Second, CloudEvents: ce}
		cfg.Defaults()
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		s, err := redis.New(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		admin := goredis.NewClient(&goredis.Options{Addr: sharedServer})
		t.Cleanup(func() { admin.Del(context.Background(), key); admin.Close() })
		var msgs []goredis.XMessage
		return s, func(i int) cetest.Message {
			if msgs == nil {
				var err error
				if msgs, err = admin.XRange(context.Background(), key, "-", "+").Result(); err != nil {
					t.Fatal(err)
				}
			}
			if len(msgs) != cetest.Events {
				t.Fatalf("the stream holds %d entries, want %d", len(msgs), cetest.Events)
			}
			msg := cetest.Message{Prefix: "ce_", Headers: map[string]string{}}
			for k, v := range msgs[i].Values {
				msg.Headers[k], _ = v.(string)
			}
			msg.Body = []byte(msg.Headers[redis.FieldPayload])
			msg.ContentType = msg.Headers["content-type"]
			if ce.Mode == cloudevent.Binary {
				msg.ContentType = msg.Headers["ce_datacontenttype"]
			}
			return msg
		}
	})
}
