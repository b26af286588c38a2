package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink"
)

// Sink delivers outbox events to Kafka. Create it with New.
type Sink struct {
	cfg       Config
	log       *slog.Logger
	topic     *fieldTemplate
	key       *fieldTemplate
	transport *kafkago.Transport
	client    *kafkago.Client
	writer    *kafkago.Writer

	mu    sync.Mutex      // guards known; Write is serial, this is belt and braces
	known map[string]bool // topics seen to exist (or created)
}

var _ sink.Sink = (*Sink)(nil)

// New returns a sink for cfg, with cfg's defaults applied and validated. It
// does not touch the network: Connect does.
func New(cfg Config, logger *slog.Logger) (*Sink, error) {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	topic, err := parseFieldTemplate("topic", cfg.Topic)
	if err != nil {
		return nil, err
	}
	key, err := parseFieldTemplate("key", cfg.Key)
	if err != nil {
		return nil, err
	}
	tlsCfg, err := cfg.TLS.build()
	if err != nil {
		return nil, err
	}
	mech, err := cfg.SASL.build()
	if err != nil {
		return nil, err
	}
	transport := &kafkago.Transport{
		Dial:        (&net.Dialer{Timeout: cfg.RequestTimeout}).DialContext,
		DialTimeout: cfg.RequestTimeout,
		ClientID:    cfg.ClientID,
		TLS:         tlsCfg,
		SASL:        mech,
	}
	addr := kafkago.TCP(cfg.Brokers...)
	s := &Sink{
		cfg:       cfg,
		log:       logger.With(slog.String("sink_type", "kafka")),
		topic:     topic,
		key:       key,
		transport: transport,
		client:    &kafkago.Client{Addr: addr, Transport: transport, Timeout: cfg.RequestTimeout},
		known:     map[string]bool{},
	}
	s.writer = &kafkago.Writer{
		Addr: addr,
		// Murmur2 of the key, as Java's default partitioner: a key lands on the
		// partition Java and librdkafka ("murmur2_random") producers pick.
		// Consistent also hashes an empty key rather than scattering it.
		Balancer:     kafkago.Murmur2Balancer{Consistent: true},
		MaxAttempts:  1, // retries belong to the pipeline
		BatchSize:    cfg.BatchSize,
		BatchBytes:   int64(cfg.BatchBytes),
		BatchTimeout: cfg.Linger,
		ReadTimeout:  cfg.RequestTimeout,
		WriteTimeout: cfg.RequestTimeout,
		RequiredAcks: kafkago.RequireAll,
		Async:        false,
		Compression:  cfg.compression(),
		Transport:    transport,
		// Missing topics are created by ensureTopic when configured, never
		// by a broker's auto.create.topics.enable with its defaults.
		AllowAutoTopicCreation: false,
		ErrorLogger: kafkago.LoggerFunc(func(msg string, args ...any) {
			s.log.Debug("kafka-go: " + fmt.Sprintf(msg, args...))
		}),
	}
	return s, nil
}

// Connect checks that a broker is reachable and answers, and that the fixed
// topic and the dead-letter topic exist, creating them when
// create_topics.enabled.
func (s *Sink) Connect(ctx context.Context) error {
	brokers := strings.Join(s.cfg.Brokers, ", ")
	d := net.Dialer{Timeout: s.cfg.RequestTimeout}
	var dialErrs []error
	for _, b := range s.cfg.Brokers {
		c, err := d.DialContext(ctx, "tcp", b)
		if err != nil {
			dialErrs = append(dialErrs, err)
			continue
		}
		_ = c.Close()
	}
	if len(dialErrs) == len(s.cfg.Brokers) {
		return fmt.Errorf("connect to kafka brokers %s: none is reachable: %w", brokers, errors.Join(dialErrs...))
	}
	if len(dialErrs) > 0 {
		s.log.Warn("some kafka brokers are unreachable", slog.Any("err", errors.Join(dialErrs...)))
	}
	mctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	if _, err := s.client.Metadata(mctx, &kafkago.MetadataRequest{}); err != nil {
		return fmt.Errorf("connect to kafka brokers %s: read cluster metadata: %w", brokers, err)
	}
	var topics []string
	if s.topic.fixed != nil {
		topics = append(topics, *s.topic.fixed)
	}
	if s.cfg.DeadLetterTopic != "" {
		topics = append(topics, s.cfg.DeadLetterTopic)
	}
	for _, t := range topics {
		if err := s.ensureTopic(ctx, t); err != nil {
			return err
		}
	}
	s.log.Info("connected to kafka", slog.String("brokers", brokers))
	return nil
}

