package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/source"
)

// caughtUp waits until replica has applied everything primary has written.
func caughtUp(t *testing.T, primary, replica *testserver.Server) {
	t.Helper()
	var want string
	primary.DB(t, "").QueryRow("SELECT @@GLOBAL.gtid_binlog_pos").Scan(&want)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var got string
		replica.DB(t, "").QueryRow("SELECT @@GLOBAL.gtid_binlog_pos").Scan(&got)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica at %q, primary at %q", got, want)
		}
	}
}

// savedServer is the server the file checkpoint of sink "out" was read from.
func savedServer(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Checkpoints map[string]struct {
			Position event.Position `json:"position"`
		} `json:"checkpoints"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return f.Checkpoints["out"].Position.Server
}

// A primary and two replicas replicating by GTID with log_slave_updates,
// listed replica A, replica B, primary. The relay reads A; A is SIGKILLed
// mid-stream and the relay goes on from B; B is killed too and the primary
// takes over. Nothing committed is lost.
func TestFailoverAcrossReplicasAndThePrimary(t *testing.T) {
	replicaArgs := []string{"--log-slave-updates", "--read-only", "--gtid-strict-mode=1"}
	p := testserver.Start(t, testserver.Options{ServerID: 61, ExtraArgs: []string{"--gtid-strict-mode=1"}})
	a := testserver.Start(t, testserver.Options{ServerID: 62, ExtraArgs: replicaArgs})
	b := testserver.Start(t, testserver.Options{ServerID: 63, ExtraArgs: replicaArgs})
	replicate(t, p, a)
	replicate(t, p, b)
	p.Exec(t, "CREATE DATABASE shop", "USE shop; "+outboxtest.Schema)
	caughtUp(t, p, a)
	caughtUp(t, p, b)
	addr := func(s *testserver.Server) string { return fmt.Sprintf("127.0.0.1:%d", s.Port) }
	cpPath := filepath.Join(t.TempDir(), "cp.json")
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {servers: ["%s", "%s", "%s"], user: root, server_id: %d, heartbeat: 500ms, read_timeout: 1500ms, max_reconnect_backoff: 300ms, failover_after: 1s}
tables: [{name: shop.outbox}]
checkpoint: {path: %s, interval: 100ms}
sinks: [{name: out, type: stdout}]
`, addr(a), addr(b), addr(p), testserver.ServerID(), cpPath)))
	if err != nil {
		t.Fatal(err)
	}
	out := &lines{}
	ctx := context.Background()
	logs := &lines{}
	rl := startRelay(t, cfg, relay.Options{Stdout: out, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	waitForCheckpoint(t, cpPath)
	db := p.DB(t, "shop")
	delivered := func(n int, what string) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if len(out.events(t)) >= n {
				return
			}
			if err, stopped := rl.exited(0); stopped {
				t.Fatalf("relay stopped: %v\n%s", err, logs.String())
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d of %d events delivered\n%s", what, len(out.events(t)), n, logs.String())
			}
		}
	}
	w := []*outboxtest.Workload{{Prefix: "a-"}, {Prefix: "b-"}, {Prefix: "p-"}}
	outboxtest.Produce(ctx, t, db, w[0], 2, 20, []int{1, 2}, 5)
	delivered(w[0].Events(), "reading replica A")
	if got := savedServer(t, cpPath); got != addr(a) {
		t.Fatalf("the checkpoint was read from %q, want replica A %s", got, addr(a))
	}

	start := time.Now()
	a.Kill(t)
	outboxtest.Produce(ctx, t, db, w[1], 2, 20, []int{1, 2}, 5)
	delivered(w[0].Events()+w[1].Events(), "after replica A was killed")
	t.Logf("replica A killed: the relay read on from B within %s", time.Since(start).Round(10*time.Millisecond))

	start = time.Now()
	b.Kill(t)
	outboxtest.Produce(ctx, t, db, w[2], 2, 20, []int{1, 2}, 5)
	delivered(w[0].Events()+w[1].Events()+w[2].Events(), "after replica B was killed")
	t.Logf("replica B killed: the relay read on from the primary within %s", time.Since(start).Round(10*time.Millisecond))
	time.Sleep(300 * time.Millisecond) // a checkpoint save
	if got := savedServer(t, cpPath); got != addr(p) {
		t.Errorf("the checkpoint was read from %q, want the primary %s", got, addr(p))
	}
	if err := rl.stop(t); err != nil {
		t.Fatalf("relay: %v", err)
	}
	byPrefix := map[string][]outboxtest.Delivered{}
	for _, e := range out.events(t) {
		byPrefix[e.ID[:2]] = append(byPrefix[e.ID[:2]], outboxtest.Delivered{ID: e.ID, AggregateID: e.AggregateID})
	}
	dups := 0
	for i, pre := range []string{"a-", "b-", "p-"} {
		rep := outboxtest.Check(t, w[i], byPrefix[pre], false)
		dups += rep.Duplicates
	}
	if n := strings.Count(logs.String(), "binlog source failover"); n != 2 {
		t.Errorf("%d failovers logged, want 2 (A→B, B→primary)", n)
	}
	t.Logf("two failovers: %d events, %d duplicates", len(out.events(t)), dups)
}

