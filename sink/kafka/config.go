package kafka

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event/cloudevent"
	"github.com/outbox-relay/outbox-relay/internal/tlsfiles"
	"github.com/outbox-relay/outbox-relay/retry"
	"github.com/outbox-relay/outbox-relay/sink/internal/route"
	"github.com/outbox-relay/outbox-relay/sink/internal/secret"
	"github.com/outbox-relay/outbox-relay/sink/internal/section"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
)

// Defaults that code outside Defaults needs as Go values (the Kafka
// gateway compares a sink's key with the default; decoding bounds its
// requests): each is its field's declared default (a test holds them).
var (
	DefaultKey            = config.DefaultOf(Config{}, "key")
	DefaultRequestTimeout = mustDuration(config.DefaultOf(Config{}, "request_timeout"))
)

func mustDuration(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return d
}

// Config configures a Kafka sink: the sink's `kafka:` section. Load
// applies its defaults (declared beside each field) and validates it; New
// does both for a Config written in Go.
type Config struct {
	// Brokers are the bootstrap brokers, "host:port". Required.
	Brokers []string `yaml:"brokers" example:"[127.0.0.1:9092]"`
	// Topic is a fixed topic name or a Go text/template over the event's
	// fields (.ID, .AggregateType, .AggregateID, .Type, .Table, .Source.GTID)
	// plus {{.Header "name"}} and the functions lower and upper. Default
	// "outbox.event.{{.AggregateType}}", the topic Debezium's outbox event
	// router uses.
	Topic string `yaml:"topic" default:"outbox.event.{{.AggregateType}}"`
	// Key is a template, like Topic, for the message key. Default
	// "{{.AggregateID}}". Order is kept per key: a key that does not
	// identify the aggregate weakens the per-aggregate order guarantee.
	Key string `yaml:"key" default:"{{.AggregateID}}"`
	// Envelope wraps the payload and the event's metadata in one JSON
	// document (see the package doc). Default false: the value is the payload
	// bytes exactly as committed.
	Envelope bool `yaml:"envelope"`
	// BatchSize is the most messages sent in one round of produce requests;
	// a larger Write is sent in several rounds, one after another. Default
	// 1000.
	BatchSize int `yaml:"batch_size" default:"1000"`
	// BatchBytes is the most bytes (kafka-go's per-message estimate) sent in
	// one round, and so in one partition's record batch. It must not exceed
	// the brokers' message.max.bytes (and the topics' max.message.bytes),
	// whose default is 1048588. A message larger than this fails permanently.
	// Default 1048576 (1 MiB).
	BatchBytes int `yaml:"batch_bytes" default:"1048576"`
	// Linger is no longer used: a partition's next produce request is sent
	// as soon as the previous one is acknowledged, with every message queued
	// for it meanwhile (batching is delivery.linger's, in the pipeline).
	// Accepted for compatibility; a value other than 0 is logged as ignored.
	Linger time.Duration `yaml:"linger"`
	// Compression is none, gzip, snappy, lz4 or zstd. Default none.
	Compression string `yaml:"compression" default:"none"`
	// TLS configures encryption to the brokers. Default off.
	TLS TLSConfig `yaml:"tls"`
	// SASL configures authentication. Default none.
	SASL SASLConfig `yaml:"sasl"`
	// ClientID is sent to the brokers with every request. Default
	// "outbox-relay".
	ClientID string `yaml:"client_id" default:"outbox-relay"`
	// RequestTimeout bounds each produce, metadata and create-topics request
	// and each dial. Default 10s.
	RequestTimeout time.Duration `yaml:"request_timeout" default:"10s"`
	// DeadLetterTopic, when set, receives the messages the brokers reject
	// permanently (too large, invalid), which then count as delivered.
	// Default "" (permanent failures are returned to the pipeline).
	DeadLetterTopic string `yaml:"dead_letter_topic"`
	// CreateTopics lets the sink create missing topics. Default off.
	CreateTopics CreateTopicsConfig `yaml:"create_topics"`
	// CloudEvents sends each event as a CloudEvent (Kafka protocol
	// binding): mode binary puts its attributes in ce_* headers and the
	// payload in the value; structured puts one
	// application/cloudevents+json document in the value. The sink's own
	// headers are kept. Default off. Not with envelope.
	CloudEvents cloudevent.Config `yaml:"cloudevents"`

	// Retry is the policy of the sink's own retries (Submit retries a failed
	// produce request until it succeeds or fails for good). Not read from the
	// config file: the relay sets it from delivery.retry_backoff and
	// delivery.max_retry_backoff. Default: the retry package's defaults.
	Retry retry.Policy `yaml:"-"`
	// Writer names the sink in every message's relay_sink header, so that a
	// restarted sink recognises its own messages when it reads its topics
	// back (Recover). Not read from the config file: the relay sets it to
	// the sink's name. Default "": no relay_sink or relay_partitions header,
	// and Recover cannot tell what the topics hold.
	Writer string `yaml:"-"`
}

