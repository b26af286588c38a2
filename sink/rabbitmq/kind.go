package rabbitmq

import (
	"github.com/outbox-relay/outbox-relay/internal/tlsfiles"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/internal/section"
)

func init() {
	k := section.Kind("rabbitmq", "at least rabbitmq.addr", func(c Config, p sink.Params) (*Sink, error) { return build(c, p.Logger) },
		func(c Config, p sink.AuditParams) (*Auditor, error) {
			return buildAuditor(c, p.Flags["queue"], p.ClockSkew)
		})
	k.Insecure = section.TLSWarnings("rabbitmq", func(c *Config) (tlsfiles.Settings, bool) { return c.TLS, c.Username != "" })
	k.AuditFlags = []sink.AuditFlag{{Name: "queue", Value: "NAME",
		Usage: "rabbitmq: the stream queue (x-queue-type: stream) bound for auditing to read back"}}
	k.Server = &sink.Server{Name: "rabbitmq", Addr: "127.0.0.1:5672", Packages: []string{"rabbitmq-server"},
		Start: "rabbitmq-server -detached"}
	sink.Register(k)
}
