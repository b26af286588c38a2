package kafkasource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/event"
)

// Source reads one partition as a pipeline.Source: each record is one
// transaction holding its event (Decode), at Position(topic,
// partition, offset+1). A record that is not the relay's is handed on
// without events (its position moves the cursors), with a warning.
type Source struct {
	Brokers   []string
	Dialer    *kafkago.Dialer // nil: kafkago.DefaultDialer
	Topic     string
	Partition int
	// Decode reads back a record's event (Topics.Decode).
	Decode func(kafkago.Message) (*event.Event, error)
	// Changes, if set (the shared stream only), are row changes of the
	// endpoints table to apply: each is handed on as a transaction without
	// events at the position of the last record handed on, so it applies
	// from the next record on (gateway.Hub.Run's changed).
	Changes <-chan []event.Change
	// Lag, if set, is told after each record how many records the
	// partition holds after it (the high watermark's distance).
	Lag func(records int64)
	// Expired, if set, is told how many records the stream's start was
	// before the partition's first offset: records the topic's retention
	// deleted before this stream (an endpoint's cursor, or the group's
	// committed offset) read them. Run logs them as an error and starts at
	// the first record.
	Expired func(records int64)
	Logger  *slog.Logger
}

// Run implements pipeline.Source: it reads from position from (a Position
// of this partition) until ctx ends or the partition cannot be read.
func (s *Source) Run(ctx context.Context, from event.Position, handle func(context.Context, *event.Txn) error) error {
	name, next, ok := Offset(from)
	if want := fmt.Sprintf("%s[%d]", s.Topic, s.Partition); !ok || name != want {
		return fmt.Errorf("read kafka %s: cannot start at %s, not a position of this partition", want, from)
	}
	log := s.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if first, err := firstOffset(ctx, s.Dialer, s.Brokers, s.Topic, s.Partition); err == nil && next < first {
		// The reader would skip them quietly.
		log.Error("kafka gateway: records this stream should start at are gone (the topic's retention deleted them): the events among them are not sent to the endpoints whose cursor was there; it starts at the partition's first record",
			slog.String("partition", name), slog.Int64("from", next), slog.Int64("first", first), slog.Int64("records", first-next))
		if s.Expired != nil {
			s.Expired(first - next)
		}
		next = first
	}
	r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: s.Brokers, Dialer: s.Dialer, Topic: s.Topic, Partition: s.Partition,
		MinBytes: 1, MaxBytes: 4 << 20, MaxWait: 200 * time.Millisecond, ReadBackoffMin: 50 * time.Millisecond, ReadBackoffMax: time.Second})
	defer r.Close()
	if err := r.SetOffset(next); err != nil {
		return fmt.Errorf("read kafka %s at offset %d: %w", name, next, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	msgs := make(chan kafkago.Message)
	failed := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			m, err := r.FetchMessage(ctx)
			if err != nil {
				failed <- err
				return
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	defer func() { cancel(); <-done }()
	var last *event.Txn
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-failed:
			if ctx.Err() != nil || errors.Is(err, context.Canceled) {
				return ctx.Err()
			}
			return fmt.Errorf("read kafka %s at offset %d: %w", name, next, err)
		case cs := <-s.Changes:
			at := Position(s.Topic, s.Partition, next)
			txn := &event.Txn{Changes: cs, Position: at}
			if last != nil {
				txn.CommitTime = last.CommitTime
			}
			if err := handle(ctx, txn); err != nil {
				return err
			}
		case m := <-msgs:
			txn := &event.Txn{Position: Position(s.Topic, s.Partition, m.Offset+1), CommitTime: m.Time.UTC()}
			e, err := s.Decode(m)
			if err != nil {
				log.Warn("a record that is not the relay's is skipped", slog.Any("err", err))
			} else {
				txn.Events = []*event.Event{e}
			}
			if err := handle(ctx, txn); err != nil {
				return err
			}
			last, next = txn, m.Offset+1
			if s.Lag != nil && m.HighWaterMark > 0 {
				s.Lag(max(m.HighWaterMark-next, 0))
			}
		}
	}
}

// firstOffset returns the first offset topic[partition] holds.
func firstOffset(ctx context.Context, d *kafkago.Dialer, brokers []string, topic string, partition int) (int64, error) {
	if d == nil {
		d = kafkago.DefaultDialer
	}
	var last error
	for _, b := range brokers {
		conn, err := d.DialLeader(ctx, "tcp", b, topic, partition)
		if err != nil {
			last = err
			continue
		}
		off, err := conn.ReadFirstOffset()
		_ = conn.Close()
		if err == nil {
			return off, nil
		}
		last = err
	}
	return 0, fmt.Errorf("read the first offset of kafka %s[%d]: %w", topic, partition, last)
}
