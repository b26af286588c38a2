package stdout

import (
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/sink"
)

func init() {
	sink.Register(sink.Kind{
		Type:   "stdout",
		Config: func() config.SinkConfig { return new(Config) },
		New: func(p sink.Params) (sink.Sink, error) {
			return New(*p.Config.(*Config), p.Stdout), nil
		},
	})
}

// Defaults implements config.SinkConfig: every field's default is its zero value.
func (c *Config) Defaults() {}

// Validate implements config.SinkConfig: every value is valid.
func (c *Config) Validate() error { return nil }
