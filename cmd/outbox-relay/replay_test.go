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
	"github.com/outbox-relay/outbox-relay/gateway"
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
		// Their own cursors, or, while they have had no event, their
		// webhook sink's shared cursor.
		_, _, ea := gateway.CursorOf(context.Background(), st, "hooks/a")
		_, _, eb := gateway.CursorOf(context.Background(), st, "hooks/b")
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
	// rest; the job's progress is saved, and its counts (saved every
	// replay.poll, apart from the progress) count every event taken: a
	// kill before that would lose the count of those the progress holds.
	eventually.Within(t, 90*time.Second, "the replay to stall with its progress and counts saved", func() bool {
		refused := 0
		for _, r := range rc.Requests() {
			if r.Replay != "" && r.Status == 503 {
				refused++
			}
		}
		var taken []receiver.Request
		for _, r := range rc.Accepted("/a") {
			if r.Replay != "" {
				taken = append(taken, r)
			}
		}
		j := readJob(t, cpPath, id)
		return refused > 0 && j.State == replay.Running && j.Sent > 0 && j.Sent >= int64(receiver.Unique(taken))
	}, relayLog)
	// status and replay list show it, running; status lists no job key as a sink.
	if code, out := run(ctx, "status", "--config", cfgPath); code != 0 || !strings.Contains(out, "replay "+id+" running to hooks/a") || strings.Contains(out, "/replay/") {
		t.Errorf("status (exit %d) does not show the running replay apart from the sinks:\n%s", code, out)
	}
	if code, out := run(ctx, "replay", "list", "--config", cfgPath); code != 0 || !regexp.MustCompile(id+`\s+running\s+hooks/a`).MatchString(out) {
		t.Errorf("replay list (exit %d) does not show the running replay:\n%s", code, out)
	}
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

// run runs the command in-process and returns its exit code and output.
func run(ctx context.Context, args ...string) (int, string) {
	var out bytes.Buffer
	code := mainCode(ctx, args, &out, &out)
	return code, out.String()
}

// replay --dry-run reads the window and counts what it would send (all of
// it, or what --type selects), sends nothing and makes no job; replay list
// and cancel, with no relay running, work on the file store itself. Bad
// asks are refused with what to give instead: an unknown sink, a webhook
// sink without --endpoint, a --since in the future, an --until before
// --since, no start at all, and a window the server purged (naming
// --source table).
func TestReplayCommandDryRunAndBadInput(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{ServerID: 10})
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	if _, err := db.Exec(outboxtest.Schema); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cpPath := filepath.Join(dir, "checkpoints.json")
	cfgPath := writeFile(t, "relay.yaml", fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %s.outbox}]
checkpoint: {path: %s}
sinks:
  - {name: out, type: stdout}
  - name: hooks
    type: webhook
    webhook: {endpoints: [{name: a, url: "http://127.0.0.1:1/a"}]}
