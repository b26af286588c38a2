package rabbitmq

import (
	"context"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/outbox-relay/sink"
)

// Probe connects with the sink's credentials and checks, with a passive
// declare, that the exchange exists, or that declare_exchange will declare
// it on Connect. It declares nothing.
func (s *Sink) Probe(ctx context.Context) (string, error) {
	conn, err := dial(s.cfg, s.tls, s.pw, "outbox-relay check")
	if err != nil {
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.AccessRefused {
			return "", &sink.Problem{Err: err,
				Fix: fmt.Sprintf("check rabbitmq.username and the password, and that the user may use vhost %q", s.vhost())}
		}
		return "", err
	}
	defer conn.Close()
	if s.cfg.Exchange == "" {
		return fmt.Sprintf("rabbitmq %s (vhost %q): connected; events go to the default exchange (the routing key names the queue)", s.cfg.Addr, s.vhost()), nil
	}
	ch, err := conn.Channel()
	if err != nil {
		return "", fmt.Errorf("open a rabbitmq channel: %w", err)
	}
	err = ch.ExchangeDeclarePassive(s.cfg.Exchange, s.cfg.ExchangeType, true, false, false, false, nil)
	switch {
	case err == nil:
		return fmt.Sprintf("rabbitmq %s (vhost %q): exchange %q exists", s.cfg.Addr, s.vhost(), s.cfg.Exchange), nil
	case isNotFound(err) && s.cfg.DeclareExchange:
		return fmt.Sprintf("rabbitmq %s (vhost %q): exchange %q does not exist yet; Connect declares it (durable, %s)",
			s.cfg.Addr, s.vhost(), s.cfg.Exchange, s.cfg.ExchangeType), nil
	case isNotFound(err):
		return "", s.missingExchange(err)
	}
	return "", fmt.Errorf("check rabbitmq exchange %q: %w", s.cfg.Exchange, err)
}

// missingExchange is the problem of an exchange that does not exist.
func (s *Sink) missingExchange(err error) *sink.Problem {
	return &sink.Problem{Err: fmt.Errorf("rabbitmq exchange %q does not exist in vhost %q (%w)", s.cfg.Exchange, s.vhost(), err),
		Fix: fmt.Sprintf("declare it (durable, type %s), or set declare_exchange: true in the sink's rabbitmq section", s.cfg.ExchangeType)}
}

func (s *Sink) vhost() string {
	if s.cfg.VHost == "" {
		return "/"
	}
	return s.cfg.VHost
}

func isNotFound(err error) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Code == amqp.NotFound
}
