package nats

import (
	"fmt"
	"strings"

	natsgo "github.com/nats-io/nats.go"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink/internal/route"
)

// ReadBack is what reading a sink's messages back needs (outbox-relay
// audit): the subject each event goes to, the stream, and how to reach the
// servers with the sink's credentials. It is safe for use by one goroutine.
type ReadBack struct {
	cfg     Config
	subject *route.Template
	opts    []natsgo.Option
}

// NewReadBack returns the ReadBack of a sink config (its defaults applied
// and validated here).
func NewReadBack(c Config) (*ReadBack, error) {
	c.Defaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	t, err := route.Parse("nats.subject", c.Subject)
	if err != nil {
		return nil, err
	}
	auth, err := authOptions(c)
	if err != nil {
		return nil, err
	}
	opts := append([]natsgo.Option{natsgo.Name(c.Name + " audit"), natsgo.Timeout(c.Timeout), natsgo.MaxReconnects(-1), natsgo.ReconnectWait(c.ReconnectWait)}, auth...)
	return &ReadBack{cfg: c, subject: t, opts: opts}, nil
}

// Subject is the subject the sink publishes e to.
func (r *ReadBack) Subject(e *event.Event) (string, error) { return r.subject.Render(e) }

// Stream is the JetStream stream that captures the sink's subjects.
func (r *ReadBack) Stream() string { return r.cfg.Stream }

// Connect dials the sink's servers.
func (r *ReadBack) Connect() (*natsgo.Conn, error) {
	nc, err := natsgo.Connect(strings.Join(r.cfg.URLs, ","), r.opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to nats %s: %w", strings.Join(r.cfg.URLs, ", "), err)
	}
	return nc, nil
}
