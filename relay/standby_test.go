package relay_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/relay"
)

// Two relays on one checkpoint store: one is active, the other waits as a
// hot standby and takes over, from the checkpoint, when the first stops.
func TestStandbyTakesOverFromTheCheckpoint(t *testing.T) {
	for _, store := range []string{"file", "mysql"} {
		t.Run(store, func(t *testing.T) {
			dbname, w := newOutbox(t)
			db := srv.DB(t, dbname)
			cpdb := srv.NewDatabase(t)
			cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %s.outbox}]
checkpoint: {store: %s, path: %s, dsn: "root@tcp(127.0.0.1:%d)/%s?parseTime=true", interval: 100ms}
sinks: [{name: out, type: stdout}]
`, srv.Port, testserver.ServerID(), dbname, store, filepath.Join(t.TempDir(), "cp.json"), srv.Port, cpdb)))
			if err != nil {
				t.Fatal(err)
			}
			// B, the standby, serves /readyz.
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			cfgB := *cfg
			cfgB.HTTP.Listen = l.Addr().String()
			l.Close()
			start := func(cfg *config.Config, out *lines) *run {
				return startRelay(t, cfg, relay.Options{Stdout: out, Logger: slog.New(slog.DiscardHandler)})
			}
			outA, outB := &lines{}, &lines{}
			a := start(cfg, outA)
			// A is active once its start checkpoint is saved.
			if store == "file" {
				waitForCheckpoint(t, cfg.Checkpoint.Path)
			} else {
				for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
					var n int
					srv.DB(t, cpdb).QueryRow("SELECT COUNT(*) FROM outbox_relay_checkpoints WHERE name = 'out'").Scan(&n)
					if n == 1 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("the first relay saved no checkpoint")
					}
				}
			}
			// A is active once it delivers.
			w1 := &outboxtest.Workload{Prefix: "one-"}
			for deadline := time.Now().Add(20 * time.Second); len(outA.events(t)) == 0; time.Sleep(50 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the first relay delivered nothing")
				}
				if w1.Events() == 0 {
					outboxtest.Produce(context.Background(), t, db, w1, 1, 5, []int{2}, 3)
				}
			}
			b := start(&cfgB, outB)
			defer b.stop(t)
			// B's /readyz says it is a standby waiting for the lock, not a fault.
			var readyz string
			code := 0
			for deadline := time.Now().Add(20 * time.Second); !strings.Contains(readyz, "standby"); time.Sleep(50 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the standby's /readyz = %d %q, want it to say it is a standby", code, readyz)
				}
				if resp, err := http.Get("http://" + cfgB.HTTP.Listen + "/readyz"); err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					readyz, code = string(b), resp.StatusCode
				}
			}
			if code != http.StatusServiceUnavailable || strings.Contains(readyz, "not connected") {
				t.Fatalf("the standby's /readyz = %d %q", code, readyz)
			}
			outboxtest.Produce(context.Background(), t, db, w, 1, 20, []int{2}, 3)
			for deadline := time.Now().Add(20 * time.Second); len(outA.events(t)) < w1.Events()+w.Events() && time.Now().Before(deadline); {
				time.Sleep(50 * time.Millisecond)
			}
			if got, want := len(outA.events(t)), w1.Events()+w.Events(); got != want {
				t.Fatalf("the active relay delivered %d of %d", got, want)
			}
			if n := len(outB.events(t)); n != 0 {
				t.Fatalf("the standby delivered %d events while the active relay ran", n)
			}
			if err := a.stop(t); err != nil {
				t.Fatal(err)
			}
			w2 := &outboxtest.Workload{Prefix: "two-"}
			outboxtest.Produce(context.Background(), t, db, w2, 1, 20, []int{2}, 3)
			for deadline := time.Now().Add(20 * time.Second); len(outB.events(t)) < w2.Events() && time.Now().Before(deadline); {
				time.Sleep(50 * time.Millisecond)
			}
			seen := map[string]bool{}
			for _, e := range append(outA.events(t), outB.events(t)...) {
				if seen[e.ID] {
					t.Errorf("event %s delivered twice across a clean hand-over", e.ID)
				}
				seen[e.ID] = true
			}
			if want := w1.Events() + w.Events() + w2.Events(); len(seen) != want {
				t.Fatalf("delivered %d distinct events across the hand-over, want %d", len(seen), want)
			}
		})
	}
}

// An active relay whose lock connection dies stops (a standby may be active
// now) instead of delivering beside it.
func TestLosingTheMySQLLockStopsTheRelay(t *testing.T) {
	dbname, _ := newOutbox(t)
	cpdb := srv.NewDatabase(t)
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %s.outbox}]
checkpoint: {store: mysql, dsn: "root@tcp(127.0.0.1:%d)/%s?parseTime=true", table: cp_lost}
sinks: [{name: out, type: stdout}]
`, srv.Port, testserver.ServerID(), dbname, srv.Port, cpdb)))
	if err != nil {
		t.Fatal(err)
	}
	rl := startRelay(t, cfg, relay.Options{Stdout: &lines{}, Logger: slog.New(slog.DiscardHandler)})
	db := srv.DB(t, "")
	var holder sql.NullInt64
	for deadline := time.Now().Add(20 * time.Second); !holder.Valid; time.Sleep(50 * time.Millisecond) {
		db.QueryRow("SELECT IS_USED_LOCK(?)", checkpoint.MySQLLockName(cpdb, "cp_lost")).Scan(&holder)
		if time.Now().After(deadline) {
			t.Fatal("the relay never took its lock")
		}
	}
	if _, err := db.Exec(fmt.Sprintf("KILL %d", holder.Int64)); err != nil {
		t.Fatal(err)
	}
	err, stopped := rl.exited(30 * time.Second)
	if !stopped {
		t.Fatal("the relay kept running after losing its lock")
	}
	if err == nil || !strings.Contains(err.Error(), "lost the checkpoint lock") {
		t.Fatalf("Run = %v, want the lost-lock error", err)
	}
}
