package replay_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/eventually"
	"github.com/outbox-relay/outbox-relay/metrics"
	"github.com/outbox-relay/outbox-relay/pipeline"
	"github.com/outbox-relay/outbox-relay/replay"
	"github.com/outbox-relay/outbox-relay/sink"
)

// pipeFunc is a job's pipeline that does what its test says.
type pipeFunc func(ctx context.Context, src pipeline.Source) error

func (f pipeFunc) Run(ctx context.Context, src pipeline.Source) error { return f(ctx, src) }

// window is a Kafka window's source: it hands on one transaction of two
// events, at the job's Until, then ends.
type window struct{ until event.Position }

func (w window) Run(ctx context.Context, _ event.Position, handle func(context.Context, *event.Txn) error) error {
	return handle(ctx, &event.Txn{Position: w.until, CommitTime: time.Now(),
		Events: []*event.Event{{ID: "1", Type: "order.paid", AggregateID: "a"}, {ID: "2", Type: "order.paid", AggregateID: "b"}}})
}

// deliver runs the window as a pipeline that acknowledges and saves every
// transaction at once.
func deliver(ctx context.Context, src pipeline.Source, obs pipeline.Observer) error {
	return src.Run(ctx, event.Position{File: "0=0"}, func(_ context.Context, txn *event.Txn) error {
		for _, e := range txn.Events {
			obs.Delivered(e, time.Now())
		}
		obs.CheckpointSaved(txn.Position, time.Now())
		return nil
	})
}

// deliverOneAndWait runs a pipeline that acknowledges one event, then
// sends nothing more until ctx ends.
func deliverOneAndWait(ctx context.Context, obs pipeline.Observer) error {
	obs.Delivered(&event.Event{}, time.Now())
	<-ctx.Done()
	return ctx.Err()
}

// runnerTest is a Runner over a file store, each of its jobs' pipelines
// run by pipe (its n-th run, from 1).
type runnerTest struct {
	jobs   *replay.Store
	st     *checkpoint.File
	runner *replay.Runner
	runs   atomic.Int32
	opened atomic.Int32
	mu     sync.Mutex
	order  []string // the jobs opened, in order
}

func newRunnerTest(t *testing.T, slots int, openErr error, pipe func(n int32, ctx context.Context, src pipeline.Source, obs pipeline.Observer) error) *runnerTest {
	t.Helper()
	st, err := checkpoint.OpenFile(filepath.Join(t.TempDir(), "checkpoint.json"))
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := replay.NewStore(st)
	if err != nil {
		t.Fatal(err)
	}
	m, err := metrics.New(prometheus.NewRegistry(), "test")
	if err != nil {
		t.Fatal(err)
	}
	rt := &runnerTest{jobs: jobs, st: st}
	ids := make([]uint32, slots)
	for i := range ids {
		ids[i] = uint32(100 + i)
	}
	rt.runner = &replay.Runner{Jobs: jobs, Poll: 5 * time.Millisecond, Slots: ids, Registry: m, Logger: slog.New(slog.DiscardHandler),
		Open: func(_ context.Context, j replay.Job, _ uint32) (replay.Launch, error) {
			rt.opened.Add(1)
			rt.mu.Lock()
			rt.order = append(rt.order, j.ID)
			rt.mu.Unlock()
			if openErr != nil {
				return replay.Launch{}, openErr
			}
			return replay.Launch{Target: nopSink{}, Source: window{until: j.Until}}, nil
		},
		NewPipeline: func(_ replay.Job, _ sink.Sink, obs pipeline.Observer) (replay.Pipeline, error) {
			return pipeFunc(func(ctx context.Context, src pipeline.Source) error {
				return pipe(rt.runs.Add(1), ctx, src, obs)
			}), nil
		}}
	return rt
}

// add stores a pending Kafka job made at created, with a saved progress.
func (rt *runnerTest) add(t *testing.T, id string, created time.Time) {
	t.Helper()
	rt.addFor(t, "", id, created)
}

