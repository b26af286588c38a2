package redis

import (
	"context"
	"fmt"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/sink"
)

// Probe checks that the server answers PING with the sink's credentials,
// that it is not a read-only replica, and, for a fixed stream key, that the
// key is a stream or does not exist yet (the first XADD creates it). It
// writes nothing.
func (s *Sink) Probe(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	if err := s.client.Ping(ctx).Err(); err != nil {
		err = fmt.Errorf("connect to redis %s: %w", s.cfg.Addr, explain(err))
		if goredis.HasErrorPrefix(err, "NOAUTH") || goredis.HasErrorPrefix(err, "WRONGPASS") {
			return "", &sink.Problem{Err: err, Fix: "set redis.username and the password (password, password_file or password_env) to a user the server accepts"}
		}
		return "", err
	}
	// INFO may be refused to an ACL user: then the role is not known.
	if info, err := s.client.Info(ctx, "replication").Result(); err == nil && strings.Contains(info, "role:slave") {
		return "", &sink.Problem{Err: fmt.Errorf("redis %s is a read-only replica: every XADD would fail with READONLY", s.cfg.Addr),
			Fix: "point redis.addr at the primary"}
	}
	key, fixed := s.stream.Fixed()
	if !fixed {
		return fmt.Sprintf("redis %s answers; stream keys come from the template %q, each created by its first XADD", s.cfg.Addr, s.cfg.Stream), nil
	}
	typ, err := s.client.Type(ctx, key).Result()
	if err != nil {
		return "", fmt.Errorf("redis %s: TYPE %q: %w", s.cfg.Addr, key, explain(err))
	}
	switch typ {
	case "none":
		return fmt.Sprintf("redis %s answers; stream %q does not exist yet, the first XADD creates it", s.cfg.Addr, key), nil
	case "stream":
		return fmt.Sprintf("redis %s answers; stream %q exists", s.cfg.Addr, key), nil
	}
	return "", &sink.Problem{Err: fmt.Errorf("redis key %q holds a %s, not a stream: every XADD to it would fail with WRONGTYPE", key, typ),
		Fix: fmt.Sprintf("delete the key (DEL %s) or set redis.stream to another key", key)}
}
