package relay_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/deadletter"
	"github.com/outbox-relay/outbox-relay/internal/eventually"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/receiver"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/relaytest"
)

// Isolation: 20 endpoints on one webhook sink; one answers 503 and one
// hangs past its timeout until the healthy ones have every event, one
// answers 429 with Retry-After, one answers 410 Gone; the other 16 are
// healthy. The healthy ones get everything in per-aggregate order while the
// bad ones still fail (had they waited for them, they would get nothing
// before the bad ones recover, and the test would time out); the recovering
// ones then catch up; the 410 endpoint's events are dead letters; nothing
// is lost anywhere. Isolation is decided by what happened in which order,
// not by how soon: on a loaded machine every delivery is slow.
func TestWebhookFanOutIsolatesBadEndpoints(t *testing.T) {
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	if _, err := db.Exec(outboxtest.Schema); err != nil {
		t.Fatal(err)
	}
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	receivers := map[string]*receiver.Receiver{}
	var eps []string
	// recovered is closed once the healthy endpoints hold every event: the
	// down and the hanging endpoint answer as healthy ones from then on.
	recovered := make(chan struct{})
	isRecovered := func() bool {
		select {
		case <-recovered:
			return true
		default:
			return false
		}
	}
	for i := range 20 {
		name := fmt.Sprintf("ep%02d", i)
		var behave func(*http.Request, []byte, time.Duration) receiver.Reply
		switch i {
		case 0: // down until the healthy ones have everything
			behave = func(*http.Request, []byte, time.Duration) receiver.Reply {
				if !isRecovered() {
					return receiver.Reply{Status: 503}
				}
				return receiver.Reply{Status: 200}
			}
		case 1: // hangs past the 500ms timeout until then
			behave = func(*http.Request, []byte, time.Duration) receiver.Reply {
				if !isRecovered() {
					return receiver.Reply{Status: 200, Hang: 3 * time.Second}
				}
				return receiver.Reply{Status: 200}
			}
		case 2: // rate limited: every other request is a 429 with Retry-After
			var n int
			var mu sync.Mutex
			behave = func(*http.Request, []byte, time.Duration) receiver.Reply {
				mu.Lock()
				defer mu.Unlock()
				n++
				if n%2 == 1 {
					return receiver.Reply{Status: 429, Header: http.Header{"Retry-After": {"1"}}}
				}
				return receiver.Reply{Status: 200}
			}
		case 3: // gone
			behave = func(*http.Request, []byte, time.Duration) receiver.Reply { return receiver.Reply{Status: 410} }
		}
		rc := receiver.Start(t, behave)
		receivers[name] = rc
		// Only the hanging endpoint's timeout is short: one that answers
		// at once times out only when the machine is too loaded to read
		// the answer in time, and every such timeout sends its events again.
		timeout := "10s"
		if i == 1 {
			timeout = "500ms"
		}
		eps = append(eps, fmt.Sprintf(`{name: %s, url: "%s/hook", secrets: ["%s"], body: envelope, timeout: %s,
      retry: {initial_backoff: 100ms, max_backoff: 1s, max_attempts: 1000}}`, name, rc.URL, secret, timeout))
	}
	dir := t.TempDir()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %s.outbox}]
checkpoint: {path: %s, interval: 200ms}
sinks:
  - name: hooks
    type: webhook
    webhook:
      endpoints:
        - %s
