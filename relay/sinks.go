package relay

import (
	"github.com/outbox-relay/outbox-relay/config"
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
}