// Close flushes and closes the writer and closes the connections. Write has
// returned by then, so there is nothing left to flush but batches a
// cancelled Write abandoned, which are sent or fail within request_timeout.
func (s *Sink) Close(ctx context.Context) error {
	err := s.writer.Close()
	s.transport.CloseIdleConnections()
	if err != nil {
		return fmt.Errorf("close kafka writer: %w", err)
	}
	return nil
}

// ensureTopic returns nil when topic is known to exist, creating it if
// configured to. Results are cached: each topic is checked once, until a
// write finds it missing again.
func (s *Sink) ensureTopic(ctx context.Context, topic string) error {
	s.mu.Lock()
	ok := s.known[topic]
	s.mu.Unlock()
	if ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	if s.cfg.CreateTopics.Enabled {
		res, err := s.client.CreateTopics(ctx, &kafkago.CreateTopicsRequest{Topics: []kafkago.TopicConfig{{
			Topic:             topic,
			NumPartitions:     s.cfg.CreateTopics.Partitions,
			ReplicationFactor: s.cfg.CreateTopics.ReplicationFactor,
		}}})
		if err != nil {
			return classify(fmt.Errorf("create kafka topic %q: %w", topic, err))
		}
		switch err := res.Errors[topic]; {
		case err == nil:
			s.log.Info("created kafka topic", slog.String("topic", topic),
				slog.Int("partitions", s.cfg.CreateTopics.Partitions),
				slog.Int("replication_factor", s.cfg.CreateTopics.ReplicationFactor))
		case errors.Is(err, kafkago.TopicAlreadyExists):
		case errors.Is(err, kafkago.ThrottlingQuotaExceeded):
			return sink.BackOff(fmt.Errorf("create kafka topic %q: %w", topic, err), max(res.Throttle, time.Second))
		default:
			return classify(fmt.Errorf("create kafka topic %q: %w", topic, err))
		}
	} else {
		md, err := s.client.Metadata(ctx, &kafkago.MetadataRequest{Topics: []string{topic}})
		if err != nil {
			return fmt.Errorf("look up kafka topic %q: %w", topic, err)
		}
		for _, t := range md.Topics {
			if t.Name != topic || t.Error == nil {
				continue
			}
			if errors.Is(t.Error, kafkago.UnknownTopicOrPartition) {
				return fmt.Errorf("kafka topic %q does not exist: create it, or set create_topics.enabled: true in the sink's kafka section: %w", topic, t.Error)
			}
			return classify(fmt.Errorf("look up kafka topic %q: %w", topic, t.Error))
		}
	}
	s.mu.Lock()
	s.known[topic] = true
	s.mu.Unlock()
	return nil
}

// forgetTopic makes the next write to topic check (or create) it again.
func (s *Sink) forgetTopic(topic string) {
	s.mu.Lock()
	delete(s.known, topic)
	s.mu.Unlock()
}

// Write delivers batch and returns nil once the brokers acknowledged every
// message with acks=all, or a *sink.BatchError naming each failed event.
//
// The batch is sent in rounds of at most batch_size messages and batch_bytes
// bytes, one after another; within a round each partition gets exactly one
// produce request, so a failure never lets a later message of a key in ahead
// of an earlier one. After a round with a retriable failure, the later rounds
// are not sent and fail too.
func (s *Sink) Write(ctx context.Context, batch []*event.Event) error {
	errs := map[int]error{}
	msgs := make([]kafkago.Message, len(batch))
	var pending []int // indexes of the messages to send, in batch order
	topicChecked := map[string]error{}
	for i, e := range batch {
		m, err := s.message(e)
		if err == nil {
			checked, ok := topicChecked[m.Topic]
			if !ok {
				checked = s.ensureTopic(ctx, m.Topic)
				topicChecked[m.Topic] = checked
			}
			err = checked
		}
		if err == nil && messageSize(&m) > s.cfg.BatchBytes {
			err = sink.Permanent(fmt.Errorf("message of %d bytes exceeds kafka.batch_bytes (%d): %w",
				messageSize(&m), s.cfg.BatchBytes, kafkago.MessageSizeTooLarge))
		}
		m.WriterData = i
		msgs[i] = m
		if err != nil {
			errs[i] = err
			continue
		}
		pending = append(pending, i)
	}

	for len(pending) > 0 {
		round := s.nextRound(msgs, pending)
		pending = pending[len(round):]
		res := s.send(ctx, msgs, round)
		var retriable error
		for _, i := range round {
			if err := res[i]; err != nil {
				errs[i] = err
				if retriable == nil && !sink.IsPermanent(err) {
					retriable = err
				}
			}
		}
		if retriable != nil {
			for _, i := range pending {
				errs[i] = errNotSent{retriable}
			}
			break
		}
	}

	if s.cfg.DeadLetterTopic != "" {
		s.deadLetter(ctx, batch, msgs, errs)
	}
	if len(errs) == 0 {
		return nil
	}
	return &sink.BatchError{Errs: errs}
}

