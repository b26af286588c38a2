package relay_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/check"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/internal/eventually"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/prune"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/source"
)

// pruneOutbox is newOutbox with the server-set created_at prune needs.
func pruneOutbox(t testing.TB) (string, *sql.DB, *outboxtest.Workload) {
	dbname, w := newOutbox(t)
	db := srv.DB(t, dbname)
	if _, err := db.Exec("ALTER TABLE outbox ADD created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), ADD INDEX (created_at)"); err != nil {
		t.Fatal(err)
	}
	return dbname, db, w
}

// insertAt commits one transaction inserting ids with the server's clock at
// at (SET timestamp): their created_at and their binlog commit time.
func insertAt(t *testing.T, db *sql.DB, at time.Time, ids ...string) {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET timestamp = ?", at.Unix()); err != nil {
		t.Fatal(err)
	}
	defer conn.ExecContext(ctx, "SET timestamp = DEFAULT")
	var vals []string
	var args []any
	for _, id := range ids {
		vals = append(vals, "(?, 'order', 'agg', 'created', ?)")
		args = append(args, id, outboxtest.Payload(id, 0))
	}
	if _, err := conn.ExecContext(ctx, "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES "+strings.Join(vals, ", "), args...); err != nil {
		t.Fatal(err)
	}
}

func presentIDs(t *testing.T, db *sql.DB) []string {
	t.Helper()
	rows, err := db.Query("SELECT id FROM outbox ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		rows.Scan(&id)
		out = append(out, id)
	}
	return out
}

