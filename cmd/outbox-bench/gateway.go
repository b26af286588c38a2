package main

// The gateway-scale rows (-endpoints 1000,10000,100000): the relay binary as
// a SaaS platform's webhook gateway runs it. Per size N, in a database of its
// own on the private MariaDB: an endpoints table of N rows, one tenant per
// row (endpoints_table.tenant_header), the README's defaults (only the
// loopback receiver allowed by the egress policy, the console's rate limit
// raised so that the bench's requests are not refused), a file checkpoint,
// the attempts record, the console and the metrics listener (with pprof, to
// collect before reading the heap) on. One loopback receiver counts the
// requests per endpoint. Read from outside, as an operator would:
//
//   - start → /readyz;
//   - idle: RSS (/proc/PID/status VmRSS, sampled until steady), then heap in
//     use, stacks and goroutines from /metrics after a forced collection;
//     what an idle endpoint costs is the difference to the base run (one
//     endpoint row) divided by the rows added;
//   - 10 s idle: CPU (/proc/PID/stat) and bytes written (/proc/PID/io
//     write_bytes: what reached the block layer, the checkpoint's files and
//     the attempts record's);
//   - one save: one event to one endpoint, its delivery and the checkpoint
//     file's replacements until none for 1 s: the bytes written over it and
//     the saves seen, beside the file's size (the file store writes the file
//     whole, so a save writes about its size);
//   - one event to every endpoint (N rows committed in transactions of 100
//     from 4 connections): from the first INSERT to the last endpoint's
//     request, RSS peak during (sampled every 100 ms) and after;
//   - the console API, 200 requests each (or 20 s, whichever ends first):
//     one endpoint, one page of the endpoint list (limit=100; when the API
//     answers with more, it does not page and the row says so), an
//     endpoint's dead letters (endpoint 0's receiver answers 400: it has
//     one), an endpoint's attempts;
//   - a new endpoint row, then an event for it: from the event's INSERT
//     being sent to its request (and from the row's).

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outbox-relay/outbox-relay/console"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/sink/webhook"
)

// parseEndpoints reads -endpoints: comma-separated positive counts, in
// order, each once. The base run (one endpoint row) is added first when
// missing and any count is above one.
func parseEndpoints(s string) ([]int, error) {
	var ns []int
	for f := range strings.SplitSeq(s, ",") {
		f = strings.ReplaceAll(strings.TrimSpace(f), "_", "")
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-endpoints %q: %q is not a positive count", s, f)
		}
		if !slices.Contains(ns, n) {
			ns = append(ns, n)
		}
	}
	slices.Sort(ns)
	if len(ns) > 0 && ns[0] != 1 {
		ns = slices.Insert(ns, 0, 1)
	}
	return ns, nil
}

// memReading is the relay's memory at one moment: RSS from /proc, the rest
// from its /metrics after a forced collection.
type memReading struct {
	rss, heap, stacks int64
	goroutines        int
}

// apiLatency is one console request's latencies.
type apiLatency struct {
	what     string
	n        int
	p50, p99 time.Duration
	bytes    int    // the last answer's size
	note     string // e.g. "full list: no limit"
	err      error
}

// gatewayRow is one size's readings.
type gatewayRow struct {
	endpoints int
	err       error

	ready        time.Duration
	idle         memReading
	idleCPU      float64 // CPU seconds over the idle window
	idleWindow   time.Duration
	idleWritten  int64 // write_bytes over the idle window
	idleSaves    int64 // checkpoint saves over it
	cpFileIdle   int64 // the checkpoint file's size, idle
	saveWritten  int64 // write_bytes over one event's delivery and its save
	saveSaves    int64 // endpoint cursors saved over it (outbox_relay_checkpoint_saves_total)
	saveRewrites int   // the checkpoint file's replacements seen over it
	burst        time.Duration
	burstDup     int64 // requests beyond one per endpoint
	misrouted    int64 // requests whose event was not the endpoint's
	rssPeak      int64
	after        memReading
	cpFileAfter  int64
	api          []apiLatency
	newEndpoint  time.Duration // from the new endpoint's event's INSERT being sent to its request
	newFromRow   time.Duration // from the row's INSERT being sent
	config       string
}

