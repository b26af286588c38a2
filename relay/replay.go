package relay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/pipeline"
	"github.com/outbox-relay/outbox-relay/replay"
	"github.com/outbox-relay/outbox-relay/sink"
)

// ReplaySources open the source of a replay job of a kind other than
// replay.SourceBinlog, by kind: the table source (replay.SourceTable)
// registers here. Each returns the pipeline.Source of job's pipeline,
// reading from the position its pipeline asks; replicaID is the job's slot
// id, should it read the binlog too. A kind not registered fails the job
// with an error naming it.
var ReplaySources = map[string]func(ctx context.Context, a ReplaySourceParams) (pipeline.Source, error){}

// ReplaySourceParams are what a replay source kind is opened with.
type ReplaySourceParams struct {
	Job       replay.Job
	DB        *sql.DB // the source server (inspected, tables checked)
	ReplicaID uint32
	// Binlog opens a binlog reader registering as ReplicaID (the one a
	// table source merges with its chunks, as DBLog does).
	Binlog func() (pipeline.Source, error)
	Logger *slog.Logger
	// Flavor is the source's; Tables the outbox tables (their mapping);
	// Config the relay's (tables[].columns.created_at).
	Flavor string
	Tables []canal.Table
	Config *config.Config
}

// errReplayCancelled is the cause a job's context is cancelled with when
// the job is cancelled (outbox-relay replay cancel).
var errReplayCancelled = errors.New("replay cancelled")

// replays runs the replay jobs of the checkpoint store beside the live
// members: every replay.poll it adopts the requests of the spool (file
// store), lists the jobs, starts the pending or running ones it does not
// run yet while a slot (a replica id of config.ReplayReplicaIDs) is free,
// stops those asked to be cancelled, and saves the running ones' counts.
// A job ends done (its window delivered), cancelled or failed; at shutdown
// the running ones are left running, and resume at the next start from
// their saved progress.
type replays struct {
	a     *assembly
	jobs  *replay.Store
	spool *replay.Spool   // nil: the MySQL store, which commands write
	obs   *replay.Metrics // registered when the first job starts
	log   *slog.Logger
	free  []uint32
	runs  map[string]*replayRun
	ended chan *replayRun
	// listFailed: the last listing failed (logged once until one succeeds).
	listFailed bool
}

// replayRun is one job this relay runs.
type replayRun struct {
	job    replay.Job
	target string
	slot   uint32
	cancel context.CancelCauseFunc
	window *replay.Window
	// sent and skipped are this run's, added to the job's saved counts.
	sent, skipped atomic.Int64
	base          [2]int64
	err           error
	ctx           context.Context
}

// counts returns the job with this run's counts.
func (run *replayRun) counts() replay.Job {
	j := run.job
	j.Sent, j.Skipped = run.base[0]+run.sent.Load(), run.base[1]+run.skipped.Load()
	return j
}

// replays returns the member that runs the replay jobs.
func (a *assembly) replays() (member, error) {
	jobs, err := replay.NewStore(a.store)
	if err != nil {
		return member{}, err
	}
	rr := &replays{a: a, jobs: jobs, log: a.r.log.With(slog.String("component", "replay")),
		free: a.cfg.ReplayReplicaIDs(), runs: map[string]*replayRun{}, ended: make(chan *replayRun)}
	if a.cfg.Checkpoint.Store != "mysql" {
		sp := replay.SpoolFor(a.cfg.Checkpoint.Path)
		rr.spool = &sp
	}
	return member{name: "replay", run: rr.run, aside: true}, nil
}

func (rr *replays) run(ctx context.Context) error {
	tick := time.NewTicker(rr.a.cfg.Replay.Poll)
	defer tick.Stop()
	for {
		rr.poll(ctx)
		select {
		case <-ctx.Done():
			for len(rr.runs) > 0 {
				rr.finish(ctx, <-rr.ended)
			}
			return nil
		case run := <-rr.ended:
			rr.finish(ctx, run)
		case <-tick.C:
		}
	}
}

