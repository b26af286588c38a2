package scaled

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/gateway/kafkasource"
	"github.com/outbox-relay/outbox-relay/pipeline"
	"github.com/outbox-relay/outbox-relay/replay"
	"github.com/outbox-relay/outbox-relay/retry"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/source"
)

// Replays of the scaled-out gateway ("recover since" for one endpoint,
// docs/replay.md): a replay.Job of source replay.SourceKafka, kept under
// the replay keys (replay.JobKey, ProgressKey, CancelKey) in the gateway's
// cursor table, which every replica shares. Its window is every partition
// of the gateway's topics from the offsets of its start time up to the
// offsets the partitions ended at when it was made.
//
// One replica runs every job: the one holding the cursor store's lock
// (checkpoint.MySQL.Lock, GET_LOCK on a connection of its own), taken in
// the background by every replica. A replica that dies frees it at once
// (its connection ends), one that freezes within checkpoint.lock_timeout;
// another takes it and resumes the jobs from their saved progress. Its
// saves are fenced (a replica that lost the lock saves nothing more). The
// job runs as a pipeline of its own (its own endpoint sink and in-flight
// limit, replay.max_in_flight), apart from the partitions' live gateways.

// OpenJobs opens the replay jobs of the scaled-out gateway whose cursors
// are in table (default DefaultCursorTable), in checkpoint.dsn's database:
// for the commands that make, list and cancel them. readOnly opens the
// table without creating it.
func OpenJobs(ctx context.Context, cfg *config.Config, table string, readOnly bool) (*replay.Store, func(), error) {
	if cfg.Checkpoint.Store != "mysql" {
		return nil, nil, errors.New("the scaled-out gateway keeps its cursors and replay jobs in MySQL: set checkpoint.store: mysql and checkpoint.dsn, as for outbox-relay gateway")
	}
	if table == "" {
		table = DefaultCursorTable
	}
	db, err := checkpoint.OpenDB(cfg.Checkpoint.DSN.Reveal())
	if err != nil {
		return nil, nil, err
	}
	var st *checkpoint.MySQL
	if readOnly {
		st, err = checkpoint.OpenMySQLReadOnly(db, table)
	} else {
		st, err = checkpoint.OpenMySQL(ctx, db, table, nil)
	}
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	jobs, err := replay.NewStore(st)
	if err != nil {
		st.Close()
		db.Close()
		return nil, nil, err
	}
	return jobs, func() { st.Close(); db.Close() }, nil
}

