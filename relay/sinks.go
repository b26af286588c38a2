package relay

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/webhook"
)

// targets builds the targets of sink s: its sink, built by its registered
// kind, or, for a webhook sink (a gateway), one per static endpoint.
func (r *Relay) targets(s config.Sink) ([]Target, error) {
	if wc := webhook.Section(s); wc != nil {
		var out []Target
		for j, ep := range wc.Endpoints {
			e, err := r.gatewayEndpoint(s.Name, ep)
			if err != nil {
				return nil, fmt.Errorf("webhook.endpoints[%d]: %w", j, err)
			}
			out = append(out, Target{Name: e.Key, Sink: e.Sink, Gateway: s.Name, Filter: e.Filter})
		}
		return out, nil
	}
	k, ok := sink.KindOf(s.Type)
	if !ok || k.New == nil || s.Config == nil {
		return nil, fmt.Errorf("type %q is not supported by this build", s.Type)
	}
	var stdout io.Writer
	if r.opts.Stdout != nil {
		stdout = r.opts.Stdout
	}
	out, err := k.New(sink.Params{Name: s.Name, Config: s.Config, Stdout: stdout, Retry: r.retry,
		Logger: r.log.With(slog.String("sink", s.Name))})
	if err != nil {
		return nil, err
	}
	return []Target{{Name: s.Name, Sink: out}}, nil
}
