package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/eventually"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
)

// gatewayKillEndpoints is the SIGKILL test's endpoint count: 1,000 in 100
// tenants (about 25 s on 2 cores under -race, ~32,000 deliveries).
const gatewayKillEndpoints = 1000

// The relay binary runs one webhook sink of 1,000 endpoints, each subscribed
// to its tenant's events, and is SIGKILLed three times while producers
// commit at a steady rate, restarted each time. In the end every endpoint
// received every event of its tenant (nothing lost for any endpoint),
// nothing of another tenant, and per aggregate the first receipts follow
// commit order; the duplicates the kills caused are counted and logged. At
// most 50 endpoints are awake at once (gateway.max_awake): the kills land
// while the shared stream waits at that bound and lets endpoints go.
func TestGatewaySIGKILLLosesNothingForAnyEndpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("SIGKILL run skipped with -short")
	}
	const n, tenants = gatewayKillEndpoints, gatewayKillEndpoints / 10
	bin := buildBinary(t)
	srv := testserver.Start(t, testserver.Options{ServerID: 15})
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	if _, err := db.Exec(outboxtest.TenantSchema); err != nil {
		t.Fatal(err)
	}
	var gen atomic.Int64 // the relay process's generation
	var mu sync.Mutex
	got := make([][]string, n)
	var receipts atomic.Int64
	hooks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/e/"))
		if err != nil || i < 0 || i >= n {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		mu.Lock()
		got[i] = append(got[i], r.Header.Get("webhook-id"))
		mu.Unlock()
		receipts.Add(1)
	}))
	defer hooks.Close()

	dir := t.TempDir()
	cpPath := filepath.Join(dir, "checkpoints.json")
	var b strings.Builder
	fmt.Fprintf(&b, `
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %s.outbox, headers: [tenant]}]
checkpoint: {path: %s, interval: 100ms}
log: {level: warn}
sinks:
  - name: hooks
    type: webhook
    webhook:
      gateway: {queue: 16, max_catch_up: 2, max_awake: 50}
      endpoints:
`, srv.Port, testserver.ServerID(), dbname, cpPath)
	for i := range n {
		fmt.Fprintf(&b, "        - {name: e%03d, url: \"%s/e/%d\", body: raw, max_concurrency: 4, filter: {headers: {tenant: t%d}}, retry: {initial_backoff: 50ms, max_backoff: 500ms}}\n",
			i, hooks.URL, i, i%tenants)
	}
	relay := startKilledRelay(t, bin, dir, b.String())
	showLog := relay.showLog
	waitForFile(t, cpPath, 30*time.Second)

	w := &outboxtest.TenantWorkload{}
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		outboxtest.ProduceTenants(context.Background(), t, db, w, outboxtest.TenantLoad{Producers: 4, Txns: 1600, Tenants: tenants, Every: 20 * time.Millisecond})
	}()
	// Three kills, each once the endpoints have received 1,500 more events
	// since the last start: mid-stream, with every endpoint's pipeline
	// delivering.
	killsWhileProducing := 0
	for k := range 3 {
		from := receipts.Load()
		eventually.Within(t, 2*time.Minute, fmt.Sprintf("1,500 receipts before kill %d", k+1), func() bool { return receipts.Load() >= from+1500 }, showLog)
		select {
		case <-produced:
		default:
			killsWhileProducing++
		}
		relay.kill()
		gen.Add(1)
		relay.start()
	}
	<-produced
	total := w.Events()
	complete := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for i := range n {
			have := map[string]bool{}
			for _, id := range got[i] {
				have[id] = true
			}
			for _, e := range w.Tenant(i % tenants) {
				if !have[e.ID] {
					return false
				}
			}
		}
		return true
	}
	eventually.Within(t, 4*time.Minute, "every endpoint to receive every event of its tenant", complete, showLog)
	if err := relay.stop(); err != nil {
		t.Errorf("relay exited with %v after SIGTERM", err)
	}

	mu.Lock()
	defer mu.Unlock()
	dups, withDups, deliveries := 0, 0, 0
	for i := range n {
		rep := outboxtest.CheckTenant(w, i%tenants, got[i])
		if len(rep.Missing) > 0 || len(rep.Foreign) > 0 || len(rep.OutOfOrder) > 0 {
			t.Errorf("e%03d (tenant t%d): %d missing, %d foreign, %d first receipts out of per-aggregate order (first: %q %q %q)",
				i, i%tenants, len(rep.Missing), len(rep.Foreign), len(rep.OutOfOrder), rep.Missing[:min(1, len(rep.Missing))], rep.Foreign[:min(1, len(rep.Foreign))], rep.OutOfOrder[:min(1, len(rep.OutOfOrder))])
		}
		dups += rep.Duplicates
		deliveries += len(got[i])
		if rep.Duplicates > 0 {
			withDups++
		}
	}
	t.Logf("gateway SIGKILL run: %d endpoints, %d tenants, %d committed events in %d transactions, 3 kills (%d while producing), %d deliveries, %d duplicates on %d endpoints",
		n, tenants, total, w.Txns(), killsWhileProducing, deliveries, dups, withDups)
	if t.Failed() {
		showLog()
	}
}
