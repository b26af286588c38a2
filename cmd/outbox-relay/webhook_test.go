package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/event/jsonline"
	"github.com/outbox-relay/outbox-relay/internal/eventually"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/receiver"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/sink/webhook"
)

// verifyStandardWebhook checks a request the way a receiver following the
// Standard Webhooks spec (v1) would: webhook.Verify, written from the spec
// apart from the signer (the signed content is id + "." + timestamp + "." +
// body, the key is the base64 after "whsec_", webhook-signature holds
// space-separated "v1,<base64 HMAC-SHA256>" entries of which one must match),
// rejecting a timestamp more than 5 minutes from now. The spec's vector
// below checks it; FuzzSignVerifies (sink/webhook) checks the signer against it.
func verifyStandardWebhook(secret string, h http.Header, body []byte, now time.Time) error {
	return webhook.Verify([]string{secret}, h, body, now, 5*time.Minute)
}

// The verifier itself must agree with the spec's published test vector.
func TestWebhookVerifierMatchesSpecVector(t *testing.T) {
	h := http.Header{}
	h.Set("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set("webhook-timestamp", "1614265330")
	h.Set("webhook-signature", "v1,bm9ldHRoZXNpZ25hdHVyZQ== v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	body := []byte(`{"test": 2432232314}`)
	if err := verifyStandardWebhook(secret, h, body, time.Unix(1614265330, 0)); err != nil {
		t.Fatalf("spec vector: %v", err)
	}
	if err := verifyStandardWebhook(secret, h, []byte(`{"test": 2432232315}`), time.Unix(1614265330, 0)); err == nil {
		t.Fatal("a changed body verified")
	}
	if err := verifyStandardWebhook(secret, h, body, time.Unix(1614265330+301, 0)); err == nil {
		t.Fatal("a timestamp 301 s old verified")
	}
}

func newWebhookSecret(t *testing.T) string {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(key)
}

// newHookReceiver starts a receiver that checks every request's
// signatures (one per configured secret, verified with secret) and
// envelope; status decides the answer by path.
func newHookReceiver(t *testing.T, secret string, status func(path string) int) *receiver.Receiver {
	return receiver.Start(t, func(r *http.Request, body []byte, _ time.Duration) receiver.Reply {
		if err := verifyStandardWebhook(secret, r.Header, body, time.Now()); err != nil {
			t.Errorf("request %s: bad signature: %v", r.Header.Get("webhook-id"), err)
		}
		if n := len(strings.Fields(r.Header.Get("webhook-signature"))); n != 2 {
			t.Errorf("request %s: %d signatures, want 2 (one per configured secret)", r.Header.Get("webhook-id"), n)
		}
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q", ct)
		}
		var env struct {
			Type          string `json:"type"`
			AggregateType string `json:"aggregate_type"`
			Timestamp     string `json:"timestamp"`
		}
		if err := json.Unmarshal(body, &env); err != nil {
			t.Errorf("body is not the JSON envelope: %v: %q", err, body)
		}
		if _, err := time.Parse(time.RFC3339, env.Timestamp); err != nil || env.Type != "created" || env.AggregateType != "order" {
			t.Errorf("envelope fields: %q", body)
		}
		rep := receiver.Reply{Status: status(r.URL.Path)}
		if rep.Status == http.StatusBadRequest {
			rep.Body = "payload rejected by the test receiver"
		}
		return rep
	})
}

// Relay SIGKILL while webhook retries are pending. The relay binary delivers
// to one endpoint that answers 503 until the test lets it recover. It is
// killed once while every event is being retried, and once more while the
// recovered endpoint is catching up (rate-limited, so the kill lands
// mid-delivery). After the restarts every committed event is accepted, each
// request's webhook-id is its event id (the same id before and after the
// kills, so a receiver can deduplicate), every request carries a valid
// Standard Webhooks signature, per aggregate the first acceptances follow
// commit order, and nothing rolled back is sent.
func TestWebhookRetriesPendingSurviveSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("SIGKILL run skipped with -short")
	}
	t0 := time.Now()
	phase := func(what string) { t.Logf("%6.2fs %s", time.Since(t0).Seconds(), what) }
	bin := buildBinary(t)
	phase("built")
	srv := testserver.Start(t, testserver.Options{ServerID: 8})
	phase("mariadbd")
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	if _, err := db.Exec(outboxtest.Schema); err != nil {
		t.Fatal(err)
	}
	oldSecret, secret := newWebhookSecret(t), newWebhookSecret(t)
	var healthy atomic.Bool
	rc := newHookReceiver(t, secret, func(string) int {
		if healthy.Load() {
			return http.StatusOK
		}
		return http.StatusServiceUnavailable
	})

	dir := t.TempDir()
	cpPath := filepath.Join(dir, "checkpoints.json")
	cfg := fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %s.outbox}]
