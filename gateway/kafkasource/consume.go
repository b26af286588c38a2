package kafkasource

import (
	kafkago "github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink"
)

// Topics is how the records a sink writes are read back: what a sink kind
// whose destination is Kafka topics declares (its sink.Kind's Consume is a
// Consume), so that this package and the relay read them without importing
// the kind.
type Topics struct {
	Brokers []string
	// Dialer returns the dialer, with TLS and SASL (its files are read
	// then).
	Dialer func() (*kafkago.Dialer, error)
	// Topic is the topic the sink writes; Templated when it is a template
	// (the topics to read must then be listed).
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

// ConsumeFor returns the Consume of the kind of section sc; ok is false
// when its kind declares none. A Consume field of another type is a
// programming error of the kind's package, and panics.
func ConsumeFor(sc config.Sink) (Consume, bool) {
	k, ok := sink.KindOf(sc.Type)
	if !ok || k.Consume == nil {
		return nil, false
	}
	c, ok := k.Consume.(Consume)
	if !ok {
		panic("kafkasource: sink kind " + k.Type + " declares a Consume that is not a kafkasource.Consume")
	}
	return c, true
}
