package redis_test

import (
	"context"
	"fmt"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/sink/sinktest"
	"github.com/outbox-relay/outbox-relay/sink/sinktest/audittest"
)

// An audit of a healthy Redis Streams run reports nothing; deleting entries
// (XDEL) makes it report exactly their ids.
func TestAuditRedisFindsExactlyTheDeletedEntries(t *testing.T) {
	sinktest.RequireServer(t, "redis")
	prefix := "a" + sinktest.Unique()
	cl := goredis.NewClient(&goredis.Options{Addr: sharedServer})
	defer cl.Close()
	key := prefix + ":outbox:event:order"
	defer cl.Del(context.Background(), key)
	audittest.Stream(t, fmt.Sprintf(`
  - name: redis
    type: redis
    redis: {addr: %q, stream: "%s:outbox:event:{{.AggregateType}}"}
`, sharedServer, prefix), nil, func() ([]string, func(int)) {
		ctx := context.Background()
		msgs, err := cl.XRange(ctx, key, "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]string, len(msgs))
		for i, m := range msgs {
			ids[i], _ = m.Values["id"].(string)
		}
		return ids, func(i int) {
			if err := cl.XDel(ctx, key, msgs[i].ID).Err(); err != nil {
				t.Fatal(err)
			}
		}
	})
}
