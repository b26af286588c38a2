package replay

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/metrics"
	"github.com/outbox-relay/outbox-relay/pipeline"
	"github.com/outbox-relay/outbox-relay/sink"
)

// Runner runs the jobs of a Store: every Poll it lists them, starts the
// pending or running ones it does not run yet while one of its Slots is
// free, stops those asked to be cancelled, and saves the running ones'
// counts. Jobs left running by an earlier run start first (oldest first);
// then pending jobs start in turn across tenants (Job.Tenant, the
// operators' being one more): the tenant with the fewest jobs running, of
// those the one whose job started longest ago, and its oldest job. So a
// tenant that queued many jobs does not hold the others behind them.
//
// A job ends done (its window delivered and saved), cancelled, failed or
// stopped (its target gone: Current), each final: its record is saved with
// its counts and its progress and cancel request are removed
// (Store.Forget). A job whose target changed (Current) is started again at
// once with the target as it is now. A job whose
// run ends with Run's ctx, or because its pipeline's saves were fenced
// (checkpoint.ErrFenced: another process holds the store), is left
// running, with its counts saved: it resumes from its saved progress where
// the store's jobs are run next.
//
// What differs between the relay (binlog and table windows, a replica id
// a run) and the scaled-out gateway (Kafka windows) is Open and
// NewPipeline; the relay's spool directory is Adopt.
type Runner struct {
	Jobs *Store
	// Poll is how often the jobs are listed (replay.poll).
	Poll time.Duration
	// Slots bound the jobs run at once: a run holds one (the relay's are
	// the replica ids its readers register with, config.ReplayReplicaIDs)
	// and a job waits, pending, for one to be free.
	Slots []uint32
	// Open builds what job j's run on slot reads and sends to. Its error
	// fails the job, with the error as why.
	Open func(ctx context.Context, j Job, slot uint32) (Launch, error)
	// NewPipeline builds job j's pipeline: named ProgressKey(j.ID),
	// sending to s (the target, Marked), starting at j.From, with obs as its
	// observer (it counts what is acknowledged and ends the window once
	// its end is saved). Its error fails the job.
	NewPipeline func(j Job, s sink.Sink, obs pipeline.Observer) (Pipeline, error)
	// Adopt, if set, is called before each listing: the relay moves its
	// spool's requests into Jobs.
	Adopt func(ctx context.Context)
	// Current, if set, reads job j's target as it is now (an endpoint's
	// row of its endpoints table): it returns a version that changes
	// whenever what the target sends with changes (its URL, its secrets),
	// or an error wrapping ErrTargetGone when the target is gone (the
	// endpoint disabled or deleted). It is read before a run is opened,
	// and every Poll while it runs: a run whose target changed is stopped
	// and started again at once, from its saved progress, with the target
	// as it is now; one whose target is gone is stopped, Stopped with why.
	// Another error is logged, and the run goes on.
	Current func(ctx context.Context, j Job) (string, error)
	// Registry is where the jobs' metrics (NewMetrics) are registered,
	// when the first job starts.
	Registry *metrics.Metrics
	Logger   *slog.Logger

	// What one Run keeps (Run is called by one goroutine at a time).
	obs        *Metrics
	free       []uint32
	runs       map[string]*run
	ended      chan *run
	served     map[string]uint64 // by tenant: the sequence number of its last start
	starts     uint64
	listFailed bool // the last listing failed (logged once until one succeeds)
}

// Launch is what a job's run is built of (Runner.Open).
type Launch struct {
	// Target is the sink the job sends to (a fresh one); Select its
	// filter (a webhook endpoint's; nil: every event).
	Target sink.Sink
	Select func(*event.Event) bool
	// Source is what the job's Window reads; Flavor its positions'
	// (Window.Flavor).
	Source pipeline.Source
	Flavor string
	// Attrs are logged with "replay started" (the relay's replica id).
	Attrs []slog.Attr
}

// Pipeline runs a job's pipeline over its Window until the window is
// reached or ctx ends: *pipeline.Pipeline.
type Pipeline interface {
	Run(ctx context.Context, src pipeline.Source) error
}

// errCancelled is the cause a job's context is cancelled with when the
// job is cancelled (outbox-relay replay cancel); errRetarget when its
// target changed (it starts again with the new one); a cause wrapping
// ErrTargetGone when its target is gone.
var (
	errCancelled = errors.New("replay cancelled")
	errRetarget  = errors.New("replay target changed")
)

// run is one job a Runner runs.
type run struct {
	job    Job
	target string
	slot   uint32
	ctx    context.Context
	cancel context.CancelCauseFunc
	window *Window
	// version is Runner.Current's version of the target the run was
	// opened with.
	version string
	// sent and skipped are this run's, added to the job's saved counts.
	sent, skipped atomic.Int64
	base          [2]int64
	err           error
}

// counts returns the job with this run's counts.
func (rn *run) counts() Job {
	j := rn.job
	j.Sent, j.Skipped = rn.base[0]+rn.sent.Load(), rn.base[1]+rn.skipped.Load()
	return j
}

