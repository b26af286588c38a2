package relay_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/deadletter"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/relaytest"
)

// GatewayScaleEndpoints is the scale test's endpoint count: the issue's
// 1,000 (in 100 tenants) fits the CI budget (2 cores), so it is not scaled
// down. OUTBOX_RELAY_GATEWAY_ENDPOINTS overrides it.
const GatewayScaleEndpoints = 1000

// gatewayScaleTxns is the scale test's transactions: about 1.8 events each,
// 10 deliveries each (10 endpoints per tenant). Under -race (CI) fewer, so
// the test stays under a minute on 2 cores.
var gatewayScaleTxns = map[bool]int{false: 2000, true: 500}[raceDetector]

// epKind is how a scale-test endpoint answers.
type epKind int

const (
	epHealthy  epKind = iota
	epDown            // 503 until the test lets it recover
	epHang            // hangs past its timeout: every event dead-letters
	epGone            // 410: every event dead-letters
	epNotFound        // not an endpoint of the run
)

// receipt is one event an endpoint accepted.
type receipt struct {
	id string
	at time.Time
}

// fleet is the HTTP side of a gateway run: a few servers on loopback, one
// path per endpoint (/e/<index>), each answering as its kind says.
type fleet struct {
	servers []*httptest.Server
	kinds   []epKind
	up      atomic.Bool // the epDown endpoints answer 200 once set
	mu      []sync.Mutex
	got     [][]receipt
	reqs    []atomic.Int64
}

func newFleet(t testing.TB, kinds []epKind, servers int) *fleet {
	f := &fleet{kinds: kinds, mu: make([]sync.Mutex, len(kinds)), got: make([][]receipt, len(kinds)), reqs: make([]atomic.Int64, len(kinds))}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/e/"))
		if err != nil || i < 0 || i >= len(kinds) {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		f.reqs[i].Add(1)
		switch kinds[i] {
		case epDown:
			if !f.up.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
		case epHang:
			// Until the relay gives up on the attempt (its timeout closes
			// the connection); should it not within 10 times that timeout
			// (a stalled machine), a 503: this endpoint never accepts.
			select {
			case <-r.Context().Done():
			case <-time.After(time.Second):
				w.WriteHeader(http.StatusServiceUnavailable)
			}
			return
		case epGone:
			w.WriteHeader(http.StatusGone)
			return
		}
		id := r.Header.Get("webhook-id")
		f.mu[i].Lock()
		f.got[i] = append(f.got[i], receipt{id, time.Now()})
		f.mu[i].Unlock()
	})
	for range servers {
		s := httptest.NewUnstartedServer(h)
		s.Config.SetKeepAlivesEnabled(true)
		s.Start()
		f.servers = append(f.servers, s)
		t.Cleanup(s.Close)
	}
	return f
}

func (f *fleet) url(i int) string { return fmt.Sprintf("%s/e/%d", f.servers[i%len(f.servers)].URL, i) }

func (f *fleet) received(i int) []receipt {
	f.mu[i].Lock()
	defer f.mu[i].Unlock()
	return slices.Clone(f.got[i])
}

// gatewayRun configures a relay for a fleet: one webhook sink of every
// endpoint (the gateway), or, perEndpointSinks, one webhook sink per endpoint
// (each its own binlog stream: the design before the gateway).
type gatewayRun struct {
	port             int
	db               string
	dir              string
	tenants          int
	perEndpointSinks bool
	maxCatchUp       int
	queue            int
	maxInFlight      int
	maxInFlightBytes int
}

