package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/eventually"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
)

// relayProc is one relay process with its own stdout (its sink) and log.
type relayProc struct {
	cmd      *exec.Cmd
	out, log string
	exited   chan error
}

func startRelayProc(t *testing.T, bin, cfgPath, dir, name string) *relayProc {
	t.Helper()
	p := &relayProc{out: filepath.Join(dir, name+".jsonl"), log: filepath.Join(dir, name+".log"), exited: make(chan error, 1)}
	out, err := os.Create(p.out)
	if err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = startRelay(t, bin, cfgPath, out, logf)
	go func() {
		err := p.cmd.Wait()
		out.Close()
		logf.Close()
		p.exited <- err
	}()
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGCONT)
		p.cmd.Process.Kill()
	})
	return p
}

func (p *relayProc) ids(t *testing.T) []string {
	lines, _ := readLines(t, p.out)
	var out []string
	for _, l := range lines {
		out = append(out, l.ID)
	}
	return out
}

func (p *relayProc) logText() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

type cpRow struct {
	GTID    string
	Updated string
}

func checkpointRow(t *testing.T, db *sql.DB) cpRow {
	t.Helper()
	var r cpRow
	if err := db.QueryRow("SELECT gtid_set, CAST(updated_at AS CHAR) FROM outbox_relay_checkpoints WHERE name = 'out'").Scan(&r.GTID, &r.Updated); err != nil {
		t.Fatal(err)
	}
	return r
}

func fenceEpoch(db *sql.DB) (epoch uint64, holder string) {
	db.QueryRow("SELECT epoch, holder FROM outbox_relay_fence WHERE name = 'outbox_relay_checkpoints'").Scan(&epoch, &holder)
	return
}

// Two relay processes on one MySQL checkpoint store, with one config (one
// server_id, one http.listen). The active one is SIGSTOPped — a frozen
// process, as a long GC pause, a stopped VM or a cut network look to the
// checkpoint database: its lock connection goes silent, and the server drops
// it, and the lock, after checkpoint.lock_timeout (the connection's
// wait_timeout). The standby takes over. Then the old one is SIGCONTed: it
// delivers nothing more, writes no checkpoint, and exits; the standby binds
// the http address once the old one has gone.
func TestFrozenActiveRelayIsFencedAfterTakeover(t *testing.T) {
	if testing.Short() {
		t.Skip("process test skipped with -short")
	}
	bin := buildBinary(t)
	srv := testserver.Start(t, testserver.Options{ServerID: 21})
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	if _, err := db.Exec(outboxtest.Schema); err != nil {
		t.Fatal(err)
	}
	cpdb := srv.NewDatabase(t)
	cp := srv.DB(t, cpdb)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	httpAddr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "relay.yaml")
	os.WriteFile(cfgPath, []byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %s.outbox}]