`, srv.Port, testserver.ServerID(), dbname, filepath.Join(dir, "cp.json"), strings.Join(eps, "\n        - "))))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rl := startRelay(t, cfg, relay.Options{Logger: relaytest.Stderr(slog.LevelError + 4)})
	waitForCheckpoint(t, cfg.Checkpoint.Path)
	// every endpoint's pipeline must have saved its start before producing
	time.Sleep(500 * time.Millisecond)

	w := &outboxtest.Workload{}
	outboxtest.Produce(ctx, t, db, w, 2, 60, []int{1, 2, 4, 3}, 25)
	total := w.Events()

	counts := func() string {
		var b strings.Builder
		for i := range 20 {
			name := fmt.Sprintf("ep%02d", i)
			fmt.Fprintf(&b, " %s:%d", name, receivers[name].Unique())
		}
		return fmt.Sprintf("of %d events:%s", total, b.String())
	}
	healthyHaveAll := func() bool {
		for i := 4; i < 20; i++ {
			if receivers[fmt.Sprintf("ep%02d", i)].Unique() < total {
				return false
			}
		}
		return true
	}
	eventually.Within(t, 3*time.Minute, "the healthy endpoints to receive every event while ep00 answers 503 and ep01 hangs", healthyHaveAll,
		func() { t.Logf("received %s", counts()) })
	recoveredAt := time.Now() // before any answer that follows it
	close(recovered)
	eventually.Within(t, 3*time.Minute, "the recovered endpoints to catch up", func() bool {
		for _, name := range []string{"ep00", "ep01", "ep02"} {
			if receivers[name].Unique() < total {
				return false
			}
		}
		return true
	}, func() { t.Logf("received %s", counts()) })
	if err := rl.stop(t); err != nil {
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
		got := rc.Accepted("")
		if name == "ep03" {
			if len(got) != 0 {
				t.Errorf("410 endpoint accepted %d events", len(got))
			}
			continue
		}
		var d []outboxtest.Delivered
		for _, g := range got {
			if g.WebhookID != g.EventID {
				t.Fatalf("%s: webhook-id %q is not the event id %q", name, g.WebhookID, g.EventID)
			}
			d = append(d, outboxtest.Delivered{ID: g.EventID, AggregateID: g.AggregateID})
			if name >= "ep04" {
				healthyLatency = append(healthyLatency, g.At.Sub(commitAt[g.EventID]))
			}
		}
		t.Run(name, func(t *testing.T) { outboxtest.Check(t, w, d, false) })
	}
	sort.Slice(healthyLatency, func(i, j int) bool { return healthyLatency[i] < healthyLatency[j] })
	t.Logf("healthy endpoints: %d deliveries, p50 %v, p99 %v from commit to receipt", len(healthyLatency),
		healthyLatency[len(healthyLatency)/2], healthyLatency[len(healthyLatency)*99/100])
	// Isolation, not speed (that is the benchmark's): every event reached
	// the healthy endpoints before the down one accepted anything. Had they
	// waited for it, the first wait above would have timed out.
	first := receivers["ep00"].Accepted("")
	if len(first) == 0 || first[0].At.Before(recoveredAt) {
		t.Errorf("the 503 endpoint accepted an event before it recovered, or none (%d)", len(first))
	}
	for i := 4; i < 20; i++ {
		got := receivers[fmt.Sprintf("ep%02d", i)].Accepted("")
		if n := receiver.Unique(acceptedBefore(got, recoveredAt)); n < total {
			t.Errorf("ep%02d received %d of %d events before the bad endpoints recovered: they held it back", i, n, total)
		}
	}

	// The 410 endpoint is disabled; the events it held when it answered
	// are dead letters, the later ones wait behind its cursor
	// (TestAnEndpointAnswering410IsDisabledAndLosesNothing enables it).
	if cp := loadCP(t, cfg.Checkpoint.Path, "hooks/ep03"); !strings.Contains(cp.Disabled, "410") {
		t.Errorf("the 410 endpoint's checkpoint: disabled %q, want it disabled for its 410", cp.Disabled)
	}
	store, err := deadletter.OpenFile(deadletter.Dir(cfg))
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

// acceptedBefore returns the requests of reqs accepted before at.
func acceptedBefore(reqs []receiver.Request, at time.Time) []receiver.Request {
	var out []receiver.Request
	for _, r := range reqs {
		if r.At.Before(at) {
			out = append(out, r)
		}
	}
	return out
}

// A sink that fails for good (here: a permanent failure with no dead-letter
// store) stops alone: the other endpoint keeps receiving, /readyz names the
// stopped one (an endpoint's trouble is its own: the relay stays ready), and
// Run ends with its error only at shutdown.
func TestAFailedSinkStopsAloneAndTheOthersGoOn(t *testing.T) {
	dbname, w := newOutbox(t)
	db := srv.DB(t, dbname)
	bad := receiver.Start(t, func(*http.Request, []byte, time.Duration) receiver.Reply { return receiver.Reply{Status: 400} })
	good := receiver.Start(t, nil)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	httpAddr := l.Addr().String()
	l.Close()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
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
`, srv.Port, testserver.ServerID(), dbname, filepath.Join(t.TempDir(), "cp.json"), httpAddr, bad.URL, good.URL)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rl := startRelay(t, cfg, relay.Options{Logger: slog.New(slog.DiscardHandler)})
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
	for deadline := time.Now().Add(20 * time.Second); good.Unique() < w.Events()+w2.Events() && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	if got, want := good.Unique(), w.Events()+w2.Events(); got != want {
		t.Fatalf("the healthy endpoint got %d of %d events after the other one stopped", got, want)
	}
	if err, stopped := rl.exited(0); stopped {
		t.Fatalf("the relay ended while a sink was still running: %v", err)
	}
	err = rl.stop(t)
	if err == nil || !strings.Contains(err.Error(), "sink hooks/bad") {
		t.Fatalf("Run = %v, want the stopped sink's error", err)
	}
}
