// Package readback judges the messages a sink reads back from its
// destination on a restart (sink.Recoverer), newest first: whether each is
// this sink's, after the checkpoint, or the point where the read can stop.
// The Kafka and Redis sinks share it, and Hash, with which both compute a
// message's sink.Digest: what the pipeline compares before it skips an
// event, so that a message proves it is the sink's copy of an event by its
// bytes, not by the headers it carries. A Judge is safe for concurrent use;
// a Claims is used by one goroutine.
//
// What a read-back reads and keeps is bounded in bytes, not only in
// messages, whatever a neighbour with write access to the destination puts
// there:
//   - one read brings in about PageBytes (the Redis sink reads through a
//     server-side script that returns whole entries up to PageBytes a page,
//     and of a larger entry only its short read-back fields; the Kafka sink
//     fetches 1 MiB, or the one record batch its topic's max.message.bytes
//     allows, which its client decompresses whole);
//   - a message read is judged as it is read and kept only as a claim: its
//     gtid (at most MaxGTID bytes), its id (at most MaxID), where it is, and
//     its digest. A message larger than the sink writes or than the
//     read-back reads whole, or with a longer gtid or id, is no claim: it is
//     dropped at once, reported as dropped (sink.Held.Dropped) and counted;
//   - the claims of one read-back together hold at most MaxHeld messages and
//     MaxHeldBytes bytes (Claims); past either, the read-back gives up
//     (TooMany), and the restart is at-least-once.
package readback

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"strings"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/position"
	"github.com/outbox-relay/outbox-relay/sink"
)

// MaxHeld is the most messages after the checkpoint a sink's read-back
// collects, over all its logs (Kafka partitions, Redis streams), before it
// gives up: ten times the default delivery.max_in_flight, which bounds the
// read's time, and with MaxHeldBytes its memory (about 250 bytes a message:
// its gtid, id, where it is and its digest, held by the pipeline until the
// stream passes its transaction). Dropped messages count too. A variable
// for tests.
var MaxHeld = 100_000

// MaxHeldBytes is the most bytes the messages a read-back collects hold
// together (Cost each), before it gives up. A variable for tests.
var MaxHeldBytes = 32 << 20

// PageBytes is about the most bytes of messages one read of the
// destination brings in (the Redis sink's page). A variable for tests.
var PageBytes = 1 << 20

// MaxID and MaxGTID are the longest id and gtid a claim keeps. A gtid is
// at most 90 bytes (a MySQL tagged GTID: a UUID, a 32-byte tag, a 20-digit
// number); an event id is what the outbox row holds (a UUID or a number, as
// a rule). A message with a longer one is dropped at once: a longer gtid is
// none the relay writes, and an event with a longer id is sent again after
// a crash instead of being proven by read-back.
const (
	MaxID   = 1024
	MaxGTID = 128
)

// Oversized is the sink.Held.Dropped of a message dropped because it, its
// gtid or its id is larger than a claim keeps.
const Oversized = "oversized"

// heldCost is what a claim costs besides its strings: the sink.Held, and
// the pipeline's entry for it.
const heldCost = 160

// maxAt is the longest At a claim keeps (a Redis stream key can be long).
const maxAt = 512

// Cost is what Claims counts h as against MaxHeldBytes.
func Cost(h sink.Held) int { return heldCost + len(h.GTID) + len(h.ID) + len(h.At) + len(h.Dropped) }

// Clip returns s if it has at most n bytes, else a copy of its first n
// bytes and "…" (so that a clipped string is longer than n, and never
// shares the bytes it was cut from).
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.Clone(s[:n]) + "…"
}

// Claims collects what one read-back reports, within MaxHeld messages and
// MaxHeldBytes bytes. The zero value is empty and ready.
type Claims struct {
	held    []sink.Held
	bytes   int
	dropped int
}

