package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/console"
	"github.com/outbox-relay/outbox-relay/internal/eventually"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/receiver"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/sink/webhook"
)

// consoleRelay is the built binary running a webhook sink whose endpoints
// are rows of a table, with the attempts record and the console on, and a
// receiver that answers the first request of each event 500 and the next
// ones 200, verifying every request's signature.
type consoleRelay struct {
	url            string // the console's base
	op, t1, t2     string // tokens: the operator, tenants t1 and t2
	key            string // the console's key
	bin, cfgPath   string
	insert         func(id, tenant string)
	rc             *receiver.Receiver
	secret         string
	logPath        string
	cmd            *exec.Cmd
	showLog        func()
	mu             sync.Mutex
	badSignatures  []string
	answered500For map[string]bool
	// rejectDead: requests to /dead are answered 400 (the event is
	// dead-lettered).
	rejectDead bool
}

// freeAddr returns a loopback address nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func startConsoleRelay(t *testing.T) *consoleRelay {
	t.Helper()
	return startConsoleRelayOn(t, "file")
}

// startConsoleRelayOn is startConsoleRelay with the checkpoint store, and
// so the dead letters and the attempts record, of kind store: file, or
// mysql (tables in the source's database).
func startConsoleRelayOn(t *testing.T, store string) *consoleRelay {
	t.Helper()
	bin := buildBinary(t)
	srv := testserver.Start(t, testserver.Options{ServerID: 34})
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	for _, q := range []string{outboxtest.TenantSchema, webhook.EndpointsTableSchema} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	cr := &consoleRelay{secret: newWebhookSecret(t), answered500For: map[string]bool{}, rejectDead: true}
	cr.insert = func(id, tenant string) {
		t.Helper()
		if _, err := db.Exec("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, tenant) VALUES (?, 'order', 'o-1', 'created', '{\"n\":1}', ?)", id, tenant); err != nil {
			t.Fatal(err)
		}
	}
	cr.rc = receiver.Start(t, func(r *http.Request, body []byte, _ time.Duration) receiver.Reply {
		cr.mu.Lock()
		defer cr.mu.Unlock()
		if err := verifyStandardWebhook(cr.secret, r.Header, body, time.Now()); err != nil {
			cr.badSignatures = append(cr.badSignatures, r.Header.Get("webhook-id")+": "+err.Error())
		}
		if r.URL.Path == "/dead" && cr.rejectDead {
			return receiver.Reply{Status: 400, Body: "rejected by the test"}
		}
		id := r.Header.Get("webhook-id")
		if !cr.answered500For[id] {
			cr.answered500For[id] = true
			return receiver.Reply{Status: 500, Body: "not yet: the receiver is warming up"}
		}
		return receiver.Reply{}
	})
	var hop, h1, h2 string
	cr.op, hop = console.NewToken()
	cr.t1, h1 = console.NewToken()
	cr.t2, h2 = console.NewToken()
	cr.key = strings.Repeat("console-key-", 4)
	t.Setenv("OUTBOX_RELAY_CONSOLE_KEY", cr.key) // the relay's process inherits it
	addr := freeAddr(t)
	cr.url = "http://" + addr
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "relay.yaml")
	cr.bin, cr.cfgPath = bin, cfgPath
	checkpoints := fmt.Sprintf("{path: %s, interval: 100ms}", filepath.Join(dir, "checkpoints.json"))
	if store == "mysql" {
		checkpoints = fmt.Sprintf("{store: mysql, dsn: 'root@tcp(127.0.0.1:%d)/%s', interval: 100ms}", srv.Port, dbname)
	}
	cfg := fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %[3]s.outbox, headers: [tenant]}]
checkpoint: %[4]s
attempts: {enabled: true, interval: 20ms}
replay: {poll: 200ms}
sinks:
  - name: hooks
    type: webhook
    webhook:
      endpoints_table:
        table: %[3]s.outbox_endpoints
        tenant_header: tenant
        defaults:
          body: envelope
          timeout: 2s
          egress: {allow: [127.0.0.1]}
          retry: {initial_backoff: 100ms, max_backoff: 200ms, max_attempts: 100}
console:
  listen: %[5]s
  tokens:
    - {name: ops, hash: "%[6]s"}
    - {name: tenant-one, hash: "%[7]s", tenant: t1}
    - {name: tenant-two, hash: "%[8]s", tenant: t2}
