package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	goredis "github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/relaytest"
	"github.com/outbox-relay/outbox-relay/sink/sinktest"
)

// streamRelay runs a relay with one sink (its YAML under `sinks:`) until
// the test ends, and returns its config.
func streamRelay(t *testing.T, dbname, sinkYAML string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %s.outbox}]
checkpoint: {path: %s, interval: 200ms}
delivery: {batch_size: 500, retry_backoff: 50ms, max_retry_backoff: 500ms}
sinks:
%s`, srv.Port, testserver.ServerID(), dbname, filepath.Join(t.TempDir(), "cp.json"), sinkYAML)))
	if err != nil {
		t.Fatal(err)
	}
	rl := startRelay(t, cfg, relay.Options{Logger: relaytest.Stderr(slog.LevelError)})
	waitForCheckpoint(t, cfg.Checkpoint.Path)
	t.Cleanup(func() {
		if err := rl.stop(t); err != nil {
			t.Errorf("relay: %v", err)
		}
	})
	return cfg
}

// outage commits a workload, then breaks the link to the server for several
// seconds in the middle of a second one, heals it, and checks with read
// that nothing was lost and per aggregate the first deliveries are in
// commit order.
func outage(t *testing.T, link *sinktest.Link, dbname string, read func() []outboxtest.Delivered) {
	t.Helper()
	db := srv.DB(t, dbname)
	w1 := &outboxtest.Workload{}
	outboxtest.Produce(context.Background(), t, db, w1, 2, 40, []int{5}, 40)
	waitDelivered(t, read, w1.Events(), 60*time.Second)
	// The second workload is being committed and delivered when the link
	// breaks, and goes on being committed during the outage.
	w2 := &outboxtest.Workload{Prefix: "b"}
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		outboxtest.Produce(context.Background(), t, db, w2, 1, 200, []int{1, 3}, 40)
	}()
	time.Sleep(300 * time.Millisecond)
	link.Break()
	time.Sleep(4 * time.Second)
	link.Heal()
	<-produced
	got := waitDelivered(t, read, w1.Events()+w2.Events(), 90*time.Second)
	var d1, d2 []outboxtest.Delivered
	for _, d := range got {
		if strings.HasPrefix(d.ID, "b") {
			d2 = append(d2, d)
		} else {
			d1 = append(d1, d)
		}
	}
	outboxtest.Check(t, w1, d1, false)
	rep := outboxtest.Check(t, w2, d2, false)
	t.Logf("outage: %d before, %d during (%d messages, %d duplicates)", w1.Events(), w2.Events(), rep.Delivered, rep.Duplicates)
}

// waitDelivered waits for n distinct events.
func waitDelivered(t *testing.T, read func() []outboxtest.Delivered, n int, limit time.Duration) []outboxtest.Delivered {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		got := read()
		ids := map[string]bool{}
		for _, d := range got {
			ids[d.ID] = true
		}
		if len(ids) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events delivered after %s", len(ids), n, limit)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// NATS JetStream through a link that is cut for several seconds mid-stream.
func TestNATSOutage(t *testing.T) {
	sinktest.Require(t, "nats-server (JetStream)", "127.0.0.1:4222")
	u := sinktest.Unique()
	stream, prefix := "R"+u, "r"+u
	link := sinktest.StartLink(t, "127.0.0.1:4222")
	dbname, _ := newOutbox(t)
	streamRelay(t, dbname, fmt.Sprintf(`
  - name: nats
    type: nats
    nats:
      urls: [nats://%s]
      stream: %s
      subject: %s.outbox.event.{{.AggregateType}}
      ack_timeout: 2s
      reconnect_wait: 200ms
      create_stream: {enabled: true, subjects: [%s.>], storage: memory}
`, link.Addr(), stream, prefix, prefix))
	nc, err := natsgo.Connect("nats://127.0.0.1:4222")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	defer js.DeleteStream(context.Background(), stream)
	var seq uint64
	var got []outboxtest.Delivered
	outage(t, link, dbname, func() []outboxtest.Delivered {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := js.Stream(ctx, stream)
		if err != nil {
			return got
		}
		info, err := st.Info(ctx)
		if err != nil {
			return got
		}
		for seq < info.State.LastSeq {
			m, err := st.GetMsg(ctx, seq+1)
			if err != nil {
				t.Fatal(err)
			}
			seq++
			got = append(got, outboxtest.Delivered{ID: m.Header.Get("id"), AggregateID: m.Header.Get("aggregate_id")})
		}
		return got
	})
}

// Redis through a link that is cut for several seconds mid-stream.
func TestRedisOutage(t *testing.T) {
	sinktest.Require(t, "redis-server", "127.0.0.1:6379")
	key := "r" + sinktest.Unique() + ":outbox"
	link := sinktest.StartLink(t, "127.0.0.1:6379")
	dbname, _ := newOutbox(t)
	streamRelay(t, dbname, fmt.Sprintf(`
  - name: redis
    type: redis
    redis: {addr: %q, stream: %q, timeout: 2s}
`, link.Addr(), key))
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
	defer c.Close()
	defer c.Del(context.Background(), key)
	outage(t, link, dbname, func() []outboxtest.Delivered {
		msgs, err := c.XRange(context.Background(), key, "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		out := make([]outboxtest.Delivered, len(msgs))
		for i, m := range msgs {
			if m.Values["relay_sink"] != "redis" {
				t.Fatalf("entry %s: relay_sink %v, want the sink's name redis", m.ID, m.Values["relay_sink"])
			}
			out[i] = outboxtest.Delivered{ID: m.Values["id"].(string), AggregateID: m.Values["aggregate_id"].(string)}
		}
		return out
	})
}

// RabbitMQ through a link that is cut for several seconds mid-stream.
func TestRabbitMQOutage(t *testing.T) {
	sinktest.Require(t, "rabbitmq", "127.0.0.1:5672")
	name := "r" + sinktest.Unique()
	ch := rabbitChannel(t)
	defer ch.ExchangeDelete(name, false, false)
	defer ch.QueueDelete(name, false, false, false)
	// The exchange, queue and binding exist before the relay publishes:
	// mandatory messages with no route would be dead-lettered.
	if err := ch.ExchangeDeclare(name, "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(name, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(name, "outbox.event.#", name, false, nil); err != nil {
		t.Fatal(err)
	}
	link := sinktest.StartLink(t, "127.0.0.1:5672")
	dbname, _ := newOutbox(t)
	streamRelay(t, dbname, fmt.Sprintf(`
  - name: rabbitmq
    type: rabbitmq
    rabbitmq: {addr: %q, exchange: %s, declare_exchange: true, timeout: 3s}
`, link.Addr(), name))
	var got []outboxtest.Delivered
	outage(t, link, dbname, func() []outboxtest.Delivered {
		for {
			m, ok, err := ch.Get(name, true)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				return got
			}
			agg, _ := m.Headers["aggregate_id"].(string)
			got = append(got, outboxtest.Delivered{ID: m.MessageId, AggregateID: agg})
		}
	})
}

// rabbitChannel is a channel to the shared RabbitMQ broker, closed when the
// test ends (after the test's own deferred calls).
func rabbitChannel(t *testing.T) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial("amqp://guest:guest@127.0.0.1:5672/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}
