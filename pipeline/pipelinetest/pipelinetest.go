// Package pipelinetest has the in-memory parts that tests and benchmarks
// run a pipeline.Pipeline with: a Source of given transactions and a sink
// that acknowledges everything at once.
package pipelinetest

import (
	"context"
	"sync/atomic"

	"github.com/outbox-relay/outbox-relay/event"
)

// Source is a pipeline.Source that hands out Txns after the position it
// is run from (compared by Pos), then waits for ctx to end.
type Source struct{ Txns []*event.Txn }

// Run implements pipeline.Source.
func (s *Source) Run(ctx context.Context, from event.Position, handle func(context.Context, *event.Txn) error) error {
	for _, t := range s.Txns {
		if from.Pos >= t.Position.Pos {
			continue // resume after from
		}
		if err := handle(ctx, t); err != nil {
			return err
		}
	}
	<-ctx.Done()
	return ctx.Err()
}

// CountingSink acknowledges every event at once and counts them in N.
type CountingSink struct{ N atomic.Int64 }

func (c *CountingSink) Connect(context.Context) error { return nil }
func (c *CountingSink) Close(context.Context) error   { return nil }

// Write counts batch and acknowledges it.
func (c *CountingSink) Write(_ context.Context, batch []*event.Event) error {
	c.N.Add(int64(len(batch)))
	return nil
}
