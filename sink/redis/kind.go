package redis

import (
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/sink"
)

func init() {
	sink.Register(sink.Kind{
		Type:          "redis",
		Config:        func() config.SinkConfig { return new(Config) },
		Required:      "at least redis.addr",
		LibraryLogger: SetLibraryLogger,
		New: func(p sink.Params) (sink.Sink, error) {
			c := *p.Config.(*Config)
			c.Writer = p.Name // its entries name it, so that a restart can read back its own
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
			return sink.TLSWarnings("redis", c.TLS, c.Password != "" || c.PasswordFile != "" || c.PasswordEnv != "")
		},
		Audit: func(p sink.AuditParams) (sink.Auditor, error) {
			a, err := buildAuditor(*p.Config.(*Config), p.ClockSkew)
			if err != nil {
				return nil, err
			}
			return a, nil
		},
		Server: &sink.Server{Name: "redis-server", Addr: "127.0.0.1:6379", Packages: []string{"redis-server"},
			Start: "redis-server --daemonize yes --bind 127.0.0.1 --port 6379"},
	})
}
