package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testserver"
)

// runMain runs the command in-process and returns its exit code and output.
func runMain(t *testing.T, ctx context.Context, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := mainCode(ctx, args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func checkConfig(t *testing.T, port int) string {
	return writeFile(t, "relay.yaml", fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d}
tables: [{name: shop.outbox}]
checkpoint: {path: %s}
sinks: [{name: out, type: stdout}]
log: {level: info}
`, port, testserver.ServerID(), filepath.Join(t.TempDir(), "checkpoints.json")))
}

func TestCheckCommand(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{ServerID: 3})
	t.Cleanup(func() {
		// SHUTDOWN stops the server at once, so Stop need not wait.
		if db, err := sql.Open("mysql", srv.DSN("")); err == nil {
			_, _ = db.Exec("SHUTDOWN")
			db.Close()
		}
	})
	srv.Exec(t, "CREATE DATABASE shop", "CREATE TABLE shop.outbox (id CHAR(36) PRIMARY KEY, aggregatetype VARCHAR(64), aggregateid VARCHAR(64), type VARCHAR(64), payload JSON)")
	cfg := checkConfig(t, srv.Port)
	ctx := context.Background()

	t.Run("a good server exits 0", func(t *testing.T) {
		code, out, errOut := runMain(t, ctx, "check", "--config", cfg)
		if code != 0 || !strings.Contains(out, "PASS  binlog_format") || strings.Contains(out, "FAIL") {
			t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
	})

	t.Run("a bad server exits 1 with the FAIL line and its fix", func(t *testing.T) {
		srv.Exec(t, "SET GLOBAL binlog_format = 'STATEMENT'")
		defer srv.Exec(t, "SET GLOBAL binlog_format = 'ROW'")
		code, out, errOut := runMain(t, ctx, "check", "--config", cfg)
		if code != 1 || !strings.Contains(out, "FAIL  binlog_format             binlog_format is STATEMENT") ||
			!strings.Contains(out, "fix: SET GLOBAL binlog_format = 'ROW' and binlog_format=ROW in my.cnf [mysqld]") ||
			!strings.Contains(errOut, "outbox-relay check: 1 check(s) FAILED: binlog_format") {
			t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
	})

	t.Run("run refuses to start on a FAIL", func(t *testing.T) {
		srv.Exec(t, "SET GLOBAL binlog_format = 'STATEMENT'")
		defer srv.Exec(t, "SET GLOBAL binlog_format = 'ROW'")
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		code, _, errOut := runMain(t, ctx, "run", "--config", cfg)
		if code != 1 || !strings.Contains(errOut, "FAIL  binlog_format") || !strings.Contains(errOut, "refusing to start: 1 check(s) FAILED: binlog_format") {
			t.Errorf("exit %d\nstderr:\n%s", code, errOut)
		}
	})

	t.Run("run --allow-fail starts and says so at warn level", func(t *testing.T) {
		srv.Exec(t, "SET GLOBAL binlog_format = 'STATEMENT'")
		defer srv.Exec(t, "SET GLOBAL binlog_format = 'ROW'")
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		time.AfterFunc(2*time.Second, cancel) // stop the relay, as SIGTERM would
		code, _, errOut := runMain(t, ctx, "run", "--config", cfg, "--allow-fail", "binlog_format", "--allow-fail", "server_id")
		if code != 0 || !strings.Contains(errOut, `level=WARN msg="check binlog_format FAILED but was downgraded by --allow-fail"`) ||
			!strings.Contains(errOut, "pipeline starting") {
			t.Errorf("exit %d\nstderr:\n%s", code, errOut)
		}
	})

	t.Run("run warns of outbox growth once it has started", func(t *testing.T) {
		srv.Exec(t, "ALTER TABLE shop.outbox ADD COLUMN created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)",
			"INSERT INTO shop.outbox (id, aggregatetype, aggregateid, type, payload, created_at) VALUES ('g1', 'order', 'o1', 'created', '{}', '2020-01-02 03:04:05')")
		defer srv.Exec(t, "DELETE FROM shop.outbox", "ALTER TABLE shop.outbox DROP COLUMN created_at")
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		// Stop the relay (as SIGTERM would) once it has logged the warning.
		stderr := &watchWriter{want: "check=outbox_growth", seen: cancel}
		code := mainCode(ctx, []string{"run", "--config", cfg}, &bytes.Buffer{}, stderr)
		out := stderr.String()
		// Made after the startup checks, not among them.
		done, growth := strings.Index(out, "startup checks done"), strings.Index(out, `level=WARN msg="check warning" check=outbox_growth detail="shop.outbox holds rows`)
		if code != 0 || done < 0 || growth < done || ctx.Err() == context.DeadlineExceeded {
			t.Errorf("exit %d\nstderr:\n%s", code, out)
		}
	})

	t.Run("run rejects an unknown --allow-fail name", func(t *testing.T) {
		code, _, errOut := runMain(t, ctx, "run", "--config", cfg, "--allow-fail", "binlog_fromat")
		if code != 1 || !strings.Contains(errOut, `--allow-fail "binlog_fromat" is not a check; the checks are server, log_bin, binlog_format`) {
			t.Errorf("exit %d\nstderr:\n%s", code, errOut)
		}
	})
}

func TestCheckCommandReportsConfigAndConnectionErrors(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cases := []struct {
		name, config, want string
	}{
		{"a missing file", filepath.Join(t.TempDir(), "nope.yaml"), "outbox-relay check: read config: open "},
		{"not YAML", writeFile(t, "bad.yaml", "source: [unclosed\n"), "not valid YAML"},
		{"an unknown key", writeFile(t, "unknown.yaml", "source: {hots: x}\n"), "source.hots"},
		{"a server that does not answer", checkConfig(t, closedPort), fmt.Sprintf(`connect to source 127.0.0.1:%d as "root": `, closedPort)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := runMain(t, context.Background(), "check", "--config", c.config)
			if code != 1 || !strings.Contains(errOut, c.want) || out != "" || strings.Contains(errOut, "panic") {
				t.Errorf("exit %d, want stderr containing %q\nstdout:\n%s\nstderr:\n%s", code, c.want, out, errOut)
			}
		})
	}
}

// watchWriter collects what is written and calls seen once it holds want.
type watchWriter struct {
	mu   sync.Mutex
	b    bytes.Buffer
	want string
	seen func()
}

func (w *watchWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.b.Write(p)
	if w.seen != nil && strings.Contains(w.b.String(), w.want) {
		w.seen()
		w.seen = nil
	}
	return n, err
}

func (w *watchWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
