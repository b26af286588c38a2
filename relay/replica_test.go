package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/check"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/relay"
)

// replicate makes replica follow primary by GTID and waits until it runs.
func replicate(t *testing.T, primary, replica *testserver.Server) {
	t.Helper()
	replica.Exec(t, fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%d, MASTER_USER='root', MASTER_USE_GTID=slave_pos", primary.Port),
		"START SLAVE")
	db := replica.DB(t, "")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var name, running string
		if err := db.QueryRow("SHOW GLOBAL STATUS LIKE 'Slave_running'").Scan(&name, &running); err == nil && running == "ON" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("replication did not start")
		}
	}
}

// Read replicas: with log_slave_updates the relay reads a replica's binlog
// and delivers what the application commits on the primary; without it,
// check says why nothing would arrive.
func TestRelayReadsFromAReadReplica(t *testing.T) {
	primary := testserver.Start(t, testserver.Options{ServerID: 21})
	replica := testserver.Start(t, testserver.Options{ServerID: 22, ExtraArgs: []string{"--log-slave-updates", "--read-only"}})
	plain := testserver.Start(t, testserver.Options{ServerID: 23})
	replicate(t, primary, replica)
	replicate(t, primary, plain)
	primary.Exec(t, "CREATE DATABASE shop", "USE shop; "+outboxtest.Schema)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var n int
		replica.DB(t, "").QueryRow("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'shop' AND TABLE_NAME = 'outbox'").Scan(&n)
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the outbox table never reached the replica")
		}
	}

	parse := func(s *testserver.Server) *config.Config {
		cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: shop.outbox}]
checkpoint: {path: %s, interval: 100ms}
sinks: [{name: out, type: stdout}]
`, s.Port, testserver.ServerID(), filepath.Join(t.TempDir(), "cp.json"))))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	ctx := context.Background()
	rep, err := check.Run(ctx, parse(plain), check.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := rep.Get(check.NameReplicaUpdates)
	if len(got) != 1 || got[0].Status != check.Fail || !strings.Contains(got[0].Fix, "log_slave_updates=ON") {
		t.Fatalf("check on a replica without log_slave_updates: %+v", got)
	}
	rep, err = check.Run(ctx, parse(replica), check.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.Get(check.NameReplicaUpdates); len(got) != 1 || got[0].Status != check.Pass {
		t.Fatalf("check on a replica with log_slave_updates: %+v", got)
	}

	cfg := parse(replica)
	out := &lines{}
	rl := startRelay(t, cfg, relay.Options{Stdout: out, Logger: slog.New(slog.DiscardHandler)})
	waitForCheckpoint(t, cfg.Checkpoint.Path)
	w := &outboxtest.Workload{}
	outboxtest.Produce(ctx, t, primary.DB(t, "shop"), w, 2, 20, []int{1, 3}, 10)
	for deadline := time.Now().Add(30 * time.Second); len(out.events(t)) < w.Events() && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	if err := rl.stop(t); err != nil {
		t.Fatalf("relay on the replica: %v", err)
	}
	var d []outboxtest.Delivered
	for _, e := range out.events(t) {
		d = append(d, outboxtest.Delivered{ID: e.ID, AggregateID: e.AggregateID, GTID: e.GTID})
	}
	rep2 := outboxtest.Check(t, w, d, true)
	t.Logf("via the replica: %d committed on the primary, %d delivered", rep2.Committed, rep2.Delivered)
}
