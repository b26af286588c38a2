package nats

import (
	"github.com/outbox-relay/outbox-relay/internal/tlsfiles"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/internal/section"
)

func init() {
	k := section.Kind("nats", "at least nats.urls", func(c Config, p sink.Params) (*Sink, error) { return build(c, p.Logger) },
		func(c Config, p sink.AuditParams) (*Auditor, error) { return buildAuditor(c, p.ClockSkew) })
	k.Insecure = section.TLSWarnings("nats", func(c *Config) (tlsfiles.Settings, bool) {
		return c.TLS, c.User != "" || c.Token != "" || c.TokenFile != "" || c.TokenEnv != ""
	})
	k.Server = &sink.Server{Name: "nats-server (JetStream)", Addr: "127.0.0.1:4222", Packages: []string{"nats-server"},
		Start: "nohup nats-server -js -a 127.0.0.1 -p 4222 >/tmp/nats-server.log 2>&1 &"}
	sink.Register(k)
}
