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
