package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/internal/readback"
	"github.com/outbox-relay/outbox-relay/sink/internal/route"
)

// recoverChunk is how many offsets Recover reads at a time, from a
// partition's end backwards (a variable for tests).
var recoverChunk int64 = 1000

// afterChunk, when set (by tests), is called after each chunk is read,
// before it is judged: when a chunk holds the most it will.
var afterChunk func()

var _ sink.Recoverer = (*Sink)(nil)

// Recover reads the sink's topics back and calls seen for every message it
// finds there of a transaction after the checkpoint after; seen is called
// only when Recover returns nil.
//
// The topics read are the fixed topic, or, with a templated topic, every
// topic of the cluster the template could have rendered (its fixed text in
// place, anything for its fields; a template with {{if}} or {{range}}
// matches every topic), except internal topics and the dead-letter topic. In
// each partition it reads from the end backwards, 1000 offsets at a time,
// until a message whose gtid header after holds: the sink keeps one produce
// request in flight per partition and retries it before anything behind it,
// so a partition holds, in commit order, a prefix of what was routed to it
// (after a restart, the re-sent part of it again), and an older message after
// the checkpoint was also written again after it, or is sent again: a
// duplicate, never a loss. Every message reported is in the topic. A
// partition is read up to its high watermark: a message the leader has but
// its replicas do not yet (a restart within the replication lag of a kill)
// is not seen, and is sent again.
//
// Each message reported is a claim with its Digest, and a message not on
// the partition its key hashes to is reported with a zero digest (which
// matches nothing): the pipeline skips an event only when its claim's
// digest is the sink's Digest of it. A message after the checkpoint larger
// than Config.BatchBytes (none the sink produced), or whose id or gtid
// header is longer than a claim keeps (readback.MaxID, MaxGTID), is
// reported as dropped (sink.Held.Dropped), without its bytes, and the read
// goes on past it.
//
// It holds, and returns nil, only when every message it reads after the
// checkpoint carries this sink's relay_sink header (Config.Writer), a gtid
// header, and a relay_partitions header equal to the topic's partition
// count now. Otherwise it returns an error wrapping sink.ErrCannotRecover
// and naming the partition and offset: a message without relay_sink
// (another producer, or a message produced before read-back existed) or
// with another sink's name; a partition count that changed since the
// messages were produced (checked on the newest message of each partition
// at or before the checkpoint too); an empty gtid (GTIDs off); an empty
// checkpoint; or more than readback.MaxHeld messages, or
// readback.MaxHeldBytes of claims, after the checkpoint in all. A partition
// whose newest message is already held by after (or that is empty) holds
// nothing after it. Control records (a
// transactional producer's commit and abort markers) are passed over.
// Failures to reach the brokers, and broker errors that say to try again,
// are returned as they are, to be retried; any other error wraps
// sink.ErrCannotRecover, so that an answer the read does not expect falls
// back to at-least-once instead of being retried for ever.
func (s *Sink) Recover(ctx context.Context, after event.Position, seen func(sink.Held)) error {
	return readBackError(s.recover(ctx, after, seen))
}

// Digest is the digest of the message the sink produces for e, as Recover
// computes it of a message read back (see digest); false when e's message
// cannot be built.
func (s *Sink) Digest(e *event.Event) (sink.Digest, bool) {
	topic, err := s.route(e)
	if err != nil {
		return sink.Digest{}, false
	}
	r, err := s.build(e, topic, 0, nil) // relay_partitions is not in the digest
	if err != nil {
		return sink.Digest{}, false
	}
	m := r.message()
	return digest(m.Topic, m.Key, m.Value, m.Headers), true
}

func (s *Sink) recover(ctx context.Context, after event.Position, seen func(sink.Held)) error {
	judge, err := readback.New(s.cfg.Writer, after)
	if err != nil {
		return fmt.Errorf("read kafka back: %w", err)
	}
	topics, err := s.recoverTopics(ctx)
	if err != nil {
		return err
	}
	rd := reader{client: s.client, transport: s.transport, digests: true, maxSize: s.cfg.BatchBytes}
	var claims readback.Claims
	for _, topic := range topics {
		n, err := rd.Partitions(ctx, topic)
		if errors.Is(err, kafkago.UnknownTopicOrPartition) {
			continue // a fixed topic that does not exist holds nothing
		}
		if err != nil {
			return fmt.Errorf("read kafka back: %w", err)
		}
		starts, err := rd.Offsets(ctx, topic, n, kafkago.FirstOffset)
		if err != nil {
			return fmt.Errorf("read kafka back: %w", err)
		}
		ends, err := rd.Offsets(ctx, topic, n, kafkago.LastOffset)
		if err != nil {
			return fmt.Errorf("read kafka back: %w", err)
		}
		for p := range n {
			if err = s.recoverPartition(ctx, rd, judge, topic, p, n, starts[p], ends[p], &claims); err != nil {
				return err
			}
		}
	}
	claims.Finish(s.log, "read the kafka topics back", slog.Int("topics", len(topics)), after, seen)
	return nil
}

