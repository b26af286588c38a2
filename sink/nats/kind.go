package nats

import (
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/sink"
)

func init() {
	sink.Register(sink.Kind{
		Type:     "nats",
		Config:   func() config.SinkConfig { return new(Config) },
		Required: "at least nats.urls",
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
			return sink.TLSWarnings("nats", c.TLS, c.User != "" || c.Token != "" || c.TokenFile != "" || c.TokenEnv != "")
		},
		Audit: func(p sink.AuditParams) (sink.Auditor, error) {
			a, err := buildAuditor(*p.Config.(*Config), p.ClockSkew)
			if err != nil {
				return nil, err
			}
			return a, nil
		},
		Server: &sink.Server{Name: "nats-server (JetStream)", Addr: "127.0.0.1:4222", Packages: []string{"nats-server"},
			Start: "nohup nats-server -js -a 127.0.0.1 -p 4222 >/tmp/nats-server.log 2>&1 &"},
	})
}
