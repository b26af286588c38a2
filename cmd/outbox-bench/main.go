// Command outbox-bench measures outbox-relay against the limit of the binlog
// reader it is built on and against the polling relay it replaces, side by
// side in one run, on a private MariaDB it starts itself:
//
//	go run ./cmd/outbox-bench                 # full size: 200,000 rows, 10 s live steps
//	go run ./cmd/outbox-bench -rows 2000 -live 1s -out "" -png ""   # smoke size (CI)
//
// With -baseline-relay BIN (an outbox-relay built from another commit), each
// row that runs the relay binary (stdout into a pipe, Kafka, webhooks) runs
// that binary too, right after, so a change is measured against its parent
// side by side in one run.
//
// Backlog phase: it commits -rows outbox rows (transactions of 10, ~100-byte
// JSON payloads), then drains them with, each in a process of its own:
// a bare go-mysql BinlogSyncer decoding every row (the limit); the relay
// binary (go build ./cmd/outbox-relay, or -relay BIN) with the stdout sink
// writing into a pipe that the bench reads; the relay binary to a
// Kafka-protocol broker (kfake, in its own process) holding a topic of 6
// partitions, directly and through connections adding a 2 ms round trip,
// and holding a topic of 1 partition; the HTTP floor (a bare net/http
// client posting the same bodies, signed the same way, over 16 keep-alive
// connections, to the same receiver) and the relay binary to that receiver
// with one endpoint and with 1,000 endpoints on its one stream (each
// selecting one aggregate type of the backlog's 1,000); and the polling
// relay of the seeds (SELECT … FOR UPDATE SKIP LOCKED, batches of 100, a
// lease, mark published) with 1 and 4 workers. Each reports events/s, CPU
// seconds per 100k events and its peak RSS, and the relay binary's rows the
// time from its exec to the last event counted (startup included); the
// server's Questions counter gives the statements each ran on the source
// per 1,000 events.
//
// Live phase: the relay binary (stdout, Kafka and webhook sinks, default
// config) runs, as in the backlog's binary rows, while
// single-row transactions are committed at 500/s, 2,000/s and as fast as 4
// connections can; a bare BinlogSyncer in a child process of its own is the
// floor (with, in the Kafka and webhook runs, a bare producer or HTTP client
// it hands each row to). Each step states the CPU per event of the relay
// and of that child, from /proc/PID/stat over the step; before the steps
// the relay idles for one step's length, and its CPU and the bytes it
// wrote are stated; after the webhook run's steps, so does a second relay
// with 1,000 static endpoints and no traffic at all, from /readyz and a
// few seconds' settling (issue 46: idle ≤ 0.5 % of a core, no writes, at
// that size too). With OUTBOX_BENCH_STRACE=DIR the 2,000/s step also
// counts both processes' system calls (strace -c -f) into DIR.
// Then the poller, polling every 100 ms and every 1 s, at 500/s and 2,000/s.
// Latency is from the INSERT being sent to the event being seen: by the bare
// reader, by the webhook receiver, by a Kafka consumer, or published by the
// poller to the receiver. With -live-runs N the live phase runs N times
// (each with its own relay, broker and bare reader) and each latency is
// reported as the median of the N runs with their spread (min–max); the
// targets use the medians.
//
// Rates of the relay binary and the floor are clocked where the events
// arrive (the bench's end of the pipe, the receiver in the bench's process,
// the broker: the sum of the topic's high watermarks, polled every few ms),
// from the first to the last; CPU and peak RSS are each child's whole life.
//
// Startup phase: the relay binary with a quickstart-sized config (one
// table, the stdout sink into a pipe, a file checkpoint, the metrics
// listener) is started -startup-runs times, each with one event committed
// just after its checkpoint.start, and timed from exec to that event's line
// read from the pipe: against the backlog's table, and against a fresh table
// in a fresh binlog file, which the target judges (startup.go).
//
// -only webhook runs the limit and the webhook rows only (the floor, one
// endpoint, 1,000 endpoints); stdout, kafka, poller and startup name the
// others.
//
// Gateway-scale phase (-endpoints 1000,10000,100000; off by default): per
// count, the relay binary with an endpoints table of that many rows, one
// tenant each, a file checkpoint, the attempts record and the console on:
// start → /readyz, idle RSS, goroutines and what an idle endpoint row costs
// over a base run of one row, idle CPU and bytes written, bytes written per
// checkpoint save, one event to every endpoint, the console API's
// latencies, a new endpoint row's first event (gateway.go). -only gateway
// runs it alone.
//
// OUTBOX_BENCH_CPUPROFILE=DIR makes every child write a CPU profile of its
// whole life to DIR, and what it allocated as NAME.allocs.pprof (the relay
// binary: 5 s from its first event, through its pprof endpoint, and then
// what it allocated since it started, as relay-binary-NAME.allocs.pprof).
//
// Each row also gives the CPU that the private MariaDB and (Kafka rows)
// the broker spent while it ran, from /proc/PID/stat: the processes share
// the machine's cores, and the broker's CPU can bound a Kafka row's rate:
// each row's cores busy, (its own + MariaDB's + the broker's CPU per event)
// × its rate, shows when the machine's cores are the bound.
//
// It prints Markdown tables (and writes them to -out) and a PNG chart (-png);
// with -benchmarks BENCHMARKS.md it also replaces that file's section
// between the outbox-bench markers with the report (section.go).
// The relay runs with its default config except for the source, the table,
// the checkpoint file and the sinks; the exact config is in the output.
package main

