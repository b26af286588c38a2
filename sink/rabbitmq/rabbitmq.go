package rabbitmq

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/event/cloudevent"
	"github.com/outbox-relay/outbox-relay/retry"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/internal/route"
	"github.com/outbox-relay/outbox-relay/sink/internal/secret"
	"github.com/outbox-relay/outbox-relay/sink/internal/section"
)

// Sink publishes outbox events to a RabbitMQ exchange with publisher
// confirms. Create it with New.
type Sink struct {
	cfg Config
	log *slog.Logger
	reach

	mu      sync.Mutex // guards the connection against Close during a Write
	conn    *amqp.Connection
	ch      *amqp.Channel
	returns chan amqp.Return
	// frameMax is the connection's negotiated frame_max (0: none), which
	// a message's properties must fit in.
	frameMax int
}

var _ sink.Sink = (*Sink)(nil)

// New returns a sink for cfg, with its defaults applied and validated. It
// does not touch the network: Connect does.
func New(cfg Config, logger *slog.Logger) (*Sink, error) {
	return section.Build(cfg, func(c Config) (*Sink, error) { return build(c, logger) })
}

// build returns a sink for cfg with its defaults applied and validated (by
// New, or by config.Load for the sink's section: they are not applied
// twice).
func build(cfg Config, logger *slog.Logger) (*Sink, error) {
	r, err := cfg.reach()
	if err != nil {
		return nil, err
	}
	return &Sink{cfg: cfg, log: section.Logger(logger, "rabbitmq"), reach: r}, nil
}

// reach is what the sink and its Auditor build alike of a config: the
// routing key's template and how to reach the broker.
type reach struct {
	key *route.Template
	tls *tls.Config
	pw  string
}

func (c Config) reach() (reach, error) {
	key, err := route.Parse("rabbitmq.routing_key", c.RoutingKey)
	if err != nil {
		return reach{}, err
	}
	tlsCfg, err := c.TLS.Build("rabbitmq.tls")
	if err != nil {
		return reach{}, err
	}
	pw, err := secret.Resolve("rabbitmq.password", c.Password, c.PasswordFile, c.PasswordEnv)
	if err != nil {
		return reach{}, err
	}
	return reach{key: key, tls: tlsCfg, pw: pw}, nil
}

// Connect dials the broker, opens a confirming channel and checks (or
// declares) the exchange.
func (s *Sink) Connect(ctx context.Context) error {
	return s.dial()
}

// dial (re)opens the connection and channel.
func (s *Sink) dial() error {
	conn, err := dial(s.cfg, s.tls, s.pw, "outbox-relay")
	if err != nil {
		return err
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		conn.Close()
		return fmt.Errorf("open a confirming rabbitmq channel: %w", err)
	}
	if s.cfg.Exchange != "" {
		if s.cfg.DeclareExchange {
			err = ch.ExchangeDeclare(s.cfg.Exchange, s.cfg.ExchangeType, true, false, false, false, nil)
		} else {
			err = ch.ExchangeDeclarePassive(s.cfg.Exchange, s.cfg.ExchangeType, true, false, false, false, nil)
		}
		if err != nil {
			conn.Close()
			if isNotFound(err) {
				p := s.missingExchange(err)
				return fmt.Errorf("%w: %s", p, p.Fix)
			}
			return fmt.Errorf("check rabbitmq exchange %q: %w", s.cfg.Exchange, err)
		}
	}
	returns := ch.NotifyReturn(make(chan amqp.Return, 4096))
	s.mu.Lock()
	old := s.conn
	s.conn, s.ch, s.returns, s.frameMax = conn, ch, returns, conn.Config.FrameSize
	s.mu.Unlock()
	if old != nil {
		old.Close()
	}
	s.log.Info("connected to rabbitmq", slog.String("addr", s.cfg.Addr), slog.String("exchange", s.cfg.Exchange))
	return nil
}

