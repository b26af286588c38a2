package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/receiver"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/relaytest"
)

// The relay's memory depends on the events it has not delivered, not on the
// source's traffic: a webhook endpoint answers 503 to one aggregate's event
// (retried all along) while producers commit many transactions, almost all
// to a non-outbox table and some with outbox events of other aggregates,
// which are delivered. The Go heap after a GC grows by less than 4 MB over
// 100,000 transactions; before the tracker kept only the newest settled
// position between unsettled ones, it held every transaction behind the
// stuck event, about 200 bytes each (20 MB here).
//
// OUTBOX_RELAY_BOUNDED_TXNS sets the number of transactions (the issue's
// scale is 500000); the heap and RSS growth are logged.
func TestMemoryIsBoundedWhileOneEventIsRetried(t *testing.T) {
	txns := 100_000
	if v := os.Getenv("OUTBOX_RELAY_BOUNDED_TXNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("OUTBOX_RELAY_BOUNDED_TXNS=%q: %v", v, err)
		}
		txns = n
	}
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	if _, err := db.Exec(outboxtest.Schema); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		`CREATE TABLE traffic (id BIGINT AUTO_INCREMENT PRIMARY KEY, v INT NOT NULL)`,
		// Each INSERT of the loop commits on its own (autocommit): one
		// transaction each, every 1000th with an outbox event too.
		`CREATE PROCEDURE burst(p INT, n INT)
		 BEGIN
		   DECLARE i INT DEFAULT 0;
		   WHILE i < n DO
		     IF i % 1000 = 999 THEN
		       INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
		         VALUES (CONCAT('ok-', p, '-', i), 'order', CONCAT('agg-', i % 7), 'order.created', '{}');
		     ELSE
		       INSERT INTO traffic (v) VALUES (i);
		     END IF;
		     SET i = i + 1;
		   END WHILE;
		 END`,
	} {
		if _, err := db.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}

	var mu sync.Mutex
	delivered := map[string]bool{}
	stuckTries := 0
	rc := receiver.Start(t, func(r *http.Request, _ []byte, _ time.Duration) receiver.Reply {
		id := r.Header.Get("webhook-id")
		mu.Lock()
		defer mu.Unlock()
		if strings.HasPrefix(id, "stuck") {
			stuckTries++
			return receiver.Reply{Status: http.StatusServiceUnavailable}
		}
		delivered[id] = true
		return receiver.Reply{Status: http.StatusOK}
	})
	isDelivered := func(id string) bool {
		mu.Lock()
		defer mu.Unlock()
		return delivered[id]
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
        - {name: ep, url: "%s/hook", body: envelope, retry: {initial_backoff: 100ms, max_backoff: 500ms, max_attempts: 1000000}}
`, srv.Port, testserver.ServerID(), dbname, filepath.Join(dir, "cp.json"), rc.URL)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rl := startRelay(t, cfg, relay.Options{Logger: relaytest.Stderr(slog.LevelError)})
	waitForCheckpoint(t, cfg.Checkpoint.Path)
	insert := func(id, agg string) {
		t.Helper()
		if _, err := db.Exec(`INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES (?, 'order', ?, 'order.created', '{}')`, id, agg); err != nil {
			t.Fatal(err)
		}
	}
	waitDelivered := func(id string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Minute)
		for !isDelivered(id) {
			if time.Now().After(deadline) {
				t.Fatalf("%s not delivered", id)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	insert("stuck-1", "stuck")
	insert("warmup", "other")
	waitDelivered("warmup")
	heap0, rss0 := memNow()

	start := time.Now()
	const producers = 4
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			if _, err := db.ExecContext(ctx, `CALL burst(?, ?)`, p, txns/producers); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	insert("marker", "other") // delivered only after every earlier transaction was read
	waitDelivered("marker")
	elapsed := time.Since(start)
	heap1, rss1 := memNow()

	mu.Lock()
	tries, n := stuckTries, len(delivered)
	mu.Unlock()
	if err := rl.stop(t); err != nil {
		t.Fatalf("relay: %v", err)
	}
	t.Logf("%d transactions in %s; %d events delivered, the stuck one tried %d times; heap after GC %.1f → %.1f MB (%+.1f MB), RSS %.1f → %.1f MB (%+.1f MB)",
		txns, elapsed.Round(time.Millisecond), n, tries, mb(heap0), mb(heap1), mb(heap1)-mb(heap0), mb(rss0), mb(rss1), mb(rss1)-mb(rss0))
	if tries < 2 {
		t.Fatalf("the stuck event was tried %d times: it was not being retried", tries)
	}
	if want := producers * (txns / producers / 1000); n < want {
		t.Fatalf("%d events delivered, want at least %d", n, want)
	}
	if growth := int64(heap1) - int64(heap0); growth > 4<<20 {
		t.Fatalf("heap grew by %.1f MB over %d transactions behind one stuck event, want under 4 MB", float64(growth)/(1<<20), txns)
	}
}

// memNow returns the Go heap in use after a GC, and the process's RSS (0
// where /proc is not available).
func memNow() (heap, rss uint64) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
				kb, _ := strconv.ParseUint(f[1], 10, 64)
				rss = kb << 10
			}
		}
	}
	return ms.HeapAlloc, rss
}

func mb(b uint64) float64 { return float64(b) / (1 << 20) }
