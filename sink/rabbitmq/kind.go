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
			// Load has applied the section's defaults and validated it.
			s, err := build(c, p.Logger)
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
			a, err := buildAuditor(*p.Config.(*Config), p.Flags["queue"], p.ClockSkew)
			if err != nil {
				return nil, err
			}
			return a, nil
		},
		AuditFlags: []sink.AuditFlag{{Name: "queue", Value: "NAME",
			Usage: "rabbitmq: the stream queue (x-queue-type: stream) bound for auditing to read back"}},
		Server: &sink.Server{Name: "rabbitmq", Addr: "127.0.0.1:5672", Packages: []string{"rabbitmq-server"},
			Start: "rabbitmq-server -detached"},
	})
}