// Run runs the jobs until ctx ends, then waits for the running ones to
// stop (each left running, to resume) and returns. It may be called again
// once it has returned (the gateway runs the jobs while it holds a lock).
func (r *Runner) Run(ctx context.Context) {
	r.free, r.runs, r.ended = slices.Clone(r.Slots), map[string]*run{}, make(chan *run)
	r.served = map[string]uint64{}
	tick := time.NewTicker(r.Poll)
	defer tick.Stop()
	for {
		r.poll(ctx)
		select {
		case <-ctx.Done():
			for len(r.runs) > 0 {
				r.finish(ctx, <-r.ended)
			}
			return
		case rn := <-r.ended:
			r.finish(ctx, rn)
		case <-tick.C:
		}
	}
}

// poll adopts requests, then starts, cancels and saves jobs.
func (r *Runner) poll(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	if r.Adopt != nil {
		r.Adopt(ctx)
	}
	l, err := r.Jobs.List(ctx)
	if err != nil {
		if !r.listFailed && ctx.Err() == nil {
			r.Logger.Warn("list replay jobs (retried every replay.poll)", slog.Any("err", err))
		}
		r.listFailed = true
	} else {
		r.listFailed = false
	}
	var waiting []Job          // to start, oldest first
	for _, j := range l.Jobs { // what decoded, should some record not
		if j.State.Final() {
			continue
		}
		why, cancelAsked := l.Cancel[j.ID]
		if rn, ok := r.runs[j.ID]; ok {
			if cancelAsked {
				rn.job.Error = why
				rn.cancel(errCancelled)
				continue
			}
			if err := r.Jobs.Put(ctx, rn.counts()); err != nil && ctx.Err() == nil {
				r.Logger.Warn("save a replay job's counts (retried)", slog.String("job", j.ID), slog.Any("err", err))
			}
			r.recheck(ctx, rn)
			continue
		}
		if cancelAsked {
			j.State, j.Error = Cancelled, why
			r.save(ctx, j, true)
			r.Logger.Info("replay cancelled before it ran", slog.String("job", j.ID))
			continue
		}
		waiting = append(waiting, j)
	}
	for len(r.free) > 0 && len(waiting) > 0 {
		i := r.next(waiting)
		r.start(ctx, waiting[i])
		waiting = slices.Delete(waiting, i, i+1)
	}
	// Forget the tenants with no job left: a tenant that comes back is
	// served first, as one never served.
	for t := range r.served {
		if err == nil && !slices.ContainsFunc(l.Jobs, func(j Job) bool { return j.Tenant == t && !j.State.Final() }) {
			delete(r.served, t)
		}
	}
}

// next returns the index in waiting (oldest first) of the job to start:
// the oldest one left running by an earlier run; else the oldest pending
// one of the tenant with the fewest jobs running, of those the one served
// longest ago.
func (r *Runner) next(waiting []Job) int {
	if i := slices.IndexFunc(waiting, func(j Job) bool { return j.State == Running }); i >= 0 {
		return i
	}
	running := map[string]int{}
	for _, rn := range r.runs {
		running[rn.job.Tenant]++
	}
	best := 0
	for i, j := range waiting[1:] {
		b := waiting[best]
		if n, m := running[j.Tenant], running[b.Tenant]; n < m || n == m && r.served[j.Tenant] < r.served[b.Tenant] {
			best = i + 1
		}
	}
	return best
}

// start runs job j on a free slot; a job that cannot start is failed, with
// why.
func (r *Runner) start(ctx context.Context, j Job) {
	if r.obs == nil {
		var err error
		if r.obs, err = NewMetrics(r.Registry); err != nil {
			r.Logger.Warn("replay metrics not exposed", slog.Any("err", err))
		}
	}
	fail := func(err error) {
		j.State, j.Error = Failed, err.Error()
		r.save(ctx, j, true)
		r.Logger.Error("replay job failed to start", slog.String("job", j.ID), slog.Any("err", err))
	}
	var version string
	if r.Current != nil {
		// Read before Open: a change between the two restarts the run
		// once more, never leaves it on the old target.
		var err error
		if version, err = r.Current(ctx, j); errors.Is(err, ErrTargetGone) {
			j.State, j.Error = Stopped, err.Error()
			r.save(ctx, j, true)
			r.Logger.Warn("replay stopped: its target is gone", slog.String("job", j.ID), slog.Any("why", err))
			return
		} else if err != nil {
			r.Logger.Warn("read a replay's target (it starts all the same; read again every replay.poll)", slog.String("job", j.ID), slog.Any("err", err))
		}
	}
	slot := r.free[0]
	l, err := r.Open(ctx, j, slot)
	if err != nil {
		fail(err)
		return
	}
	rn := &run{job: j, target: j.Key(), slot: slot, base: [2]int64{j.Sent, j.Skipped}, version: version}
	wjob := j // the window's own copy: rn.job changes as the job runs
	rn.window = &Window{Source: l.Source, Job: &wjob, Flavor: l.Flavor, Select: l.Select,
		Skipped: func() { rn.skipped.Add(1); r.obs.Skipped(rn.target, j.ID) },
		Read:    func(commit time.Time) { r.obs.Progress(rn.target, j.ID, commit) }}
	p, err := r.NewPipeline(j, Marked(l.Target, j.ID), &observer{run: rn, obs: r.obs})
	if err != nil {
		fail(err)
		return
	}
	rn.job.State, rn.job.Error = Running, ""
	if err := r.Jobs.Put(ctx, rn.counts()); err != nil {
		r.Logger.Warn("save a replay job's state (it starts all the same)", slog.String("job", j.ID), slog.Any("err", err))
	}
	r.free = r.free[1:]
	r.runs[j.ID] = rn
	r.starts++
	r.served[j.Tenant] = r.starts
	rn.ctx, rn.cancel = context.WithCancelCause(ctx)
	r.obs.Started(rn.target, j.ID, j.UntilTime)
	attrs := append([]slog.Attr{slog.String("job", j.ID), slog.String("target", rn.target), slog.String("source", j.Source),
		slog.String("from", j.From.String()), slog.String("until", j.Until.String())}, l.Attrs...)
	r.Logger.LogAttrs(ctx, slog.LevelInfo, "replay started", attrs...)
	go func() {
		rn.err = p.Run(rn.ctx, rn.window)
		r.ended <- rn
	}()
}