// TLSConfig configures TLS to the brokers.
type TLSConfig = tlsfiles.Settings

// SASLConfig configures SASL authentication.
type SASLConfig struct {
	// Mechanism is "" (none), plain, scram-sha-256 or scram-sha-512.
	// Default "".
	Mechanism string `yaml:"mechanism"`
	// Username is required with a mechanism.
	Username string `yaml:"username"`
	// Password, PasswordFile (a file holding it; one trailing newline is
	// dropped) or PasswordEnv (the name of an environment variable holding
	// it): exactly one is required with a mechanism. Default "".
	Password     string `yaml:"password" secret:"true"`
	PasswordFile string `yaml:"password_file"`
	PasswordEnv  string `yaml:"password_env"`
}

// LogValue keeps the password out of logs.
func (c SASLConfig) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("mechanism", c.Mechanism),
		slog.String("username", c.Username),
		slog.String("password", "[redacted]"),
	)
}

// CreateTopicsConfig configures creating missing topics.
type CreateTopicsConfig struct {
	// Enabled creates missing topics: a fixed topic and the dead-letter topic
	// on Connect, a templated topic the first time an event is routed to it.
	// Default false: a missing topic is an error naming it.
	Enabled bool `yaml:"enabled"`
	// Partitions of a created topic; -1 takes the broker's num.partitions
	// (Kafka 2.4+). Default 3.
	Partitions int `yaml:"partitions" default:"3"`
	// ReplicationFactor of a created topic; -1 takes the broker's
	// default.replication.factor (Kafka 2.4+). Default 1: set 3 (or -1) for
	// a production cluster, or acks=all protects nothing.
	ReplicationFactor int `yaml:"replication_factor" default:"1"`
}

var compressions = []string{"none", "gzip", "snappy", "lz4", "zstd"}
var mechanisms = []string{"", "plain", "scram-sha-256", "scram-sha-512"}

// Defaults implements config.SinkConfig: every zero field gets the
// default declared beside it.
func (c *Config) Defaults() { section.Defaults(c, &c.CloudEvents) }

// Validate checks a configuration with its defaults applied. Each problem
// names the field and the bad value; all problems are returned, joined.
func (c *Config) Validate() error {
	p := section.ProblemsOf("kafka", &c.CloudEvents)
	bad := p.Bad
	if p.Err() == nil && c.CloudEvents.On() && c.Envelope { // the cloudevents block is valid
		bad("cloudevents: set either envelope or cloudevents, not both")
	}
	if len(c.Brokers) == 0 {
		bad("brokers: at least one broker is required, e.g. [\"localhost:9092\"]")
	}
	for i, b := range c.Brokers {
		if err := validBroker(b); err != nil {
			bad("brokers[%d]: %v", i, err)
		}
	}
	if t, err := route.Parse("kafka.topic", c.Topic); err != nil {
		p.Add(err)
	} else if fixed, ok := t.Fixed(); ok {
		if err := validTopicName(fixed); err != nil {
			bad("topic: %q: %v", c.Topic, err)
		}
	}
	if _, err := route.Parse("kafka.key", c.Key); err != nil {
		p.Add(err)
	}
	if c.BatchSize < 1 || c.BatchSize > 100000 {
		bad("batch_size: %d is not between 1 and 100000", c.BatchSize)
	}
	if c.BatchBytes < 1024 || c.BatchBytes > 256<<20 {
		bad("batch_bytes: %d is not between 1024 and 268435456", c.BatchBytes)
	}
	if c.Linger < 0 || c.Linger > time.Second {
		bad("linger: %s is not between 0 and 1s", c.Linger)
	}
	if !slices.Contains(compressions, c.Compression) {
		bad("compression: %q is not one of %s", c.Compression, strings.Join(compressions, ", "))
	}
	if c.RequestTimeout < 0 {
		bad("request_timeout: %s is negative", c.RequestTimeout)
	}
	if c.DeadLetterTopic != "" {
		if err := validTopicName(c.DeadLetterTopic); err != nil {
			bad("dead_letter_topic: %q: %v", c.DeadLetterTopic, err)
		}
	}
	if p := c.CreateTopics.Partitions; p < -1 || p == 0 || p > 100000 {
		bad("create_topics.partitions: %d is not -1 (broker default) or between 1 and 100000", p)
	}
	if r := c.CreateTopics.ReplicationFactor; r < -1 || r == 0 || r > 32767 {
		bad("create_topics.replication_factor: %d is not -1 (broker default) or between 1 and 32767", r)
	}
	p.TLS(c.TLS)
	s := c.SASL
	if !slices.Contains(mechanisms, s.Mechanism) {
		bad("sasl.mechanism: %q is not one of plain, scram-sha-256, scram-sha-512 (or empty for none)", s.Mechanism)
	}
	if s.Mechanism != "" {
		if s.Username == "" {
			bad("sasl.username: required with sasl.mechanism %q", s.Mechanism)
		}
		if n := secret.Count(s.Password, s.PasswordFile, s.PasswordEnv); n != 1 {
			bad("sasl: set exactly one of password, password_file, password_env (%d are set)", n)
		}
	}
	return p.Err()
}

