package redis_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/sink/redis"
	"github.com/outbox-relay/outbox-relay/sink/sinktest"
)

func newSink(c redis.Config) (sinktest.ProbingSink, error) { return redis.New(c, nil) }

// Probe (what `outbox-relay check` runs) says whether the server takes the
// sink's XADDs, or what to do; it writes nothing.
func TestProbe(t *testing.T) {
	sinktest.RequireServer(t, "redis")
	prefix := "p" + sinktest.Unique()
	admin := goredis.NewClient(&goredis.Options{Addr: sharedServer})
	defer admin.Close()
	ctx := context.Background()
	stream, other, missing := prefix+":stream", prefix+":string", prefix+":missing"
	defer admin.Del(ctx, stream, other, missing)
	if err := admin.XAdd(ctx, &goredis.XAddArgs{Stream: stream, Values: []any{"id", "x"}}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Set(ctx, other, "not a stream", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	withAuth := startRedis(t, "--requirepass", "right")
	primary := startRedis(t)
	_, port, _ := net.SplitHostPort(primary)
	replica := startRedis(t, "--replicaof", "127.0.0.1", port)
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := l.Addr().String()
	l.Close()

	sinktest.RunProbes(t, newSink, []sinktest.ProbeCase[redis.Config]{
		{Name: "an existing stream key passes", Config: redis.Config{Addr: sharedServer, Stream: stream}, Found: fmt.Sprintf("stream %q exists", stream)},
		{Name: "a missing key passes: the first XADD creates it", Config: redis.Config{Addr: sharedServer, Stream: missing}, Found: "the first XADD creates it"},
		{Name: "a template passes", Config: redis.Config{Addr: sharedServer}, Found: "each created by its first XADD"},
		{Name: "a key of another type fails with how to fix it", Config: redis.Config{Addr: sharedServer, Stream: other},
			Problem: "holds a string, not a stream", Fix: "DEL " + other},
		{Name: "a wrong password fails naming the credentials", Config: redis.Config{Addr: withAuth, Password: "wrong"},
			Problem: "WRONGPASS", Fix: "redis.username and the password"},
		{Name: "no password where one is required fails", Config: redis.Config{Addr: withAuth}, Problem: "NOAUTH", Fix: "redis.username and the password"},
		{Name: "the right password passes", Config: redis.Config{Addr: withAuth, Password: "right", Stream: "s"}, Found: `stream "s" does not exist yet`},
		{Name: "a read-only replica fails", Config: redis.Config{Addr: replica}, Problem: "read-only replica", Fix: "point redis.addr at the primary"},
		{Name: "an unreachable server fails naming it", Config: redis.Config{Addr: closed, Timeout: time.Second}, Problem: closed},
	})
	if n, err := admin.Exists(ctx, missing).Result(); err != nil || n != 0 {
		t.Errorf("after the probes, %s exists (%d, %v): a probe must write nothing", missing, n, err)
	}
}
