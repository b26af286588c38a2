package check

import (
	"context"
	"errors"
	"fmt"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/sink"
	natssink "github.com/outbox-relay/outbox-relay/sink/nats"
	"github.com/outbox-relay/outbox-relay/sink/rabbitmq"
	redissink "github.com/outbox-relay/outbox-relay/sink/redis"
)

// sinkResults probes each sink that can check its destination (NATS
// JetStream, Redis Streams, RabbitMQ), one line each: reachable, the
// credentials accepted, and the stream, key or exchange there or created by
// the sink on connect. Kafka, webhook and stdout sinks are not probed.
func sinkResults(ctx context.Context, cfg *config.Config) []Result {
	var out []Result
	for i, s := range cfg.Sinks {
		p, err := prober(s)
		if p == nil && err == nil {
			continue
		}
		label := fmt.Sprintf("sinks[%d] (%s, %s)", i, s.Name, s.Type)
		var found string
		if err == nil {
			found, err = p.Probe(ctx)
			_ = p.Close(ctx)
		}
		if err == nil {
			out = append(out, Result{Name: NameSinks, Detail: label + ": " + found})
			continue
		}
		fix := fmt.Sprintf("make the server reachable from this host and check the sinks[%d].%s address, credentials and tls settings", i, s.Type)
		var pr *sink.Problem
		if errors.As(err, &pr) {
			fix = pr.Fix
		}
		out = append(out, Result{Name: NameSinks, Status: Fail, Detail: label + ": " + err.Error(), Fix: fix})
	}
	return out
}

type probingSink interface {
	sink.Sink
	sink.Prober
}

// prober builds the sink of s when its type can probe; nil when it cannot.
func prober(s config.Sink) (probingSink, error) {
	switch {
	case s.Type == "nats" && s.NATS != nil:
		return natssink.New(*s.NATS, nil)
	case s.Type == "redis" && s.Redis != nil:
		return redissink.New(*s.Redis, nil)
	case s.Type == "rabbitmq" && s.RabbitMQ != nil:
		return rabbitmq.New(*s.RabbitMQ, nil)
	}
	return nil, nil
}
