package kafka

import (
	"fmt"
	"strings"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/internal/section"
)

func init() {
	k := section.Kind("kafka", "at least kafka.brokers", func(c Config, p sink.Params) (*Sink, error) {
		// The sink retries its produce requests itself (it keeps one
		// in flight per partition): with the relay's one retry policy.
		c.Retry = p.Retry
		// Its messages name it, so that a restart can read back its own.
		c.Writer = p.Name
		return build(c, p.Logger)
	}, func(c Config, _ sink.AuditParams) (*Auditor, error) { return NewAuditor(c) })
	k.Insecure = func(sc config.SinkConfig) []sink.Warning {
		c := sc.(*Config)
		var out []sink.Warning
		if c.TLS.Enabled && c.TLS.InsecureSkipVerify {
			out = append(out, sink.Warning{Detail: "kafka.tls.insecure_skip_verify is true: the brokers' certificates are not verified",
				Fix: "set kafka.tls.ca_file to the brokers' CA and remove insecure_skip_verify"})
		}
		if strings.EqualFold(c.SASL.Mechanism, "plain") && !c.TLS.Enabled {
			out = append(out, sink.Warning{Detail: "kafka.sasl.mechanism is plain without kafka.tls: the password crosses the network in clear text",
				Fix: "set kafka.tls.enabled: true (or use scram-sha-512, which never sends the password)"})
		}
		return out
	}
	sink.Register(k)
}

// ReadTopics is how `outbox-relay gateway` reads back the records of a kafka
// section (the section is a kafkasource.Readable, an interface the gateway
// owns in types this package shares with it): the aggregate id comes from
// the key, so a custom key is refused unless the envelope carries it.
func (c *Config) ReadTopics() (brokers []string, topic string, templated bool, err error) {
	if !c.Envelope && c.Key != "" && c.Key != DefaultKey {
		return nil, "", false, fmt.Errorf("keys its messages with %q: the gateway reads the aggregate id from the key; use the default kafka.key (%s) or kafka.envelope: true", c.Key, DefaultKey)
	}
	return c.Brokers, c.Topic, strings.Contains(c.Topic, "{{"), nil
}

// ReadEvent reads back the event of a record a sink of the section wrote
// (EventOf, with the section's envelope setting).
func (c *Config) ReadEvent(m kafkago.Message) (*event.Event, error) { return EventOf(m, c.Envelope) }
