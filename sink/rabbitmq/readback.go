package rabbitmq

import (
	"crypto/tls"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink/internal/route"
	"github.com/outbox-relay/outbox-relay/sink/internal/secret"
)

// ReadBack is what reading a sink's messages back needs (outbox-relay
// audit): the routing key each event is published with, and how to reach
// the broker with the sink's credentials. It is safe for use by one
// goroutine.
type ReadBack struct {
	cfg Config
	key *route.Template
	tls *tls.Config
	pw  string
}

// NewReadBack returns the ReadBack of a sink config (its defaults applied
// and validated here). It does not touch the network.
func NewReadBack(c Config) (*ReadBack, error) {
	c.Defaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	key, err := route.Parse("rabbitmq.routing_key", c.RoutingKey)
	if err != nil {
		return nil, err
	}
	tlsCfg, err := c.TLS.Build("rabbitmq.tls")
	if err != nil {
		return nil, err
	}
	pw, err := secret.Resolve("rabbitmq.password", c.Password, c.PasswordFile, c.PasswordEnv)
	if err != nil {
		return nil, err
	}
	return &ReadBack{cfg: c, key: key, tls: tlsCfg, pw: pw}, nil
}

// RoutingKey is the routing key the sink publishes e with.
func (r *ReadBack) RoutingKey(e *event.Event) (string, error) { return r.key.Render(e) }

// Exchange is the exchange the sink publishes to.
func (r *ReadBack) Exchange() string { return r.cfg.Exchange }

// Dial connects to the broker.
func (r *ReadBack) Dial() (*amqp.Connection, error) {
	return dial(r.cfg, r.tls, r.pw, "outbox-relay audit")
}
