package relay_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/event/jsonline"
	"github.com/outbox-relay/outbox-relay/internal/eventually"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/replay"
	"github.com/outbox-relay/outbox-relay/source"
)

// A replay to a stdout sink, through a real pipe, while single-row
// inserts go on: the replay's batches (hundreds of KB, many times the
// writer's buffer) and the live stream's lines share the one stdout, and
// every line a reader gets is one whole event. (The replay had a stdout
// writer of its own: its batches were flushed in 64 KiB pieces cut
// mid-line, with live lines between them.)
func TestAReplayToAStdoutSinkNeverTearsTheLiveStream(t *testing.T) {
	dbname, _ := newOutbox(t)
	db := srv.DB(t, dbname)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	var mu sync.Mutex
	var bad []string
	live, replayed := map[string]bool{}, map[string]bool{}
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(pr)
		sc.Buffer(nil, 1<<24)
		for sc.Scan() {
			var l jsonline.Line
			mu.Lock()
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				bad = append(bad, fmt.Sprintf("%.100s", sc.Text()))
			} else if l.Headers[event.HeaderReplay] != "" {
				replayed[l.ID] = true
			} else {
				live[l.ID] = true
			}
			mu.Unlock()
		}
	}()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %s.outbox}]
checkpoint: {path: %s, interval: 200ms, start: current}
replay: {poll: 100ms}
sinks: [{name: out, type: stdout}]
`, srv.Port, testserver.ServerID(), dbname, filepath.Join(t.TempDir(), "cp.json"))))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- relay.New(cfg, relay.Options{Stdout: pw, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}).Run(ctx)
	}()
	waitForCheckpoint(t, cfg.Checkpoint.Path)
	info, err := source.ReadInfo(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	from, err := source.CurrentPosition(ctx, db, info)
	if err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("x", 1000)
	inserted := 0
	insert := func(rows int) error {
		q := "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES " + strings.TrimSuffix(strings.Repeat("(?, 'order', ?, 'order.created', ?),", rows), ",")
		var args []any
		for range rows {
			inserted++
			args = append(args, fmt.Sprintf("e%06d", inserted), fmt.Sprintf("agg-%d", inserted%50), fmt.Sprintf(`{"pad": %q}`, pad))
		}
		_, err := db.Exec(q, args...)
		return err
	}
	for range 40 { // the window: 4,000 events of about 1 KB
		if err := insert(100); err != nil {
			t.Fatal(err)
		}
	}
	windowEnd := inserted
	until, err := source.CurrentPosition(ctx, db, info)
	if err != nil {
		t.Fatal(err)
	}
	job := replayJob("out", from, until)
	if err := replay.SpoolFor(cfg.Checkpoint.Path).Put(replay.Request{Job: &job}); err != nil {
		t.Fatal(err)
	}
	// Single-row inserts go on until the replay is done.
	stop, produced := make(chan struct{}), make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				produced <- nil
				return
			default:
			}
			if err := insert(1); err != nil {
				produced <- err
				return
			}
		}
	}()
	eventually.Within(t, 90*time.Second, "the replay to be done", func() bool { return jobOf(t, cfg.Checkpoint.Path, job.ID).State == replay.Done })
	close(stop)
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	eventually.Within(t, 90*time.Second, "every event read, live and replayed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(live) >= inserted && len(replayed) >= windowEnd || len(bad) > 0
	})
	cancel()
	if err := <-done; err != nil && err != context.Canceled {
		t.Fatalf("relay: %v", err)
	}
	pw.Close()
	<-read
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d live events, %d replayed, %d lines that are not JSON", len(live), len(replayed), len(bad))
	if len(bad) > 0 {
		t.Fatalf("%d lines torn, such as:\n%s", len(bad), strings.Join(bad[:min(len(bad), 3)], "\n"))
	}
	if len(live) != inserted || len(replayed) != windowEnd {
		t.Fatalf("%d of %d events live, %d of the window's %d replayed", len(live), inserted, len(replayed), windowEnd)
	}
}
