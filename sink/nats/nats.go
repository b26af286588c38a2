package nats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/textproto"
	"strings"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/event/cloudevent"
	"github.com/outbox-relay/outbox-relay/retry"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/internal/route"
	"github.com/outbox-relay/outbox-relay/sink/internal/secret"
	"github.com/outbox-relay/outbox-relay/sink/internal/section"
)

// Sink publishes outbox events to NATS JetStream. Create it with New.
type Sink struct {
	cfg     Config
	log     *slog.Logger
	subject *route.Template
	opts    []natsgo.Option

	mu sync.Mutex // guards nc and js against Close during a Write
	nc *natsgo.Conn
	js jetstream.JetStream
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
	subject, auth, err := cfg.reach()
	if err != nil {
		return nil, err
	}
	s := &Sink{cfg: cfg, log: section.Logger(logger, "nats"), subject: subject}
	s.opts = []natsgo.Option{
		natsgo.Name(cfg.Name),
		natsgo.Timeout(cfg.Timeout),
		// Reconnect for ever, but never buffer a publish while
		// disconnected: a publish then fails at once, and the pipeline
		// retries it in order, rather than a buffered one reaching the
		// server after the sink reported it failed.
		natsgo.MaxReconnects(-1),
		natsgo.ReconnectWait(cfg.ReconnectWait),
		natsgo.ReconnectBufSize(-1),
		natsgo.DisconnectErrHandler(func(_ *natsgo.Conn, err error) {
			if err != nil {
				s.log.Warn("disconnected from nats", slog.Any("err", err))
			}
		}),
		natsgo.ReconnectHandler(func(nc *natsgo.Conn) {
			s.log.Info("reconnected to nats", slog.String("server", nc.ConnectedUrlRedacted()))
		}),
	}
	s.opts = append(s.opts, auth...)
	return s, nil
}

// reach is what the sink and its Auditor build alike of a config: the
// subject's template, and the client options of its TLS and credentials.
func (c Config) reach() (*route.Template, []natsgo.Option, error) {
	subject, err := route.Parse("nats.subject", c.Subject)
	if err != nil {
		return nil, nil, err
	}
	auth, err := authOptions(c)
	if err != nil {
		return nil, nil, err
	}
	return subject, auth, nil
}

// authOptions are the client options for cfg's TLS and credentials.
func authOptions(cfg Config) ([]natsgo.Option, error) {
	var opts []natsgo.Option
	tlsCfg, err := cfg.TLS.Build("nats.tls")
	if err != nil {
		return nil, err
	}
	if tlsCfg != nil {
		opts = append(opts, natsgo.Secure(tlsCfg))
	}
	switch {
	case cfg.User != "":
		pw, err := secret.Resolve("nats.password", cfg.Password, cfg.PasswordFile, cfg.PasswordEnv)
		if err != nil {
			return nil, err
		}
		opts = append(opts, natsgo.UserInfo(cfg.User, pw))
	case secret.Count(cfg.Token, cfg.TokenFile, cfg.TokenEnv) > 0:
		tok, err := secret.Resolve("nats.token", cfg.Token, cfg.TokenFile, cfg.TokenEnv)
		if err != nil {
			return nil, err
		}
		opts = append(opts, natsgo.Token(tok))
	case cfg.CredsFile != "":
		opts = append(opts, natsgo.UserCredentials(cfg.CredsFile))
	case cfg.NKeyFile != "":
		o, err := natsgo.NkeyOptionFromSeed(cfg.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("nats.nkey_file: %w", err)
		}
		opts = append(opts, o)
	}
	return opts, nil
}

// Connect dials the servers and checks that the stream exists, creating it
// when create_stream.enabled.
func (s *Sink) Connect(ctx context.Context) error {
	nc, err := natsgo.Connect(strings.Join(s.cfg.URLs, ","), s.opts...)
	if err != nil {
		return fmt.Errorf("connect to nats %s: %w", strings.Join(s.cfg.URLs, ", "), err)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(s.cfg.MaxPending),
		jetstream.WithPublishAsyncTimeout(s.cfg.AckTimeout))
	if err != nil {
		nc.Close()
		return fmt.Errorf("nats jetstream: %w", err)
	}
	if err := s.ensureStream(ctx, js); err != nil {
		nc.Close()
		return err
	}
	s.mu.Lock()
	s.nc, s.js = nc, js
	s.mu.Unlock()
	s.log.Info("connected to nats", slog.String("server", nc.ConnectedUrlRedacted()), slog.String("stream", s.cfg.Stream))
	return nil
}

