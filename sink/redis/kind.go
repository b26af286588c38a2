package redis

import (
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/internal/section"
)

func init() {
	sink.Register(sink.Kind{
		Type:          "redis",
		Config:        func() config.SinkConfig { return new(Config) },
		Required:      "at least redis.addr",
		LibraryLogger: SetLibraryLogger,
		New: section.New(func(c Config, p sink.Params) (*Sink, error) {
			c.Writer = p.Name // its entries name it, so that a restart can read back its own
			return build(c, p.Logger)
		}),
		Probes: true,
		Insecure: func(sc config.SinkConfig) []sink.Warning {
			c := sc.(*Config)
			return sink.TLSWarnings("redis", c.TLS, c.Password != "" || c.PasswordFile != "" || c.PasswordEnv != "")
		},
		Audit: section.Audit(func(c Config, p sink.AuditParams) (*Auditor, error) { return buildAuditor(c, p.ClockSkew) }),
		Server: &sink.Server{Name: "redis-server", Addr: "127.0.0.1:6379", Packages: []string{"redis-server"},
			Start: "redis-server --daemonize yes --bind 127.0.0.1 --port 6379"},
	})
}
