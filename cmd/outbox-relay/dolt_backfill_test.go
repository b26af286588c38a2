package main

import (
	"context"
	"fmt"
	"io"
	"os"
	osexec "os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/relay"
)

// A relay killed with SIGKILL in the middle of a new sink's backfill on
// Dolt (MySQL's flavor: chunks read between gtid_executed watermarks)
// resumes it after the last chunk it saved: every row arrives, and the
// second run sends none of the rows up to the cursor the killed one saved. The sink
// (stdout) stops taking lines after the first 16 KiB, so the relay is
// killed mid-backfill whatever the machine's speed.
func TestDoltBackfillResumesAfterSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("crash run skipped with -short")
	}
	s := sharedDolt(t)
	bin := buildBinary(t)
	dbname := doltOutbox(t, s)
	w := &outboxtest.Workload{NetChange: true, Retained: true}
	outboxtest.Produce(context.Background(), t, s.DB(t, dbname), w, 1, 300, []int{1, 3, 5, 2}, 8)
	dir := t.TempDir()
	cpPath := filepath.Join(dir, "checkpoints.json")
	cfgPath := writeFile(t, "relay.yaml", fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: 31, heartbeat: 5s, read_timeout: 45s, max_reconnect_backoff: 500ms}
tables: [{name: %s.outbox}]
checkpoint: {path: %s, interval: 100ms, start: current}
delivery: {batch_size: 20}
sinks: [{name: out, type: stdout, start: {backfill: true, chunk_size: 5}}]
log: {level: warn}
`, s.Port, dbname, cpPath))
	logPath := filepath.Join(dir, "relay.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	defer func() {
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("relay log:\n%s", tail(b))
		}
	}()
	cursor := func() *event.TableCursor {
		st, err := checkpoint.OpenFileReadOnly(cpPath)
		if err != nil {
			return nil
		}
		cp, err := st.Load(context.Background(), relay.BackfillKey("out", dbname+".outbox"))
		if err != nil {
			return nil
		}
		return cp.Position.Table
	}
	run := func(name string, pass int) (*relayRun, string) {
		path := filepath.Join(dir, name+".jsonl")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		gate := &stallingWriter{w: f, left: pass, release: make(chan struct{}), stalled: make(chan struct{})}
		return &relayRun{cmd: startRelay(t, bin, cfgPath, gate, logf), gate: gate}, path
	}
	first, firstPath := run("first", 16<<10)
	select {
	case <-first.gate.stalled:
	case <-time.After(2 * time.Minute):
		t.Fatal("the relay wrote less than 16 KiB within 2 minutes")
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if c := cursor(); c != nil && len(c.Key) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the backfill saved no chunk within 2 minutes")
		}
	}
	if c := cursor(); c.Done {
		t.Fatalf("the backfill was done (%v) though its sink took only 16 KiB", c)
	}
	_ = first.cmd.Process.Kill()
	first.gate.open()
	_ = first.cmd.Wait()
	sentFirst, _ := readLines(t, firstPath)
	// The rows up to the cursor the killed relay saved are acknowledged:
	// the restart sends none of them again.
	saved := cursor()
	acked := map[string]bool{}
	rows, err := s.DB(t, dbname).Query("SELECT id FROM outbox WHERE seq <= ?", saved.Key[0])
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		acked[id] = true
	}
	rows.Close()

	second, secondPath := run("second", 1<<30)
	want := append(outboxIDs(w), probe)
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		lines, _ := readLines(t, secondPath)
		seen := map[string]bool{}
		for _, l := range append(sentFirst, lines...) {
			seen[l.ID] = true
		}
		missing := 0
		for _, id := range want {
			if !seen[id] {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d rows not sent across the SIGKILL", missing, len(want))
		}
	}
	_ = second.cmd.Process.Signal(syscall.SIGTERM)
	if err := second.cmd.Wait(); err != nil {
		t.Errorf("relay exited with %v after SIGTERM", err)
	}
	sentSecond, _ := readLines(t, secondPath)
	inFirst := map[string]bool{}
	for _, l := range sentFirst {
		inFirst[l.ID] = true
	}
	again, ackedAgain := 0, 0
	for _, l := range sentSecond {
		if inFirst[l.ID] {
			again++
		}
		if acked[l.ID] {
			ackedAgain++
		}
	}
	t.Logf("%d rows: %d sent before the SIGKILL (%d up to the cursor saved, key %v), %d after the restart, %d of them again", len(want), len(inFirst), len(acked), saved.Key, len(sentSecond), again)
	if len(acked) == 0 || ackedAgain > 0 {
		t.Errorf("the restart sent again %d of the %d rows up to the saved cursor: it did not resume after the last chunk saved", ackedAgain, len(acked))
	}
}

// relayRun is a relay process and the writer that takes its stdout.
type relayRun struct {
	cmd  *osexec.Cmd
	gate *stallingWriter
}

// stallingWriter passes the first left bytes to w; later writes close
// stalled and wait until open is called.
type stallingWriter struct {
	w                io.Writer
	mu               sync.Mutex
	left             int
	release, stalled chan struct{}
	once, stall      sync.Once
}

func (g *stallingWriter) Write(p []byte) (int, error) {
	g.mu.Lock()
	pass := g.left > 0
	g.left -= len(p)
	g.mu.Unlock()
	if !pass {
		g.stall.Do(func() { close(g.stalled) })
		<-g.release
	}
	return g.w.Write(p)
}

func (g *stallingWriter) open() { g.once.Do(func() { close(g.release) }) }
