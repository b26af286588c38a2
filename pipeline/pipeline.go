// Package pipeline joins a binlog source, one sink and a checkpoint store.
//
// A Pipeline delivers every event the source hands it to its sink and saves,
// under its own checkpoint key, the position after the last transaction whose
// events (and all events before them) the sink acknowledged, with the events
// acknowledged beyond it. It saves as soon as something is acknowledged, one
// save at a time (what is acknowledged during a save, or within the gap
// after one while acknowledgements stream in, goes in the next). It
// promises:
//
//   - at-least-once: the checkpoint never passes an unacknowledged event, so a
//     crash at any moment resumes at or before the first undelivered event;
//     a restart skips only the events the checkpoint lists as acknowledged
//     and those the sink reads back from its destination (a Recover method:
//     see recoverer) as its own exact message of the event (the message's
//     digest is the sink's Digest of the event: a message that only claims
//     to be the sink's is reported and costs a duplicate, never the event);
//   - a bounded cost of a crash: events sent but unacknowledged, and events
//     acknowledged whose save is not over, count together against
//     MaxInFlight, so a crash sends again at most that many (a sink that
//     reads its destination back counts only the unacknowledged: a restart
//     skips what the destination holds; when its read-back falls back, it
//     sends again what was in flight and what was acknowledged while the
//     last save was under way);
//   - order: batches go to a plain Sink one at a time, in binlog order, and a
//     failed event is retried before any later batch is sent, so events of one
//     aggregate arrive in commit order (a Submitter sink keeps that order
//     itself);
//   - bounded memory: events in flight are limited by count and bytes; when
//     full, the source waits (the binlog is the buffer);
//   - failure classes: retriable failures are retried forever with the retry
//     package's policy (capped exponential backoff with jitter; at most
//     Retry.Probe between attempts while the sink cannot be reached at all,
//     so its recovery is noticed within about a second); permanent ones are
//     written to the dead-letter store before the checkpoint may pass them,
//     or, with no store, stop the pipeline at once with an error (nothing is
//     dropped); a dead letter the store does not take is written again
//     until it does, the pipeline waiting on it and saying so (an ERROR
//     line, DeadLetterObserver: a gauge and /readyz naming the event and
//     the fix), its neighbours going on;
//   - isolation: each pipeline has its own source, sink and checkpoint, so a
//     sink that is down only holds back its own pipeline (a gateway's
//     endpoints share a binlog stream through sources that never wait for
//     one another: package gateway).
//
// The sink is written (Write, or Submit) from one goroutine at a time: a
// delivery goroutine that runs only while events are queued, or, for a sink
// whose Submit only queues (sink.Queuer), the source's own goroutine, inside
// its handler, when nothing else is delivering (a trickle then wakes no
// second goroutine per transaction; its queue from the source then holds
// 16 events, not BatchSize). A source that is Woken (a gateway's endpoint,
// run only while it has events) has its pipeline's start and end logged at
// Debug.
//
// Run is called once; it returns when ctx ends (after draining in-flight
// events for up to DrainTimeout and saving the checkpoint) or on a fatal error.
// A fenced pipeline — Fence or the store's Save returned checkpoint.ErrFenced,
// or ctx was cancelled with a cause that is ErrFenced: another relay has taken
// over — stops at once instead: no drain, no further sink write, no save.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/deadletter"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/position"
	"github.com/outbox-relay/outbox-relay/retry"
	"github.com/outbox-relay/outbox-relay/sink"
)

// Defaults applied by New to the fields of Config left at zero: the
// configuration's (declared in package config, beside their fields). The
// retry defaults are the retry package's.
const (
	DefaultBatchSize          = config.DefaultBatchSize
	DefaultBatchBytes         = config.DefaultBatchBytes
	DefaultLinger             = config.DefaultLinger
	DefaultMaxInFlight        = config.DefaultMaxInFlight
	DefaultMaxInFlightBytes   = config.DefaultMaxInFlightBytes
	DefaultCheckpointInterval = config.DefaultCheckpointInterval
	DefaultCheckpointGap      = config.DefaultCheckpointGap
	// ReadBackGapFactor multiplies CheckpointGap for a sink whose
	// destination is read back on a restart: measured on the Kafka backlog
	// row (1M rows), saves 10 ms apart cost ~7 % of the relay's CPU over
	// the relay before the acknowledged list, 100 ms apart none.
	ReadBackGapFactor   = 10
	DefaultDrainTimeout = config.DefaultDrainTimeout
)