import (
	"bufio"
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	_ "github.com/go-sql-driver/mysql"

	_ "github.com/outbox-relay/outbox-relay/sink/all" // every sink kind, for the configs it parses
)

func main() {
	role := flag.String("role", "", "internal: the part a child process plays")
	rows := flag.Int("rows", 200000, "backlog rows (transactions of 10)")
	flavor := flag.String("flavor", "mariadb", "-role backfill: the source's flavor, mariadb (snapshot positions) or mysql (GTID watermarks)")
	live := flag.Duration("live", 10*time.Second, "duration of each live step")
	out := flag.String("out", "bench-results.md", "write the Markdown report here too (\"\" for none)")
	png := flag.String("png", "bench-results.png", "write a PNG chart here (\"\" for none)")
	benchmarks := flag.String("benchmarks", "", "also write the report into this file (BENCHMARKS.md) as its bench section, between the outbox-bench markers, replacing the last run's")
	skipLive := flag.Bool("skip-live", false, "backlog phase only")
	liveRuns := flag.Int("live-runs", 1, "run the live phase this many times and report each latency's median and spread (min–max) over the runs")
	startupRuns := flag.Int("startup-runs", 5, "start the relay binary this many times, each with one event due, and report the median time from exec to that event and the spread")
	tracing := flag.Bool("tracing", false, "also drain the backlog to Kafka with tracing on, sampling 0 and sampling 1, alternating with tracing off (twice each); spans go over OTLP/HTTP to a receiver in this process")
	baselineRelay := flag.String("baseline-relay", "", "an outbox-relay binary built from another commit: each row that runs the relay binary (stdout into a pipe, Kafka, webhooks) runs it too, right after, on the same backlog, for a before/after pair")
	relayBin := flag.String("relay", "", "an outbox-relay binary to measure (default: go build ./cmd/outbox-relay into a temporary directory)")
	only := flag.String("only", "", "backlog rows to run besides the limit: stdout, kafka, webhook, poller, backfill, comma-separated (default: all); gateway alone runs the -endpoints rows only")
	endpoints := flag.String("endpoints", "", "gateway-scale rows: endpoint row counts, comma-separated (e.g. 1000,10000,100000), each measured with a base run of one row; default none")
	// Child flags.
	host := flag.String("host", "127.0.0.1", "internal")
	port := flag.Int("port", 0, "internal")
	start := flag.String("start", "", "internal")
	table := flag.String("table", "", "internal")
	n := flag.Int("n", 0, "internal")
	dsn := flag.String("dsn", "", "internal")
	workers := flag.Int("workers", 1, "internal")
	delay := flag.Duration("delay", 0, "internal")
	partitions := flag.Int("partitions", 6, "internal")
	blackhole := flag.Bool("blackhole", false, "internal")
	url := flag.String("url", "", "internal")
	broker := flag.String("broker", "", "internal")
	concurrency := flag.Int("concurrency", floorConcurrency, "internal")
	secret := flag.String("secret", "", "internal")
	interval := flag.Duration("interval", 100*time.Millisecond, "internal")
	flag.Parse()

	if dir := os.Getenv("OUTBOX_BENCH_CPUPROFILE"); dir != "" && *role != "" {
		// Each child writes a CPU profile of its whole life: name it by role.
		base := filepath.Join(dir, fmt.Sprintf("%s-%d", *role, os.Getpid()))
		if f, err := os.Create(base + ".pprof"); err == nil {
			_ = pprof.StartCPUProfile(f)
			defer pprof.StopCPUProfile()
		}
		// And what it allocated in its whole life (alloc_objects, alloc_space).
		defer func() {
			if f, err := os.Create(base + ".allocs.pprof"); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(f, 0)
				_ = f.Close()
			}
		}()
	}
	var err error
	switch *role {
	case "":
		err = run(*rows, *live, *liveRuns, *startupRuns, *skipLive, *tracing, *baselineRelay, *relayBin, *only, *endpoints, *out, *png, *benchmarks)
	case "broker":
		err = roleBroker(*delay, benchTopic, *partitions, *blackhole)
	case "decode":
		finish(roleDecode(*host, *port, *start, *table, *n))
	case "floor":
		finish(roleFloor(*url, *n, *concurrency, *secret))
	case "poller":
		finish(rolePoller(*dsn, *table, *workers))
	case "select":
		finish(roleSelect(*dsn, *table))
	case "backfill":
		finish(roleBackfill(*dsn, *host, *port, *table, *n, *flavor))
	case "floor-live":
		err = roleFloorLive(*host, *port, *start, *table, *broker, *url)
	case "poller-live":
		err = rolePollerLive(*dsn, *table, *url, *interval)
	default:
		err = fmt.Errorf("unknown role %q", *role)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "outbox-bench: %v\n", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

func execCommand(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, name, args...)
}

