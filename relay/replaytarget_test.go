package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/internal/eventually"
	"github.com/outbox-relay/outbox-relay/internal/receiver"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/relaytest"
	"github.com/outbox-relay/outbox-relay/replay"
	"github.com/outbox-relay/outbox-relay/sink/webhook"
	"github.com/outbox-relay/outbox-relay/source"
)

// A running replay to an endpoint of the endpoints table follows its row:
// when the row's url changes, the replay sends to the new url (it was sent
// to the url of its start for ever); when the row is disabled, the job
// stops, recorded as stopped with why, and sends nothing more.
func TestARunningReplayFollowsItsEndpointsRow(t *testing.T) {
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	for _, q := range []string{
		`CREATE TABLE outbox (seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, id VARCHAR(64) NOT NULL UNIQUE,
		  aggregatetype VARCHAR(64) NOT NULL, aggregateid VARCHAR(64) NOT NULL, type VARCHAR(64) NOT NULL,
		  payload JSON NOT NULL)`,
		webhook.EndpointsTableSchema,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	// old refuses every replayed event (the job keeps retrying it there);
	// new takes everything.
	old := receiver.Start(t, func(r *http.Request, _ []byte, _ time.Duration) receiver.Reply {
		if r.Header.Get("webhook-replay") != "" {
			return receiver.Reply{Status: 503}
		}
		return receiver.Reply{Status: 200}
	})
	moved := receiver.Start(t, nil)
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.Exec(q, args...); err != nil {
			t.Fatal(err)
		}
	}
	exec(`INSERT INTO outbox_endpoints (id, url, secrets) VALUES ('ep', ?, ?)`, old.URL+"/hook", secret)
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %[3]s.outbox}]
checkpoint: {path: %[4]s, interval: 100ms}
replay: {poll: 100ms}
sinks:
  - name: hooks
    type: webhook
    webhook:
      endpoints_table:
        table: %[3]s.outbox_endpoints
        defaults: {body: envelope, egress: {allow: [127.0.0.1]}, retry: {initial_backoff: 20ms, max_backoff: 100ms, max_attempts: 100000}}
`, srv.Port, testserver.ServerID(), dbname, filepath.Join(t.TempDir(), "cp.json"))))
	if err != nil {
		t.Fatal(err)
	}
	// Stopped, and waited for, before the checkpoint's directory is
	// removed: the relay writes there until its Run returns.
	startRelay(t, cfg, relay.Options{Logger: relaytest.Stderr(slog.LevelError)}).StopAtEnd(t)
	waitForCheckpoint(t, cfg.Checkpoint.Path)
	ctx := context.Background()
	info, err := source.ReadInfo(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	from, err := source.CurrentPosition(ctx, db, info)
	if err != nil {
		t.Fatal(err)
	}
	const events = 5
	for i := range events {
		exec(`INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES (?, 'order', ?, 'order.created', '{}')`,
			fmt.Sprintf("e%d", i), fmt.Sprintf("agg-%d", i))
	}
	until, err := source.CurrentPosition(ctx, db, info)
	if err != nil {
		t.Fatal(err)
	}
	spool := replay.SpoolFor(cfg.Checkpoint.Path)
	submit := func() replay.Job {
		t.Helper()
		j := replayJob("hooks", from, until)
		j.Endpoint = "ep"
		if err := spool.Put(replay.Request{Job: &j}); err != nil {
			t.Fatal(err)
		}
		return j
	}
	refusedAtOld := func(j replay.Job) func() bool {
		return func() bool {
			for _, r := range old.Requests() {
				if r.Replay == j.ID && r.Status == 503 {
					return jobOf(t, cfg.Checkpoint.Path, j.ID).State == replay.Running
				}
			}
			return false
		}
	}

	// The url changes while the job runs: the job goes on at the new one.
	job := submit()
	eventually.Within(t, time.Minute, "the replay to be refused at the old url", refusedAtOld(job))
	exec(`UPDATE outbox_endpoints SET url = ? WHERE id = 'ep'`, moved.URL+"/hook")
	eventually.Within(t, time.Minute, "the replay to be done, at the new url", func() bool {
		return jobOf(t, cfg.Checkpoint.Path, job.ID).State.Final()
	})
	got := map[string]bool{}
	for _, r := range moved.Accepted("") {
		if r.Replay == job.ID {
			got[r.EventID] = true
		}
	}
	if j := jobOf(t, cfg.Checkpoint.Path, job.ID); j.State != replay.Done || len(got) != events {
		t.Fatalf("job %s (%q): %d of %d events replayed to the new url", j.State, j.Error, len(got), events)
	}

	// The row is disabled while a job runs: the job stops, saying why.
	exec(`UPDATE outbox_endpoints SET url = ? WHERE id = 'ep'`, old.URL+"/hook")
	job = submit()
	eventually.Within(t, time.Minute, "the second replay to be refused at the old url", refusedAtOld(job))
	exec(`UPDATE outbox_endpoints SET enabled = 0 WHERE id = 'ep'`)
	eventually.Within(t, time.Minute, "the replay to stop", func() bool {
		return jobOf(t, cfg.Checkpoint.Path, job.ID).State.Final()
	})
	if j := jobOf(t, cfg.Checkpoint.Path, job.ID); j.State != replay.Stopped || !strings.Contains(j.Error, "endpoint hooks/ep is disabled") {
		t.Fatalf("job %s (error %q), want stopped, saying the endpoint is disabled", j.State, j.Error)
	}

	// The row is deleted while a job runs: the same, saying so.
	exec(`UPDATE outbox_endpoints SET enabled = 1 WHERE id = 'ep'`)
	job = submit()
	eventually.Within(t, time.Minute, "the third replay to be refused at the old url", refusedAtOld(job))
	exec(`DELETE FROM outbox_endpoints WHERE id = 'ep'`)
	eventually.Within(t, time.Minute, "the replay to stop", func() bool {
		return jobOf(t, cfg.Checkpoint.Path, job.ID).State.Final()
	})
	if j := jobOf(t, cfg.Checkpoint.Path, job.ID); j.State != replay.Stopped || !strings.Contains(j.Error, "endpoint hooks/ep was deleted") {
		t.Fatalf("job %s (error %q), want stopped, saying the endpoint was deleted", j.State, j.Error)
	}
}
