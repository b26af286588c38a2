package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/poller"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/source"
)

// seen records when each event id was seen by one observer.
type seen struct {
	mu sync.Mutex
	at map[int64]time.Time
}

func newSeen() *seen { return &seen{at: map[int64]time.Time{}} }

func (s *seen) mark(id int64, t time.Time) {
	s.mu.Lock()
	if _, ok := s.at[id]; !ok {
		s.at[id] = t
	}
	s.mu.Unlock()
}

func (s *seen) get(id int64) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.at[id]
	return t, ok
}

// receiver is the local webhook receiver: /hook (the relay's webhook sink,
// id in webhook-id) and /poll (the poller, id in the body) answer 204.
type receiver struct {
	srv        *http.Server
	url        string
	hook, poll *seen
	floorHook  *seen    // /floorhook: the live floor's bare client (webhook-id)
	counters   sync.Map // path → *counter: /count/… answer 204 and count
}

// count makes the receiver count the requests to path with c.
func (r *receiver) count(path string, c *counter) { r.counters.Store(path, c) }

func newReceiver() *receiver {
	r := &receiver{hook: newSeen(), poll: newSeen(), floorHook: newSeen()}
	mux := http.NewServeMux()
	for path, s := range map[string]*seen{"/hook": r.hook, "/floorhook": r.floorHook} {
		mux.HandleFunc(path, func(w http.ResponseWriter, req *http.Request) {
			now := time.Now()
			_, _ = io.Copy(io.Discard, req.Body)
			if id, err := strconv.ParseInt(req.Header.Get("webhook-id"), 10, 64); err == nil {
				s.mark(id, now)
			}
			w.WriteHeader(http.StatusNoContent)
		})
	}
	mux.HandleFunc("/poll", func(w http.ResponseWriter, req *http.Request) {
		now := time.Now()
		b, _ := io.ReadAll(req.Body)
		if id, err := strconv.ParseInt(string(b), 10, 64); err == nil {
			r.poll.mark(id, now)
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("/count/", func(w http.ResponseWriter, req *http.Request) {
		now := time.Now()
		_, _ = io.Copy(io.Discard, req.Body)
		if c, ok := r.counters.Load(req.URL.Path); ok {
			c.(*counter).hit(now)
		}
		w.WriteHeader(http.StatusNoContent)
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	r.srv = &http.Server{Handler: mux}
	go func() { _ = r.srv.Serve(l) }()
	r.url = "http://" + l.Addr().String()
	return r
}

func (r *receiver) close() { _ = r.srv.Close() }

// floor reads the binlog with a bare BinlogSyncer from start and marks each
// row of table when it is decoded: the lowest latency any reader here gets.
// With fwd, it also hands each row, as it is decoded, to bare clients of the
// relay's sinks (fwd.send): the floors of commit → Kafka and commit →
// webhook, through the same broker, consumer and receiver as the relay's.
// The live phase runs it in a child of its own (roleFloorLive), so that its
// CPU per event is the bare reader's (and its client's) alone.
func floor(ctx context.Context, host string, port int, start, table string, mark func(int64, time.Time), fwd *forwarder) error {
	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID: 9002, Flavor: mysql.MariaDBFlavor, Host: host, Port: uint16(port), User: "root",
		HeartbeatPeriod: time.Second, Logger: slog.New(slog.DiscardHandler),
	})
	set, err := mysql.ParseGTIDSet(mysql.MariaDBFlavor, start)
	if err != nil {
		return err
	}
	st, err := syncer.StartSyncGTID(set)
	if err != nil {
		return err
	}
	go func() {
		defer syncer.Close()
		for {
			ev, err := st.GetEvent(ctx)
			if err != nil {
				return
			}
			if re, ok := ev.Event.(*replication.RowsEvent); ok && re.Type() == replication.EnumRowsEventTypeInsert &&
				string(re.Table.Schema)+"."+string(re.Table.Table) == table {
				now := time.Now()
				for _, row := range re.Rows {
					if id, ok := row[0].(int64); ok {
						mark(id, now)
						if fwd != nil {
							fwd.send(id, row)
						}
					}
				}
			}
		}
	}()
	return nil
}

// floorHeader marks the Kafka floor's records (the relay's carry "id").
const floorHeader = "floor-id"

// forwarder is the bare clients the floor reader hands each row to: a kgo
// producer (acks=all, no linger, keyed by the row's aggregate id as the
// relay's records are) into the relay's topic, its records marked with
// floorHeader, and a net/http client posting the row's payload to the
// receiver's /floorhook over floorConcurrency keep-alive connections, with
// the id in webhook-id. No work beyond what any such client must do.
type forwarder struct {
	kafka *kgo.Client
	url   string
	hooks chan [2][]byte // id, payload
	wg    sync.WaitGroup
}

// newForwarder returns the bare clients: a producer when broker is set, an
// HTTP client when url is.
func newForwarder(broker, topic, url string) (*forwarder, error) {
	f := &forwarder{url: url, hooks: make(chan [2][]byte, 1<<16)}
	if broker != "" {
		cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(0),
			kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
		if err != nil {
			return nil, err
		}
		f.kafka = cl
	}
	if url == "" {
		return f, nil
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: floorConcurrency, MaxConnsPerHost: floorConcurrency}}
	for range floorConcurrency {
		f.wg.Go(func() {
			for h := range f.hooks {
				req, err := http.NewRequest(http.MethodPost, f.url, bytes.NewReader(h[1]))
				if err != nil {
					continue
				}
				req.Header["Content-Type"] = []string{"application/json"}
				req.Header["Webhook-Id"] = []string{string(h[0])}
				if resp, err := client.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		})
	}
	return f, nil
}

func (f *forwarder) send(id int64, row []any) {
	idb := strconv.AppendInt(nil, id, 10)
	var key, payload []byte
	if len(row) > 4 {
		key, _ = row[2].([]byte)
		if k, ok := row[2].(string); ok {
			key = []byte(k)
		}
		payload, _ = row[4].([]byte)
		if p, ok := row[4].(string); ok {
			payload = []byte(p)
		}
	}
	if f.kafka != nil {
		f.kafka.Produce(context.Background(), &kgo.Record{Key: key, Value: payload,
			Headers: []kgo.RecordHeader{{Key: floorHeader, Value: idb}}}, nil)
	}
	if f.url != "" {
		f.hooks <- [2][]byte{idb, payload}
	}
}

func (f *forwarder) close() {
	close(f.hooks)
	f.wg.Wait()
	if f.kafka != nil {
		f.kafka.Close()
	}
}

// consume marks each record of topic when consumed: the relay's (its "id"
// header) in s, the floor's (floorHeader) in floor.
func consume(ctx context.Context, broker, topic string, s, floor *seen) (func(), error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.ConsumeTopics(topic), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := time.Now()
			fs.EachRecord(func(r *kgo.Record) {
				for _, h := range r.Headers {
					to := s
					if h.Key == floorHeader {
						to = floor
					} else if h.Key != "id" {
						continue
					}
					if id, err := strconv.ParseInt(string(h.Value), 10, 64); err == nil {
						to.mark(id, now)
					}
				}
			})
		}
	}()
	return func() { cancel(); <-done; cl.Close() }, nil
}

// produce commits single-row transactions into table at rate per second
// (0: as fast as 4 connections go) for d, and returns each id with the time
// its INSERT was sent.
func produce(db *sql.DB, table string, rate float64, d time.Duration) (map[int64]time.Time, error) {
	const conns = 4
	var (
		mu   sync.Mutex
		sent = map[int64]time.Time{}
		ferr error
		wg   sync.WaitGroup
	)
	jobs := make(chan struct{}, 1024)
	for range conns {
		wg.Go(func() {
			for range jobs {
				at := time.Now()
			again:
				res, err := db.Exec("INSERT INTO "+table+` (aggregatetype, aggregateid, type, payload) VALUES ('order', ?, 'order.created', ?)`,
					fmt.Sprintf("ord-%06d", at.UnixNano()%5000),
					fmt.Sprintf(`{"order_id": "ord-%d", "amount": %d, "currency": "EUR", "note": "a typical small payload"}`, at.UnixNano(), at.UnixNano()%9973))
				if poller.Deadlock(err) {
					goto again
				}
				mu.Lock()
				if err != nil {
					ferr = err
				} else if id, err := res.LastInsertId(); err == nil {
					sent[id] = at
				}
				mu.Unlock()
			}
		})
	}
	start := time.Now()
	for i := 0; ; i++ {
		if rate > 0 {
			next := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
			if next.Sub(start) >= d {
				break
			}
			time.Sleep(time.Until(next))
		} else if time.Since(start) >= d {
			break
		}
		jobs <- struct{}{}
	}
	close(jobs)
	wg.Wait()
	return sent, ferr
}

// liveRow is one observer at one rate.
type liveRow struct {
	rate     string
	achieved float64
	observer string
	n, got   int
	p50, p99 time.Duration
	max      time.Duration
	// runs is how many live phases the row is the median of (0 or 1: one);
	// p50s and p99s are each run's, in order.
	runs       int
	p50s, p99s []time.Duration
	// cpu is the CPU seconds (user+system, /proc/PID/stat) of the
	// observer's process over the step: the relay's, or the floor child's
	// (0: not measured, -1: unknown); merged, the median of the runs' per
	// event, times n. With idle set the row is the relay with no traffic
	// for idle: cpu its CPU seconds, wrote the bytes it handed to write
	// calls and diskWrote those sent to the disk (/proc/PID/io).
	cpu              float64
	idle             time.Duration
	wrote, diskWrote int64
}

// cpuPerEvent is the row's CPU per event in µs (-1: none).
func (r liveRow) cpuPerEvent() float64 {
	if r.cpu <= 0 || r.n == 0 {
		return -1
	}
	return r.cpu / float64(r.n) * 1e6
}

// mergeLiveRuns folds the rows of several live phases into one row per
// rate and observer, in the first run's order: p50 and p99 are the medians
// of the runs' (each run's kept in p50s and p99s for the spread), achieved
// is the median rate, max the greatest, and events sent and seen are
// summed. A row missing from some run is the median of the runs that have
// it.
func mergeLiveRuns(runs [][]liveRow) []liveRow {
	if len(runs) == 0 {
		return nil
	}
	type key struct{ rate, observer string }
	var order []key
	by := map[key][]liveRow{}
	for _, rows := range runs {
		for _, r := range rows {
			k := key{r.rate, r.observer}
			if _, ok := by[k]; !ok {
				order = append(order, k)
			}
			by[k] = append(by[k], r)
		}
	}
	out := make([]liveRow, 0, len(order))
	for _, k := range order {
		rs := by[k]
		m := liveRow{rate: k.rate, observer: k.observer, runs: len(rs)}
		var achieved []time.Duration // rates as durations, for spread's median
		var perEvent, idle []time.Duration
		for _, r := range rs {
			if r.idle > 0 {
				idle = append(idle, time.Duration(r.cpu/r.idle.Seconds()*1e9))
				m.idle = r.idle
				m.wrote, m.diskWrote = max(m.wrote, r.wrote), max(m.diskWrote, r.diskWrote)
			}
			if r.cpu > 0 && r.n > 0 {
				perEvent = append(perEvent, time.Duration(r.cpu/float64(r.n)*1e9))
			}
			m.n += r.n
			m.got += r.got
			m.max = max(m.max, r.max)
			m.p50s = append(m.p50s, r.p50)
			m.p99s = append(m.p99s, r.p99)
			achieved = append(achieved, time.Duration(r.achieved*1000))
		}
		m.p50, _, _ = spread(m.p50s)
		m.p99, _, _ = spread(m.p99s)
		a, _, _ := spread(achieved)
		m.achieved = float64(a) / 1000
		if len(perEvent) > 0 {
			pe, _, _ := spread(perEvent)
			m.cpu = pe.Seconds() * float64(m.n)
		}
		if len(idle) > 0 {
			f, _, _ := spread(idle) // the fraction of a core, in ns per s
			m.cpu = f.Seconds() * m.idle.Seconds()
		}
		out = append(out, m)
	}
	return out
}

func latencies(sent map[int64]time.Time, s *seen, wait time.Duration) (got int, p50, p99, mx time.Duration) {
	deadline := time.Now().Add(wait)
	var ds []time.Duration
	for {
		ds = ds[:0]
		for id, at := range sent {
			if t, ok := s.get(id); ok {
				ds = append(ds, max(0, t.Sub(at)))
			}
		}
		if len(ds) == len(sent) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(ds) == 0 {
		return 0, 0, 0, 0
	}
	slices.Sort(ds)
	return len(ds), ds[len(ds)/2], ds[min(len(ds)-1, len(ds)*99/100)], ds[len(ds)-1]
}

// liveSinks are the live phase's relay runs, in order: each runs the relay
// binary with that one sink, as users run it, beside the bare reader and
// that sink's floor (a bare client fed by the bare reader: what any relay
// gets through the same broker and consumer, or the same receiver).
var liveSinks = []string{"stdout", "Kafka", "webhook"}

// runLive runs the live phase: the relay binary bin once per sink of
// liveSinks (OUTBOX_BENCH_LIVE_SINKS, comma-separated, picks some), then,
// with poller, the seeds' poller.
func runLive(ctx context.Context, srv *testserver.Server, root, db *sql.DB, info source.ServerInfo, recv *receiver, tmp, bin string, serverID *int, d time.Duration, poller bool) ([]liveRow, error) {
	var rows []liveRow
	for _, sk := range liveSinks {
		if only := os.Getenv("OUTBOX_BENCH_LIVE_SINKS"); only != "" && !slices.Contains(strings.Split(strings.ToLower(only), ","), strings.ToLower(sk)) {
			continue
		}
		r, err := runLiveSink(ctx, srv, db, info, recv, tmp, bin, serverID, d, sk)
		if err != nil {
			return nil, fmt.Errorf("live, %s: %w", sk, err)
		}
		rows = append(rows, r...)
	}
	if !poller {
		return rows, nil
	}

	pollDSN := srv.DSN("bench") + "&interpolateParams=true"
	for _, iv := range []time.Duration{100 * time.Millisecond, time.Second} {
		p, _, err := startBackground([]string{"-role", "poller-live", "-dsn", pollDSN, "-table", "poll_outbox", "-url", recv.url + "/poll", "-interval", iv.String()}, "")
		if err != nil {
			return nil, err
		}
		for _, rate := range []float64{500, 2000} {
			fmt.Fprintf(os.Stderr, "live: poller every %s at %.0f/s…\n", iv, rate)
			sent, err := produce(db, "poll_outbox", rate, d)
			if err != nil {
				p.stop()
				return nil, err
			}
			got, p50, p99, mx := latencies(sent, recv.poll, 10*time.Second)
			rows = append(rows, liveRow{rate: fmt.Sprintf("%.0f/s", rate), achieved: float64(len(sent)) / d.Seconds(),
				observer: fmt.Sprintf("seed poller every %s, 1 worker → received", iv), n: len(sent), got: got, p50: p50, p99: p99, max: mx})
		}
		p.stop()
	}
	return rows, nil
}

// runLiveSink runs the live steps against the relay binary configured with
// sink sk alone (stdout into a pipe the bench reads, Kafka into a broker of
// its own, the webhook into the receiver), the bare reader and sk's floor
// beside it.
func runLiveSink(ctx context.Context, srv *testserver.Server, db *sql.DB, info source.ServerInfo, recv *receiver, tmp, bin string, serverID *int, d time.Duration, sk string) ([]liveRow, error) {
	pos, err := source.CurrentPosition(ctx, db, info)
	if err != nil {
		return nil, err
	}
	*serverID++
	cfg := liveHead(srv.Host, srv.Port, *serverID, tmp, pos.GTIDSet)
	type observer struct {
		name string
		s    *seen
	}
	fl := newSeen()
	observers := []observer{{"bare go-mysql reader", fl}}
	floorArgs := []string{"-role", "floor-live", "-host", srv.Host, "-port", strconv.Itoa(srv.Port), "-start", pos.GTIDSet, "-table", "bench.outbox"}
	relaySeen := newSeen()
	var line func([]byte, time.Time)
	switch sk {
	case "stdout":
		cfg += "sinks: [{name: out, type: stdout}]\n"
		// Each line, read from the pipe, times the relay's own reading
		// and hand-off, with no network after the binlog.
		line = func(b []byte, at time.Time) {
			var l struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(b, &l) == nil {
				if id, err := strconv.ParseInt(l.ID, 10, 64); err == nil {
					relaySeen.mark(id, at)
				}
			}
		}
		observers = append(observers, observer{"relay → stdout, read from its pipe", relaySeen})
	case "Kafka":
		broker, addr, err := startBackground([]string{"-role", "broker"}, "BROKER ")
		if err != nil {
			return nil, err
		}
		defer broker.stop()
		cfg += fmt.Sprintf("sinks: [{name: kafka, type: kafka, kafka: {brokers: [%q], topic: %s}}]\n", addr, liveTopic)
		floorArgs = append(floorArgs, "-broker", addr)
		floorSeen := newSeen()
		stopConsume, err := consume(ctx, addr, liveTopic, relaySeen, floorSeen)
		if err != nil {
			return nil, err
		}
		defer stopConsume()
		observers = append(observers, observer{"bare reader → bare producer → consumed (the Kafka floor)", floorSeen},
			observer{"relay → Kafka, consumed", relaySeen})
	case "webhook":
		cfg += fmt.Sprintf("sinks: [{name: hook, type: webhook, webhook: {endpoints: [{name: recv, url: %q}]}}]\n", recv.url+"/hook")
		floorArgs = append(floorArgs, "-url", recv.url+"/floorhook")
		relaySeen = recv.hook // ids are never reused: the runs' marks do not mix
		observers = append(observers, observer{"bare reader → bare HTTP client → received (the webhook floor)", recv.floorHook},
			observer{"relay → webhook received", relaySeen})
	}
	// With OUTBOX_BENCH_CPUPROFILE=DIR, the relay serves pprof and the
	// 2,000/s step writes its CPU profile and execution trace there.
	pprofAddr := pprofListen()
	if pprofAddr != "" {
		cfg += fmt.Sprintf("http: {listen: %q, pprof: true}\n", pprofAddr)
	}
	args, err := relayArgs(tmp, "live-"+sk, cfg)
	if err != nil {
		return nil, err
	}
	relayProc, err := startBinary(bin, args, filepath.Join(tmp, "live-"+sk+".log"), line)
	if err != nil {
		return nil, err
	}
	defer relayProc.stop()
	floorProc, _, err := startBackgroundLines(floorArgs, "FLOOR ", func(l string) {
		var id, at int64
		if _, err := fmt.Sscanf(l, "M %d %d", &id, &at); err == nil {
			fl.mark(id, time.Unix(0, at))
		}
	})
	if err != nil {
		return nil, err
	}
	defer floorProc.stop()
	// CPU per event, from /proc/PID/stat: the relay's for its rows, the
	// floor child's for the bare reader's (the stdout run: the reader
	// alone) or the floor's (the reader and its bare client).
	relayPID, floorPID := relayProc.cmd.Process.Pid, floorProc.cmd.Process.Pid
	cpuOf := func(o observer, relayCPU, floorCPU float64) float64 {
		switch {
		case strings.Contains(o.name, "relay →"):
			return relayCPU
		case sk == "stdout" || strings.Contains(o.name, "floor"):
			return floorCPU
		}
		return -1
	}
	// Warm up: the relay connects, the consumer joins.
	if _, err := produce(db, "outbox", 100, time.Second); err != nil {
		return nil, err
	}
	time.Sleep(time.Second)

	// Idle: no traffic for d, the relay's CPU and the bytes it wrote.
	io0, cpu0 := procIO(relayPID), procCPU(relayPID)
	time.Sleep(d)
	io1, cpu1 := procIO(relayPID), procCPU(relayPID)
	rows := []liveRow{{rate: "idle", observer: sk + " run: relay, no traffic", cpu: cpu1 - cpu0, idle: d,
		wrote: io1.wchar - io0.wchar, diskWrote: io1.writeBytes - io0.writeBytes}}

	for _, rate := range []float64{500, 2000, 0} {
		name := fmt.Sprintf("%.0f/s", rate)
		if rate == 0 {
			name = "max (4 connections)"
		}
		fmt.Fprintf(os.Stderr, "live: relay → %s at %s…\n", sk, name)
		if dir := os.Getenv("OUTBOX_BENCH_CPUPROFILE"); dir != "" && pprofAddr != "" && rate == 2000 {
			secs := max(1, int(d.Seconds())-2)
			base := fmt.Sprintf("http://%s/debug/pprof/", pprofAddr)
			go fetchProfile(base+fmt.Sprintf("profile?seconds=%d", secs), filepath.Join(dir, "live-"+sk+"-2000.pprof"))
			go fetchProfile(base+"trace?seconds=2", filepath.Join(dir, "live-"+sk+"-2000.trace"))
		}
		var trace *straceRun
		if dir := os.Getenv("OUTBOX_BENCH_STRACE"); dir != "" && rate == 2000 {
			trace = startStrace(filepath.Join(dir, "live-"+sk+"-2000"), relayPID, floorPID)
		}
		span := startSpan(relayPID, floorPID)
		sent, err := produce(db, "outbox", rate, d)
		if err != nil {
			return nil, err
		}
		achieved := float64(len(sent)) / d.Seconds()
		var step []liveRow
		for _, o := range observers {
			got, p50, p99, mx := latencies(sent, o.s, 10*time.Second)
			step = append(step, liveRow{rate: name, achieved: achieved, observer: sk + " run: " + o.name, n: len(sent), got: got, p50: p50, p99: p99, max: mx})
		}
		// Every observer has seen all (or waited out): the CPU is the
		// step's whole, its tail included.
		cpu := span.stop()
		trace.stop(len(sent))
		for i, o := range observers {
			step[i].cpu = cpuOf(o, cpu[0], cpu[1])
		}
		rows = append(rows, step...)
	}
	if sk == "webhook" {
		// The steps are over: a second relay, after them, disturbs none;
		// the first, done, is stopped so that the second idles beside
		// the floor's reader alone.
		relayProc.stop()
		idle, err := idleStaticEndpoints(ctx, srv, db, info, recv, tmp, bin, serverID, d, staticIdleEndpoints)
		if err != nil {
			return nil, err
		}
		rows = append(rows, idle)
	}
	return rows, nil
}

// liveHead is the start of a live relay's config: the source (as
// serverID), the outbox table, and a file checkpoint of its own in tmp
// starting at gtid.
func liveHead(host string, port, serverID int, tmp, gtid string) string {
	return fmt.Sprintf(`source: {host: %s, port: %d, user: root, server_id: %d}
tables: [{name: bench.outbox}]
checkpoint: {path: %s/live-%d.json, start: "gtid:%s"}
`, host, port, serverID, tmp, serverID, gtid)
}

// staticIdleEndpoints is the static endpoints of the webhook run's second
// idle row (issue 46: no traffic ≤ 0.5 % of a core, no writes, with 1,000
// static endpoints).
const staticIdleEndpoints = 1000

// staticEndpointsSink is a webhook sink with n static endpoints, e0 to
// e<n-1>, endpoint i posting to base/i: the receiver's /count/ answers 204
// to any path below it, counting none of these.
func staticEndpointsSink(base string, n int) string {
	var b strings.Builder
	b.WriteString("sinks: [{name: hook, type: webhook, webhook: {endpoints: [")
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "{name: e%d, url: %q}", i, base+"/"+strconv.Itoa(i))
	}
	b.WriteString("]}}]\n")
	return b.String()
}

