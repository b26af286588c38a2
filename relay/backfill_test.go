package relay_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/eventually"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/relaytest"
	"github.com/outbox-relay/outbox-relay/replay"
)

// A new sink with start.backfill: the rows the table held before the
// relay started, and those committed while it backfills and after, arrive
// once each, every aggregate's in commit order; producers never stop
// while the relay backfills and goes live.
func TestNewSinkBackfillsTheTableThenGoesLive(t *testing.T) {
	backfillsThenGoesLive(t, srv.Port, srv.NewDatabase, srv.DB, "", false)
}

// The same on Dolt, MySQL's flavor: the backfill reads its chunks between
// gtid_executed watermarks, and its binlog reader, served the whole binlog
// whatever GTID set it asks from, passes over the transactions before it.
func TestDoltNewSinkBackfillsTheTableThenGoesLive(t *testing.T) {
	d := testserver.StartDolt(t, testserver.DoltOptions{ServerID: 5})
	// Dolt heartbeats every 30 s whatever is asked.
	backfillsThenGoesLive(t, d.Port, d.NewDatabase, d.DB, ", read_timeout: 45s, max_reconnect_backoff: 500ms", true)
}

// backfillsThenGoesLive runs the backfill test on a server: its port, how
// to make a database and a pool on it, the relay's extra source options,
// and whether it logs a transaction's net change (Dolt).
func backfillsThenGoesLive(t *testing.T, port int, newDatabase func(testing.TB) string, pool func(testing.TB, string) *sql.DB, options string, netChange bool) {
	dbname := newDatabase(t)
	db := pool(t, dbname)
	if _, err := db.Exec(outboxtest.Schema); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	before := &outboxtest.Workload{Prefix: "before-", Retained: true, OwnAggregates: true, NetChange: netChange}
	outboxtest.Produce(ctx, t, db, before, 3, 60, []int{1, 4, 2}, 5)

	stop := make(chan struct{})
	during := &outboxtest.Workload{Prefix: "during-", Until: stop, Retained: true, OwnAggregates: true, NetChange: netChange}
	var produced sync.WaitGroup
	produced.Go(func() { outboxtest.Produce(ctx, t, db, during, 3, 1_000_000, []int{1, 3}, 5) })
	stopped := false
	defer func() {
		if !stopped {
			close(stop)
		}
		produced.Wait()
	}()

	path := filepath.Join(t.TempDir(), "cp.json")
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s%s}
tables: [{name: %s.outbox}]
checkpoint: {path: %s, interval: 200ms, start: current}
sinks: [{name: out, type: stdout, start: {backfill: true, chunk_size: 23}}]
`, port, testserver.ServerID(), options, dbname, path)))
	if err != nil {
		t.Fatal(err)
	}
	out := &lines{}
	rl := startRelay(t, cfg, relay.Options{Stdout: out, Logger: relaytest.Stderr(slog.LevelWarn)})
	eventually.Within(t, 3*time.Minute, "the backfill done", func() bool {
		store, err := checkpoint.OpenFileReadOnly(path)
		if err != nil {
			return false
		}
		cp, err := store.Load(ctx, relay.BackfillKey("out", dbname+".outbox"))
		return err == nil && cp.Position.Table != nil && cp.Position.Table.Done
	})
	n := during.Events()
	eventually.Within(t, 2*time.Minute, "more events committed once live", func() bool { return during.Events() >= n+200 })
	close(stop)
	stopped = true
	produced.Wait()

	all := &outboxtest.Workload{RolledBack: map[string]bool{}}
	for _, w := range []*outboxtest.Workload{before, during} {
		all.Txns = append(all.Txns, w.Committed()...)
		for id := range w.RolledBack {
			all.RolledBack[id] = true
		}
	}
	delivered := func() []outboxtest.Delivered {
		var d []outboxtest.Delivered
		for _, e := range out.events(t) {
			d = append(d, outboxtest.Delivered{ID: e.ID, AggregateID: e.AggregateID, GTID: e.GTID})
		}
		return d
	}
	eventually.Within(t, 3*time.Minute, "every committed event delivered", func() bool {
		seen := map[string]bool{}
		for _, d := range delivered() {
			seen[d.ID] = true
		}
		return len(seen) >= all.Events()
	})
	if err := rl.stop(t); err != nil {
		t.Fatalf("relay: %v", err)
	}
	got := delivered()
	rep := outboxtest.Check(t, all, got, false)
	if rep.Duplicates != 0 {
		t.Errorf("%d events delivered twice", rep.Duplicates)
	}
	backfilled := 0
	for _, d := range got {
		if d.GTID == "" {
			backfilled++
		}
	}
	t.Logf("committed %d (%d before the relay started), delivered %d: %d backfilled, %d live", rep.Committed, before.Events(), rep.Delivered, backfilled, rep.Delivered-backfilled)
	if backfilled < before.Events() {
		t.Errorf("backfilled %d events, fewer than the %d committed before the relay started", backfilled, before.Events())
	}
}

// A replay whose window's start the server has purged falls back to the
// outbox table: the window's rows the table holds are sent again once each,
// marked, every aggregate's in commit order, and none committed after the
// window's end (producers go on meanwhile); the rows prune deleted are
// reported gone, from the window's start to the oldest row kept.
func TestPurgedBinlogReplaysFromTheTable(t *testing.T) {
	own := testserver.Start(t, testserver.Options{})
	dbname := own.NewDatabase(t)
	db := own.DB(t, dbname)
	if _, err := db.Exec(outboxtest.Schema + ";ALTER TABLE outbox ADD COLUMN created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	since := time.Now().Add(-2 * time.Second)
	old := &outboxtest.Workload{Prefix: "old-", Retained: true, OwnAggregates: true}
	outboxtest.Produce(ctx, t, db, old, 3, 30, []int{1, 3, 2}, 4)
	// prune: the oldest rows go.
	var pruned []string
	rows, err := db.Query("SELECT id FROM outbox ORDER BY seq LIMIT 10")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		pruned = append(pruned, id)
	}
	rows.Close()
	if _, err := db.Exec("DELETE FROM outbox ORDER BY seq LIMIT 10"); err != nil {
		t.Fatal(err)
	}
	var file string
	if _, err := db.Exec("FLUSH BINARY LOGS"); err != nil {
		t.Fatal(err)
	}
	r := db.QueryRow("SHOW MASTER STATUS")
	var pos, a, b any
	if err := r.Scan(&file, &pos, &a, &b); err != nil {
		t.Fatal(err)
	}
	// MariaDB keeps a file until its binlog checkpoint is in a later one:
	// purge until the old file is gone.
	eventually.Within(t, time.Minute, "the old binary logs purged", func() bool {
		if _, err := db.Exec("PURGE BINARY LOGS TO '" + file + "'"); err != nil {
			t.Fatal(err)
		}
		var first string
		rows, err := db.Query("SHOW BINARY LOGS")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		cols, _ := rows.Columns()
		vals := make([]any, len(cols))
		vals[0] = &first
		for i := 1; i < len(cols); i++ {
			vals[i] = new(any)
		}
		if rows.Next() {
			if err := rows.Scan(vals...); err != nil {
				t.Fatal(err)
			}
		}
		return first == file
	})

	path := filepath.Join(t.TempDir(), "cp.json")
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %s.outbox}]
checkpoint: {path: %s, interval: 200ms, start: current}
delivery: {batch_size: 20}
replay: {poll: 200ms}
sinks: [{name: out, type: stdout}]
`, own.Port, testserver.ServerID(), dbname, path)))
	if err != nil {
		t.Fatal(err)
	}
	out := &lines{} // batches of 20: each sink's write is whole lines, which two sinks' writes do not interleave
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rl := startRelay(t, cfg, relay.Options{Stdout: out, Logger: log})
	waitForCheckpoint(t, path)

	stop := make(chan struct{})
	live := &outboxtest.Workload{Prefix: "live-", Until: stop, Retained: true, OwnAggregates: true}
	var produced sync.WaitGroup
	produced.Go(func() { outboxtest.Produce(ctx, t, db, live, 2, 1_000_000, []int{1, 2}, 4) })
	stopped := false
	defer func() {
		if !stopped {
			close(stop)
		}
		produced.Wait()
	}()
	eventually.Within(t, time.Minute, "live events before the replay is planned", func() bool { return live.Events() >= 20 })

	// Committed before the plan: before the window's end, which it takes.
	liveAtPlan := map[string]bool{}
	for _, txn := range live.Committed() {
		for _, id := range txn.IDs {
			liveAtPlan[id] = true
		}
	}
	planner, err := relay.NewReplayPlanner(ctx, relay.New(cfg, relay.Options{Logger: log}))
	if err != nil {
		t.Fatal(err)
	}
	defer planner.Close()
	job, err := planner.Plan(ctx, replay.Ask{Sink: "out", Since: since}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if job.Source != replay.SourceTable || len(job.Gone) != 1 || !strings.Contains(job.Gone[0], "no longer holds the rows created from") || !strings.Contains(job.Gone[0], "at most") {
		t.Fatalf("planned %s job from %v, gone %q: want the table, with what is gone", job.Source, job.From, job.Gone)
	}
	t.Logf("gone: %s", job.Gone[0])
	if err := replay.SpoolFor(path).Put(replay.Request{Job: &job}); err != nil {
		t.Fatal(err)
	}
	eventually.Within(t, 2*time.Minute, "the replay job to be done", func() bool { return jobOf(t, path, job.ID).State == replay.Done },
		func() { t.Logf("job: %+v", jobOf(t, path, job.ID)) })
	close(stop)
	stopped = true
	produced.Wait()
	if err := rl.stop(t); err != nil {
		t.Fatalf("relay: %v", err)
	}

	// The window as the table holds it: the old rows but the pruned, and
	// the live rows committed before the job was planned (its end is the
	// position then); the later live rows may or may not be in it, as
	// they committed before or after that position.
	gone := map[string]bool{}
	for _, id := range pruned {
		gone[id] = true
	}
	var replayed []outboxtest.Delivered
	for _, e := range out.events(t) {
		if id, ok := e.Headers[event.HeaderReplay]; ok && id == job.ID {
			replayed = append(replayed, outboxtest.Delivered{ID: e.ID, AggregateID: e.AggregateID, GTID: e.GTID})
		}
	}
	want := &outboxtest.Workload{RolledBack: map[string]bool{}}
	for _, txn := range old.Committed() {
		var kept outboxtest.Committed
		kept.GTID, kept.At = txn.GTID, txn.At
		for k, id := range txn.IDs {
			if !gone[id] {
				kept.IDs, kept.AggIDs = append(kept.IDs, id), append(kept.AggIDs, txn.AggIDs[k])
			}
		}
		want.Txns = append(want.Txns, kept)
	}
	var inWindow []outboxtest.Delivered
	for _, d := range replayed {
		if gone[d.ID] {
			t.Errorf("pruned row %s was replayed", d.ID)
		}
		if strings.HasPrefix(d.ID, "old-") {
			inWindow = append(inWindow, d)
		}
	}
	rep := outboxtest.Check(t, want, inWindow, false) // per aggregate in commit order; duplicates are counted below
	seen := map[string]int{}
	liveReplayed := 0
	for _, d := range replayed {
		seen[d.ID]++
		if seen[d.ID] > 1 {
			t.Errorf("event %s replayed twice", d.ID)
		}
		if strings.HasPrefix(d.ID, "live-") {
			liveReplayed++
		}
	}
	for id := range liveAtPlan {
		if seen[id] == 0 {
			t.Errorf("live event %s, committed before the replay was planned, was not replayed", id)
		}
	}
	// Exactly the live rows committed up to the window's end (a MariaDB
	// GTID position of one domain: its sequence number) are replayed.
	var end int
	if _, err := fmt.Sscanf(job.Until.GTIDSet, "0-1-%d", &end); err != nil {
		t.Fatalf("window end %q: %v", job.Until.GTIDSet, err)
	}
	before := 0
	for _, txn := range live.Committed() {
		var seq int
		if _, err := fmt.Sscanf(txn.GTID, "0-1-%d", &seq); err != nil {
			t.Fatalf("gtid %q: %v", txn.GTID, err)
		}
		for _, id := range txn.IDs {
			switch {
			case seq <= end && seen[id] == 0:
				t.Errorf("live event %s (gtid seq %d) is in the window (up to %d) but was not replayed", id, seq, end)
			case seq > end && seen[id] > 0:
				t.Errorf("live event %s (gtid seq %d) committed after the window's end (%d) but was replayed", id, seq, end)
			case seq <= end:
				before++
			}
		}
	}
	if before != liveReplayed {
		t.Errorf("%d live events replayed, %d committed in the window", liveReplayed, before)
	}
	if j := jobOf(t, path, job.ID); j.Sent != int64(len(replayed)) {
		t.Errorf("job counts %d sent, the sink got %d", j.Sent, len(replayed))
	}
	t.Logf("replayed %d: %d old of %d kept (%d pruned), %d live (%d committed before the plan, %d in all)", len(replayed), rep.Delivered, want.Events(), len(pruned), liveReplayed, len(liveAtPlan), live.Events())
}

