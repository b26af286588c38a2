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
	"github.com/segmentio/kafka-go/protocol"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/event/cloudevent"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/internal/route"
	"github.com/outbox-relay/outbox-relay/sink/internal/section"
)

// Sink delivers outbox events to Kafka. Create it with New.
type Sink struct {
	cfg       Config
	log       *slog.Logger
	topic     *route.Template
	key       *route.Template
	transport *kafkago.Transport
	client    *kafkago.Client
	balancer  kafkago.Murmur2Balancer
	// writer is cfg.Writer as the relay_sink header's value, shared by
	// every message (nil when there is no Writer).
	writer []byte

	mu    sync.Mutex            // guards known
	known map[string]topicState // topics seen to exist (or created)

	qmu     sync.Mutex // guards parts and closed
	parts   map[partitionKey]*partitionQueue
	closed  bool
	closing chan struct{} // closed by Close: waits end, queues fail
	workers sync.WaitGroup
}

// topicState is what the sink knows of a topic: its partition count, and
// when that was read (it is read again after topicRefresh).
type topicState struct {
	partitions int
	at         time.Time
}

// topicRefresh is how long a topic's partition count is trusted.
const topicRefresh = 30 * time.Second

var (
	_ sink.Sink      = (*Sink)(nil)
	_ sink.Submitter = (*Sink)(nil)
)

// New returns a sink for cfg as a program writes it: it applies cfg's
// defaults and validates it. It does not touch the network: Connect does.
func New(cfg Config, logger *slog.Logger) (*Sink, error) {
	return section.Build(cfg, func(c Config) (*Sink, error) { return build(c, logger) })
}

