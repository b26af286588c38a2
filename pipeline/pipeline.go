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
// 16 events, not BatchSize). A sink whose Write only writes to a local pipe
// or file (sink.Local: stdout) is written from the source's goroutine too
// when nothing else is delivering and the transaction came TrickleGap or
// more after the last was handed on, so the source had been waiting for the
// binlog; on a backlog its batches are written beside the reading. A source
// that is a Handoff (a gateway's endpoint) may also hand a transaction on
// from another goroutine, one that must not wait (the gateway's shared
// stream), through a TryHandler: it hands the transaction on only if that
// needs no wait, and then submits a Queuer's events on that goroutine. A source that
// is Woken (a gateway's endpoint, run only while it has events) has its
// pipeline's start and end logged at Debug.
//
// Run is called once; it returns when ctx ends (after draining in-flight
// events for up to DrainTimeout and saving the checkpoint) or on a fatal error.
// A fenced pipeline — Fence or the store's Save returned checkpoint.ErrFenced,
// or ctx was cancelled with a cause that is ErrFenced: another relay has taken
// over — stops at once instead: no drain, no further sink write, no save.
package pipeline

// This file owns what a Pipeline is given and reports to: its Config and
// the defaults New applies, the Source it reads, the observers (Observer,
// ResumeObserver, DeadLetterObserver), the Pipeline itself and what it
// tells from any goroutine (Settled, Stored). The work: run.go runs it,
// deliver.go writes to the sink, deadletter.go keeps what failed for good,
// save.go saves the checkpoint over what tracker.go settled, resume.go and
// skip.go decide what a restart does not send again.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/deadletter"
	"github.com/outbox-relay/outbox-relay/event"
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

// TryHandler hands txn on as a Source's handler does, but waits for nothing:
// when handing it on would wait (for room in MaxInFlight or in the queue to
// the sink, for the sink to be read back), it hands on nothing and returns
// false, and the transaction is the source's to hand to the handler as
// usual. What it hands on it submits to a sink.Queuer on the caller's
// goroutine, unless that could wait (a Fence to ask first, a batch Linger):
// then the delivery goroutine does. It returns an error only when the
// handler would.
type TryHandler func(ctx context.Context, txn *event.Txn) (handed bool, err error)

// Handoff is implemented by a Source that may hand a transaction on from a
// goroutine other than Run's, one that must not wait (a gateway's shared
// stream, handing an endpoint its transaction while the endpoint's
// goroutine waits with nothing queued: that goroutine is not woken for it).
// Run calls Handoff before it calls the source's Run. The source calls try
// only while its Run runs, never beside its handler (each call of either
// ends before the next of either begins), and in the order of its
// transactions, as it calls the handler.
type Handoff interface {
	Handoff(try TryHandler)
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
	// TrickleGap is how long after the source's handler last returned a
	// transaction must come for a sink.Local (stdout) to be written on the
	// source's goroutine rather than from a goroutine of the pipeline's.
	// Default DefaultTrickleGap (100µs).
	TrickleGap time.Duration
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
	// delivering is Run's delivery loop, kept for tests that wait for it
	// to rest between transactions.
	delivering *onDemand
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
	defd(&cfg.TrickleGap, DefaultTrickleGap)
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
