package rabbitmq

import (
	"log/slog"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/tlsfiles"
	"github.com/outbox-relay/outbox-relay/sink/internal/route"
	"github.com/outbox-relay/outbox-relay/sink/internal/section"

	"github.com/outbox-relay/outbox-relay/event/cloudevent"
)

// Config configures a RabbitMQ sink: the sink's `rabbitmq:` section. Load
// applies its defaults (declared beside each field) and validates it; New
// does both for a Config written in Go.
type Config struct {
	// Addr is the broker, "host:port". Required.
	Addr string `yaml:"addr" example:"127.0.0.1:5672"`
	// VHost is the virtual host. Default "/".
	VHost string `yaml:"vhost" default:"/"`
	// Username and Password (or PasswordFile, PasswordEnv) authenticate
	// (PLAIN). Default none (the broker's default user, guest, only works
	// from localhost).
	Username     string `yaml:"username"`
	Password     string `yaml:"password" secret:"true"`
	PasswordFile string `yaml:"password_file"`
	PasswordEnv  string `yaml:"password_env"`
	// TLS configures TLS (amqps). Default off.
	TLS TLSConfig `yaml:"tls"`
	// Exchange is the exchange published to. Default "outbox" (an empty
	// value means the default, so AMQP's nameless default exchange, which
	// routes by queue name, cannot be chosen: bind your queues to a named
	// exchange instead).
	Exchange string `yaml:"exchange" default:"outbox"`
	// RoutingKey is a fixed routing key or a template over the event's
	// fields, as the Kafka sink's topic. Default
	// "outbox.event.{{.AggregateType}}" (dot-separated words, for topic
	// exchange bindings such as outbox.event.#).
	RoutingKey string `yaml:"routing_key" default:"outbox.event.{{.AggregateType}}"`
	// DeclareExchange declares the exchange (durable) on Connect. Default
	// false: Connect checks that it exists (a passive declare).
	DeclareExchange bool `yaml:"declare_exchange"`
	// ExchangeType of a declared exchange: direct, topic, fanout or
	// headers. Default topic.
	ExchangeType string `yaml:"exchange_type" default:"topic"`
	// Timeout bounds the dial and each publish's wait for its confirm.
	// Default 10s.
	Timeout time.Duration `yaml:"timeout" default:"10s"`
	// Heartbeat is the AMQP heartbeat interval. Default 10s.
	Heartbeat time.Duration `yaml:"heartbeat" default:"10s"`
	// CloudEvents sends each event as a CloudEvent (AMQP protocol
	// binding): mode binary adds its attributes as application properties
	// (headers) named cloudEvents:<attribute>, with datacontenttype as the
	// content-type property, the payload as the body; structured sends one
	// application/cloudevents+json document as the body. The sink's own
	// headers are kept. Default off.
	CloudEvents cloudevent.Config `yaml:"cloudevents"`
}

// TLSConfig configures TLS to the broker.
type TLSConfig = tlsfiles.Settings

// LogValue keeps the password out of logs.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(slog.String("addr", c.Addr), slog.String("vhost", c.VHost), slog.String("exchange", c.Exchange),
		slog.String("username", c.Username), slog.String("password", "[redacted]"))
}

var exchangeTypes = []string{"direct", "topic", "fanout", "headers"}

// Defaults implements config.SinkConfig: every zero field gets the
// default declared beside it.
func (c *Config) Defaults() { section.Defaults(c, &c.CloudEvents) }

// Validate checks a configuration with its defaults applied.
func (c *Config) Validate() error {
	p := section.ProblemsOf("rabbitmq", &c.CloudEvents)
	bad := p.Bad
	if host, port, err := net.SplitHostPort(c.Addr); err != nil || host == "" || slices.Contains([]byte(c.Addr), '@') {
		bad("addr: not host:port, e.g. localhost:5672 (credentials go in rabbitmq.username and password)")
	} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		bad("addr: the port of %q is not a number from 1 to 65535", host)
	}
	if t, err := route.Parse("rabbitmq.routing_key", c.RoutingKey); err != nil {
		p.Add(err)
	} else if k, ok := t.Fixed(); ok && len(k) > 255 {
		bad("routing_key: longer than 255 bytes")
	}
	if !slices.Contains(exchangeTypes, c.ExchangeType) {
		bad("exchange_type: %q is not one of direct, topic, fanout, headers", c.ExchangeType)
	}
	if c.DeclareExchange && c.Exchange == "" {
		bad("declare_exchange: the default exchange (\"\") cannot be declared")
	}
	p.Secret("password", c.Password, c.PasswordFile, c.PasswordEnv)
	p.User("username", c.Username, c.Password, c.PasswordFile, c.PasswordEnv)
	if c.Timeout < 0 || c.Heartbeat < 0 {
		bad("timeout, heartbeat: negative")
	}
	p.TLS(c.TLS)
	return p.Err()
}