// build returns a sink for cfg with its defaults applied and validated
// (by New, or by config.Load for the sink's section: they are not applied
// twice).
func build(cfg Config, logger *slog.Logger) (*Sink, error) {
	cfg.Retry = cfg.Retry.WithDefaults() // set by the relay, not the file
	logger = section.Logger(logger, "kafka")
	topic, err := route.Parse("kafka.topic", cfg.Topic)
	if err != nil {
		return nil, err
	}
	key, err := route.Parse("kafka.key", cfg.Key)
	if err != nil {
		return nil, err
	}
	transport, err := cfg.transport()
	if err != nil {
		return nil, err
	}
	addr := kafkago.TCP(cfg.Brokers...)
	if cfg.Linger != 0 {
		logger.Warn("kafka.linger is ignored: a partition's next request is sent as soon as the previous one is acknowledged; use delivery.linger to wait for batches to fill", slog.Duration("linger", cfg.Linger))
	}
	s := &Sink{
		cfg:       cfg,
		log:       logger,
		topic:     topic,
		key:       key,
		transport: transport,
		client:    &kafkago.Client{Addr: addr, Transport: transport, Timeout: cfg.RequestTimeout},
		// Murmur2 of the key, as Java's default partitioner: a key lands on the
		// partition Java and librdkafka ("murmur2_random") producers pick.
		// Consistent also hashes an empty key rather than scattering it.
		balancer: kafkago.Murmur2Balancer{Consistent: true},
		known:    map[string]topicState{},
		parts:    map[partitionKey]*partitionQueue{},
		closing:  make(chan struct{}),
	}
	if cfg.Writer != "" {
		s.writer = []byte(cfg.Writer)
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
	if fixed, ok := s.topic.Fixed(); ok {
		topics = append(topics, fixed)
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

// Close stops the sink: messages still queued (their Write or Submit ctx
// ended, or nobody waits for them) fail with a retriable error, a request in
// flight ends within request_timeout, and Close waits for the partitions'
// goroutines, then closes the connections.
func (s *Sink) Close(ctx context.Context) error {
	s.qmu.Lock()
	if !s.closed {
		s.closed = true
		close(s.closing)
	}
	s.qmu.Unlock()
	done := make(chan struct{})
	go func() { s.workers.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("close kafka sink: %w", ctx.Err())
	}
	s.transport.CloseIdleConnections()
	return nil
}

// ensureTopic returns nil when topic is known to exist, creating it if
// configured to. Results are cached: each topic is checked once, until a
// write finds it missing again.
func (s *Sink) ensureTopic(ctx context.Context, topic string) error {
	_, err := s.partitions(ctx, topic)
	return err
}

// partitions returns the partition count of topic, checking that it exists
// (creating it if configured to) when it is not known or was read more than
// topicRefresh ago.
func (s *Sink) partitions(ctx context.Context, topic string) (int, error) {
	s.mu.Lock()
	st, ok := s.known[topic]
	s.mu.Unlock()
	if ok && time.Since(st.at) < topicRefresh {
		return st.partitions, nil
	}
	if ok {
		// Known to exist: only the count may have changed.
		if n, err := s.readPartitions(ctx, topic); err == nil {
			s.setPartitions(topic, n)
			return n, nil
		}
		return st.partitions, nil
	}
	if err := s.checkTopic(ctx, topic); err != nil {
		return 0, err
	}
	n, err := s.readPartitions(ctx, topic)
	if err != nil {
		return 0, err
	}
	s.setPartitions(topic, n)
	return n, nil
}

func (s *Sink) setPartitions(topic string, n int) {
	s.mu.Lock()
	s.known[topic] = topicState{partitions: n, at: time.Now()}
	s.mu.Unlock()
}

// readPartitions reads topic's partition count from the cluster metadata
// (the transport caches it for a few seconds).
func (s *Sink) readPartitions(ctx context.Context, topic string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	md, err := s.client.Metadata(ctx, &kafkago.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return 0, fmt.Errorf("look up kafka topic %q: %w", topic, err)
	}
	for _, t := range md.Topics {
		if t.Name != topic {
			continue
		}
		if t.Error != nil {
			return 0, classify(fmt.Errorf("look up kafka topic %q: %w", topic, t.Error))
		}
		if len(t.Partitions) == 0 {
			return 0, fmt.Errorf("look up kafka topic %q: no partitions", topic)
		}
		return len(t.Partitions), nil
	}
	return 0, fmt.Errorf("look up kafka topic %q: %w", topic, kafkago.UnknownTopicOrPartition)
}

// checkTopic returns nil when topic exists, creating it if configured to.
func (s *Sink) checkTopic(ctx context.Context, topic string) error {
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
	return nil
}

// forgetTopic makes the next write to topic check (or create) it again.
func (s *Sink) forgetTopic(topic string) {
	s.mu.Lock()
	delete(s.known, topic)
	s.mu.Unlock()
}

// message builds the Kafka message of e, without the sink's own headers
// (relay_sink, relay_partitions); an error is permanent.
func (s *Sink) message(e *event.Event) (kafkago.Message, error) {
	topic, err := s.route(e)
	if err != nil {
		return kafkago.Message{}, err
	}
	r, err := s.build(e, topic, -1, nil)
	if err != nil {
		return kafkago.Message{}, err
	}
	return r.message(), nil
}

// route renders e's topic; an error is permanent.
func (s *Sink) route(e *event.Event) (string, error) {
	topic, err := s.topic.Render(e)
	if err != nil {
		return "", sink.Permanent(fmt.Errorf("render kafka.topic for event %q: %w", e.ID, err))
	}
	if err := validTopicName(topic); err != nil {
		return "", sink.Permanent(fmt.Errorf("kafka.topic rendered %q for event %q: %w", topic, e.ID, err))
	}
	return topic, nil
}

// build builds the Kafka record of e for topic (a topic of partitions
// partitions; negative: without the sink's own headers), appending its key
// and headers to *buf (nil: a buffer of its own), from which they are cut;
// an error is permanent. It is the one place a message is made: what Submit
// produces and what Digest hashes are built here alike.
func (s *Sink) build(e *event.Event, topic string, partitions int, buf *[]byte) (wireRecord, error) {
	key, err := s.key.Render(e)
	if err != nil {
		return wireRecord{}, sink.Permanent(fmt.Errorf("render kafka.key for event %q: %w", e.ID, err))
	}
	if buf == nil {
		own := make([]byte, 0, headersLen(e)+len(key))
		buf = &own
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
	b := *buf
	at := len(b)
	b = append(b, key...)
	r := wireRecord{topic: topic, key: b[at:len(b):len(b)], value: value, time: t}
	at = len(b)
	b, r.nh = appendHeaders(b, e, s.writer, partitions)
	switch ce := &s.cfg.CloudEvents; ce.Mode {
	case cloudevent.Binary:
		// Kafka protocol binding, binary mode: ce_<attribute> headers,
		// datacontenttype as content-type.
		ce.Attributes(e, func(name, v string) {
			if name == "datacontenttype" {
				b = appendHeader(b, "content-type", v)
			} else {
				b = appendHeader(b, "ce_"+name, v)
			}
			r.nh++
		})
	case cloudevent.Structured:
		value = ce.Structured(e)
		b = appendHeader(b, "content-type", cloudevent.ContentTypeJSON)
		r.nh++
		r.value = value
	}
	r.headers = b[at:len(b):len(b)]
	*buf = b
	return r, nil
}

// topicMissing reports whether err says the topic does not exist: the
// broker's UNKNOWN_TOPIC_OR_PARTITION, or kafka-go's own "topic not found"
// when its cached cluster metadata lacks the topic (as after a broker that
// lost its topics came back), which it returns without asking the broker.
func topicMissing(err error) bool {
	return errors.Is(err, kafkago.UnknownTopicOrPartition) || errors.Is(err, protocol.ErrNoTopic)
}

// messageError describes and classifies the failure to write to topic.
func (s *Sink) messageError(topic string, err error) error {
	if topicMissing(err) {
		s.forgetTopic(topic)
		hint := "set create_topics.enabled: true in the sink's kafka section, or create it"
		if s.cfg.CreateTopics.Enabled {
			hint = "it will be created again on the next attempt"
		}
		return fmt.Errorf("write to kafka topic %q: the topic is missing (%s): %w", topic, hint, err)
	}
	return classify(fmt.Errorf("write to kafka topic %q: %w", topic, err))
}
