package kafka

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/retry"
	"github.com/outbox-relay/outbox-relay/sink"
)

// partitionKey names one partition of one topic.
type partitionKey struct {
	topic     string
	partition int
}

// pending is one message waiting in its partition's queue.
type pending struct {
	ctx       context.Context
	ev        *event.Event
	rec       wireRecord
	partition int
	size      int
	// onAck(i, err) is the ack of the event, called once (ack), from the
	// partition's goroutine: i is its index in its Submit's batch.
	onAck func(int, error)
	i     int
	// once: a Write's message, tried once; a retriable failure fails it and
	// the Write's later messages of the partition, unsent. Otherwise (Submit)
	// the sink retries it until it is acknowledged or fails for good.
	once  bool
	write *int // identifies the Write (once only)
}

// ack acknowledges p's event.
func (p *pending) ack(err error) {
	if p.onAck != nil {
		p.onAck(p.i, err)
	}
}

// partitionQueue holds the messages of one partition in binlog order. One
// goroutine at a time (running) sends them: one produce request in flight
// per partition, so a failed request is retried before anything after it.
type partitionQueue struct {
	key     partitionKey
	queue   []*pending
	running bool
}

// Submit implements sink.Submitter: it places each message of batch in its
// partition's queue, in order, and returns. Each partition has at most one
// produce request in flight, and many partitions are in flight at once. A
// request that fails retriably is sent again (the retry package's policy,
// Config.Retry) before anything queued behind it, so a key's messages are
// never reordered; only permanent failures are acknowledged with an error
// (after the dead-letter topic, when set, refused them too).
//
// Submit may block to look a topic up (or create it), retrying while the
// brokers cannot answer.
func (s *Sink) Submit(ctx context.Context, batch []*event.Event, ack func(i int, err error)) {
	s.enqueue(ctx, batch, ack, false)
}

// Write delivers batch and returns nil once the brokers acknowledged every
// message with acks=all, or a *sink.BatchError naming each failed event.
//
// The messages go through the same partition queues as Submit's, but each
// request is tried once: after a retriable failure on a partition, the
// batch's later messages of that partition are not sent (and fail too), so a
// failure never lets a later message of a key in ahead of an earlier one;
// the caller retries the failed events in order.
func (s *Sink) Write(ctx context.Context, batch []*event.Event) error {
	done := make(chan error, 1)
	s.enqueue(ctx, batch, sink.Collect(len(batch), func(err error) { done <- err }), true)
	return <-done
}

func (s *Sink) enqueue(ctx context.Context, batch []*event.Event, ack func(int, error), once bool) {
	s.push(s.prepare(ctx, batch, ack, once))
}

