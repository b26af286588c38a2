// Package audit proves a destination against the binlog: it re-reads a
// range of the source's binlog with the relay's own reader (canal) and checks
// that a sink's destination holds every committed outbox event of it.
//
// What can be checked depends on the sink:
//
//   - kafka: the topics the events route to are read back, from the offsets
//     of the range's first commit time to their ends, and matched by the
//     "id" header: missing ids, unexpected ones (a record claiming a
//     transaction of the range, by its "gtid" header, that the range does not
//     hold as that event), duplicates (at-least-once delivery makes them
//     legitimate, so they are reported, not failed) and, per aggregate, a
//     first delivery out of commit order.
//   - webhook: a receiver cannot be queried. Each endpoint's checkpoint says
//     which events of the range the receiver acknowledged with a 2xx (or were
//     dead-lettered), and the dead-letter store which were not delivered;
//     with a receiver-provided list of received ids (Options.Received) the
//     events are matched against it instead.
//   - stdout: cannot be read back; not auditable.
//
// Memory: the range's events are kept as id, aggregate and position (about
// 150 bytes each, so a million events take about 150 MB); the destination's
// records are streamed, never kept.
package audit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/event"
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

// Event is one committed outbox event of the range, in binlog order (Seq).
type Event struct {
	ID, AggregateID, Topic string
	Seq                    int
	GTID                   string
	Commit                 time.Time
	Position               event.Position // after its transaction
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
	Missing      []Missing
	Unexpected   []string
	Duplicates   map[string]int // id → deliveries, for ids delivered more than once
	Order        []string       // per-aggregate first deliveries out of commit order
	Notes        []string
}

// OK reports whether nothing is missing.
func (r Report) OK() bool { return len(r.Missing) == 0 }

// Range is the part of the binlog read: transactions after From (a GTID
// set: those it does not hold; a time: committed at or after it) up to and
// including To (a GTID set: those it holds; a time: committed at or
// before it), and never past the server's position when the read began.
type Range struct{ From, To Bound }

// ReadConfig is the reader's configuration, except the tables' filter.
type ReadConfig = canal.Config

var errDone = errors.New("end of range")

// Read reads the range with r's reader config, handing each outbox event and
// each transaction's GTID to the callbacks, in binlog order. start is where
// to begin (the From GTID set, or the oldest binlog for a From time); cur is
// the server's position when the audit began.
func Read(ctx context.Context, rc canal.Config, rng Range, start, cur event.Position, onEvent func(*event.Event, event.Position), onTxn func(*event.Txn)) error {
	if canal.Covers(rc.Flavor, start, cur) {
		return nil
	}
	var stopAt event.Position
	if rng.To.GTID != "" {
		stopAt = event.Position{GTIDSet: rng.To.GTID}
	}
	reader, err := canal.New(rc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	err = reader.Run(ctx, start, func(_ context.Context, txn *event.Txn) error {
		switch {
		case !rng.To.Time.IsZero() && txn.CommitTime.After(rng.To.Time):
			return errDone
		case rng.From.Time.IsZero() || !txn.CommitTime.Before(rng.From.Time.Truncate(time.Second)):
			onTxn(txn)
			for _, e := range txn.Events {
				onEvent(e, txn.Position)
			}
		}
		if rng.To.GTID != "" && canal.Covers(rc.Flavor, txn.Position, stopAt) || canal.Covers(rc.Flavor, txn.Position, cur) {
			return errDone
		}
		return nil
	})
	if errors.Is(err, errDone) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the binlog range: %w", err)
	}
	return ctx.Err()
}
