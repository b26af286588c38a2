package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
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

// TestMemoryPerEndpoint measures, as users run it, what an endpoint of a
// webhook gateway costs: the relay binary runs one webhook sink of N static
// endpoints (all on one loopback receiver, a path each, each subscribed to
// its tenant's events), and its RSS, Go heap, stacks and goroutines are
// read while idle, right after a burst that gives every endpoint
// MEMORY_EVENTS events in as many aggregates (so it opens up to that many
// connections), and idle again MEMORY_SETTLE after the burst. Each reading
// follows a garbage collection.
//
// By default (CI) it runs 20 and 200 endpoints, one event each, and
// asserts the bound docs/gateway.md states: an idle endpoint adds no
// goroutine (it runs no pipeline), however many endpoints there are. The
// figures of BENCHMARKS.md ("Memory per endpoint") are made with
//
//	MEMORY_ENDPOINTS=1000,10000 MEMORY_EVENTS=1 MEMORY_SETTLE=35s nice -n 10 go test -run TestMemoryPerEndpoint -v -timeout 30m ./cmd/outbox-relay/
//
// (OUTBOX_RELAY_BIN: a binary built already, e.g. by `go build -o
// /tmp/relay-mem ./cmd/outbox-relay`; else the test builds one.
// MEMORY_PROFILES: a directory to write the heap and goroutine profiles
// of each phase to.)
func TestMemoryPerEndpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("process run skipped with -short")
	}
	counts := os.Getenv("MEMORY_ENDPOINTS")
	if counts == "" {
		counts = "20,200"
	}
	events := envInt(t, "MEMORY_EVENTS", 1)
	settle := time.Second
	if s := os.Getenv("MEMORY_SETTLE"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("MEMORY_SETTLE: %v", err)
		}
		settle = d
	}
	bin := os.Getenv("OUTBOX_RELAY_BIN")
	if bin == "" {
		bin = buildBinary(t)
	}
	srv := testserver.Start(t, testserver.Options{ServerID: 16})
	var received atomic.Int64
	hooks := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		received.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	hooks.Config.IdleTimeout = time.Hour // the relay's side decides when idle connections close
	hooks.Start()
	defer hooks.Close()

	// idle: the goroutines of each count's relay while idle, before traffic.
	idle := map[int]float64{}
	var ns []int
	for _, c := range strings.Split(counts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || n <= 0 {
			t.Fatalf("MEMORY_ENDPOINTS: %q is not a positive count", c)
		}
		ns = append(ns, n)
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			received.Store(0)
			idle[n] = measureEndpoints(t, bin, srv, hooks.URL, n, events, settle, &received)
		})
	}
	// The bound: an idle endpoint adds no goroutine.
	lo, hi := slices.Min(ns), slices.Max(ns)
	if hi > lo && idle[lo] > 0 && idle[hi] > 0 {
		if per := (idle[hi] - idle[lo]) / float64(hi-lo); per > 0.05 {
			t.Errorf("an idle endpoint adds %.2f goroutines (%v idle goroutines for %d and %d endpoints), want 0", per, []float64{idle[lo], idle[hi]}, lo, hi)
		}
	}
}

func envInt(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		t.Fatalf("%s: %q is not a positive count", name, s)
	}
	return n
}

