package relay_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event/jsonline"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/relaytest"
)

var srv *testserver.Server

func TestMain(m *testing.M) { testserver.Main(m, testserver.Options{ServerID: 1}, &srv) }

// lines is a concurrency-safe writer that splits JSON lines.
type lines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// String is everything written, for logs captured in a lines.
func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *lines) events(t *testing.T) []jsonline.Line {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []jsonline.Line
	sc := bufio.NewScanner(bytes.NewReader(l.buf.Bytes()))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e jsonline.Line
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("stdout sink wrote a line that is not JSON: %q: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	return out
}

func testConfig(t *testing.T, dbname string) *config.Config {
	t.Helper()
	yaml := fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %s.outbox}]
checkpoint: {path: %s, interval: 200ms, start: current}
delivery: {batch_size: 200}
sinks: [{name: out, type: stdout}]
`, srv.Port, testserver.ServerID(), dbname, filepath.Join(t.TempDir(), "cp.json"))
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// The clean run of the core issue: 4 producers, 10,000 events in 1,000
// committed transactions (multi-row, single-row, insert-then-delete), with
// rolled-back transactions and other tables' writes between them. Every
// committed event arrives exactly once, in commit order.
func TestCleanRunDeliversEveryCommittedEventExactlyOnceInCommitOrder(t *testing.T) {
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	if _, err := db.Exec(outboxtest.Schema); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, dbname)
	out := &lines{}
	ctx := context.Background()
	rl := startRelay(t, cfg, relay.Options{Stdout: out, Logger: relaytest.Stderr(slog.LevelWarn)})
	waitForCheckpoint(t, cfg.Checkpoint.Path)

	w := &outboxtest.Workload{}
	// sizes average 10 events: 250 transactions per producer × 4 = 1,000.
	outboxtest.Produce(ctx, t, db, w, 4, 250, []int{1, 19, 5, 15, 10}, 50)
	if got := w.Events(); got != 10000 {
		t.Fatalf("workload committed %d events, want 10000", got)
	}

	deadline := time.Now().Add(60 * time.Second)
	for len(out.events(t)) < 10000 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if err := rl.stop(t); err != nil {
		t.Fatalf("relay: %v", err)
	}
	got := out.events(t)
	var delivered []outboxtest.Delivered
	for _, e := range got {
		delivered = append(delivered, outboxtest.Delivered{ID: e.ID, AggregateID: e.AggregateID, GTID: e.GTID})
	}
	rep := outboxtest.Check(t, w, delivered, true)
	t.Logf("committed %d, delivered %d, duplicates %d", rep.Committed, rep.Delivered, rep.Duplicates)

	// Payloads are the bytes the application wrote.
	for _, e := range got[:50] {
		var p struct {
			ID string `json:"id"`
			N  int    `json:"n"`
		}
		if err := json.Unmarshal(e.Payload, &p); err != nil || p.ID != e.ID {
			t.Fatalf("payload of %s = %s", e.ID, e.Payload)
		}
		if want := outboxtest.Payload(e.ID, p.N); compact(t, want) != string(e.Payload) {
			t.Fatalf("payload of %s = %s, want %s", e.ID, e.Payload, want)
		}
	}

	// The saved checkpoint is at or past the last event's transaction.
	st, err := checkpoint.OpenFile(cfg.Checkpoint.Path)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := st.Load(context.Background(), "out")
	if err != nil {
		t.Fatal(err)
	}
	if cp.Flavor != "mariadb" || cp.Position.GTIDSet == "" || cp.Position.File == "" {
		t.Fatalf("checkpoint %+v lacks flavor, GTID set or file", cp)
	}
	var lastSeq, cpSeq int
	fmt.Sscanf(got[len(got)-1].GTID, "0-1-%d", &lastSeq)
	fmt.Sscanf(cp.Position.GTIDSet, "0-1-%d", &cpSeq)
	if cpSeq < lastSeq {
		t.Fatalf("checkpoint %s is before the last delivered transaction %s", cp.Position.GTIDSet, got[len(got)-1].GTID)
	}
}

func compact(t *testing.T, s string) string {
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func waitForCheckpoint(t testing.TB, path string) {
	t.Helper()
	// The relay saves its first checkpoint once the heartbeat or a
	// transaction moves it; until the reader is connected, writes would be
	// before its start position. Wait until the file exists.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("relay wrote no checkpoint to %s", path)
}

// A graceful stop (context cancelled, as on SIGTERM) drains and saves the
// checkpoint: the next run resumes exactly after the last delivered event,
// with no duplicate and no gap, including what was committed while stopped.
func TestGracefulStopResumesWithoutDuplicates(t *testing.T) {
	dbname := srv.NewDatabase(t)
	db := srv.DB(t, dbname)
	if _, err := db.Exec(outboxtest.Schema); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, dbname)
	cfg.Checkpoint.Interval = time.Hour // only the save at shutdown counts
	out := &lines{}
	run := func(produce func()) {
		rl := startRelay(t, cfg, relay.Options{Stdout: out})
		waitForCheckpoint(t, cfg.Checkpoint.Path)
		produce()
		if err := rl.stop(t); err != nil {
			t.Fatal(err)
		}
	}
	w := &outboxtest.Workload{}
	run(func() {
		outboxtest.Produce(context.Background(), t, db, w, 2, 50, []int{3}, 10)
		for deadline := time.Now().Add(20 * time.Second); len(out.events(t)) < w.Events() && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
		}
	})
	// Committed while the relay is stopped.
	w2 := &outboxtest.Workload{Prefix: "offline-"}
	outboxtest.Produce(context.Background(), t, db, w2, 1, 20, []int{2}, 10)
	run(func() {
		for deadline := time.Now().Add(20 * time.Second); len(out.events(t)) < w.Events()+w2.Events() && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
		}
	})
	seen := map[string]int{}
	for _, e := range out.events(t) {
		seen[e.ID]++
	}
	for id, n := range seen {
		if n > 1 {
			t.Errorf("event %s delivered %d times across a graceful restart", id, n)
		}
	}
	if len(seen) != w.Events()+w2.Events() {
		t.Errorf("delivered %d distinct events, want %d", len(seen), w.Events()+w2.Events())
	}
}