// addFor is add for a job asked by tenant.
func (rt *runnerTest) addFor(t *testing.T, tenant, id string, created time.Time) {
	t.Helper()
	j := replay.Job{ID: id, Tenant: tenant, Sink: "hooks", Endpoint: "billing", Source: replay.SourceKafka,
		From: event.Position{File: "0=0"}, Until: event.Position{File: "0=2"}, State: replay.Pending, CreatedAt: created}
	if err := rt.jobs.Put(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	if err := rt.st.Save(context.Background(), replay.ProgressKey(id), checkpoint.Checkpoint{Flavor: "kafka", Position: j.From}); err != nil {
		t.Fatal(err)
	}
}

// start runs the runner until the test ends or the returned stop is called
// (which waits for Run to return).
func (rt *runnerTest) start(t *testing.T) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { rt.runner.Run(ctx) })
	stop = func() { cancel(); wg.Wait() }
	t.Cleanup(stop)
	return stop
}

func (rt *runnerTest) job(t *testing.T, id string) (replay.Job, bool) {
	t.Helper()
	l, err := rt.jobs.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_, progress := l.Progress[id]
	for _, j := range l.Jobs {
		if j.ID == id {
			return j, progress
		}
	}
	t.Fatalf("job %s is not listed", id)
	return replay.Job{}, false
}

type nopSink struct{}

func (nopSink) Connect(context.Context) error               { return nil }
func (nopSink) Close(context.Context) error                 { return nil }
func (nopSink) Write(context.Context, []*event.Event) error { return nil }

// How a job's run ends decides its state: done, cancelled and failed are
// final (the progress is removed); a run stopped by the runner's ctx, or
// fenced, leaves the job running with its counts and progress, to resume.
func TestRunnerStates(t *testing.T) {
	fenced := fmt.Errorf("save progress: %w", checkpoint.ErrFenced)
	for _, tc := range []struct {
		name string
		// openErr fails the job's Open; cancel asks to cancel it (before
		// it runs if cancelFirst); stop ends the runner once the job has
		// delivered.
		openErr             error
		cancel, cancelFirst bool
		stop                bool
		pipe                func(n int32, ctx context.Context, src pipeline.Source, obs pipeline.Observer) error
		// want is the job's state once the runner is done with it; sent,
		// its count; progress, whether its progress is kept; runs, how
		// many times its pipeline ran.
		want     replay.State
		err      string
		sent     int64
		progress bool
		runs     int32
	}{
		{
			name: "a run that delivers its window and saves its end is done",
			pipe: func(_ int32, ctx context.Context, src pipeline.Source, obs pipeline.Observer) error {
				return deliver(ctx, src, obs)
			},
			want: replay.Done, sent: 2, runs: 1,
		},
		{
			name:   "a running job asked to be cancelled is cancelled, with why",
			cancel: true,
			pipe: func(_ int32, ctx context.Context, _ pipeline.Source, obs pipeline.Observer) error {
				return deliverOneAndWait(ctx, obs)
			},
			want: replay.Cancelled, err: "asked by the test", sent: 1, runs: 1,
		},
		{
			name:   "a pending job asked to be cancelled is cancelled without running",
			cancel: true, cancelFirst: true,
			want: replay.Cancelled, err: "asked by the test", runs: 0,
		},
		{
			name: "a run whose pipeline fails is failed, with its error",
			pipe: func(_ int32, ctx context.Context, _ pipeline.Source, obs pipeline.Observer) error {
				obs.Delivered(&event.Event{}, time.Now())
				return errors.New("endpoint answered 400 for good")
			},
			want: replay.Failed, err: "endpoint answered 400 for good", sent: 1, runs: 1,
		},
		{
			name:    "a job whose run cannot be built is failed, with why",
			openErr: errors.New("sink \"hooks\" has no endpoint \"billing\""),
			want:    replay.Failed, err: "sink \"hooks\" has no endpoint \"billing\"", runs: 0,
		},
		{
			name: "a run that ends with the runner's ctx is left running, its counts saved",
			stop: true,
			pipe: func(_ int32, ctx context.Context, _ pipeline.Source, obs pipeline.Observer) error {
				return deliverOneAndWait(ctx, obs)
			},
			want: replay.Running, sent: 1, progress: true, runs: 1,
		},
		{
			name: "a fenced run is left running, its counts saved, and runs again",
			pipe: func(n int32, ctx context.Context, _ pipeline.Source, obs pipeline.Observer) error {
				if n == 1 {
					obs.Delivered(&event.Event{}, time.Now())
					return fenced
				}
				<-ctx.Done() // the second run: the job resumed
				return ctx.Err()
			},
			want: replay.Running, sent: 1, progress: true, runs: 2,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := newRunnerTest(t, 1, tc.openErr, tc.pipe)
			rt.add(t, "job-1", time.Now())
			if tc.cancelFirst {
				if err := rt.jobs.RequestCancel(context.Background(), "job-1", "asked by the test"); err != nil {
					t.Fatal(err)
				}
			}
			stop := rt.start(t)
			if tc.cancel && !tc.cancelFirst {
				eventually.Within(t, time.Minute, "the job to run", func() bool { return rt.runs.Load() == 1 })
				if err := rt.jobs.RequestCancel(context.Background(), "job-1", "asked by the test"); err != nil {
					t.Fatal(err)
				}
			}
			switch {
			case tc.stop:
				eventually.Within(t, time.Minute, "the job to run", func() bool { return rt.runs.Load() == 1 })
				stop()
			case tc.want.Final():
				eventually.Within(t, time.Minute, "the job to end "+string(tc.want), func() bool {
					j, _ := rt.job(t, "job-1")
					return j.State.Final()
				})
				stop()
			default:
				eventually.Within(t, time.Minute, fmt.Sprintf("run %d of the job (or its end)", tc.runs), func() bool {
					j, _ := rt.job(t, "job-1")
					return rt.runs.Load() == tc.runs || j.State.Final()
				})
				stop()
			}
			j, progress := rt.job(t, "job-1")
			if j.State != tc.want || j.Error != tc.err || j.Sent != tc.sent || progress != tc.progress || rt.runs.Load() != tc.runs {
				t.Errorf("job %s (error %q), sent %d, progress kept %v, runs %d; want %s (error %q), sent %d, progress kept %v, runs %d",
					j.State, j.Error, j.Sent, progress, rt.runs.Load(), tc.want, tc.err, tc.sent, tc.progress, tc.runs)
			}
		})
	}
}

