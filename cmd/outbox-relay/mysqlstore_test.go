package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/eventually"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
)

// The checkpoint DSNs the deploy files ship, with only the host:port changed:
// the relay must restart on them (a DSN without parseTime once failed every
// start after the first checkpoint save).
func shippedCheckpointDSNs(t *testing.T) map[string]string {
	t.Helper()
	re := regexp.MustCompile(`dsn: (\S+@tcp\([^)]*\)/\S+)`)
	out := map[string]string{}
	for _, f := range []string{"../../deploy/k8s/configmap.yaml", "../../deploy/config.example.yaml"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		m := re.FindSubmatch(b)
		if m == nil {
			t.Fatalf("%s: no checkpoint dsn found", f)
		}
		out[filepath.Base(f)] = string(m[1])
	}
	return out
}

func TestRelayRestartsOnTheShippedMySQLCheckpointDSNs(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{ServerID: 14})
	srv.Exec(t, "CREATE DATABASE shop",
		"CREATE TABLE shop.outbox (id CHAR(36) PRIMARY KEY, aggregatetype VARCHAR(64), aggregateid VARCHAR(64), type VARCHAR(64), payload JSON)",
		"CREATE DATABASE outbox_relay",
		"CREATE USER 'relay'@'%' IDENTIFIED BY 'cp-secret-1'",
		"GRANT ALL ON outbox_relay.* TO 'relay'@'%'")
	t.Setenv("RELAY_CP_PASSWORD", "cp-secret-1")
	hostPort := regexp.MustCompile(`tcp\([^)]*\)`)
	n := 0
	for file, dsn := range shippedCheckpointDSNs(t) {
		n++
		t.Run(file, func(t *testing.T) {
			dsn := hostPort.ReplaceAllString(dsn, fmt.Sprintf("tcp(127.0.0.1:%d)", srv.Port))
			if strings.Contains(dsn, "parseTime") {
				t.Fatalf("%s: the shipped DSN %q sets parseTime; this test is about one that does not", file, dsn)
			}
			table := fmt.Sprintf("cp_%d", n)
			cfg := writeFile(t, "relay.yaml", fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d}
tables: [{name: shop.outbox}]
checkpoint: {store: mysql, dsn: "%s", table: %s, interval: 100ms, start: earliest}
dead_letter: {store: mysql, table: dl_%d}
sinks: [{name: out, type: stdout}]
`, srv.Port, testserver.ServerID(), dsn, table, n))
			run := func(id string) string {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				var out, errOut syncBuffer
				done := make(chan int, 1)
				go func() { done <- mainCode(ctx, []string{"run", "--config", cfg}, &out, &errOut) }()
				srv.Exec(t, fmt.Sprintf(`INSERT INTO shop.outbox VALUES ('%s', 'order', 'a1', 'created', '{}')`, id))
				for deadline := time.Now().Add(20 * time.Second); !strings.Contains(out.String(), id); time.Sleep(50 * time.Millisecond) {
					select {
					case code := <-done:
						t.Fatalf("run exited %d before delivering %s:\n%s", code, id, errOut.String())
					default:
					}
					if time.Now().After(deadline) {
						t.Fatalf("event %s not delivered:\n%s", id, errOut.String())
					}
				}
				time.Sleep(300 * time.Millisecond) // a checkpoint save
				cancel()
				if code := <-done; code != 0 {
					t.Fatalf("run exited %d:\n%s", code, errOut.String())
				}
				return out.String()
			}
			run(fmt.Sprintf("first-%d", n))
			var out, errOut bytes.Buffer
			if code := mainCode(context.Background(), []string{"check", "--config", cfg}, &out, &errOut); code != 0 {
				t.Fatalf("check after a save exited %d:\n%s%s", code, out.String(), errOut.String())
			}
			if second := run(fmt.Sprintf("second-%d", n)); strings.Contains(second, fmt.Sprintf("first-%d", n)) {
				t.Errorf("the restart delivered the first event again: it did not resume from its checkpoint:\n%s", second)
			}
		})
	}
}

// With the MySQL checkpoint store on the source server, a checkpoint save
// is itself a transaction in the binlog the relay reads. The relay passes
// over its own saves: it saves once for what it delivered, not again for
// the save it just wrote (an idle relay used to write a save every
// checkpoint.min_interval, forever: ~93 transactions a second).
func TestACheckpointSaveOnTheSourceDoesNotAskForAnother(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	srv.Exec(t, "CREATE DATABASE shop",
		"CREATE TABLE shop.outbox (id CHAR(36) PRIMARY KEY, aggregatetype VARCHAR(64), aggregateid VARCHAR(64), type VARCHAR(64), payload JSON)",
		"CREATE DATABASE outbox_relay")
	cfg := writeFile(t, "relay.yaml", fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d}
tables: [{name: shop.outbox}]
checkpoint: {store: mysql, dsn: "root@tcp(127.0.0.1:%d)/outbox_relay", table: cp, start: earliest}
sinks: [{name: out, type: stdout}]
`, srv.Port, testserver.ServerID(), srv.Port))
	db := srv.DB(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() { done <- mainCode(ctx, []string{"run", "--config", cfg}, &out, &errOut) }()
	seq := func() int64 { // the binlog's last transaction in domain 0
		var pos string
		if err := db.QueryRow("SELECT @@gtid_binlog_pos").Scan(&pos); err != nil {
			t.Fatal(err)
		}
		var d, s, n int64
		fmt.Sscanf(pos, "%d-%d-%d", &d, &s, &n)
		return n
	}
	insert := func(id string) int64 { // the insert's own GTID sequence number
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, fmt.Sprintf(`INSERT INTO shop.outbox VALUES ('%s', 'order', 'a1', 'created', '{}')`, id)); err != nil {
			t.Fatal(err)
		}
		var last string
		if err := conn.QueryRowContext(ctx, "SELECT @@last_gtid").Scan(&last); err != nil {
			t.Fatal(err)
		}
		var d, s, n int64
		fmt.Sscanf(last, "%d-%d-%d", &d, &s, &n)
		return n
	}
	saved := func(n int64) func() bool { // the checkpoint covers transaction n
		return func() bool {
			var gtid string
			if err := db.QueryRow("SELECT gtid_set FROM outbox_relay.cp WHERE name = 'out'").Scan(&gtid); err != nil {
				return false
			}
			var d, s, m int64
			fmt.Sscanf(gtid, "%d-%d-%d", &d, &s, &m)
			return m >= n
		}
	}
	y := insert("y")
	eventually.Within(t, time.Minute, "the checkpoint to cover y", saved(y))
	before := seq()
	z := insert("z") // read after every save of y's
	eventually.Within(t, time.Minute, "the checkpoint to cover z", saved(z))
	eventually.Within(t, time.Minute, "z delivered", func() bool { return strings.Contains(out.String(), `"id":"z"`) })
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("run exited %d:\n%s", code, errOut.String())
	}
	// Between before and the end: z, and the one save of z's transaction;
	// no save for a save.
	if own := seq() - before - 1; own != 1 {
		t.Errorf("the relay wrote %d transactions for one event delivered, want its one save: its checkpoint saves ask for more saves", own)
	}
}