// idleStaticEndpoints measures the relay binary with n static webhook
// endpoints and no traffic at all: started at the binlog's end, with a
// checkpoint file of its own and http.listen (for /readyz; unscraped, it
// only listens), waited for until ready, let settle, then its CPU and the
// bytes it wrote over d, as the idle row before the steps.
func idleStaticEndpoints(ctx context.Context, srv *testserver.Server, db *sql.DB, info source.ServerInfo, recv *receiver, tmp, bin string, serverID *int, d time.Duration, n int) (liveRow, error) {
	fmt.Fprintf(os.Stderr, "live: relay → webhook, %d static endpoints, idle…\n", n)
	pos, err := source.CurrentPosition(ctx, db, info)
	if err != nil {
		return liveRow{}, err
	}
	*serverID++
	listen := freeAddr()
	cfg := liveHead(srv.Host, srv.Port, *serverID, tmp, pos.GTIDSet) +
		staticEndpointsSink(recv.url+"/count/idle", n) + fmt.Sprintf("http: {listen: %q}\n", listen)
	name := fmt.Sprintf("live-webhook-%d-endpoints", n)
	args, err := relayArgs(tmp, name, cfg)
	if err != nil {
		return liveRow{}, err
	}
	relay, err := startBinary(bin, args, filepath.Join(tmp, name+".log"), nil)
	if err != nil {
		return liveRow{}, err
	}
	defer relay.stop()
	if err := waitReady("http://"+listen+"/readyz", relay, 2*time.Minute); err != nil {
		return liveRow{}, fmt.Errorf("%d static endpoints: %w", n, err)
	}
	// Settle: what a start leaves behind (the gateway's first checkpoint
	// save, some 0.3 s after /readyz: 4 KiB to disk) is over before the
	// window opens.
	time.Sleep(idleSettle)
	pid := relay.cmd.Process.Pid
	io0, cpu0 := procIO(pid), procCPU(pid)
	time.Sleep(d)
	io1, cpu1 := procIO(pid), procCPU(pid)
	return liveRow{rate: "idle", observer: fmt.Sprintf("webhook run: relay with %s static endpoints, no traffic", grouped(n)), cpu: cpu1 - cpu0, idle: d,
		wrote: io1.wchar - io0.wchar, diskWrote: io1.writeBytes - io0.writeBytes}, nil
}

