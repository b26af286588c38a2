package redis

import (
	goredis "github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink/internal/route"
)

// ReadBack is what reading a sink's entries back needs (outbox-relay
// audit): the stream key each event goes to, and a client of the sink's
// server with its credentials. It is safe for use by one goroutine.
type ReadBack struct {
	stream *route.Template
	// Client reads the streams; Close closes it.
	Client *goredis.Client
}

// NewReadBack returns the ReadBack of a sink config (its defaults applied
// and validated here). It does not touch the network.
func NewReadBack(c Config) (*ReadBack, error) {
	c.Defaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	t, err := route.Parse("redis.stream", c.Stream)
	if err != nil {
		return nil, err
	}
	cl, err := newClient(c)
	if err != nil {
		return nil, err
	}
	return &ReadBack{stream: t, Client: cl}, nil
}

// Stream is the stream key the sink appends e to.
func (r *ReadBack) Stream(e *event.Event) (string, error) { return r.stream.Render(e) }

// Close closes the client.
func (r *ReadBack) Close() error { return r.Client.Close() }
