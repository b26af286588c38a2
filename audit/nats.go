package audit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/sink/nats"
)

// natsBatch is how many messages (headers only) one fetch asks for. A fetch
// does not wait: it returns what the stream holds, and none at the end.
const natsBatch = 1000

// NATS reads back a nats sink's JetStream stream into c with an ordered
// consumer (ephemeral, headers only, never acknowledging: reading removes
// nothing), from the messages stored at the span's first commit time less a
// second and skew (a message's time is when the stream stored it, by the
// NATS server's clock) to the stream's last message when the read begins.
// Messages are matched by their "id" header (or Nats-Msg-Id) and claim the
// range by their "gtid" header. The stream is one Log, in stream order.
//
// A stream with interest or work-queue retention removes what its
// consumers acknowledged, so it cannot be audited; that is an error.
func NATS(ctx context.Context, c *Comparison, span *Span, rb *nats.ReadBack, skew time.Duration) error {
	if span.Events == 0 {
		return nil
	}
	nc, err := rb.Connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("nats jetstream: %w", err)
	}
	name := rb.Stream()
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
	start := span.First.Add(-time.Second - skew)
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
		batch, err := cons.FetchNoWait(natsBatch)
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
			if err := c.Deliver(Delivery{ID: id, Log: name, Offset: int64(seq), At: name + "#" + strconv.FormatUint(seq, 10),
				Claims: span.Claims(h.Get("gtid"), meta.Timestamp)}); err != nil {
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
