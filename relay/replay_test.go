package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/eventually"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/receiver"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/replay"
	"github.com/outbox-relay/outbox-relay/source"
)

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// replayJob returns a pending binlog job of sink over the window (from, until].
func replayJob(sink string, from, until event.Position) replay.Job {
	now := time.Now().UTC()
	return replay.Job{ID: replay.NewID(now), Sink: sink, Source: replay.SourceBinlog, From: from, Until: until, State: replay.Pending, CreatedAt: now}
}

// jobOf reads job id from the checkpoint file at path (as a command would,
// read-only, while the relay holds it).
func jobOf(t testing.TB, path, id string) replay.Job {
	t.Helper()
	st, err := checkpoint.OpenFileReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := replay.NewStore(st)
	if err != nil {
		t.Fatal(err)
	}
	j, err := jobs.Get(context.Background(), id)
	if err != nil {
		return replay.Job{ID: id} // not adopted yet
	}
	return j
}

// A replay of a window during live traffic: while producers go on, every
// event of the window is sent again, once, marked with the job's id, in
// commit order, and nothing outside the window; the live stream delivers
// every event of before, during and after the replay exactly once,
// unmarked. The job ends done, with its count.
func TestReplayWindowDuringLiveTraffic(t *testing.T) {
	dbname, _ := newOutbox(t)
	db := srv.DB(t, dbname)
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %s.outbox}]
checkpoint: {path: %s, interval: 200ms, start: current}
delivery: {batch_size: 20}
replay: {poll: 200ms}
sinks: [{name: out, type: stdout}]
`, srv.Port, testserver.ServerID(), dbname, filepath.Join(t.TempDir(), "cp.json"))))
	if err != nil {
		t.Fatal(err)
	}
	out := &lines{}
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- relay.New(cfg, relay.Options{Stdout: out, Registerer: reg, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}).Run(ctx)
	}()
	waitForCheckpoint(t, cfg.Checkpoint.Path)
	info, err := source.ReadInfo(ctx, db)
	if err != nil {
		t.Fatal(err)
	}

	before := &outboxtest.Workload{Prefix: "before-"}
	outboxtest.Produce(ctx, t, db, before, 2, 20, []int{1, 3, 2}, 10)
	from, err := source.CurrentPosition(ctx, db, info)
	if err != nil {
		t.Fatal(err)
	}
	window := &outboxtest.Workload{Prefix: "window-"}
	outboxtest.Produce(ctx, t, db, window, 3, 60, []int{1, 5, 2, 4}, 10)
	until, err := source.CurrentPosition(ctx, db, info)
	if err != nil {
		t.Fatal(err)
	}

	// The job is handed over as the command does with a relay running on
	// a file store: through the spool. Producers go on meanwhile.
	job := replayJob("out", from, until)
	if err := replay.SpoolFor(cfg.Checkpoint.Path).Put(replay.Request{Job: &job}); err != nil {
		t.Fatal(err)
	}
	after := &outboxtest.Workload{Prefix: "after-"}
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		outboxtest.Produce(ctx, t, db, after, 2, 60, []int{2, 1, 3}, 10)
	}()
	eventually.Within(t, 90*time.Second, "the replay job to be done", func() bool { return jobOf(t, cfg.Checkpoint.Path, job.ID).State == replay.Done },
		func() { t.Logf("job: %+v", jobOf(t, cfg.Checkpoint.Path, job.ID)) })
	<-produced
	total := before.Events() + window.Events() + after.Events()
	live := func() (live, replayed []outboxtest.Delivered) {
		for _, e := range out.events(t) {
			d := outboxtest.Delivered{ID: e.ID, AggregateID: e.AggregateID, GTID: e.GTID}
			if id, ok := e.Headers[event.HeaderReplay]; ok {
				if id != job.ID {
					t.Fatalf("event %s replayed with marker %q, want the job's id %s", e.ID, id, job.ID)
				}
				replayed = append(replayed, d)
			} else {
				live = append(live, d)
			}
		}
		return live, replayed
	}
	eventually.Within(t, 60*time.Second, "the live stream to deliver every event", func() bool { l, _ := live(); return len(l) >= total })
	// The metrics count the job's events, and no job runs any more.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sentMetric, running float64 = -1, -1
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "outbox_relay_replay_events_total":
				if labels(m)["job"] == job.ID && labels(m)["sink"] == "out" {
					sentMetric = m.GetCounter().GetValue()
				}
			case "outbox_relay_replays_running":
				running = m.GetGauge().GetValue()
			}
		}
	}
	if sentMetric != float64(window.Events()) || running != 0 {
		t.Errorf("metrics: replay_events_total{sink=out,job=%s} = %v, replays_running = %v; want %d and 0", job.ID, sentMetric, running, window.Events())
	}
	cancel()
	if err := <-done; err != nil && err != context.Canceled {
		t.Fatalf("relay: %v", err)
	}

	liveGot, replayed := live()
	all := &outboxtest.Workload{Txns: append(append(before.Committed(), window.Committed()...), after.Committed()...)}
	rep := outboxtest.Check(t, all, liveGot, true)
	t.Logf("live: %d delivered of %d committed, %d duplicates", rep.Delivered, rep.Committed, rep.Duplicates)
	rep = outboxtest.Check(t, window, replayed, true)
	t.Logf("replayed: %d delivered of the window's %d", rep.Delivered, rep.Committed)

	j := jobOf(t, cfg.Checkpoint.Path, job.ID)
	if j.Sent != int64(window.Events()) || j.State != replay.Done {
		t.Errorf("job ended %s with %d sent, want done with %d", j.State, j.Sent, window.Events())
	}
	st, err := checkpoint.OpenFileReadOnly(cfg.Checkpoint.Path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Load(ctx, replay.ProgressKey(job.ID)); err != checkpoint.ErrNotFound {
		t.Errorf("a done job's progress is still stored (%v): it is removed with the job's end", err)
	}
	if entries, _ := os.ReadDir(replay.SpoolFor(cfg.Checkpoint.Path).Dir()); len(entries) != 0 {
		t.Errorf("the spool still holds %d requests after the relay adopted them", len(entries))
	}
}

// A replay that cannot finish (its endpoint refuses every replayed event)
// is cancelled through the spool, as `outbox-relay replay cancel` does with
// a relay running on a file store: the relay stops its pipeline and marks
// it cancelled, removes its progress, and the live stream goes on.
func TestReplayCancelStopsIt(t *testing.T) {
	dbname, _ := newOutbox(t)
	db := srv.DB(t, dbname)
	rc := receiver.Start(t, func(r *http.Request, _ []byte, _ time.Duration) receiver.Reply {
		if r.Header.Get("webhook-replay") != "" {
			return receiver.Reply{Status: 503}
		}
		return receiver.Reply{Status: 200}
	})
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %s.outbox}]
checkpoint: {path: %s, interval: 200ms, start: current}
replay: {poll: 200ms}
sinks:
  - name: hooks
    type: webhook
    webhook: {endpoints: [{name: a, url: "%s/a", body: envelope, retry: {initial_backoff: 50ms, max_backoff: 200ms, max_attempts: 100000}}]}
`, srv.Port, testserver.ServerID(), dbname, filepath.Join(t.TempDir(), "cp.json"), rc.URL)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- relay.New(cfg, relay.Options{Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}).Run(ctx)
	}()
	waitForCheckpoint(t, cfg.Checkpoint.Path)
	info, err := source.ReadInfo(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	from, err := source.CurrentPosition(ctx, db, info)
	if err != nil {
		t.Fatal(err)
	}
	w := &outboxtest.Workload{}
	outboxtest.Produce(ctx, t, db, w, 1, 10, []int{2}, 3)
	until, err := source.CurrentPosition(ctx, db, info)
	if err != nil {
		t.Fatal(err)
	}
	job := replayJob("hooks", from, until)
	job.Endpoint = "a"
	spool := replay.SpoolFor(cfg.Checkpoint.Path)
	if err := spool.Put(replay.Request{Job: &job}); err != nil {
		t.Fatal(err)
	}
	eventually.Within(t, 60*time.Second, "the replay to be refused by the endpoint", func() bool {
		for _, r := range rc.Requests() {
			if r.Replay == job.ID && r.Status == 503 {
				return jobOf(t, cfg.Checkpoint.Path, job.ID).State == replay.Running
			}
		}
		return false
	})
	if err := spool.Put(replay.Request{Cancel: job.ID, Why: "test"}); err != nil {
		t.Fatal(err)
	}
	// The job's record is saved cancelled first, then its progress and
	// cancel request are removed: two writes.
	eventually.Within(t, 60*time.Second, "the replay to be cancelled, its progress and cancel request removed", func() bool {
		if jobOf(t, cfg.Checkpoint.Path, job.ID).State != replay.Cancelled {
			return false
		}
		st, err := checkpoint.OpenFileReadOnly(cfg.Checkpoint.Path)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{replay.ProgressKey(job.ID), replay.CancelKey(job.ID)} {
			if _, err := st.Load(ctx, k); err != checkpoint.ErrNotFound {
				return false
			}
		}
		return true
	})
	// The live stream goes on.
	more := &outboxtest.Workload{Prefix: "more-"}
	outboxtest.Produce(ctx, t, db, more, 1, 5, []int{1}, 3)
	eventually.Within(t, 60*time.Second, "the live stream to deliver everything", func() bool {
		return len(liveOf(rc)) >= w.Events()+more.Events()
	})
	cancel()
	if err := <-done; err != nil && err != context.Canceled {
		t.Fatalf("relay: %v", err)
	}
	if j := jobOf(t, cfg.Checkpoint.Path, job.ID); j.Sent != 0 || j.Error != "test" {
		t.Errorf("cancelled job: %d sent, error %q; want 0 sent (every replayed event refused) and the reason given", j.Sent, j.Error)
	}
}

