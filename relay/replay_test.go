package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/eventually"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/replay"
	"github.com/outbox-relay/outbox-relay/source"
)

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
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- relay.New(cfg, relay.Options{Stdout: out, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}).Run(ctx)
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
