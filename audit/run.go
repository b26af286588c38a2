package audit

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink"
)

// Run audits the sink name whose destination a (its kind's Auditor, from
// sink.Kind.Audit) reads back: it reads the range with rc, expecting each
// event at the destination a.Dest names (a topic, a stream key), then has
// a read back what those destinations (sorted) hold from a second before
// the range's first commit time (commit times have whole seconds), and
// compares. A message claims the range by its GTID, or without one by its
// time (Span.Claims).
func Run(ctx context.Context, opts Options, rc canal.Config, rng Range, start, cur event.Position, name string, a sink.Auditor) (Report, error) {
	c := NewComparison(opts)
	defer c.Close()
	dests := map[string]string{} // interned: one string per destination
	span, err := Scan(ctx, rc, rng, start, cur, func(ev Event, e *event.Event, _ event.Position) error {
		d, err := a.Dest(e)
		if err != nil {
			return fmt.Errorf("event %s: route: %w", e.ID, err)
		}
		if _, ok := dests[d]; !ok {
			dests[d] = strings.Clone(d)
		}
		ev.Dest = dests[d]
		return c.Expect(ev, "")
	})
	if err != nil {
		return Report{}, err
	}
	if span.Events > 0 {
		err := a.ReadBack(ctx, span.First.Add(-time.Second), slices.Sorted(maps.Keys(dests)), func(m sink.Stored) error {
			return c.Deliver(Delivery{ID: m.ID, Log: m.Log, Offset: m.Offset, At: m.At, Claims: span.Claims(m.GTID, m.Time)})
		})
		if err != nil {
			return Report{}, err
		}
	}
	return c.Report(ctx, name, span)
}
