package main

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/source"
)

// The startup rows: the relay binary with a quickstart-sized config (one
// outbox table, the stdout sink into a pipe the bench reads, a file
// checkpoint, the metrics listener), started with checkpoint.start just
// before one committed event, timed from exec to the bench reading that
// event's line from the pipe. Every check the relay makes before it streams
// (the source's settings, the table, the grants, the checkpoint and its
// lock, the server_id guard) is inside that time.
//
// Two rows: against the backlog's table (-rows rows, its created_at not
// indexed, the binlog file holding the backlog), and quickstart-sized: a
// fresh table of the same shape in a fresh binlog file (FLUSH BINARY LOGS),
// which the target judges. The first shows what a big table and a big
// binlog file add to a start (the outbox-growth check's MIN(created_at),
// the server finding the start GTID in its binlog file).

// startupTarget is the bar for the time from exec to the first event.
const startupTarget = 100 * time.Millisecond

// startupResult is every start's time from exec to the first event.
type startupResult struct {
	what   string // the row's name
	target bool   // the row the target judges
	runs   []time.Duration
	config string // the last run's config
	err    error
}

// measureStartup starts bin n times, each after committing one event, and
// returns the time from exec to that event's line.
func measureStartup(ctx context.Context, bin string, srv *testserver.Server, db *sql.DB, info source.ServerInfo, tmp string, serverID *int, n int, table string) startupResult {
	var res startupResult
	for k := range n {
		fmt.Fprintf(os.Stderr, "startup: %s, run %d of %d…\n", table, k+1, n)
		d, cfg, err := startOnce(ctx, bin, srv, db, info, tmp, serverID, k, table)
		res.config = cfg
		if err != nil {
			res.err = fmt.Errorf("startup run %d: %w", k+1, err)
			return res
		}
		res.runs = append(res.runs, d)
	}
	return res
}

func startOnce(ctx context.Context, bin string, srv *testserver.Server, db *sql.DB, info source.ServerInfo, tmp string, serverID *int, k int, table string) (time.Duration, string, error) {
	pos, err := source.CurrentPosition(ctx, db, info)
	if err != nil {
		return 0, "", err
	}
	marker := fmt.Sprintf("startup-%d-%d", k, time.Now().UnixNano())
	if _, err := db.ExecContext(ctx, `INSERT INTO `+table+` (aggregatetype, aggregateid, type, payload) VALUES ('order', 'ord-startup', 'order.created', ?)`,
		fmt.Sprintf(`{"order_id": %q, "amount": 1, "currency": "EUR", "note": "a typical small payload"}`, marker)); err != nil {
		return 0, "", err
	}
	*serverID++
	listen := freeAddr()
	cfg := fmt.Sprintf(`source: {host: %s, port: %d, user: root, server_id: %d}
tables: [{name: %s}]
checkpoint: {path: %s/startup-%d.json, start: "gtid:%s"}
sinks: [{name: console, type: stdout}]
http: {listen: %q}
`, srv.Host, srv.Port, *serverID, table, tmp, *serverID, pos.GTIDSet, listen)
	name := fmt.Sprintf("startup-%d", *serverID)
	args, err := relayArgs(tmp, name, cfg)
	if err != nil {
		return 0, cfg, err
	}
	logPath := filepath.Join(tmp, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return 0, cfg, err
	}
	defer logFile.Close()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stderr = logFile
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, cfg, err
	}
	lines := make(chan string, 1)
	began := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, cfg, err
	}
	go func() {
		defer close(lines)
		r := bufio.NewReader(out)
		line, err := r.ReadString('\n')
		if err == nil {
			lines <- line
		}
		_, _ = r.WriteTo(discard{})
	}()
	var took time.Duration
	var first string
	select {
	case l, ok := <-lines:
		took = time.Since(began)
		if !ok {
			err = fmt.Errorf("the relay exited before its first event")
		}
		first = l
	case <-time.After(30 * time.Second):
		err = fmt.Errorf("no event within 30 s")
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
	if err == nil && !strings.Contains(first, marker) {
		err = fmt.Errorf("the first line is not the event committed before the start (%s): %.200s", marker, first)
	}
	if err != nil {
		if b, rerr := os.ReadFile(logPath); rerr == nil {
			fmt.Fprintf(os.Stderr, "the relay's log ends:\n%s\n", b[max(0, len(b)-4096):])
		}
		return 0, cfg, err
	}
	return took, cfg, nil
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// spread is the median, the least and the greatest of ds (zeros when
// empty); the median of an even count is the mean of the middle two.
func spread(ds []time.Duration) (median, lo, hi time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	m := len(s) / 2
	median = s[m]
	if len(s)%2 == 0 {
		median = (s[m-1] + s[m]) / 2
	}
	return median, s[0], s[len(s)-1]
}

// startupTable is the startup rows' table: per row the median time from
// exec to the first event, its spread and every run, in ms.
func startupTable(rs []startupResult) string {
	var b strings.Builder
	b.WriteString("### Startup: the relay binary, quickstart-sized config, from exec to the first event read from its stdout pipe (ms)\n\n")
	b.WriteString("| outbox table | starts | median | min–max | each, in order |\n|---|---:|---:|---:|---|\n")
	for _, r := range rs {
		if r.err != nil {
			fmt.Fprintf(&b, "| %s | failed: %v | | | |\n", r.what, r.err)
			continue
		}
		med, lo, hi := spread(r.runs)
		each := make([]string, len(r.runs))
		for i, d := range r.runs {
			each[i] = ms(d)
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s–%s | %s |\n", r.what, len(r.runs), ms(med), ms(lo), ms(hi), strings.Join(each, ", "))
	}
	return b.String()
}

// startupLine is the startup target's line, judged on the target row ("" when
// not measured).
func startupLine(rs []startupResult) string {
	i := slices.IndexFunc(rs, func(r startupResult) bool { return r.target })
	if i < 0 || len(rs[i].runs) == 0 {
		return ""
	}
	r := rs[i]
	med, lo, hi := spread(r.runs)
	return fmt.Sprintf("startup to the first event delivered, quickstart-sized config, every check made ≤ %d ms: median %s ms of %d starts (%s–%s) — %s",
		startupTarget.Milliseconds(), ms(med), len(r.runs), ms(lo), ms(hi), met(med <= startupTarget))
}
