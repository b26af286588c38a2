package kafka

import (
	"crypto/tls"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink/internal/route"
)

// ReadBack is what reading a sink's messages back needs (outbox-relay
// audit): where each event goes, and how to reach the brokers. It is safe
// for use by one goroutine.
type ReadBack struct {
	topic *route.Template
	// TLS is the sink's TLS configuration; nil without TLS.
	TLS *tls.Config
	// SASLMechanism, SASLUser and SASLPassword are the sink's credentials
	// ("" mechanism: none).
	SASLMechanism, SASLUser, SASLPassword string
}

// NewReadBack returns the ReadBack of a (defaulted) sink config.
func NewReadBack(c Config) (*ReadBack, error) {
	t, err := route.Parse("kafka.topic", c.Topic)
	if err != nil {
		return nil, err
	}
	tc, err := c.TLS.Build("kafka.tls")
	if err != nil {
		return nil, err
	}
	rb := &ReadBack{topic: t, TLS: tc, SASLMechanism: c.SASL.Mechanism, SASLUser: c.SASL.Username}
	if c.SASL.Mechanism != "" {
		if rb.SASLPassword, err = c.SASL.password(); err != nil {
			return nil, err
		}
	}
	return rb, nil
}

// Topic is the topic the sink produces e to.
func (r *ReadBack) Topic(e *event.Event) (string, error) { return r.topic.Render(e) }