// gwReceiver counts the gateway rows' requests per endpoint: path /gw/I is
// endpoint I's, /gw/new the new endpoint's; /gw/0 answers 400 (its event is
// dead-lettered).
type gwReceiver struct {
	srv       *httptest.Server
	mu        sync.Mutex
	hits      []int32 // per endpoint
	reached   int     // endpoints with at least one request
	want      int
	done      chan struct{}
	last      time.Time
	extra     atomic.Int64
	misrouted atomic.Int64
	newAt     chan time.Time
}

func newGWReceiver() *gwReceiver {
	r := &gwReceiver{}
	r.srv = httptest.NewUnstartedServer(http.HandlerFunc(r.serve))
	r.srv.Config.IdleTimeout = time.Hour // the relay decides when its idle connections close
	r.srv.Start()
	return r
}

// expect resets the counts for n endpoints; done closes when each has one
// request.
func (r *gwReceiver) expect(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hits, r.reached, r.want = make([]int32, n), 0, n
	r.done = make(chan struct{})
	r.newAt = make(chan time.Time, 1)
	r.extra.Store(0)
	r.misrouted.Store(0)
}

func (r *gwReceiver) serve(w http.ResponseWriter, req *http.Request) {
	_, _ = io.Copy(io.Discard, req.Body)
	now := time.Now()
	name := strings.TrimPrefix(req.URL.Path, "/gw/")
	id := req.Header.Get("webhook-id")
	if name == "new" {
		select {
		case r.newAt <- now:
		default:
		}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	i, err := strconv.Atoi(name)
	r.mu.Lock()
	if err == nil && i >= 0 && i < len(r.hits) {
		// An event of endpoint i's tenant has id "<anything>-i".
		if !strings.HasSuffix(id, "-"+name) {
			r.misrouted.Add(1)
		}
		r.hits[i]++
		if r.hits[i] == 1 {
			r.reached++
			r.last = now
			if r.reached == r.want {
				close(r.done)
			}
		} else {
			r.extra.Add(1)
		}
	}
	r.mu.Unlock()
	if i == 0 {
		http.Error(w, "rejected by the bench: a dead letter", http.StatusBadRequest)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (r *gwReceiver) hitsOf(i int) int32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hits[i]
}

func (r *gwReceiver) lastAt() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// gatewayEnv is what every size shares.
type gatewayEnv struct {
	bin      string
	srv      *testserver.Server
	root     *sql.DB
	tmp      string
	recv     *gwReceiver
	serverID int
}

// runGateway measures each size of ns in turn.
func runGateway(ctx context.Context, env *gatewayEnv, ns []int) []gatewayRow {
	var out []gatewayRow
	for _, n := range ns {
		fmt.Fprintf(os.Stderr, "gateway: %d endpoint rows…\n", n)
		row := measureGateway(ctx, env, n)
		if row.err != nil {
			fmt.Fprintf(os.Stderr, "gateway: %d endpoint rows: %v\n", n, row.err)
		}
		out = append(out, row)
	}
	return out
}

func measureGateway(ctx context.Context, env *gatewayEnv, n int) (row gatewayRow) {
	row.endpoints = n
	fail := func(err error) gatewayRow { row.err = err; return row }
	dbname := fmt.Sprintf("gw%d", n)
	if _, err := env.root.Exec("CREATE DATABASE " + dbname); err != nil {
		return fail(err)
	}
	db, err := sql.Open("mysql", env.srv.DSN(dbname)+"&interpolateParams=true")
	if err != nil {
		return fail(err)
	}
	defer db.Close()
	for _, q := range []string{outboxtest.TenantSchema, webhook.EndpointsTableSchema} {
		if _, err := db.Exec(q); err != nil {
			return fail(fmt.Errorf("%.60s: %w", q, err))
		}
	}
	if err := insertEndpointRows(ctx, db, env.recv.srv.URL, n); err != nil {
		return fail(fmt.Errorf("endpoint rows: %w", err))
	}
	token, hash := console.NewToken()
	os.Setenv("OUTBOX_RELAY_CONSOLE_KEY", strings.Repeat("bench-console-key-", 3)) // the relay inherits it
	env.serverID += 100                                                            // the gateway's catch-up streams take ids after its own
	metricsAddr, consoleAddr := freeAddr(), freeAddr()
	cpPath := filepath.Join(env.tmp, fmt.Sprintf("gw-%d.json", n))
	row.config = fmt.Sprintf(`source: {host: %s, port: %d, user: root, server_id: %d}
tables: [{name: %[4]s.outbox, headers: [tenant]}]
checkpoint: {path: %[5]s}
attempts: {enabled: true}
http: {listen: %[6]q, pprof: true}
sinks:
  - name: hooks
    type: webhook
    webhook:
      endpoints_table:
        table: %[4]s.outbox_endpoints
        tenant_header: tenant
        defaults: {egress: {allow: [127.0.0.1]}}
console:
  listen: %[7]q
  tokens: [{name: bench, hash: %[8]q}]
  rate_limit: 1000000
`, env.srv.Host, env.srv.Port, env.serverID, dbname, cpPath, metricsAddr, consoleAddr, hash)
	args, err := relayArgs(env.tmp, fmt.Sprintf("gw-%d", n), row.config)
	if err != nil {
		return fail(err)
	}
	env.recv.expect(n)
	logPath := filepath.Join(env.tmp, fmt.Sprintf("gw-%d.log", n))
	began := time.Now()
	relay, err := startBinary(env.bin, args, logPath, nil)
	if err != nil {
		return fail(err)
	}
	defer relay.stop()
	defer func() {
		if row.err != nil {
			if b, err := os.ReadFile(logPath); err == nil {
				fmt.Fprintf(os.Stderr, "the relay's log ends:\n%s\n", b[max(0, len(b)-4096):])
			}
		}
	}()
	pid := relay.cmd.Process.Pid
	metrics := "http://" + metricsAddr
	if err := waitReady(metrics+"/readyz", relay, 15*time.Minute); err != nil {
		return fail(err)
	}
	row.ready = time.Since(began)

	// Idle.
	settleRSS(pid, 60*time.Second)
	if row.idle, err = readMemory(pid, metrics); err != nil {
		return fail(err)
	}
	row.cpFileIdle = fileSize(cpPath)
	saves0 := scrapeSum(metrics+"/metrics", "outbox_relay_checkpoint_saves_total")
	io0, cpu0, t0 := procIO(pid), procCPU(pid), time.Now()
	time.Sleep(10 * time.Second)
	io1, cpu1 := procIO(pid), procCPU(pid)
	row.idleWindow = time.Since(t0)
	row.idleCPU, row.idleWritten = cpu1-cpu0, io1.writeBytes-io0.writeBytes
	row.idleSaves = scrapeSum(metrics+"/metrics", "outbox_relay_checkpoint_saves_total") - saves0

	// One save: one event to one endpoint (the last; endpoint 0 dead-letters).
	one := n - 1
	fi0, _ := os.Stat(cpPath)
	saves0 = scrapeSum(metrics+"/metrics", "outbox_relay_checkpoint_saves_total")
	io0 = procIO(pid)
	if err := commitEvents(db, []int{one}, "s"); err != nil {
		return fail(err)
	}
	if err := waitFor(2*time.Minute, func() bool { return env.recv.hitsOf(one) > 0 }); err != nil {
		return fail(fmt.Errorf("the one event to endpoint %d: %w", one, err))
	}
	rewrites, err := countRewrites(cpPath, fi0, time.Second, time.Minute)
	if err != nil {
		return fail(fmt.Errorf("after the one event: %w", err))
	}
	row.saveWritten = procIO(pid).writeBytes - io0.writeBytes
	row.saveRewrites = rewrites
	row.saveSaves = scrapeSum(metrics+"/metrics", "outbox_relay_checkpoint_saves_total") - saves0

	// One event to every endpoint.
	env.recv.expect(n)
	var peak atomic.Int64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			peak.Store(max(peak.Load(), vmRSS(pid)))
			select {
			case <-stopSampling:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	burstStart := time.Now()
	if dir := os.Getenv("OUTBOX_BENCH_HEAPPROFILE"); dir != "" {
		// What the relay holds during the burst, once a third of the
		// endpoints have their event: the awake endpoints' state.
		go func() {
			if waitFor(15*time.Minute, func() bool { return env.recv.reachedCount() >= n/3 }) == nil {
				fetchProfile(metrics+"/debug/pprof/heap", filepath.Join(dir, fmt.Sprintf("gw-%d.burst.heap.pprof", n)))
			}
		}()
	}
	err = commitEvents(db, all, "b")
	if err == nil {
		select {
		case <-env.recv.done:
		case <-time.After(15 * time.Minute):
			err = fmt.Errorf("%d of %d endpoints reached in 15 minutes", env.recv.reachedCount(), n)
		}
	}
	row.burst = env.recv.lastAt().Sub(burstStart)
	settleRSS(pid, 30*time.Second)
	close(stopSampling)
	<-sampled
	if err != nil {
		return fail(err)
	}
	row.rssPeak = peak.Load()
	row.burstDup, row.misrouted = env.recv.extra.Load(), env.recv.misrouted.Load()
	if row.after, err = readMemory(pid, metrics); err != nil {
		return fail(err)
	}
	row.cpFileAfter = fileSize(cpPath)
	if dir := os.Getenv("OUTBOX_BENCH_HEAPPROFILE"); dir != "" {
		// What the relay still holds once the burst has settled: its heap
		// and its goroutines (go tool pprof -sample_index=inuse_space).
		fetchProfile(metrics+"/debug/pprof/heap", filepath.Join(dir, fmt.Sprintf("gw-%d.heap.pprof", n)))
		fetchProfile(metrics+"/debug/pprof/goroutine?debug=1", filepath.Join(dir, fmt.Sprintf("gw-%d.goroutines.txt", n)))
	}

	// The console API.
	api := "http://" + consoleAddr + "/api/v1"
	rnd := rand.New(rand.NewPCG(uint64(n), 42))
	row.api = []apiLatency{
		measureAPI("one endpoint", token, func() string { return fmt.Sprintf("%s/endpoints/hooks/%s", api, endpointID(rnd.IntN(n))) }, nil),
		measureAPI("one page of endpoints", token, func() string { return api + "/endpoints?sink=hooks&limit=100" }, checkPage),
		measureAPI("dead letters of one endpoint", token, func() string { return api + "/dead-letters?sink=hooks/" + endpointID(0) }, nil),
		measureAPI("attempts of one endpoint", token, func() string { return api + "/attempts?endpoint=" + endpointID(one) + "&limit=100" }, nil),
	}

	// A new endpoint row, then an event for it.
	// Each from its INSERT being sent, as the live phase times: on a busy
	// machine the request can arrive before the commit's answer does.
	rowAt := time.Now()
	if _, err := db.Exec(`INSERT INTO outbox_endpoints (id, url, secrets, tenant) VALUES ('epnew', ?, ?, 'tnew')`, env.recv.srv.URL+"/gw/new", benchSecret); err != nil {
		return fail(err)
	}
	eventAt := time.Now()
	if _, err := db.Exec(`INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, tenant) VALUES ('new-1', 'order', 'new', 'order.created', '{"n": 1}', 'tnew')`); err != nil {
		return fail(err)
	}
	select {
	case at := <-env.recv.newAt:
		row.newEndpoint, row.newFromRow = at.Sub(eventAt), at.Sub(rowAt)
	case <-time.After(5 * time.Minute):
		return fail(fmt.Errorf("the new endpoint's event: not delivered in 5 minutes"))
	}
	return row
}

func (r *gwReceiver) reachedCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reached
}

func endpointID(i int) string { return fmt.Sprintf("ep%06d", i) }
func tenantOf(i int) string   { return fmt.Sprintf("t%06d", i) }

// insertEndpointRows inserts n endpoint rows: row i is endpoint i's, of
// tenant i, posting to the receiver's /gw/i.
func insertEndpointRows(ctx context.Context, db *sql.DB, url string, n int) error {
	return outboxtest.InsertEndpoints(ctx, db, n, func(i int) outboxtest.EndpointRow {
		return outboxtest.EndpointRow{ID: endpointID(i), URL: fmt.Sprintf("%s/gw/%d", url, i), Secrets: benchSecret, Tenant: tenantOf(i)}
	})
}

// commitEvents commits one event for each endpoint of is (its tenant's,
// id "<prefix>-I"), in transactions of 100 rows from 4 connections.
func commitEvents(db *sql.DB, is []int, prefix string) error {
	var next atomic.Int64
	return inParallel(4, func(int) error {
		for {
			lo := int(next.Add(100)) - 100
			if lo >= len(is) {
				return nil
			}
			var q strings.Builder
			q.WriteString("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, tenant) VALUES ")
			for k, i := range is[lo:min(len(is), lo+100)] {
				if k > 0 {
					q.WriteByte(',')
				}
				fmt.Fprintf(&q, `('%s-%d', 'order', 'ord-%d', 'order.created', '{"order_id": "ord-%d", "amount": 1, "currency": "EUR"}', '%s')`, prefix, i, i, i, tenantOf(i))
			}
			if _, err := db.Exec(q.String()); err != nil {
				return err
			}
		}
	})
}

// waitReady polls url every 10 ms until it answers 200.
func waitReady(url string, relay *running, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	client := &http.Client{Timeout: 2 * time.Second}
	for time.Now().Before(deadline) {
		select {
		case err := <-relay.exited:
			relay.exited <- err
			return fmt.Errorf("the relay exited before it was ready: %v", err)
		default:
		}
		if resp, err := client.Get(url); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("not ready within %s", limit)
}

// countRewrites counts the times the file at path is replaced (a new
// inode: the file store writes a temporary file and renames it), polling
// every 2 ms, from the file fi0 was, until quiet passes without one after
// the first, or limit; none within limit is an error.
func countRewrites(path string, fi0 os.FileInfo, quiet, limit time.Duration) (int, error) {
	deadline := time.Now().Add(limit)
	last, lastAt, n := fi0, time.Time{}, 0
	for time.Now().Before(deadline) {
		if fi, err := os.Stat(path); err == nil && (last == nil || !os.SameFile(fi, last)) {
			last, lastAt = fi, time.Now()
			n++
		}
		if n > 0 && time.Since(lastAt) >= quiet {
			return n, nil
		}
		time.Sleep(2 * time.Millisecond)
	}
	if n == 0 {
		return 0, fmt.Errorf("the checkpoint file was not saved within %s", limit)
	}
	return n, nil
}

// waitFor polls cond every 5 ms for at most limit.
func waitFor(limit time.Duration, cond func() bool) error {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// settleRSS samples the process's RSS every 500 ms until six samples in a
// row (3 s) stay within 1 % of each other, or limit passes.
func settleRSS(pid int, limit time.Duration) {
	deadline := time.Now().Add(limit)
	var last []int64
	for time.Now().Before(deadline) {
		last = append(last, vmRSS(pid))
		if len(last) > 6 {
			last = last[1:]
		}
		if steady(last, 6, 0.01) {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// steady reports whether the last want samples are within frac of their
// greatest.
func steady(samples []int64, want int, frac float64) bool {
	if len(samples) < want {
		return false
	}
	s := samples[len(samples)-want:]
	lo, hi := slices.Min(s), slices.Max(s)
	return hi > 0 && float64(hi-lo) <= frac*float64(hi)
}

// readMemory forces a collection (pprof's heap?gc=1), then reads RSS and
// the runtime's figures from /metrics.
func readMemory(pid int, base string) (memReading, error) {
	resp, err := http.Get(base + "/debug/pprof/heap?gc=1")
	if err != nil {
		return memReading{}, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	page, err := get(base + "/metrics")
	if err != nil {
		return memReading{}, err
	}
	m := parseMetrics(page)
	return memReading{rss: vmRSS(pid), heap: int64(m["go_memstats_heap_inuse_bytes"]), stacks: int64(m["go_memstats_stack_inuse_bytes"]),
		goroutines: int(m["go_goroutines"])}, nil
}

func get(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// parseMetrics sums a Prometheus text page's samples by metric name, over
// their labels.
func parseMetrics(page string) map[string]float64 {
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(page))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var name, rest string
		if i := strings.IndexByte(line, '{'); i >= 0 {
			j := strings.LastIndexByte(line, '}')
			if j < i {
				continue
			}
			name, rest = line[:i], line[j+1:]
		} else {
			var ok bool
			if name, rest, ok = strings.Cut(line, " "); !ok {
				continue
			}
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			out[name] += v
		}
	}
	return out
}

func scrapeSum(url, name string) int64 {
	page, err := get(url)
	if err != nil {
		return 0
	}
	return int64(parseMetrics(page)[name])
}

// vmRSS is the process's resident set in bytes (0 when unknown).
func vmRSS(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	return parseVmRSS(string(b))
}

// parseVmRSS reads the VmRSS line of a /proc/PID/status text, in bytes.
func parseVmRSS(status string) int64 {
	for line := range strings.Lines(status) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) == 0 {
				return 0
			}
			kb, _ := strconv.ParseInt(f[0], 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// ioCounters are a process's /proc/PID/io counters: bytes handed to write
// calls (files and sockets) and bytes it sent to the block layer.
type ioCounters struct{ wchar, writeBytes int64 }

func procIO(pid int) ioCounters {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/io")
	if err != nil {
		return ioCounters{}
	}
	return parseIO(string(b))
}

func parseIO(text string) ioCounters {
	var c ioCounters
	for line := range strings.Lines(text) {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		switch k {
		case "wchar":
			c.wchar = n
		case "write_bytes":
			c.writeBytes = n
		}
	}
	return c
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// measureAPI makes up to 200 requests (for at most 20 s, at least 5) of
// url() with token, one at a time, and returns their p50 and p99. check,
// when set, looks at the last answer and may note what it saw.
func measureAPI(what, token string, url func() string, check func(body []byte) string) apiLatency {
	out := apiLatency{what: what}
	client := &http.Client{Timeout: time.Minute}
	var ds []time.Duration
	began := time.Now()
	var body []byte
	for len(ds) < 200 && (len(ds) < 5 || time.Since(began) < 20*time.Second) {
		req, _ := http.NewRequest(http.MethodGet, url(), nil)
		req.Header.Set("Authorization", "Bearer "+token)
		t := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			out.err = err
			return out
		}
		body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		d := time.Since(t)
		if err != nil {
			out.err = err
			return out
		}
		if resp.StatusCode != http.StatusOK {
			out.err = fmt.Errorf("%s: %s: %.200s", req.URL.Path, resp.Status, body)
			return out
		}
		ds = append(ds, d)
	}
	out.n, out.bytes = len(ds), len(body)
	out.p50, out.p99 = percentile(ds, 0.50), percentile(ds, 0.99)
	if check != nil {
		out.note = check(body)
	}
	return out
}

// checkPage says whether an endpoint list asked for limit=100 held at most
// 100 endpoints (a page) or more (the API does not page: the full list).
func checkPage(body []byte) string {
	var list struct {
		Endpoints []json.RawMessage `json:"endpoints"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return "not an endpoint list: " + err.Error()
	}
	if len(list.Endpoints) > 100 {
		return fmt.Sprintf("limit unknown to the API: the full list, %d endpoints", len(list.Endpoints))
	}
	return fmt.Sprintf("%d endpoints", len(list.Endpoints))
}

// percentile is the q-th quantile of ds (nearest rank; 0 when empty).
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	k := int(q*float64(len(s))+0.999999) - 1
	return s[min(max(k, 0), len(s)-1)]
}

// perEndpoint is what each endpoint row above the base's adds to v, in
// bytes (0 when there is nothing to divide by).
func perEndpoint(v, base int64, n, baseN int) float64 {
	if n <= baseN {
		return 0
	}
	return float64(v-base) / float64(n-baseN)
}

func mb(b int64) string { return fmt.Sprintf("%.0f MB", float64(b)/1e6) }

func kb(b float64) string {
	if b < 10*1024 {
		return fmt.Sprintf("%.2f KB", b/1024)
	}
	return fmt.Sprintf("%.1f KB", b/1024)
}

func bytesOf(b int64) string {
	switch {
	case b >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(b)/1e6)
	case b >= 10e3:
		return fmt.Sprintf("%.0f KB", float64(b)/1e3)
	}
	return fmt.Sprintf("%d B", b)
}

// secs is d in seconds, or in ms under a second.
func secs(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%.0f ms", float64(d.Microseconds())/1000)
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// gatewayTables renders the gateway rows: the scale table (the issue's
// columns), the console's latencies and the memory per endpoint.
func gatewayTables(rows []gatewayRow) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	var base *gatewayRow
	if len(rows) > 0 && rows[0].endpoints == 1 && rows[0].err == nil {
		base = &rows[0]
	}
	p("### Gateway at scale: endpoint rows, one tenant each, the relay binary with a file checkpoint, the attempts record and the console on\n\n")
	p("| endpoint rows | start → /readyz | RSS idle | per idle endpoint over the base | goroutines idle | idle 10 s: CPU, bytes written | checkpoint file idle → after the burst | one event to one endpoint: bytes written, file saves seen (cursors saved) | one event to each: all delivered | RSS peak during → after | duplicates, misrouted | new endpoint row, then an event: its request, from the event's INSERT (from the row's) |\n")
	p("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		if r.err != nil {
			p("| %d | failed: %v | | | | | | | | | | |\n", r.endpoints, r.err)
			continue
		}
		per := "base"
		if base != nil && r.endpoints > base.endpoints {
			per = kb(perEndpoint(r.idle.rss, base.idle.rss, r.endpoints, base.endpoints))
		}
		p("| %d | %s | %s | %s | %d (%.2f per row) | %.1f %% of a core, %s/s | %s → %s | %s, %d (%d) | %s | %s → %s | %d, %d | %s (%s after the row) |\n",
			r.endpoints, secs(r.ready), mb(r.idle.rss), per, r.idle.goroutines, float64(r.idle.goroutines)/float64(r.endpoints),
			100*r.idleCPU/r.idleWindow.Seconds(), bytesOf(int64(float64(r.idleWritten)/r.idleWindow.Seconds())),
			bytesOf(r.cpFileIdle), bytesOf(r.cpFileAfter), bytesOf(r.saveWritten), r.saveRewrites, r.saveSaves,
			secs(r.burst), mb(r.rssPeak), mb(r.after.rss), r.burstDup, r.misrouted, secs(r.newEndpoint), secs(r.newFromRow))
	}
	p("\n### Gateway at scale: the console API, one request at a time (p50 / p99, the answer's size)\n\n")
	p("| endpoint rows | one endpoint | one page of endpoints (limit=100) | dead letters of one endpoint | attempts of one endpoint |\n|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		if r.err != nil {
			continue
		}
		cells := make([]string, len(r.api))
		for i, a := range r.api {
			if a.err != nil {
				cells[i] = "failed: " + a.err.Error()
				continue
			}
			cells[i] = fmt.Sprintf("%s / %s ms (%s, %d requests)", ms(a.p50), ms(a.p99), bytesOf(int64(a.bytes)), a.n)
			if a.note != "" {
				cells[i] += ": " + a.note
			}
		}
		p("| %d | %s |\n", r.endpoints, strings.Join(cells, " | "))
	}
	p("\n### Gateway at scale: memory per endpoint (RSS from /proc; heap in use, stacks and goroutines from /metrics after a forced collection)\n\n")
	p("| endpoint rows | phase | RSS | heap in use | stacks | goroutines |\n|---:|---|---:|---:|---:|---:|\n")
	for _, r := range rows {
		if r.err != nil {
			continue
		}
		for _, ph := range []struct {
			name string
			m    memReading
		}{{"idle", r.idle}, {"after one event to each, settled", r.after}} {
			p("| %d | %s | %s | %s | %s | %d |\n", r.endpoints, ph.name, mb(ph.m.rss), mb(ph.m.heap), mb(ph.m.stacks), ph.m.goroutines)
		}
	}
	if base != nil {
		p("\nWhat each idle endpoint row costs over the base (one row), in bytes:\n\n")
		p("| endpoint rows | RSS | heap in use | stacks | goroutines |\n|---:|---:|---:|---:|---:|\n")
		for _, r := range rows[1:] {
			if r.err != nil {
				continue
			}
			f := func(v, b int64) string {
				return fmt.Sprintf("%.0f", perEndpoint(v, b, r.endpoints, base.endpoints))
			}
			p("| %d | %s | %s | %s | %.2f |\n", r.endpoints, f(r.idle.rss, base.idle.rss), f(r.idle.heap, base.idle.heap),
				f(r.idle.stacks, base.idle.stacks), perEndpoint(int64(r.idle.goroutines), int64(base.idle.goroutines), r.endpoints, base.endpoints))
		}
	}
	if len(rows) > 0 && rows[len(rows)-1].config != "" {
		p("\nThe config of the largest size (the receiver's address, the replica id and the token's hash vary):\n\n")
		for line := range strings.Lines(rows[len(rows)-1].config) {
			p("    %s", line)
		}
		p("\n")
	}
	return b.String()
}