// background is a child that runs until stopped.
type background struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// startBackground starts this binary with args; ready, if set, is the
// prefix of the stdout line to wait for, whose rest is returned.
func startBackground(args []string, ready string) (*background, string, error) {
	return startBackgroundLines(args, ready, nil)
}

// startBackgroundLines is startBackground handing each stdout line after
// the ready one to line, from one goroutine.
func startBackgroundLines(args []string, ready string, line func(string)) (*background, string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(self, args...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, "", err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	b := &background{cmd: cmd, stdin: in}
	if ready == "" {
		go func() { _, _ = io.Copy(io.Discard, out) }()
		return b, "", nil
	}
	buf := make([]byte, 0, 256)
	one := make([]byte, 1)
	for {
		if _, err := out.Read(one); err != nil {
			b.stop()
			return nil, "", fmt.Errorf("%s: exited before it was ready", strings.Join(args, " "))
		}
		if one[0] != '\n' {
			buf = append(buf, one[0])
			continue
		}
		if rest, ok := strings.CutPrefix(string(buf), ready); ok {
			go func() {
				if line == nil {
					_, _ = io.Copy(io.Discard, out)
					return
				}
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					line(sc.Text())
				}
			}()
			return b, rest, nil
		}
		buf = buf[:0]
	}
}

// stop closes the child's stdin (its signal to stop) and waits for it.
func (b *background) stop() {
	_ = b.stdin.Close()
	done := make(chan struct{})
	go func() { _ = b.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = b.cmd.Process.Kill()
		<-done
	}
}

// tableReads are the server's global row-read counters: InnoDB's rows
// read (Innodb_rows_read) and each of the handler's (Handler_read_key,
// _next, _rnd_next…: index lookups, next-in-index, table scan steps).
type tableReads struct {
	innodb  int64
	handler map[string]int64 // by kind: "key", "next", "rnd_next", …
}

// readCounters reads them (zero when they cannot be read). Reading them
// counts a few handler reads of its own (SHOW STATUS fills a temporary
// table): a few hundred, against a backlog of 200,000 rows.
func readCounters(db *sql.DB) tableReads {
	out := tableReads{handler: map[string]int64{}}
	rows, err := db.Query("SHOW GLOBAL STATUS WHERE Variable_name = 'Innodb_rows_read' OR Variable_name LIKE 'Handler_read%'")
	if err != nil {
		return out
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var v int64
		if rows.Scan(&name, &v) != nil {
			continue
		}
		if name == "Innodb_rows_read" {
			out.innodb = v
		} else {
			out.handler[strings.TrimPrefix(name, "Handler_read_")] = v
		}
	}
	return out
}

func (t tableReads) since(before tableReads) tableReads {
	d := tableReads{innodb: t.innodb - before.innodb, handler: map[string]int64{}}
	for k, v := range t.handler {
		d.handler[k] = v - before.handler[k]
	}
	return d
}

// perEvent renders the handler reads per event of n: their sum, and each
// kind that read at least one per 1,000 events.
func (t tableReads) perEvent(n int) string {
	var sum int64
	var kinds []string
	for _, k := range slices.Sorted(maps.Keys(t.handler)) {
		v := t.handler[k]
		sum += v
		if v*1000 >= int64(n) {
			kinds = append(kinds, fmt.Sprintf("%s %.3f", k, float64(v)/float64(n)))
		}
	}
	return fmt.Sprintf("%.2f (%s)", float64(sum)/float64(n), strings.Join(kinds, ", "))
}

// questions reads the server's Questions counter: statements clients ran.
func questions(db *sql.DB) int64 {
	var name string
	var v int64
	_ = db.QueryRow("SHOW GLOBAL STATUS LIKE 'Questions'").Scan(&name, &v)
	return v
}