func (g gatewayRun) config(t testing.TB, f *fleet) *config.Config {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, `
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %s.outbox, headers: [tenant]}]
checkpoint: {path: %s, interval: 200ms}
dead_letter: {path: %s}
sinks:
`, g.port, testserver.ServerID(), g.db, filepath.Join(g.dir, "cp.json"), filepath.Join(g.dir, "dlq"))
	gw := fmt.Sprintf("{queue: %d, max_in_flight: %d, max_in_flight_bytes: %d, max_catch_up: %d, detach_after: 200ms}", g.queue, g.maxInFlight, g.maxInFlightBytes, g.maxCatchUp)
	endpoint := func(i int) string {
		retry := "{initial_backoff: 50ms, max_backoff: 200ms, max_attempts: 100000, max_age: 1h}"
		// The others answer at once: a timeout the slowest machine cannot
		// reach, so that no retry (a duplicate at the receiver) is timing's.
		timeout := "5m"
		if f.kinds[i] == epHang {
			retry, timeout = "{initial_backoff: 20ms, max_backoff: 50ms, max_attempts: 2}", "100ms"
		}
		return fmt.Sprintf(`{name: e%04d, url: "%s", body: raw, timeout: %s, max_concurrency: 4, filter: {headers: {tenant: t%d}}, retry: %s}`,
			i, f.url(i), timeout, i%g.tenants, retry)
	}
	if g.perEndpointSinks {
		for i := range f.kinds {
			fmt.Fprintf(&b, "  - {name: h%04d, type: webhook, webhook: {gateway: %s, endpoints: [%s]}}\n", i, gw, endpoint(i))
		}
	} else {
		fmt.Fprintf(&b, "  - name: hooks\n    type: webhook\n    webhook:\n      gateway: %s\n      endpoints:\n", gw)
		for i := range f.kinds {
			fmt.Fprintf(&b, "        - %s\n", endpoint(i))
		}
	}
	cfg, err := config.Parse([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// countingHandler counts log records whose message contains one of its
// keys, and writes those above Error level to stderr (dead letters log at Error: thousands here).
type countingHandler struct {
	slog.Handler
	keys   []string
	counts []atomic.Int64
}

func newCountingHandler(keys ...string) *countingHandler {
	return &countingHandler{Handler: slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}), keys: keys, counts: make([]atomic.Int64, len(keys))}
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *countingHandler) Handle(ctx context.Context, r slog.Record) error {
	for i, k := range h.keys {
		if strings.Contains(r.Message, k) {
			h.counts[i].Add(1)
		}
	}
	if r.Level > slog.LevelError {
		return h.Handler.Handle(ctx, r)
	}
	return nil
}

func (h *countingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &countingHandler{Handler: h.Handler.WithAttrs(as), keys: h.keys, counts: h.counts}
}

func (h *countingHandler) WithGroup(name string) slog.Handler {
	return &countingHandler{Handler: h.Handler.WithGroup(name), keys: h.keys, counts: h.counts}
}

// dumpThreads counts the server's binlog dump threads of the connections
// this process holds open. A stream the relay has closed keeps its dump
// thread on the server until the thread's next write fails (on a loaded
// machine, seconds later): it is not counted, as it is no stream of the
// relay's any more; one the relay forgot to close still is.
func dumpThreads(ctx context.Context, db *sql.DB) (int, error) {
	rows, err := db.QueryContext(ctx, `SELECT HOST FROM information_schema.PROCESSLIST WHERE COMMAND IN ('Binlog Dump', 'Binlog Dump GTID')`)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var hosts []string
	for rows.Next() {
		var h string
		if err := rows.Scan(&h); err != nil {
			return 0, err
		}
		hosts = append(hosts, h)
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	open, err := testserver.ClientPorts(os.Getpid(), true)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, h := range hosts {
		if open[testserver.HostPort(h)] {
			n++
		}
	}
	return n, nil
}

// sampler runs f every period until stop is called.
func sampler(period time.Duration, f func()) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			f()
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	})
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}

