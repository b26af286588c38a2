package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/event/jsonline"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
)

// buildBinary builds the command once per test binary run.
func buildBinary(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "outbox-relay")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// The crash run of the core issue: the relay, as its own process, is killed
// with SIGKILL at random moments while producers keep committing, and
// restarted each time. In the end every committed event was delivered at
// least once, nothing rolled back was, and per aggregate the first
// deliveries are in commit order.
func TestCrashRunSIGKILLLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("crash run skipped with -short")
	}
	bin := buildBinary(t)
	srv := testserver.Start(t, testserver.Options{ServerID: 7})
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	if _, err := db.Exec(outboxtest.Schema); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "relay.yaml")
	outPath := filepath.Join(dir, "events.jsonl")
	cpPath := filepath.Join(dir, "checkpoints.json")
	cfg := fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %s.outbox}]
checkpoint: {path: %s, interval: 100ms}
delivery: {batch_size: 100}
sinks: [{name: out, type: stdout}]
log: {level: warn}
`, srv.Port, testserver.ServerID(), dbname, cpPath)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := os.OpenFile(outPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	logf, _ := os.Create(filepath.Join(dir, "relay.log"))
	defer logf.Close()
	start := func() *exec.Cmd { return startRelay(t, bin, cfgPath, out, logf) }
	cmd := start()
	waitForFile(t, cpPath, 30*time.Second) // the first checkpoint fixes the start position

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopProducing := make(chan struct{})
	w := &outboxtest.Workload{Until: stopProducing}
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		outboxtest.Produce(ctx, t, db, w, 4, 100000, []int{1, 3, 8, 2, 6}, 40)
	}()

	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	kills, killsWhileProducing := 0, 0
	for kills < 6 { // producers commit until the last kill
		time.Sleep(time.Duration(200+r.IntN(700)) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		kills++
		if !closed(produced) {
			killsWhileProducing++
		}
		cmd = start()
	}
	close(stopProducing)
	<-produced
	total := w.Events()

	// Let the last relay catch up, then stop it gracefully.
	deadline := time.Now().Add(90 * time.Second)
	for {
		if n := countUnique(t, outPath); n >= total {
			break
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "relay.log"))
		t.Errorf("relay exited with %v after SIGTERM; log:\n%s", err, tail(log))
	}

	lines, torn := readLines(t, outPath)
	var delivered []outboxtest.Delivered
	for _, l := range lines {
		delivered = append(delivered, outboxtest.Delivered{ID: l.ID, AggregateID: l.AggregateID, GTID: l.GTID})
	}
	rep := outboxtest.Check(t, w, delivered, false)
	if killsWhileProducing < 5 {
		t.Errorf("only %d of the SIGKILLs came while producers were committing; want at least 5", killsWhileProducing)
	}
	t.Logf("crash run: %d SIGKILLs (%d while producing), %d committed events, %d deliveries, %d unique, %d duplicates, %d torn lines",
		kills, killsWhileProducing, rep.Committed, rep.Delivered, rep.Unique, rep.Duplicates, torn)
	if t.Failed() {
		log, _ := os.ReadFile(filepath.Join(dir, "relay.log"))
		t.Logf("relay log:\n%s", tail(log))
	}
}

func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func readLines(t *testing.T, path string) (out []jsonline.Line, torn int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var l jsonline.Line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			torn++ // a line cut by SIGKILL mid-write: that event was never acknowledged
			continue
		}
		out = append(out, l)
	}
	return out, torn
}

func countUnique(t *testing.T, path string) int {
	lines, _ := readLines(t, path)
	seen := map[string]bool{}
	for _, l := range lines {
		seen[l.ID] = true
	}
	return len(seen)
}

func tail(b []byte) string {
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}
