package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A kind's own audit flag (sink.Kind.AuditFlags) is offered by audit's
// usage, and given for a sink of another kind it is refused, naming it,
// before anything is read.
func TestAuditFlagsAreTheKindsOwn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(path, []byte(`source: {host: 127.0.0.1, port: 1, user: root}
tables: [{name: shop.outbox}]
checkpoint: {path: cp.json}
sinks: [{name: cache, type: redis, redis: {addr: "127.0.0.1:1"}}]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out := run(context.Background(), "audit", "--help")
	if !strings.Contains(out, "[--queue NAME]") || !strings.Contains(out, "rabbitmq: the stream queue") {
		t.Errorf("audit --help (exit %d) does not offer rabbitmq's --queue:\n%s", code, out)
	}
	code, out = run(context.Background(), "audit", "--config", path, "--sink", "cache", "--from", "0-1-1", "--queue", "q")
	if code == 0 || !strings.Contains(out, "--queue is not a setting of a redis sink's audit") {
		t.Errorf("audit of a redis sink with --queue: exit %d, %q; want it refused", code, out)
	}
}
