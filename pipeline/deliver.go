package pipeline

// This file owns delivery to the sink: connect (retried), the batches
// (nextBatch, events), the write and its retries in order (deliver,
// writeUntilSettled), a Submitter's results (settle), what each result does
// to the events of a batch (settleSome), the fence asked before each write,
// and the throttle of retry log lines (logThrottle).

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/retry"
	"github.com/outbox-relay/outbox-relay/sink"
)

// connect calls the sink's Connect until it succeeds or reading stops.
func (p *Pipeline) connect(deliverCtx, readCtx context.Context) error {
	bo := retry.Backoff{Policy: p.cfg.Retry}
	var logged logThrottle
	for {
		err := p.cfg.Sink.Connect(deliverCtx)
		p.obs.SinkConnected(err)
		if err == nil {
			p.obs.SinkUp(true)
			if bo.Failures() > 0 {
				p.log.Info("sink connected", slog.Int("failed_attempts", bo.Failures()))
			}
			return nil
		}
		p.obs.SinkUp(false)
		wait := bo.Next(err)
		if logged.due(bo.Failures()) {
			p.log.Warn("sink connect failed; retrying", slog.Int("attempt", bo.Failures()), slog.Duration("wait", wait), slog.Any("err", err))
		}
		if err := retry.Sleep(readCtx, wait); err != nil {
			return err
		}
	}
}

// logThrottle lets a retry loop log its first failures and then fewer:
// attempts 1, 2, 4, 8, … and at least one a minute.
type logThrottle struct{ last time.Time }

func (l *logThrottle) due(attempt int) bool {
	if attempt&(attempt-1) == 0 || time.Since(l.last) >= time.Minute {
		l.last = time.Now()
		return true
	}
	return false
}

// deliver batches what is queued in items and hands it to the sink, until
// items is empty (Run's delivering runs it again when more is queued) or
// closed, or ctx ends: done says which. pending counts a Submitter's acks
// to come.
//
// A Submitter's results arrive on its own goroutines; a fatal one (a
// permanent failure with no dead-letter store) is handed to fail at once,
// from the ack, before the sink may send anything after it: fail ends ctx,
// which makes the sink abandon every other pending event (unacknowledged, so
// the checkpoint stays before them), and deliver returns without waiting for
// their retries.
func (p *Pipeline) deliver(ctx context.Context, items <-chan *item, pending *sync.WaitGroup, fail func(error)) (done bool, err error) {
	submitter, async := p.cfg.Sink.(sink.Submitter)
	for {
		batch, ok := p.nextBatch(ctx, items)
		if len(batch) > 0 {
			if async {
				if err := p.fence(ctx); err != nil {
					return true, err
				}
				pending.Add(len(batch))
				b := batch
				submitter.Submit(ctx, events(b), func(i int, err error) {
					defer pending.Done()
					if err := p.settle(ctx, b[i:i+1], err); err != nil && ctx.Err() == nil {
						fail(err)
					}
				})
			} else if err := p.writeUntilSettled(ctx, batch); err != nil {
				return true, err
			}
		}
		if !ok || ctx.Err() != nil {
			return true, ctx.Err()
		}
		if len(batch) == 0 {
			return false, nil
		}
	}
}

// nextBatch collects up to BatchSize events / BatchBytes: the first queued
// (none: an empty batch, at once), then whatever is queued behind it, then
// — only with a Linger — what arrives within Linger of the first. ok is
// false when items is closed.
func (p *Pipeline) nextBatch(ctx context.Context, items <-chan *item) (batch []*item, ok bool) {
	var first *item
	select {
	case first, ok = <-items:
		if !ok {
			return nil, false
		}
	case <-ctx.Done():
		return nil, false
	default:
		return nil, true
	}
	if len(items) == 0 || p.cfg.BatchSize == 1 {
		batch = first.alone[:] // appending more copies it
	} else {
		batch = make([]*item, 1, min(p.cfg.BatchSize, len(items)+1))
		batch[0] = first
	}
	bytes := len(first.ev.Payload)
	full := func() bool { return len(batch) >= p.cfg.BatchSize || bytes >= p.cfg.BatchBytes }
	// takeQueued adds what is queued now, without waiting.
	takeQueued := func() (ok bool) {
		for !full() {
			select {
			case it, ok := <-items:
				if !ok {
					return false
				}
				batch = append(batch, it)
				bytes += len(it.ev.Payload)
			default:
				return true
			}
		}
		return true
	}
	if !takeQueued() {
		return batch, false
	}
	if p.cfg.Linger == 0 || full() {
		return batch, true
	}
	timer := p.after(p.cfg.Linger)
	for !full() {
		select {
		case it, ok := <-items:
			if !ok {
				return batch, false
			}
			batch = append(batch, it)
			bytes += len(it.ev.Payload)
		case <-timer:
			return batch, takeQueued()
		case <-ctx.Done():
			return batch, false
		}
	}
	return batch, true
}