// Source hands committed transactions to handle, in binlog order, starting
// after from, until ctx ends or handle fails. canal.Reader is one.
type Source interface {
	Run(ctx context.Context, from event.Position, handle func(context.Context, *event.Txn) error) error
}

// Woken is implemented by a Source that runs its pipeline only while it
// has events, one of many (a gateway's endpoint, woken by the shared
// stream and let go once it holds nothing): Woken reports whether this run
// is such a wake. The pipeline then logs its start and its final checkpoint
// save at Debug, not Info: a burst to 100,000 endpoints would log 200,000
// routine lines. Its warnings and errors are logged as any pipeline's.
type Woken interface {
	Woken() bool
}

// Config wires one pipeline.
type Config struct {
	// Name is the checkpoint key and the name in logs and metrics.
	Name  string
	Sink  sink.Sink
	Store checkpoint.Store
	// Identity is stored with every checkpoint (flavor, server id/uuid), for
	// humans: only its flavor is compared on resume.
	Identity checkpoint.Checkpoint
	// CanResume, if set, is asked whether the source can serve a loaded
	// checkpoint (source.CheckResumeAt: GTID containment, and on the
	// MariaDB server whose binlog the position's File is, that binlog
	// agreeing at File:Pos, with the checkpoint's GTID position and its
	// commit time); its error stops the pipeline before it reads anything.
	CanResume func(ctx context.Context, cp checkpoint.Checkpoint) error
	// Start is where to begin when Store has no checkpoint for Name.
	Start event.Position
	// DeadLetters receives permanently failed events. Nil: a permanent
	// failure stops the pipeline.
	DeadLetters deadletter.Putter

	// BatchSize caps the events per Write. Default 500.
	BatchSize int
	// BatchBytes caps the payload bytes per Write. Default 1 MiB.
	BatchBytes int
	// Linger is how long a batch waits to fill once it has one event. Default
	// 0: no waiting — a batch is whatever is queued when the sink is ready for
	// it, so an event on an idle pipeline is sent at once and batches fill
	// only under load (while the sink is busy, events queue). A Linger > 0
	// trades latency for fuller batches at low rates. Negative is an error.
	Linger time.Duration
	// MaxInFlight caps the unacknowledged events, with the acknowledged ones
	// whose save is not over and those the checkpoint does not list (what
	// a crash sends again). Default 10000.
	MaxInFlight int
	// MaxInFlightBytes caps their bytes. Default 64 MiB.
	MaxInFlightBytes int
	// CheckpointInterval is how often a failed checkpoint save is retried
	// and the in-flight gauges are reported. Default 1s. What is
	// acknowledged is saved at once, one save at a time (acknowledgements
	// arriving during a save are saved by the next).
	CheckpointInterval time.Duration
	// CheckpointGap is the least time from the start of one save to the
	// start of the next: while acknowledgements stream in, saves are at most
	// 1/CheckpointGap a second, each covering what was acknowledged since
	// the last (an idle pipeline's acknowledgement is saved at once); while
	// they keep streaming in, the gap grows up to SteadyGapFactor times it
	// (saveGap). It bounds what saving costs the delivery path (encoding the list of
	// acknowledged events, a write and an fsync); what is acknowledged
	// within it before a crash is sent again by a sink that cannot be read
	// back (within MaxInFlight still). It is cut short when the source
	// waits for room that unsaved acknowledgements hold, so it never caps
	// throughput at MaxInFlight per gap. Default 10ms; a sink that is read
	// back on a restart (Kafka, Redis) saves ReadBackGapFactor times as far
	// apart.
	CheckpointGap time.Duration
	// Retry is the policy of every retry: sink connects, writes and
	// dead-letter writes. Defaults: retry.DefaultInitial (100ms),
	// retry.DefaultMax (30s), retry.DefaultProbe (1s).
	Retry retry.Policy
	// DrainTimeout bounds the delivery of in-flight events at shutdown. Default 10s.
	DrainTimeout time.Duration
	// Fence, if set, is asked before every sink write, dead-letter write
	// and checkpoint save (but the final one) whether this relay may still deliver (checkpoint.Fencer: it holds the
	// store's lock). An error stops the pipeline; checkpoint.ErrFenced stops
	// it at once, without draining or saving.
	Fence func(ctx context.Context) error

	Observer Observer
	Logger   *slog.Logger
}

