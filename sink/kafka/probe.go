package kafka

import (
	"context"
	"fmt"
	"strings"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/sink"
)

// Probe checks that the brokers answer a metadata request with the sink's
// TLS and SASL settings, and that the fixed topic and the dead-letter topic
// exist (or that the sink will create them: create_topics.enabled). A
// templated topic is named per event: Probe lists the topics that start
// with the template's fixed part. It writes nothing and creates nothing.
func (s *Sink) Probe(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	brokers := strings.Join(s.cfg.Brokers, ", ")
	md, err := s.client.Metadata(ctx, &kafkago.MetadataRequest{})
	if err != nil {
		return "", &sink.Problem{Err: fmt.Errorf("kafka brokers %s: read cluster metadata: %w", brokers, err),
			Fix: "make a broker of kafka.brokers reachable from this host, and check kafka.tls and kafka.sasl against the listener's"}
	}
	partitions := map[string]int{}
	for _, t := range md.Topics {
		if t.Error == nil {
			partitions[t.Name] = len(t.Partitions)
		}
	}
	var found []string
	check := func(key, topic string) error {
		if n, ok := partitions[topic]; ok {
			found = append(found, fmt.Sprintf("topic %q has %d partitions", topic, n))
			return nil
		}
		if s.cfg.CreateTopics.Enabled {
			found = append(found, fmt.Sprintf("topic %q does not exist yet; the sink creates it (create_topics)", topic))
			return nil
		}
		return &sink.Problem{Err: fmt.Errorf("kafka topic %q (%s) does not exist on %s", topic, key, brokers),
			Fix: fmt.Sprintf("create topic %q, or set create_topics.enabled: true in the sink's kafka section", topic)}
	}
	if topic, ok := s.topic.Fixed(); ok {
		if err := check("kafka.topic", topic); err != nil {
			return "", err
		}
	} else {
		prefix, _, _ := strings.Cut(s.cfg.Topic, "{{")
		n := 0
		for t := range partitions {
			if strings.HasPrefix(t, prefix) {
				n++
			}
		}
		switch {
		case n > 0:
			found = append(found, fmt.Sprintf("topics come from the template %q; %d existing topics start with %q", s.cfg.Topic, n, prefix))
		case s.cfg.CreateTopics.Enabled:
			found = append(found, fmt.Sprintf("topics come from the template %q; the sink creates each (create_topics)", s.cfg.Topic))
		default:
			found = append(found, fmt.Sprintf("topics come from the template %q, and no topic starts with %q yet: create them before their events come (or set create_topics.enabled: true)", s.cfg.Topic, prefix))
		}
	}
	if s.cfg.DeadLetterTopic != "" {
		if err := check("kafka.dead_letter_topic", s.cfg.DeadLetterTopic); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("kafka %s answers; %s", brokers, strings.Join(found, "; ")), nil
}