// writeUntilSettled writes batch, retrying the failed events (in order) until
// each is acknowledged or dead-lettered.
func (p *Pipeline) writeUntilSettled(ctx context.Context, batch []*item) error {
	bo := retry.Backoff{Policy: p.cfg.Retry}
	var logged logThrottle
	for len(batch) > 0 {
		if err := p.fence(ctx); err != nil {
			return err
		}
		err := p.cfg.Sink.Write(ctx, events(batch))
		if ctx.Err() != nil {
			return ctx.Err()
		}
		again, wait, err := p.settleSome(ctx, batch, err)
		if err != nil {
			return err
		}
		if len(again) == 0 {
			return nil
		}
		d := max(bo.Next(again[0].failed.err), wait)
		if logged.due(bo.Failures()) {
			p.log.Warn("sink write failed; retrying", slog.Int("events", len(again)), slog.Int("attempt", bo.Failures()),
				slog.Duration("wait", d), slog.Any("err", again[0].failed.err))
		}
		if err := retry.Sleep(ctx, d); err != nil {
			return err
		}
		batch = again
	}
	return nil
}

// settle handles a Submitter's result for one event (batch holds just it):
// there is no retry in the pipeline for it, so a retriable failure (a
// contract breach) is retried through Write.
func (p *Pipeline) settle(ctx context.Context, batch []*item, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	retry, _, err := p.settleSome(ctx, batch, err)
	if err != nil {
		return err
	}
	if len(retry) > 0 {
		return p.writeUntilSettled(ctx, retry)
	}
	return nil
}

// settleSome releases what was acknowledged or dead-lettered (under one
// tracker lock for the whole batch), and returns what must be retried and
// the longest wait a failure asked for.
func (p *Pipeline) settleSome(ctx context.Context, batch []*item, werr error) (retry []*item, wait time.Duration, err error) {
	now := time.Now()
	up := werr == nil
	var room [8]*item // a Submitter's ack settles one event: no allocation for it
	done := room[:0]
	defer func() { p.tracker.release(done) }()
	for i, it := range batch {
		var e error
		if werr != nil {
			e = sink.ErrorFor(werr, i)
		}
		if e == nil {
			up = true
			p.obs.Delivered(it.ev, now)
			done = append(done, it)
			continue
		}
		if it.failed == nil {
			it.failed = &failures{first: now}
		}
		it.failed.tries++
		if sink.IsPermanent(e) {
			p.obs.Failed(it.ev, e, true)
			if err := p.deadLetter(ctx, it, e); err != nil {
				return nil, 0, err
			}
			done = append(done, it) // kept in the dead-letter store: not delivered, but settled
			continue
		}
		p.obs.Failed(it.ev, e, false)
		it.failed.err = e
		if d, ok := sink.RetryAfter(e); ok {
			wait = max(wait, min(d, p.cfg.Retry.Max))
		}
		retry = append(retry, it)
	}
	p.obs.SinkUp(up)
	return retry, wait, nil
}

// fence asks cfg.Fence, if set, whether this relay may still deliver.
func (p *Pipeline) fence(ctx context.Context) error {
	if p.cfg.Fence == nil {
		return nil
	}
	return p.cfg.Fence(ctx)
}

// events are the items' events (for a batch of one, a slice of its item).
func events(items []*item) []*event.Event {
	if len(items) == 1 {
		return items[0].evAlone[:]
	}
	out := make([]*event.Event, len(items))
	for i, it := range items {
		out[i] = it.ev
	}
	return out
}
