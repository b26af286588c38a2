package redis_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/redis"
	"github.com/outbox-relay/outbox-relay/sink/sinktest"
)

// startRedis runs a private redis-server with extra arguments on a free
// port until the test ends.
func startRedis(t *testing.T, args ...string) string {
	t.Helper()
	return sinktest.StartServer(t, "redis-server", func(port int) []string {
		return append([]string{"--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", t.TempDir()}, args...)
	})
}

// A Redis at maxmemory with noeviction refuses XADD with OOM: the events
// fail retriably (they are delivered once there is room), with a message
// that says what to do.
func TestOutOfMemoryIsRetriableAndSaysWhatToDo(t *testing.T) {
	addr := startRedis(t, "--maxmemory", "1mb", "--maxmemory-policy", "noeviction")
	s, err := redis.New(redis.Config{Addr: addr, Stream: "s"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	var werr error
	for i := 0; i < 100 && werr == nil; i++ {
		evs := sinktest.Events(fmt.Sprintf("oom%d", i), 50, 5)
		for _, e := range evs {
			e.Payload = []byte(strings.Repeat("x", 4000))
		}
		werr = s.Write(ctx, evs)
	}
	if werr == nil {
		t.Fatal("5 MB into a 1 MB redis: no failure")
	}
	e := sink.ErrorFor(werr, 0)
	if e == nil {
		for i := range 50 {
			if e = sink.ErrorFor(werr, i); e != nil {
				break
			}
		}
	}
	if sink.IsPermanent(e) || !strings.Contains(e.Error(), "OOM") || !strings.Contains(e.Error(), "max_len") {
		t.Fatalf("error %v: want a retriable OOM that names redis.max_len", e)
	}
}
