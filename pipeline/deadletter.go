package pipeline

// This file owns dead letters: an event that failed permanently is written to
// the dead-letter store, again and again until the store takes it (deadLetter,
// reported to a DeadLetterObserver), or stops the pipeline when there is no
// store; DeadLetterFix says what an operator can do about a store that does
// not take it.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/deadletter"
	"github.com/outbox-relay/outbox-relay/retry"
	"github.com/outbox-relay/outbox-relay/sink"
)

func (p *Pipeline) deadLetter(ctx context.Context, it *item, cause error) error {
	if p.cfg.DeadLetters == nil {
		return fmt.Errorf("event %s (%s) failed permanently and no dead-letter store is configured: %w; "+
			"configure dead_letter so such events are kept and the stream goes on, then restart (the event is delivered again)", it.ev.ID, it.ev.Table, cause)
	}
	dl := deadletter.Letter{Event: it.ev, Sink: p.cfg.Name, Tenant: sink.TenantOf(p.cfg.Sink), Reason: cause.Error(), Attempts: it.failed.tries, First: it.failed.first, Last: time.Now()}
	var ar sink.AttemptReporter
	if errors.As(cause, &ar) {
		if n, first, last := ar.AttemptReport(); n > 0 {
			dl.Attempts, dl.First, dl.Last = n, first, last
		}
	}
	bo := retry.Backoff{Policy: p.cfg.Retry}
	var logged logThrottle
	defer func() {
		if bo.Failures() > 0 && ctx.Err() != nil { // stopped while it waited: it no longer does
			p.dlObs.DeadLetterWaiting(it.ev, nil, "")
		}
	}()
	for {
		if err := p.fence(ctx); err != nil {
			return err
		}
		err := p.cfg.DeadLetters.Put(ctx, dl)
		if err == nil {
			if bo.Failures() > 0 {
				p.dlObs.DeadLetterWaiting(it.ev, nil, "")
				p.log.Info("the dead-letter store took the record it did not before; the sink goes on", slog.String("event_id", it.ev.ID), slog.String("txn", txnKey(it.ev)))
			}
			p.log.Error("event dead-lettered", slog.String("event_id", it.ev.ID), slog.String("aggregate_id", it.ev.AggregateID), slog.String("reason", dl.Reason))
			p.obs.DeadLettered(it.ev, dl.Reason)
			return nil
		}
		wait := bo.Next(err)
		fix := DeadLetterFix(err)
		p.dlObs.DeadLetterWaiting(it.ev, err, fix)
		if logged.due(bo.Failures()) {
			p.log.Error("dead-letter store write failed; retrying (this sink waits on the event, its checkpoint cannot pass it; other sinks and endpoints go on)",
				slog.String("event_id", it.ev.ID), slog.String("txn", txnKey(it.ev)), slog.Int("attempt", bo.Failures()), slog.Any("err", err), slog.String("fix", fix))
		}
		if err := retry.Sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// DeadLetterFix says what an operator can do about err, a failed write of
// a dead letter.
func DeadLetterFix(err error) string {
	if checkpoint.Refused(err) {
		return "the dead-letter store refuses this record (a value it cannot keep): change what refuses it " +
			"(a packet too large: raise the server's max_allowed_packet; a trigger or a constraint on the table: change it); " +
			"the record is written again until the store takes it, and this sink then goes on by itself; nothing is dropped"
	}
	return "the dead-letter store cannot be written (the error says why): fix the store; the record is written again until it takes it, " +
		"and this sink then goes on by itself; nothing is dropped"
}
