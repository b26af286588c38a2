package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testserver"
)

// receiverRuntimes are the languages of docs/receivers whose runtime this
// kind of machine has: under CI=true a missing one fails the test instead
// of skipping it.
var receiverRuntimes = map[string]bool{"python3": true, "node": true, "java": true, "go": true}

// The verification code of docs/receivers, each run as a receiver of the
// relay's real requests: every event the relay sends it verifies (two
// secrets configured, as while rotating: the receiver knows the second),
// and a request signed with another secret it rejects.
func TestReceiverSnippetsVerifyTheRelaysRequests(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	const oldSecret = "whsec_b2xkIHNlY3JldCBvZiB0aGUgcm90YXRpb24hIQ=="
	dir, err := filepath.Abs("../../docs/receivers")
	if err != nil {
		t.Fatal(err)
	}
	for _, rc := range []struct {
		name, runtime string
		cmd           func(t *testing.T) []string
	}{
		{"go", "go", func(t *testing.T) []string {
			bin := filepath.Join(t.TempDir(), "receiver")
			if out, err := exec.Command("go", "build", "-o", bin, filepath.Join(dir, "go")).CombinedOutput(); err != nil {
				t.Fatalf("go build docs/receivers/go: %v\n%s", err, out)
			}
			return []string{bin}
		}},
		{"python", "python3", func(*testing.T) []string { return []string{"python3", filepath.Join(dir, "verify.py")} }},
		{"node", "node", func(*testing.T) []string { return []string{"node", filepath.Join(dir, "verify.js")} }},
		{"java", "java", func(*testing.T) []string { return []string{"java", filepath.Join(dir, "Verify.java")} }},
	} {
		t.Run(rc.name, func(t *testing.T) {
			if _, err := exec.LookPath(rc.runtime); err != nil {
				if os.Getenv("CI") == "true" && receiverRuntimes[rc.runtime] {
					t.Fatalf("%s is not installed: CI must run the %s receiver (docs/receivers)", rc.runtime, rc.name)
				}
				t.Skipf("%s is not installed: the %s receiver of docs/receivers is not run here", rc.runtime, rc.name)
			}
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			port := l.Addr().(*net.TCPAddr).Port
			l.Close()
			args := rc.cmd(t)
			out := &syncBuffer{}
			cmd := exec.Command(args[0], args[1:]...)
			cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port), "WEBHOOK_SECRET="+secret)
			cmd.Stdout, cmd.Stderr = out, out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { cmd.Process.Kill(); cmd.Wait() }()
			url := fmt.Sprintf("http://127.0.0.1:%d/", port)
			// A forged request: signed with a secret the receiver does not know.
			forged := func() (int, error) {
				body := `{"id":"forged-1"}`
				ts := strconv.FormatInt(time.Now().Unix(), 10)
				key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(oldSecret, "whsec_"))
				mac := hmac.New(sha256.New, key)
				mac.Write([]byte("forged-1." + ts + "." + body))
				req, _ := http.NewRequest("POST", url, strings.NewReader(body))
				req.Header.Set("webhook-id", "forged-1")
				req.Header.Set("webhook-timestamp", ts)
				req.Header.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return 0, err
				}
				resp.Body.Close()
				return resp.StatusCode, nil
			}
			code := 0
			for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
				if code, err = forged(); err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the %s receiver did not answer: %v\n%s", rc.name, err, out.String())
				}
			}
			if code != http.StatusBadRequest {
				t.Fatalf("the %s receiver answered %d to a request signed with another secret:\n%s", rc.name, code, out.String())
			}
			// Its output reaches out through a pipe: wait for the line.
			for deadline := time.Now().Add(30 * time.Second); !strings.Contains(out.String(), "rejected forged-1"); time.Sleep(50 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the %s receiver answered 400 to a forged request but did not report it:\n%s", rc.name, out.String())
				}
			}

			db := srv.NewDatabase(t)
			srv.Exec(t, "CREATE TABLE "+db+".outbox (id CHAR(36) PRIMARY KEY, aggregatetype VARCHAR(64) NOT NULL, aggregateid VARCHAR(64) NOT NULL, type VARCHAR(64) NOT NULL, payload JSON NOT NULL) DEFAULT CHARSET = utf8mb4")
			cfg := writeFile(t, "relay.yaml", fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d}
tables: [{name: %s.outbox}]
checkpoint: {path: %s, start: earliest}
sinks:
  - name: hooks
    type: webhook
    webhook:
      endpoints:
        - {name: rx, url: "%s", secrets: ["%s", "%s"], body: envelope}
`, srv.Port, testserver.ServerID(), db, filepath.Join(t.TempDir(), "cp.json"), url, oldSecret, secret))
			ctx, cancel := context.WithCancel(context.Background())
			relayOut, relayErr := &syncBuffer{}, &syncBuffer{}
			done := make(chan int, 1)
			go func() { done <- mainCode(ctx, []string{"run", "--config", cfg}, relayOut, relayErr) }()
			defer func() { cancel(); <-done }()
			ids := []string{rc.name + "-1", rc.name + "-2", rc.name + "-3"}
			srv.Exec(t, fmt.Sprintf(`INSERT INTO %s.outbox VALUES ('%s', 'order', 'o-1', 'order.created', '{"total_cents": 4200}'),
				('%s', 'order', 'o-1', 'order.paid', '{"note": "café ü 😀"}'), ('%s', 'order', 'o-2', 'order.created', '[]')`, db, ids[0], ids[1], ids[2]))
			for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
				n := 0
				for _, id := range ids {
					if strings.Contains(out.String(), "verified "+id+"\n") {
						n++
					}
				}
				if n == len(ids) {
					break
				}
				if strings.Contains(out.String(), "rejected "+rc.name) || time.Now().After(deadline) {
					t.Fatalf("the %s receiver verified %d of %d events:\n%s\nrelay:\n%s", rc.name, n, len(ids), out.String(), relayErr.String())
				}
			}
		})
	}
}
