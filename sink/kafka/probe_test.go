package kafka

import (
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/sink/sinktest"
)

// Probe (what `outbox-relay check` runs) says whether the brokers answer and
// the sink's topics exist, or what to do; it creates nothing.
func TestProbe(t *testing.T) {
	c := startCluster(t, kfake.SeedTopics(3, "outbox.event.order"), kfake.SeedTopics(1, "outbox.dlq"))
	broker := c.ListenAddrs()
	auth := startCluster(t, kfake.EnableSASL(), kfake.Superuser("PLAIN", "relay", "right"))
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := l.Addr().String()
	l.Close()
	newSink := func(c Config) (sinktest.ProbingSink, error) { return New(c, nil) }
	sinktest.RunProbes(t, newSink, []sinktest.ProbeCase[Config]{
		{Name: "an existing topic passes with its partitions", Config: Config{Brokers: broker, Topic: "outbox.event.order"},
			Found: `topic "outbox.event.order" has 3 partitions`},
		{Name: "a missing topic fails naming how to create it", Config: Config{Brokers: broker, Topic: "outbox.event.nope"},
			Problem: `kafka topic "outbox.event.nope" (kafka.topic) does not exist`, Fix: "create_topics.enabled: true"},
		{Name: "a missing topic passes when the sink creates it", Config: Config{Brokers: broker, Topic: "outbox.event.new", CreateTopics: CreateTopicsConfig{Enabled: true}},
			Found: "the sink creates it"},
		{Name: "a template passes, counting the topics it may name", Config: Config{Brokers: broker},
			Found: `1 existing topics start with "outbox.event."`},
		{Name: "a template no topic matches passes, saying to create them", Config: Config{Brokers: broker, Topic: "missing.{{.AggregateType}}"},
			Found: `no topic starts with "missing." yet: create them`},
		{Name: "a missing dead-letter topic fails", Config: Config{Brokers: broker, DeadLetterTopic: "dlq.nope"},
			Problem: "(kafka.dead_letter_topic) does not exist", Fix: `create topic "dlq.nope"`},
		{Name: "an existing dead-letter topic passes", Config: Config{Brokers: broker, DeadLetterTopic: "outbox.dlq"},
			Found: `topic "outbox.dlq" has 1 partitions`},
		{Name: "a wrong password fails naming tls and sasl", Config: Config{Brokers: auth.ListenAddrs(), SASL: SASLConfig{Mechanism: "plain", Username: "relay", Password: "wrong"}},
			Problem: "read cluster metadata", Fix: "kafka.sasl"},
		{Name: "the right password passes", Config: Config{Brokers: auth.ListenAddrs(), SASL: SASLConfig{Mechanism: "plain", Username: "relay", Password: "right"}},
			Found: "kafka " + auth.ListenAddrs()[0] + " answers"},
		{Name: "an unreachable broker fails naming it", Config: Config{Brokers: []string{closed}, RequestTimeout: 2 * time.Second},
			Problem: closed, Fix: "reachable"},
	})
	md, err := New(Config{Brokers: broker, Topic: "outbox.event.new"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer md.Close(t.Context())
	if _, err := md.Probe(t.Context()); err == nil {
		t.Error("after the probes, topic outbox.event.new exists: a probe must create nothing")
	}
}
