package rabbitmq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/internal/section"
)

// Header and prefetch of the audit's read.
const (
	// MarkerHeader marks the message the audit appends to its stream queue
	// to know where the stream ended; audits skip such messages.
	MarkerHeader  = "outbox-relay-audit"
	auditPrefetch = 1000
)

// Auditor reads a sink's messages back for `outbox-relay audit`
// (sink.Auditor) from a stream queue bound like the consumers' queues: the
// routing key each event is published with, and how to reach the broker
// with the sink's credentials. It is used by one goroutine.
type Auditor struct {
	cfg Config
	reach
	queue string
	skew  time.Duration
}

var _ sink.Auditor = (*Auditor)(nil)

// NewAuditor returns the Auditor of a sink config (its defaults applied
// and validated here) that reads queue; skew is how far the broker's clock
// may be behind the source's. It does not touch the network.
func NewAuditor(c Config, queue string, skew time.Duration) (*Auditor, error) {
	return section.Build(c, func(c Config) (*Auditor, error) { return buildAuditor(c, queue, skew) })
}

// buildAuditor returns the Auditor of a sink config with its defaults
// applied and validated (by NewAuditor, or by config.Load).
func buildAuditor(c Config, queue string, skew time.Duration) (*Auditor, error) {
	if queue == "" {
		return nil, fmt.Errorf("a rabbitmq queue is consumed destructively, so the audit reads a stream queue bound for it: declare one (x-queue-type: stream) bound to exchange %q like your consumers' queues and pass it as --queue", c.Exchange)
	}
	r, err := c.reach()
	if err != nil {
		return nil, err
	}
	return &Auditor{cfg: c, reach: r, queue: queue, skew: skew}, nil
}

// Dest is the routing key the sink publishes e with.
func (a *Auditor) Dest(e *event.Event) (string, error) { return a.key.Render(e) }

// Close does nothing: ReadBack closes its connections.
func (a *Auditor) Close() error { return nil }

// ReadBack reads the sink's messages from the Auditor's queue, which must
// be a stream queue (x-queue-type: stream) bound to the sink's exchange like
// the consumers' queues: a classic or quorum queue is consumed
// destructively, so it is refused, untouched. Reading a stream removes
// nothing. It first appends a marker message to the stream (through the
// default exchange, so only this queue gets it) and reads from the messages
// stored at from less the clock skew up to its marker. Messages carry their
// message_id and "gtid" header. The queue is one Log, in stream offset
// order.
func (a *Auditor) ReadBack(ctx context.Context, from time.Time, _ []string, each func(sink.Stored) error) error {
	queue := a.queue
	if err := a.checkStreamQueue(); err != nil {
		return err
	}
	conn, ch, err := a.openChannel()
	if err != nil {
		return err
	}
	defer conn.Close()
	marker, err := appendMarker(ctx, ch, queue)
	if err != nil {
		return err
	}
	if err := ch.Qos(auditPrefetch, 0, false); err != nil {
		return fmt.Errorf("set the rabbitmq prefetch: %w", err)
	}
	start := from.Add(-a.skew)
	msgs, err := ch.ConsumeWithContext(ctx, queue, "", false, false, false, false, amqp.Table{"x-stream-offset": start})
	if err != nil {
		return fmt.Errorf("read rabbitmq stream queue %q: %w", queue, err)
	}
	for n := 1; ; n++ {
		var m amqp.Delivery
		var ok bool
		select {
		case m, ok = <-msgs:
		case <-ctx.Done():
			return ctx.Err()
		}
		if !ok {
			return fmt.Errorf("read rabbitmq stream queue %q: the channel closed before the audit's marker came", queue)
		}
		if n%(auditPrefetch/2) == 0 {
			if err := m.Ack(true); err != nil { // credit for the next messages; a stream keeps them
				return fmt.Errorf("acknowledge on rabbitmq stream queue %q: %w", queue, err)
			}
		}
		if m.MessageId == marker {
			return nil
		}
		if _, isMarker := m.Headers[MarkerHeader]; isMarker {
			continue
		}
		offset, _ := m.Headers["x-stream-offset"].(int64)
		gtid, _ := m.Headers["gtid"].(string)
		if err := each(sink.Stored{ID: m.MessageId, GTID: gtid, Time: m.Timestamp, Log: queue, Offset: offset}); err != nil {
			return err
		}
	}
}

// checkStreamQueue makes sure the queue exists and is a stream queue,
// without taking a message from any other kind: a stream refuses basic.get
// (and the broker closes the connection that asked), any other queue
// answers it; a message so got is given back at once.
func (a *Auditor) checkStreamQueue() error {
	queue := a.queue
	conn, ch, err := a.openChannel()
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil); err != nil {
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.NotFound {
			return fmt.Errorf("rabbitmq queue %q does not exist: declare a stream queue (x-queue-type: stream) bound to exchange %q like your consumers' queues, and audit from when it was bound", queue, a.cfg.Exchange)
		}
		return fmt.Errorf("look up rabbitmq queue %q: %w", queue, err)
	}
	m, got, err := ch.Get(queue, false)
	var ae *amqp.Error
	switch {
	case errors.As(err, &ae) && ae.Code == amqp.NotImplemented:
		return nil // a stream
	case err != nil:
		return fmt.Errorf("look up rabbitmq queue %q: %w", queue, err)
	case got:
		if err := m.Nack(false, true); err != nil {
			return fmt.Errorf("rabbitmq queue %q is not a stream queue, and giving back the message taken to find out failed (it returns to the queue when the connection closes): %w", queue, err)
		}
	}
	return fmt.Errorf("rabbitmq queue %q is not a stream queue: a classic or quorum queue is consumed destructively, so the audit does not read it; declare a stream queue (x-queue-type: stream) bound to exchange %q like your consumers' queues, and audit that", queue, a.cfg.Exchange)
}

// appendMarker publishes a marker to queue through the default exchange and
// waits for the broker's confirm: everything stored before it is what the
// audit reads.
func appendMarker(ctx context.Context, ch *amqp.Channel, queue string) (string, error) {
	if err := ch.Confirm(false); err != nil {
		return "", fmt.Errorf("open a confirming rabbitmq channel: %w", err)
	}
	b := make([]byte, 12)
	rand.Read(b)
	id := "outbox-relay-audit-end-" + hex.EncodeToString(b)
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, amqp.Publishing{MessageId: id,
		Headers: amqp.Table{MarkerHeader: "end"}, Timestamp: time.Now(), AppId: "outbox-relay audit"})
	if err == nil {
		var ok bool
		if ok, err = dc.WaitContext(ctx); err == nil && !ok {
			err = errors.New("the broker nacked it")
		}
	}
	if err != nil {
		return "", fmt.Errorf("append the audit's end marker to rabbitmq stream queue %q (the audit's user needs to write to it through the default exchange): %w", queue, err)
	}
	return id, nil
}

// openChannel dials the broker and opens a channel; closing the connection
// closes both.
func (a *Auditor) openChannel() (*amqp.Connection, *amqp.Channel, error) {
	conn, err := dial(a.cfg, a.tls, a.pw, "outbox-relay audit")
	if err != nil {
		return nil, nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("open a rabbitmq channel: %w", err)
	}
	return conn, ch, nil
}