log: {level: info}
`, srv.Port, testserver.ServerID(), dbname, checkpoints, addr, hop, h1, h2)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cr.logPath = filepath.Join(dir, "relay.log")
	logf, err := os.Create(cr.logPath)
	if err != nil {
		t.Fatal(err)
	}
	cr.showLog = func() {
		b, _ := os.ReadFile(cr.logPath)
		t.Logf("relay log:\n%s", tail(b))
	}
	cr.cmd = startRelay(t, bin, cfgPath, logf, logf)
	t.Cleanup(func() {
		_ = cr.cmd.Process.Signal(os.Interrupt)
		_ = cr.cmd.Wait()
		logf.Close()
		if t.Failed() {
			cr.showLog()
		}
	})
	eventually.Within(t, 60*time.Second, "the console to answer", func() bool {
		res, err := http.Get(cr.url + "/api/openapi.json")
		if err == nil {
			res.Body.Close()
		}
		return err == nil && res.StatusCode == 200
	}, cr.showLog)
	return cr
}

// call makes an API request with token and decodes the JSON answer into
// out (when not nil); it returns the status.
func (cr *consoleRelay) call(t *testing.T, method, path, token string, body, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, cr.url+path, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if out != nil && res.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
	if res.StatusCode >= 300 {
		t.Logf("%s %s: %d %s", method, path, res.StatusCode, b)
	}
	return res.StatusCode
}

type apiAttempt struct {
	ID       int64  `json:"id"`
	Endpoint string `json:"endpoint"`
	EventID  string `json:"event_id"`
	Number   int    `json:"attempt"`
	Status   int    `json:"status"`
	Outcome  string `json:"outcome"`
	Duration int64  `json:"duration_ns"`
	Answer   []byte `json:"answer"`
	Replay   string `json:"replay"`
	Tenant   string `json:"tenant"`
}

func (cr *consoleRelay) attempts(t *testing.T, token, query string) []apiAttempt {
	t.Helper()
	var out struct{ Attempts []apiAttempt }
	if st := cr.call(t, "GET", "/api/v1/attempts?"+query, token, nil, &out); st != 200 {
		t.Fatalf("attempts: %d", st)
	}
	return out.Attempts
}

// addEndpoint makes the endpoint row through the API (as tenant token's
// owner) with the receiver's secret.
func (cr *consoleRelay) addEndpoint(t *testing.T, token, id, path string) {
	t.Helper()
	if st := cr.call(t, "POST", "/api/v1/endpoints/hooks", token, map[string]any{"id": id, "url": cr.rc.URL + path, "secret": cr.secret}, nil); st != 201 {
		t.Fatalf("create endpoint %s: %d", id, st)
	}
	// The relay takes the row up from the binlog: wait until it runs.
	eventually.Within(t, 30*time.Second, "endpoint "+id+" to run", func() bool {
		var e console.Endpoint
		return cr.call(t, "GET", "/api/v1/endpoints/hooks/"+id, token, nil, &e) == 200 && e.State == "attached"
	}, cr.showLog)
}

// addEndpointFor makes the row id of sink hooks for tenant as the operator
// does (an operator's id is the row id, in no tenant's namespace), and
// waits until it runs.
func (cr *consoleRelay) addEndpointFor(t *testing.T, tenant, id, path string) {
	t.Helper()
	if st := cr.call(t, "POST", "/api/v1/endpoints/hooks", cr.op, map[string]any{"id": id, "tenant": tenant, "url": cr.rc.URL + path, "secret": cr.secret}, nil); st != 201 {
		t.Fatalf("create endpoint %s for %s: %d", id, tenant, st)
	}
	eventually.Within(t, 30*time.Second, "endpoint "+id+" to run", func() bool {
		var e console.Endpoint
		return cr.call(t, "GET", "/api/v1/endpoints/hooks/"+id, cr.op, nil, &e) == 200 && e.State == "attached"
	}, cr.showLog)
}

// Through the API of the built binary: an endpoint that answers 500 then
// 200 shows both attempts with their codes and durations; a resend
// delivers the event again, freshly and validly signed, and a new attempt
// appears; another tenant sees none of it.
func TestTheConsoleAPIShowsAttemptsAndResends(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary against MariaDB")
	}
	cr := startConsoleRelay(t)
	cr.addEndpoint(t, cr.t1, "shop-one", "/one")
	// Tenant t1's endpoint named shop-one has a row id of t1's namespace:
	// attempts and dead letters name it by that id.
	var one console.Endpoint
	if st := cr.call(t, "GET", "/api/v1/endpoints/hooks/shop-one", cr.t1, nil, &one); st != 200 || one.Name != "shop-one" || !strings.HasSuffix(one.ID, ".shop-one") {
		t.Fatalf("shop-one: %d %+v", st, one)
	}
	cr.insert("evt-0", "t1") // in the resend's window, and not resent
	cr.insert("evt-1", "t1")

	var got []apiAttempt
	eventually.Within(t, 30*time.Second, "a 500 and a 200 attempt of evt-1", func() bool {
		got = cr.attempts(t, cr.t1, "event_id=evt-1")
		return len(got) >= 2 && got[0].Status == 200
	}, cr.showLog)
	if len(got) != 2 {
		t.Fatalf("attempts of evt-1: %+v, want two", got)
	}
	failed, ok := got[1], got[0]
	if failed.Status != 500 || failed.Outcome != "retry" || failed.Number != 1 || failed.Duration <= 0 || !strings.Contains(string(failed.Answer), "warming up") {
		t.Errorf("first attempt %+v: want 500, retry, attempt 1, a duration and the answer", failed)
	}
	if ok.Status != 200 || ok.Outcome != "delivered" || ok.Number != 2 || ok.Duration <= 0 || ok.Endpoint != one.ID || ok.Tenant != "t1" {
		t.Errorf("second attempt %+v: want 200, delivered, attempt 2, a duration, of shop-one (t1)", ok)
	}
	// Tenant t2 sees none of it.
	if other := cr.attempts(t, cr.t2, "event_id=evt-1"); len(other) != 0 {
		t.Errorf("tenant t2 sees tenant t1's attempts: %+v", other)
	}
	if st := cr.call(t, "GET", fmt.Sprintf("/api/v1/attempts/%d", failed.ID), cr.t2, nil, nil); st != 404 {
		t.Errorf("tenant t2 reading t1's attempt: %d, want 404", st)
	}
	if st := cr.call(t, "POST", fmt.Sprintf("/api/v1/attempts/%d/resend", failed.ID), cr.t2, nil, nil); st != 404 {
		t.Errorf("tenant t2 resending t1's event: %d, want 404", st)
	}

	before := len(cr.rc.Accepted("/one"))
	var job struct{ Job string }
	if st := cr.call(t, "POST", fmt.Sprintf("/api/v1/attempts/%d/resend", failed.ID), cr.t1, nil, &job); st != 202 || job.Job == "" {
		t.Fatalf("resend: %d %+v", st, job)
	}
	eventually.Within(t, 60*time.Second, "the resent event at the receiver", func() bool {
		return len(cr.rc.Accepted("/one")) > before
	}, cr.showLog)
	re := cr.rc.Accepted("/one")[before]
	if re.EventID != "evt-1" || re.Replay != job.Job {
		t.Errorf("resent request: event %q replay %q, want evt-1 and job %s", re.EventID, re.Replay, job.Job)
	}
	eventually.Within(t, 30*time.Second, "the resend's attempt on record", func() bool {
		got = cr.attempts(t, cr.t1, "event_id=evt-1")
		return len(got) == 3
	}, cr.showLog)
	if n := got[0]; n.Replay != job.Job || n.Status != 200 || n.ID <= ok.ID {
		t.Errorf("the resend's attempt %+v: want replay %s, 200, a new id", n, job.Job)
	}
	// Only evt-1 was resent: the window held evt-0 too, which was not.
	// outbox-relay replay list: the job is done, sent 1 and passed over
	// at least evt-0.
	done := regexp.MustCompile(regexp.QuoteMeta(job.Job) + `\s+done\s+` + regexp.QuoteMeta(one.Key) + `\s+binlog\s+1\s+[1-9]`)
	var list []byte
	eventually.Within(t, 30*time.Second, "the resend's job done, one sent, evt-0 passed over", func() bool {
		list, _ = exec.Command(cr.bin, "replay", "list", "--config", cr.cfgPath).CombinedOutput()
		return done.Match(list)
	}, func() { t.Logf("replay list:\n%s", list) })
	if n := len(cr.rc.Accepted("/one")); n != before+1 {
		t.Errorf("%d requests accepted after the resend, want %d", n, before+1)
	}

	// Recover since 10 minutes ago: the endpoint gets what it was sent
	// again (evt-1, and evt-2 committed now).
	cr.insert("evt-2", "t1")
	eventually.Within(t, 30*time.Second, "evt-2 delivered", func() bool {
		got := cr.attempts(t, cr.t1, "event_id=evt-2")
		return len(got) > 0 && got[0].Status == 200
	}, cr.showLog)
	before = len(cr.rc.Accepted("/one"))
	var rec struct{ Job string }
	if st := cr.call(t, "POST", "/api/v1/endpoints/hooks/shop-one/recover", cr.t1, map[string]string{"since": "10m"}, &rec); st != 202 || rec.Job == "" {
		t.Fatalf("recover: %d %+v", st, rec)
	}
	if st := cr.call(t, "POST", "/api/v1/endpoints/hooks/shop-one/recover", cr.t2, map[string]string{"since": "10m"}, nil); st != 404 {
		t.Errorf("tenant t2 recovering t1's endpoint: %d, want 404", st)
	}
	eventually.Within(t, 60*time.Second, "evt-1 and evt-2 recovered", func() bool {
		seen := map[string]bool{}
		for _, r := range cr.rc.Accepted("/one")[before:] {
			if r.Replay == rec.Job {
				seen[r.EventID] = true
			}
		}
		return seen["evt-1"] && seen["evt-2"]
	}, cr.showLog)
	// A dead letter: seen and replayed by its tenant only.
	cr.addEndpoint(t, cr.t1, "shop-dead", "/dead")
	cr.insert("evt-d", "t1")
	type deadLetters struct {
		DeadLetters []struct{ ID, Sink string } `json:"dead_letters"`
	}
	var dl deadLetters
	eventually.Within(t, 30*time.Second, "evt-d dead-lettered", func() bool {
		dl = deadLetters{}
		return cr.call(t, "GET", "/api/v1/dead-letters", cr.t1, nil, &dl) == 200 && len(dl.DeadLetters) == 1
	}, cr.showLog)
	if !strings.HasPrefix(dl.DeadLetters[0].Sink, "hooks/t") || !strings.HasSuffix(dl.DeadLetters[0].Sink, ".shop-dead") {
		t.Errorf("dead letter %+v, want hooks/shop-dead's", dl.DeadLetters[0])
	}
	var other deadLetters
	if st := cr.call(t, "GET", "/api/v1/dead-letters", cr.t2, nil, &other); st != 200 || len(other.DeadLetters) != 0 {
		t.Errorf("tenant t2 lists %d dead letters of t1 (%d)", len(other.DeadLetters), st)
	}
	ids := map[string]any{"ids": []string{dl.DeadLetters[0].ID}}
	if st := cr.call(t, "POST", "/api/v1/dead-letters/replay", cr.t2, ids, nil); st != 404 {
		t.Errorf("tenant t2 replaying t1's dead letter: %d, want 404", st)
	}
	cr.mu.Lock()
	cr.rejectDead = false
	cr.mu.Unlock()
	var replayed struct{ Replayed, Failed int }
	if st := cr.call(t, "POST", "/api/v1/dead-letters/replay", cr.t1, ids, &replayed); st != 200 || replayed.Replayed != 1 {
		t.Errorf("replay the dead letter: %d %+v", st, replayed)
	}
	if acc := cr.rc.Accepted("/dead"); len(acc) != 1 || acc[0].EventID != "evt-d" {
		t.Errorf("/dead accepted %+v, want evt-d once", acc)
	}
	if st := cr.call(t, "GET", "/api/v1/dead-letters", cr.t1, nil, &dl); st != 200 || len(dl.DeadLetters) != 0 {
		t.Errorf("after the replay %d dead letters are left", len(dl.DeadLetters))
	}

	cr.mu.Lock()
	defer cr.mu.Unlock()
	if len(cr.badSignatures) > 0 {
		t.Errorf("requests with bad signatures: %v", cr.badSignatures)
	}
}
