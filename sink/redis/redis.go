package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/event/cloudevent"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/internal/route"
	"github.com/outbox-relay/outbox-relay/sink/internal/secret"
	"github.com/outbox-relay/outbox-relay/sink/internal/section"
)

// Field names of every stream entry. Extra columns follow as
// "header.<name>".
const (
	FieldPayload      = "payload"
	HeaderFieldPrefix = "header."
	// FieldSink names the sink that wrote the entry (Config.Writer), before
	// the payload; what Recover checks before it trusts an entry.
	FieldSink = "relay_sink"
)

// Sink appends outbox events to Redis streams. Create it with New.
type Sink struct {
	cfg    Config
	log    *slog.Logger
	stream *route.Template
	client *goredis.Client
	// maxBulk is the server's proto-max-bulk-len, read by Connect: the most
	// bytes of one argument of a command (a key, a field, a value).
	maxBulk int64
}

// defaultMaxBulk is Redis's default proto-max-bulk-len (512 MB), assumed
// when the server does not let the sink read its setting (CONFIG is
// disabled or denied, as managed services do).
const defaultMaxBulk = 512 << 20

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
	stream, client, err := cfg.reach()
	if err != nil {
		return nil, err
	}
	return &Sink{cfg: cfg, log: section.Logger(logger, "redis"), stream: stream, client: client}, nil
}

// reach is what the sink and its Auditor build alike of a config: the
// stream key's template and a client of the server.
func (c Config) reach() (*route.Template, *goredis.Client, error) {
	stream, err := route.Parse("redis.stream", c.Stream)
	if err != nil {
		return nil, nil, err
	}
	client, err := newClient(c)
	if err != nil {
		return nil, nil, err
	}
	return stream, client, nil
}

// newClient is a client of cfg's server, with its TLS and credentials.
func newClient(cfg Config) (*goredis.Client, error) {
	tlsCfg, err := cfg.TLS.Build("redis.tls")
	if err != nil {
		return nil, err
	}
	pw, err := secret.Resolve("redis.password", cfg.Password, cfg.PasswordFile, cfg.PasswordEnv)
	if err != nil {
		return nil, err
	}
	return goredis.NewClient(&goredis.Options{
		Addr: cfg.Addr, DB: cfg.DB, Username: cfg.Username, Password: pw, TLSConfig: tlsCfg,
		DialTimeout: cfg.Timeout, ReadTimeout: cfg.Timeout, WriteTimeout: cfg.Timeout,
		PoolSize: cfg.PoolSize, MaxRetries: -1, // retries belong to the pipeline
		ContextTimeoutEnabled: true,
		ClientName:            "outbox-relay",
		DisableIdentity:       true,
	}), nil
}

// Connect checks that the server answers PING with these credentials.
func (s *Sink) Connect(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	if err := s.client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("connect to redis %s: %w", s.cfg.Addr, explain(err))
	}
	s.maxBulk = defaultMaxBulk
	if v, err := s.client.ConfigGet(ctx, "proto-max-bulk-len").Result(); err == nil {
		if n, err := strconv.ParseInt(v["proto-max-bulk-len"], 10, 64); err == nil && n > 0 {
			s.maxBulk = n
		}
	}
	s.log.Info("connected to redis", slog.String("addr", s.cfg.Addr))
	return nil
}

// Close closes the connections; Write has returned, nothing is pending.
func (s *Sink) Close(context.Context) error {
	if err := s.client.Close(); err != nil && !errors.Is(err, goredis.ErrClosed) {
		return fmt.Errorf("close redis client: %w", err)
	}
	return nil
}

// Write appends batch and returns nil once Redis answered every XADD with
// the entry's id, or a *sink.BatchError naming each failed event. XADDs are
// pipelined in rounds of at most one event per aggregate
// (sink.SendOrdered): a failure never lets a later event of an aggregate in
// ahead of an earlier one.
func (s *Sink) Write(ctx context.Context, batch []*event.Event) error {
	args := make([]*goredis.XAddArgs, len(batch))
	return sink.SendOrdered(batch, func(round []int) map[int]error {
		res := make(map[int]error, len(round))
		pipe := s.client.Pipeline()
		cmds := map[int]*goredis.StringCmd{}
		for _, i := range round {
			if args[i] == nil {
				a, err := s.xadd(batch[i])
				if err != nil {
					res[i] = err
					continue
				}
				args[i] = a
			}
			cmds[i] = pipe.XAdd(ctx, args[i])
		}
		if len(cmds) == 0 {
			return res
		}
		_, _ = pipe.Exec(ctx) // each command carries its own error
		for i, c := range cmds {
			if err := c.Err(); err != nil {
				res[i] = classify(fmt.Errorf("xadd event %s to redis stream %q: %w", batch[i].ID, args[i].Stream, explain(err)))
			}
		}
		return res
	})
}