// A relay stopped in the middle of a backfill resumes it after the last
// chunk it saved: every row once, across the two runs.
func TestBackfillResumesAfterARestart(t *testing.T) {
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	if _, err := db.Exec(outboxtest.Schema); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	w := &outboxtest.Workload{Retained: true, OwnAggregates: true}
	outboxtest.Produce(ctx, t, db, w, 4, 150, []int{1, 4, 2}, 5)
	path := filepath.Join(t.TempDir(), "cp.json")
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %s.outbox}]
checkpoint: {path: %s, interval: 200ms, start: current}
delivery: {batch_size: 20}
sinks: [{name: out, type: stdout, start: {backfill: true, chunk_size: 5}}]
`, srv.Port, testserver.ServerID(), dbname, path)))
	if err != nil {
		t.Fatal(err)
	}
	out := &lines{}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cursor := func() *event.TableCursor {
		st, err := checkpoint.OpenFileReadOnly(path)
		if err != nil {
			return nil
		}
		cp, err := st.Load(ctx, relay.BackfillKey("out", dbname+".outbox"))
		if err != nil {
			return nil
		}
		return cp.Position.Table
	}
	run := func(w io.Writer, until func() bool) {
		rl := startRelay(t, cfg, relay.Options{Stdout: w, Logger: log})
		eventually.Within(t, 3*time.Minute, "the backfill's progress", until)
		if err := rl.stop(t); err != nil {
			t.Fatalf("relay: %v", err)
		}
	}
	// The first run writes 5 batches (of 20 events at most, of 1,400),
	// then its writes wait, and fail once the relay is told to stop: it is
	// stopped in the backfill's middle whatever the machine's speed.
	gate := &gatedWriter{w: out, left: 5, stopping: make(chan struct{})}
	run(gate, func() bool {
		if c := cursor(); c != nil && len(c.Key) > 0 {
			close(gate.stopping)
			return true
		}
		return false
	})
	if c := cursor(); c == nil || c.Done {
		t.Fatalf("the backfill was done (%v) though the sink took only 5 batches", c)
	}
	first := len(out.events(t))
	run(out, func() bool { c := cursor(); return c != nil && c.Done })
	var got []outboxtest.Delivered
	for _, e := range out.events(t) {
		got = append(got, outboxtest.Delivered{ID: e.ID, AggregateID: e.AggregateID, GTID: e.GTID})
	}
	rep := outboxtest.Check(t, w, got, false)
	if rep.Duplicates != 0 {
		t.Errorf("%d events sent twice across the restart", rep.Duplicates)
	}
	t.Logf("%d events: %d in the first run, %d after the restart, %d duplicates", rep.Committed, first, rep.Delivered-first, rep.Duplicates)
}

// gatedWriter passes left writes to w; later ones wait until stopping is
// closed, then fail.
type gatedWriter struct {
	w        io.Writer
	mu       sync.Mutex
	left     int
	stopping chan struct{}
}

func (g *gatedWriter) Write(p []byte) (int, error) {
	g.mu.Lock()
	pass := g.left > 0
	g.left--
	g.mu.Unlock()
	if pass {
		return g.w.Write(p)
	}
	<-g.stopping
	return 0, errors.New("the relay is being stopped")
}
