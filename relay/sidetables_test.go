package relay_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/attempts"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/deadletter"
	"github.com/outbox-relay/outbox-relay/gateway"
	"github.com/outbox-relay/outbox-relay/internal/eventually"
	"github.com/outbox-relay/outbox-relay/internal/receiver"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/relay"
)

// The checkpoint database is in latin1, MariaDB's default. An endpoint
// answers 400 with "refusé ✓ — it’s not an order" to an event whose
// aggregate id is 320 characters: the store refused that dead letter
// (errors 1406 and 1366), and the relay wrote it again without end, the
// endpoint's checkpoint waiting, across restarts. Now it is kept whole, and
// so is the attempt with the answer. A dead letter the store still refuses
// (a trigger on the table refuses it here) is never dropped and never a
// silent stall: an ERROR line, outbox_relay_dead_letter_waiting_events and
// /readyz (and /endpoints) name the endpoint, the event and the fix; only
// that endpoint waits, the other one goes on; once the store takes it, the
// endpoint goes on by itself.
func TestADeadLetterALatin1StoreRefusedIsKeptAndOneItStillRefusesHoldsOnlyItsEndpoint(t *testing.T) {
	src := srv.NewDatabase(t)
	db := srv.DB(t, src)
	if _, err := db.Exec(`CREATE TABLE outbox (seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, id VARCHAR(64) NOT NULL UNIQUE,
  aggregatetype VARCHAR(64) NOT NULL, aggregateid VARCHAR(400) NOT NULL, type VARCHAR(64) NOT NULL, payload JSON NOT NULL) DEFAULT CHARSET utf8mb4`); err != nil {
		t.Fatal(err)
	}
	cpdb := srv.NewDatabase(t)
	srv.Exec(t, "ALTER DATABASE "+cpdb+" CHARACTER SET latin1")
	const answer = "refusé ✓ — it’s not an order"
	bad := receiver.Start(t, func(*http.Request, []byte, time.Duration) receiver.Reply {
		return receiver.Reply{Status: 400, Body: answer}
	})
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
checkpoint: {store: mysql, dsn: "root@tcp(127.0.0.1:%d)/%s", table: cp, interval: 100ms}
delivery: {retry_backoff: 50ms, max_retry_backoff: 500ms}
attempts: {enabled: true}
http: {listen: "%s"}
sinks:
  - name: hooks
    type: webhook
    webhook:
      endpoints:
        - {name: bad, url: "%s", body: envelope}
        - {name: good, url: "%s", body: envelope}
`, srv.Port, testserver.ServerID(), src, srv.Port, cpdb, httpAddr, bad.URL, good.URL)))
	if err != nil {
		t.Fatal(err)
	}
	logs := newCountingHandler("dead-letter store write failed")
	rl := startRelay(t, cfg, relay.Options{Logger: slog.New(logs)})
	ctx := context.Background()
	store := srv.DB(t, cpdb)
	// The endpoints have no cursor of their own until their first event:
	// the webhook sink's shared cursor is theirs.
	eventually.Within(t, 30*time.Second, "the endpoints' shared cursor to be saved", func() bool {
		var n int
		return store.QueryRow("SELECT COUNT(*) FROM cp WHERE name = ?", gateway.SharedKey("hooks")).Scan(&n) == nil && n == 1
	})
	insert := func(id, agg string) {
		t.Helper()
		if _, err := db.Exec("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES (?, 'order', ?, 'order.created', ?)",
			id, agg, `{"note": "commande créée ✓"}`); err != nil {
			t.Fatal(err)
		}
	}
	dlq, err := deadletter.OpenMySQLReadOnly(store, "")
	if err != nil {
		t.Fatal(err)
	}
	letters := func() map[string]deadletter.Record {
		recs, err := dlq.List(ctx, deadletter.Filter{Sink: "hooks/bad"})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]deadletter.Record{}
		for _, r := range recs {
			out[r.Event.ID] = r
		}
		return out
	}

	long := strings.Repeat("aggregate-é-", 26) + "end" // 315 characters, 341 bytes
	insert("a-1", long)
	eventually.Within(t, 60*time.Second, "the 400 to the event with a long aggregate id to be a dead letter", func() bool { return len(letters()) == 1 })
	r := letters()["a-1"]
	if r.Event == nil || r.Event.AggregateID != long || !strings.Contains(r.Reason, "refusé ✓ — it’s not an order") || string(r.Event.Payload) != `{"note": "commande créée ✓"}` {
		t.Fatalf("the dead letter: %+v, event %+v: want the whole event and the answer in its reason", r, r.Event)
	}
	att, err := attempts.OpenMySQLReadOnly(store, "")
	if err != nil {
		t.Fatal(err)
	}
	eventually.Within(t, 30*time.Second, "the attempt with the endpoint's answer to be recorded", func() bool {
		recs, err := att.Search(ctx, attempts.Query{Endpoint: "bad", EventID: "a-1"})
		return err == nil && len(recs) == 1 && string(recs[0].Answer) == answer && strings.Contains(recs[0].Error, "refusé ✓")
	})

	// A dead letter the store still refuses.
	if _, err := store.Exec("CREATE TRIGGER refuse_dead_letter BEFORE INSERT ON outbox_relay_dead_letters FOR EACH ROW " +
		"IF NEW.aggregate_id = 'refuse-me' THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused by a trigger'; END IF"); err != nil {
		t.Fatal(err)
	}
	insert("b-1", "refuse-me")
	insert("c-1", "c")
	get := func(path string) string {
		resp, err := http.Get("http://" + httpAddr + path)
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	const gauge = `outbox_relay_dead_letter_waiting_events{sink="hooks"} `
	eventually.Within(t, 60*time.Second, "/readyz to name the endpoint, the event and the fix", func() bool {
		readyz := get("/readyz")
		return strings.Contains(readyz, "endpoint hooks/bad: waits on event b-1 (GTID ") && strings.Contains(readyz, "refused by a trigger") &&
			strings.Contains(readyz, "the dead-letter store refuses this record") && strings.Contains(get("/metrics"), gauge+"1")
	}, func() { t.Logf("/readyz: %s", get("/readyz")) })
	if !strings.Contains(get("/endpoints"), `"dead_letter_waiting":"waits on event b-1`) {
		t.Errorf("/endpoints does not say hooks/bad waits on b-1: %s", get("/endpoints"))
	}
	if n := logs.counts[0].Load(); n == 0 {
		t.Error("no ERROR line says the dead-letter store write failed")
	}
	// Its neighbour goes on.
	eventually.Within(t, 30*time.Second, "the other endpoint to receive every event", func() bool {
		return good.Unique() == 3
	}, func() { t.Logf("good holds %d events", good.Unique()) })
	if _, ok := letters()["b-1"]; ok {
		t.Fatal("the refused dead letter is stored")
	}
	var cpBad string
	if err := store.QueryRow("SELECT gtid_set FROM cp WHERE name = 'hooks/bad'").Scan(&cpBad); err != nil {
		t.Fatal(err)
	}
	// Once the store takes it, the endpoint goes on by itself.
	if _, err := store.Exec("DROP TRIGGER refuse_dead_letter"); err != nil {
		t.Fatal(err)
	}
	eventually.Within(t, 60*time.Second, "the refused dead letter to be stored once the store takes it, and the alert to clear", func() bool {
		got := letters()
		return got["b-1"].Event != nil && got["c-1"].Event != nil && strings.Contains(get("/metrics"), gauge+"0") && !strings.Contains(get("/readyz"), "waits on event")
	})
	eventually.Within(t, 30*time.Second, "hooks/bad's checkpoint to pass the event it waited on", func() bool {
		var now string
		return store.QueryRow("SELECT gtid_set FROM cp WHERE name = 'hooks/bad'").Scan(&now) == nil && now != cpBad
	})
	if err := rl.stop(t); err != nil {
		t.Fatalf("relay: %v", err)
	}
}
