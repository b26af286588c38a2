package audit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/outbox-relay/sink/rabbitmq"
)

// Header and prefetch of the RabbitMQ read-back.
const (
	// MarkerHeader marks the message the audit appends to its stream queue
	// to know where the stream ended; audits skip such messages.
	MarkerHeader   = "outbox-relay-audit"
	rabbitPrefetch = 1000
)

// RabbitMQ reads back a rabbitmq sink's messages from queue, which must be
// a stream queue (x-queue-type: stream) bound to the sink's exchange like
// the consumers' queues: a classic or quorum queue is consumed
// destructively, so it is refused, untouched. Reading a stream removes
// nothing. The audit first appends a marker message to the stream (through
// the default exchange, so only this queue gets it) and reads from the
// messages stored at the span's first commit time less a second and skew
// up to its marker. Messages are matched by message_id and claim the range
// by their "gtid" header. The queue is one Log, in stream offset order.
func RabbitMQ(ctx context.Context, c *Comparison, span *Span, rb *rabbitmq.ReadBack, queue string, skew time.Duration) error {
	if span.Events == 0 {
		return nil
	}
	if err := checkStreamQueue(rb, queue); err != nil {
		return err
	}
	conn, ch, err := openChannel(rb)
	if err != nil {
		return err
	}
	defer conn.Close()
	marker, err := appendMarker(ctx, ch, queue)
	if err != nil {
		return err
	}
	if err := ch.Qos(rabbitPrefetch, 0, false); err != nil {
		return fmt.Errorf("set the rabbitmq prefetch: %w", err)
	}
	start := span.First.Add(-time.Second - skew)
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
		if n%(rabbitPrefetch/2) == 0 {
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
		if err := c.Deliver(Delivery{ID: m.MessageId, Log: queue, Offset: offset, Claims: span.Claims(gtid, m.Timestamp)}); err != nil {
			return err
		}
	}
}

// checkStreamQueue makes sure queue exists and is a stream queue, without
// taking a message from any other kind: a stream refuses basic.get (and the
// broker closes the connection that asked), any other queue answers it; a
// message so got is given back at once.
func checkStreamQueue(rb *rabbitmq.ReadBack, queue string) error {
	conn, ch, err := openChannel(rb)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil); err != nil {
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.NotFound {
			return fmt.Errorf("rabbitmq queue %q does not exist: declare a stream queue (x-queue-type: stream) bound to exchange %q like your consumers' queues, and audit from when it was bound", queue, rb.Exchange())
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
	return fmt.Errorf("rabbitmq queue %q is not a stream queue: a classic or quorum queue is consumed destructively, so the audit does not read it; declare a stream queue (x-queue-type: stream) bound to exchange %q like your consumers' queues, and audit that", queue, rb.Exchange())
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
func openChannel(rb *rabbitmq.ReadBack) (*amqp.Connection, *amqp.Channel, error) {
	conn, err := rb.Dial()
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
