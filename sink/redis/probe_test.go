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

func probe(t *testing.T, cfg redis.Config) (string, error) {
	t.Helper()
	s, err := redis.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	return s.Probe(context.Background())
}

// Probe (what `outbox-relay check` runs) says whether the server takes the
// sink's XADDs, or what to do; it writes nothing.
func TestProbe(t *testing.T) {
	sinktest.Require(t, "redis-server", sharedServer)
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

	for _, tc := range []struct {
		name    string
		cfg     redis.Config
		found   string // in the result when it passes
		problem string // in the error when it fails; "" passes
		fix     string // in the Problem's fix; "" for an error that is no Problem
	}{
		{"an existing stream key passes", redis.Config{Addr: sharedServer, Stream: stream}, fmt.Sprintf("stream %q exists", stream), "", ""},
		{"a missing key passes: the first XADD creates it", redis.Config{Addr: sharedServer, Stream: missing}, "the first XADD creates it", "", ""},
		{"a template passes", redis.Config{Addr: sharedServer}, "each created by its first XADD", "", ""},
		{"a key of another type fails with how to fix it", redis.Config{Addr: sharedServer, Stream: other}, "", "holds a string, not a stream", "DEL " + other},
		{"a wrong password fails naming the credentials", redis.Config{Addr: withAuth, Password: "wrong"}, "", "WRONGPASS", "redis.username and the password"},
		{"no password where one is required fails", redis.Config{Addr: withAuth}, "", "NOAUTH", "redis.username and the password"},
		{"the right password passes", redis.Config{Addr: withAuth, Password: "right", Stream: "s"}, `stream "s" does not exist yet`, "", ""},
		{"a read-only replica fails", redis.Config{Addr: replica}, "", "read-only replica", "point redis.addr at the primary"},
		{"an unreachable server fails naming it", redis.Config{Addr: closed, Timeout: time.Second}, "", closed, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			found, err := probe(t, tc.cfg)
			sinktest.CheckProbe(t, found, err, tc.found, tc.problem, tc.fix)
		})
	}
	if n, err := admin.Exists(ctx, missing).Result(); err != nil || n != 0 {
		t.Errorf("after the probes, %s exists (%d, %v): a probe must write nothing", missing, n, err)
	}
}