// The scale test: 1,000 endpoints in 100 tenants on one webhook
// sink, served by four HTTP servers on loopback, each endpoint subscribed
// to its tenant (filter.headers on the outbox's tenant column). Producers
// commit at a steady rate; 10 endpoints answer 503 until the producers are
// done, 5 hang past their 100 ms timeout (2 attempts, then dead letters), 1
// answers 410. Every healthy endpoint gets every event of its tenant
// exactly once, in per-aggregate order; the 503 ones catch up (on catch-up
// streams: they were detached) and get everything exactly once too; the
// hanging ones have every event of their tenant in the dead-letter store;
// the 410 one is disabled (its later events wait behind its cursor:
// TestAnEndpointAnswering410IsDisabledAndLosesNothing enables one); the server never shows more than 1 + max_catch_up binlog dump
// threads; and the Go heap stays under a bound derived from the queue
// budgets.
func TestGatewayScaleThousandEndpoints(t *testing.T) {
	n := GatewayScaleEndpoints
	if v := os.Getenv("OUTBOX_RELAY_GATEWAY_ENDPOINTS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 100 {
			t.Fatalf("OUTBOX_RELAY_GATEWAY_ENDPOINTS=%q: want a number of at least 100", v)
		}
	}
	tenants := n / 10
	kinds := make([]epKind, n)
	// Endpoint i serves tenant i%tenants: the bad ones (0-15) are in
	// distinct tenants, each with 9 healthy neighbours.
	for i := range 10 {
		kinds[i] = epDown
	}
	for i := 10; i < 15; i++ {
		kinds[i] = epHang
	}
	kinds[15] = epGone

	s := testserver.Start(t, testserver.Options{ServerID: 14})
	dbname := s.NewDatabase(t)
	db := s.DB(t, dbname)
	if _, err := db.Exec(outboxtest.TenantSchema); err != nil {
		t.Fatal(err)
	}
	f := newFleet(t, kinds, 4)
	run := gatewayRun{port: s.Port, db: dbname, dir: t.TempDir(), tenants: tenants,
		maxCatchUp: 2, queue: 4, maxInFlight: 8, maxInFlightBytes: 32 << 10}
	cfg := run.config(t, f)
	logs := newCountingHandler("catching up on its own stream", "re-joined the shared stream")

	heap0, _ := memNow()
	var peakHeap atomic.Uint64
	stopHeap := sampler(250*time.Millisecond, func() {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		if ms.HeapAlloc > peakHeap.Load() {
			peakHeap.Store(ms.HeapAlloc)
		}
	})
	defer stopHeap()
	var maxDumps, samples atomic.Int64
	monitor := s.DB(t, "")
	stopDumps := sampler(100*time.Millisecond, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		d, err := dumpThreads(ctx, monitor)
		if err != nil {
			t.Errorf("count binlog dump threads: %v", err)
			return
		}
		samples.Add(1)
		if int64(d) > maxDumps.Load() {
			maxDumps.Store(int64(d))
		}
	})
	defer stopDumps()

	ctx := context.Background()
	rl := startRelay(t, cfg, relay.Options{Logger: slog.New(logs)})
	waitForCheckpoint(t, cfg.Checkpoint.Path)

	w := &outboxtest.TenantWorkload{}
	// 4 producers, one transaction each every 10 ms (up to 400/s); a third
	// of the transactions go to the 10 tenants of the 503 endpoints, so that
	// they fill their queues (4 transactions, 8 events in flight)
	// and are detached.
	start := time.Now()
	outboxtest.ProduceTenants(ctx, t, db, w, outboxtest.TenantLoad{Producers: 4, Txns: gatewayScaleTxns, Tenants: tenants, Hot: 10, Every: 10 * time.Millisecond})
	produced := time.Since(start)
	f.up.Store(true)
	total := w.Events()
	t.Logf("%d endpoints, %d tenants: committed %d events in %d transactions in %s", n, tenants, total, w.Txns(), produced.Round(time.Millisecond))

	dlq, err := deadletter.OpenFile(deadletter.Dir(cfg))
	if err != nil {
		t.Fatal(err)
	}
	deadOf := func(i int) map[string]bool {
		recs, err := dlq.List(context.Background(), deadletter.Filter{Sink: fmt.Sprintf("hooks/e%04d", i)})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, r := range recs {
			out[r.Event.ID] = true
		}
		return out
	}
	missing := func() (endpoints int, first string) {
		for i, k := range kinds {
			want := w.Tenant(i % tenants)
			if k == epGone {
				continue // disabled: checked below
			}
			have := map[string]bool{}
			if k == epHang {
				have = deadOf(i)
			}
			for _, r := range f.received(i) {
				have[r.id] = true
			}
			for _, e := range want {
				if !have[e.ID] {
					if endpoints == 0 {
						first = fmt.Sprintf("e%04d (kind %d) lacks %s", i, k, e.ID)
					}
					endpoints++
					break
				}
			}
		}
		return endpoints, first
	}
	// Until every endpoint has its events, failing only when nothing moves
	// for 2 minutes: a loaded machine is slow, not stuck.
	progress := func() (n int) {
		for i := range kinds {
			n += len(f.received(i)) + int(f.reqs[i].Load())
		}
		return n
	}
	var left int
	var example string
	last, moved := progress(), time.Now()
	for ; ; time.Sleep(500 * time.Millisecond) {
		if left, example = missing(); left == 0 {
			break
		}
		if p := progress(); p != last {
			last, moved = p, time.Now()
		} else if time.Since(moved) > 2*time.Minute {
			t.Fatalf("for 2 minutes no endpoint got a request, and %d endpoints still lack events (first: %s)", left, example)
		}
	}
	drained := time.Since(start)
	stopDumps()
	stopHeap()
	if err := rl.stop(t); err != nil {
		t.Fatalf("relay: %v", err)
	}

	var healthyLatency []time.Duration
	recovered := 0
	for i, k := range kinds {
		want := w.Tenant(i % tenants)
		got := f.received(i)
		switch k {
		case epGone:
			if len(got) != 0 {
				t.Errorf("e%04d (kind %d) accepted %d events", i, k, len(got))
			}
			if cp := loadCP(t, cfg.Checkpoint.Path, fmt.Sprintf("hooks/e%04d", i)); !strings.Contains(cp.Disabled, "410") {
				t.Errorf("e%04d answered 410: its checkpoint says disabled %q, want it disabled for its 410", i, cp.Disabled)
			}
			continue
		case epHang:
			if len(got) != 0 {
				t.Errorf("e%04d (kind %d) accepted %d events", i, k, len(got))
			}
			dead := deadOf(i)
			if len(dead) != len(want) {
				t.Errorf("e%04d (kind %d): %d dead letters for the %d events of its tenant", i, k, len(dead), len(want))
			}
			continue
		case epDown:
			recovered++
		}
		// Exactly once (no crash here: no duplicates at all), nothing
		// foreign, per aggregate in commit order.
		ids := make([]string, len(got))
		for j, r := range got {
			ids[j] = r.id
			if e, ok := w.Lookup(r.id); ok && k == epHealthy {
				healthyLatency = append(healthyLatency, r.at.Sub(e.At))
			}
		}
		rep := outboxtest.CheckTenant(w, i%tenants, ids)
		if len(rep.Missing) > 0 || len(rep.Foreign) > 0 || len(rep.OutOfOrder) > 0 || rep.Duplicates > 0 {
			t.Errorf("e%04d (kind %d, tenant t%d): %d of %d events, %d duplicates, missing %q, foreign %q, out of per-aggregate order %q",
				i, k, i%tenants, rep.Unique, len(want), rep.Duplicates, firstOf(rep.Missing), firstOf(rep.Foreign), firstOf(rep.OutOfOrder))
		}
	}
	catchUps, rejoins := logs.counts[0].Load(), logs.counts[1].Load()
	slices.Sort(healthyLatency)
	var p50, p99 time.Duration
	if len(healthyLatency) > 0 {
		p50, p99 = healthyLatency[len(healthyLatency)/2], healthyLatency[len(healthyLatency)*99/100]
	}
	t.Logf("all delivered or dead-lettered %s after the first commit; healthy: %d deliveries, commit→receipt p50 %s p99 %s; %d 503 endpoints recovered; %d catch-up streams opened, %d re-joins; binlog dump threads at most %d in %d samples (limit %d); Go heap %.1f MB before, peak %.1f MB",
		drained.Round(time.Millisecond), len(healthyLatency), p50.Round(time.Millisecond), p99.Round(time.Millisecond), recovered,
		catchUps, rejoins, maxDumps.Load(), samples.Load(), 2+run.maxCatchUp, mb(heap0), mb(peakHeap.Load()))
	if samples.Load() == 0 {
		t.Fatal("the dump threads were never sampled")
	}
	// Streams: the shared one and at most max_catch_up catching up. Beside
	// them, a woken endpoint's pipeline that resumes checks its
	// checkpoint's commit time against the server's (source.ReadCommit):
	// a one-event read of the binlog with a dump of its own, one at a time
	// (canal.CommitFinder), which a sample on a loaded machine may catch.
	// An endpoint with a stream of its own beyond that would show as more.
	if d := maxDumps.Load(); d > int64(2+run.maxCatchUp) || d < 1 {
		t.Errorf("the server showed up to %d binlog dump threads; want 1 (the shared stream) to %d (+ max_catch_up, + one commit-time read)", d, 2+run.maxCatchUp)
	}
	// The 503 endpoints' queues filled while they were down: they were
	// detached and caught up on streams of their own.
	if catchUps == 0 {
		t.Error("no endpoint ever caught up on its own stream: the 503 endpoints were never detached")
	}
	// Memory: per endpoint its queue (queue transactions of at most 6 small
	// events, ~4 KB each with their decoded rows, generously), its in-flight
	// bytes, its HTTP connections (max_concurrency 4, each with the client's
	// and this process's receiving server's buffers: 64 KB, generously) and
	// its pipeline's goroutines and state (64 KB), over the heap before the
	// relay started. A generous bound, not a tight one: it catches memory
	// that grows with the traffic or the backlog (a 503 endpoint's whole
	// backlog held, per endpoint), not small leaks.
	bound := heap0 + uint64(n)*uint64(run.queue*4<<10+run.maxInFlightBytes+4*64<<10+64<<10)
	if p := peakHeap.Load(); p > bound {
		t.Errorf("Go heap peaked at %.1f MB, over the queue budgets' bound of %.1f MB", mb(p), mb(bound))
	}
}