// dial connects to cfg's broker as the named connection.
func dial(c Config, tlsCfg *tls.Config, pw, name string) (*amqp.Connection, error) {
	user := c.Username
	if user == "" {
		user, pw = "guest", "guest"
	}
	scheme := "amqp"
	if tlsCfg != nil {
		scheme = "amqps"
	}
	cfg := amqp.Config{
		Vhost: c.VHost, Heartbeat: c.Heartbeat, TLSClientConfig: tlsCfg,
		SASL:       []amqp.Authentication{&amqp.PlainAuth{Username: user, Password: pw}},
		Dial:       amqp.DefaultDial(c.Timeout),
		Properties: amqp.Table{"connection_name": name},
	}
	conn, err := amqp.DialConfig(scheme+"://"+c.Addr+"/", cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to rabbitmq %s: %w", c.Addr, notConnected(err))
	}
	return conn, nil
}

// notConnected marks err with retry.ErrNotConnected when it is how the AMQP
// client reports a lost or failed connection: an I/O failure as a frame
// error (501), a connection or channel that is not open (504), the server
// closing the connection (320).
func notConnected(err error) error {
	var ae *amqp.Error
	if errors.As(err, &ae) && (ae.Code == amqp.FrameError || ae.Code == amqp.ChannelError || ae.Code == amqp.ConnectionForced) {
		return fmt.Errorf("%w (%w)", err, retry.ErrNotConnected)
	}
	return err
}

// Close closes the channel and the connection; Write has returned, so no
// confirm is pending.
func (s *Sink) Close(context.Context) error {
	s.mu.Lock()
	conn := s.conn
	s.conn, s.ch = nil, nil
	s.mu.Unlock()
	if conn != nil && !conn.IsClosed() {
		if err := conn.Close(); err != nil && !errors.Is(err, amqp.ErrClosed) {
			return fmt.Errorf("close rabbitmq connection: %w", err)
		}
	}
	return nil
}

// Write publishes batch (persistent, mandatory, message_id = event id) and
// returns nil once the broker confirmed every message, or a
// *sink.BatchError naming each failed event. Messages go in rounds of at
// most one event per aggregate (sink.SendOrdered). A channel or connection
// that was lost is opened again first.
func (s *Sink) Write(ctx context.Context, batch []*event.Event) error {
	s.mu.Lock()
	ch, returns, frameMax := s.ch, s.returns, s.frameMax
	s.mu.Unlock()
	if ch == nil || ch.IsClosed() {
		if err := s.dial(); err != nil {
			return err
		}
		s.mu.Lock()
		ch, returns, frameMax = s.ch, s.returns, s.frameMax
		s.mu.Unlock()
	}
	msgs := make([]*amqp.Publishing, len(batch))
	keys := make([]string, len(batch))
	return sink.SendOrdered(batch, func(round []int) map[int]error {
		res := make(map[int]error, len(round))
		confirms := map[int]*amqp.DeferredConfirmation{}
		pctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
		defer cancel()
		for _, i := range round {
			if msgs[i] == nil {
				k, m, err := s.message(batch[i])
				if err == nil {
					err = checkLimits(batch[i].ID, m, frameMax)
				}
				if err != nil {
					res[i] = err
					continue
				}
				keys[i], msgs[i] = k, m
			}
			dc, err := ch.PublishWithDeferredConfirmWithContext(pctx, s.cfg.Exchange, keys[i], true, false, *msgs[i])
			if err != nil {
				res[i] = fmt.Errorf("publish event %s to rabbitmq exchange %q: %w", batch[i].ID, s.cfg.Exchange, notConnected(err))
				continue
			}
			confirms[i] = dc
		}
		for _, i := range round {
			dc, ok := confirms[i]
			if !ok {
				continue
			}
			select {
			case <-dc.Done():
			case <-pctx.Done():
				res[i] = fmt.Errorf("publish event %s to rabbitmq: no confirm within %s: %w", batch[i].ID, s.cfg.Timeout, pctx.Err())
				continue
			}
			if !dc.Acked() {
				if ch.IsClosed() {
					res[i] = fmt.Errorf("publish event %s to rabbitmq: the channel closed before the confirm: %w", batch[i].ID, retry.ErrNotConnected)
				} else {
					res[i] = sink.Permanent(fmt.Errorf("publish event %s to rabbitmq exchange %q: the broker nacked it (an internal error of the queue)", batch[i].ID, s.cfg.Exchange))
				}
			}
		}
		// A returned (unroutable) message is returned before its confirm,
		// so every return of this round is in the channel by now.
		byID := map[string]int{}
		for _, i := range round {
			byID[batch[i].ID] = i
		}
		for more := true; more; {
			select {
			case r, open := <-returns:
				if !open { // the channel closed: its confirms failed retriably above
					more = false
					break
				}
				if i, ok := byID[r.MessageId]; ok && res[i] == nil {
					res[i] = sink.Permanent(fmt.Errorf("rabbitmq returned event %s as unroutable: %d %s (exchange %q, routing key %q): bind a queue to it",
						batch[i].ID, r.ReplyCode, r.ReplyText, r.Exchange, r.RoutingKey))
				}
			default:
				more = false
			}
		}
		return res
	})
}