// xadd builds e's XADD; an error is permanent.
func (s *Sink) xadd(e *event.Event) (*goredis.XAddArgs, error) {
	key, err := s.stream.Render(e)
	if err != nil {
		return nil, sink.Permanent(fmt.Errorf("render redis.stream for event %q: %w", e.ID, err))
	}
	if key == "" {
		return nil, sink.Permanent(fmt.Errorf("redis.stream rendered an empty key for event %q", e.ID))
	}
	values := make([]any, 0, 2*(12+len(e.Headers)))
	route.Metadata(e, func(k, v string) { values = append(values, k, v) })
	for _, h := range e.Headers {
		values = append(values, HeaderFieldPrefix+h.Key, h.Value)
	}
	payload := e.Payload
	if payload == nil {
		payload = []byte{}
	}
	switch ce := &s.cfg.CloudEvents; ce.Mode {
	case cloudevent.Binary:
		// No Redis binding exists: the Kafka binding's ce_ names, as fields.
		ce.Attributes(e, func(name, v string) { values = append(values, "ce_"+name, v) })
	case cloudevent.Structured:
		payload = ce.Structured(e)
		values = append(values, "content-type", cloudevent.ContentTypeJSON)
	}
	if s.cfg.Writer != "" {
		values = append(values, FieldSink, s.cfg.Writer)
	}
	values = append(values, FieldPayload, payload)
	if err := checkLimits(e.ID, key, values, s.maxBulk); err != nil {
		return nil, err
	}
	a := &goredis.XAddArgs{Stream: key, Values: values}
	if s.cfg.MaxLen > 0 {
		a.MaxLen, a.Approx = s.cfg.MaxLen, true
	}
	return a, nil
}

// explain adds what to do to the server's answers an operator must act on.
func explain(err error) error {
	switch {
	case goredis.IsOOMError(err):
		return fmt.Errorf("%w (redis is out of memory at maxmemory: retried until consumers trim the stream, redis.max_len is set, or maxmemory is raised)", err)
	case goredis.IsReadOnlyError(err):
		return fmt.Errorf("%w (connected to a read-only replica: point redis.addr at the primary; retried)", err)
	case goredis.HasErrorPrefix(err, "NOAUTH"), goredis.HasErrorPrefix(err, "WRONGPASS"):
		return fmt.Errorf("%w (check redis.username and the password)", err)
	}
	return err
}

// classify marks err permanent when retrying the same entry cannot help:
// the key holds another type (WRONGTYPE), or a value is larger than the
// server takes. Everything else is retriable: network errors, timeouts,
// OOM, READONLY, LOADING, MASTERDOWN.
func classify(err error) error {
	var re goredis.Error
	if !errors.As(err, &re) {
		return err
	}
	msg := re.Error()
	if strings.HasPrefix(msg, "WRONGTYPE") || strings.Contains(msg, "exceeds maximum allowed size") {
		return sink.Permanent(err)
	}
	return err
}

// checkLimits checks the XADD of event id to stream key with values (field,
// value, ...) against the server's proto-max-bulk-len (maxBulk) before it is
// sent: the server answers a longer argument with a protocol error and
// closes the connection, failing the commands pipelined with it, again on
// every retry. An error is permanent and wraps sink.ErrOverLimit.
func checkLimits(id, key string, values []any, maxBulk int64) error {
	const name = "the server's proto-max-bulk-len"
	if maxBulk <= 0 { // not connected yet
		maxBulk = defaultMaxBulk
	}
	if int64(len(key)) > maxBulk {
		return sink.OverLimit(id, "the stream key", len(key), int(maxBulk), name)
	}
	for i := 0; i+1 < len(values); i += 2 {
		field, _ := values[i].(string)
		var n int
		switch v := values[i+1].(type) {
		case string:
			n = len(v)
		case []byte:
			n = len(v)
		}
		if int64(len(field)) > maxBulk {
			n = len(field)
		}
		if int64(n) > maxBulk {
			if len(field) > 64 {
				field = field[:64] + "..."
			}
			return sink.OverLimit(id, fmt.Sprintf("field %q", field), n, int(maxBulk), name)
		}
	}
	return nil
}