// poll adopts the spool's requests, then starts, cancels and saves jobs.
func (rr *replays) poll(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	rr.adopt(ctx)
	l, err := rr.jobs.List(ctx)
	if err != nil {
		if !rr.listFailed && ctx.Err() == nil {
			rr.log.Warn("list replay jobs (retried every replay.poll)", slog.Any("err", err))
		}
		rr.listFailed = true
		if len(l.Jobs) == 0 {
			return
		}
	} else {
		rr.listFailed = false
	}
	for _, j := range l.Jobs {
		if j.State.Final() {
			continue
		}
		why, cancelAsked := l.Cancel[j.ID]
		if run, ok := rr.runs[j.ID]; ok {
			if cancelAsked {
				run.job.Error = why
				run.cancel(errReplayCancelled)
				continue
			}
			if err := rr.jobs.Put(ctx, run.counts()); err != nil && ctx.Err() == nil {
				rr.log.Warn("save a replay job's counts (retried)", slog.String("job", j.ID), slog.Any("err", err))
			}
			continue
		}
		if cancelAsked {
			j.State, j.Error = replay.Cancelled, why
			rr.save(ctx, j, true)
			rr.log.Info("replay cancelled before it ran", slog.String("job", j.ID))
			continue
		}
		if len(rr.free) == 0 {
			continue // pending until a slot frees: jobs start oldest first
		}
		rr.start(ctx, j)
	}
}

// adopt moves the spool's requests into the store, then removes them.
func (rr *replays) adopt(ctx context.Context) {
	if rr.spool == nil {
		return
	}
	reqs, err := rr.spool.Take()
	if err != nil {
		rr.log.Error("replay request directory", slog.String("dir", rr.spool.Dir()), slog.Any("err", err))
	}
	for _, req := range reqs {
		var err error
		switch {
		case req.Job != nil:
			if _, gerr := rr.jobs.Get(ctx, req.Job.ID); errors.Is(gerr, replay.ErrNoJob) {
				err = rr.jobs.Put(ctx, *req.Job)
			} else {
				err = gerr
			}
		case req.Cancel != "":
			err = rr.jobs.RequestCancel(ctx, req.Cancel, req.Why)
			if err != nil && !errors.Is(err, replay.ErrNoJob) {
				rr.log.Warn("replay cancel request not applied", slog.String("job", req.Cancel), slog.Any("err", err))
				err = nil // already final: nothing to do
			} else if errors.Is(err, replay.ErrNoJob) {
				rr.log.Warn("replay cancel request for a job this store does not hold", slog.String("job", req.Cancel))
				err = nil
			}
		}
		if err != nil {
			rr.log.Warn("adopt a replay request (retried every replay.poll)", slog.String("file", req.File), slog.Any("err", err))
			continue
		}
		if err := rr.spool.Done(req); err != nil {
			rr.log.Warn("remove an adopted replay request", slog.String("file", req.File), slog.Any("err", err))
		}
	}
}

