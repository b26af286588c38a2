package nats

import (
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/internal/section"
)

func init() {
	sink.Register(sink.Kind{
		Type:     "nats",
		Config:   func() config.SinkConfig { return new(Config) },
		Required: "at least nats.urls",
		New:      section.New(func(c Config, p sink.Params) (*Sink, error) { return build(c, p.Logger) }),
		Probes:   true,
		Insecure: func(sc config.SinkConfig) []sink.Warning {
			c := sc.(*Config)
			return sink.TLSWarnings("nats", c.TLS, c.User != "" || c.Token != "" || c.TokenFile != "" || c.TokenEnv != "")
		},
		Audit: section.Audit(func(c Config, p sink.AuditParams) (*Auditor, error) { return buildAuditor(c, p.ClockSkew) }),
		Server: &sink.Server{Name: "nats-server (JetStream)", Addr: "127.0.0.1:4222", Packages: []string{"nats-server"},
			Start: "nohup nats-server -js -a 127.0.0.1 -p 4222 >/tmp/nats-server.log 2>&1 &"},
	})
}