// firstOf returns the first three of ids, for a message.
func firstOf(ids []string) []string { return ids[:min(len(ids), 3)] }

// cpuTicks returns a process's user+system CPU time in clock ticks
// (/proc/<pid>/stat fields 14 and 15).
func cpuTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: count from its ')'.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat: %q", pid, b)
	}
	return u + s, nil
}

// BenchmarkGateway measures, for 100 and 1,000 healthy endpoints (10 per
// tenant), deliveries per second and the p99 from COMMIT to receipt while
// 4 producers commit 1,000 transactions (about 1,800 events, 18,000
// deliveries) at up to 400 a second, and the private mariadbd's CPU time
// over the run (the producers' load is the same in every run: the
// difference is the binlog dump threads'). "shared" is one webhook sink of
// N endpoints (the gateway: one stream); "stream-per-endpoint" emulates the
// design before it with N webhook sinks of one endpoint each, each reading
// its own stream. Run it with -benchtime=1x: one iteration is one run.
func BenchmarkGateway(b *testing.B) {
	s := testserver.Start(b, testserver.Options{ServerID: 16, ExtraArgs: []string{"--max-connections=2500"}})
	pidText, err := os.ReadFile(filepath.Join(s.Dir, "mysqld.pid"))
	if err != nil {
		b.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(pidText)))
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{100, 1000} {
		for _, perEndpoint := range []bool{false, true} {
			name := fmt.Sprintf("endpoints=%d/shared", n)
			if perEndpoint {
				name = fmt.Sprintf("endpoints=%d/stream-per-endpoint", n)
			}
			b.Run(name, func(b *testing.B) {
				for b.Loop() {
					benchGatewayRun(b, s, pid, n, perEndpoint)
				}
			})
		}
	}
}

