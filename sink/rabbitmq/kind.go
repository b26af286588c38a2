package rabbitmq

import (
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/internal/section"
)

func init() {
	sink.Register(sink.Kind{
		Type:     "rabbitmq",
		Config:   func() config.SinkConfig { return new(Config) },
		Required: "at least rabbitmq.addr",
		New:      section.New(func(c Config, p sink.Params) (*Sink, error) { return build(c, p.Logger) }),
		Probes:   true,
		Insecure: func(sc config.SinkConfig) []sink.Warning {
			c := sc.(*Config)
			return sink.TLSWarnings("rabbitmq", c.TLS, c.Username != "")
		},
		Audit: section.Audit(func(c Config, p sink.AuditParams) (*Auditor, error) {
			return buildAuditor(c, p.Flags["queue"], p.ClockSkew)
		}),
		AuditFlags: []sink.AuditFlag{{Name: "queue", Value: "NAME",
			Usage: "rabbitmq: the stream queue (x-queue-type: stream) bound for auditing to read back"}},
		Server: &sink.Server{Name: "rabbitmq", Addr: "127.0.0.1:5672", Packages: []string{"rabbitmq-server"},
			Start: "rabbitmq-server -detached"},
	})
}