// start runs job on a free slot; a job that cannot start is failed, with
// why.
func (rr *replays) start(ctx context.Context, j replay.Job) {
	a := rr.a
	if rr.obs == nil {
		var err error
		if rr.obs, err = replay.NewMetrics(a.r.metrics); err != nil {
			rr.log.Warn("replay metrics not exposed", slog.Any("err", err))
		}
	}
	slot := rr.free[0]
	run := &replayRun{job: j, target: j.Key(), slot: slot, base: [2]int64{j.Sent, j.Skipped}}
	fail := func(err error) {
		j.State, j.Error = replay.Failed, err.Error()
		rr.save(ctx, j, true)
		rr.log.Error("replay job failed to start", slog.String("job", j.ID), slog.Any("err", err))
	}
	s, match, err := a.r.ReplayTarget(ctx, a.src.db, j)
	if err != nil {
		fail(err)
		return
	}
	name := "replay " + j.ID
	var src pipeline.Source
	// The relay's own checkpoint writes (a MySQL store on the source) are
	// handed on, empty, unlike a live stream's: the window ends at the
	// transaction that reaches Until, which may be one of them. The
	// window is finite, so the job's own saves cannot feed it for ever.
	binlog := func() (pipeline.Source, error) { return a.guardedReader(a.readerConfig(name, slot, nil)) }
	switch j.Source {
	case replay.SourceBinlog:
		src, err = binlog()
	default:
		open, ok := ReplaySources[j.Source]
		if !ok {
			err = fmt.Errorf("replay source %q is not supported by this build", j.Source)
			break
		}
		src, err = open(ctx, ReplaySourceParams{Job: j, DB: a.src.db, ReplicaID: slot, Binlog: binlog, Logger: rr.log.With(slog.String("job", j.ID)),
			Flavor: a.src.info.Flavor, Tables: a.src.tables, Config: a.cfg})
	}
	if err != nil {
		fail(err)
		return
	}
	wjob := j // the window's own copy: run.job changes as the job runs
	run.window = &replay.Window{Source: src, Job: &wjob, Flavor: a.src.info.Flavor, Select: match,
		Skipped: func() { run.skipped.Add(1); rr.obs.Skipped(run.target, j.ID) },
		Read:    func(commit time.Time) { rr.obs.Progress(run.target, j.ID, commit) }}
	obs := &replayObserver{run: run, obs: rr.obs}
	p, err := a.newPipeline(replay.ProgressKey(j.ID), replay.Marked(s, j.ID), a.saver, j.From,
		a.cfg.Replay.MaxInFlight, a.cfg.Delivery.MaxInFlightBytes, obs)
	if err != nil {
		fail(err)
		return
	}
	run.job.State, run.job.Error = replay.Running, ""
	if err := rr.jobs.Put(ctx, run.counts()); err != nil {
		rr.log.Warn("save a replay job's state (it starts all the same)", slog.String("job", j.ID), slog.Any("err", err))
	}
	rr.free = rr.free[1:]
	rr.runs[j.ID] = run
	var runCtx context.Context
	runCtx, run.cancel = context.WithCancelCause(ctx)
	run.ctx = runCtx
	rr.obs.Started(run.target, j.ID, j.UntilTime)
	rr.log.Info("replay started", slog.String("job", j.ID), slog.String("target", run.target), slog.String("source", j.Source),
		slog.String("from", j.From.String()), slog.String("until", j.Until.String()), slog.Uint64("replica_id", uint64(slot)))
	go func() {
		run.err = p.Run(runCtx, run.window)
		rr.ended <- run
	}()
}

// finish records how run ended and frees its slot.
func (rr *replays) finish(ctx context.Context, run *replayRun) {
	delete(rr.runs, run.job.ID)
	rr.free = append(rr.free, run.slot)
	slices.Sort(rr.free)
	rr.obs.Ended(run.target, run.job.ID)
	j := run.counts()
	final := true
	switch cause := context.Cause(run.ctx); {
	case errors.Is(cause, errReplayCancelled):
		j.State = replay.Cancelled
		rr.log.Info("replay cancelled", slog.String("job", j.ID), slog.Int64("sent", j.Sent))
	case run.err == nil && run.window.Reached():
		j.State = replay.Done
		rr.log.Info("replay done", slog.String("job", j.ID), slog.String("target", run.target), slog.Int64("sent", j.Sent), slog.Int64("skipped", j.Skipped))
	case ctx.Err() != nil:
		final = false // the relay stops: the job resumes at its next start
	case run.err != nil && errors.Is(run.err, checkpoint.ErrFenced):
		final = false // another relay took over, and runs it on
	case run.err != nil:
		j.State, j.Error = replay.Failed, run.err.Error()
		rr.log.Error("replay failed", slog.String("job", j.ID), slog.Any("err", run.err))
	default:
		final = false // ended without reaching its end: started again
	}
	rr.save(context.WithoutCancel(ctx), j, final)
}