// grouped is n with its thousands grouped by commas: 1000 is "1,000".
func grouped(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// idleSettle is the time a relay is left after /readyz before its idle
// window opens: its start's last write came well within 1 s of it.
const idleSettle = 5 * time.Second

// liveTopic is the live phase's Kafka topic: the relay's and the floor's.
const liveTopic = "outbox.bench"

// roleFloorLive is the live phase's floor in a process of its own: the bare
// reader from start (with broker or url, handing each row to a bare
// producer or HTTP client: newForwarder). It prints "FLOOR ready", then
// "M id unixnano" for each row of table as it is decoded, flushed every
// 20 ms (the time is taken at the decode: the flush delays no latency),
// until stdin closes.
func roleFloorLive(host string, port int, start, table, broker, url string) error {
	var fwd *forwarder
	if broker != "" || url != "" {
		f, err := newForwarder(broker, liveTopic, url)
		if err != nil {
			return err
		}
		defer f.close()
		fwd = f
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	mark := func(id int64, at time.Time) {
		mu.Lock()
		fmt.Fprintf(out, "M %d %d\n", id, at.UnixNano())
		mu.Unlock()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := floor(ctx, host, port, start, table, mark, fwd); err != nil {
		return err
	}
	fmt.Println("FLOOR ready")
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes it
		cancel()
	}()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			mu.Lock()
			_ = out.Flush()
			mu.Unlock()
		}
	}
}

