package nats

import (
	"context"
	"errors"
	"fmt"
	"strings"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/sink"
)

// Probe connects with the sink's credentials and TLS (once, without
// reconnecting), and looks the stream up: it exists, or create_stream will
// create it on Connect. A fixed subject must be captured by that stream. It
// creates nothing.
func (s *Sink) Probe(ctx context.Context) (string, error) {
	urls := strings.Join(s.cfg.URLs, ", ")
	nc, err := natsgo.Connect(strings.Join(s.cfg.URLs, ","), append(s.opts, natsgo.NoReconnect())...)
	if err != nil {
		err = fmt.Errorf("connect to nats %s: %w", urls, err)
		if errors.Is(err, natsgo.ErrAuthorization) || errors.Is(err, natsgo.ErrAuthExpired) || errors.Is(err, natsgo.ErrAuthRevoked) {
			return "", &sink.Problem{Err: err, Fix: "check nats.user and the password (or the token, creds_file or nkey_file) against the server's accounts"}
		}
		return "", err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return "", fmt.Errorf("nats jetstream: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	st, err := js.Stream(ctx, s.cfg.Stream)
	switch {
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		return "", &sink.Problem{Err: fmt.Errorf("nats %s: %w", nc.ConnectedUrlRedacted(), err),
			Fix: "enable JetStream on the server (nats-server -js, or a jetstream {} block in its config) and for the account"}
	case errors.Is(err, jetstream.ErrStreamNotFound) && s.cfg.CreateStream.Enabled:
		return fmt.Sprintf("nats %s: stream %q does not exist yet; Connect creates it (create_stream: subjects %s)",
			nc.ConnectedUrlRedacted(), s.cfg.Stream, strings.Join(s.cfg.CreateStream.Subjects, ", ")), nil
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return "", &sink.Problem{Err: fmt.Errorf("nats stream %q does not exist", s.cfg.Stream),
			Fix: fmt.Sprintf("create it (nats stream add %s --subjects '%s'), or set create_stream.enabled: true in the sink's nats section", s.cfg.Stream, strings.Join(s.cfg.CreateStream.Subjects, ","))}
	case err != nil:
		return "", fmt.Errorf("look up nats stream %q: %w", s.cfg.Stream, err)
	}
	info := st.CachedInfo()
	found := fmt.Sprintf("nats %s: stream %q exists (subjects %s, duplicate window %s)",
		nc.ConnectedUrlRedacted(), s.cfg.Stream, strings.Join(info.Config.Subjects, ", "), info.Config.Duplicates)
	subject, fixed := s.subject.Fixed()
	if !fixed {
		return found, nil
	}
	owner, err := js.StreamNameBySubject(ctx, subject)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound) || (err == nil && owner != s.cfg.Stream):
		return "", &sink.Problem{Err: fmt.Errorf("nats stream %q does not capture nats.subject %q: no stream would store its messages (each publish fails and is retried for ever)", s.cfg.Stream, subject),
			Fix: fmt.Sprintf("add %q to the stream's subjects, or set nats.subject to one of %s", subject, strings.Join(info.Config.Subjects, ", "))}
	case err != nil:
		return "", fmt.Errorf("find the nats stream of subject %q: %w", subject, err)
	}
	return found + fmt.Sprintf(" and captures %q", subject), nil
}
