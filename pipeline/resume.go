package pipeline

// This file owns where a restart starts and what the sink reads back:
// Resume (the checkpoint, checked against the source), recover (the sink's
// read-back of its destination, retried, into the skip set), and the proof
// that a message read back is the sink's own (proven), with the reports of
// those that are not (unmatched, dropped).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/retry"
	"github.com/outbox-relay/outbox-relay/sink"
)

// Resume returns the position the pipeline starts from: its checkpoint, or
// cfg.Start when it has none. A checkpoint of another flavor, or one that
// cfg.CanResume refuses, is an error.
func (p *Pipeline) Resume(ctx context.Context) (event.Position, bool, error) {
	cp, resumed, err := p.resume(ctx)
	return cp.Position, resumed, err
}

// resume is Resume with the whole checkpoint (its list of events
// acknowledged beyond the position).
func (p *Pipeline) resume(ctx context.Context) (checkpoint.Checkpoint, bool, error) {
	cp, err := p.cfg.Store.Load(ctx, p.cfg.Name)
	if errors.Is(err, checkpoint.ErrNotFound) {
		return checkpoint.Checkpoint{Position: p.cfg.Start}, false, nil
	}
	if err != nil {
		return checkpoint.Checkpoint{}, false, err
	}
	id := p.cfg.Identity
	if id.Flavor != "" && cp.Flavor != "" && cp.Flavor != id.Flavor {
		return checkpoint.Checkpoint{}, false, fmt.Errorf("checkpoint %q was saved from a %s server, but the source is %s: point the relay at the server it was reading, or use another checkpoint location to start afresh", p.cfg.Name, cp.Flavor, id.Flavor)
	}
	if n := cp.Acked.Len(); n > p.cfg.MaxInFlight {
		// No run with this limit lists more: the limit was lowered since,
		// or the list was changed. Loading it would hold every id in memory.
		return checkpoint.Checkpoint{}, false, fmt.Errorf("checkpoint %q: field acked lists %d acknowledged events, more than max_in_flight (%d) lets a run list: if max_in_flight was lowered since that checkpoint was saved, raise it to at least %d for one start; otherwise remove the checkpoint's \"acked\" field: the events after its position are then sent again, none is skipped", p.cfg.Name, n, p.cfg.MaxInFlight, n)
	}
	if p.cfg.CanResume != nil {
		if err := p.cfg.CanResume(ctx, cp); err != nil {
			return checkpoint.Checkpoint{}, false, fmt.Errorf("checkpoint %q: %w", p.cfg.Name, err)
		}
	}
	return cp, true, nil
}

// recoverer is sink.Recoverer (declared here too, so that the pipeline
// builds without it): a sink whose destination can be read back.
type recoverer interface {
	Recover(ctx context.Context, after event.Position, seen func(sink.Held)) error
	Digest(e *event.Event) (sink.Digest, bool)
}

// recover asks a recoverer sink which events after the checkpoint's
// position its destination already holds, and adds them to skip. It is
// retried like Connect; a sink that cannot tell (sink.ErrCannotRecover) is
// logged and counted, and this restart sends everything after the
// checkpoint that the checkpoint does not list.
func (p *Pipeline) recover(deliverCtx, readCtx context.Context, after event.Position, skip *skipSet) error {
	r, ok := p.cfg.Sink.(recoverer)
	if !ok {
		return nil
	}
	bo := retry.Backoff{Policy: p.cfg.Retry}
	var logged logThrottle
	for {
		var mu sync.Mutex
		var found []sink.Held
		err := r.Recover(deliverCtx, after, func(h sink.Held) {
			mu.Lock()
			found = append(found, h)
			mu.Unlock()
		})
		if err == nil {
			unlisted, dropped := 0, 0
			for _, h := range found {
				if h.Dropped != "" {
					p.dropped(h, dropped)
					dropped++
					continue
				}
				if skip.addHeld(h) {
					unlisted++
				}
			}
			p.log.Info("read back the destination: events after the checkpoint it holds are not sent again",
				slog.Int("events", len(found)-dropped), slog.Int("unlisted", unlisted), slog.Int("dropped", dropped))
			return nil
		}
		if errors.Is(err, sink.ErrCannotRecover) {
			p.log.Warn("cannot read back what the destination holds: events after the checkpoint are sent again (at-least-once for this restart)", slog.Any("err", err))
			p.resumeObs.RecoverFellBack()
			return nil
		}
		p.obs.SinkUp(false)
		wait := bo.Next(err)
		if logged.due(bo.Failures()) {
			p.log.Warn("sink read-back failed; retrying", slog.Int("attempt", bo.Failures()), slog.Duration("wait", wait), slog.Any("err", err))
		}
		if err := retry.Sleep(readCtx, wait); err != nil {
			return err
		}
	}
}

// proven reports whether the event listed as l is to be skipped: listed
// by the checkpoint, or read back in a message with the digest of the
// sink's own message of e. A message read back that fails the proof is
// foreign: logged, counted, and e is sent again.
func (p *Pipeline) proven(l *listed, e *event.Event) bool {
	if l.by != skippedByReadBack {
		return true
	}
	r, _ := p.cfg.Sink.(recoverer)
	want, ok := r.Digest(e)
	for _, h := range l.held {
		if ok && h.Digest == want {
			return true
		}
	}
	for _, h := range l.held {
		p.log.Warn("read-back: a message that claims to be this sink's copy of an event is not what the sink writes for it (another writer?); the event is sent again",
			slog.String("at", h.At), slog.String("gtid", h.GTID), slog.String("id", h.ID))
		p.resumeObs.Foreign(foreignMismatch)
	}
	return false
}

// unmatched reports the messages read back that claim to be the sink's but
// name no event of their transaction.
func (p *Pipeline) unmatched(held []sink.Held) {
	for _, h := range held {
		p.log.Warn("read-back: a message that claims to be this sink's names no event of its transaction (another writer?); it proves nothing",
			slog.String("at", h.At), slog.String("gtid", h.GTID), slog.String("id", h.ID))
		p.resumeObs.Foreign(foreignUnmatched)
	}
}

// dropped reports a message the sink's read-back dropped at once
// (sink.Held.Dropped: too large to be a claim), the nth so far: counted by
// its reason, and logged for the first maxDroppedLogged of a read-back.
func (p *Pipeline) dropped(h sink.Held, n int) {
	p.resumeObs.Foreign(h.Dropped)
	switch {
	case n < maxDroppedLogged:
		p.log.Warn("read-back: a message that claims to be this sink's is larger than the read-back reads or keeps (another writer, or an event too large to prove); dropped: it proves nothing, and its event, if it is one, is sent again",
			slog.String("at", h.At), slog.String("why", h.Dropped), slog.String("gtid", h.GTID), slog.String("id", h.ID))
	case n == maxDroppedLogged:
		p.log.Warn("read-back: more messages dropped as too large; counted, no longer logged", slog.String("why", h.Dropped))
	}
}

// maxDroppedLogged is how many dropped messages one read-back logs.
const maxDroppedLogged = 10

// The kinds of foreign messages read back, as ResumeObserver.Foreign names
// them (and sink.Held.Dropped's reasons, "oversized").
const (
	foreignMismatch  = "mismatch"
	foreignUnmatched = "unmatched"
)
