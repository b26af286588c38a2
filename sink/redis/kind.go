package redis

import (
	"github.com/outbox-relay/outbox-relay/internal/tlsfiles"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/internal/section"
)

func init() {
	k := section.Kind("redis", "at least redis.addr", func(c Config, p sink.Params) (*Sink, error) {
		c.Writer = p.Name // its entries name it, so that a restart can read back its own
		return build(c, p.Logger)
	}, func(c Config, p sink.AuditParams) (*Auditor, error) { return buildAuditor(c, p.ClockSkew) })
	k.LibraryLogger = SetLibraryLogger
	k.Insecure = section.TLSWarnings("redis", func(c *Config) (tlsfiles.Settings, bool) {
		return c.TLS, c.Password != "" || c.PasswordFile != "" || c.PasswordEnv != ""
	})
	k.Server = &sink.Server{Name: "redis-server", Addr: "127.0.0.1:6379", Packages: []string{"redis-server"},
		Start: "redis-server --daemonize yes --bind 127.0.0.1 --port 6379"}
	sink.Register(k)
}
