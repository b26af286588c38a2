package redis_test

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/event/cloudevent"
	"github.com/outbox-relay/outbox-relay/internal/cetest"
	"github.com/outbox-relay/outbox-relay/sink/redis"
	"github.com/outbox-relay/outbox-relay/sink/sinktest"
)

// Redis has no CloudEvents binding: binary mode writes ce_<attribute>
// fields beside the payload (the Kafka binding's names), structured mode a
// JSON document in the payload field. The SDK reads both as the event's
// CloudEvent.
func TestCloudEventsAreReadByTheSDK(t *testing.T) {
	sinktest.Require(t, "redis-server", sharedServer)
	for _, mode := range []string{cloudevent.Binary, cloudevent.Structured} {
		t.Run(mode, func(t *testing.T) {
			key := "t" + sinktest.Unique() + ":ce"
			cfg := redis.Config{Addr: sharedServer, Stream: key, Timeout: 2 * time.Second,
				CloudEvents: cloudevent.Config{Mode: mode, Origin: "mysql://db.example:3306"}}
			cfg.Defaults()
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			s, err := redis.New(cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			admin := goredis.NewClient(&goredis.Options{Addr: sharedServer})
			defer admin.Close()
			defer admin.Del(ctx, key)
			if err := s.Connect(ctx); err != nil {
				t.Fatal(err)
			}
			defer s.Close(ctx)
			evs := sinktest.Events("ce", 40, 3)
			if err := s.Write(ctx, evs); err != nil {
				t.Fatal(err)
			}
			msgs, err := admin.XRange(ctx, key, "-", "+").Result()
			if err != nil || len(msgs) != len(evs) {
				t.Fatalf("read %d entries (%v), want %d", len(msgs), err, len(evs))
			}
			for i, m := range msgs {
				msg := cetest.Message{Prefix: "ce_", Headers: map[string]string{}}
				for k, v := range m.Values {
					msg.Headers[k], _ = v.(string)
				}
				msg.Body = []byte(msg.Headers[redis.FieldPayload])
				msg.ContentType = msg.Headers["content-type"]
				if mode == cloudevent.Binary {
					msg.ContentType = msg.Headers["ce_datacontenttype"]
				}
				cetest.Check(t, evs[i], cetest.Read(t, msg), "mysql://db.example:3306/shop.outbox")
			}
		})
	}
}