// runPrune runs one prune of cfg's tables, reading the checkpoints as
// they are on disk now.
func runPrune(t testing.TB, cfg *config.Config, opts prune.Options) (prune.Result, error) {
	t.Helper()
	ctx := context.Background()
	store, closeStore, err := checkpoint.OpenReadOnly(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	db, info, err := prune.OpenPrimary(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	return prune.NewFromConfig(db, info, store, cfg, opts).Run(ctx)
}

func loadCP(t *testing.T, path, name string) checkpoint.Checkpoint {
	t.Helper()
	st, err := checkpoint.OpenFileReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	cp, _ := st.Load(context.Background(), name)
	return cp
}

// A webhook endpoint that is down holds pruning back to exactly its
// checkpoint's commit time (minus the margin), while the other sink is
// caught up; once it recovers, everything goes.
func TestPruneIsHeldBackExactlyToADownSinksCheckpoint(t *testing.T) {
	dbname, db, _ := pruneOutbox(t)
	var up atomic.Bool
	up.Store(true)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !up.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer hook.Close()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %s.outbox}]
checkpoint: {path: %s, interval: 100ms}
delivery: {max_retry_backoff: 300ms}
sinks:
  - {name: all, type: stdout}
  - name: hooks
    type: webhook
    webhook:
      endpoints:
        - {name: ep, url: "%s", body: envelope, retry: {initial_backoff: 50ms, max_backoff: 200ms, max_attempts: 100000}}
`, srv.Port, testserver.ServerID(), dbname, filepath.Join(t.TempDir(), "cp.json"), hook.URL)))
	if err != nil {
		t.Fatal(err)
	}
	out := &lines{}
	rl := startRelay(t, cfg, relay.Options{Stdout: out, Logger: slog.New(slog.DiscardHandler)})
	defer rl.stop(t)
	waitForCheckpoint(t, cfg.Checkpoint.Path)
	// The endpoint has no cursor of its own until its first event: the
	// webhook sink's shared cursor is its.
	eventually.Within(t, 20*time.Second, "both pipelines' start checkpoints", func() bool {
		return !loadCP(t, cfg.Checkpoint.Path, gateway.SharedKey("hooks")).Position.IsZero() && !loadCP(t, cfg.Checkpoint.Path, "all").Position.IsZero()
	})

	t0 := time.Now().Add(-10 * time.Hour).Truncate(time.Second)
	var ids []string
	for i := range 5 { // acknowledged by both
		at := t0.Add(time.Duration(i) * 10 * time.Minute)
		insertAt(t, db, at, fmt.Sprintf("a%d-0", i), fmt.Sprintf("a%d-1", i))
		ids = append(ids, fmt.Sprintf("a%d-0", i), fmt.Sprintf("a%d-1", i))
	}
	lastAcked := t0.Add(40 * time.Minute)
	eventually.Within(t, 20*time.Second, "the endpoint's checkpoint at the 5th transaction", func() bool {
		return loadCP(t, cfg.Checkpoint.Path, "hooks/ep").CommitTime.Equal(lastAcked)
	})
	up.Store(false)
	for i := range 5 { // only the stdout sink acknowledges these
		at := t0.Add(5*time.Hour + time.Duration(i)*10*time.Minute)
		insertAt(t, db, at, fmt.Sprintf("b%d-0", i), fmt.Sprintf("b%d-1", i))
		ids = append(ids, fmt.Sprintf("b%d-0", i), fmt.Sprintf("b%d-1", i))
	}
	eventually.Within(t, 20*time.Second, "the stdout sink to deliver all", func() bool { return len(out.events(t)) == 20 })
	time.Sleep(300 * time.Millisecond) // its checkpoint saved

	opts := prune.Options{OlderThan: 0, SafetyMargin: time.Second, BatchSize: 3, Pause: time.Millisecond}
	res, err := runPrune(t, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if want := lastAcked.Add(-time.Second); !res.Horizon.Cutoff.Equal(want) || !strings.Contains(res.Horizon.HeldBy, "hooks/ep") {
		t.Fatalf("cutoff %v held by %q; want %v, by hooks/ep", res.Horizon.Cutoff, res.Horizon.HeldBy, want)
	}
	for _, s := range res.Horizon.Sinks {
		if s.Name == "all" && !s.CaughtUp {
			t.Errorf("the stdout sink is not seen caught up: %+v", s)
		}
	}
	// The 5th transaction is at the checkpoint itself: within the margin, kept.
	want := []string{"a4-0", "a4-1", "b0-0", "b0-1", "b1-0", "b1-1", "b2-0", "b2-1", "b3-0", "b3-1", "b4-0", "b4-1"}
	if got := presentIDs(t, db); !slices.Equal(got, want) {
		t.Fatalf("after pruning with the endpoint down, the table holds %v; want %v", got, want)
	}
	if res.Tables[0].Rows != 8 {
		t.Errorf("reported %d rows deleted, want 8", res.Tables[0].Rows)
	}

	up.Store(true)
	eventually.Within(t, 30*time.Second, "the endpoint to catch up", func() bool {
		return !loadCP(t, cfg.Checkpoint.Path, "hooks/ep").CommitTime.Before(t0.Add(5*time.Hour + 40*time.Minute))
	})
	time.Sleep(300 * time.Millisecond)
	if _, err := runPrune(t, cfg, opts); err != nil {
		t.Fatal(err)
	}
	if got := presentIDs(t, db); len(got) != 0 {
		t.Fatalf("with every sink caught up, rows remain: %v", got)
	}
	if n := len(out.events(t)); n != 20 {
		t.Fatalf("stdout sink delivered %d events, want 20 (the DELETEs are not events)", n)
	}
}

// A standby relay configured to prune never does while another relay is
// active; it prunes once it has taken over.
func TestStandbyNeverPrunes(t *testing.T) {
	dbname, db, _ := pruneOutbox(t)
	cpPath := filepath.Join(t.TempDir(), "cp.json")
	conf := func(schedule string) *config.Config {
		cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %s.outbox}]
checkpoint: {path: %s, interval: 100ms}
sinks: [{name: out, type: stdout}]
prune: {schedule: %s, older_than: 1h, safety_margin: 1s}
`, srv.Port, testserver.ServerID(), dbname, cpPath, schedule)))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	start := func(cfg *config.Config, out *lines) *run {
		return startRelay(t, cfg, relay.Options{Stdout: out, Logger: slog.New(slog.DiscardHandler)})
	}
	outA, outB := &lines{}, &lines{}
	a := start(conf("0s"), outA)
	waitForCheckpoint(t, cpPath)
	old := time.Now().Add(-10 * time.Hour)
	for i := range 3 {
		insertAt(t, db, old.Add(time.Duration(i)*time.Minute), fmt.Sprintf("s%d", i))
	}
	eventually.Within(t, 20*time.Second, "the active relay to deliver", func() bool { return len(outA.events(t)) == 3 })
	b := start(conf("1h"), outB)
	defer b.stop(t)
	time.Sleep(3 * time.Second) // B is a standby: it must not prune
	if got := presentIDs(t, db); len(got) != 3 {
		t.Fatalf("rows were pruned while the relay configured to prune was a standby: %v left", got)
	}
	a.stop(t)
	eventually.Within(t, 30*time.Second, "the relay that took over to prune", func() bool { return len(presentIDs(t, db)) == 0 })
}

