package relay_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/attempts"
	"github.com/outbox-relay/outbox-relay/internal/eventually"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/receiver"
	"github.com/outbox-relay/outbox-relay/sink/webhook"
)

// flaky answers 500 "try later" to the first request of each event and
// 200 to the next.
func flaky(t *testing.T) *receiver.Receiver {
	var mu sync.Mutex
	seen := map[string]bool{}
	return receiver.Start(t, func(r *http.Request, _ []byte, _ time.Duration) receiver.Reply {
		mu.Lock()
		defer mu.Unlock()
		id := r.Header.Get("webhook-id")
		if !seen[id] {
			seen[id] = true
			return receiver.Reply{Status: 500, Body: "try later"}
		}
		return receiver.Reply{Status: 200}
	})
}

// attemptsRelay makes a database with an outbox and an endpoints table, a
// receiver that answers 500 then 200, and a relay delivering to it with
// the checkpoint store store ("file" or "mysql").
func attemptsRelay(t *testing.T, store string) (*sql.DB, *receiver.Receiver, *rowsRelay) {
	t.Helper()
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	for _, q := range []string{outboxtest.Schema, webhook.EndpointsTableSchema} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	hook := flaky(t)
	ep := `{name: flaky, url: "` + hook.URL + `/hook", body: envelope, retry: {initial_backoff: 10ms, max_backoff: 50ms}}`
	rr := newRowsRelay(t, dbname, ep)
	if store == "mysql" {
		rr = newRowsRelayMySQL(t, dbname, ep)
	}
	return db, hook, rr
}

// With attempts.enabled, each attempt of an endpoint that answers 500 and
// then 200 is on record, searchable by event, endpoint, status and time,
// from the running relay (GET /attempts) and, once it stopped, from its
// store; with either checkpoint store.
func TestEveryAttemptIsOnRecord(t *testing.T) {
	for _, store := range []string{"file", "mysql"} {
		t.Run(store, func(t *testing.T) {
			db, hook, rr := attemptsRelay(t, store)
			rr.cfg.Attempts.Enabled = true
			stop := rr.run(t)
			start := time.Now()
			total := events(t, db, 3)
			eventually.Within(t, 60*time.Second, "every event delivered", func() bool { return hook.Unique() >= total })
			ids := map[string]bool{}
			for _, r := range hook.Accepted("") {
				ids[r.EventID] = true
			}
			live := attempts.NewClient("http://"+rr.http, nil)
			ctx := context.Background()
			var all []attempts.Record
			eventually.Within(t, 30*time.Second, "two attempts of each event on record", func() bool {
				var err error
				all, err = live.Search(ctx, attempts.Query{Sink: "hooks", Endpoint: "flaky"})
				return err == nil && len(all) == 2*total
			})
			for id := range ids {
				recs, err := live.Search(ctx, attempts.Query{EventID: id})
				if err != nil {
					t.Fatal(err)
				}
				if len(recs) != 2 {
					t.Fatalf("event %s: %d attempts on record, want 2", id, len(recs))
				}
				second, first := recs[0], recs[1] // newest first
				if first.Number != 1 || first.Status != 500 || first.Outcome != attempts.OutcomeRetry || string(first.Answer) != "try later" ||
					first.Duration <= 0 || first.Time.Before(start.Add(-time.Second)) || first.Sink != "hooks" || first.Endpoint != "flaky" {
					t.Errorf("event %s, first attempt: %+v", id, first)
				}
				if second.Number != 2 || second.Status != 200 || second.Outcome != attempts.OutcomeDelivered || second.Duration <= 0 ||
					second.Time.Before(first.Time) || second.GTID == "" || second.Committed.IsZero() {
					t.Errorf("event %s, second attempt: %+v", id, second)
				}
			}
			failed, err := live.Search(ctx, attempts.Query{Status: 500, Since: start.Add(-time.Second)})
			if err != nil || len(failed) != total {
				t.Errorf("attempts with status 500 since the start: %d, %v; want %d", len(failed), err, total)
			}
			if recs, err := live.Search(ctx, attempts.Query{Until: start.Add(-time.Minute)}); err != nil || len(recs) != 0 {
				t.Errorf("attempts before the start: %d, %v", len(recs), err)
			}
			if m := rr.metric(t, "outbox_relay_attempts_recorded_total "); m == "" {
				t.Error("no outbox_relay_attempts_recorded_total on /metrics")
			}
			stop()

			// Stopped, the store holds the same, read as the attempts
			// command reads it.
			st, err := attempts.OpenReadOnly(ctx, rr.cfg, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			stored, err := st.Search(ctx, attempts.Query{Failed: true})
			if err != nil {
				t.Fatal(err)
			}
			want := slices.DeleteFunc(slices.Clone(all), func(r attempts.Record) bool { return r.Outcome == attempts.OutcomeDelivered })
			if len(stored) != len(want) || len(stored) != total {
				t.Fatalf("failed attempts in the store: %d, want %d", len(stored), total)
			}
			for i := range stored {
				if stored[i].ID != want[i].ID || stored[i].EventID != want[i].EventID {
					t.Errorf("store %d: %d %s, live %d %s", i, stored[i].ID, stored[i].EventID, want[i].ID, want[i].EventID)
				}
			}
		})
	}
}

// Without the attempts section the relay records nothing and makes no
// file or table for it.
func TestWithoutTheSectionNothingIsRecordedOrMade(t *testing.T) {
	for _, store := range []string{"file", "mysql"} {
		t.Run(store, func(t *testing.T) {
			db, hook, rr := attemptsRelay(t, store)
			stop := rr.run(t)
			total := events(t, db, 2)
			eventually.Within(t, 60*time.Second, "every event delivered", func() bool { return hook.Unique() >= total })
			resp, err := http.Get("http://" + rr.http + "/attempts")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound {
				t.Errorf("GET /attempts: %s, want 404", resp.Status)
			}
			if m := rr.metric(t, "outbox_relay_attempts_"); m != "" {
				t.Errorf("/metrics has %q", m)
			}
			stop()
			if store == "file" {
				if _, err := os.Stat(rr.cfg.Attempts.Path); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s: %v, want no file", rr.cfg.Attempts.Path, err)
				}
				return
			}
			var n int
			if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'outbox_relay_attempts'").Scan(&n); err != nil || n != 0 {
				t.Errorf("attempts tables: %d, %v; want none", n, err)
			}
		})
	}
}