func (s *Sink) ensureStream(ctx context.Context, js jetstream.JetStream) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	_, err := js.Stream(ctx, s.cfg.Stream)
	switch {
	case err == nil:
		return nil
	case !errors.Is(err, jetstream.ErrStreamNotFound):
		return fmt.Errorf("look up nats stream %q: %w", s.cfg.Stream, err)
	case !s.cfg.CreateStream.Enabled:
		return fmt.Errorf("nats stream %q does not exist: create it, or set create_stream.enabled: true in the sink's nats section", s.cfg.Stream)
	}
	cs := s.cfg.CreateStream
	sc := jetstream.StreamConfig{Name: s.cfg.Stream, Subjects: cs.Subjects, Replicas: cs.Replicas,
		Duplicates: cs.DuplicateWindow, MaxMsgSize: cs.MaxMsgSize}
	switch cs.Retention {
	case "interest":
		sc.Retention = jetstream.InterestPolicy
	case "workqueue":
		sc.Retention = jetstream.WorkQueuePolicy
	default:
		sc.Retention = jetstream.LimitsPolicy
	}
	if cs.Storage == "memory" {
		sc.Storage = jetstream.MemoryStorage
	}
	if _, err := js.CreateStream(ctx, sc); err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return fmt.Errorf("create nats stream %q: %w", s.cfg.Stream, err)
	}
	s.log.Info("created nats stream", slog.String("stream", s.cfg.Stream), slog.Any("subjects", cs.Subjects))
	return nil
}

// Close drains nothing (Write has returned: every publish is acknowledged
// or failed) and closes the connection.
func (s *Sink) Close(context.Context) error {
	s.mu.Lock()
	nc := s.nc
	s.nc, s.js = nil, nil
	s.mu.Unlock()
	if nc != nil {
		nc.Close()
	}
	return nil
}

// Write publishes batch and returns nil once JetStream acknowledged every
// message (a PubAck: stored, or dropped as a duplicate of its Nats-Msg-Id),
// or a *sink.BatchError naming each failed event. Messages are published
// asynchronously in rounds that hold at most one event per aggregate
// (sink.SendOrdered), so a failure never lets a later event of an
// aggregate in ahead of an earlier one.
func (s *Sink) Write(ctx context.Context, batch []*event.Event) error {
	s.mu.Lock()
	nc, js := s.nc, s.js
	s.mu.Unlock()
	if js == nil {
		return errors.New("nats sink is not connected")
	}
	maxPayload := int(nc.MaxPayload())
	msgs := make([]*natsgo.Msg, len(batch))
	return sink.SendOrdered(batch, func(round []int) map[int]error {
		res := make(map[int]error, len(round))
		futures := make(map[int]jetstream.PubAckFuture, len(round))
		for _, i := range round {
			if msgs[i] == nil {
				m, err := s.message(batch[i])
				if err == nil {
					err = checkLimits(batch[i].ID, m, maxPayload)
				}
				if err != nil {
					res[i] = err
					continue
				}
				msgs[i] = m
			}
			f, err := js.PublishMsgAsync(msgs[i], jetstream.WithMsgID(msgID(batch[i])))
			if err != nil {
				res[i] = s.classify(fmt.Errorf("publish event %s to nats subject %q: %w", batch[i].ID, msgs[i].Subject, err))
				continue
			}
			futures[i] = f
		}
		timeout := time.NewTimer(s.cfg.AckTimeout + time.Second)
		defer timeout.Stop()
		for _, i := range round {
			f, ok := futures[i]
			if !ok {
				continue
			}
			select {
			case <-f.Ok():
			case err := <-f.Err():
				res[i] = s.classify(fmt.Errorf("publish event %s to nats subject %q: %w", batch[i].ID, msgs[i].Subject, err))
			case <-timeout.C:
				res[i] = fmt.Errorf("publish event %s to nats subject %q: no PubAck within %s: %w", batch[i].ID, msgs[i].Subject, s.cfg.AckTimeout, context.DeadlineExceeded)
			case <-ctx.Done():
				res[i] = ctx.Err()
			}
		}
		return res
	})
}

// msgID is e's Nats-Msg-Id: its id, or for a replayed event its id and
// the replay job's ("<id>/replay/<job>"), so that JetStream's duplicate
// window does not drop the replay as a copy of the live message.
func msgID(e *event.Event) string {
	if job := e.Replay(); job != "" {
		return e.ID + "/replay/" + job
	}
	return e.ID
}

