package main

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
)

// A time-based audit reads binlog file starts with go-mysql syncers: their
// INFO lines (every connect, the whole syncer config) are the relay's
// Debug, tagged component=go-mysql, and never reach an info-level log.
func TestAuditFromATimeLogsNoGoMySQLLines(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{ServerID: 14})
	dbname := srv.NewDatabase(t)
	if _, err := srv.DB(t, dbname).Exec(outboxtest.Schema); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := writeFile(t, "relay.yaml", fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root}
tables: [{name: %s.outbox}]
checkpoint: {path: %s}
sinks: [{name: hooks, type: webhook, webhook: {endpoints: [{name: a, url: "http://127.0.0.1:9/"}]}}]
log: {level: info}
`, srv.Port, dbname, filepath.Join(dir, "checkpoints.json")))
	from := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	code, out, errOut := runMain(t, context.Background(), "audit", "--config", cfg, "--sink", "hooks", "--from", from)
	if !strings.Contains(out+errOut, "hooks") {
		t.Fatalf("audit did not run: exit %d\n%s%s", code, out, errOut)
	}
	for _, raw := range []string{"create BinlogSyncer", "begin to sync", "Connected to server", "syncer is clos", "component=go-mysql"} {
		if strings.Contains(errOut, raw) {
			t.Errorf("go-mysql's %q reached the info-level log:\n%s", raw, errOut)
		}
	}
}

// go-redis writes its own lines ("redis: … pool.go:770: … failed to dial")
// straight to stderr unless given a logger: through the command's logger
// they are Debug records, so a check of a Redis sink that is down prints
// only check's own lines.
func TestNoRawGoRedisLinesReachStderr(t *testing.T) {
	if testing.Short() {
		t.Skip("process test skipped with -short")
	}
	bin := buildBinary(t)
	// A port nothing listens on, for the source and for Redis.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cfg := writeFile(t, "relay.yaml", fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root}
tables: [{name: shop.outbox}]
checkpoint: {path: %s}
sinks: [{name: r, type: redis, redis: {addr: "127.0.0.1:%d", stream: outbox, timeout: 2s}}]
log: {level: info}
`, closed, filepath.Join(t.TempDir(), "checkpoints.json"), closed))
	cmd := exec.Command(bin, "check", "--config", cfg)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, _ := cmd.Output()
	if !strings.Contains(string(stdout), "sinks") {
		t.Fatalf("check did not probe the redis sink:\n%s%s", stdout, stderr.String())
	}
	for _, raw := range []string{"pool.go", "redis: connection pool", "failed to dial"} {
		if strings.Contains(stderr.String(), raw) || strings.Contains(string(stdout), raw) {
			t.Errorf("a raw go-redis line (%q) reached the output:\nstdout:\n%s\nstderr:\n%s", raw, stdout, stderr.String())
		}
	}
}