// recoverTopics lists the topics the sink may have produced to.
func (s *Sink) recoverTopics(ctx context.Context) ([]string, error) {
	if fixed, ok := s.topic.Fixed(); ok {
		return []string{fixed}, nil
	}
	md, err := s.client.Metadata(ctx, &kafkago.MetadataRequest{})
	if err != nil {
		return nil, fmt.Errorf("read kafka back: list the topics: %w", err)
	}
	skeleton := s.topic.Skeleton()
	var out []string
	for _, t := range md.Topics {
		if t.Internal || t.Name == s.cfg.DeadLetterTopic || !route.Match(skeleton, t.Name) {
			continue
		}
		out = append(out, t.Name)
	}
	slices.Sort(out)
	return out, nil
}

// recoverPartition reads topic[p] (n partitions now) back from end to
// start, until a message after holds, and adds to claims the messages
// after the checkpoint. A chunk keeps of each record only what it is
// judged on (no key, no value; its headers cut short), so that a chunk's
// memory is bounded whatever the partition holds.
func (s *Sink) recoverPartition(ctx context.Context, rd reader, judge *readback.Judge, topic string, p, n int, start, end int64, claims *readback.Claims) error {
	type read struct {
		Record
		onKeyPartition bool // the partition its key hashes to
	}
	var chunk []read
	for hi := end; hi > start; {
		lo := max(start, hi-recoverChunk)
		chunk = chunk[:0]
		err := rd.Read(ctx, topic, p, lo, hi, func(r Record) error {
			k := s.balancer.Balance(kafkago.Message{Key: r.Key}, indexes(n)...)
			r.Key = nil
			chunk = append(chunk, read{r, k == p})
			return nil
		})
		if err != nil {
			return fmt.Errorf("read kafka back: %w", err)
		}
		if afterChunk != nil {
			afterChunk()
		}
		for i := len(chunk) - 1; i >= 0; i-- {
			r := chunk[i]
			if r.Replay {
				// A replay job's copy of an older event (outbox-relay
				// replay), appended after the live messages of its time:
				// neither the live stream's nor where the read stops.
				continue
			}
			at := fmt.Sprintf("%s[%d] offset %d", topic, p, r.Offset)
			// A record larger than batch_bytes is none the sink produced.
			v, err := judge.Weigh(readback.Message{HasSink: r.HasSink, Sink: r.Sink, GTID: r.GTID}, r.ID, r.Size > s.cfg.BatchBytes)
			if err == nil && v != readback.Drop && r.HasSink && r.Partitions != n {
				err = fmt.Errorf("was produced when %s had %d partitions; it has %d now, so keys moved between partitions: %w",
					topic, r.Partitions, n, sink.ErrCannotRecover)
			}
			switch {
			case err != nil:
			case v == readback.Stop:
				return nil
			case v == readback.Drop:
				err = claims.Drop(readback.Oversized, at, r.GTID, r.ID)
			default:
				if !r.onKeyPartition {
					// Not where the sink puts its key: not the sink's copy
					// of any event. The pipeline sends the event it names
					// again.
					s.log.Warn("kafka read-back: a message that claims to be this sink's is not on its key's partition; it proves nothing",
						slog.String("at", at), slog.String("gtid", r.GTID), slog.String("id", r.ID))
					r.Digest = sink.Digest{}
				}
				err = claims.Hold(sink.Held{GTID: r.GTID, ID: r.ID, At: at, Digest: r.Digest})
			}
			if err != nil {
				return fmt.Errorf("read kafka back: %s %w", at, err)
			}
		}
		hi = lo
	}
	return nil // the log start: everything it holds is after the checkpoint
}