// Jobs beyond the runner's slots wait, pending, and start oldest first as
// slots free.
func TestRunnerSlots(t *testing.T) {
	release := make(chan struct{})
	rt := newRunnerTest(t, 1, nil, func(n int32, ctx context.Context, src pipeline.Source, obs pipeline.Observer) error {
		if n == 1 {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return deliver(ctx, src, obs)
	})
	now := time.Now()
	rt.add(t, "job-b", now)
	rt.add(t, "job-a", now.Add(-time.Minute)) // older: starts first
	rt.start(t)
	eventually.Within(t, time.Minute, "the first job to run", func() bool { return rt.runs.Load() == 1 })
	a, _ := rt.job(t, "job-a")
	b, _ := rt.job(t, "job-b")
	if a.State != replay.Running || b.State != replay.Pending || rt.opened.Load() != 1 {
		t.Fatalf("with one slot: job-a %s, job-b %s, %d opened; want job-a running, job-b pending, 1 opened", a.State, b.State, rt.opened.Load())
	}
	close(release)
	eventually.Within(t, time.Minute, "both jobs done", func() bool {
		a, _ := rt.job(t, "job-a")
		b, _ := rt.job(t, "job-b")
		return a.State == replay.Done && b.State == replay.Done
	})
}

// Jobs start in turn across tenants, not first in first out: a tenant that
// queued four jobs first does not hold back another's one, made later.
func TestRunnerStartsJobsInTurnAcrossTenants(t *testing.T) {
	rt := newRunnerTest(t, 1, nil, func(_ int32, ctx context.Context, src pipeline.Source, obs pipeline.Observer) error {
		return deliver(ctx, src, obs)
	})
	now := time.Now().Add(-time.Hour)
	for i := range 4 {
		rt.addFor(t, "acme", fmt.Sprintf("acme-%d", i+1), now.Add(time.Duration(i)*time.Minute))
	}
	rt.addFor(t, "globex", "globex-1", now.Add(10*time.Minute))
	rt.add(t, "operator-1", now.Add(11*time.Minute))
	rt.start(t)
	eventually.Within(t, time.Minute, "every job done", func() bool {
		l, err := rt.jobs.List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range l.Jobs {
			if j.State != replay.Done {
				return false
			}
		}
		return true
	})
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if want := []string{"acme-1", "globex-1", "operator-1", "acme-2", "acme-3", "acme-4"}; !slices.Equal(rt.order, want) {
		t.Fatalf("jobs started %v, want %v", rt.order, want)
	}
}

// A tenant's jobs pending or running are capped: one more is refused with
// an error naming the cap, until one ends; an operator's job is not capped.
func TestPutCappedRefusesATenantsJobBeyondTheCap(t *testing.T) {
	rt := newRunnerTest(t, 1, nil, nil)
	ctx := context.Background()
	job := func(tenant, id string) replay.Job {
		return replay.Job{ID: id, Tenant: tenant, Sink: "hooks", Endpoint: "billing", Source: replay.SourceKafka, State: replay.Pending, CreatedAt: time.Now()}
	}
	for i := range 2 {
		if err := rt.jobs.PutCapped(ctx, job("acme", fmt.Sprintf("acme-%d", i)), 2); err != nil {
			t.Fatal(err)
		}
	}
	err := rt.jobs.PutCapped(ctx, job("acme", "acme-2"), 2)
	var full *replay.QueueFullError
	if !errors.As(err, &full) || full.Cap != 2 || full.Tenant != "acme" || !strings.Contains(err.Error(), "replay.max_jobs_per_tenant (2)") {
		t.Fatalf("third job of acme: %v, want a QueueFullError naming the cap 2", err)
	}
	if err := rt.jobs.PutCapped(ctx, job("globex", "globex-0"), 2); err != nil {
		t.Fatalf("another tenant's job: %v", err)
	}
	for i := range 3 {
		if err := rt.jobs.PutCapped(ctx, job("", fmt.Sprintf("op-%d", i)), 2); err != nil {
			t.Fatalf("an operator's job: %v", err)
		}
	}
	if err := rt.jobs.Cancel(ctx, "acme-0", "test"); err != nil {
		t.Fatal(err)
	}
	if err := rt.jobs.PutCapped(ctx, job("acme", "acme-2"), 2); err != nil {
		t.Fatalf("once one of acme's jobs ended: %v", err)
	}
}

// A running job follows its target: when the target changes (an
// endpoint's URL or secret), its run is stopped and opened again with the
// target as it is now; when the target is gone (the endpoint disabled or
// deleted), the job is stopped, recorded as such with why, and sends
// nothing more.
func TestRunnerFollowsItsTarget(t *testing.T) {
	var mu sync.Mutex
	version, gone := "url-1 secret-1", error(nil)
	var opened []string // the version each run was opened with
	rt := newRunnerTest(t, 1, nil, func(_ int32, ctx context.Context, _ pipeline.Source, obs pipeline.Observer) error {
		return deliverOneAndWait(ctx, obs)
	})
	open := rt.runner.Open
	rt.runner.Open = func(ctx context.Context, j replay.Job, slot uint32) (replay.Launch, error) {
		mu.Lock()
		opened = append(opened, version)
		mu.Unlock()
		return open(ctx, j, slot)
	}
	rt.runner.Current = func(context.Context, replay.Job) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		return version, gone
	}
	rt.add(t, "job-1", time.Now())
	rt.start(t)
	eventually.Within(t, time.Minute, "the job to run", func() bool { return rt.runs.Load() == 1 })
	mu.Lock()
	version = "url-2 secret-1" // the endpoint's row was updated
	mu.Unlock()
	eventually.Within(t, time.Minute, "the job to run again", func() bool { return rt.runs.Load() == 2 })
	mu.Lock()
	if !slices.Equal(opened, []string{"url-1 secret-1", "url-2 secret-1"}) {
		t.Fatalf("runs opened with targets %v, want the first, then the changed one", opened)
	}
	gone = fmt.Errorf("%w: endpoint hooks/billing is disabled", replay.ErrTargetGone)
	mu.Unlock()
	eventually.Within(t, time.Minute, "the job to end and its progress to be removed", func() bool {
		j, progress := rt.job(t, "job-1")
		return j.State.Final() && !progress
	})
	j, progress := rt.job(t, "job-1")
	if j.State != replay.Stopped || !strings.Contains(j.Error, "endpoint hooks/billing is disabled") || progress || rt.runs.Load() != 2 {
		t.Fatalf("job %s (error %q), progress kept %v, runs %d; want stopped naming why, its progress removed, 2 runs", j.State, j.Error, progress, rt.runs.Load())
	}
}
