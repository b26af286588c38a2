package sink

import (
	"context"
	"time"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
)

// Auditor reads a sink's destination back for `outbox-relay audit`, which
// re-reads a range of the binlog and checks that the destination holds every
// committed outbox event of it. A kind whose destination can be read back
// declares it with Kind.Audit. An Auditor is used by one goroutine.
type Auditor interface {
	// Dest is where the sink sends e: a topic, a subject, a stream key, a
	// routing key. The audit routes each event of the range with it and
	// hands the destinations so found to ReadBack.
	Dest(e *event.Event) (string, error)
	// ReadBack calls each, in each log's order, for every message stored
	// at dests (sorted, never empty) from the earliest commit time of the
	// range (from: a second before it, as commit times have whole seconds)
	// to the destination's end when the read begins. A destination that
	// does not exist holds nothing. An error of each is returned as it is.
	ReadBack(ctx context.Context, from time.Time, dests []string, each func(Stored) error) error
	// Close releases the Auditor's connections.
	Close() error
}

// Stored is one message read back from a destination.
type Stored struct {
	// ID is the event id the message carries ("id" header, field or
	// message id); GTID its transaction ("" without one).
	ID, GTID string
	// Time is when the message was stored (or, for Kafka, the record's
	// timestamp: its commit time): a message without a GTID claims the
	// audited range by it.
	Time time.Time
	// Log is the ordered log it is in ("topic[partition]", a stream, a
	// queue) and Offset its place there; At says where it is for humans
	// ("": Log@Offset).
	Log    string
	Offset int64
	At     string
}

// AuditParams is what Kind.Audit gets besides the section: the audit
// command's settings for destinations that need them.
type AuditParams struct {
	Config config.SinkConfig
	// ClockSkew is how far the destination server's clock may be behind
	// the source's, for a destination that stamps messages with its own
	// clock (NATS, Redis, RabbitMQ): its read starts that much earlier.
	ClockSkew time.Duration
	// Flags are the values of the kind's own audit flags (Kind.AuditFlags),
	// by name; a flag not given is absent.
	Flags map[string]string
}
