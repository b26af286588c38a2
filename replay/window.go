package replay

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/pipeline"
	"github.com/outbox-relay/outbox-relay/position"
)

// Window is the source of a job's pipeline: it reads Source from where the
// pipeline asks, hands on each transaction up to the job's Until with only
// the events its type filters select (a transaction whose events are all
// passed over is handed on empty, so the job's progress moves), and ends
// the run — Run returns nil — once the transaction that reaches Until (or
// the last one before a transaction past it) is handed on and the
// pipeline has saved its progress past it (Saved): then every event of the
// window is acknowledged, and the pipeline's own drain at the end has
// nothing left to send.
type Window struct {
	Source pipeline.Source
	Job    *Job
	Flavor string
	// Select, if set, is a further filter (a webhook endpoint's own).
	Select func(*event.Event) bool
	// Skipped is told of each event the filters pass over.
	Skipped func()
	// Read is told the commit time of each transaction handed on.
	Read func(commit time.Time)

	mu    sync.Mutex
	saved event.Position
	wake  chan struct{}
	done  atomic.Bool
}

// Saved is told each position the job's pipeline saved (its observer's
// CheckpointSaved).
func (w *Window) Saved(pos event.Position) {
	w.mu.Lock()
	w.saved = pos
	if w.wake != nil {
		close(w.wake)
		w.wake = nil
	}
	w.mu.Unlock()
}

// Reached reports whether the window's end has been read and delivered.
func (w *Window) Reached() bool { return w.done.Load() }

// covered reports whether position have holds every transaction of want.
func (w *Window) covered(have, want event.Position) bool {
	return position.Covers(w.Flavor, have, want)
}

// Run implements pipeline.Source.
func (w *Window) Run(ctx context.Context, from event.Position, handle func(context.Context, *event.Txn) error) error {
	switch w.Job.Source {
	case SourceTable:
		return w.runTable(ctx, from, handle)
	case SourceKafka:
		return w.runToUntil(ctx, from, handle)
	}
	until := w.Job.Until
	if w.covered(from, until) {
		w.done.Store(true) // resumed after the whole window was delivered
		return nil
	}
	last := from
	{
		readCtx, stop := context.WithCancel(ctx)
		defer stop()
		var end bool
		err := w.Source.Run(readCtx, from, func(ctx context.Context, txn *event.Txn) error {
			if !w.covered(until, txn.Position) {
				end = true // past the window: not handed on
				stop()
				return context.Canceled
			}
			if err := w.hand(ctx, txn, handle); err != nil {
				return err
			}
			last = txn.Position
			if w.covered(txn.Position, until) {
				end = true
				stop()
				return context.Canceled
			}
			return nil
		})
		if !end {
			return err
		}
	}
	if last == from {
		w.done.Store(true) // nothing of the window was left after from
		return nil
	}
	// Every transaction of the window is handed on: wait until the
	// pipeline has saved past the last one.
	return w.waitSaved(ctx, func(saved event.Position) bool { return w.covered(saved, last) })
}

// hand hands txn on with only the events the filters select (one whose
// events are all passed over, empty), then tells Read its commit time.
func (w *Window) hand(ctx context.Context, txn *event.Txn, handle func(context.Context, *event.Txn) error) error {
	if evs := w.filter(txn.Events); len(evs) != len(txn.Events) {
		cp := *txn
		cp.Events = evs
		txn = &cp
	}
	if err := handle(ctx, txn); err != nil {
		return err
	}
	if w.Read != nil {
		w.Read(txn.CommitTime)
	}
	return nil
}

func (w *Window) filter(evs []*event.Event) []*event.Event {
	if len(w.Job.Types) == 0 && len(w.Job.IDs) == 0 && w.Select == nil {
		return evs
	}
	var out []*event.Event
	for _, e := range evs {
		if w.Job.SelectsEvent(e) && (w.Select == nil || w.Select(e)) {
			out = append(out, e)
		} else if w.Skipped != nil {
			w.Skipped()
		}
	}
	return out
}

// runTable is Run for a table source (package backfill): its positions are
// table cursors as of the window's end, not binlog positions, and it ends
// on its own once every table is read (a Done cursor); the window is
// reached once the pipeline has saved that cursor.
func (w *Window) runTable(ctx context.Context, from event.Position, handle func(context.Context, *event.Txn) error) error {
	if from.Table != nil && from.Table.Done {
		w.done.Store(true) // resumed after the whole window was delivered
		return nil
	}
	var last *event.TableCursor
	err := w.Source.Run(ctx, from, func(ctx context.Context, txn *event.Txn) error {
		if err := w.hand(ctx, txn, handle); err != nil {
			return err
		}
		last = txn.Position.Table
		return nil
	})
	if err != nil {
		return err
	}
	if last == nil {
		w.done.Store(true)
		return nil
	}
	return w.waitSaved(ctx, func(saved event.Position) bool { return saved.Table != nil && saved.Table.Done })
}

// runToUntil is Run for a source that ends on its own once it has handed
// on the transaction at Until (kafkasource.Window: a position holding
// every partition's offset, which reaches Until exactly, as equal text);
// the window is reached once the pipeline has saved Until.
func (w *Window) runToUntil(ctx context.Context, from event.Position, handle func(context.Context, *event.Txn) error) error {
	until := w.Job.Until
	if from.File == until.File && from.GTIDSet == until.GTIDSet {
		w.done.Store(true) // resumed after the whole window was delivered
		return nil
	}
	handed := false
	err := w.Source.Run(ctx, from, func(ctx context.Context, txn *event.Txn) error {
		if err := w.hand(ctx, txn, handle); err != nil {
			return err
		}
		handed = true
		return nil
	})
	if err != nil {
		return err
	}
	if !handed {
		w.done.Store(true)
		return nil
	}
	return w.waitSaved(ctx, func(saved event.Position) bool { return saved.File == until.File && saved.GTIDSet == until.GTIDSet })
}

// waitSaved waits until the pipeline's last save makes reached true, then
// marks the window done; or until ctx ends.
func (w *Window) waitSaved(ctx context.Context, reached func(saved event.Position) bool) error {
	for {
		w.mu.Lock()
		if reached(w.saved) {
			w.mu.Unlock()
			w.done.Store(true)
			return nil
		}
		if w.wake == nil {
			w.wake = make(chan struct{})
		}
		wake := w.wake
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake:
		}
	}
}
