package audit

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/event"
)

// Run audits a sink whose destination can be read back: it reads the range
// with rc, expecting each event at the destination dest names (a topic, a
// stream key), then has readBack deliver what those destinations (sorted)
// hold, and compares.
func Run(ctx context.Context, opts Options, rc canal.Config, rng Range, start, cur event.Position, name string,
	dest func(*event.Event) (string, error), readBack func(*Comparison, *Span, []string) error) (Report, error) {
	c := NewComparison(opts)
	defer c.Close()
	dests := map[string]string{} // interned: one string per destination
	span, err := Scan(ctx, rc, rng, start, cur, func(ev Event, e *event.Event, _ event.Position) error {
		d, err := dest(e)
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
	if err := readBack(c, span, slices.Sorted(maps.Keys(dests))); err != nil {
		return Report{}, err
	}
	return c.Report(ctx, name, span)
}