// liveOf are rc's accepted requests without webhook-replay, by event id.
func liveOf(rc *receiver.Receiver) map[string]bool {
	out := map[string]bool{}
	for _, r := range rc.Accepted("") {
		if r.Replay == "" {
			out[r.EventID] = true
		}
	}
	return out
}

// With checkpoint.store: mysql, a job written into the checkpoint table
// (as the command does, the relay running) is listed and run by the relay:
// the window is replayed, marked, and the job ends done in the table.
func TestReplayJobWrittenToTheMySQLStoreIsRun(t *testing.T) {
	dbname, _ := newOutbox(t)
	db := srv.DB(t, dbname)
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %s.outbox}]
checkpoint: {store: mysql, dsn: "root@tcp(127.0.0.1:%d)/%s", table: cp, interval: 200ms, start: current}
delivery: {batch_size: 20}
replay: {poll: 200ms}
sinks: [{name: out, type: stdout}]
`, srv.Port, testserver.ServerID(), dbname, srv.Port, dbname)))
	if err != nil {
		t.Fatal(err)
	}
	out := &lines{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- relay.New(cfg, relay.Options{Stdout: out, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}).Run(ctx)
	}()
	store, closeStore, err := checkpoint.Open(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	eventually.Within(t, 60*time.Second, "the relay's start checkpoint", func() bool { _, err := store.Load(ctx, "out"); return err == nil })
	info, err := source.ReadInfo(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	from, err := source.CurrentPosition(ctx, db, info)
	if err != nil {
		t.Fatal(err)
	}
	window := &outboxtest.Workload{Prefix: "window-"}
	outboxtest.Produce(ctx, t, db, window, 2, 30, []int{1, 3}, 6)
	until, err := source.CurrentPosition(ctx, db, info)
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := replay.NewStore(store)
	if err != nil {
		t.Fatal(err)
	}
	job := replayJob("out", from, until)
	if err := jobs.Put(ctx, job); err != nil {
		t.Fatal(err)
	}
	eventually.Within(t, 90*time.Second, "the job to be done", func() bool {
		j, err := jobs.Get(ctx, job.ID)
		return err == nil && j.State == replay.Done
	})
	cancel()
	if err := <-done; err != nil && err != context.Canceled {
		t.Fatalf("relay: %v", err)
	}
	var replayed []outboxtest.Delivered
	for _, e := range out.events(t) {
		if e.Headers[event.HeaderReplay] == job.ID {
			replayed = append(replayed, outboxtest.Delivered{ID: e.ID, AggregateID: e.AggregateID, GTID: e.GTID})
		}
	}
	rep := outboxtest.Check(t, window, replayed, true)
	t.Logf("replayed %d of the window's %d", rep.Delivered, rep.Committed)
}