// Observer receives what the pipeline does, for metrics. Methods are called
// from several goroutines and must not block. A nil Observer is allowed.
type Observer interface {
	// Delivered is called once per acknowledged event (not for dead letters).
	Delivered(e *event.Event, at time.Time)
	// Failed is called for each failed attempt of an event; permanent says
	// whether it goes to the dead-letter store.
	Failed(e *event.Event, err error, permanent bool)
	// DeadLettered is called when an event was stored as a dead letter.
	DeadLettered(e *event.Event, reason string)
	// InFlight reports the unacknowledged events and bytes, and the commit
	// time of the oldest (zero when none).
	InFlight(events, bytes int, oldest time.Time)
	// CheckpointSaved is called after each successful save.
	CheckpointSaved(pos event.Position, at time.Time)
	// SinkUp reports whether the sink's last attempt succeeded.
	SinkUp(up bool)
	// SinkConnected is called after each attempt to connect the sink (at
	// start, while the binlog stream is already read): nil once it
	// succeeded, else why it failed (it is tried again).
	SinkConnected(err error)
}

// ResumeObserver is implemented by an Observer that also counts what a
// restart does and does not send again. Methods are called from the
// pipeline's goroutines and must not block.
type ResumeObserver interface {
	// Skipped is called for each event after the checkpoint's position that
	// a restart does not send again: by is "checkpoint" (the checkpoint
	// lists it as acknowledged) or "readback" (the sink's destination holds
	// it).
	Skipped(by string)
	// Resent is called for each event a restart sends that the previous
	// run may have delivered already: it was neither skipped nor after the
	// last transaction the previous run had handed to the sink when it
	// saved its checkpoint.
	Resent()
	// RecoverFellBack is called when the sink could not read back what its
	// destination holds (sink.ErrCannotRecover): the restart sends again
	// what the checkpoint does not list.
	RecoverFellBack()
	// Foreign is called for each message read back that claims to be the
	// sink's but proves nothing: why is "mismatch" (its event's message is
	// not byte for byte this one; the event is sent again), "unmatched"
	// (the stream passed its transaction without an event of its id) or
	// "oversized" (the sink's read-back dropped it at once: larger than it
	// reads or keeps).
	Foreign(why string)
}

// DeadLetterObserver is implemented by an Observer that also reports an
// event whose dead letter the store does not take (it refuses the record,
// or cannot be written at all): the pipeline waits on it, as the
// checkpoint may not pass it, and writes it again until the store takes
// it; nothing is dropped. Methods are called from the pipeline's
// goroutines and must not block.
type DeadLetterObserver interface {
	// DeadLetterWaiting is called after each failed write of e's dead
	// letter, with why (err) and what an operator can do (fix), and once
	// with err nil when the store took it.
	DeadLetterWaiting(e *event.Event, err error, fix string)
}

// Pipeline delivers one source's events to one sink.
type Pipeline struct {
	cfg       Config
	log       *slog.Logger
	tracker   *tracker
	obs       Observer
	resumeObs ResumeObserver
	dlObs     DeadLetterObserver
	// after is time.After; tests replace it with a clock of their own.
	after func(time.Duration) <-chan time.Time
	// lastSave is the start of saveLoop's last save (saveLoop runs only
	// while there is something to save, and keeps its gap across runs).
	lastSave time.Time
	// gap is saveLoop's schedule of the gap between saves (savegap.go),
	// kept across its runs as lastSave is.
	gap saveGap
	// saveTick and saveGap are saveLoop's ticker and gap timer, kept
	// (stopped) between its runs.
	saveTick *time.Ticker
	saveGap  *time.Timer
	// running is Run's tracker, for Settled; stored says a checkpoint of
	// this run is durable (Stored).
	running atomic.Pointer[tracker]
	stored  atomic.Bool
	// routine is the level of Run's start and end lines: Info, or Debug
	// for a Woken source's wake.
	routine slog.Level
}

// Settled reports whether the running pipeline holds nothing: every event
// it was handed is acknowledged and its checkpoint, at pos (commit: the
// commit time of its transaction, zero when unknown), is saved. A gateway
// lets an endpoint go idle only then. False before Run has started. Safe
// to call from any goroutine.
func (p *Pipeline) Settled() (pos event.Position, commit time.Time, ok bool) {
	t := p.running.Load()
	if t == nil {
		return event.Position{}, time.Time{}, false
	}
	return t.settled()
}

// Stored reports whether a checkpoint of the pipeline's key is durable for
// this run: the one it resumed from, or its start (saved at once when it
// had none). Safe to call from any goroutine.
func (p *Pipeline) Stored() bool { return p.stored.Load() }

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