log: {level: warn}
`, srv.Port, testserver.ServerID(), dbname, cpPath))
	ctx := context.Background()
	insert := func(id, typ string) {
		t.Helper()
		if _, err := db.Exec("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES (?, 'order', ?, ?, '{}')", id, "agg-"+id[:1], typ); err != nil {
			t.Fatal(err)
		}
	}
	insert("x-before", "order.created")
	since := secondAfter(time.Now())
	for i := range 5 {
		insert(fmt.Sprintf("c%d", i), "order.created")
	}
	for i := range 3 {
		insert(fmt.Sprintf("p%d", i), "order.paid")
	}

	code, out := run(ctx, "replay", "--config", cfgPath, "--sink", "out", "--since", since.Format(time.RFC3339), "--dry-run")
	if code != 0 || !strings.Contains(out, "dry run: 8 events would be sent to out, 0 passed over") {
		t.Fatalf("dry run of the window (exit %d): %s; want 8 events", code, out)
	}
	code, out = run(ctx, "replay", "--config", cfgPath, "--sink", "out", "--since", since.Format(time.RFC3339), "--type", "order.c*", "--dry-run")
	if code != 0 || !strings.Contains(out, "dry run: 5 events would be sent to out, 3 passed over") {
		t.Fatalf("dry run with --type order.c* (exit %d): %s; want 5 sent, 3 passed over", code, out)
	}
	code, out = run(ctx, "endpoints", "replay", "--config", cfgPath, "hooks/a", "--since", since.Format(time.RFC3339), "--dry-run")
	if code != 0 || !strings.Contains(out, "dry run: 8 events would be sent to hooks/a") {
		t.Fatalf("endpoint dry run (exit %d): %s", code, out)
	}
	if code, out = run(ctx, "replay", "list", "--config", cfgPath); code != 0 || !strings.Contains(out, "no replay jobs") {
		t.Fatalf("after dry runs, replay list (exit %d): %s; want no jobs", code, out)
	}

	// No relay runs: a job is written to the file store, and cancelled there.
	code, out = run(ctx, "replay", "--config", cfgPath, "--sink", "out", "--since", since.Format(time.RFC3339))
	m := jobIDRe.FindStringSubmatch(out)
	if code != 0 || m == nil || !strings.Contains(out, "no relay runs now") {
		t.Fatalf("replay with no relay running (exit %d): %s", code, out)
	}
	if code, out = run(ctx, "replay", "list", "--config", cfgPath); code != 0 || !strings.Contains(out, m[1]) || !strings.Contains(out, "pending") {
		t.Fatalf("replay list (exit %d): %s; want job %s pending", code, out, m[1])
	}
	if code, out = run(ctx, "replay", "cancel", "--config", cfgPath, m[1]); code != 0 || !strings.Contains(out, "cancelled") {
		t.Fatalf("replay cancel (exit %d): %s", code, out)
	}
	if j := readJob(t, cpPath, m[1]); j.State != replay.Cancelled {
		t.Fatalf("job %s is %s after cancel, want cancelled", m[1], j.State)
	}
	if code, out = run(ctx, "replay", "cancel", "--config", cfgPath, m[1]); code != 1 || !strings.Contains(out, "already cancelled") {
		t.Fatalf("cancelling twice (exit %d): %s", code, out)
	}

	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"an unknown sink", []string{"replay", "--sink", "nope", "--since", "1h"}, `sink "nope" is not in the configuration: use one of [out hooks]`},
		{"a webhook sink without endpoint", []string{"replay", "--sink", "hooks", "--since", "1h"}, "name the endpoint to replay to with --endpoint"},
		{"an unknown endpoint", []string{"endpoints", "replay", "hooks/zz", "--since", "1h"}, `sink "hooks" has no endpoint "zz"`},
		{"since in the future", []string{"replay", "--sink", "out", "--since", "2099-01-01T00:00:00Z"}, "is in the future"},
		{"until before since", []string{"replay", "--sink", "out", "--since", "1h", "--until", "2h"}, "is not after --since"},
		{"no start", []string{"replay", "--sink", "out", "--until", "1h"}, "--since TIME or --from GTID"},
		{"a bad type pattern", []string{"replay", "--sink", "out", "--since", "1h", "--type", "order.[x"}, "is not a valid pattern"},
		{"a time that is not one", []string{"replay", "--sink", "out", "--since", "yesterday"}, "is not a time"},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{c.args[0]}, c.args[1:]...)
			if c.args[0] == "endpoints" {
				args = append([]string{"endpoints", "replay", "--config", cfgPath}, c.args[2:]...)
			} else {
				args = append([]string{"replay", "--config", cfgPath}, c.args[1:]...)
			}
			code, out := run(ctx, args...)
			if code == 0 || !strings.Contains(out, c.want) {
				t.Fatalf("exit %d, output %q; want an error containing %q", code, out, c.want)
			}
		})
	}

	// The server purges the binlog holding the window's start.
	if _, err := db.Exec("FLUSH BINARY LOGS"); err != nil {
		t.Fatal(err)
	}
	insert("y-after-purge", "order.created")
	var last string
	rows, err := db.Query("SHOW BINARY LOGS")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name, size string
		cols, _ := rows.Columns()
		dest := []any{&name, &size}
		for len(dest) < len(cols) {
			dest = append(dest, new(any))
		}
		if err := rows.Scan(dest...); err != nil {
			t.Fatal(err)
		}
		last = name
	}
	rows.Close()
	// The server keeps a file a binlog dump (the dry runs') still reads
	// until it notices the dump's connection closed.
	eventually.Within(t, 60*time.Second, "the server to purge the binary logs before "+last, func() bool {
		if _, err := db.Exec("PURGE BINARY LOGS TO '" + last + "'"); err != nil {
			t.Fatal(err)
		}
		var n int
		rows, err := db.Query("SHOW BINARY LOGS")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			n++
		}
		return n == 1
	})
	code, out = run(ctx, "replay", "--config", cfgPath, "--sink", "out", "--since", since.Format(time.RFC3339))
	if code == 0 || !strings.Contains(out, "no longer holds") || !strings.Contains(out, "--source table") {
		t.Fatalf("a purged window (exit %d): %s; want an error naming --source table", code, out)
	}
}
