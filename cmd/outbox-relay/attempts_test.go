package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/attempts"
	"github.com/outbox-relay/outbox-relay/internal/eventually"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/receiver"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
)

// The built binary records every attempt: an endpoint that answers 500
// then 200 shows both, with the 500's answer. `outbox-relay attempts`
// finds them
// while the relay runs (it holds the file: the command asks it over
// http.listen) and after it stopped (from the file).
func TestAttemptsCommandFindsEveryAttemptOfTheBinary(t *testing.T) {
	bin := buildBinary(t)
	srv := testserver.Start(t, testserver.Options{ServerID: 1})
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	if _, err := db.Exec(outboxtest.Schema); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	hook := receiver.Start(t, func(r *http.Request, _ []byte, _ time.Duration) receiver.Reply {
		mu.Lock()
		defer mu.Unlock()
		if id := r.Header.Get("webhook-id"); !seen[id] {
			seen[id] = true
			return receiver.Reply{Status: 500, Body: "busy, try later"}
		}
		return receiver.Reply{Status: 200}
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "relay.yaml")
	cpPath := filepath.Join(dir, "checkpoints.json")
	cfg := fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %s.outbox}]
checkpoint: {path: %s, interval: 100ms}
http: {listen: "%s"}
attempts: {enabled: true, interval: 20ms}
log: {level: warn}
sinks:
  - name: hooks
    type: webhook
    webhook:
      endpoints:
        - {name: flaky, url: "%s/in", body: envelope, retry: {initial_backoff: 10ms, max_backoff: 50ms}}
`, srv.Port, testserver.ServerID(), dbname, cpPath, listen, hook.URL)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cmd := startRelay(t, bin, cfgPath, os.Stdout, &logs)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	waitForFile(t, cpPath, 60*time.Second)
	if _, err := os.Stat(cpPath + ".attempts"); err != nil {
		t.Fatalf("no attempts file beside the checkpoint: %v", err)
	}
	if _, err := db.Exec("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ('ev-1', 'order', 'o1', 'created', '{}')"); err != nil {
		t.Fatal(err)
	}
	eventually.Within(t, 60*time.Second, "ev-1 accepted", func() bool { return hook.Unique() == 1 })

	search := func(args ...string) []attempts.Record {
		t.Helper()
		c := exec.Command(bin, append([]string{"attempts", "--config", cfgPath, "--json"}, args...)...)
		var out, errOut bytes.Buffer
		c.Stdout, c.Stderr = &out, &errOut
		if err := c.Run(); err != nil {
			t.Fatalf("attempts %v: %v\n%s", args, err, errOut.String())
		}
		var recs []attempts.Record
		for line := range strings.SplitSeq(strings.TrimSpace(out.String()), "\n") {
			if line == "" {
				continue
			}
			var r attempts.Record
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			recs = append(recs, r)
		}
		return recs
	}
	check := func(when string) {
		var flaky []attempts.Record
		eventually.Within(t, 30*time.Second, when+": both attempts of ev-1 at flaky on record", func() bool {
			flaky = search("--event", "ev-1", "--endpoint", "hooks/flaky")
			return len(flaky) == 2
		})
		ok, failed := flaky[0], flaky[1]
		if failed.Status != 500 || failed.Number != 1 || failed.Outcome != "retry" || string(failed.Answer) != "busy, try later" || failed.Duration <= 0 {
			t.Errorf("%s: first attempt %+v", when, failed)
		}
		if ok.Status != 200 || ok.Number != 2 || ok.Outcome != "delivered" || ok.Duration <= 0 || ok.Time.Before(failed.Time) {
			t.Errorf("%s: second attempt %+v", when, ok)
		}
		if recs := search("--status", "500"); len(recs) != 1 || recs[0].ID != failed.ID {
			t.Errorf("%s: --status 500 finds %+v", when, recs)
		}
		if recs := search("--since", "1h", "--sink", "hooks", "--endpoint", "flaky"); len(recs) != 2 {
			t.Errorf("%s: --since 1h finds %d", when, len(recs))
		}
		if recs := search("--failed"); len(recs) != 1 || recs[0].ID != failed.ID {
			t.Errorf("%s: --failed finds %+v", when, recs)
		}
	}
	check("while the relay runs")
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("relay: %v\n%s", err, logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the relay did not stop within 30s of SIGTERM")
	}
	check("after it stopped")
}