// message builds e's routing key and message; an error is permanent.
func (s *Sink) message(e *event.Event) (string, *amqp.Publishing, error) {
	key, err := s.key.Render(e)
	if err != nil {
		return "", nil, sink.Permanent(fmt.Errorf("render rabbitmq.routing_key for event %q: %w", e.ID, err))
	}
	if len(key) > shortStr {
		return "", nil, sink.OverLimit(e.ID, "the routing key rabbitmq.routing_key rendered", len(key), shortStr, "AMQP's short-string limit")
	}
	h := amqp.Table{}
	route.Headers(e, func(k, v string) {
		if k == route.HeaderBinlogPos {
			n, _ := strconv.ParseInt(v, 10, 64)
			h[k] = n
			return
		}
		h[k] = v
	})
	ts := e.CommitTime
	if ts.IsZero() {
		ts = time.Now()
	}
	payload := e.Payload
	if payload == nil {
		payload = []byte{}
	}
	var contentType string
	switch ce := &s.cfg.CloudEvents; ce.Mode {
	case cloudevent.Binary:
		// AMQP protocol binding, binary mode: application properties
		// cloudEvents:<attribute>; datacontenttype is content-type.
		ce.Attributes(e, func(name, v string) {
			if name == "datacontenttype" {
				contentType = v
				return
			}
			h["cloudEvents:"+name] = v
		})
	case cloudevent.Structured:
		payload, contentType = ce.Structured(e), cloudevent.ContentTypeJSON
	}
	return key, &amqp.Publishing{
		Headers: h, DeliveryMode: amqp.Persistent, ContentType: contentType,
		MessageId: e.ID, Type: e.Type, Timestamp: ts, AppId: "outbox-relay", Body: payload,
	}, nil
}

// shortStr is the most bytes of an AMQP short string: a routing key, a
// message id, a type, a header table's key.
const shortStr = 255

// checkLimits checks m, the message of event id, against AMQP's hard
// limits before it is published: the client library fails a property over
// shortStr only after the publish's method frame is on the wire (the broker
// then closes the channel, and the events behind it fail with it), and the
// broker closes the connection on a properties frame larger than the
// negotiated frame_max. An error is permanent and wraps sink.ErrOverLimit.
func checkLimits(id string, m *amqp.Publishing, frameMax int) error {
	const name = "AMQP's short-string limit"
	for _, p := range []struct{ what, v string }{
		{"the message id (the event id)", m.MessageId}, {"the type (the event type)", m.Type},
		{"the content type", m.ContentType}, {"the app id", m.AppId},
	} {
		if len(p.v) > shortStr {
			return sink.OverLimit(id, p.what, len(p.v), shortStr, name)
		}
	}
	// A content header frame: class, weight, body size and property flags,
	// then the properties set.
	size := 2 + 2 + 8 + 2 + 1 + len(m.MessageId) + 1 + len(m.Type) + 1 + len(m.ContentType) + 1 + len(m.AppId) +
		1 + 8 + 4 // delivery mode, timestamp, the table's length
	for k, v := range m.Headers {
		if len(k) > shortStr {
			return sink.OverLimit(id, fmt.Sprintf("the name of header %q", k[:32]+"..."), len(k), shortStr, name)
		}
		size += 1 + len(k) + 1
		switch v := v.(type) {
		case string:
			size += 4 + len(v)
		default:
			size += 8 // int64
		}
	}
	const frameOverhead = 8 // type, channel, size, frame end
	if frameMax > 0 && size > frameMax-frameOverhead {
		return sink.OverLimit(id, "the message's properties (its headers: metadata, extra columns, trace context)", size, frameMax-frameOverhead,
			"the broker's frame_max less the frame's 8 bytes")
	}
	return nil
}
