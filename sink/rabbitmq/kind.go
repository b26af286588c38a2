package rabbitmq

import (
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/sink"
)

func init() {
	sink.Register(sink.Kind{
		Type:     "rabbitmq",
		Config:   func() config.SinkConfig { return new(Config) },
		Required: "at least rabbitmq.addr",
		New: func(p sink.Params) (sink.Sink, error) {
			c := *p.Config.(*Config)
			s, err := New(c, p.Logger)
			if err != nil {
				return nil, err
			}
			return s, nil
		},
		Probes: true,
		Insecure: func(sc config.SinkConfig) []sink.Warning {
			c := sc.(*Config)
			return sink.TLSWarnings("rabbitmq", c.TLS, c.Username != "")
		},
		Audit: func(p sink.AuditParams) (sink.Auditor, error) {
			a, err := NewAuditor(*p.Config.(*Config), p.Queue, p.ClockSkew)
			if err != nil {
				return nil, err
			}
			return a, nil
		},
	})
}