// Hold adds a claim: h's GTID and ID fit MaxGTID and MaxID (Judge.Weigh
// said Hold). The error is TooMany's, past either bound.
func (c *Claims) Hold(h sink.Held) error {
	h.At = Clip(h.At, maxAt)
	n := Cost(h)
	if len(c.held) >= MaxHeld || c.bytes+n > MaxHeldBytes {
		return TooMany()
	}
	c.held = append(c.held, h)
	c.bytes += n
	return nil
}

// Drop adds a message dropped at once for why (Oversized), at at, with its
// gtid and id cut short for the log line.
func (c *Claims) Drop(why, at, gtid, id string) error {
	if err := c.Hold(sink.Held{GTID: Clip(gtid, MaxGTID), ID: Clip(id, 64), At: at, Dropped: why}); err != nil {
		return err
	}
	c.dropped++
	return nil
}

// Len is how many messages were added, dropped ones too; Dropped how many
// were dropped; Bytes what they cost together.
func (c *Claims) Len() int     { return len(c.held) }
func (c *Claims) Dropped() int { return c.dropped }
func (c *Claims) Bytes() int   { return c.bytes }

// Report calls seen for every message added, in the order added.
func (c *Claims) Report(seen func(sink.Held)) {
	for _, h := range c.held {
		seen(h)
	}
}

// Finish ends a read-back that read what names (slog.Int("topics", 3)):
// it logs msg at INFO with what the claims hold and the checkpoint they
// are after, then Reports them to seen.
func (c *Claims) Finish(log *slog.Logger, msg string, what slog.Attr, after event.Position, seen func(sink.Held)) {
	log.Info(msg, what,
		slog.Int("held_after_checkpoint", c.Len()-c.Dropped()), slog.Int("dropped", c.Dropped()),
		slog.Int("held_bytes", c.Bytes()), slog.String("checkpoint", after.GTIDSet))
	c.Report(seen)
}

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
		return false, fmt.Errorf("was written by sink %q, not %q: another relay sink writes here: %w", Clip(m.Sink, 64), j.writer, sink.ErrCannotRecover)
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

// Verdict is what a message read back means (Judge.Weigh).
type Verdict int

const (
	// Stop: the checkpoint holds the message's transaction; the read of
	// its log stops.
	Stop Verdict = iota
	// Hold: a claim of the sink's after the checkpoint, to report.
	Hold
	// Drop: after the checkpoint, or not to be placed, but too large to be
	// a claim: dropped at once (Claims.Drop); the read goes on.
	Drop
)

// Weigh is Judge for a message whose id is id and that is oversized when
// it is larger than the sink writes or than the read-back reads whole
// (then only its short headers or fields are in m). Such a message, or one
// whose id or gtid is longer than a claim keeps, is Drop when it is after
// the checkpoint, or when it names this sink but its gtid is missing or too
// long to place; otherwise it is judged as Judge does.
func (j *Judge) Weigh(m Message, id string, oversized bool) (Verdict, error) {
	large := oversized || len(id) > MaxID || len(m.GTID) > MaxGTID
	if len(m.GTID) > MaxGTID {
		m.GTID = ""
	}
	if large && m.HasSink && m.Sink == j.writer && m.GTID == "" {
		return Drop, nil
	}
	after, err := j.Judge(m)
	switch {
	case err != nil:
		return Stop, err
	case !after:
		return Stop, nil
	case large:
		return Drop, nil
	}
	return Hold, nil
}

var errForeign = fmt.Errorf("does not name the sink that wrote it: another producer writes here, or it predates read-back: %w", sink.ErrCannotRecover)

// TooMany is the error of a read-back that found more than MaxHeld
// messages, or MaxHeldBytes bytes of them, after the checkpoint.
func TooMany() error {
	return fmt.Errorf("is past the %d messages or %d bytes after the checkpoint a read-back collects: %w", MaxHeld, MaxHeldBytes, sink.ErrCannotRecover)
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