checkpoint: {path: %s, interval: 100ms}
sinks:
  - name: hooks
    type: webhook
    webhook:
      endpoints:
        - name: rx
          url: "%s/hook"
          secrets: ["%s", "%s"]
          body: envelope
          timeout: 2s
          rate_limit: 40
          retry: {initial_backoff: 100ms, max_backoff: 500ms, max_attempts: 10000}
log: {level: warn}
`, srv.Port, testserver.ServerID(), dbname, cpPath, rc.URL, oldSecret, secret)
	relay := startKilledRelay(t, bin, dir, cfg)
	showLog := relay.showLog
	kills := 0
	kill := func() {
		relay.kill()
		kills++
		rc.NextGen() // later requests come from the next process
	}
	eventually.Within(t, 30*time.Second, "the start checkpoint", func() bool {
		_, err := os.Stat(cpPath)
		return err == nil
	}, showLog)

	w := &outboxtest.Workload{}
	outboxtest.Produce(context.Background(), t, db, w, 2, 30, []int{1, 3, 2}, 8)
	total := w.Events()
	phase("produced")

	// Kill 1: every event is failing and being retried.
	retried := func(gen int64) bool {
		n := map[string]int{}
		for _, r := range rc.Requests() {
			if r.Gen == gen {
				n[r.EventID]++
				if n[r.EventID] >= 3 {
					return true
				}
			}
		}
		return false
	}
	eventually.Within(t, 20*time.Second, "retries before the first kill", func() bool { return retried(0) }, showLog)
	pendingAtKill := map[string]bool{}
	for _, r := range rc.Requests() {
		pendingAtKill[r.EventID] = true
	}
	kill()
	phase("kill 1")
	relay.start()

	// The new process retries the same events, then the endpoint recovers.
	eventually.Within(t, 20*time.Second, "retries after the restart", func() bool { return retried(1) }, showLog)
	healthy.Store(true)
	phase("healthy")

	// Kill 2: the endpoint is catching up, part of the events accepted.
	eventually.Within(t, 20*time.Second, "a quarter of the events accepted", func() bool {
		return receiver.Unique(rc.Accepted("")) >= total/4
	}, showLog)
	acceptedAtKill2 := receiver.Unique(rc.Accepted(""))
	kill()
	phase("kill 2")
	relay.start()

	eventually.Within(t, 30*time.Second, "every event accepted", func() bool {
		return receiver.Unique(rc.Accepted("")) >= total
	}, showLog)
	phase("all accepted")
	if err := relay.stop(); err != nil {
		t.Errorf("relay exited with %v after SIGTERM", err)
		showLog()
	}
	phase("stopped")

	reqs := rc.Requests()
	acc := rc.Accepted("")
	var delivered []outboxtest.Delivered
	for _, r := range reqs {
		if r.WebhookID != r.EventID {
			t.Fatalf("webhook-id %q is not the event id %q", r.WebhookID, r.EventID)
		}
	}
	redelivered := map[string]bool{}
	for _, r := range acc {
		delivered = append(delivered, outboxtest.Delivered{ID: r.EventID, AggregateID: r.AggregateID})
		if pendingAtKill[r.EventID] && r.Gen >= 1 {
			redelivered[r.EventID] = true
		}
		if k := strings.LastIndex(r.EventID, "-r"); k >= 0 {
			n, _ := strconv.Atoi(r.EventID[k+2:])
			if string(r.Data) != outboxtest.Payload(r.EventID, n) {
				t.Errorf("event %s: envelope data %s is not the stored payload", r.EventID, r.Data)
			}
		}
	}
	rep := outboxtest.Check(t, w, delivered, false)
	if len(redelivered) != len(pendingAtKill) {
		t.Errorf("%d events were being retried at the first kill, %d of them accepted after a restart", len(pendingAtKill), len(redelivered))
	}
	perGen := map[int64]int{}
	for _, r := range reqs {
		perGen[r.Gen]++
	}
	t.Logf("webhook SIGKILL run: %d committed events, %d kills, %d requests (per process: %v), %d events retried at the first kill and accepted after a restart with the same webhook-id, %d accepted before the second kill, %d acceptances, %d unique, %d duplicates (each with its event's webhook-id)",
		rep.Committed, kills, len(reqs), perGen, len(redelivered), acceptedAtKill2, rep.Delivered, rep.Unique, rep.Duplicates)
	if t.Failed() {
		showLog()
	}
}

// syncBuffer is a bytes.Buffer safe for the relay's concurrent logging.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// dlqRun runs "outbox-relay dlq ..." in-process.
func dlqRun(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = mainCode(context.Background(), append([]string{"dlq"}, args...), &o, &e)
	return code, o.String(), e.String()
}

// listedRecord is a line of dlq list --json.
type listedRecord struct {
	ID       string        `json:"id"`
	Sink     string        `json:"sink"`
	Reason   string        `json:"reason"`
	Attempts int           `json:"attempts"`
	Event    jsonline.Line `json:"event"`
}

func dlqList(t *testing.T, cfgPath string, extra ...string) []listedRecord {
	t.Helper()
	code, out, errOut := dlqRun(append([]string{"list", "--config", cfgPath, "--json"}, extra...)...)
	if code != 0 {
		t.Fatalf("dlq list: exit %d: %s", code, errOut)
	}
	var recs []listedRecord
	dec := json.NewDecoder(strings.NewReader(out))
	for {
		var r listedRecord
		if err := dec.Decode(&r); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("dlq list --json: %v in %q", err, out)
		}
		recs = append(recs, r)
	}
	return recs
}

// dlq replay delivers dead-lettered events once the endpoint is healthy. One
// webhook sink has two endpoints (a, b) that answer 400, so every event
// becomes two dead letters in the file store. With the relay stopped:
// replay needs a selector (exit 2); replaying one record while the endpoint
// still rejects keeps it (exit 1); purge --sink hooks/b removes only b's;
// after the endpoint recovers, replay --all delivers every one of a's
// records (webhook-id = event id, valid signature) and empties the store.
func TestDLQReplayDeliversOnceEndpointHealthy(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{ServerID: 9})
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	if _, err := db.Exec(outboxtest.Schema); err != nil {
		t.Fatal(err)
	}
	oldSecret, secret := newWebhookSecret(t), newWebhookSecret(t)
	var reject atomic.Bool
	reject.Store(true)
	rc := newHookReceiver(t, secret, func(string) int {
		if reject.Load() {
			return http.StatusBadRequest
		}
		return http.StatusOK
	})
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "relay.yaml")
	cpPath := filepath.Join(dir, "checkpoints.json")
	ep := func(name string) string {
		return fmt.Sprintf(`{name: %s, url: "%s/%s", secrets: ["%s", "%s"], body: envelope, retry: {initial_backoff: 100ms, max_backoff: 500ms}}`,
			name, rc.URL, name, oldSecret, secret)
	}
	cfg := fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %s.outbox}]
checkpoint: {path: %s, interval: 100ms}
sinks:
  - name: hooks
    type: webhook
    webhook:
      endpoints:
        - %s
        - %s
log: {level: error}
`, srv.Port, testserver.ServerID(), dbname, cpPath, ep("a"), ep("b"))
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var relayOut syncBuffer
	exited := make(chan int, 1)
	go func() { exited <- mainCode(ctx, []string{"run", "--config", cfgPath}, &relayOut, &relayOut) }()
	stopped := false
	defer func() { // on a failure, let the relay finish before the cleanups
		if !stopped {
			cancel()
			<-exited
		}
	}()
	showLog := func() { t.Logf("relay output:\n%s", relayOut.String()) }
	eventually.Within(t, 30*time.Second, "the start checkpoint", func() bool {
		_, err := os.Stat(cpPath)
		return err == nil
	}, showLog)

	w := &outboxtest.Workload{}
	outboxtest.Produce(ctx, t, db, w, 1, 4, []int{1, 2}, 3)
	total := w.Events()
	committed := map[string]bool{}
	for _, txn := range w.Txns {
		for _, id := range txn.IDs {
			committed[id] = true
		}
	}
	eventually.Within(t, 20*time.Second, "every event dead-lettered at both endpoints", func() bool {
		return len(dlqList(t, cfgPath)) >= 2*total
	}, showLog)
	cancel()
	stopped = true
	if code := <-exited; code != 0 {
		t.Errorf("relay run: exit %d", code)
		showLog()
	}

	recs := dlqList(t, cfgPath)
	bySink := map[string]map[string]bool{}
	for _, r := range recs {
		if bySink[r.Sink] == nil {
			bySink[r.Sink] = map[string]bool{}
		}
		bySink[r.Sink][r.Event.ID] = true
		if !committed[r.Event.ID] {
			t.Errorf("dead letter for event %s, which was not committed", r.Event.ID)
		}
		if !strings.Contains(r.Reason, "400") || r.Attempts != 1 {
			t.Errorf("record %s: reason %q, %d attempts; want a 400 after 1 attempt", r.ID, r.Reason, r.Attempts)
		}
	}
	if len(recs) != 2*total || len(bySink["hooks/a"]) != total || len(bySink["hooks/b"]) != total {
		t.Fatalf("dead letters: %d records (%d events for hooks/a, %d for hooks/b); want %d for each of %d events",
			len(recs), len(bySink["hooks/a"]), len(bySink["hooks/b"]), total, total)
	}

	// replay needs a selector.
	if code, _, errOut := dlqRun("replay", "--config", cfgPath); code != 2 || !strings.Contains(errOut, "needs a selector") {
		t.Errorf("dlq replay without a selector: exit %d, stderr %q; want exit 2", code, errOut)
	}
	if n := len(dlqList(t, cfgPath)); n != 2*total {
		t.Fatalf("after a replay without a selector, %d records; want %d", n, 2*total)
	}
	// A replay the endpoint still rejects keeps the record.
	first := dlqList(t, cfgPath, "--sink", "hooks/a")[0]
	if code, out, _ := dlqRun("replay", "--config", cfgPath, "--id", first.ID); code != 1 || !strings.Contains(out, "replayed 0 dead letters, 1 failed") {
		t.Errorf("dlq replay --id to a rejecting endpoint: exit %d, stdout %q; want exit 1 and 1 failed", code, out)
	}
	if got := dlqList(t, cfgPath, "--id", first.ID); len(got) != 1 {
		t.Errorf("a record whose replay was rejected left the store")
	}

	// purge --sink removes only that sink's records.
	if code, out, errOut := dlqRun("purge", "--config", cfgPath, "--sink", "hooks/b"); code != 0 || !strings.Contains(out, fmt.Sprintf("purged %d dead letters", total)) {
		t.Errorf("dlq purge --sink hooks/b: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	left := dlqList(t, cfgPath)
	if len(left) != total {
		t.Errorf("after purge --sink hooks/b: %d records; want hooks/a's %d", len(left), total)
	}
	for _, r := range left {
		if r.Sink != "hooks/a" {
			t.Errorf("purge --sink hooks/b left a record of %s", r.Sink)
		}
	}

	// The endpoint is healthy again: replay everything.
	reject.Store(false)
	before := len(rc.Requests())
	code, out, errOut := dlqRun("replay", "--config", cfgPath, "--all")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("replayed %d dead letters, 0 failed", total)) {
		t.Fatalf("dlq replay --all: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	replayed := rc.Requests()[before:]
	got := map[string]int{}
	for _, r := range replayed {
		if r.Path != "/a" || r.Status != http.StatusOK {
			t.Errorf("replay sent a request to %s answered %d", r.Path, r.Status)
		}
		if r.WebhookID != r.EventID {
			t.Errorf("replayed request: webhook-id %q is not the event id %q", r.WebhookID, r.EventID)
		}
		got[r.EventID]++
	}
	for id := range bySink["hooks/a"] {
		if got[id] != 1 {
			t.Errorf("event %s: replay delivered it %d times; want once", id, got[id])
		}
	}
	if left := dlqList(t, cfgPath); len(left) != 0 {
		t.Errorf("after a successful replay --all, %d records are left", len(left))
	}
	if code, out, _ := dlqRun("list", "--config", cfgPath); code != 0 || !strings.Contains(out, "0 dead letters") {
		t.Errorf("dlq list on an empty store: exit %d, %q", code, out)
	}
	t.Logf("dlq: %d committed events, %d dead letters (2 endpoints), %d purged (hooks/b), %d replayed and accepted (hooks/a), store empty after replay",
		total, len(recs), total, len(replayed))
}