// PlanReplay resolves a replay of one endpoint of the scaled-out gateway
// that reads kg's Kafka sink's topics: the window starts, on every
// partition, at the first record whose timestamp (the event's commit time,
// as the Kafka sink writes it) is at or after ask.Since, found with a
// ListOffsets request by timestamp, and ends at ask.UntilTime's offsets or,
// by default, at the partitions' ends now. It returns the job, pending,
// to store with OpenJobs. Every error says what to give instead.
func PlanReplay(ctx context.Context, cfg *config.Config, targets Targets, kg Config, ask replay.Ask, now time.Time) (replay.Job, error) {
	now = now.UTC()
	j := replay.Job{ID: replay.NewID(now), Sink: ask.Sink, Endpoint: ask.Endpoint, Source: replay.SourceKafka, Since: ask.Since.UTC(),
		UntilTime: ask.UntilTime.UTC(), Types: ask.Types, Where: ask.Where, State: replay.Pending, CreatedAt: now}
	switch {
	case ask.From != "" || ask.Until != "":
		return j, errors.New("a replay from Kafka is bounded by times: give --since TIME (and --until TIME), not GTID sets")
	case ask.Source != "" && ask.Source != replay.SourceBinlog && ask.Source != replay.SourceKafka:
		return j, fmt.Errorf("--source %s: a replay of the scaled-out gateway (--kafka) reads the Kafka topics; leave out --source", ask.Source)
	case ask.Since.IsZero():
		return j, errors.New("give where the window starts: --since TIME")
	case ask.Since.After(now):
		return j, fmt.Errorf("--since %s is in the future (it is %s now): give a past time, such as --since 2h (two hours ago)", ask.Since.UTC().Format(time.RFC3339), now.Format(time.RFC3339))
	case !ask.UntilTime.IsZero() && ask.UntilTime.After(now):
		return j, fmt.Errorf("--until %s is in the future: leave it out to replay up to now", ask.UntilTime.UTC().Format(time.RFC3339))
	}
	if err := j.Check(); err != nil {
		return j, err
	}
	kg.Webhook = ask.Sink
	_, _, topics, err := resolve(cfg, &kg)
	if err != nil {
		return j, err
	}
	if _, err := targetFilter(ctx, cfg, targets, j); err != nil {
		return j, err
	}
	dialer, err := topics.Dialer()
	if err != nil {
		return j, err
	}
	c := kafkasource.Client(topics.Brokers, dialer)
	from, err := kafkasource.OffsetsAt(ctx, c, kg.Topics, ask.Since)
	if err != nil {
		return j, err
	}
	until, err := kafkasource.OffsetsAt(ctx, c, kg.Topics, ask.UntilTime)
	if err != nil {
		return j, err
	}
	if len(from) != len(until) {
		return j, fmt.Errorf("the partitions of %v changed while the window was looked up: make the replay again", kg.Topics)
	}
	empty := true
	for p, off := range until {
		f, ok := from[p]
		if !ok {
			return j, fmt.Errorf("the partitions of %v changed while the window was looked up: make the replay again", kg.Topics)
		}
		from[p] = min(f, off)
		empty = empty && from[p] == off
	}
	if empty {
		return j, fmt.Errorf("the window is empty: the topics %v hold no record from %s up to %s; give an earlier --since", kg.Topics,
			ask.Since.UTC().Format(time.RFC3339), cmpTime(ask.UntilTime, now).Format(time.RFC3339))
	}
	j.From, j.Until = from.Position(), until.Position()
	if j.UntilTime.IsZero() {
		j.UntilTime = now.Truncate(time.Second) // for humans: the offsets are the end
	}
	return j, nil
}

func cmpTime(t, or time.Time) time.Time {
	if t.IsZero() {
		return or
	}
	return t
}

// targetFilter checks that the job's endpoint exists (of the
// configuration or of the endpoints table, read from the source server)
// and returns its filter (nil: every event).
func targetFilter(ctx context.Context, cfg *config.Config, targets Targets, j replay.Job) (func(*event.Event) bool, error) {
	db, dbErr := source.Open(ctx, cfg.Source)
	if dbErr == nil {
		defer db.Close()
	} else {
		db = nil
	}
	s, match, err := targets.ReplayTarget(ctx, db, j)
	if err != nil {
		if dbErr != nil {
			return nil, fmt.Errorf("%w (the endpoints table could not be read: %v)", err, dbErr)
		}
		return nil, err
	}
	_ = s.Close(ctx) // built to check it; the replica builds its own
	return match, nil
}

// DryRunReplay reads job's window from the Kafka topics, as a replica
// would, and counts the events it would send and those its filters pass
// over; it sends nothing.
func DryRunReplay(ctx context.Context, cfg *config.Config, targets Targets, kg Config, j replay.Job) (send, skipped int64, err error) {
	kg.Webhook = j.Sink
	_, _, topics, err := resolve(cfg, &kg)
	if err != nil {
		return 0, 0, err
	}
	match, err := targetFilter(ctx, cfg, targets, j)
	if err != nil {
		return 0, 0, err
	}
	dialer, err := topics.Dialer()
	if err != nil {
		return 0, 0, err
	}
	until, err := kafkasource.ParseOffsets(j.Until)
	if err != nil {
		return 0, 0, err
	}
	w := &replay.Window{Source: &kafkasource.Window{Brokers: topics.Brokers, Dialer: dialer, Until: until, Decode: topics.Decode},
		Job: &j, Select: match, Skipped: func() { skipped++ }}
	err = w.Run(ctx, j.From, func(_ context.Context, txn *event.Txn) error {
		send += int64(len(txn.Events))
		w.Saved(txn.Position) // nothing to deliver: each is done once read
		return nil
	})
	return send, skipped, err
}

