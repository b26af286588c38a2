package relay

import (
	"fmt"
	"log/slog"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/retry"
	"github.com/outbox-relay/outbox-relay/sink/kafka"
	natssink "github.com/outbox-relay/outbox-relay/sink/nats"
	"github.com/outbox-relay/outbox-relay/sink/rabbitmq"
	redissink "github.com/outbox-relay/outbox-relay/sink/redis"
	"github.com/outbox-relay/outbox-relay/sink/stdout"
)

// builders make a sink type's targets from its config section.
var builders = map[string]func(s config.Sink, r *Relay) ([]Target, error){
	"stdout": func(s config.Sink, r *Relay) ([]Target, error) {
		var c stdout.Config
		if s.Stdout != nil {
			c = *s.Stdout
		}
		return []Target{{Name: s.Name, Sink: stdout.New(c, r.opts.Stdout)}}, nil
	},
	"kafka": func(s config.Sink, r *Relay) ([]Target, error) {
		kc := *s.Kafka
		// The sink retries its produce requests itself (it keeps one in
		// flight per partition): with the relay's one retry policy.
		kc.Retry = retry.Policy{Initial: r.cfg.Delivery.RetryBackoff, Max: r.cfg.Delivery.MaxRetryBackoff}
		// Its messages name it, so that a restart can read back its own.
		kc.Writer = s.Name
		k, err := kafka.New(kc, r.log.With(slog.String("sink", s.Name)))
		if err != nil {
			return nil, err
		}
		return []Target{{Name: s.Name, Sink: k}}, nil
	},
	"nats": func(s config.Sink, r *Relay) ([]Target, error) {
		n, err := natssink.New(*s.NATS, r.log.With(slog.String("sink", s.Name)))
		if err != nil {
			return nil, err
		}
		return []Target{{Name: s.Name, Sink: n}}, nil
	},
	"redis": func(s config.Sink, r *Relay) ([]Target, error) {
		rc := *s.Redis
		rc.Writer = s.Name // its entries name it, so that a restart can read back its own
		k, err := redissink.New(rc, r.log.With(slog.String("sink", s.Name)))
		if err != nil {
			return nil, err
		}
		return []Target{{Name: s.Name, Sink: k}}, nil
	},
	"rabbitmq": func(s config.Sink, r *Relay) ([]Target, error) {
		k, err := rabbitmq.New(*s.RabbitMQ, r.log.With(slog.String("sink", s.Name)))
		if err != nil {
			return nil, err
		}
		return []Target{{Name: s.Name, Sink: k}}, nil
	},
	"webhook": func(s config.Sink, r *Relay) ([]Target, error) {
		var out []Target
		for j, ep := range s.Webhook.Endpoints {
			e, err := r.gatewayEndpoint(s.Name, ep)
			if err != nil {
				return nil, fmt.Errorf("webhook.endpoints[%d]: %w", j, err)
			}
			out = append(out, Target{Name: e.Key, Sink: e.Sink, Gateway: s.Name, Filter: e.Filter})
		}
		return out, nil
	},
}
