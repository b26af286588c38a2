package pipeline

// This file owns Run, the life of one run: it resumes, starts delivery and
// saving on demand (onDemand), connects and reads back the sink beside the
// stream, and turns each transaction the source hands in into items in flight
// (item, txnOfOne, keyed by txnKey), skipping what the restart need not send;
// then it drains for at most DrainTimeout (drainFrom), saves the final
// checkpoint and closes the sink.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/position"
	"github.com/outbox-relay/outbox-relay/sink"
)

// item is one event in flight and the transaction it belongs to.
type item struct {
	ev   *event.Event
	txn  *txnEntry
	size int
	// failed is the record of its failed attempts, made at the first:
	// most events never fail, and an item is allocated per event.
	failed *failures
	// alone and evAlone are a batch of this item alone and its events,
	// set when the item is made and never changed: a batch of one event
	// (a gateway endpoint's, mostly) and the events handed to the sink
	// are slices of them, not allocations of their own.
	alone   [1]*item
	evAlone [1]*event.Event
}

// failures are an item's failed attempts.
type failures struct {
	first time.Time // first failure, for dead letters
	tries int
	err   error // last failure, while being retried
}

// txnOfOne is a transaction of one event in flight: its entry in the
// tracker and its item, allocated together.
type txnOfOne struct {
	entry txnEntry
	item  [1]item
}

