package audit

import (
	"context"
	"fmt"
	"slices"

	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/event"
)

// Index is the range's events, by id, and its transactions' GTIDs.
type Index struct {
	Events map[string]*Event
	GTIDs  map[string]bool
	Report Report
}

// Collect reads the range into an Index. topic, if set, names each event's
// destination topic (kafka).
func Collect(ctx context.Context, rc canal.Config, rng Range, start, cur event.Position, topic func(*event.Event) (string, error)) (*Index, error) {
	idx := &Index{Events: map[string]*Event{}, GTIDs: map[string]bool{}}
	var terr error
	seq := 0
	err := Read(ctx, rc, rng, start, cur, func(e *event.Event, pos event.Position) {
		seq++
		ev := &Event{ID: e.ID, AggregateID: e.AggregateID, Seq: seq, GTID: e.Source.GTID, Commit: e.CommitTime, Position: pos}
		if topic != nil {
			t, err := topic(e)
			if err != nil && terr == nil {
				terr = fmt.Errorf("event %s: topic: %w", e.ID, err)
			}
			ev.Topic = t
		}
		if _, dup := idx.Events[e.ID]; dup {
			idx.Report.Notes = append(idx.Report.Notes, fmt.Sprintf("id %s was committed twice in the range (the later one is audited)", e.ID))
		}
		idx.Events[e.ID] = ev
		if idx.Report.First.IsZero() {
			idx.Report.First = e.CommitTime
		}
		idx.Report.Last = e.CommitTime
	}, func(txn *event.Txn) {
		idx.Report.Transactions++
		for _, e := range txn.Events {
			if e.Source.GTID != "" {
				idx.GTIDs[e.Source.GTID] = true
			}
		}
	})
	if err == nil {
		err = terr
	}
	idx.Report.Events = len(idx.Events)
	return idx, err
}

// sorted returns the events in binlog order.
func (idx *Index) sorted() []*Event {
	out := make([]*Event, 0, len(idx.Events))
	for _, e := range idx.Events {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b *Event) int { return a.Seq - b.Seq })
	return out
}
