package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/internal/eventually"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/receiver"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/replay"
)

// A replay whose endpoint refuses one aggregate's events (it retries that
// one) and takes every other, SIGKILLed once its progress lists as many
// acknowledged events as it can (replay.max_in_flight) and more were
// taken: after the restart, at most replay.max_in_flight events are sent
// again. (The acknowledgements beyond the full list stopped counting once
// saved, so sending went on behind the held aggregate and a restart sent
// them all again: 1,278 to 2,250 with a limit of 1,000.)
func TestAReplayHeldByOneAggregateResendsAtMostMaxInFlightAfterSIGKILL(t *testing.T) {
	const limit = 20
	bin := buildBinary(t)
	srv := testserver.Start(t, testserver.Options{ServerID: 9})
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	if _, err := db.Exec(outboxtest.Schema); err != nil {
		t.Fatal(err)
	}
	var open atomic.Bool
	var held sync.Map // the aggregate refused: the first replayed one
	rc := receiver.Start(t, func(r *http.Request, body []byte, _ time.Duration) receiver.Reply {
		if r.Header.Get("webhook-replay") == "" || open.Load() {
			return receiver.Reply{Status: 200}
		}
		var env struct {
			AggregateID string `json:"aggregate_id"`
		}
		_ = json.Unmarshal(body, &env)
		agg := env.AggregateID
		if first, _ := held.LoadOrStore("agg", agg); first == agg {
			return receiver.Reply{Status: 503}
		}
		return receiver.Reply{Status: 200}
	})
	dir := t.TempDir()
	cpPath := filepath.Join(dir, "checkpoints.json")
	cfgPath := writeFile(t, "relay.yaml", fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %s.outbox}]
checkpoint: {path: %s, interval: 100ms}
replay: {poll: 200ms, max_in_flight: %d}
sinks:
  - name: hooks
    type: webhook
    webhook:
      endpoints:
        - {name: a, url: "%s/a", body: envelope, retry: {initial_backoff: 20ms, max_backoff: 100ms}}
log: {level: info}
`, srv.Port, testserver.ServerID(), dbname, cpPath, limit, rc.URL))
	logf, err := os.Create(filepath.Join(dir, "relay.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	relayLog := func() { b, _ := os.ReadFile(logf.Name()); t.Logf("relay log:\n%s", tail(b)) }
	cmd := startRelay(t, bin, cfgPath, logf, logf)
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	// Its start: its own cursor, or, while it has had no event, its
	// webhook sink's shared cursor.
	eventually.Within(t, 60*time.Second, "the endpoint's start checkpoint", func() bool {
		st, err := checkpoint.OpenFileReadOnly(cpPath)
		if err != nil {
			return false
		}
		_, _, err = gateway.CursorOf(context.Background(), st, "hooks/a")
		return err == nil
	}, relayLog)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	since := secondAfter(time.Now())
	window := &outboxtest.Workload{Prefix: "window-"}
	outboxtest.Produce(ctx, t, db, window, 2, 150, []int{1, 2}, 40)
	var out, errOut bytes.Buffer
	if code := mainCode(ctx, []string{"endpoints", "replay", "--config", cfgPath, "hooks/a", "--since", since.Format(time.RFC3339)}, &out, &errOut); code != 0 {
		t.Fatalf("endpoints replay exited %d: %s%s", code, out.String(), errOut.String())
	}
	m := jobIDRe.FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("endpoints replay printed no job id: %s", out.String())
	}
	id := m[1]
	taken := func() map[string]int {
		n := map[string]int{}
		for _, r := range rc.Accepted("/a") {
			if r.Replay == id {
				n[r.EventID]++
			}
		}
		return n
	}
	eventually.Within(t, 90*time.Second, "the replay's progress to list max_in_flight acknowledged events, more taken", func() bool {
		st, err := checkpoint.OpenFileReadOnly(cpPath)
		if err != nil {
			return false
		}
		cp, err := st.Load(context.Background(), replay.ProgressKey(id))
		return err == nil && cp.Acked.Len() >= limit && len(taken()) > limit
	}, relayLog)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	before := taken()
	open.Store(true)
	cmd = startRelay(t, bin, cfgPath, logf, logf)
	eventually.Within(t, 90*time.Second, "the resumed replay to be done", func() bool { return readJob(t, cpPath, id).State == replay.Done }, relayLog)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()
	resent := 0
	for _, n := range taken() {
		if n > 1 {
			resent += n - 1
		}
	}
	t.Logf("window %d events; taken before the kill %d; sent again after it %d (limit %d)", window.Events(), len(before), resent, limit)
	if resent > limit {
		t.Errorf("the restarted replay sent %d events again, more than replay.max_in_flight (%d)", resent, limit)
		relayLog()
	}
}
