package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/faultproxy"
	"github.com/outbox-relay/outbox-relay/metrics"
	"github.com/outbox-relay/outbox-relay/sink"
	natssink "github.com/outbox-relay/outbox-relay/sink/nats"
	"github.com/outbox-relay/outbox-relay/sink/rabbitmq"
	redissink "github.com/outbox-relay/outbox-relay/sink/redis"
	"github.com/outbox-relay/outbox-relay/sink/sinktest"
)

// The failures of the NATS, Redis and RabbitMQ sinks are counted under the
// reason class of what happened, as Kafka's and the webhooks' are: a server
// gone (the link closed) is a connection failure, also where the client
// library says it in its own words (NATS "outbound buffer limit exceeded"
// while reconnecting, an AMQP frame error); a server that stopped answering
// (the link silently cut) is a timeout.
func TestStreamSinkFailuresHaveTheirReasonClass(t *testing.T) {
	sinks := []struct {
		name, server string
		new          func(addr string) (sink.Sink, error)
	}{
		{"nats", "127.0.0.1:4222", func(addr string) (sink.Sink, error) {
			u := sinktest.Unique()
			return natssink.New(natssink.Config{URLs: []string{"nats://" + addr}, Stream: "R" + u, Subject: "r" + u + ".x",
				AckTimeout: time.Second, Timeout: time.Second,
				CreateStream: natssink.CreateStreamConfig{Enabled: true, Subjects: []string{"r" + u + ".>"}, Storage: "memory"}}, nil)
		}},
		{"redis", "127.0.0.1:6379", func(addr string) (sink.Sink, error) {
			return redissink.New(redissink.Config{Addr: addr, Stream: "r" + sinktest.Unique(), Timeout: time.Second}, nil)
		}},
		{"rabbitmq", "127.0.0.1:5672", func(addr string) (sink.Sink, error) {
			return rabbitmq.New(rabbitmq.Config{Addr: addr, Exchange: "amq.topic", Timeout: time.Second}, nil)
		}},
	}
	faults := []struct {
		name   string
		cut    func(p *faultproxy.Proxy)
		reason string
	}{
		{"closed link", (*faultproxy.Proxy).CutHard, metrics.ReasonConnection},
		{"silent link", (*faultproxy.Proxy).CutSilently, metrics.ReasonTimeout},
	}
	for _, sk := range sinks {
		for _, f := range faults {
			t.Run(sk.name+" through a "+f.name, func(t *testing.T) {
				sinktest.Require(t, sk.name, sk.server)
				p := faultproxy.Start(t, sk.server)
				s, err := sk.new(p.Addr())
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				if err := s.Connect(ctx); err != nil {
					t.Fatal(err)
				}
				defer s.Close(ctx)
				f.cut(p)
				// Twice: the first write may find the loss, the second
				// meets what the client makes of it.
				for attempt := range 2 {
					wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					err := sink.ErrorFor(s.Write(wctx, sinktest.Events("r", 1, 1)), 0)
					cancel()
					if got := metrics.Reason(err, false); err == nil || got != f.reason {
						t.Fatalf("attempt %d failed with %v: reason %s, want %s", attempt, err, got, f.reason)
					}
				}
			})
		}
	}
}