// Pruning every 200ms beside producers and a slow sink: no event is lost,
// and no row is gone before the sink delivered it.
func TestPruneBesideProducersLosesNothingAndDeletesNothingUnacknowledged(t *testing.T) {
	dbname, db, w := pruneOutbox(t)
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %s.outbox}]
checkpoint: {path: %s, interval: 100ms}
delivery: {batch_size: 5, max_in_flight: 20}
sinks: [{name: out, type: stdout}]
`, srv.Port, testserver.ServerID(), dbname, filepath.Join(t.TempDir(), "cp.json"))))
	if err != nil {
		t.Fatal(err)
	}
	out := &slowLines{delay: 3 * time.Millisecond}
	ctx := context.Background()
	rl := startRelay(t, cfg, relay.Options{Stdout: out, Logger: slog.New(slog.DiscardHandler)})
	defer rl.stop(t)
	waitForCheckpoint(t, cfg.Checkpoint.Path)
	time.Sleep(300 * time.Millisecond)

	produced := make(chan struct{})
	go func() {
		defer close(produced)
		outboxtest.Produce(ctx, t, db, w, 2, 500, []int{1, 3, 2}, 10)
	}()
	opts := prune.Options{OlderThan: 0, SafetyMargin: time.Second, BatchSize: 7, Pause: time.Millisecond}
	var deleted int64
	check := func() {
		committed := map[string]bool{}
		for _, tx := range w.Committed() {
			for _, id := range tx.IDs {
				if !deletedByProducer(id) {
					committed[id] = true
				}
			}
		}
		res, err := runPrune(t, cfg, opts)
		if err != nil {
			t.Fatal(err)
		}
		deleted += res.Tables[0].Rows
		present := map[string]bool{}
		for _, id := range presentIDs(t, db) {
			present[id] = true
		}
		delivered := out.ids(t)
		for id := range committed {
			if !present[id] && !delivered[id] {
				t.Fatalf("row %s was pruned before the sink delivered it (cutoff %v, held by %s)", id, res.Horizon.Cutoff, res.Horizon.HeldBy)
			}
		}
	}
	for running := true; running; {
		select {
		case <-produced:
			running = false
		case <-time.After(200 * time.Millisecond):
		}
		check()
	}
	eventually.Within(t, 60*time.Second, "every event delivered", func() bool { return len(out.ids(t)) >= w.Events() })
	check()
	if deleted == 0 {
		// The production fitted within the safety margin of the commit
		// time the checkpoint holds (whole seconds, from the binlog): with
		// the relay's saves spaced while acknowledgements stream in, the
		// producers are no longer slowed by its fsyncs. A transaction on
		// another table, committed after the margin, moves the checkpoint
		// past it, and the production's rows may go.
		time.Sleep(2*time.Second + 100*time.Millisecond)
		if _, err := db.Exec("CREATE TABLE IF NOT EXISTS " + dbname + ".tick (id INT PRIMARY KEY)"); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec("INSERT INTO " + dbname + ".tick VALUES (1)"); err != nil {
			t.Fatal(err)
		}
		eventually.Within(t, 30*time.Second, "a prune past the margin to delete rows", func() bool {
			check()
			return deleted > 0
		})
	}
	var got []outboxtest.Delivered
	for _, e := range out.l.events(t) {
		got = append(got, outboxtest.Delivered{ID: e.ID, AggregateID: e.AggregateID, GTID: e.GTID})
	}
	outboxtest.Check(t, w, got, false)
	if deleted == 0 {
		t.Fatal("no row was pruned while producing: the test proves nothing")
	}
	t.Logf("%d events, %d rows pruned during and after production", w.Events(), deleted)
}

// deletedByProducer: outboxtest's producers delete the rows of every
// transaction i with i%5 == 2 in the transaction itself.
func deletedByProducer(id string) bool {
	_, rest, _ := strings.Cut(id, "-t")
	n, _, _ := strings.Cut(rest, "-")
	i, err := strconv.Atoi(n)
	return err == nil && i%5 == 2
}

// slowLines is a stdout sink's writer that takes delay per write.
type slowLines struct {
	delay time.Duration
	l     lines
}

func (s *slowLines) Write(p []byte) (int, error) {
	time.Sleep(s.delay)
	return s.l.Write(p)
}

func (s *slowLines) ids(t *testing.T) map[string]bool {
	out := map[string]bool{}
	for _, e := range s.l.events(t) {
		out[e.ID] = true
	}
	return out
}

// A table RANGE-partitioned by day: only partitions whose every row is
// before the cutoff are dropped, and partitions are created ahead.
func TestPrunePartitionsDropsOnlyFullyAcknowledgedOnes(t *testing.T) {
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	day := int64(24 * 3600)
	d := time.Now().UTC().Truncate(24 * time.Hour).Unix() // today, 00:00 UTC
	var parts []string
	for i, b := range []int64{d - 4*day, d - 3*day, d - 2*day, d - day, d, d + day} {
		parts = append(parts, fmt.Sprintf("PARTITION p%d VALUES LESS THAN (%d)", i, b))
	}
	parts = append(parts, "PARTITION pmax VALUES LESS THAN MAXVALUE")
	if _, err := db.Exec(`CREATE TABLE outbox (seq BIGINT NOT NULL AUTO_INCREMENT, id VARCHAR(64) NOT NULL,
  aggregatetype VARCHAR(64) NOT NULL, aggregateid VARCHAR(64) NOT NULL, type VARCHAR(64) NOT NULL, payload JSON NOT NULL,
  created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), PRIMARY KEY (seq, created_at))
  PARTITION BY RANGE (UNIX_TIMESTAMP(created_at)) (` + strings.Join(parts, ", ") + ")"); err != nil {
		t.Fatal(err)
	}
	at := func(days float64) time.Time { return time.Unix(d+int64(days*float64(day)), 0) }
	insertAt(t, db, at(-4.5), "p0")
	insertAt(t, db, at(-3.5), "p1")
	insertAt(t, db, at(-2.5), "p2")
	insertAt(t, db, at(-1.5), "p3")
	insertAt(t, db, at(-0.5), "p4")
	insertAt(t, db, time.Now(), "p5")
	cpPath := filepath.Join(t.TempDir(), "cp.json")
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root}
tables: [{name: %s.outbox}]
checkpoint: {path: %s}
sinks: [{name: out, type: stdout}]
`, srv.Port, dbname, cpPath)))
	if err != nil {
		t.Fatal(err)
	}
	// The sink acknowledged up to 06:00 two days ago: inside p3's day.
	st, err := checkpoint.OpenFile(cpPath)
	if err != nil {
		t.Fatal(err)
	}
	acked := at(-2).Add(6 * time.Hour)
	if err := st.Save(context.Background(), "out", checkpoint.Checkpoint{Flavor: "mariadb", Position: event.Position{GTIDSet: "0-1-1"}, CommitTime: acked, UpdatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	partitions := func() []string {
		rows, err := db.Query("SELECT PARTITION_NAME FROM information_schema.PARTITIONS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'outbox' ORDER BY PARTITION_ORDINAL_POSITION", dbname)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var n string
			rows.Scan(&n)
			out = append(out, n)
		}
		return out
	}
	opts := prune.Options{OlderThan: 0, SafetyMargin: time.Hour, PartitionsAhead: 3, LockWaitTimeout: 5 * time.Second}
	dry := opts
	dry.DryRun = true
	res, err := runPrune(t, cfg, dry)
	if err != nil {
		t.Fatal(err)
	}
	before := partitions()
	if tr := res.Tables[0]; tr.Mode != "partitions" || !slices.Equal(tr.Dropped, []string{"p0", "p1", "p2"}) || len(tr.Created) != 3 {
		t.Fatalf("dry run: %+v; want p0, p1, p2 dropped and 3 created", tr)
	}
	if len(before) != 7 || len(presentIDs(t, db)) != 6 {
		t.Fatalf("a dry run changed the table: partitions %v", before)
	}

	res, err = runPrune(t, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := presentIDs(t, db), []string{"p3", "p4", "p5"}; !slices.Equal(got, want) {
		t.Fatalf("rows left %v, want %v (p3's partition holds rows after the cutoff %v)", got, want, res.Horizon.Cutoff)
	}
	tomorrow := time.Unix(d+day, 0).UTC()
	want := []string{"p3", "p4", "p5",
		"p" + tomorrow.Format("20060102"), "p" + tomorrow.AddDate(0, 0, 1).Format("20060102"), "p" + tomorrow.AddDate(0, 0, 2).Format("20060102"), "pmax"}
	if got := partitions(); !slices.Equal(got, want) {
		t.Fatalf("partitions %v, want %v", got, want)
	}
	// Again: nothing more to drop, enough ahead.
	res, err = runPrune(t, cfg, opts)
	if err != nil || len(res.Tables[0].Dropped) != 0 || len(res.Tables[0].Created) != 0 {
		t.Fatalf("a second prune: %+v, %v", res.Tables, err)
	}
	// Rows still arrive in the new partitions.
	insertAt(t, db, time.Unix(d+day+3600, 0), "tomorrow")
}

// prune refuses a table without a server-set timestamp, and a sink without a
// checkpoint holds everything back.
func TestPruneRefusesAnApplicationSetTimestampAndWaitsForEverySink(t *testing.T) {
	dbname, _ := newOutbox(t)
	sdb := srv.DB(t, dbname)
	cpPath := filepath.Join(t.TempDir(), "cp.json")
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root}
tables: [{name: %s.outbox}]
checkpoint: {path: %s}
sinks: [{name: a, type: stdout}, {name: b, type: stdout}]
`, srv.Port, dbname, cpPath)))
	if err != nil {
		t.Fatal(err)
	}
	opts := prune.Options{OlderThan: 0, SafetyMargin: time.Second}
	if _, err := runPrune(t, cfg, opts); err == nil || !strings.Contains(err.Error(), "has no column created_at") {
		t.Fatalf("a table without created_at: %v", err)
	}
	if _, err := sdb.Exec("ALTER TABLE outbox ADD created_at DATETIME(6) NOT NULL"); err != nil {
		t.Fatal(err)
	}
	if _, err := runPrune(t, cfg, opts); err == nil || !strings.Contains(err.Error(), "no DEFAULT CURRENT_TIMESTAMP") {
		t.Fatalf("an application-set created_at: %v", err)
	}
	if _, err := sdb.Exec("ALTER TABLE outbox MODIFY created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)"); err != nil {
		t.Fatal(err)
	}
	insertAt(t, sdb, time.Now().Add(-time.Hour), "old")
	// Only sink a has a checkpoint, and it is caught up.
	ctx := context.Background()
	srcDB, info, err := prune.OpenPrimary(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srcDB.Close()
	cur, err := source.CurrentPosition(ctx, srcDB, info)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := checkpoint.OpenFile(cpPath)
	st.Save(ctx, "a", checkpoint.Checkpoint{Flavor: info.Flavor, Position: cur, UpdatedAt: time.Now()})
	res, err := runPrune(t, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Horizon.Cutoff.IsZero() || !strings.Contains(res.Horizon.HeldBy, "sink b has no checkpoint") || len(presentIDs(t, sdb)) != 1 {
		t.Fatalf("with sink b never run: cutoff %v held by %q, rows %v", res.Horizon.Cutoff, res.Horizon.HeldBy, presentIDs(t, sdb))
	}
	st.Save(ctx, "b", checkpoint.Checkpoint{Flavor: info.Flavor, Position: cur, UpdatedAt: time.Now()})
	if _, err := runPrune(t, cfg, opts); err != nil || len(presentIDs(t, sdb)) != 0 {
		t.Fatalf("with both sinks caught up: %v, rows %v", err, presentIDs(t, sdb))
	}
}

// check warns about rows older than the retention that nothing prunes, and
// says that insert-then-delete needs no pruning.
func TestCheckWarnsAboutAnUnprunedOutbox(t *testing.T) {
	dbname, db, _ := pruneOutbox(t)
	insertAt(t, db, time.Now().Add(-9*24*time.Hour), "old")
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root}
tables: [{name: %s.outbox}]
checkpoint: {path: %s}
sinks: [{name: out, type: stdout}]
`, srv.Port, dbname, filepath.Join(t.TempDir(), "cp.json"))))
	if err != nil {
		t.Fatal(err)
	}
	growth := func() check.Result {
		rep, err := check.Run(context.Background(), cfg, check.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rep.Results {
			if r.Name == check.NameOutboxGrowth {
				return r
			}
		}
		t.Fatal("no outbox_growth result")
		return check.Result{}
	}
	if r := growth(); r.Status != check.Warn || !strings.Contains(r.Detail, "nothing in this relay's config prunes it") || !strings.Contains(r.Fix, "insert and delete the row in one transaction") {
		t.Fatalf("a 9-day-old row, no prune: %+v", r)
	}
	if _, err := db.Exec("DELETE FROM outbox"); err != nil {
		t.Fatal(err)
	}
	if r := growth(); r.Status != check.Pass {
		t.Fatalf("an empty outbox: %+v", r)
	}
}