func benchGatewayRun(b *testing.B, s *testserver.Server, pid, n int, perEndpoint bool) {
	tenants := n / 10
	dbname := s.NewDatabase(b)
	db := s.DB(b, dbname)
	if _, err := db.Exec(outboxtest.TenantSchema); err != nil {
		b.Fatal(err)
	}
	f := newFleet(b, make([]epKind, n), 4)
	run := gatewayRun{port: s.Port, db: dbname, dir: b.TempDir(), tenants: tenants, perEndpointSinks: perEndpoint,
		maxCatchUp: 2, queue: 256, maxInFlight: 1000, maxInFlightBytes: 1 << 20}
	cfg := run.config(b, f)
	ctx := context.Background()
	rl := startRelay(b, cfg, relay.Options{Logger: relaytest.Stderr(slog.LevelError)})
	waitForCheckpoint(b, cfg.Checkpoint.Path)
	var maxDumps atomic.Int64
	monitor := s.DB(b, "")
	stopDumps := sampler(250*time.Millisecond, func() {
		if d, err := dumpThreads(ctx, monitor); err == nil && int64(d) > maxDumps.Load() {
			maxDumps.Store(int64(d))
		}
	})
	defer stopDumps()
	cpu0, err := cpuTicks(pid)
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	w := &outboxtest.TenantWorkload{}
	outboxtest.ProduceTenants(ctx, b, db, w, outboxtest.TenantLoad{Producers: 4, Txns: 1000, Tenants: tenants, Every: 10 * time.Millisecond})
	produced := time.Since(start)
	var last time.Time
	deliveries := 0
	var lat []time.Duration
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		deliveries, lat, last = 0, lat[:0], time.Time{}
		complete := true
		for i := range n {
			got := f.received(i)
			if len(got) < len(w.Tenant(i%tenants)) {
				complete = false
				break
			}
			for _, r := range got {
				deliveries++
				if e, ok := w.Lookup(r.id); ok {
					lat = append(lat, r.at.Sub(e.At))
				}
				if r.at.After(last) {
					last = r.at
				}
			}
		}
		if complete {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("not every endpoint got its tenant's events within 5 minutes")
		}
	}
	cpu1, err := cpuTicks(pid)
	if err != nil {
		b.Fatal(err)
	}
	stopDumps()
	if err := rl.stop(b); err != nil {
		b.Fatalf("relay: %v", err)
	}
	slices.Sort(lat)
	elapsed := last.Sub(start)
	const ticksPerSecond = 100 // USER_HZ on Linux
	b.ReportMetric(float64(deliveries)/elapsed.Seconds(), "deliveries/s")
	b.ReportMetric(float64(lat[len(lat)*99/100].Milliseconds()), "p99-ms")
	b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "p50-ms")
	b.ReportMetric(float64(cpu1-cpu0)/ticksPerSecond, "server-cpu-s")
	b.ReportMetric(float64(maxDumps.Load()), "dump-threads")
	b.Logf("%d endpoints (perEndpoint %v): %d events committed in %s, %d deliveries in %s", n, perEndpoint, w.Events(), produced.Round(time.Millisecond), deliveries, elapsed.Round(time.Millisecond))
}