// Pick skips a replica that is behind the checkpoint (saying by how much)
// and chooses it again once it has caught up; it never picks a server that
// cannot serve the checkpoint.
func TestPickSkipsAReplicaBehindTheCheckpointUntilItCatchesUp(t *testing.T) {
	p := testserver.Start(t, testserver.Options{ServerID: 71})
	a := testserver.Start(t, testserver.Options{ServerID: 72, ExtraArgs: []string{"--log-slave-updates"}})
	replicate(t, p, a)
	p.Exec(t, "CREATE DATABASE shop", "USE shop; "+outboxtest.Schema)
	caughtUp(t, p, a)
	a.Exec(t, "STOP SLAVE")
	outboxtest.Produce(context.Background(), t, p.DB(t, "shop"), &outboxtest.Workload{}, 1, 5, []int{1}, 5)
	var pos event.Position
	p.DB(t, "").QueryRow("SELECT @@GLOBAL.gtid_binlog_pos").Scan(&pos.GTIDSet)

	cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {servers: ["127.0.0.1:%d", "127.0.0.1:%d"], user: root}
tables: [{name: shop.outbox}]
sinks: [{name: out, type: stdout}]
`, a.Port, p.Port)))
	if err != nil {
		t.Fatal(err)
	}
	logs := &lines{}
	set := source.NewSet(cfg.Source, slog.New(slog.NewTextHandler(logs, nil)))
	defer set.Close()
	ctx := context.Background()
	ep, _, err := set.Pick(ctx, "mariadb", pos)
	if err != nil || int(ep.Port) != p.Port {
		t.Fatalf("Pick = %v, %v; want the primary (port %d) while replica A is behind", ep, err, p.Port)
	}
	if !strings.Contains(logs.String(), "behind the checkpoint") || !strings.Contains(logs.String(), fmt.Sprintf("127.0.0.1:%d", a.Port)) {
		t.Errorf("no log line says replica A is behind:\n%s", logs.String())
	}
	a.Exec(t, "START SLAVE")
	caughtUp(t, p, a)
	if ep, _, err = set.Pick(ctx, "mariadb", pos); err != nil || int(ep.Port) != a.Port {
		t.Fatalf("Pick = %v, %v; want replica A (port %d), listed first, once it caught up", ep, err, a.Port)
	}
	// A position neither server has executed: none is picked.
	if _, _, err := set.Pick(ctx, "mariadb", event.Position{GTIDSet: "0-71-999999"}); err == nil || !strings.Contains(err.Error(), "behind the checkpoint") {
		t.Fatalf("Pick of a position no server has = %v, want an error saying each is behind", err)
	}
}