// prepare builds the message of each event of batch and returns those to
// queue, in order; an event whose message cannot be built (or looked up)
// is acknowledged with its error at once.
func (s *Sink) prepare(ctx context.Context, batch []*event.Event, ack func(int, error), once bool) []*pending {
	write := new(int)
	bo := retry.Backoff{Policy: s.cfg.Retry}
	var logged time.Time
	queued := make([]*pending, 0, len(batch))
	slab := make([]pending, len(batch)) // one allocation for the batch's queue entries
	var buf []byte                      // and one buffer for its keys and headers
	lastTopic, lastPartitions := "", -1 // a topic is looked up once per batch
	for i, e := range batch {
		topic, err := s.route(e)
		partitions := -1
		if err == nil && topic == lastTopic {
			partitions = lastPartitions // looked up for this batch already
		}
		for err == nil && partitions < 0 {
			partitions, err = s.partitions(ctx, topic)
			if err == nil || once || sink.IsPermanent(err) || ctx.Err() != nil {
				break
			}
			// The topic cannot be looked up (or created) now: wait here, in
			// order, as a failed produce request would.
			wait := bo.Next(err)
			if d, ok := sink.RetryAfter(err); ok {
				wait = max(wait, min(d, s.cfg.Retry.Max))
			}
			if time.Since(logged) > time.Minute || bo.Failures() == 1 {
				logged = time.Now()
				s.log.Warn("kafka topic lookup failed; retrying", slog.String("topic", topic),
					slog.Int("attempt", bo.Failures()), slog.Duration("wait", wait), slog.Any("err", err))
			}
			if serr := s.sleep(ctx, wait); serr != nil {
				err = serr
			}
		}
		if err == nil {
			lastTopic, lastPartitions = topic, partitions
		}
		var r wireRecord
		if topic != "" {
			if buf == nil {
				buf = make([]byte, 0, batchHeadersLen(batch[i:]))
			}
			// Built even when the lookup failed: the dead-letter topic
			// takes its key.
			var berr error
			if r, berr = s.build(e, topic, partitions, &buf); berr != nil {
				err = berr
			}
		}
		if err == nil && r.size() > s.cfg.BatchBytes {
			// The one check of the sink's hard limits: the key and the
			// headers are counted with the value, and a topic's
			// max.message.bytes below batch_bytes is the broker's to refuse
			// (a permanent MessageSizeTooLarge once its batch is split down to it).
			err = fmt.Errorf("%w (%w)", sink.OverLimit(e.ID, "the message (key, value and headers)", r.size(), s.cfg.BatchBytes,
				"kafka.batch_bytes"), kafkago.MessageSizeTooLarge)
		}
		p := &slab[i]
		*p = pending{ctx: ctx, ev: e, rec: r, onAck: ack, i: i, once: once, write: write}
		if err != nil {
			if sink.IsPermanent(err) && r.topic != "" {
				err = s.deadLetter(ctx, p, err)
			}
			p.ack(err)
			continue
		}
		p.size = r.size()
		p.partition = s.balancer.Balance(kafkago.Message{Key: r.key}, indexes(partitions)...)
		queued = append(queued, p)
	}
	return queued
}

