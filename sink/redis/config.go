package redis

import (
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/tlsfiles"
	"github.com/outbox-relay/outbox-relay/sink/internal/route"
	"github.com/outbox-relay/outbox-relay/sink/internal/section"

	"github.com/outbox-relay/outbox-relay/event/cloudevent"
)

// Config configures a Redis Streams sink: the sink's `redis:` section. Load
// applies its defaults (declared beside each field) and validates it; New
// does both for a Config written in Go.
type Config struct {
	// Addr is the server, "host:port". Required.
	Addr string `yaml:"addr" example:"127.0.0.1:6379"`
	// DB is the database number. Default 0.
	DB int `yaml:"db"`
	// Stream is a fixed stream key or a template over the event's fields,
	// as the Kafka sink's topic. Default "outbox:event:{{.AggregateType}}"
	// (colon-separated, Redis's key convention).
	Stream string `yaml:"stream" default:"outbox:event:{{.AggregateType}}"`
	// MaxLen trims each stream to about this many entries on every XADD
	// (MAXLEN ~). Default 0: no trimming. Trim only streams whose consumers
	// keep up: a trimmed entry is gone for a consumer that had not read it.
	MaxLen int64 `yaml:"max_len"`
	// Username (Redis 6 ACL) and Password (or PasswordFile, PasswordEnv)
	// authenticate. Default none.
	Username     string `yaml:"username"`
	Password     string `yaml:"password" secret:"true"`
	PasswordFile string `yaml:"password_file"`
	PasswordEnv  string `yaml:"password_env"`
	// TLS configures TLS to the server. Default off.
	TLS TLSConfig `yaml:"tls"`
	// Timeout bounds a dial, a read and a write. Default 5s.
	Timeout time.Duration `yaml:"timeout" default:"5s"`
	// PoolSize is the most connections. Default 4.
	PoolSize int `yaml:"pool_size" default:"4"`
	// Writer names the sink in every entry's relay_sink field, so that a
	// restarted sink recognises its own entries when it reads its streams
	// back (Recover). Not read from the config file: the relay sets it to
	// the sink's name. Default "": no relay_sink field, and Recover cannot
	// tell what the streams hold.
	Writer string `yaml:"-"`
	// CloudEvents sends each event as a CloudEvent. Redis has no
	// CloudEvents binding: mode binary adds its attributes as fields
	// ce_<attribute> (the Kafka binding's names) beside the payload field;
	// structured puts one application/cloudevents+json document in the
	// payload field and content-type in a field of that name. The sink's
	// own fields are kept. Default off.
	CloudEvents cloudevent.Config `yaml:"cloudevents"`
}

// TLSConfig configures TLS to the server.
type TLSConfig = tlsfiles.Settings

// LogValue keeps the password out of logs.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(slog.String("addr", c.Addr), slog.String("stream", c.Stream),
		slog.String("username", c.Username), slog.String("password", "[redacted]"))
}

// Defaults implements config.SinkConfig: every zero field gets the
// default declared beside it.
func (c *Config) Defaults() { section.Defaults(c, &c.CloudEvents) }

// Validate checks a configuration with its defaults applied.
func (c *Config) Validate() error {
	p := section.ProblemsOf("redis", &c.CloudEvents)
	bad := p.Bad
	if strings.Contains(c.Addr, "@") {
		bad(`addr: holds an "@": credentials do not belong in the address (they would be logged); write host:port only, and set redis.username and redis.password_env (or password_file)`)
	} else if host, port, err := net.SplitHostPort(c.Addr); err != nil || host == "" {
		bad("addr: %q is not host:port, e.g. localhost:6379", c.Addr)
	} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		bad("addr: the port of %q is not a number from 1 to 65535", host)
	}
	if _, err := route.Parse("redis.stream", c.Stream); err != nil {
		p.Add(err)
	}
	if c.DB < 0 {
		bad("db: %d is negative", c.DB)
	}
	if c.MaxLen < 0 {
		bad("max_len: %d is negative", c.MaxLen)
	}
	p.Secret("password", c.Password, c.PasswordFile, c.PasswordEnv)
	if c.Timeout < 0 {
		bad("timeout: %s is negative", c.Timeout)
	}
	if c.PoolSize < 1 {
		bad("pool_size: %d is less than 1", c.PoolSize)
	}
	p.TLS(c.TLS)
	return p.Err()
}