func (c *Config) compression() kafkago.Compression {
	switch c.Compression {
	case "gzip":
		return kafkago.Gzip
	case "snappy":
		return kafkago.Snappy
	case "lz4":
		return kafkago.Lz4
	case "zstd":
		return kafkago.Zstd
	}
	return 0
}

func (c *SASLConfig) password() (string, error) {
	return secret.Resolve("kafka.sasl.password", c.Password, c.PasswordFile, c.PasswordEnv)
}

func (c *SASLConfig) build() (sasl.Mechanism, error) {
	if c.Mechanism == "" {
		return nil, nil
	}
	pw, err := c.password()
	if err != nil {
		return nil, err
	}
	switch c.Mechanism {
	case "plain":
		return plain.Mechanism{Username: c.Username, Password: pw}, nil
	case "scram-sha-256":
		return scram.Mechanism(scram.SHA256, c.Username, pw)
	case "scram-sha-512":
		return scram.Mechanism(scram.SHA512, c.Username, pw)
	}
	return nil, fmt.Errorf("kafka.sasl.mechanism: %q is not supported", c.Mechanism)
}

// validBroker checks a bootstrap address, "host:port". Its errors never
// quote more of the address than its host: a value such as
// "user:password@host:port" (kafka-go would log it on every reconnect) or
// "user:password" must not reach a log through its own error.
func validBroker(b string) error {
	if strings.Contains(b, "@") {
		return errors.New(`holds an "@": credentials do not belong in a broker address (they would be logged); write host:port and set kafka.sasl`)
	}
	if scheme, _, ok := strings.Cut(b, "://"); ok && !strings.ContainsAny(scheme, ":/") {
		return fmt.Errorf("has a scheme (%s://): write host:port", scheme)
	}
	if !strings.Contains(b, ":") {
		return fmt.Errorf("%q is not host:port: add the port, e.g. %s:9092", b, b)
	}
	host, port, err := net.SplitHostPort(b)
	if err != nil {
		return errors.New("is not host:port (an IPv6 address is written [::1]:9092)")
	}
	if host == "" {
		return errors.New("has no host: write host:port")
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte(".-_:%", c) >= 0) {
			return fmt.Errorf("the host has a character (%q) not allowed in a host name or address", c)
		}
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("host %q: the port is not a number from 1 to 65535", host)
	}
	return nil
}

// validTopicName applies Kafka's rules for topic names.
func validTopicName(name string) error {
	switch {
	case name == "":
		return errors.New("a topic name cannot be empty")
	case name == "." || name == "..":
		return errors.New("a topic name cannot be \".\" or \"..\"")
	case len(name) > 249:
		return fmt.Errorf("a topic name is at most 249 characters, this one has %d", len(name))
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("%q is not allowed in a topic name (only ASCII letters, digits, '.', '_' and '-')", r)
		}
	}
	return nil
}