// straceRun counts a process's system calls (strace -c -f) over one live
// step, with OUTBOX_BENCH_STRACE=DIR: each process's table goes into
// DIR/live-SINK-2000.PID.txt, headed by the step's event count.
type straceRun struct {
	cmds  []*exec.Cmd
	paths []string
}

func startStrace(base string, pids ...int) *straceRun {
	s := &straceRun{}
	for _, pid := range pids {
		path := fmt.Sprintf("%s.%d.txt", base, pid)
		cmd := exec.Command("strace", "-c", "-f", "-p", strconv.Itoa(pid), "-o", path+".raw")
		if err := cmd.Start(); err != nil {
			fmt.Fprintf(os.Stderr, "strace: %v\n", err)
			continue
		}
		s.cmds, s.paths = append(s.cmds, cmd), append(s.paths, path)
	}
	time.Sleep(200 * time.Millisecond) // attached
	return s
}

// stop ends the counts and writes each table with the step's events.
func (s *straceRun) stop(events int) {
	if s == nil {
		return
	}
	for i, cmd := range s.cmds {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		b, err := os.ReadFile(s.paths[i] + ".raw")
		if err != nil {
			continue
		}
		_ = os.WriteFile(s.paths[i], append([]byte(fmt.Sprintf("events %d\n", events)), b...), 0o644)
	}
}