// recheck stops rn when its target is gone (Stopped, with why), or
// changed since its run was opened (it starts again at the next poll,
// first of the waiting jobs, with the target as it is now).
func (r *Runner) recheck(ctx context.Context, rn *run) {
	if r.Current == nil || rn.ctx.Err() != nil {
		return
	}
	v, err := r.Current(ctx, rn.job)
	switch {
	case errors.Is(err, ErrTargetGone):
		rn.job.Error = err.Error()
		rn.cancel(err)
	case err != nil:
		if ctx.Err() == nil {
			r.Logger.Warn("read a running replay's target (read again every replay.poll)", slog.String("job", rn.job.ID), slog.Any("err", err))
		}
	case v != rn.version:
		rn.cancel(errRetarget)
	}
}

// finish records how rn ended and frees its slot.
func (r *Runner) finish(ctx context.Context, rn *run) {
	delete(r.runs, rn.job.ID)
	r.free = append(r.free, rn.slot)
	slices.Sort(r.free)
	r.obs.Ended(rn.target, rn.job.ID)
	j := rn.counts()
	final := true
	switch cause := context.Cause(rn.ctx); {
	case errors.Is(cause, errCancelled):
		j.State = Cancelled
		r.Logger.Info("replay cancelled", slog.String("job", j.ID), slog.Int64("sent", j.Sent))
	case rn.err == nil && rn.window.Reached():
		j.State = Done
		r.Logger.Info("replay done", slog.String("job", j.ID), slog.String("target", rn.target), slog.Int64("sent", j.Sent), slog.Int64("skipped", j.Skipped))
	case errors.Is(cause, ErrTargetGone):
		j.State = Stopped
		r.Logger.Warn("replay stopped: its target is gone", slog.String("job", j.ID), slog.Int64("sent", j.Sent), slog.Any("why", cause))
	case errors.Is(cause, errRetarget):
		final = false // started again, first, with the target as it is now
		r.Logger.Info("replay target changed: the replay starts again from its saved progress with the target as it is now", slog.String("job", j.ID))
	case ctx.Err() != nil, errors.Is(rn.err, checkpoint.ErrFenced):
		final = false // stopping, or another process took the store: the job resumes where the jobs run next
	case rn.err != nil:
		j.State, j.Error = Failed, rn.err.Error()
		r.Logger.Error("replay failed", slog.String("job", j.ID), slog.Any("err", rn.err))
	default:
		final = false // ended without reaching its end: started again
	}
	r.save(context.WithoutCancel(ctx), j, final)
}

// save saves j; a final job's progress and cancel request are removed.
func (r *Runner) save(ctx context.Context, j Job, final bool) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := r.Jobs.Put(ctx, j); err != nil {
		r.Logger.Warn("save a replay job", slog.String("job", j.ID), slog.String("state", string(j.State)), slog.Any("err", err))
		return
	}
	if final {
		if err := r.Jobs.Forget(ctx, j.ID); err != nil {
			r.Logger.Warn("remove a finished replay job's progress", slog.String("job", j.ID), slog.Any("err", err))
		}
	}
}

// observer is a job's pipeline observer: it counts what is acknowledged
// and tells the window what is saved.
type observer struct {
	run *run
	obs *Metrics
}

func (o *observer) Delivered(*event.Event, time.Time) {
	o.run.sent.Add(1)
	o.obs.Delivered(o.run.target, o.run.job.ID)
}
func (o *observer) CheckpointSaved(pos event.Position, _ time.Time) { o.run.window.Saved(pos) }
func (o *observer) Failed(*event.Event, error, bool)                {}
func (o *observer) DeadLettered(*event.Event, string)               {}
func (o *observer) InFlight(int, int, time.Time)                    {}
func (o *observer) SinkUp(bool)                                     {}
func (o *observer) SinkConnected(error)                             {}