// message builds the Kafka message of e; an error is permanent.
func (s *Sink) message(e *event.Event) (kafkago.Message, error) {
	topic, err := s.topic.render(e)
	if err != nil {
		return kafkago.Message{}, sink.Permanent(fmt.Errorf("render kafka.topic for event %q: %w", e.ID, err))
	}
	if err := validTopicName(topic); err != nil {
		return kafkago.Message{}, sink.Permanent(fmt.Errorf("kafka.topic rendered %q for event %q: %w", topic, e.ID, err))
	}
	key, err := s.key.render(e)
	if err != nil {
		return kafkago.Message{}, sink.Permanent(fmt.Errorf("render kafka.key for event %q: %w", e.ID, err))
	}
	value := e.Payload
	if value == nil {
		// A SQL NULL payload is an empty value, never a null one: on a
		// compacted topic a null value is a tombstone that deletes the key.
		value = []byte{}
	}
	if s.cfg.Envelope {
		value = envelope(e)
	}
	t := e.CommitTime
	if t.IsZero() {
		t = time.Now()
	}
	return kafkago.Message{
		Topic:   topic,
		Key:     []byte(key),
		Value:   value,
		Headers: headers(e),
		Time:    t,
	}, nil
}

// nextRound returns the longest prefix of pending within batch_size and
// batch_bytes (at least one message: each fits batch_bytes on its own).
func (s *Sink) nextRound(msgs []kafkago.Message, pending []int) []int {
	n, bytes := 0, 0
	for n < len(pending) && n < s.cfg.BatchSize {
		size := messageSize(&msgs[pending[n]])
		if n > 0 && bytes+size > s.cfg.BatchBytes {
			break
		}
		bytes += size
		n++
	}
	return pending[:n]
}

// send writes the messages msgs[i] for i in idx, in that order, and returns
// each one's error (nil when acknowledged), classified.
//
// A broker rejects a whole partition's record batch when it is larger than
// the topic's max.message.bytes, failing the innocent messages with it. So,
// as Java's producer splits a batch on MESSAGE_TOO_LARGE, send resends such
// messages in halves, in order, until each failure is a message alone.
func (s *Sink) send(ctx context.Context, msgs []kafkago.Message, idx []int) map[int]error {
	res := s.writeRound(ctx, msgs, idx)
	var large []int
	for _, i := range idx {
		if tooLarge(res[i]) {
			large = append(large, i)
		}
	}
	if len(large) <= 1 {
		return res
	}
	s.log.Warn("kafka rejected a record batch as too large; resending its messages in smaller batches",
		slog.Int("messages", len(large)))
	for i, err := range s.isolate(ctx, msgs, large) {
		res[i] = err
	}
	return res
}

// isolate resends the messages idx, all rejected together as too large: the
// first half, fully resolved, then the second. It stops at the first
// retriable failure, failing the messages not yet sent.
func (s *Sink) isolate(ctx context.Context, msgs []kafkago.Message, idx []int) map[int]error {
	res := map[int]error{}
	halves := [][]int{idx[:len(idx)/2], idx[len(idx)/2:]}
	for h, half := range halves {
		r := s.send(ctx, msgs, half)
		var retriable error
		for _, i := range half {
			res[i] = r[i]
			if r[i] != nil && !sink.IsPermanent(r[i]) && retriable == nil {
				retriable = r[i]
			}
		}
		if retriable != nil {
			for _, rest := range halves[h+1:] {
				for _, i := range rest {
					res[i] = errNotSent{retriable}
				}
			}
			break
		}
	}
	return res
}

