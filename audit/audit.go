// Package audit proves a destination against the binlog: it re-reads a
// range of the source's binlog with the relay's own reader (canal) and checks
// that a sink's destination holds every committed outbox event of it.
//
// An audit has three steps. Scan reads the range and hands each committed
// outbox event on, in binlog order, with its Span (where the range begins
// and ends, by GTID and commit time). The sink's sink.Auditor (declared by
// its kind with sink.Kind.Audit: Kafka, NATS, Redis, RabbitMQ) reads the
// destination back, and Run hands each message on as a Delivery. A
// Comparison matches the two by event id and makes the Report:
//
//   - missing: events of the range no message carries (the audit fails);
//   - unexpected: messages that claim a transaction of the range (their
//     "gtid" header, or without one their time) whose id is not an event
//     of it;
//   - duplicates: ids delivered more than once (at-least-once delivery makes
//     them legitimate: reported, not failed);
//   - order: per aggregate, within one ordered log (a Kafka partition, a
//     NATS stream, a Redis stream key, a RabbitMQ queue), a first delivery
//     of an event after that of a later-committed one.
//
// Webhooks cannot be read back: each endpoint's checkpoint says which
// events the receiver acknowledged with a 2xx, the dead-letter store which
// were not delivered; with a receiver-provided list of ids, those are the
// deliveries. stdout cannot be read back and is not auditable.
//
// # Memory
//
// Nothing grows with the range in memory. The Comparison is an external
// sort-merge: events and deliveries are kept in sort buffers up to
// Options.Memory bytes in all (a third each for events, deliveries and the
// first deliveries of the order check), and past that sorted and spilled to
// runs in Options.TempDir, which are merged back (at most 16 open at once,
// each read through a 32 KiB buffer). A Report lists at most Options.List
// findings of each kind and counts the rest. What remains outside the bound:
// the reader's one transaction in progress (as in the relay), the set of
// destination names the range routes to (topics, stream keys), and the
// clients' own buffers (the Kafka fetch is capped at a few MB).
//
// # Concurrency
//
// A Comparison is used by one goroutine; Scan calls its callback from the
// goroutine that called it.
package audit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/position"
)

// Bound is one end of a range: a position (a GTID set, as a checkpoint
// holds it) or a commit time.
type Bound struct {
	GTID string
	Time time.Time
}

// ParseBound reads a time (RFC 3339, or "2006-01-02 15:04:05" in UTC) or
// else a GTID set.
func ParseBound(s string) (Bound, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Bound{}, errors.New("empty: give a GTID set or a time")
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02 15:04:05", "2006-01-02T15:04:05", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return Bound{Time: t.UTC()}, nil
		}
	}
	return Bound{GTID: s}, nil
}

func (b Bound) String() string {
	if b.GTID != "" {
		return "gtid " + b.GTID
	}
	return b.Time.Format(time.RFC3339)
}

// Event is one committed outbox event of the range.
type Event struct {
	ID, AggregateID string
	GTID            string
	Dest            string // where the sink sends it: a topic, subject, stream key, routing key
	Seq             int64  // its place in the range, in binlog order, from 1
	Commit          time.Time
}

// Missing is an event the destination lacks, and what is known of why.
type Missing struct {
	Event
	Why string
}

// Report is what an audit found.
type Report struct {
	Sink         string
	Events       int // committed outbox events in the range
	Transactions int // transactions read (with or without outbox events)
	First, Last  time.Time
	// Missing lists the earliest-committed missing events (at most
	// Options.List); MissingCount counts them all.
	Missing      []Missing
	MissingCount int
	// Unexpected lists messages (at most Options.List) as "id (where)".
	Unexpected      []string
	UnexpectedCount int
	// Duplicates maps ids delivered more than once to their deliveries (at
	// most Options.List ids); DuplicateCount counts the ids.
	Duplicates     map[string]int
	DuplicateCount int
	// Order lists first deliveries out of commit order per aggregate.
	Order      []string
	OrderCount int
	Notes      []string
	// Spill is what the comparison wrote to its temporary directory.
	Spill SpillStats
}

// OK reports whether nothing is missing.
func (r Report) OK() bool { return r.MissingCount == 0 }

// Range is the part of the binlog read: transactions after From (a GTID
// set: those it does not hold; a time: committed at or after it) up to and
// including To (a GTID set: those it holds; a time: committed at or
// before it), and never past the server's position when the read began.
type Range struct{ From, To Bound }