checkpoint: {store: mysql, dsn: "root@tcp(127.0.0.1:%d)/%s", interval: 100ms}
sinks: [{name: out, type: stdout}]
http: {listen: "%s"}
log: {level: info}
`, srv.Port, testserver.ServerID(), dbname, srv.Port, cpdb, httpAddr)), 0o600)
	ctx := context.Background()

	active := startRelayProc(t, bin, cfgPath, dir, "active")
	var standby *relayProc
	dump := func() {
		t.Logf("active relay log:\n%s", tail([]byte(active.logText())))
		if standby != nil {
			t.Logf("standby log:\n%s", tail([]byte(standby.logText())))
		}
	}
	eventually.Within(t, 30*time.Second, "the active relay's first checkpoint", func() bool {
		var n int
		cp.QueryRow("SELECT COUNT(*) FROM outbox_relay_checkpoints WHERE name = 'out'").Scan(&n)
		return n == 1
	}, dump)
	w1 := &outboxtest.Workload{Prefix: "one-"}
	outboxtest.Produce(ctx, t, db, w1, 2, 20, []int{1, 3}, 5)
	eventually.Within(t, 30*time.Second, "the active relay's deliveries", func() bool { return len(active.ids(t)) >= w1.Events() }, dump)
	epoch1, _ := fenceEpoch(cp)

	standby = startRelayProc(t, bin, cfgPath, dir, "standby")
	eventually.Within(t, 30*time.Second, "the standby to wait for the lock", func() bool {
		return strings.Contains(standby.logText(), "taking the checkpoint lock")
	}, dump)
	if s := standby.logText(); !strings.Contains(s, "http.listen is in use") {
		t.Fatalf("the standby did not wait for its http address:\n%s", s)
	}
	time.Sleep(500 * time.Millisecond)
	if n := len(standby.ids(t)); n != 0 {
		t.Fatalf("the standby delivered %d events while the active relay ran", n)
	}

	if err := active.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	deliveredBefore := len(active.ids(t))
	w2 := &outboxtest.Workload{Prefix: "two-"}
	outboxtest.Produce(ctx, t, db, w2, 2, 20, []int{1, 3}, 5)

	var tookLock, firstDelivery time.Duration
	eventually.Within(t, 60*time.Second, "the standby to take the lock", func() bool {
		e, _ := fenceEpoch(cp)
		if e > epoch1 {
			tookLock = time.Since(frozen)
			return true
		}
		return false
	}, dump)
	eventually.Within(t, 30*time.Second, "the standby's first delivery", func() bool {
		if len(standby.ids(t)) > 0 {
			firstDelivery = time.Since(frozen)
			return true
		}
		return false
	}, dump)
	eventually.Within(t, 30*time.Second, "the standby to deliver what was committed while the active relay was frozen", func() bool {
		return countIn(standby.ids(t), "two-") >= w2.Events()
	}, dump)
	t.Logf("takeover with checkpoint.lock_timeout 10s: the standby took the lock %s after the active relay froze, and delivered %s after it",
		tookLock.Round(10*time.Millisecond), firstDelivery.Round(10*time.Millisecond))

	// Freeze the new active relay too, for less than its lease, so that any
	// checkpoint write from now on can only come from the old one, or be
	// one the new relay sent before it stopped: a save it had on the wire
	// when the signal came commits without it. The server's general log
	// tells them apart: a statement logged from now on from one of the
	// frozen relay's connections was sent before it stopped.
	if _, err := cp.Exec("SET GLOBAL log_output = 'TABLE', GLOBAL general_log = 1"); err != nil {
		t.Fatal(err)
	}
	if err := standby.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	eventually.Within(t, 10*time.Second, "every thread of the new active relay to stop", func() bool { return stopped(t, standby.cmd.Process.Pid) }, dump)
	standbyPorts := clientPorts(t, standby.cmd.Process.Pid)
	var logFrom string
	if err := cp.QueryRow("SELECT CAST(NOW(6) AS CHAR)").Scan(&logFrom); err != nil {
		t.Fatal(err)
	}
	before := checkpointRow(t, cp)
	epoch2, holder2 := fenceEpoch(cp)
	if err := active.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var exitErr error
	select {
	case exitErr = <-active.exited:
	case <-time.After(5 * time.Second):
		standby.cmd.Process.Signal(syscall.SIGCONT)
		t.Fatalf("the old active relay kept running after it was resumed:\n%s", tail([]byte(active.logText())))
	}
	after := checkpointRow(t, cp)
	epochAfter, holderAfter := fenceEpoch(cp)
	inFlight, others := writesSince(t, cp, cpdb, logFrom, standbyPorts)
	if err := standby.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Exec("SET GLOBAL general_log = 0"); err != nil {
		t.Fatal(err)
	}
	changed := after != before || epochAfter != epoch2 || holderAfter != holder2
	switch {
	case len(others) > 0:
		t.Errorf("the resumed old relay wrote: checkpoint %+v -> %+v, fencing epoch %d (%s) -> %d (%s); statements:\n%s",
			before, after, epoch2, holder2, epochAfter, holderAfter, strings.Join(others, "\n"))
	case changed && len(inFlight) == 0:
		t.Errorf("the checkpoint store changed while both relays' writes were accounted for: checkpoint %+v -> %+v, fencing epoch %d (%s) -> %d (%s)",
			before, after, epoch2, holder2, epochAfter, holderAfter)
	case changed:
		t.Logf("the new active relay's save sent before it stopped committed meanwhile: checkpoint %+v -> %+v; its statements:\n%s",
			before, after, strings.Join(inFlight, "\n"))
	}
	var ee *exec.ExitError
	if !errors.As(exitErr, &ee) || !strings.Contains(active.logText(), "lost the checkpoint lock") {
		t.Errorf("the old relay exited with %v, want an error saying it lost the lock; log:\n%s", exitErr, tail([]byte(active.logText())))
	}
	if strings.Contains(active.logText(), "checkpoint saved") {
		t.Errorf("the old relay saved a final checkpoint:\n%s", tail([]byte(active.logText())))
	}

	// The new active relay goes on, and serves its health once the old
	// one's http address is free.
	w3 := &outboxtest.Workload{Prefix: "three-"}
	outboxtest.Produce(ctx, t, db, w3, 2, 20, []int{1, 3}, 5)
	eventually.Within(t, 30*time.Second, "the new active relay's deliveries", func() bool { return countIn(standby.ids(t), "three-") >= w3.Events() }, dump)
	eventually.Within(t, 10*time.Second, "the new active relay's /healthz", func() bool {
		resp, err := http.Get("http://" + httpAddr + "/healthz")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return strings.TrimSpace(string(b)) == "ok"
	}, dump)

	if n := len(active.ids(t)); n != deliveredBefore {
		t.Errorf("the old relay delivered %d events after it was frozen (%d before)", n-deliveredBefore, deliveredBefore)
	}
	for _, id := range active.ids(t) {
		if !strings.HasPrefix(id, "one-") {
			t.Errorf("the old relay delivered %s, committed after it was frozen", id)
		}
	}
	all := append(active.ids(t), standby.ids(t)...)
	for _, w := range []*outboxtest.Workload{w1, w2, w3} {
		if got := countIn(all, w.Prefix); got < w.Events() {
			t.Errorf("%s: %d of %d events delivered", w.Prefix, got, w.Events())
		}
	}
	standby.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-standby.exited; err != nil {
		t.Errorf("the new active relay exited with %v after SIGTERM", err)
	}
	if t.Failed() || os.Getenv("FENCE_DUMP") != "" {
		t.Logf("old active relay log:\n%s\nstandby log:\n%s", tail([]byte(active.logText())), tail([]byte(standby.logText())))
	}
}

// countIn counts the distinct ids with prefix.
func countIn(ids []string, prefix string) int {
	seen := map[string]bool{}
	for _, id := range ids {
		if strings.HasPrefix(id, prefix) {
			seen[id] = true
		}
	}
	return len(seen)
}

// stopped reports whether every thread of process pid is stopped by a
// signal (state T in /proc/<pid>/task/<tid>/stat): from then on it sends
// nothing.
func stopped(t *testing.T, pid int) bool {
	t.Helper()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			return false // a thread that just ended
		}
		// pid (comm) state ...: comm may hold spaces and parentheses.
		rest := string(b[bytes.LastIndexByte(b, ')')+1:])
		if f := strings.Fields(rest); len(f) == 0 || (f[0] != "T" && f[0] != "t") {
			return false
		}
	}
	return true
}

// clientPorts returns the local ports of process pid's TCP sockets (its
// connections to the server, seen there as host 127.0.0.1:port).
func clientPorts(t *testing.T, pid int) map[string]bool {
	t.Helper()
	ports, err := testserver.ClientPorts(pid, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(ports) == 0 {
		t.Fatalf("process %d has no TCP connection", pid)
	}
	return ports
}

// writesSince returns the statements the server's general log holds from
// time from on that write the checkpoint or fencing table or end a
// transaction, but those of connections open on another database than
// cpdb (the test's workload): inFlight those of the connections from ports
// (a relay frozen since from: sent before it stopped), others the rest,
// closed connections included.
func writesSince(t *testing.T, db *sql.DB, cpdb, from string, ports map[string]bool) (inFlight, others []string) {
	t.Helper()
	rows, err := db.Query("SELECT CAST(l.event_time AS CHAR), l.thread_id, COALESCE(p.HOST, ''), l.command_type, CONVERT(l.argument USING utf8mb4) "+
		"FROM mysql.general_log l LEFT JOIN information_schema.PROCESSLIST p ON p.ID = l.thread_id "+
		"WHERE l.event_time >= ? AND l.command_type IN ('Query', 'Execute') AND (p.DB IS NULL OR p.DB = ?) ORDER BY l.event_time", from, cpdb)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var at, host, cmd, arg string
		var thread uint64
		if err := rows.Scan(&at, &thread, &host, &cmd, &arg); err != nil {
			t.Fatal(err)
		}
		q := strings.ToUpper(strings.TrimSpace(arg))
		writes := strings.HasPrefix(q, "COMMIT") ||
			((strings.HasPrefix(q, "INSERT") || strings.HasPrefix(q, "UPDATE") || strings.HasPrefix(q, "DELETE") || strings.HasPrefix(q, "REPLACE")) &&
				(strings.Contains(q, "OUTBOX_RELAY_CHECKPOINTS") || strings.Contains(q, "OUTBOX_RELAY_FENCE")))
		if !writes {
			continue
		}
		line := fmt.Sprintf("%s thread %d (%s) %s: %.200s", at, thread, host, cmd, arg)
		if _, port, ok := strings.Cut(host, ":"); ok && ports[port] {
			inFlight = append(inFlight, line)
		} else {
			others = append(others, line)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return inFlight, others
}