// writeRound makes one WriteMessages call: one record batch per partition.
func (s *Sink) writeRound(ctx context.Context, msgs []kafkago.Message, idx []int) map[int]error {
	round := make([]kafkago.Message, len(idx))
	for j, i := range idx {
		round[j] = msgs[i]
	}
	// The writer bounds each produce request by request_timeout; this bounds
	// the wait for metadata too.
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout+s.cfg.RequestTimeout/2)
	defer cancel()
	err := s.writer.WriteMessages(ctx, round...)
	res := make(map[int]error, len(idx))
	if err == nil {
		return res
	}
	var werrs kafkago.WriteErrors
	var tooBig kafkago.MessageTooLargeError
	switch {
	case errors.As(err, &werrs) && len(werrs) == len(idx):
		for j, i := range idx {
			if werrs[j] != nil {
				res[i] = s.messageError(&msgs[i], werrs[j])
			}
		}
	case errors.As(err, &tooBig):
		// Not expected (Write checks sizes first); nothing was sent.
		for _, i := range idx {
			if i == tooBig.Message.WriterData {
				res[i] = sink.Permanent(fmt.Errorf("write to kafka topic %q: %w", msgs[i].Topic, err))
			} else {
				res[i] = errNotSent{err}
			}
		}
	default:
		for _, i := range idx {
			res[i] = s.messageError(&msgs[i], err)
		}
	}
	return res
}

// messageError describes and classifies the failure to write m.
func (s *Sink) messageError(m *kafkago.Message, err error) error {
	if errors.Is(err, kafkago.UnknownTopicOrPartition) {
		s.forgetTopic(m.Topic)
		hint := "set create_topics.enabled: true in the sink's kafka section, or create it"
		if s.cfg.CreateTopics.Enabled {
			hint = "it will be created again on the next attempt"
		}
		return fmt.Errorf("write to kafka topic %q: the topic is missing (%s): %w", m.Topic, hint, err)
	}
	return classify(fmt.Errorf("write to kafka topic %q: %w", m.Topic, err))
}

// deadLetter writes the permanently failed messages to the dead-letter
// topic and removes from errs those the brokers acknowledged there.
func (s *Sink) deadLetter(ctx context.Context, batch []*event.Event, msgs []kafkago.Message, errs map[int]error) {
	var idx []int
	for i := range batch {
		if err := errs[i]; err != nil && sink.IsPermanent(err) {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return
	}
	if err := s.ensureTopic(ctx, s.cfg.DeadLetterTopic); err != nil {
		for _, i := range idx {
			errs[i] = sink.Permanent(fmt.Errorf("%w; and it cannot go to the dead-letter topic: %v", errs[i], err))
		}
		return
	}
	dlq := make([]kafkago.Message, len(batch))
	var pending []int
	for _, i := range idx {
		e := batch[i]
		hs := append(headers(e),
			kafkago.Header{Key: HeaderDLQReason, Value: []byte(errs[i].Error())},
			kafkago.Header{Key: HeaderDLQOriginalTopic, Value: []byte(msgs[i].Topic)},
		)
		dlq[i] = kafkago.Message{
			Topic: s.cfg.DeadLetterTopic, Key: msgs[i].Key, Value: e.Payload,
			Headers: hs, Time: msgs[i].Time, WriterData: i,
		}
		if size := messageSize(&dlq[i]); size > s.cfg.BatchBytes {
			errs[i] = sink.Permanent(fmt.Errorf("%w; and it cannot go to dead-letter topic %q either: %d bytes exceed kafka.batch_bytes (%d)",
				errs[i], s.cfg.DeadLetterTopic, size, s.cfg.BatchBytes))
			continue
		}
		pending = append(pending, i)
	}
	for len(pending) > 0 {
		round := s.nextRound(dlq, pending)
		pending = pending[len(round):]
		res := s.send(ctx, dlq, round)
		for _, i := range round {
			if err := res[i]; err != nil {
				errs[i] = sink.Permanent(fmt.Errorf("%w; and writing it to dead-letter topic %q failed: %v",
					errs[i], s.cfg.DeadLetterTopic, err))
				continue
			}
			s.log.Warn("event sent to the kafka dead-letter topic",
				slog.String("event_id", batch[i].ID), slog.String("topic", s.cfg.DeadLetterTopic),
				slog.String("original_topic", msgs[i].Topic), slog.Any("reason", errs[i]))
			delete(errs, i)
		}
	}
}
