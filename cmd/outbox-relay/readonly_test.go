package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testserver"
)

// pruneTable is an outbox table prune can prune: a server-set timestamp.
const pruneTable = `CREATE TABLE outbox (
  id VARCHAR(64) NOT NULL PRIMARY KEY,
  aggregatetype VARCHAR(64) NOT NULL,
  aggregateid VARCHAR(64) NOT NULL,
  type VARCHAR(64) NOT NULL,
  payload JSON NOT NULL,
  created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  KEY (created_at)
)`

// status, dlq list and prune read the source, the checkpoints and the
// dead letters: a webhook secret's unset ${ENV} does not stop them, while
// run and check still refuse it with the clear error.
func TestReadOnlyCommandsNeedNoSinkSecrets(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{ServerID: 13})
	dbname := srv.NewDatabase(t)
	srv.Exec(t, "CREATE TABLE `"+dbname+"`."+strings.TrimPrefix(pruneTable, "CREATE TABLE "))
	os.Unsetenv("OUTBOX_TEST_HOOK_SECRET")
	dir := t.TempDir()
	cfg := writeFile(t, "relay.yaml", fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root}
tables: [{name: %s.outbox}]
checkpoint: {path: %s}
sinks:
  - name: hooks
    type: webhook
    webhook: {endpoints: [{name: a, url: "https://hooks.example/", secrets: ["${OUTBOX_TEST_HOOK_SECRET}"]}]}
`, srv.Port, dbname, filepath.Join(dir, "checkpoints.json")))
	ctx := context.Background()
	for _, args := range [][]string{
		{"status", "--config", cfg},
		{"dlq", "list", "--config", cfg},
		{"dlq", "purge", "--config", cfg, "--all"},
		{"prune", "--config", cfg, "--dry-run"},
		{"prune", "--config", cfg},
	} {
		if code, out, errOut := runMain(t, ctx, args...); code != 0 {
			t.Errorf("%s: exit %d\n%s%s", strings.Join(args[:2], " "), code, out, errOut)
		}
	}
	for _, args := range [][]string{{"run", "--config", cfg}, {"check", "--config", cfg}, {"dlq", "replay", "--config", cfg, "--all"}} {
		code, out, errOut := runMain(t, ctx, args...)
		if code == 0 || !strings.Contains(errOut, "environment variable OUTBOX_TEST_HOOK_SECRET is not set: export it") {
			t.Errorf("%s: exit %d, want the unset variable's error\n%s%s", args[0], code, out, errOut)
		}
	}
}