// indexes returns 0..n-1 (the balancer wants the partition numbers).
func indexes(n int) []int {
	if n <= len(partitionNumbers) {
		return partitionNumbers[:n]
	}
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

var partitionNumbers = func() []int {
	out := make([]int, 1024)
	for i := range out {
		out[i] = i
	}
	return out
}()

// push appends each message to its partition's queue, all under one lock
// (a partition's goroutine sees the batch whole), and starts the goroutine
// of each partition where none runs.
func (s *Sink) push(ps []*pending) {
	if len(ps) == 0 {
		return
	}
	var start []*partitionQueue
	s.qmu.Lock()
	if s.closed {
		s.qmu.Unlock()
		for _, p := range ps {
			p.ack(errClosed)
		}
		return
	}
	var last *partitionQueue
	for _, p := range ps {
		key := partitionKey{p.rec.topic, p.partition}
		q := last
		if q == nil || q.key != key {
			q = s.parts[key]
			if q == nil {
				q = &partitionQueue{key: key}
				s.parts[key] = q
			}
		}
		last = q
		q.queue = append(q.queue, p)
		if !q.running {
			q.running = true
			start = append(start, q)
		}
	}
	s.workers.Add(len(start))
	s.qmu.Unlock()
	for _, q := range start {
		go s.drain(q)
	}
}

var errClosed = errors.New("kafka sink closed")

// errAbandoned fails a message queued behind one whose caller went away
// (its ctx ended): it is not sent ahead of that one, which will be read
// again.
var errAbandoned = errors.New("not sent: an earlier message of its partition was abandoned")

// next returns the messages to send next on q (a prefix of its queue within
// limit messages and batch_bytes), or nil when the queue is empty, ending
// the goroutine.
func (s *Sink) next(q *partitionQueue, limit int) []*pending {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	n, bytes := 0, 0
	for n < len(q.queue) && n < limit {
		if n > 0 && bytes+q.queue[n].size > s.cfg.BatchBytes {
			break
		}
		bytes += q.queue[n].size
		n++
	}
	if n == 0 {
		q.running = false
		if len(q.queue) == 0 {
			delete(s.parts, q.key)
		}
		return nil
	}
	return append([]*pending(nil), q.queue[:n]...) // settle clears the queue's slots
}

// settle removes the first n messages of q (they are done).
func (s *Sink) settle(q *partitionQueue, n int) {
	s.qmu.Lock()
	clear(q.queue[:n])
	q.queue = q.queue[n:]
	if len(q.queue) == 0 {
		q.queue = nil // let the backing array go
	}
	s.qmu.Unlock()
}

// failQueued fails the messages queued on q after its first n that match.
func (s *Sink) failQueued(q *partitionQueue, n int, match func(*pending) bool, err func(*pending) error) {
	s.qmu.Lock()
	var keep, failed []*pending
	for j, p := range q.queue {
		if j >= n && match(p) {
			failed = append(failed, p)
			continue
		}
		keep = append(keep, p)
	}
	q.queue = keep
	s.qmu.Unlock()
	for _, p := range failed {
		p.ack(err(p))
	}
}

// drain sends q's messages until its queue is empty: one produce request at
// a time, each retried (Submit) until it succeeds or fails for good.
func (s *Sink) drain(q *partitionQueue) {
	defer s.workers.Done()
	bo := retry.Backoff{Policy: s.cfg.Retry}
	var logged time.Time
	limit := s.cfg.BatchSize
	isolating := 0     // messages left of a batch the broker found too large
	var scratch []byte // the record batches' memory, while requests succeed
	for {
		batch := s.next(q, limit)
		if batch == nil {
			return
		}
		head := batch[0]
		if err := head.ctx.Err(); err != nil || s.isClosing() {
			if err == nil {
				err = errClosed
			}
			// The caller went away: fail what it left, and everything behind
			// it on this partition, unsent.
			cause := err
			s.failQueued(q, 0, func(*pending) bool { return true }, func(p *pending) error {
				if p.ctx.Err() != nil {
					return p.ctx.Err()
				}
				if p == head {
					return cause
				}
				return fmt.Errorf("%w: %v", errAbandoned, cause)
			})
			continue
		}
		err := s.produce(head.ctx, q.key, batch, &scratch)
		n := len(batch)
		switch {
		case err == nil:
			bo.Reset()
			s.settle(q, n)
			for _, p := range batch {
				p.ack(nil)
			}
			if isolating > 0 {
				if isolating -= n; isolating <= 0 {
					limit = s.cfg.BatchSize
				}
			}
		case tooLarge(err) && n > 1:
			// The broker rejects a whole record batch larger than the topic's
			// max.message.bytes, innocent messages included: send it in
			// halves, in order, until each rejected message is alone, as
			// Java's producer splits batches.
			if isolating <= 0 {
				isolating = n
				s.log.Warn("kafka rejected a record batch as too large; resending its messages in smaller batches",
					slog.Int("messages", n), slog.String("topic", q.key.topic), slog.Int("partition", q.key.partition))
			}
			limit = max(1, n/2)
		case sink.IsPermanent(err):
			s.settle(q, n)
			for _, p := range batch {
				p.ack(s.deadLetter(p.ctx, p, err))
			}
			if isolating > 0 {
				if isolating -= n; isolating <= 0 {
					limit = s.cfg.BatchSize
				}
			}
		case head.once:
			// A Write: fail this request's messages and the Write's later
			// ones on this partition, unsent; the caller retries them in order.
			s.settle(q, n)
			for _, p := range batch {
				p.ack(err)
			}
			w := head.write
			s.failQueued(q, 0, func(p *pending) bool { return p.write == w },
				func(*pending) error { return errNotSent{err} })
		default:
			wait := bo.Next(err)
			if d, ok := sink.RetryAfter(err); ok {
				wait = max(wait, min(d, s.cfg.Retry.Max))
			}
			if time.Since(logged) > time.Minute || bo.Failures()&(bo.Failures()-1) == 0 {
				logged = time.Now()
				s.log.Warn("kafka produce failed; retrying", slog.String("topic", q.key.topic), slog.Int("partition", q.key.partition),
					slog.Int("messages", n), slog.Int("attempt", bo.Failures()), slog.Duration("wait", wait), slog.Any("err", err))
			}
			if s.sleep(head.ctx, wait) == nil && topicMissing(err) {
				// Create it again, when configured to. Once it exists, a
				// "missing" answer is the client's metadata catching up
				// (kafka-go caches it for seconds): retry with a fresh
				// backoff rather than one grown by those answers.
				if _, perr := s.partitions(head.ctx, q.key.topic); perr == nil {
					bo.Reset()
				}
			}
		}
	}
}

func (s *Sink) isClosing() bool {
	select {
	case <-s.closing:
		return true
	default:
		return false
	}
}

// sleep waits d, or until ctx ends or the sink closes.
func (s *Sink) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.closing:
		return errClosed
	}
}

