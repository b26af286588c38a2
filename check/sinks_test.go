package check

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/sink/sinktest"
)

// With Options.Sinks (`outbox-relay check`), each NATS, Redis and RabbitMQ
// sink is probed, one sinks line each: a PASS saying what was found, or a
// FAIL with the fix; other sink types are not probed. The lines come even
// when the source cannot be reached, and not at all without the option (the
// startup checks).
func TestSinksAreProbed(t *testing.T) {
	sinktest.Require(t, "nats-server (JetStream)", "127.0.0.1:4222")
	sinktest.Require(t, "redis-server", "127.0.0.1:6379")
	sinktest.Require(t, "rabbitmq", "127.0.0.1:5672")
	u := sinktest.Unique()
	cfg := testConfig(t, srv, "root", "", fmt.Sprintf(`sinks:
  - {name: out, type: stdout}
  - {name: js, type: nats, nats: {urls: ["nats://127.0.0.1:4222"], stream: K%s, create_stream: {enabled: true}}}
  - {name: rd, type: redis, redis: {addr: "127.0.0.1:6379", stream: "k%s:outbox"}}
  - {name: mq, type: rabbitmq, rabbitmq: {addr: "127.0.0.1:5672", exchange: k%s}}`, u, u, u))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := Run(ctx, cfg, Options{Sinks: true})
	if err != nil {
		t.Fatal(err)
	}
	rs := rep.Get(NameSinks)
	if len(rs) != 3 {
		t.Fatalf("want 3 sinks lines (nats, redis, rabbitmq), got %d:\n%s", len(rs), printed(rep))
	}
	expect(t, rep, rs[0], Pass, fmt.Sprintf(`sinks[1] (js, nats): nats nats://127.0.0.1:4222: stream "K%s" does not exist yet; Connect creates it`, u), "")
	expect(t, rep, rs[1], Pass, fmt.Sprintf(`sinks[2] (rd, redis): redis 127.0.0.1:6379 answers; stream "k%s:outbox" does not exist yet`, u), "")
	expect(t, rep, rs[2], Fail, fmt.Sprintf(`sinks[3] (mq, rabbitmq): rabbitmq exchange "k%s" does not exist in vhost "/"`, u),
		"declare it (durable, type topic), or set declare_exchange: true in the sink's rabbitmq section")

	if rs := runChecks(t, cfg).Get(NameSinks); len(rs) != 0 {
		t.Errorf("without Options.Sinks: %d sinks lines, want none", len(rs))
	}

	cfg.Source.User = "nobody"
	rep, err = Run(ctx, cfg, Options{Sinks: true})
	if err == nil {
		t.Fatal("a source refusing the user: no error")
	}
	if rs := rep.Get(NameSinks); len(rs) != 3 || rs[2].Status != Fail {
		t.Errorf("with the source unreachable: want the 3 sinks lines still, got\n%s", printed(rep))
	}
}
