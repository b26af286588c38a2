package audit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/sink/kafka"
)

// Kafka reads back a kafka sink's topics into c with the sink's own reader
// (kafka.ReadBack, which the sink's restart read-back uses too): every
// partition of each topic, from the offsets of the span's first commit time
// (a second earlier: commit times have whole seconds; a record's timestamp
// is its commit time) to the partition's end when the read begins. Records
// are matched by their "id" header and claim the range by their "gtid"
// header. Each partition is a Log ("topic[p]"), in offset order. A topic
// that does not exist holds nothing: its events are missing.
func Kafka(ctx context.Context, c *Comparison, span *Span, topics []string, rb *kafka.ReadBack) error {
	if span.Events == 0 || len(topics) == 0 {
		return nil
	}
	from := span.First.Add(-time.Second).UnixMilli()
	for _, topic := range topics {
		n, err := rb.Partitions(ctx, topic)
		if errors.Is(err, kafkago.UnknownTopicOrPartition) {
			continue
		}
		if err != nil {
			return err
		}
		ends, err := rb.Offsets(ctx, topic, n, kafkago.LastOffset)
		if err != nil {
			return err
		}
		starts, err := rb.Offsets(ctx, topic, n, from)
		if err != nil {
			return fmt.Errorf("at %s: %w", span.First, err)
		}
		for p := range n {
			if starts[p] < 0 || starts[p] >= ends[p] {
				continue // nothing at or after the span's first second
			}
			log := topic + "[" + strconv.Itoa(p) + "]"
			err := rb.Read(ctx, topic, p, starts[p], ends[p], func(r kafka.Record) error {
				return c.Deliver(Delivery{ID: r.ID, Log: log, Offset: r.Offset, Claims: span.Claims(r.GTID, r.Time)})
			})
			if err != nil {
				return err
			}
		}
	}
	return nil
}