// The prune rate on this machine (a measurement, so a benchmark: one
// iteration is the whole run): go test ./relay -run '^$' -bench PruneRate -benchtime 1x -v
func BenchmarkPruneRate(b *testing.B) {
	t := b
	dbname, db, _ := pruneOutbox(t)
	const rows = 50000
	ctx := context.Background()
	conn, _ := db.Conn(ctx)
	conn.ExecContext(ctx, "SET timestamp = ?", time.Now().Add(-48*time.Hour).Unix())
	for i := 0; i < rows; i += 1000 {
		var vals []string
		for j := i; j < i+1000; j++ {
			vals = append(vals, fmt.Sprintf("('m%d', 'order', 'agg', 'created', '{}')", j))
		}
		if _, err := conn.ExecContext(ctx, "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES "+strings.Join(vals, ",")); err != nil {
			t.Fatal(err)
		}
	}
	conn.Close()
	cfg, _ := config.Parse([]byte(fmt.Sprintf("source: {host: 127.0.0.1, port: %d, user: root}\ntables: [{name: %s.outbox}]\ncheckpoint: {path: %s}\nsinks: [{name: out, type: stdout}]\n",
		srv.Port, dbname, filepath.Join(t.TempDir(), "cp.json"))))
	srcDB, info, _ := prune.OpenPrimary(ctx, cfg)
	cur, _ := source.CurrentPosition(ctx, srcDB, info)
	srcDB.Close()
	st, _ := checkpoint.OpenFile(cfg.Checkpoint.Path)
	st.Save(ctx, "out", checkpoint.Checkpoint{Flavor: info.Flavor, Position: cur, UpdatedAt: time.Now()})
	for _, pause := range []time.Duration{0, 100 * time.Millisecond} {
		if pause > 0 { // refill half
			db.Exec("SET timestamp = ?", time.Now().Add(-48*time.Hour).Unix())
		}
		began := time.Now()
		res, err := runPrune(t, cfg, prune.Options{OlderThan: 24 * time.Hour, SafetyMargin: time.Second, BatchSize: 500, Pause: pause})
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(began)
		t.Logf("pause %s: %d rows in %s: %.0f rows/s", pause, res.Tables[0].Rows, took.Round(time.Millisecond), float64(res.Tables[0].Rows)/took.Seconds())
		if pause == 0 {
			conn, _ := db.Conn(ctx)
			conn.ExecContext(ctx, "SET timestamp = ?", time.Now().Add(-48*time.Hour).Unix())
			for i := 0; i < 10000; i += 1000 {
				var vals []string
				for j := i; j < i+1000; j++ {
					vals = append(vals, fmt.Sprintf("('n%d', 'order', 'agg', 'created', '{}')", j))
				}
				conn.ExecContext(ctx, "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES "+strings.Join(vals, ","))
			}
			conn.Close()
			cur, _ := func() (event.Position, error) {
				d, i, _ := prune.OpenPrimary(ctx, cfg)
				defer d.Close()
				return source.CurrentPosition(ctx, d, i)
			}()
			st.Save(ctx, "out", checkpoint.Checkpoint{Flavor: info.Flavor, Position: cur, UpdatedAt: time.Now()})
		}
	}
}