// New checks cfg, applies defaults and returns a Pipeline.
func New(cfg Config) (*Pipeline, error) {
	if cfg.Name == "" || cfg.Sink == nil || cfg.Store == nil {
		return nil, errors.New("pipeline: Name, Sink and Store are required")
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defd := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&cfg.BatchSize, DefaultBatchSize)
	def(&cfg.BatchBytes, DefaultBatchBytes)
	def(&cfg.MaxInFlight, DefaultMaxInFlight)
	def(&cfg.MaxInFlightBytes, DefaultMaxInFlightBytes)
	if cfg.Linger < 0 {
		return nil, fmt.Errorf("pipeline: Linger %s is negative", cfg.Linger)
	}
	defd(&cfg.CheckpointInterval, DefaultCheckpointInterval)
	defd(&cfg.CheckpointGap, DefaultCheckpointGap)
	if _, ok := cfg.Sink.(recoverer); ok {
		// A crash costs a read-back sink nothing it acknowledged, saved or
		// not (the restart reads its destination back): its saves are
		// spaced further, for throughput, and only a restart that falls
		// back to at-least-once (loudly) re-sends what the longer gap held.
		cfg.CheckpointGap *= ReadBackGapFactor
	}
	defd(&cfg.DrainTimeout, DefaultDrainTimeout)
	cfg.Retry = cfg.Retry.WithDefaults()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	obs := cfg.Observer
	if obs == nil {
		obs = nopObserver{}
	}
	robs, ok := obs.(ResumeObserver)
	if !ok {
		robs = nopObserver{}
	}
	dlobs, ok := obs.(DeadLetterObserver)
	if !ok {
		dlobs = nopObserver{}
	}
	return &Pipeline{cfg: cfg, log: cfg.Logger.With(slog.String("sink", cfg.Name)), obs: obs, resumeObs: robs, dlObs: dlobs, after: time.After,
		gap: newSaveGap(cfg.CheckpointGap)}, nil
}

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

	if queuer {
		// The reader may be delivering (here) when reading stops, waiting on
		// the fence with deliverCtx: the drain's bound then runs from the
		// end of reading, not from the reader's return, which it holds up.
		defer p.drainFrom(readCtx, stopDelivery)()
	}
	ready := false // recovered was seen closed
	readErr := src.Run(readCtx, from, func(ctx context.Context, txn *event.Txn) error {
		if !ready {
			select {
			case <-recovered:
				ready = true
			case <-ctx.Done():
				return ctx.Err()
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
		entry := p.tracker.addInto(into, txn.Position, commit, len(txn.Events), size, key)
		if entry == nil {
			return ctx.Err()
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
				return ctx.Err()
			}
		}
		if len(items) > 0 {
			if queuer {
				// Submit only queues: hand the batch on from here rather
				// than wake a goroutine for it.
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
		return nil
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

// fence asks cfg.Fence, if set, whether this relay may still deliver.
func (p *Pipeline) fence(ctx context.Context) error {
	if p.cfg.Fence == nil {
		return nil
	}
	return p.cfg.Fence(ctx)
}

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

// The reasons an event is not sent again after a restart, as
// ResumeObserver.Skipped names them.
const (
	skippedByCheckpoint = "checkpoint"
	skippedByReadBack   = "readback"
)

// skipSet is what a restarted pipeline does not send again: the events its
// checkpoint lists as acknowledged, and those the sink read back from its
// destination. It also counts, up to the last transaction the previous run
// had handed to the sink, the events that are sent again. It is used by the
// source's goroutine only (after recover has filled it).
//
// A message read back is only a claim: the event it names is skipped when
// one of the messages read back under its (gtid, id) has the digest of the
// sink's own message of it (checked by the caller of take). Claims are held
// until the stream passes their transaction (pass, sweep), so they are
// bounded by what Recover reports (readback.MaxHeld).
type skipSet struct {
	ids         map[string]map[string]*listed // transaction key → event id → why skipped
	n           int
	readThrough string // "" once passed
	resentLeft  int    // at most this many more are counted as re-sent
	claims      int    // entries by skippedByReadBack
	sinceSweep  int    // transactions passed since the last sweep
}

// listed is why an event is skipped: by the checkpoint, or by read-back
// with the messages read back under its (gtid, id).
type listed struct {
	by   string
	held []sink.Held
}

func newSkipSet(a *checkpoint.Acked, maxInFlight int) *skipSet {
	s := &skipSet{ids: map[string]map[string]*listed{}, resentLeft: maxInFlight}
	if a != nil {
		for key, ids := range a.Events {
			for _, id := range ids {
				s.add(key, id, skippedByCheckpoint)
			}
		}
		s.readThrough = a.ReadThrough
	}
	return s
}

// add lists an event, and reports whether it was not listed yet; one
// listed already keeps its first reason.
func (s *skipSet) add(key, id, by string) bool {
	_, added := s.list(key, id, by)
	return added
}

func (s *skipSet) list(key, id, by string) (*listed, bool) {
	m := s.ids[key]
	if m == nil {
		m = map[string]*listed{}
		s.ids[key] = m
	}
	if l, ok := m[id]; ok {
		return l, false
	}
	l := &listed{by: by}
	m[id] = l
	s.n++
	if by == skippedByReadBack {
		s.claims++
	}
	return l, true
}

// addHeld lists a message read back (its transaction's key is its GTID),
// and reports whether its event was not listed yet.
func (s *skipSet) addHeld(h sink.Held) bool {
	l, added := s.list(h.GTID, h.ID, skippedByReadBack)
	if l.by == skippedByReadBack {
		l.held = append(l.held, h)
	}
	return added
}

// active reports whether anything is left to skip or count.
func (s *skipSet) active() bool { return s.n > 0 || s.readThrough != "" }

// take returns why the event is listed, and forgets it.
func (s *skipSet) take(key, id string) (*listed, bool) {
	m := s.ids[key]
	l, ok := m[id]
	if ok {
		s.forget(key, id, l)
	}
	return l, ok
}

func (s *skipSet) forget(key, id string, l *listed) {
	m := s.ids[key]
	delete(m, id)
	if len(m) == 0 {
		delete(s.ids, key)
	}
	s.n--
	if l.by == skippedByReadBack {
		s.claims--
	}
}

// pass is called after the stream's transaction key: the messages read
// back under it that named none of its events are returned, and forgotten.
func (s *skipSet) pass(key string) []sink.Held {
	s.sinceSweep++
	var out []sink.Held
	for id, l := range s.ids[key] {
		if l.by == skippedByReadBack {
			out = append(out, l.held...)
			s.forget(key, id, l)
		}
	}
	return out
}

// sweep returns, and forgets, the messages read back whose transaction the
// stream has passed (set, the GTID set at its position, holds it) though
// it never delivered that transaction (it has no outbox event). It runs
// only once as many transactions passed as claims are held, so that its
// cost per transaction stays constant.
func (s *skipSet) sweep(set func() (*position.Set, error)) []sink.Held {
	if s.claims == 0 || s.sinceSweep < max(64, s.claims) {
		return nil
	}
	s.sinceSweep = 0
	at, err := set()
	if err != nil {
		return nil
	}
	var out []sink.Held
	for key, m := range s.ids {
		for id, l := range m {
			if l.by != skippedByReadBack {
				continue
			}
			if in, err := at.Contains(key); err == nil && in {
				out = append(out, l.held...)
				s.forget(key, id, l)
			}
		}
	}
	return out
}

// window reports whether the transaction key is within the previous run's
// window (at or before the last transaction it had handed to the sink when
// its checkpoint was saved). Called once per transaction, in binlog order.
func (s *skipSet) window(key string) bool {
	if s.readThrough == "" {
		return false
	}
	if key == s.readThrough {
		s.readThrough = ""
	}
	return true
}

// resent counts one event of the window sent again; false once the count
// reached its bound (the in-flight limit: a window holds no more).
func (s *skipSet) resent() bool {
	if s.resentLeft <= 0 {
		return false
	}
	s.resentLeft--
	return true
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

type nopObserver struct{}

func (nopObserver) Delivered(*event.Event, time.Time)             {}
func (nopObserver) Failed(*event.Event, error, bool)              {}
func (nopObserver) DeadLettered(*event.Event, string)             {}
func (nopObserver) InFlight(int, int, time.Time)                  {}
func (nopObserver) CheckpointSaved(event.Position, time.Time)     {}
func (nopObserver) SinkUp(bool)                                   {}
func (nopObserver) SinkConnected(error)                           {}
func (nopObserver) Skipped(string)                                {}
func (nopObserver) Resent()                                       {}
func (nopObserver) RecoverFellBack()                              {}
func (nopObserver) Foreign(string)                                {}
func (nopObserver) DeadLetterWaiting(*event.Event, error, string) {}

// txnKey identifies an event's transaction in a checkpoint's list of
// acknowledged events: its GTID, or the binlog coordinates of its end when
// the server has GTIDs off.
func txnKey(e *event.Event) string {
	if e.Source.GTID != "" {
		return e.Source.GTID
	}
	return fmt.Sprintf("%s:%d", e.Source.File, e.Source.Pos)
}
