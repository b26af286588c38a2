package relay_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/internal/eventually"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/relay"
)

// A new sink with start.backfill: the rows the table held before the
// relay started, and those committed while it backfills and after, arrive
// once each, every aggregate's in commit order; producers never stop
// while the relay backfills and goes live.
func TestNewSinkBackfillsTheTableThenGoesLive(t *testing.T) {
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	if _, err := db.Exec(outboxtest.Schema); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	before := &outboxtest.Workload{Prefix: "before-", Retained: true, OwnAggregates: true}
	outboxtest.Produce(ctx, t, db, before, 3, 60, []int{1, 4, 2}, 5)

	stop := make(chan struct{})
	during := &outboxtest.Workload{Prefix: "during-", Until: stop, Retained: true, OwnAggregates: true}
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
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %s.outbox}]
checkpoint: {path: %s, interval: 200ms, start: current}
sinks: [{name: out, type: stdout, start: {backfill: true, chunk_size: 23}}]
`, srv.Port, testserver.ServerID(), dbname, path)))
	if err != nil {
		t.Fatal(err)
	}
	out := &lines{}
	rctx, stopRelay := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- relay.New(cfg, relay.Options{Stdout: out, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}).Run(rctx)
	}()
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
	stopRelay()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
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