// Span is the range as read: the positions before its first transaction
// and after its last, its events' first and last commit times, and counts.
type Span struct {
	Flavor       string
	Start, End   event.Position
	First, Last  time.Time
	Events       int
	Transactions int

	parsed             bool
	mariaStart, mariaE map[uint32]mysql.MariadbGTID
	mysqlStart, mysqlE *mysql.MysqlGTIDSet
}

// Claims reports whether a message that names transaction gtid (may be "")
// and was stamped at ts belongs to the range: its GTID is one of the range's
// transactions; without a GTID (GTIDs off), its time is strictly inside the
// range's commit seconds.
func (s *Span) Claims(gtid string, ts time.Time) bool {
	if gtid == "" || s.End.GTIDSet == "" {
		t := ts.Truncate(time.Second)
		return s.Events > 0 && t.After(s.First.Truncate(time.Second)) && t.Before(s.Last.Truncate(time.Second))
	}
	s.parse()
	if s.Flavor == mysql.MariaDBFlavor {
		g, err := mysql.ParseMariadbGTID(gtid)
		if err != nil || s.mariaE == nil {
			return false
		}
		end, ok := s.mariaE[g.DomainID]
		if !ok || g.SequenceNumber > end.SequenceNumber {
			return false
		}
		start, ok := s.mariaStart[g.DomainID]
		return !ok || g.SequenceNumber > start.SequenceNumber
	}
	set, err := mysql.ParseMysqlGTIDSet(gtid)
	if err != nil || s.mysqlE == nil {
		return false
	}
	g := set.(*mysql.MysqlGTIDSet)
	return s.mysqlE.Contain(g) && (s.mysqlStart == nil || !s.mysqlStart.Contain(g))
}

func (s *Span) parse() {
	if s.parsed {
		return
	}
	s.parsed = true
	if s.Flavor == mysql.MariaDBFlavor {
		s.mariaStart, _ = position.MariaDBPositions(s.Start.GTIDSet)
		if m, err := position.MariaDBPositions(s.End.GTIDSet); err == nil {
			s.mariaE = m
		}
		return
	}
	parse := func(v string) *mysql.MysqlGTIDSet {
		set, err := mysql.ParseMysqlGTIDSet(v)
		if err != nil {
			return nil
		}
		return set.(*mysql.MysqlGTIDSet)
	}
	s.mysqlStart, s.mysqlE = parse(s.Start.GTIDSet), parse(s.End.GTIDSet)
}

var errDone = errors.New("end of range")

// Scan reads the range with the reader config rc and calls each for every
// committed outbox event of it, in binlog order, with the event's Seq and
// the position after its transaction. start is where to begin (the From GTID
// set, or a binlog file's start for a From time); cur is the server's
// position when the audit began, past which it never reads.
func Scan(ctx context.Context, rc canal.Config, rng Range, start, cur event.Position, each func(Event, *event.Event, event.Position) error) (*Span, error) {
	span := &Span{Flavor: rc.Flavor, Start: start, End: start}
	if position.Covers(rc.Flavor, start, cur) {
		return span, nil
	}
	var stopAt event.Position
	if rng.To.GTID != "" {
		stopAt = event.Position{GTIDSet: rng.To.GTID}
	}
	reader, err := canal.New(rc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	prev := start
	from := rng.From.Time.Truncate(time.Second)
	err = reader.Run(ctx, start, func(_ context.Context, txn *event.Txn) error {
		switch {
		case !rng.To.Time.IsZero() && txn.CommitTime.After(rng.To.Time):
			return errDone
		case rng.From.Time.IsZero() || !txn.CommitTime.Before(from):
			if span.Transactions == 0 {
				span.Start = prev
			}
			span.Transactions++
			span.End = txn.Position
			for _, e := range txn.Events {
				span.Events++
				if span.First.IsZero() {
					span.First = e.CommitTime
				}
				span.Last = e.CommitTime
				ev := Event{ID: strings.Clone(e.ID), AggregateID: strings.Clone(e.AggregateID), GTID: strings.Clone(e.Source.GTID),
					Seq: int64(span.Events), Commit: e.CommitTime}
				if err := each(ev, e, txn.Position); err != nil {
					return err
				}
			}
		}
		prev = txn.Position
		if rng.To.GTID != "" && position.Covers(rc.Flavor, txn.Position, stopAt) || position.Covers(rc.Flavor, txn.Position, cur) {
			return errDone
		}
		return nil
	})
	if errors.Is(err, errDone) {
		return span, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the binlog range: %w", err)
	}
	return nil, ctx.Err()
}
