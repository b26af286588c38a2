package redis_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink/internal/route"
	"github.com/outbox-relay/outbox-relay/sink/redis"
	"github.com/outbox-relay/outbox-relay/sink/sinktest"
)

const sharedServer = "127.0.0.1:6379"

// readStream returns every entry of key, in stream order.
func readStream(addr, key string) func(t *testing.T, n int) []sinktest.Received {
	return func(t *testing.T, n int) []sinktest.Received {
		t.Helper()
		c := goredis.NewClient(&goredis.Options{Addr: addr})
		defer c.Close()
		msgs, err := c.XRange(context.Background(), key, "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		out := make([]sinktest.Received, 0, len(msgs))
		for _, m := range msgs {
			out = append(out, received(m.Values))
		}
		return out
	}
}

func received(v map[string]any) sinktest.Received {
	s := func(k string) string { x, _ := v[k].(string); return x }
	pos, _ := strconv.ParseUint(s(route.HeaderBinlogPos), 10, 32)
	hs := map[string]string{}
	for k := range v {
		if name, ok := strings.CutPrefix(k, redis.HeaderFieldPrefix); ok {
			hs[name] = s(k)
		}
	}
	return sinktest.Received{ID: s(route.HeaderID), Type: s(route.HeaderType), AggregateType: s(route.HeaderAggregateType),
		AggregateID: s(route.HeaderAggregateID), Table: s(route.HeaderTable), GTID: s(route.HeaderGTID),
		BinlogFile: s(route.HeaderBinlogFile), BinlogPos: uint32(pos), Headers: hs,
		TraceParent: s(route.HeaderTraceParent), TraceState: s(route.HeaderTraceState), Payload: []byte(s(redis.FieldPayload))}
}

func TestConformance(t *testing.T) {
	sinktest.RequireServer(t, "redis")
	sinktest.Run(t, sinktest.Harness{
		Carries: sinktest.All,
		New: func(t *testing.T) *sinktest.Target {
			prefix := "t" + sinktest.Unique()
			link := sinktest.StartLink(t, sharedServer)
			s, err := redis.New(redis.Config{Addr: link.Addr(), Stream: prefix + ":outbox:event:{{.AggregateType}}", Writer: "conformance",
				Timeout: 2 * time.Second}, nil)
			if err != nil {
				t.Fatal(err)
			}
			admin := goredis.NewClient(&goredis.Options{Addr: sharedServer})
			t.Cleanup(func() {
				admin.Del(context.Background(), prefix+":outbox:event:order", prefix+":outbox:event:poison")
				admin.Close()
			})
			// A key of another type: XADD to it fails with WRONGTYPE.
			if err := admin.Set(context.Background(), prefix+":outbox:event:poison", "not a stream", time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
			return &sinktest.Target{Sink: s, Read: readStream(sharedServer, prefix+":outbox:event:order"), Fault: link,
				Poison: func(e *event.Event) { e.AggregateType = "poison" }}
		},
		Limits: []sinktest.Limit{{
			Name: "a payload over the server's proto-max-bulk-len",
			// A private server at the smallest proto-max-bulk-len Redis takes,
			// 1 MB (the shared one's is 512 MB).
			New: func(t *testing.T) *sinktest.Target {
				addr := startRedis(t, "--proto-max-bulk-len", "1mb")
				s, err := redis.New(redis.Config{Addr: addr, Stream: "outbox:event:{{.AggregateType}}", Writer: "conformance",
					Timeout: 2 * time.Second}, nil)
				if err != nil {
					t.Fatal(err)
				}
				return &sinktest.Target{Sink: s, Read: readStream(addr, "outbox:event:order")}
			},
			Exceed: func(e *event.Event) { e.Payload = make([]byte, 1<<20+1) },
		}},
	})
}
