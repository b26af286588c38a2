package check

import (
	"context"
	"errors"
	"fmt"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/sink"
)

// sinkResults probes each sink whose kind can check its destination
// (sink.Kind.Probes: Kafka, NATS JetStream, Redis Streams, RabbitMQ), one line
// each: reachable, the credentials accepted, and the topic, stream, key or
// exchange there or created by the sink on connect. The others are not probed.
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

// prober builds the sink of s when its kind can probe; nil when it cannot.
func prober(s config.Sink) (probingSink, error) {
	k, ok := sink.KindOf(s.Type)
	if !ok || !k.Probes || k.New == nil || s.Config == nil {
		return nil, nil
	}
	built, err := k.New(sink.Params{Name: s.Name, Config: s.Config})
	if err != nil {
		return nil, err
	}
	p, ok := built.(probingSink)
	if !ok {
		return nil, fmt.Errorf("sink type %s says it probes, but its sink has no Probe", s.Type)
	}
	return p, nil
}
