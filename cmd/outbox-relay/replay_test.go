package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/eventually"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/receiver"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/replay"
)

// readJob reads replay job id from the checkpoint file (zero State until
// the relay has adopted it).
func readJob(t testing.TB, cpPath, id string) replay.Job {
	t.Helper()
	st, err := checkpoint.OpenFileReadOnly(cpPath)
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := replay.NewStore(st)
	if err != nil {
		t.Fatal(err)
	}
	j, err := jobs.Get(context.Background(), id)
	if err != nil {
		return replay.Job{ID: id}
	}
	return j
}

// secondAfter waits until the wall clock is in a later second than now,
// and returns the start of that second: binlog commit times have whole
// seconds, so what was committed before is before it.
func secondAfter(now time.Time) time.Time {
	next := now.Truncate(time.Second).Add(time.Second)
	for time.Now().Before(next) {
		time.Sleep(next.Sub(time.Now()))
	}
	return next
}

var jobIDRe = regexp.MustCompile(`replay job (\S+) made`)

// An endpoint recovers since a time (outbox-relay endpoints replay, as
// users run it, against the relay binary holding the file store): the
// relay is SIGKILLed mid-replay (the endpoint refuses replayed events after
// the first 120, so the replay cannot have ended), restarted, and resumes
// the replay from its saved progress: in the end every event committed
// since that time up to the command is sent again to that endpoint, marked
// with the job's id (webhook-replay), at most replay.max_in_flight twice,
// in commit order, and nothing from before or after the window; the other
// endpoint gets no replayed event; the live stream delivered everything to
// both.
func TestEndpointReplayResumesAfterSIGKILL(t *testing.T) {
	bin := buildBinary(t)
	srv := testserver.Start(t, testserver.Options{ServerID: 9})
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	if _, err := db.Exec(outboxtest.Schema); err != nil {
		t.Fatal(err)
	}
	var open atomic.Bool
	var replayedOK atomic.Int64
	rc := receiver.Start(t, func(r *http.Request, _ []byte, _ time.Duration) receiver.Reply {
		if r.Header.Get("webhook-replay") != "" && !open.Load() && replayedOK.Add(1) > 120 {
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
replay: {poll: 200ms, max_in_flight: 20}
sinks:
  - name: hooks
    type: webhook
    webhook:
      endpoints:
        - {name: a, url: "%s/a", body: envelope, retry: {initial_backoff: 50ms, max_backoff: 200ms}}
        - {name: b, url: "%s/b", body: envelope}
log: {level: info}
`, srv.Port, testserver.ServerID(), dbname, cpPath, rc.URL, rc.URL))
	logf, err := os.Create(filepath.Join(dir, "relay.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	relayLog := func() { b, _ := os.ReadFile(logf.Name()); t.Logf("relay log:\n%s", tail(b)) }
	cmd := startRelay(t, bin, cfgPath, logf, logf)
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	eventually.Within(t, 60*time.Second, "both endpoints' start checkpoints", func() bool {
		st, err := checkpoint.OpenFileReadOnly(cpPath)
		if err != nil {
			return false
		}
		_, ea := st.Load(context.Background(), "hooks/a")
		_, eb := st.Load(context.Background(), "hooks/b")
		return ea == nil && eb == nil
	}, relayLog)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	before := &outboxtest.Workload{Prefix: "before-"}
	outboxtest.Produce(ctx, t, db, before, 1, 20, []int{1, 2}, 5)
	since := secondAfter(time.Now())
	window := &outboxtest.Workload{Prefix: "window-"}
	outboxtest.Produce(ctx, t, db, window, 2, 80, []int{1, 3, 2}, 8)

	var out, errOut bytes.Buffer
	if code := mainCode(ctx, []string{"endpoints", "replay", "--config", cfgPath, "hooks/a", "--since", since.Format(time.RFC3339)}, &out, &errOut); code != 0 {
		t.Fatalf("endpoints replay exited %d: %s%s", code, out.String(), errOut.String())
	}
	m := jobIDRe.FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("endpoints replay printed no job id: %s", out.String())
	}
	id := m[1]
	t.Logf("%s", strings.TrimSpace(out.String()))
	after := &outboxtest.Workload{Prefix: "after-"}
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		outboxtest.Produce(ctx, t, db, after, 1, 40, []int{2, 1}, 5)
	}()

	// Mid-replay: the endpoint took 120 replayed events and refuses the
	// rest; the job's progress is saved.
	eventually.Within(t, 90*time.Second, "the replay to stall with its progress saved", func() bool {
		refused := 0
		for _, r := range rc.Requests() {
			if r.Replay != "" && r.Status == 503 {
				refused++
			}
		}
		j := readJob(t, cpPath, id)
		return refused > 0 && j.State == replay.Running && j.Sent > 0
	}, relayLog)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if j := readJob(t, cpPath, id); j.State != replay.Running {
		t.Fatalf("job %s was %s at the kill, want running", id, j.State)
	}
	open.Store(true)
	cmd = startRelay(t, bin, cfgPath, logf, logf)
	eventually.Within(t, 90*time.Second, "the resumed replay to be done", func() bool { return readJob(t, cpPath, id).State == replay.Done }, relayLog)
	<-produced
	all := &outboxtest.Workload{Txns: append(append(before.Committed(), window.Committed()...), after.Committed()...)}
	live := func(path string) []outboxtest.Delivered {
		var out []outboxtest.Delivered
		for _, r := range rc.Accepted(path) {
			if r.Replay == "" {
				out = append(out, outboxtest.Delivered{ID: r.EventID, AggregateID: r.AggregateID})
			}
		}
		return out
	}
	eventually.Within(t, 60*time.Second, "the live stream to deliver everything to both endpoints", func() bool {
		return receiver.Unique(liveReqs(rc, "/a")) >= all.Events() && receiver.Unique(liveReqs(rc, "/b")) >= all.Events()
	}, relayLog)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()

	var replayed []outboxtest.Delivered
	for _, r := range rc.Accepted("/a") {
		if r.Replay == "" {
			continue
		}
		if r.Replay != id {
			t.Errorf("event %s replayed with webhook-replay %q, want the job's id %s", r.EventID, r.Replay, id)
		}
		replayed = append(replayed, outboxtest.Delivered{ID: r.EventID, AggregateID: r.AggregateID})
	}
	rep := outboxtest.Check(t, window, replayed, false)
	t.Logf("replayed to hooks/a: %d of the window's %d events, %d duplicates", rep.Delivered, rep.Committed, rep.Duplicates)
	if rep.Duplicates > 20 {
		t.Errorf("the resumed replay sent %d events twice, more than replay.max_in_flight (20): it did not resume from its progress", rep.Duplicates)
	}
	for _, r := range rc.Accepted("/b") {
		if r.Replay != "" {
			t.Fatalf("endpoint b got replayed event %s: only hooks/a was replayed", r.EventID)
		}
	}
	for _, path := range []string{"/a", "/b"} {
		rep := outboxtest.Check(t, all, live(path), false)
		t.Logf("live %s: %d delivered of %d, %d duplicates", path, rep.Delivered, rep.Committed, rep.Duplicates)
	}
	if j := readJob(t, cpPath, id); j.Sent < int64(window.Events()) {
		t.Errorf("the done job counts %d sent, fewer than the window's %d", j.Sent, window.Events())
	}
	if t.Failed() {
		relayLog()
	}
}

// liveReqs are the accepted requests on path without webhook-replay.
func liveReqs(rc *receiver.Receiver, path string) []receiver.Request {
	var out []receiver.Request
	for _, r := range rc.Accepted(path) {
		if r.Replay == "" {
			out = append(out, r)
		}
	}
	return out
}