// prune checks its account's privileges before it counts or deletes: a user
// with the relay's grants but no DELETE sees the dry run and the real run
// both fail with the GRANT to run, and nothing is deleted; once granted,
// the rows go.
func TestPruneWithoutDeleteFailsWithTheGrantAndDeletesNothing(t *testing.T) {
	dbname, sdb, _ := pruneOutbox(t)
	srv.Exec(t, "CREATE USER 'pruner'@'%' IDENTIFIED BY 'pw'",
		"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'pruner'@'%'",
		"GRANT SELECT ON `"+dbname+"`.outbox TO 'pruner'@'%'")
	t.Cleanup(func() { srv.Exec(t, "DROP USER 'pruner'@'%'") })
	cpPath := filepath.Join(t.TempDir(), "cp.json")
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: pruner, password: pw}
tables: [{name: %s.outbox}]
checkpoint: {path: %s}
sinks: [{name: a, type: stdout}]
`, srv.Port, dbname, cpPath)))
	if err != nil {
		t.Fatal(err)
	}
	insertAt(t, sdb, time.Now().Add(-time.Hour), "old1", "old2")
	ctx := context.Background()
	srcDB, info, err := prune.OpenPrimary(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srcDB.Close()
	cur, err := source.CurrentPosition(ctx, srcDB, info)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := checkpoint.OpenFile(cpPath)
	st.Save(ctx, "a", checkpoint.Checkpoint{Flavor: info.Flavor, Position: cur, UpdatedAt: time.Now(), CommitTime: time.Now()})

	grant := "GRANT DELETE ON `" + dbname + "`.`outbox` TO 'pruner'@'%';"
	for _, dry := range []bool{true, false} {
		res, err := runPrune(t, cfg, prune.Options{SafetyMargin: time.Second, DryRun: dry})
		if err == nil || !strings.Contains(err.Error(), "lacks DELETE on "+dbname+".outbox") || !strings.Contains(err.Error(), grant) {
			t.Errorf("dry run %v: want an error with %q, got %v", dry, grant, err)
		}
		if len(res.Tables) != 1 || res.Tables[0].Rows != 0 {
			t.Errorf("dry run %v: want nothing counted, got %+v", dry, res.Tables)
		}
		if ids := presentIDs(t, sdb); len(ids) != 2 {
			t.Fatalf("dry run %v: rows %v, want both kept", dry, ids)
		}
	}
	srv.Exec(t, "GRANT DELETE ON `"+dbname+"`.outbox TO 'pruner'@'%'")
	if _, err := runPrune(t, cfg, prune.Options{SafetyMargin: time.Second}); err != nil || len(presentIDs(t, sdb)) != 0 {
		t.Fatalf("with DELETE granted: %v, rows %v", err, presentIDs(t, sdb))
	}
}