// message builds e's NATS message; an error is permanent.
func (s *Sink) message(e *event.Event) (*natsgo.Msg, error) {
	subject, err := s.subject.Render(e)
	if err != nil {
		return nil, sink.Permanent(fmt.Errorf("render nats.subject for event %q: %w", e.ID, err))
	}
	if err := validSubject(subject); err != nil {
		return nil, sink.Permanent(fmt.Errorf("nats.subject rendered %q for event %q: %w", subject, e.ID, err))
	}
	m := natsgo.NewMsg(subject)
	m.Data = e.Payload
	var bad error
	route.Headers(e, func(k, v string) {
		if strings.ContainsAny(k, ": \r\n") || strings.ContainsAny(v, "\r\n") {
			bad = fmt.Errorf("header %q of event %q has a line break or its name a colon or space: a NATS header cannot carry it", k, e.ID)
			return
		}
		m.Header.Add(k, v)
	})
	switch ce := &s.cfg.CloudEvents; ce.Mode {
	case cloudevent.Binary:
		ce.Attributes(e, func(name, v string) {
			if name == "datacontenttype" {
				name = "content-type"
			} else {
				name = "ce-" + name
			}
			if strings.ContainsAny(v, "\r\n") {
				bad = fmt.Errorf("CloudEvents attribute %q of event %q has a line break: a NATS header cannot carry it", name, e.ID)
			}
			m.Header.Set(name, v)
		})
	case cloudevent.Structured:
		m.Data = ce.Structured(e)
		m.Header.Set("content-type", cloudevent.ContentTypeJSON)
	}
	if bad != nil {
		return nil, sink.Permanent(bad)
	}
	return m, nil
}

// maxHeader is the most bytes of a message's headers JetStream stores: the
// server rejects more ("header size exceeds maximum allowed of 64k"), an
// error that says nothing retrying could change.
const maxHeader = 65535

// checkLimits checks m, the message of event id, against NATS's hard limits
// before it is published: its headers (the Nats-Msg-Id JetStream adds
// included) within JetStream's maxHeader, and headers and data within the
// server's max_payload (maxPayload, from its INFO; 0: unknown). An error is
// permanent and wraps sink.ErrOverLimit.
func checkLimits(id string, m *natsgo.Msg, maxPayload int) error {
	// As the client encodes them: "NATS/1.0\r\n", "key: value\r\n" each, "\r\n".
	hdr := len("NATS/1.0\r\n") + len(jetstream.MsgIDHeader) + len(textproto.TrimString(id)) + 4 + 2
	for k, vs := range m.Header {
		for _, v := range vs {
			hdr += len(k) + len(textproto.TrimString(v)) + 4
		}
	}
	if hdr > maxHeader {
		return sink.OverLimit(id, "the message's headers (metadata, extra columns, trace context, Nats-Msg-Id)", hdr, maxHeader, "JetStream's header limit")
	}
	if maxPayload > 0 && hdr+len(m.Data) > maxPayload {
		return sink.OverLimit(id, "the message (headers and data)", hdr+len(m.Data), maxPayload, "the server's max_payload")
	}
	return nil
}

// permanentCodes are the JetStream errors retrying the same message cannot fix.
var permanentCodes = map[jetstream.ErrorCode]bool{
	jetstream.JSErrCodeStreamMessageExceedsMaximum: true,
	jetstream.JSErrCodeBadRequest:                  true,
	jsErrCodeHeaderExceedsMaximum:                  true,
}

// jsErrCodeHeaderExceedsMaximum is JetStream's answer to headers over
// maxHeader (the client library names no constant for it); checkLimits
// keeps such a message from being sent at all.
const jsErrCodeHeaderExceedsMaximum jetstream.ErrorCode = 10097

// classify marks err permanent when retrying the same message cannot help:
// larger than the server's max_payload or the stream's max_msg_size, a
// malformed message. Everything else (disconnected, timeouts, no stream
// answering, a stream leader election) is retriable; a lost connection is
// marked retry.ErrNotConnected and a PubAck timeout
// context.DeadlineExceeded, so the pipeline probes for the server's return
// and the metrics count them as connection and timeout failures.
func (s *Sink) classify(err error) error {
	if errors.Is(err, natsgo.ErrMaxPayload) || errors.Is(err, natsgo.ErrBadSubject) || errors.Is(err, natsgo.ErrBadHeaderMsg) {
		return sink.Permanent(err)
	}
	var api *jetstream.APIError
	if errors.As(err, &api) && permanentCodes[api.ErrorCode] {
		return sink.Permanent(err)
	}
	switch {
	case errors.Is(err, jetstream.ErrNoStreamResponse):
		return fmt.Errorf("%w (is a stream capturing the subject? see nats.stream and create_stream)", err)
	case errors.Is(err, natsgo.ErrReconnectBufExceeded), errors.Is(err, natsgo.ErrConnectionReconnecting),
		errors.Is(err, natsgo.ErrConnectionClosed), errors.Is(err, natsgo.ErrDisconnected), errors.Is(err, natsgo.ErrNoServers):
		return fmt.Errorf("%w (%w to nats: nothing is buffered meanwhile; the client reconnects every %s)", err, retry.ErrNotConnected, s.cfg.ReconnectWait)
	case errors.Is(err, jetstream.ErrAsyncPublishTimeout):
		return fmt.Errorf("%w (no PubAck within ack_timeout %s: %w)", err, s.cfg.AckTimeout, context.DeadlineExceeded)
	}
	return err
}
