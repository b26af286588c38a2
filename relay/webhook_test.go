package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/deadletter"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/relay"
)

// receiver is a webhook endpoint on loopback that records what it accepted.
type receiver struct {
	mu       sync.Mutex
	srv      *httptest.Server
	behave   func(r *http.Request, since time.Duration) (status int, header http.Header, hang time.Duration)
	start    time.Time
	accepted []delivery
	requests int
	// onAccept, if set, is told each accepted event.
	onAccept func(eventID, aggregateID string)
}

type delivery struct {
	webhookID, eventID, aggregateID string
	at                              time.Time
	traceparent                     string // the W3C trace context header, if any
}

func newReceiver(t *testing.T, behave func(r *http.Request, since time.Duration) (int, http.Header, time.Duration)) *receiver {
	rc := &receiver{behave: behave, start: time.Now()}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.requests++
		since := time.Since(rc.start)
		rc.mu.Unlock()
		status, hdr, hang := http.StatusOK, http.Header(nil), time.Duration(0)
		if rc.behave != nil {
			status, hdr, hang = rc.behave(r, since)
		}
		if hang > 0 {
			select {
			case <-time.After(hang):
			case <-r.Context().Done():
				return
			}
		}
		for k, v := range hdr {
			w.Header()[k] = v
		}
		if status/100 == 2 {
			var env struct {
				ID          string `json:"id"`
				AggregateID string `json:"aggregate_id"`
			}
			if err := json.Unmarshal(body, &env); err != nil {
				t.Errorf("endpoint got a body that is not the JSON envelope: %q", body)
			}
			rc.mu.Lock()
			rc.accepted = append(rc.accepted, delivery{r.Header.Get("webhook-id"), env.ID, env.AggregateID, time.Now(), r.Header.Get("traceparent")})
			onAccept := rc.onAccept
			rc.mu.Unlock()
			if onAccept != nil {
				onAccept(env.ID, env.AggregateID)
			}
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) got() []delivery {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.accepted)
}

func (rc *receiver) unique() int {
	seen := map[string]bool{}
	for _, d := range rc.got() {
		seen[d.eventID] = true
	}
	return len(seen)
}

// Isolation: 20 endpoints on one webhook sink; one answers 503 for 10 s, one
// hangs past its timeout for a while, one answers 429 with Retry-After, one
// answers 410 Gone; the other 16 are healthy. The healthy ones get
// everything in per-aggregate order without waiting for the bad ones; the
// recovering ones catch up; the 410 endpoint's events are dead letters;
// nothing is lost anywhere.
func TestWebhookFanOutIsolatesBadEndpoints(t *testing.T) {
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	if _, err := db.Exec(outboxtest.Schema); err != nil {
		t.Fatal(err)
	}
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	receivers := map[string]*receiver{}
	var eps []string
	for i := range 20 {
		name := fmt.Sprintf("ep%02d", i)
		var behave func(*http.Request, time.Duration) (int, http.Header, time.Duration)
		switch i {
		case 0: // down for 10 s, then recovers
			behave = func(_ *http.Request, since time.Duration) (int, http.Header, time.Duration) {
				if since < 10*time.Second {
					return 503, nil, 0
				}
				return 200, nil, 0
			}
		case 1: // hangs past the 500ms timeout for the first 4 s
			behave = func(_ *http.Request, since time.Duration) (int, http.Header, time.Duration) {
				if since < 4*time.Second {
					return 200, nil, 3 * time.Second
				}
				return 200, nil, 0
			}
		case 2: // rate limited: every other request is a 429 with Retry-After
			var n int
			var mu sync.Mutex
			behave = func(*http.Request, time.Duration) (int, http.Header, time.Duration) {
				mu.Lock()
				defer mu.Unlock()
				n++
				if n%2 == 1 {
					return 429, http.Header{"Retry-After": {"1"}}, 0
				}
				return 200, nil, 0
			}
		case 3: // gone
			behave = func(*http.Request, time.Duration) (int, http.Header, time.Duration) { return 410, nil, 0 }
		}
		rc := newReceiver(t, behave)
		receivers[name] = rc
		eps = append(eps, fmt.Sprintf(`{name: %s, url: "%s/hook", secrets: ["%s"], body: envelope, timeout: 500ms,
      retry: {initial_backoff: 100ms, max_backoff: 1s, max_attempts: 1000}}`, name, rc.srv.URL, secret))
	}
	dir := t.TempDir()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: 600, heartbeat: 1s}
tables: [{name: %s.outbox}]
checkpoint: {path: %s, interval: 200ms}
sinks:
  - name: hooks
    type: webhook
    webhook:
      endpoints:
        - %s