// Run delivers from the checkpoint (or Start) until ctx ends or a fatal error.
func (p *Pipeline) Run(ctx context.Context, src Source) error {
	cp, resumed, err := p.resume(ctx)
	if err != nil {
		return err
	}
	from := cp.Position
	p.routine = slog.LevelInfo
	if w, ok := src.(Woken); ok && w.Woken() {
		p.routine = slog.LevelDebug
	}
	p.log.Log(ctx, p.routine, "pipeline starting", slog.String("from", from.String()), slog.Bool("resumed", resumed), slog.Int("acked_after", cp.Acked.Len()))
	p.tracker = newTracker(from, p.cfg.MaxInFlight, p.cfg.MaxInFlightBytes)
	p.tracker.wmCommit = cp.CommitTime
	_, p.tracker.readBack = p.cfg.Sink.(recoverer)
	p.stored.Store(resumed)
	p.running.Store(p.tracker)
	if !resumed {
		// The resolved start is saved at once (below, beside connecting
		// the stream): a restart must resume here, not at a later
		// "current" position, or the events committed in between would be
		// skipped.
		p.tracker.markUnsaved()
	}

	// deliverCtx outlives ctx by DrainTimeout so in-flight events can drain.
	deliverCtx, stopDelivery := context.WithCancel(context.WithoutCancel(ctx))
	defer stopDelivery()
	readCtx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	// A reader waiting for room (sink down, pipeline full) must wake when
	// reading stops, or shutdown would hang: closing the tracker frees it.
	defer context.AfterFunc(readCtx, p.tracker.close)()

	_, queuer := p.cfg.Sink.(sink.Queuer)
	_, local := p.cfg.Sink.(sink.Local)
	items := make(chan *item, p.cfg.BatchSize)
	if queuer {
		items = make(chan *item, min(p.cfg.BatchSize, queuerItems))
	}
	var fatalOnce sync.Once
	var fatal error
	var fenced atomic.Bool // another relay took over: stop now, save nothing
	fail := func(err error) {
		fatalOnce.Do(func() { fatal = err })
		if errors.Is(err, checkpoint.ErrFenced) {
			fenced.Store(true)
		}
		stopReading()
		stopDelivery()
	}
	defer context.AfterFunc(ctx, func() {
		if errors.Is(context.Cause(ctx), checkpoint.ErrFenced) {
			fenced.Store(true)
			stopDelivery()
		}
	})()

	// The stream is read while the sink is being connected: a sink that is
	// down at start holds back its events (up to MaxInFlight, as a sink
	// down later does), not the binlog stream, so the source's signals
	// stay the source's and the sink's outage is reported as the sink's.
	// What the skip set says is decided as transactions are read, so for a
	// sink that is read back on a restart the first one waits until it has
	// been (recovered: closed once skip is complete; the delivery goroutine
	// owns skip until then). The binlog connection stays open meanwhile.
	skip := newSkipSet(cp.Acked, p.cfg.MaxInFlight)
	_, readBack := p.cfg.Sink.(recoverer)
	readBack = readBack && resumed
	recovered := make(chan struct{})
	if !readBack {
		close(recovered)
	}
	//
	// Delivery and saving run on goroutines of their own only while they
	// have work (onDemand): the reader kicks them after adding some, so an
	// idle pipeline waits on its source's goroutine alone (a Queuer's
	// delivery runs on the reader's goroutine when none runs: here).
	var pending sync.WaitGroup // a Submitter's acks to come
	delivering := &onDemand{held: true, rest: func() bool { return len(items) == 0 },
		run: func() bool {
			done, err := p.deliver(deliverCtx, items, &pending, fail)
			if err != nil && !errors.Is(err, context.Canceled) {
				fail(err)
			}
			return done || err != nil
		}}
	p.delivering = delivering
	saving := &onDemand{held: !resumed, rest: p.tracker.rest, run: func() bool {
		p.saveLoop(readCtx, fail)
		ev, b, oldest := p.tracker.inFlight() // the last report of this run of the saver
		p.obs.InFlight(ev, b, oldest)
		return readCtx.Err() != nil
	}}
	// The start checkpoint is saved while the stream connects and the
	// first transactions are read and delivered, not before: its fsyncs
	// are most of a start's time. Saves stay one at a time and in order:
	// the saver is held until the start is saved. A failure stops the
	// pipeline, as before anything was read; what was delivered meanwhile
	// is sent again from the same start after a restart (at least once),
	// and a crash loses no more than a crash before the save did.
	var startSave sync.WaitGroup
	if !resumed {
		startSave.Go(func() {
			if err := p.save(readCtx, false, time.Now()); err != nil {
				if readCtx.Err() == nil {
					fail(fmt.Errorf("save start checkpoint: %w", err))
				}
				return // stopping: the final save saves the start
			}
			saving.release()
		})
	}
	var connecting sync.WaitGroup
	connecting.Go(func() {
		if err := p.connect(deliverCtx, readCtx); err != nil {
			return // reading stopped before the sink could be connected
		}
		if readBack {
			if err := p.recover(deliverCtx, readCtx, from, skip); err != nil {
				return // reading stopped before the sink could be read back
			}
			close(recovered)
		}
		delivering.release()
	})

	if queuer || local {
		// The reader may be delivering (here) when reading stops, waiting on
		// the fence with deliverCtx: the drain's bound then runs from the
		// end of reading, not from the reader's return, which it holds up.
		defer p.drainFrom(readCtx, stopDelivery)()
	}
	ready := false     // recovered was seen closed
	var back time.Time // when the handler last returned (a Local sink's)
	// hand turns txn into items in flight and hands them on. With try it
	// waits for nothing (see TryHandler): it hands txn on only if that
	// needs no wait, and otherwise returns false having done nothing.
	hand := func(ctx context.Context, txn *event.Txn, try bool) (bool, error) {
		if try {
			// Not ready yet (the sink is being read back), skipping what a
			// restart need not send, or no room for every event in items:
			// the source's own goroutine hands it on, and waits.
			if !ready {
				select {
				case <-recovered:
					ready = true
				default:
					return false, nil
				}
			}
			if skip.active() || len(txn.Events) > cap(items)-len(items) {
				return false, nil
			}
		}
		// A transaction that comes TrickleGap or more after the last one was
		// handed on found the source waiting for the binlog: a Local sink
		// writes it from here (the source would only wait meanwhile), not
		// from a goroutine woken for it.
		waited := local && time.Since(back) >= p.cfg.TrickleGap
		if local {
			defer func() { back = time.Now() }()
		}
		if !ready {
			select {
			case <-recovered:
				ready = true
			case <-ctx.Done():
				return false, ctx.Err()
			}
		}
		size := 0
		for _, e := range txn.Events {
			size += e.Size()
		}
		key := ""
		if len(txn.Events) > 0 {
			key = txnKey(txn.Events[0])
		}
		// One allocation for the transaction's events in flight, and, for
		// a transaction of one event (a gateway endpoint's, mostly), for
		// its entry in the tracker too.
		var slab []item
		var into *txnEntry
		if len(txn.Events) == 1 {
			one := new(txnOfOne)
			slab, into = one.item[:], &one.entry
		} else {
			slab = make([]item, len(txn.Events))
		}
		commit := txn.CommitTime
		if txn.Held {
			commit = time.Time{} // not the commit time of the transaction that ends at its position
		}
		entry, added := p.tracker.addInto(into, txn.Position, commit, len(txn.Events), size, key, try)
		switch {
		case !added:
			return false, nil // no room: the source's goroutine waits for it
		case entry == nil:
			return false, ctx.Err()
		}
		saving.kick()
		var skipped []*item
		resuming := skip.active() && len(txn.Events) > 0
		window := resuming && skip.window(key)
		for i, e := range txn.Events {
			it := &slab[i]
			*it = item{ev: e, txn: entry, size: e.Size()}
			it.alone = [1]*item{it}
			it.evAlone = [1]*event.Event{e}
			if resuming {
				if l, ok := skip.take(key, e.ID); ok && p.proven(l, e) {
					// Acknowledged before the restart: listed as acknowledged
					// again (so a second crash skips it too), not sent.
					skipped = append(skipped, it)
					p.resumeObs.Skipped(l.by)
					continue
				}
				if window && skip.resent() {
					p.resumeObs.Resent()
				}
			}
			select {
			case items <- it:
				continue
			default:
			}
			delivering.kick() // full: the queued events go first
			select {
			case items <- it:
			case <-ctx.Done():
				return false, ctx.Err()
			}
		}
		if len(items) > 0 {
			// Submit only queues, or a Local sink's Write writes what came
			// to a waiting source: hand the batch on from here rather than
			// wake a goroutine for it. Not for a TryHandler when that may
			// wait: a Write, a fence asked first (a lease being renewed is
			// waited for), or a batch's Linger.
			here := queuer || waited
			if try && (!queuer || p.cfg.Fence != nil || p.cfg.Linger > 0) {
				here = false
			}
			if here {
				delivering.here()
			} else {
				delivering.kick()
			}
		}
		p.tracker.release(skipped)
		if resuming || skip.claims > 0 {
			p.unmatched(skip.pass(key))
			p.unmatched(skip.sweep(func() (*position.Set, error) { return position.Parse(txn.Position.GTIDSet) }))
		}
		return true, nil
	}
	if h, ok := src.(Handoff); ok {
		h.Handoff(func(ctx context.Context, txn *event.Txn) (bool, error) { return hand(ctx, txn, true) })
	}
	readErr := src.Run(readCtx, from, func(ctx context.Context, txn *event.Txn) error {
		_, err := hand(ctx, txn, false)
		return err
	})
	if readErr != nil && ctx.Err() == nil && !errors.Is(readErr, context.Canceled) {
		fail(fmt.Errorf("read binlog: %w", readErr))
	}
	stopReading()
	p.tracker.close()
	close(items)

	// Drain what is in flight, for at most DrainTimeout; not when fenced:
	// the queued events, then a Submitter's acks.
	if fenced.Load() {
		stopDelivery()
	}
	deliveryDone := make(chan struct{})
	go func() {
		connecting.Wait() // no kick after this
		delivering.kick()
		delivering.wait()
		pending.Wait()
		close(deliveryDone)
	}()
	select {
	case <-deliveryDone:
	case <-time.After(p.cfg.DrainTimeout):
		ev, _, _ := p.tracker.inFlight()
		p.log.Warn("drain timeout: stopping with events unacknowledged (they are delivered again after restart)", slog.Int("unacked", ev))
		stopDelivery()
	}
	<-deliveryDone
	startSave.Wait()
	saving.wait()
	saveCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if fenced.Load() {
		ev, _, _ := p.tracker.inFlight()
		p.log.Error("fenced: another relay has taken over; stopped at once without draining or saving", slog.Int("unacked", ev))
		if fatal == nil {
			fatal = context.Cause(ctx)
		}
	} else if err := p.save(saveCtx, true, time.Now()); err != nil {
		p.log.Error("final checkpoint save failed", slog.Any("err", err))
		if fatal == nil {
			fatal = err
		}
	}
	closeCtx, cancelClose := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancelClose()
	if err := p.cfg.Sink.Close(closeCtx); err != nil {
		p.log.Warn("sink close", slog.Any("err", err))
	}
	if fatal != nil {
		return fatal
	}
	return ctx.Err()
}