// replayParts are what a replica's replay runner is built with, beside
// the relay's Parts.
type replayParts struct {
	cursorTable string
	db          *sql.DB // the endpoints table's source; nil: none
	window      func(until kafkasource.Offsets) *kafkasource.Window
}

// replays runs the gateway's replay jobs (replay.Runner, at most
// replay.max_running at once) while this replica holds the cursor store's
// lock.
type replays struct {
	store  *checkpoint.MySQL // its own connection pool; locked while it runs jobs
	runner *replay.Runner
	log    *slog.Logger
}

func newReplays(ctx context.Context, cfg *config.Config, r Parts, rp replayParts) (*replays, func(), error) {
	db, err := checkpoint.OpenDB(cfg.Checkpoint.DSN.Reveal())
	if err != nil {
		return nil, nil, err
	}
	st, err := checkpoint.OpenMySQL(ctx, db, rp.cursorTable, r.Logger)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	st.LockTimeout = cfg.Checkpoint.LockTimeout
	jobs, err := replay.NewStore(st)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	saver := checkpoint.NewGroupCommit(st)
	slots := make([]uint32, cfg.Replay.MaxRunning) // a run needs no id of its own: the slots only count
	for i := range slots {
		slots[i] = uint32(i + 1)
	}
	log := r.Logger.With(slog.String("component", "replay"))
	runner := &replay.Runner{Jobs: jobs, Poll: cfg.Replay.Poll, Slots: slots, Registry: r.Metrics, Logger: log,
		Open: func(ctx context.Context, j replay.Job, _ uint32) (replay.Launch, error) {
			if j.Source != replay.SourceKafka {
				return replay.Launch{}, fmt.Errorf("a %s replay is the relay's: the scaled-out gateway runs replays from Kafka only (make it with outbox-relay endpoints replay --kafka)", j.Source)
			}
			until, err := kafkasource.ParseOffsets(j.Until)
			if err != nil {
				return replay.Launch{}, err
			}
			s, match, err := r.Targets.ReplayTarget(ctx, rp.db, j)
			if err != nil {
				return replay.Launch{}, err
			}
			return replay.Launch{Target: s, Select: match, Source: rp.window(until)}, nil
		},
		Current: func(ctx context.Context, j replay.Job) (string, error) {
			return r.Targets.ReplayTargetVersion(ctx, rp.db, j)
		},
		NewPipeline: func(j replay.Job, s sink.Sink, obs pipeline.Observer) (replay.Pipeline, error) {
			d, maxEvents := cfg.Delivery, cfg.Replay.MaxInFlight
			return pipeline.New(pipeline.Config{
				Name: replay.ProgressKey(j.ID), Sink: s, Store: saver, Identity: checkpoint.Checkpoint{Flavor: "kafka"},
				Start: j.From, DeadLetters: r.DeadLetters,
				BatchSize: min(d.BatchSize, maxEvents), BatchBytes: d.BatchBytes, Linger: d.Linger,
				MaxInFlight: maxEvents, MaxInFlightBytes: d.MaxInFlightBytes,
				CheckpointInterval: cfg.Checkpoint.Interval, Retry: r.Retry, DrainTimeout: d.DrainTimeout,
				Logger: r.Logger, Observer: obs, Fence: st.Fence,
			})
		}}
	return &replays{store: st, runner: runner, log: log}, func() { st.Close(); db.Close() }, nil
}

// run takes the lock, runs the jobs while it holds it, and takes it again
// when it is lost, until ctx ends.
func (rr *replays) run(ctx context.Context) {
	for ctx.Err() == nil {
		release, lost, err := rr.store.Lock(ctx)
		if err != nil {
			if ctx.Err() == nil {
				rr.log.Warn("take the replay runner's lock (retried)", slog.Any("err", err))
				_ = retry.Sleep(ctx, time.Second)
			}
			continue
		}
		rr.log.Info("this replica runs the gateway's replay jobs (it holds its cursor store's lock)")
		lctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-lost:
				rr.log.Warn("the replay runner's lock is lost: its jobs stop here and resume on the replica that takes it")
				cancel()
			case <-lctx.Done():
			}
		}()
		rr.runner.Run(lctx)
		cancel()
		release()
	}
}