// measureEndpoints runs the relay with n endpoints, logs its readings and
// returns its goroutines while idle before the burst.
func measureEndpoints(t *testing.T, bin string, srv *testserver.Server, hooks string, n, events int, settle time.Duration, received *atomic.Int64) (idleGoroutines float64) {
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	if _, err := db.Exec(outboxtest.TenantSchema); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := l.Addr().String()
	_ = l.Close()
	dir := t.TempDir()
	cfgPath, cpPath := filepath.Join(dir, "relay.yaml"), filepath.Join(dir, "checkpoints.json")
	var b strings.Builder
	fmt.Fprintf(&b, `
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %s.outbox, headers: [tenant]}]
checkpoint: {path: %s}
log: {level: warn}
http: {listen: %s, pprof: true}
sinks:
  - name: hooks
    type: webhook
    webhook:
      endpoints:
`, srv.Port, testserver.ServerID(), dbname, cpPath, listen)
	for i := range n {
		fmt.Fprintf(&b, "        - {name: e%d, url: \"%s/e/%d\", filter: {headers: {tenant: t%d}}}\n", i, hooks, i, i)
	}
	if err := os.WriteFile(cfgPath, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "relay.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := startRelay(t, bin, cfgPath, logf, logf)
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	waitForFile(t, cpPath, 2*time.Minute)
	eventually.Within(t, 2*time.Minute, "the relay ready", func() bool {
		resp, err := http.Get("http://" + listen + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	report := func(phase string) (goroutines float64) {
		// A collection first (as pprof's heap?gc=1 makes it), so that the
		// heap is what is live, not what an idle process has not collected.
		heap := fetch(t, "http://"+listen+"/debug/pprof/heap?gc=1")
		if dir := os.Getenv("MEMORY_PROFILES"); dir != "" {
			name := filepath.Join(dir, fmt.Sprintf("heap-%d-%s.pb.gz", n, strings.ReplaceAll(phase, " ", "-")))
			if err := os.WriteFile(name, []byte(heap), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		m := scrape(t, "http://"+listen+"/metrics")
		rss := rssOf(t, cmd.Process.Pid)
		per := func(v float64) string { return fmt.Sprintf("%.1f KB", v/float64(n)/1024) }
		t.Logf("%d endpoints, %s: RSS %.0f MB (%s/endpoint); heap in use %.0f MB (%s/endpoint); stacks %.0f MB (%s/endpoint); goroutines %.0f (%.2f/endpoint)",
			n, phase, rss/1e6, per(rss), m["go_memstats_heap_inuse_bytes"]/1e6, per(m["go_memstats_heap_inuse_bytes"]),
			m["go_memstats_stack_inuse_bytes"]/1e6, per(m["go_memstats_stack_inuse_bytes"]), m["go_goroutines"], m["go_goroutines"]/float64(n))
		if dir := os.Getenv("MEMORY_PROFILES"); dir != "" {
			name := filepath.Join(dir, fmt.Sprintf("goroutines-%d-%s.txt", n, strings.ReplaceAll(phase, " ", "-")))
			if err := os.WriteFile(name, []byte(fetch(t, "http://"+listen+"/debug/pprof/goroutine?debug=1")), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return m["go_goroutines"]
	}
	time.Sleep(settle)
	idleGoroutines = report("idle")

	// A burst: every endpoint gets events in as many aggregates, in one
	// transaction per tenant.
	start := time.Now()
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for range 4 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				var q strings.Builder
				q.WriteString("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, tenant) VALUES ")
				for k := range events {
					if k > 0 {
						q.WriteString(",")
					}
					fmt.Fprintf(&q, "('%d-%d', 'order', 'a%d-%d', 'created', '{\"n\": %d}', 't%d')", i, k, i, k, k, i)
				}
				if _, err := db.ExecContext(context.Background(), q.String()); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	want := int64(n * events)
	eventually.Within(t, 10*time.Minute, fmt.Sprintf("%d deliveries", want), func() bool { return received.Load() >= want })
	t.Logf("%d endpoints: burst of %d deliveries in %s", n, want, time.Since(start).Round(time.Millisecond))
	report("after the burst")
	time.Sleep(settle)
	report(fmt.Sprintf("idle %s after the burst", settle))
	return idleGoroutines
}

// scrape reads the unlabelled samples of a Prometheus text page.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(fetch(t, url)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || strings.Contains(line, "{") {
			continue
		}
		name, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			out[name] = f
		}
	}
	return out
}

func fetch(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// rssOf returns a process's resident set size in bytes (Linux).
func rssOf(t *testing.T, pid int) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb * 1024
		}
	}
	t.Fatal("no VmRSS")
	return 0
}