// DefaultTrickleGap is how long after the source's handler last returned a
// transaction must come for a sink.Local to be written on the source's
// goroutine (Config.TrickleGap). Between transactions read back to back (a
// backlog) the source only parses, a few µs per event; at a steady 2,000
// single-row transactions a second they come 500 µs apart. Written from the
// source's goroutine, a trickle's transaction wakes no second thread: at
// 2,000/s to stdout the relay's CPU per event over a bare go-mysql reader
// went from 26 to 9.5 µs (BENCHMARKS.md, the steady rate, round 4).
const DefaultTrickleGap = 100 * time.Microsecond

// queuerItems caps the items queued between the source and the delivery
// of a sink.Queuer, rather than BatchSize (500 slots: 4 KB at each wake of
// a gateway's endpoint). The source's goroutine hands each transaction on
// itself (Submit only queues), so the queue holds one transaction's
// events, or what the source reads while the sink connects; a larger
// transaction is handed on by the delivery's goroutine while the source
// queues the rest, in batches of at most about this many.
const queuerItems = 16

// drainFrom calls stop DrainTimeout after ctx ends; the func it returns
// undoes that (if stop has not been called yet).
func (p *Pipeline) drainFrom(ctx context.Context, stop func()) (undo func()) {
	var mu sync.Mutex
	var timer *time.Timer
	undoArm := context.AfterFunc(ctx, func() {
		mu.Lock()
		timer = time.AfterFunc(p.cfg.DrainTimeout, stop)
		mu.Unlock()
	})
	return func() {
		undoArm()
		mu.Lock()
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
	}
}

// txnKey identifies an event's transaction in a checkpoint's list of
// acknowledged events: its GTID, or the binlog coordinates of its end when
// the server has GTIDs off.
func txnKey(e *event.Event) string {
	if e.Source.GTID != "" {
		return e.Source.GTID
	}
	return fmt.Sprintf("%s:%d", e.Source.File, e.Source.Pos)
}