// produce sends batch as one record batch in one produce request (acks=all)
// to the partition's leader, and returns the classified error of the whole
// request: a broker takes or rejects a record batch whole. The batch is
// encoded in *scratch's memory (scratch may be nil), which is kept there
// for the next request only when this one succeeded: a request that failed
// or timed out may still be read by kafka-go's connection.
func (s *Sink) produce(ctx context.Context, key partitionKey, batch []*pending, scratch *[]byte) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	var dst []byte
	if scratch != nil {
		dst, *scratch = *scratch, nil
	}
	set, err := encodeBatch(dst, batch, s.cfg.compression().Codec(), time.Now())
	if err != nil {
		return s.messageError(key.topic, err)
	}
	res, err := s.client.RawProduce(ctx, &kafkago.RawProduceRequest{
		Topic:        key.topic,
		Partition:    key.partition,
		RequiredAcks: kafkago.RequireAll,
		RawRecords:   protocol.RawRecordSet{Reader: bytes.NewReader(set)},
	})
	if err == nil && res != nil && res.Error != nil {
		err = res.Error
		for _, rerr := range res.RecordErrors {
			err = fmt.Errorf("%w (%v)", err, rerr)
			break
		}
	}
	if err == nil {
		if scratch != nil {
			*scratch = set // answered: kafka-go has written all of it
		}
		return nil
	}
	return s.messageError(key.topic, err)
}

// deadLetter produces p's message to the dead-letter topic, when one is
// configured, and returns nil when the brokers acknowledged it there;
// otherwise it returns the permanent failure cause, described.
func (s *Sink) deadLetter(ctx context.Context, p *pending, cause error) error {
	if s.cfg.DeadLetterTopic == "" {
		return cause
	}
	dlq := s.cfg.DeadLetterTopic
	r := wireRecord{topic: dlq, key: p.rec.key, value: p.ev.Payload, time: p.rec.time}
	r.headers, r.nh = appendHeaders(nil, p.ev, nil, -1)
	r.headers = appendHeader(r.headers, HeaderDLQReason, cause.Error())
	r.headers = appendHeader(r.headers, HeaderDLQOriginalTopic, p.rec.topic)
	r.nh += 2
	if size := r.size(); size > s.cfg.BatchBytes {
		return sink.Permanent(fmt.Errorf("%w; and it cannot go to dead-letter topic %q either: %d bytes exceed kafka.batch_bytes (%d)",
			cause, dlq, size, s.cfg.BatchBytes))
	}
	n, err := s.partitions(ctx, dlq)
	if err != nil {
		return sink.Permanent(fmt.Errorf("%w; and it cannot go to the dead-letter topic: %v", cause, err))
	}
	key := partitionKey{dlq, s.balancer.Balance(kafkago.Message{Key: r.key}, indexes(n)...)}
	if err := s.produce(ctx, key, []*pending{{rec: r}}, nil); err != nil {
		return sink.Permanent(fmt.Errorf("%w; and writing it to dead-letter topic %q failed: %v", cause, dlq, err))
	}
	s.log.Warn("event sent to the kafka dead-letter topic",
		slog.String("event_id", p.ev.ID), slog.String("topic", dlq),
		slog.String("original_topic", p.rec.topic), slog.Any("reason", cause))
	return nil
}
