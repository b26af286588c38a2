package pipeline

// This file owns saving the checkpoint: saveLoop, which saves what was
// acknowledged one save at a time, spaced by the gap (savegap.go) and
// retried after a failure, and save, one save of what the tracker has
// settled, fenced like a write.

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/retry"
)

// saveLoop saves what was acknowledged as soon as it was: each save takes
// the tracker's latest state, and acknowledgements that arrive while one is
// under way, or within the gap of its start (CheckpointGap after a quiet
// spell, growing while acknowledgements stream in: saveGap), are saved by
// the next (one save at a time, coalesced). The gap is cut short when the source
// waits for room that unsaved acknowledgements hold. A failed save is retried after
// CheckpointInterval; a fenced save is fatal. Every CheckpointInterval it
// also reports what is in flight. It returns once nothing is in flight
// and nothing is left to save (Run starts it again with the next
// transaction).
func (p *Pipeline) saveLoop(ctx context.Context, fail func(error)) {
	// The ticker and the gap's timer are the pipeline's, made by its first
	// run of saveLoop and reused by the next (one at a time): a gateway's
	// quiet endpoint runs one per event.
	if p.saveTick == nil {
		p.saveTick = time.NewTicker(p.cfg.CheckpointInterval)
		p.saveGap = time.NewTimer(time.Hour)
		p.saveGap.Stop()
	} else {
		p.saveTick.Reset(p.cfg.CheckpointInterval)
	}
	t := p.saveTick
	defer t.Stop()
	last := &p.lastSave // the start of the last save
	for {
		if p.tracker.rest() {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-p.tracker.changed:
		case <-t.C:
			ev, b, oldest := p.tracker.inFlight()
			p.obs.InFlight(ev, b, oldest)
		}
		since := time.Since(*last)
		if wait := p.gap.next(since) - since; wait > 0 {
			// Not when the source waits for room that the unsaved
			// acknowledgements hold: the gap must not cap throughput.
			gap := p.saveGap
			gap.Reset(wait)
			select {
			case <-ctx.Done():
				gap.Stop()
				return
			case <-gap.C:
			case <-p.tracker.full:
				gap.Stop()
			}
		}
		*last = time.Now()
		if err := p.save(ctx, false, *last); errors.Is(err, checkpoint.ErrFenced) {
			fail(err)
			return
		} else if err != nil && ctx.Err() == nil {
			p.log.Error("checkpoint save failed; will retry", slog.Duration("in", p.cfg.CheckpointInterval), slog.Any("err", err))
			if retry.Sleep(ctx, p.cfg.CheckpointInterval) != nil {
				return
			}
		}
	}
}

// save saves what the tracker has settled; start is when the save began,
// which the checkpoint records as its UpdatedAt (saveLoop's gap is kept
// between these starts).
func (p *Pipeline) save(ctx context.Context, final bool, start time.Time) error {
	s := p.tracker.take()
	defer p.tracker.saved()
	if !s.moved || s.pos.IsZero() {
		return nil
	}
	cp := p.cfg.Identity
	cp.Position = s.pos
	cp.CommitTime = s.commit
	cp.UpdatedAt = start.UTC()
	if len(s.acked) > 0 || s.readThrough != "" {
		cp.Acked = &checkpoint.Acked{Events: s.acked, ReadThrough: s.readThrough}
	}
	if !final {
		// Saves run beside deliveries: one is fenced as a write is, so a
		// relay that another took over from stops saving too.
		if err := p.fence(ctx); err != nil {
			p.tracker.markUnsaved()
			return err
		}
	}
	if err := p.cfg.Store.Save(ctx, p.cfg.Name, cp); err != nil {
		p.tracker.markUnsaved() // the next save tries again
		return err
	}
	p.stored.Store(true)
	p.obs.CheckpointSaved(s.pos, cp.UpdatedAt)
	if final {
		p.log.Log(ctx, p.routine, "checkpoint saved", slog.String("position", s.pos.String()))
	}
	return nil
}
