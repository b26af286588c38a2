package kafkasource

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/event"
)

// Part names one partition of a topic.
type Part struct {
	Topic     string
	Partition int
}

func (p Part) String() string { return fmt.Sprintf("%s[%d]", p.Topic, p.Partition) }

// Offsets is an offset for each partition of some topics: where a replay
// window (package replay, source "kafka") starts or ends, or how far its
// reading got. As an event.Position (Position) its File is
// "kafka:<topic>[<partition>]=<offset>,…" in partition order, so that equal
// offsets make equal positions.
type Offsets map[Part]int64

const offsetsPrefix = "kafka:"

// Parts are the partitions of o, in order.
func (o Offsets) Parts() []Part {
	ps := make([]Part, 0, len(o))
	for p := range o {
		ps = append(ps, p)
	}
	slices.SortFunc(ps, func(a, b Part) int {
		return cmp.Or(strings.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return ps
}

// Position is o as a position.
func (o Offsets) Position() event.Position {
	var b strings.Builder
	b.WriteString(offsetsPrefix)
	for i, p := range o.Parts() {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%d", p, o[p])
	}
	return event.Position{File: b.String()}
}

// ParseOffsets reads a position made by Offsets.Position.
func ParseOffsets(pos event.Position) (Offsets, error) {
	rest, ok := strings.CutPrefix(pos.File, offsetsPrefix)
	if !ok || pos.GTIDSet != "" {
		return nil, fmt.Errorf("position %s is not a set of kafka offsets", pos)
	}
	o := Offsets{}
	for item := range strings.SplitSeq(rest, ",") {
		name, off, ok1 := strings.Cut(item, "=")
		i := strings.LastIndexByte(name, '[')
		ok2 := i > 0
		topic, part := name[:max(i, 0)], strings.TrimSuffix(name[max(i, 0)+1:], "]")
		n, err1 := strconv.Atoi(part)
		v, err2 := strconv.ParseInt(off, 10, 64)
		if !ok1 || !ok2 || err1 != nil || err2 != nil || v < 0 || !strings.HasSuffix(name, "]") {
			return nil, fmt.Errorf("position %s: %q is not <topic>[<partition>]=<offset>", pos, item)
		}
		o[Part{topic, n}] = v
	}
	return o, nil
}

// Clone returns a copy of o.
func (o Offsets) Clone() Offsets {
	c := make(Offsets, len(o))
	for p, v := range o {
		c[p] = v
	}
	return c
}

// Client is what looks offsets up: a kafka-go client on the brokers, with
// the dialer's TLS and SASL.
func Client(brokers []string, d *kafkago.Dialer) *kafkago.Client {
	if d == nil {
		d = kafkago.DefaultDialer
	}
	return &kafkago.Client{Addr: kafkago.TCP(brokers...), Timeout: 10 * time.Second,
		Transport: &kafkago.Transport{TLS: d.TLS, SASL: d.SASLMechanism}}
}

// OffsetsAt returns, for every partition of topics, the offset of its
// first record whose timestamp is at or after t (a ListOffsets request by
// timestamp: the broker's time index, not a scan), or its end (the high
// watermark) when it has none: where a window from t starts, or where a
// window up to t ends. A zero t gives every partition's end: the window's
// end as of now.
func OffsetsAt(ctx context.Context, c *kafkago.Client, topics []string, t time.Time) (Offsets, error) {
	md, err := c.Metadata(ctx, &kafkago.MetadataRequest{Topics: topics})
	if err != nil {
		return nil, fmt.Errorf("read the partitions of kafka topics %v: %w", topics, err)
	}
	ends, times := map[string][]kafkago.OffsetRequest{}, map[string][]kafkago.OffsetRequest{}
	for _, tp := range md.Topics {
		if tp.Error != nil {
			return nil, fmt.Errorf("kafka topic %q: %w (is it the topic the kafka sink writes?)", tp.Name, tp.Error)
		}
		for _, p := range tp.Partitions {
			ends[tp.Name] = append(ends[tp.Name], kafkago.LastOffsetOf(p.ID))
			times[tp.Name] = append(times[tp.Name], kafkago.TimeOffsetOf(p.ID, t))
		}
	}
	// Two requests: a broker refuses a partition twice in one.
	o := Offsets{}
	res, err := c.ListOffsets(ctx, &kafkago.ListOffsetsRequest{Topics: ends})
	if err != nil {
		return nil, fmt.Errorf("list the end offsets of kafka topics %v: %w", topics, err)
	}
	for topic, parts := range res.Topics {
		for _, p := range parts {
			if p.Error != nil || p.LastOffset < 0 {
				return nil, fmt.Errorf("list the end offset of kafka %s[%d]: %v", topic, p.Partition, cmp.Or(p.Error, errors.New("the broker gave none")))
			}
			o[Part{topic, p.Partition}] = p.LastOffset
		}
	}
	if !t.IsZero() {
		res, err := c.ListOffsets(ctx, &kafkago.ListOffsetsRequest{Topics: times})
		if err != nil {
			return nil, fmt.Errorf("list the offsets of kafka topics %v at %s: %w", topics, t.UTC().Format(time.RFC3339), err)
		}
		for topic, parts := range res.Topics {
			for _, p := range parts {
				if p.Error != nil {
					return nil, fmt.Errorf("list the offset of kafka %s[%d] at %s: %w", topic, p.Partition, t.UTC().Format(time.RFC3339), p.Error)
				}
				// No record at or after t: the broker answers offset
				// -1 (which kafka-go files as LastOffset); the end.
				for off := range p.Offsets {
					if k := (Part{topic, p.Partition}); off >= 0 && off < o[k] {
						o[k] = off
					}
				}
			}
		}
	}
	for _, topic := range topics {
		if !slices.ContainsFunc(o.Parts(), func(p Part) bool { return p.Topic == topic }) {
			return nil, fmt.Errorf("kafka topic %q has no partitions the broker lists: is it the topic the kafka sink writes?", topic)
		}
	}
	return o, nil
}

// Window reads a replay window of some topics as a pipeline.Source: every
// partition from the offsets of the position it is run from up to Until's
// (not included), one partition after the other, in partition order; each
// record is one transaction holding its event (Decode), at the position
// of every partition's offset once that record is read (Offsets.Position).
// Run returns nil once every partition has reached Until: the last
// transaction it hands on is at Until's position. An aggregate's events
// are in one partition (one message key), so they are handed on in their
// order.
type Window struct {
	Brokers []string
	Dialer  *kafkago.Dialer // nil: kafkago.DefaultDialer
	Until   Offsets
	Decode  func(kafkago.Message) (*event.Event, error)
	Logger  *slog.Logger
}

// Run implements pipeline.Source.
func (w *Window) Run(ctx context.Context, from event.Position, handle func(context.Context, *event.Txn) error) error {
	at, err := ParseOffsets(from)
	if err != nil {
		return err
	}
	for _, p := range w.Until.Parts() {
		if _, ok := at[p]; !ok {
			return fmt.Errorf("replay from kafka: the start %s has no offset of %s, which the window's end has", from, p)
		}
	}
	log := w.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for _, p := range w.Until.Parts() {
		if err := w.read(ctx, p, at, handle, log); err != nil {
			return err
		}
	}
	return nil
}

// read hands on the records of partition p from at[p] up to Until[p],
// moving at[p].
func (w *Window) read(ctx context.Context, p Part, at Offsets, handle func(context.Context, *event.Txn) error, log *slog.Logger) error {
	end := w.Until[p]
	if at[p] >= end {
		return nil
	}
	r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: w.Brokers, Dialer: w.Dialer, Topic: p.Topic, Partition: p.Partition,
		MinBytes: 1, MaxBytes: 4 << 20, MaxWait: 200 * time.Millisecond, ReadBackoffMin: 50 * time.Millisecond, ReadBackoffMax: time.Second})
	defer r.Close()
	if err := r.SetOffset(at[p]); err != nil {
		return fmt.Errorf("read kafka %s at offset %d: %w", p, at[p], err)
	}
	for at[p] < end {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, context.Canceled) {
				return ctx.Err()
			}
			return fmt.Errorf("read kafka %s at offset %d: %w", p, at[p], err)
		}
		txn := &event.Txn{CommitTime: m.Time.UTC()}
		if m.Offset < end {
			e, err := w.Decode(m)
			if err != nil {
				log.Warn("a record that is not the relay's is skipped", slog.String("partition", p.String()), slog.Int64("offset", m.Offset), slog.Any("err", err))
			} else {
				txn.Events = []*event.Event{e}
			}
		}
		// Past the end (the records before it were compacted away): the
		// partition is read; handed on empty, so the progress reaches it.
		at[p] = min(m.Offset+1, end)
		txn.Position = at.Position()
		if err := handle(ctx, txn); err != nil {
			return err
		}
	}
	return nil
}
