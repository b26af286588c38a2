package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/eventually"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
)

// A second relay started from a copy of a running relay's config — its own
// checkpoint file and sinks, the same source.server_id — used to make the
// server drop one stream whenever the other connected, forever. Now one of
// them stops, at once, with an error naming the ids in use and a free one,
// and the other goes on delivering; nothing reconnects in a loop.
func TestCopiedConfigWithTheSameServerIDStopsClearly(t *testing.T) {
	if testing.Short() {
		t.Skip("process test skipped with -short")
	}
	bin := buildBinary(t)
	srv := testserver.Start(t, testserver.Options{ServerID: 22})
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	if _, err := db.Exec(outboxtest.Schema); err != nil {
		t.Fatal(err)
	}
	// A user that may stream the binlog but not list the server's replicas
	// (MariaDB needs REPLICATION MASTER ADMIN for SHOW SLAVE HOSTS).
	srv.Exec(t, "CREATE USER 'blind'@'%'",
		"GRANT REPLICATION SLAVE, REPLICATION CLIENT, BINLOG MONITOR ON *.* TO 'blind'@'%'",
		fmt.Sprintf("GRANT SELECT ON %s.* TO 'blind'@'%%'", dbname))
	ctx := context.Background()
	for i, tc := range []struct {
		name, copyUser string
		// wantStopped: which relay stops: the copy, which sees the id in
		// the replica list before it connects, or — when the copy cannot
		// list replicas — the first, whose stream the copy's connection
		// made the server drop.
		wantStopped string
	}{
		{"the copy sees the id in use before it connects", "root", "copy"},
		{"the copy cannot list replicas: the dropped stream stops", "blind", "first"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			id := testserver.ServerID()
			cfg := func(name, user string) string {
				p := filepath.Join(dir, name+".yaml")
				os.WriteFile(p, []byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: %s, server_id: %d, heartbeat: 1s}
tables: [{name: %s.outbox}]
checkpoint: {path: %s, interval: 100ms}
sinks: [{name: out, type: stdout}]
log: {level: info}
`, srv.Port, user, id, dbname, filepath.Join(dir, name, "cp.json"))), 0o600)
				return p
			}
			first := startRelayProc(t, bin, cfg("first", "root"), dir, "first")
			waitForFile(t, filepath.Join(dir, "first", "cp.json"), 30*time.Second)
			w1 := &outboxtest.Workload{Prefix: fmt.Sprintf("a%d-", i)}
			outboxtest.Produce(ctx, t, db, w1, 1, 10, []int{1, 2}, 3)
			eventually.Within(t, 30*time.Second, "the first relay's deliveries", func() bool { return countIn(first.ids(t), w1.Prefix) >= w1.Events() }, nil)

			started := time.Now()
			copy := startRelayProc(t, bin, cfg("copy", tc.copyUser), dir, "copy")
			procs := map[string]*relayProc{"first": first, "copy": copy}
			stopped, running := procs[tc.wantStopped], procs["first"]
			if tc.wantStopped == "first" {
				running = copy
			}
			var exitErr error
			select {
			case exitErr = <-stopped.exited:
			case <-time.After(60 * time.Second):
				t.Fatalf("the %s relay did not stop; first log:\n%s\ncopy log:\n%s", tc.wantStopped, tail([]byte(first.logText())), tail([]byte(copy.logText())))
			}
			t.Logf("the %s relay stopped %s after the copy started", tc.wantStopped, time.Since(started).Round(10*time.Millisecond))
			log := stopped.logText()
			want := []string{fmt.Sprintf("server_id %d", id), "replica ids in use", fmt.Sprintf("%d (", id), fmt.Sprintf("set source.server_id to %d", id+3)} // the range: the sink's id and the two replay slots
			for _, w := range want {
				if exitErr == nil || !strings.Contains(log, w) {
					t.Errorf("the %s relay exited with %v; its log lacks %q:\n%s", tc.wantStopped, exitErr, w, tail([]byte(log)))
				}
			}
			// The other goes on delivering, and neither flapped.
			w2 := &outboxtest.Workload{Prefix: fmt.Sprintf("b%d-", i)}
			outboxtest.Produce(ctx, t, db, w2, 1, 10, []int{1, 2}, 3)
			eventually.Within(t, 30*time.Second, "the remaining relay's deliveries", func() bool { return countIn(running.ids(t), w2.Prefix) >= w2.Events() }, func() {
				t.Logf("first log:\n%s\ncopy log:\n%s", tail([]byte(first.logText())), tail([]byte(copy.logText())))
			})
			select {
			case err := <-running.exited:
				t.Fatalf("the other relay exited too: %v", err)
			default:
			}
			time.Sleep(2 * time.Second) // room for a flap to show
			for name, p := range procs {
				if n := strings.Count(p.logText(), "binlog stream reconnecting"); n > 1 {
					t.Errorf("the %s relay reconnected %d times:\n%s", name, n, tail([]byte(p.logText())))
				}
			}
			if os.Getenv("FENCE_DUMP") != "" {
				t.Logf("stopped log:\n%s", tail([]byte(log)))
			}
			running.cmd.Process.Signal(syscall.SIGTERM)
			<-running.exited
		})
	}
}