// save saves j; a final job's progress and cancel request are removed.
func (rr *replays) save(ctx context.Context, j replay.Job, final bool) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := rr.jobs.Put(ctx, j); err != nil {
		rr.log.Warn("save a replay job", slog.String("job", j.ID), slog.String("state", string(j.State)), slog.Any("err", err))
		return
	}
	if final {
		if err := rr.jobs.Forget(ctx, j.ID); err != nil {
			rr.log.Warn("remove a finished replay job's progress", slog.String("job", j.ID), slog.Any("err", err))
		}
	}
}

// replayObserver is a job's pipeline observer: it counts what is
// acknowledged and tells the window what is saved.
type replayObserver struct {
	run *replayRun
	obs *replay.Metrics
}

func (o *replayObserver) Delivered(*event.Event, time.Time) {
	o.run.sent.Add(1)
	o.obs.Delivered(o.run.target, o.run.job.ID)
}
func (o *replayObserver) CheckpointSaved(pos event.Position, _ time.Time) { o.run.window.Saved(pos) }
func (o *replayObserver) Failed(*event.Event, error, bool)                {}
func (o *replayObserver) DeadLettered(*event.Event, string)               {}
func (o *replayObserver) InFlight(int, int, time.Time)                    {}
func (o *replayObserver) SinkUp(bool)                                     {}
func (o *replayObserver) SinkConnected(error)                             {}

// ReplayTarget builds the sink a replay job sends to — a fresh one, from
// the configuration of its target sink, or of its one endpoint of a
// webhook sink (of the configuration, or of the sink's endpoints table,
// read from db) — and the endpoint's filter (nil: every event). An unknown
// sink or endpoint, a webhook sink without an endpoint, or an endpoint of
// another kind of sink, is an error that says what to give.
func (r *Relay) ReplayTarget(ctx context.Context, db *sql.DB, j replay.Job) (sink.Sink, func(*event.Event) bool, error) {
	i := slices.IndexFunc(r.cfg.Sinks, func(s config.Sink) bool { return s.Name == j.Sink })
	if i < 0 {
		var names []string
		for _, s := range r.cfg.Sinks {
			names = append(names, s.Name)
		}
		return nil, nil, fmt.Errorf("sink %q is not in the configuration: use one of %v", j.Sink, names)
	}
	sc := r.cfg.Sinks[i]
	fo, fan := gateway.FanOutFor(sc)
	if !fan {
		if j.Endpoint != "" {
			return nil, nil, fmt.Errorf("sink %q is a %s sink, which has no endpoints: leave out --endpoint", sc.Name, sc.Type)
		}
		ts, err := r.targets(sc)
		if err != nil {
			return nil, nil, err
		}
		return ts[0].Sink, nil, nil
	}
	if j.Endpoint == "" {
		return nil, nil, fmt.Errorf("sink %q is a %s sink: name the endpoint to replay to with --endpoint (or outbox-relay endpoints replay %s/ENDPOINT); one replay sends to one endpoint", sc.Name, sc.Type, sc.Name)
	}
	eps, err := fo.Endpoints(r.fanOutParams(sc, "", nil, nil))
	if err != nil {
		return nil, nil, err
	}
	if t, err := fo.Table(r.fanOutParams(sc, "", nil, nil)); err != nil {
		return nil, nil, err
	} else if t != nil && db != nil {
		more, err := t.Load(ctx, db)
		if err != nil {
			return nil, nil, err
		}
		eps = append(eps, more...)
	}
	for _, e := range eps {
		if e.Key == j.Key() {
			return e.Sink, e.Filter.Match, nil
		}
	}
	return nil, nil, fmt.Errorf("sink %q has no endpoint %q (enabled, in its configuration or endpoints table): outbox-relay status lists them", sc.Name, j.Endpoint)
}
