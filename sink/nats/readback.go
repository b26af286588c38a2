package nats

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/internal/route"
	"github.com/outbox-relay/outbox-relay/sink/internal/section"
)

// auditBatch is how many messages (headers only) one fetch of the audit's
// read asks for. A fetch does not wait: it returns what the stream holds,
// and none at the end.
const auditBatch = 1000

// Auditor reads a sink's JetStream stream back for `outbox-relay audit`
// (sink.Auditor): the subject each event goes to, the stream, and how to
// reach the servers with the sink's credentials. It is used by one
// goroutine.
type Auditor struct {
	cfg     Config
	subject *route.Template
	opts    []natsgo.Option
	skew    time.Duration
}

var _ sink.Auditor = (*Auditor)(nil)

// NewAuditor returns the Auditor of a sink config (its defaults applied
// and validated here); skew is how far the NATS server's clock may be
// behind the source's. It does not touch the network.
func NewAuditor(c Config, skew time.Duration) (*Auditor, error) {
	return section.Build(c, func(c Config) (*Auditor, error) { return buildAuditor(c, skew) })
}

// buildAuditor returns the Auditor of a sink config with its defaults
// applied and validated (by NewAuditor, or by config.Load).
func buildAuditor(c Config, skew time.Duration) (*Auditor, error) {
	t, auth, err := c.reach()
	if err != nil {
		return nil, err
	}
	opts := append([]natsgo.Option{natsgo.Name(c.Name + " audit"), natsgo.Timeout(c.Timeout), natsgo.MaxReconnects(-1), natsgo.ReconnectWait(c.ReconnectWait)}, auth...)
	return &Auditor{cfg: c, subject: t, opts: opts, skew: skew}, nil
}

// Dest is the subject the sink publishes e to.
func (a *Auditor) Dest(e *event.Event) (string, error) { return a.subject.Render(e) }

// Close does nothing: ReadBack closes its connection.
func (a *Auditor) Close() error { return nil }

// ReadBack reads the sink's stream (nats.stream; the subjects are all in
// it) with an ordered consumer (ephemeral, headers only, never
// acknowledging: reading removes nothing), from the messages stored at from
// less the clock skew (a message's time is when the stream stored it, by
// the NATS server's clock) to the stream's last message when the read
// begins. Messages carry their "id" header (or Nats-Msg-Id) and "gtid"
// header. The stream is one Log, in stream order.
//
// A stream with interest or work-queue retention removes what its
// consumers acknowledged, so it cannot be audited; that is an error.
func (a *Auditor) ReadBack(ctx context.Context, from time.Time, _ []string, each func(sink.Stored) error) error {
	nc, err := natsgo.Connect(strings.Join(a.cfg.URLs, ","), a.opts...)
	if err != nil {
		return fmt.Errorf("connect to nats %s: %w", strings.Join(a.cfg.URLs, ", "), err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("nats jetstream: %w", err)
	}
	name := a.cfg.Stream
	st, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("nats stream %q does not exist: every event of the range is missing (check nats.stream)", name)
	}
	if err != nil {
		return fmt.Errorf("look up nats stream %q: %w", name, err)
	}
	info := st.CachedInfo()
	if r := info.Config.Retention; r != jetstream.LimitsPolicy {
		return fmt.Errorf("nats stream %q has %s retention: it removes what its consumers acknowledged, so it cannot be audited; audit a stream with limits retention that captures the same subjects (a mirror or source of it)", name, r)
	}
	start := from.Add(-a.skew)
	last := info.State.LastSeq
	if info.State.Msgs == 0 || info.State.LastTime.Before(start) {
		return nil
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartTimePolicy,
		OptStartTime: &start, HeadersOnly: true})
	if err != nil {
		return fmt.Errorf("create an ordered consumer on nats stream %q (the audit's user needs the right to): %w", name, err)
	}
	for {
		batch, err := cons.FetchNoWait(auditBatch)
		if err != nil {
			return fmt.Errorf("read nats stream %q: %w", name, err)
		}
		n, done := 0, false
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				return fmt.Errorf("read nats stream %q: %w", name, err)
			}
			seq := meta.Sequence.Stream
			if seq > last {
				done = true
				continue
			}
			h := m.Headers()
			id := h.Get("id")
			if id == "" {
				id = h.Get("Nats-Msg-Id")
			}
			if err := each(sink.Stored{ID: id, GTID: h.Get("gtid"), Time: meta.Timestamp, Log: name, Offset: int64(seq),
				At: name + "#" + strconv.FormatUint(seq, 10)}); err != nil {
				return err
			}
			if seq == last || meta.NumPending == 0 {
				done = true
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return fmt.Errorf("read nats stream %q: %w", name, err)
		}
		if done || n == 0 {
			return ctx.Err()
		}
	}
}
