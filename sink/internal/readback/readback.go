// Package readback judges the messages a sink reads back from its
// destination on a restart (sink.Recoverer), newest first: whether each is
// this sink's, after the checkpoint, or the point where the read can stop.
// The Kafka and Redis sinks share it, and Hash, with which both compute a
// message's sink.Digest: what the pipeline compares before it skips an
// event, so that a message proves it is the sink's copy of an event by its
// bytes, not by the headers it carries. A Judge is safe for concurrent use.
package readback

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"io"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/position"
	"github.com/outbox-relay/outbox-relay/sink"
)

// MaxHeld is the most messages after the checkpoint a sink's read-back
// collects, over all its logs (Kafka partitions, Redis streams), before it
// gives up: ten times the default delivery.max_in_flight, which bounds the
// read's memory (about 250 bytes a message: its gtid, id, where it is and
// its digest, held by the pipeline until the stream passes its
// transaction) and time. A variable for tests.
var MaxHeld = 100_000

// Message is what a judge needs of a message read back.
type Message struct {
	// HasSink says whether the message names the sink that wrote it; Sink is
	// that name.
	HasSink bool
	Sink    string
	// GTID is the message's transaction ("" with GTIDs off).
	GTID string
}

// Judge tells, for one sink and one checkpoint, what each message read
// back means.
type Judge struct {
	writer string
	after  *position.Set
}

// New returns the judge of the sink named writer resuming after; an error
// wraps sink.ErrCannotRecover when nothing can be judged (no writer name,
// no GTID set).
func New(writer string, after event.Position) (*Judge, error) {
	if writer == "" {
		return nil, fmt.Errorf("the sink has no writer name, so its messages do not say who wrote them: %w", sink.ErrCannotRecover)
	}
	if after.GTIDSet == "" {
		return nil, fmt.Errorf("the checkpoint has no GTID set (GTIDs are off, or the sink has no checkpoint yet): %w", sink.ErrCannotRecover)
	}
	set, err := position.Parse(after.GTIDSet)
	if err != nil {
		return nil, fmt.Errorf("%v: %w", err, sink.ErrCannotRecover)
	}
	return &Judge{writer: writer, after: set}, nil
}

// Judge says what m, the next message of a log read from its end
// backwards, means: after (true) when it is this sink's message of a
// transaction after the checkpoint, to report, and the read goes on; false
// when the checkpoint holds its transaction, and the read of this log stops
// (the sink writes each log in commit order). A message with another sink's
// name, without a sink name or a GTID after the checkpoint, or with a GTID
// of the other flavor, is an error wrapping sink.ErrCannotRecover. A
// message without a sink name whose GTID the checkpoint holds stops the
// read: nothing the sink wrote after it is older.
func (j *Judge) Judge(m Message) (after bool, err error) {
	if m.HasSink && m.Sink != j.writer {
		return false, fmt.Errorf("was written by sink %q, not %q: another relay sink writes here: %w", m.Sink, j.writer, sink.ErrCannotRecover)
	}
	if m.GTID == "" {
		if !m.HasSink {
			return false, errForeign
		}
		return false, fmt.Errorf("has no gtid (the source has GTIDs off): %w", sink.ErrCannotRecover)
	}
	in, err := j.after.Contains(m.GTID)
	if err != nil {
		return false, fmt.Errorf("%v: %w", err, sink.ErrCannotRecover)
	}
	if !in && !m.HasSink {
		return false, errForeign
	}
	return !in, nil
}

var errForeign = fmt.Errorf("does not name the sink that wrote it: another producer writes here, or it predates read-back: %w", sink.ErrCannotRecover)

// TooMany is the error of a read-back that found more than MaxHeld
// messages after the checkpoint.
func TooMany() error {
	return fmt.Errorf("is past the %d messages after the checkpoint a read-back collects: %w", MaxHeld, sink.ErrCannotRecover)
}

// Hash builds a sink.Digest: each part is written with its length first,
// so that no two different sequences of parts hash alike. The zero value is
// not usable: call NewHash.
type Hash struct{ h hash.Hash }

// NewHash returns an empty Hash.
func NewHash() Hash { return Hash{sha256.New()} }

// Bytes adds one part.
func (h Hash) Bytes(b []byte) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(b)))
	h.h.Write(n[:])
	h.h.Write(b)
}

// String adds one part.
func (h Hash) String(s string) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(s)))
	h.h.Write(n[:])
	io.WriteString(h.h, s)
}

// Sum is the digest of the parts added.
func (h Hash) Sum() sink.Digest {
	var d sink.Digest
	h.h.Sum(d[:0])
	return d
}
