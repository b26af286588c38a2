package backfill

import (
	"context"
	"errors"
	"fmt"

	"github.com/outbox-relay/outbox-relay/event"
)

// Chain reads several outbox tables one after the other, as one source:
// every table as of the same binlog position (the first one's Start), each
// to its end; only the last table's last cursor is Done. Its positions name
// the table being read, so a pipeline resumes in the right one.
type Chain []*Source

// Run implements pipeline.Source.
func (c Chain) Run(ctx context.Context, from event.Position, handle func(context.Context, *event.Txn) error) error {
	if len(c) == 0 {
		return errors.New("backfill: no table to read")
	}
	first := 0
	if from.Table == nil {
		p, err := c[0].Start(ctx)
		if err != nil {
			return err
		}
		from = p
	} else {
		first = -1
		for i, s := range c {
			if s.table == from.Table.Table {
				first = i
			}
		}
		if first < 0 {
			return fmt.Errorf("backfill: the position's cursor is of table %s, which is not one of the tables read", from.Table.Table)
		}
		if from.Table.Done {
			if first == len(c)-1 {
				return nil
			}
			first++
			from.Table = &event.TableCursor{Table: c[first].table}
		}
	}
	for i := first; i < len(c); i++ {
		last := i == len(c)-1
		err := c[i].Run(ctx, from, func(ctx context.Context, txn *event.Txn) error {
			if !last && txn.Position.Table.Done {
				// The next table's start: a restart goes on there.
				txn.Position.Table = &event.TableCursor{Table: c[i+1].table}
			}
			return handle(ctx, txn)
		})
		if err != nil {
			return err
		}
		if !last {
			from.Table = &event.TableCursor{Table: c[i+1].table}
		}
	}
	return nil
}
