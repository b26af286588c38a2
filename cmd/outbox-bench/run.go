package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/poller"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/source"
)

// backlogRow is one phase of the backlog table.
type backlogRow struct {
	name   string
	res    result
	stmts  int64
	err    error
	config string
	// serverCPU and brokerCPU are the CPU seconds the private MariaDB and
	// the Kafka broker (for the webhook rows: the receiver, the bench's
	// own process) spent while the row ran (-1: not measured).
	serverCPU, brokerCPU float64
	// reads are the server's row-read counters' growth while the row ran.
	reads tableReads
	// binary: the row ran the relay binary (its res.ExecToAll is set).
	binary bool
}

func run(rows int, live time.Duration, liveRuns, startupRuns int, skipLive, tracing bool, baselineRelay, relayBin, only, endpoints, outPath, pngPath, benchmarksPath string) error {
	groups := map[string]bool{}
	for _, g := range strings.Split(only, ",") {
		switch g = strings.TrimSpace(g); g {
		case "":
		case "stdout", "kafka", "webhook", "poller", "backfill", "startup", "gateway":
			groups[g] = true
		default:
			return fmt.Errorf("-only %q: unknown group %q; use stdout, kafka, webhook, poller, backfill, startup or gateway, comma-separated", only, g)
		}
	}
	runs := func(g string) bool { return len(groups) == 0 || groups[g] }
	sizes, err := parseEndpoints(endpoints)
	if err != nil {
		return err
	}
	// -only gateway: the gateway rows alone, no backlog, no live phase.
	gatewayOnly := len(groups) == 1 && groups["gateway"]
	if gatewayOnly && len(sizes) == 0 {
		return fmt.Errorf("-only gateway: give the endpoint row counts with -endpoints, e.g. -endpoints 1000,10000")
	}
	ctx := context.Background()
	began := time.Now()
	fmt.Fprintf(os.Stderr, "starting a private mariadbd…\n")
	srv, err := testserver.StartServer(testserver.Options{ExtraArgs: []string{"--innodb-buffer-pool-size=" + bufferPool}})
	if err != nil {
		return err
	}
	defer srv.Stop()
	root, err := sql.Open("mysql", srv.DSN(""))
	if err != nil {
		return err
	}
	defer root.Close()
	var version string
	_ = root.QueryRow("SELECT VERSION()").Scan(&version)
	for _, q := range []string{"CREATE DATABASE bench", fmt.Sprintf(poller.Schema, "bench.outbox"),
		fmt.Sprintf(poller.Schema, "bench.poll_outbox")} {
		if _, err := root.Exec(q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	db, err := sql.Open("mysql", srv.DSN("bench")+"&interpolateParams=true")
	if err != nil {
		return err
	}
	defer db.Close()
	info, err := source.ReadInfo(ctx, db)
	if err != nil {
		return err
	}
	startPos, err := source.CurrentPosition(ctx, db, info)
	if err != nil {
		return err
	}
	if !gatewayOnly {
		fmt.Fprintf(os.Stderr, "loading %d rows in transactions of 10…\n", rows)
		t0 := time.Now()
		if err := load(db, "outbox", rows); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "loaded in %.1fs\n", time.Since(t0).Seconds())
	}
	tmp, err := os.MkdirTemp("", "outbox-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	serverID := 5000
	relayCfg := func(sinks string) string {
		serverID++
		return fmt.Sprintf(`source: {host: %s, port: %d, user: root, server_id: %d}
tables: [{name: bench.outbox}]
checkpoint: {path: %s/cp-%d.json, start: "gtid:%s"}
sinks: [%s]
`, srv.Host, srv.Port, serverID, tmp, serverID, startPos.GTIDSet, sinks)
	}
	dbPID := serverPID(root)
	brokerPID := 0 // the broker of the Kafka rows, while one runs
	span := func() func(*backlogRow) {
		s := startSpan(dbPID, brokerPID)
		return func(r *backlogRow) {
			cpu := s.stop()
			r.serverCPU, r.brokerCPU = cpu[0], cpu[1]
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	// measureOn runs a child of this binary with args, to its result line,
	// counting the statements, row reads and CPU of server (its pool, its
	// process id).
	measureOn := func(server *sql.DB, pid int, name, config string, args ...string) backlogRow {
		fmt.Fprintf(os.Stderr, "backlog: %s…\n", name)
		q0, r0 := questions(server), readCounters(server)
		s := startSpan(pid, brokerPID)
		r, err := childOf(ctx, self, args...)
		row := backlogRow{name: name, res: r, stmts: questions(server) - q0 - 1, err: err, config: config, reads: readCounters(server).since(r0)}
		cpu := s.stop()
		row.serverCPU, row.brokerCPU = cpu[0], cpu[1]
		return row
	}
	// measure is measureOn the private mariadbd.
	measure := func(name, config string, args ...string) backlogRow {
		return measureOn(root, dbPID, name, config, args...)
	}
	var table []backlogRow
	if !gatewayOnly {
		table = append(table, measure("bare go-mysql BinlogSyncer, every row decoded (the limit)", "",
			"-role", "decode", "-port", fmt.Sprint(srv.Port), "-start", startPos.GTIDSet, "-table", "bench.outbox", "-n", fmt.Sprint(rows)))
	}
	bin, err := buildRelay(tmp, relayBin)
	if err != nil {
		return err
	}
	recv := newReceiver()
	defer recv.close()
	// measureBinaryOf runs the relay binary bin with config until n events
	// arrived where at counts them.
	measureBinaryOf := func(bin, name, config string, at countAt) backlogRow {
		fmt.Fprintf(os.Stderr, "backlog: %s…\n", name)
		q0 := questions(root)
		tag := fmt.Sprintf("relay-%d", serverID)
		addr := pprofListen()
		if addr != "" {
			config += fmt.Sprintf("http: {listen: %q, pprof: true}\n", addr)
		}
		args, err := relayArgs(tmp, tag, config)
		if err != nil {
			return backlogRow{name: name, err: err}
		}
		c := newCounter(rows)
		switch {
		case at.path != "":
			recv.count(at.path, c)
		case at.topic != nil:
			stop, err := at.topic.count(c)
			if err != nil {
				return backlogRow{name: name, err: fmt.Errorf("the topic's high watermarks: %w", err)}
			}
			defer stop()
		}
		done := span()
		r, err := runBinary(ctx, bin, args, c, at.pipe, tag, addr)
		row := backlogRow{name: name, res: r, stmts: questions(root) - q0 - 1, err: err, config: config, binary: true}
		done(&row)
		return row
	}
	// measureBinary is measureBinaryOf this build's relay binary, and with
	// -baseline-relay the other build's right after, on the same backlog
	// (each from the start: config makes a config of a checkpoint file and
	// replica id of its own).
	measureBinary := func(name string, config func() string, at countAt) []backlogRow {
		out := []backlogRow{measureBinaryOf(bin, name, config(), at)}
		if baselineRelay != "" {
			out = append(out, measureBinaryOf(baselineRelay, "baseline build: "+name, config(), at))
		}
		return out
	}
	if runs("stdout") {
		stdoutCfg := func() string { return relayCfg(`{name: out, type: stdout}`) }
		table = append(table, measureBinary("relay binary → stdout, into a pipe the bench reads", stdoutCfg, countAt{pipe: true})...)
	}
	// kafka runs the relay binary (and the baseline's) into a broker of its
	// own (br), counted at the broker.
	kafka := func(name string, br broker, config func(sink string) string) ([]backlogRow, error) {
		partitions := br.partitions
		b, addr, err := startBackground([]string{"-role", "broker", "-delay", br.delay.String(), "-partitions", fmt.Sprint(partitions),
			"-blackhole=" + fmt.Sprint(br.blackhole)}, "BROKER ")
		if err != nil {
			return nil, err
		}
		defer b.stop()
		ends, err := newTopicEnds(addr, benchTopic, partitions)
		if err != nil {
			return nil, err
		}
		defer ends.close()
		brokerPID = b.cmd.Process.Pid
		defer func() { brokerPID = 0 }()
		sink := fmt.Sprintf(`{name: kafka, type: kafka, kafka: {brokers: [%q], topic: %s}}`, addr, benchTopic)
		return measureBinary(name, func() string { return config(sink) }, countAt{topic: ends}), nil
	}
	if runs("kafka") {
		for _, k := range []struct {
			name string
			broker
		}{
			{kafka6, broker{partitions: 6}},
			{kafka6Delay, broker{partitions: 6, delay: 2 * time.Millisecond}},
			{kafka1, broker{partitions: 1}},
			{kafka6Blackhole, broker{partitions: 6, blackhole: true}},
		} {
			got, err := kafka(k.name, k.broker, relayCfg)
			if err != nil {
				return err
			}
			table = append(table, got...)
		}
	}
	if tracing {
		rows, err := tracingRows(relayCfg, kafka)
		if err != nil {
			return err
		}
		table = append(table, rows...)
	}
	// Webhooks: the HTTP floor, then the relay binary to one endpoint and
	// to 1,000 endpoints on its one stream, all into the same receiver (in
	// the bench's process: its CPU is in none of these rows), all signing
	// with benchSecret.
	if runs("webhook") {
		// The receiver is this process: its CPU is the webhook rows'
		// third process, where the Kafka rows have the broker's.
		brokerPID = os.Getpid()
		defer func() { brokerPID = 0 }()
		floor := func(name string, concurrency int) backlogRow {
			path := fmt.Sprintf("/count/floor-%d", concurrency)
			c := newCounter(rows)
			recv.count(path, c)
			fmt.Fprintf(os.Stderr, "backlog: %s…\n", name)
			done := span()
			r, err := child(ctx, "-role", "floor", "-url", recv.url+path, "-n", fmt.Sprint(rows),
				"-concurrency", fmt.Sprint(concurrency), "-secret", benchSecret)
			r.Seconds = c.seconds() // clocked at the receiver, as the relay's rows
			row := backlogRow{name: name, res: r, err: err}
			done(&row)
			return row
		}
		table = append(table, floor(fmt.Sprintf("HTTP floor: bare net/http client, %d keep-alive connections, signed (the webhook limit)", floorConcurrency), floorConcurrency))
		hookCfg := func() string {
			return relayCfg(fmt.Sprintf(`{name: hook, type: webhook, webhook: {endpoints: [{name: recv, url: %q, secrets: [%q]}]}}`,
				recv.url+"/count/one", benchSecret))
		}
		table = append(table, measureBinary("relay binary → webhook, 1 endpoint (local receiver, 204)", hookCfg, countAt{path: "/count/one"})...)
		gwCfg := func() string { return relayCfg(gatewayEndpoints(recv.url+"/count/gateway", tenants, 1)) }
		// The gateway row's total concurrency is its endpoints' (1 each):
		// its floor posts over as many connections.
		table = append(table, floor(fmt.Sprintf("HTTP floor at the gateway row's total concurrency, %d keep-alive connections", tenants), tenants))
		table = append(table, measureBinary(fmt.Sprintf("relay binary → webhook, %d endpoints on one stream, max_concurrency 1 each", tenants), gwCfg, countAt{path: "/count/gateway"})...)
	}
	// The backfill's table source against a bare SELECT of the same rows
	// (before the poller rows, which rewrite every row's status).
	if runs("backfill") {
		dsn := srv.DSN("bench")
		table = append(table, measure("bare SELECT * of the table, every row scanned (the backfill's floor)", "",
			"-role", "select", "-dsn", dsn, "-table", "bench.outbox"))
		table = append(table, measure("backfill: table source, chunks of 1000, a snapshot each, rows mapped to events", "",
			"-role", "backfill", "-dsn", dsn, "-host", srv.Host, "-port", fmt.Sprint(srv.Port), "-table", "bench.outbox", "-n", "1000"))
		mysqlRows, err := backfillOnDolt(ctx, min(rows, doltRows), measureOn)
		if err != nil {
			return err
		}
		table = append(table, mysqlRows...)
	}
	if runs("poller") {
		pollDSN := srv.DSN("bench") + "&interpolateParams=true"
		for i, w := range []int{1, 4} {
			if i > 0 {
				if _, err := db.Exec(`UPDATE outbox SET status = 'pending', claimed_at = NULL, claimed_by = NULL, attempts = 0, published_at = NULL`); err != nil {
					return err
				}
			}
			table = append(table, measure(fmt.Sprintf("seed poller, SKIP LOCKED, batch 100, %d worker(s), no-op publish", w), "",
				"-role", "poller", "-dsn", pollDSN, "-table", "outbox", "-workers", fmt.Sprint(w)))
		}
	}

	var starts []startupResult
	if runs("startup") && startupRuns > 0 {
		big := measureStartup(ctx, bin, srv, db, info, tmp, &serverID, startupRuns, "bench.outbox")
		big.what = fmt.Sprintf("the backlog's (%d rows and more, created_at not indexed; the binlog file holds them)", rows)
		small := startupResult{what: "quickstart-sized: a fresh table of the same shape, in a fresh binlog file (the target's)", target: true}
		if _, err := root.Exec(fmt.Sprintf(poller.Schema, "bench.startup_outbox")); err != nil {
			small.err = err
		} else if _, err := root.Exec("FLUSH BINARY LOGS"); err != nil {
			small.err = err
		} else {
			r := measureStartup(ctx, bin, srv, db, info, tmp, &serverID, startupRuns, "bench.startup_outbox")
			r.what, r.target = small.what, true
			small = r
		}
		starts = []startupResult{small, big}
	}

	var lives []liveRow
	if !skipLive && !gatewayOnly {
		// Each run's own relay, broker and bare reader: a latency's median
		// and spread over the runs, the bare reader's from the same runs.
		var each [][]liveRow
		for k := range max(1, liveRuns) {
			if liveRuns > 1 {
				fmt.Fprintf(os.Stderr, "live: run %d of %d…\n", k+1, liveRuns)
			}
			rows, err := runLive(ctx, srv, root, db, info, recv, tmp, bin, &serverID, live, runs("poller"))
			if err != nil {
				return err
			}
			each = append(each, rows)
		}
		lives = mergeLiveRuns(each)
	}
	var gateway []gatewayRow
	if len(sizes) > 0 {
		gw := newGWReceiver()
		defer gw.srv.Close()
		gateway = runGateway(ctx, &gatewayEnv{bin: bin, srv: srv, root: root, tmp: tmp, recv: gw, serverID: serverID + 1000}, sizes)
	}
	rep := report(reportInput{rows: rows, live: live, table: table, lives: lives, startup: starts, version: version, took: time.Since(began),
		machine: machine(), cpus: runtime.NumCPU(), gateway: gateway})
	fmt.Print(rep)
	if outPath != "" {
		if err := os.WriteFile(outPath, []byte(rep), 0o644); err != nil {
			return err
		}
	}
	if benchmarksPath != "" {
		if err := writeSection(benchmarksPath, rep); err != nil {
			return err
		}
	}
	if pngPath != "" && len(table) > 0 {
		if err := writeChart(pngPath, table, lives); err != nil {
			return err
		}
	}
	for _, r := range table {
		if r.err != nil {
			return fmt.Errorf("%s: %w", r.name, r.err)
		}
	}
	for _, r := range starts {
		if r.err != nil {
			return fmt.Errorf("startup, %s: %w", r.what, r.err)
		}
	}
	for _, r := range gateway {
		if r.err != nil {
			return fmt.Errorf("gateway, %d endpoint rows: %w", r.endpoints, r.err)
		}
	}
	return nil
}

// bufferPool is the private server's InnoDB buffer pool (the tests' servers
// have 64M). The seeds' poller with 4 workers needs more: each claim (FOR
// UPDATE under REPEATABLE READ) locks every index entry it passes, the
// delete-marked ones of rows already claimed that purge has not removed yet
// included, and with 4 workers on this 2-core machine purge falls behind
// (the more so right after the reset UPDATE of every row), so that a claim
// passes up to ~50,000 entries and holds a lock heap of ~8 MB (SHOW ENGINE
// INNODB STATUS, sampled each second). InnoDB keeps lock heaps in the
// buffer pool and fails any statement that must split a page once they and
// the like hold more than 3/4 of it ("Error 1206: The total number of locks
// exceeds the lock table size"): four such claims in a 64 MB pool did. 256M
// (MariaDB's default is 128M) holds the 200,000-row table whole and leaves
// room for such heaps several times over; the poller's statements are
// unchanged.
const bufferPool = "256M"

// load commits rows outbox rows in transactions of 10, from 4 connections.
// Row k's aggregate type is tenant(k): the gateway row's endpoint k%1000
// selects it.
func load(db *sql.DB, table string, rows int) error {
	per := (rows + 39) / 40
	return inParallel(4, func(p int) error {
		for i := p * per; i < min(rows/10, (p+1)*per); i++ {
			var q bytes.Buffer
			q.WriteString("INSERT INTO " + table + " (aggregatetype, aggregateid, type, payload) VALUES ")
			for r := range 10 {
				if r > 0 {
					q.WriteByte(',')
				}
				k := i*10 + r
				fmt.Fprintf(&q, `('%s', 'ord-%06d', 'order.created', '{"order_id": "ord-%06d", "amount": %d, "currency": "EUR", "note": "a typical small payload"}')`, tenant(k), k%5000, k, k%9973)
			}
			if _, err := db.Exec(q.String()); err != nil {
				return err
			}
		}
		return nil
	})
}

// inParallel runs work(0) to work(n-1) at once, each on a goroutine, and
// returns the first error one of them returned (nil when none did).
func inParallel(n int, work func(p int) error) error {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for p := range n {
		wg.Go(func() {
			if err := work(p); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// machine describes this machine in one line.
func machine() string {
	model := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	load := ""
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		load = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	return fmt.Sprintf("%d CPUs (%s), %s/%s, %s; load average at the end %s", runtime.NumCPU(), model, runtime.GOOS, runtime.GOARCH, runtime.Version(), load)
}

// tracingRows drains the backlog to Kafka with tracing off, on at sampling
// 0 and on at sampling 1, in that order twice, so that load on a shared
// machine hits the three alike, each with kafka (a broker of its own, the
// relay binary, counted at the broker). The spans (roots: the bench rows
// carry no traceparent) go over OTLP/HTTP to a receiver in this process
// that accepts and counts them; the relay takes its exporter's settings
// from the environment it inherits.
func tracingRows(relayCfg func(string) string, kafka func(name string, br broker, config func(sink string) string) ([]backlogRow, error)) ([]backlogRow, error) {
	var spans atomic.Int64
	otlp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		spans.Add(n)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer otlp.Close()
	for k, v := range map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": otlp.URL, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"} {
		os.Setenv(k, v)
		defer os.Unsetenv(k)
	}
	defer os.Unsetenv("OTEL_TRACES_SAMPLER")
	var out []backlogRow
	for round := 1; round <= 2; round++ {
		for _, mode := range []struct{ name, sampler string }{{"off", ""}, {"on, sampling 0", "always_off"}, {"on, sampling 1", "always_on"}} {
			cfg := relayCfg
			if mode.sampler != "" {
				cfg = func(sink string) string { return relayCfg(sink) + "tracing: {enabled: true}\n" }
				os.Setenv("OTEL_TRACES_SAMPLER", mode.sampler)
			} else {
				os.Unsetenv("OTEL_TRACES_SAMPLER")
			}
			got, err := kafka(fmt.Sprintf("relay binary → Kafka, tracing %s (round %d)", mode.name, round), broker{partitions: 6}, cfg)
			if err != nil {
				return nil, err
			}
			out = append(out, got...)
		}
	}
	fmt.Fprintf(os.Stderr, "tracing: the OTLP receiver got %d bytes of spans\n", spans.Load())
	return out, nil
}

// countAt is where a relay binary's row counts its events: the bench's end
// of its stdout pipe, a path of the receiver, or a topic's high watermarks.
type countAt struct {
	pipe  bool
	path  string
	topic *topicEnds
}

// broker is a Kafka row's broker (kfake, a process of its own): the bench
// topic's partitions, the delay its connections carry each way, and
// whether it stores nothing (kfake's BlackholeProduce: offsets advance, the
// record bytes are dropped).
type broker struct {
	partitions int
	delay      time.Duration
	blackhole  bool
}

// The Kafka rows' names (the targets find them by these).
const (
	kafka6      = "relay binary → Kafka, 6 partitions (kfake broker, own process)"
	kafka6Delay = "relay binary → Kafka, 6 partitions, through +2 ms round trip"
	kafka1      = "relay binary → Kafka, 1 partition (kfake broker, own process)"
	// kafka6Blackhole is kafka6 into a broker that stores nothing: most
	// of kfake's CPU is its in-memory log (a segment grown by copying), so
	// this row shows the relay with the broker's cost at its least.
	kafka6Blackhole = "relay binary → Kafka, 6 partitions, into a broker that stores nothing (kfake BlackholeProduce)"
)