`, srv.Port, dbname, filepath.Join(dir, "cp.json"), strings.Join(eps, "\n        - "))))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- relay.New(cfg, relay.Options{Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4}))}).Run(ctx)
	}()
	waitForCheckpoint(t, cfg.Checkpoint.Path)
	// every endpoint's pipeline must have saved its start before producing
	time.Sleep(500 * time.Millisecond)

	w := &outboxtest.Workload{}
	outboxtest.Produce(ctx, t, db, w, 2, 60, []int{1, 2, 4, 3}, 25)
	total := w.Events()

	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		ok := true
		for name, rc := range receivers {
			if name != "ep03" && rc.unique() < total {
				ok = false
			}
		}
		if ok {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil && err != context.Canceled {
		t.Fatalf("relay: %v", err)
	}

	commitAt := map[string]time.Time{}
	for _, txn := range w.Txns {
		for _, id := range txn.IDs {
			commitAt[id] = txn.At
		}
	}
	var healthyLatency []time.Duration
	for name, rc := range receivers {
		got := rc.got()
		if name == "ep03" {
			if len(got) != 0 {
				t.Errorf("410 endpoint accepted %d events", len(got))
			}
			continue
		}
		var d []outboxtest.Delivered
		for _, g := range got {
			if g.webhookID != g.eventID {
				t.Fatalf("%s: webhook-id %q is not the event id %q", name, g.webhookID, g.eventID)
			}
			d = append(d, outboxtest.Delivered{ID: g.eventID, AggregateID: g.aggregateID})
			if name >= "ep04" {
				healthyLatency = append(healthyLatency, g.at.Sub(commitAt[g.eventID]))
			}
		}
		t.Run(name, func(t *testing.T) { outboxtest.Check(t, w, d, false) })
	}
	sort.Slice(healthyLatency, func(i, j int) bool { return healthyLatency[i] < healthyLatency[j] })
	p99 := healthyLatency[len(healthyLatency)*99/100]
	t.Logf("healthy endpoints: %d deliveries, p50 %v, p99 %v from commit to receipt", len(healthyLatency), healthyLatency[len(healthyLatency)/2], p99)
	// Isolation, not speed (that is the benchmark's): the events are
	// committed while ep00 is down (its first 10 s); had the healthy
	// endpoints waited for the bad ones, most of their deliveries would
	// have waited out that outage. The median is robust to a loaded
	// machine's tail; p99 is logged above.
	if p50 := healthyLatency[len(healthyLatency)/2]; p50 >= 5*time.Second {
		t.Errorf("healthy endpoints' median delivery latency %v is half of ep00's 10s outage or more: the bad endpoints held them back", p50)
	}
	if first := receivers["ep00"].got(); len(first) > 0 && first[0].at.Sub(receivers["ep00"].start) < 10*time.Second {
		t.Errorf("the 503 endpoint accepted an event before it recovered")
	}

	// The 410 endpoint is disabled; the events it held when it answered
	// are dead letters, the later ones wait behind its cursor
	// (TestAnEndpointAnswering410IsDisabledAndLosesNothing enables it).
	if cp := loadCP(t, cfg.Checkpoint.Path, "hooks/ep03"); !strings.Contains(cp.Disabled, "410") {
		t.Errorf("the 410 endpoint's checkpoint: disabled %q, want it disabled for its 410", cp.Disabled)
	}
	store, err := deadletter.OpenFile(relay.DeadLetterDir(cfg))
	if err != nil {
		t.Fatal(err)
	}
	recs, err := store.List(context.Background(), deadletter.Filter{Sink: "hooks/ep03"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if !strings.Contains(r.Reason, "410") {
			t.Fatalf("dead letter reason %q does not say 410", r.Reason)
		}
	}
	if len(recs) == 0 {
		t.Errorf("the dead-letter store holds none of the 410 endpoint's events; want the one it answered 410 to")
	}
}

// A sink that fails for good (here: a permanent failure with no dead-letter
// store) stops alone: the other endpoint keeps receiving, /readyz names the
// stopped one (an endpoint's trouble is its own: the relay stays ready), and
// Run ends with its error only at shutdown.
func TestAFailedSinkStopsAloneAndTheOthersGoOn(t *testing.T) {
	dbname, w := newOutbox(t)
	db := srv.DB(t, dbname)
	bad := newReceiver(t, func(*http.Request, time.Duration) (int, http.Header, time.Duration) { return 400, nil, 0 })
	good := newReceiver(t, nil)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	httpAddr := l.Addr().String()
	l.Close()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: 650, heartbeat: 1s}
tables: [{name: %s.outbox}]
checkpoint: {path: %s, interval: 100ms}
dead_letter: {store: none}
http: {listen: "%s"}
sinks:
  - name: hooks
    type: webhook
    webhook:
      endpoints:
        - {name: bad, url: "%s", body: envelope}
        - {name: good, url: "%s", body: envelope}
`, srv.Port, dbname, filepath.Join(t.TempDir(), "cp.json"), httpAddr, bad.srv.URL, good.srv.URL)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- relay.New(cfg, relay.Options{Logger: slog.New(slog.DiscardHandler)}).Run(ctx)
	}()
	waitForCheckpoint(t, cfg.Checkpoint.Path)
	time.Sleep(300 * time.Millisecond)
	outboxtest.Produce(ctx, t, db, w, 1, 10, []int{1}, 3)
	// Wait until the bad endpoint's pipeline has stopped...
	var readyz string
	code := 0
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			readyz, code = string(b), resp.StatusCode
			if strings.Contains(readyz, "hooks/bad: stopped") {
				break
			}
		}
	}
	if !strings.Contains(readyz, "hooks/bad: stopped") || !strings.Contains(readyz, "no dead-letter store") {
		t.Fatalf("/readyz does not name the stopped sink: %q", readyz)
	}
	if code != http.StatusOK {
		t.Fatalf("/readyz = %d %q: one endpoint stopped makes the relay unready", code, readyz)
	}
	// ...then commit more: the good endpoint still gets everything.
	w2 := &outboxtest.Workload{Prefix: "later"}
	outboxtest.Produce(ctx, t, db, w2, 1, 10, []int{1}, 3)
	for deadline := time.Now().Add(20 * time.Second); good.unique() < w.Events()+w2.Events() && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	if got, want := good.unique(), w.Events()+w2.Events(); got != want {
		t.Fatalf("the healthy endpoint got %d of %d events after the other one stopped", got, want)
	}
	select {
	case err := <-done:
		t.Fatalf("the relay ended while a sink was still running: %v", err)
	default:
	}
	cancel()
	err = <-done
	if err == nil || !strings.Contains(err.Error(), "sink hooks/bad") {
		t.Fatalf("Run = %v, want the stopped sink's error", err)
	}
}
