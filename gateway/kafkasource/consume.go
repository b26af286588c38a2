package kafkasource

import (
	kafkago "github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
)

// Readable is the ability of a sink's section (its config.SinkConfig)
// whose destination is Kafka topics: how the records its sink writes are
// read back as events. This package owns the interface and the Kafka
// kind's section implements it, in types neither owns (kafka-go's and
// event's), so that no sink kind imports this package and this package
// names no kind: ConsumeFor finds it by type assertion.
type Readable interface {
	// ReadTopics returns the brokers and the topic the sink writes
	// (templated: a template, whose topics must then be listed); an error
	// when the gateway cannot route its records (it names the setting to
	// change).
	ReadTopics() (brokers []string, topic string, templated bool, err error)
	// Dialer returns the dialer, with TLS and SASL (its files are read
	// then).
	Dialer() (*kafkago.Dialer, error)
	// ReadEvent reads back the event of a record the sink wrote; an error
	// for a record the relay did not write.
	ReadEvent(kafkago.Message) (*event.Event, error)
}

// Topics is how the records a sink writes are read back: what this package
// and package gateway/scaled read of a Readable section.
type Topics struct {
	Brokers []string
	// Dialer returns the dialer, with TLS and SASL (its files are read
	// then).
	Dialer func() (*kafkago.Dialer, error)
	// Topic is the topic the sink writes; Templated when it is a template
	// (the topics to read must be listed).
	Topic     string
	Templated bool
	// Decode reads back the event of a record the sink wrote; an error for
	// a record the relay did not write.
	Decode func(kafkago.Message) (*event.Event, error)
}

// Consume returns how to read back the records of a sink's section; an
// error when the gateway cannot route them (it names the setting to
// change).
type Consume func(config.SinkConfig) (Topics, error)

// ConsumeFor returns the Consume of sink sc; ok is false when its section
// is not Readable.
func ConsumeFor(sc config.Sink) (Consume, bool) {
	if _, ok := sc.Config.(Readable); !ok {
		return nil, false
	}
	return consume, true
}

// consume reads a Readable section (ConsumeFor has checked that it is one).
func consume(sc config.SinkConfig) (Topics, error) {
	r := sc.(Readable)
	brokers, topic, templated, err := r.ReadTopics()
	if err != nil {
		return Topics{}, err
	}
	return Topics{Brokers: brokers, Dialer: r.Dialer, Topic: topic, Templated: templated, Decode: r.ReadEvent}, nil
}
