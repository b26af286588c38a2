package main

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/poller"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
)

// pollerSchema is the articles' (the seeds') polling outbox table
// (poller.Schema), with 'relayed' added to its status ENUM for the relay's
// claim.
var pollerSchema = strings.Replace(fmt.Sprintf(poller.Schema, "outbox"), "'failed')", "'failed','relayed')", 1)

// The exactly-once switch-over of issue 30: the articles' SKIP LOCKED poller
// publishes under continuous inserts; the relay (the built binary) starts
// mid-stream with a backfill of the pending rows and tables[].switch_over;
// once both have sent events, the poller stops between two of its batches,
// at a random moment; inserts go on, then stop. Every inserted id is in the
// poller's published log or the Kafka topic (kfake), once across the two.
func TestSwitchOverFromPollerExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("switch-over run skipped with -short")
	}
	srv := testserver.Start(t, testserver.Options{ServerID: 33})
	switchOverFromPoller(t, switchOverSource{srv.Port, srv.DSN, srv.NewDatabase, srv.DB, ""})
}

// The same switch-over on Dolt, MySQL's flavor: the backfill reads its
// chunks between gtid_executed watermarks. Dolt takes no row locks (FOR
// UPDATE SKIP LOCKED skips nothing): the poller's claim and the relay's
// conflict at commit instead (error 1213, which each retries), and a row
// still has one owner.
func TestDoltSwitchOverFromPollerExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("switch-over run skipped with -short")
	}
	srv := sharedDolt(t)
	// Dolt heartbeats every 30 s whatever is asked (doltConfig).
	switchOverFromPoller(t, switchOverSource{srv.Port, srv.DSN, srv.NewDatabase, srv.DB, ", read_timeout: 45s, max_reconnect_backoff: 500ms"})
}

// switchOverSource is the server a switch-over test runs on, and the
// source options the relay needs there.
type switchOverSource struct {
	port        int
	dsn         func(string) string
	newDatabase func(testing.TB) string
	db          func(testing.TB, string) *sql.DB
	options     string // appended to the relay's source: {...}
}

func switchOverFromPoller(t *testing.T, srv switchOverSource) {
	bin := buildBinary(t)
	dbname := srv.newDatabase(t)
	db := srv.db(t, dbname)
	if _, err := db.Exec(pollerSchema); err != nil {
		t.Fatal(err)
	}
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	brokers := kc.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	var (
		sinkMu sync.Mutex
		atSink []string // event ids, in topic order
	)
	read := func() []string { sinkMu.Lock(); defer sinkMu.Unlock(); return slices.Clone(atSink) }
	consumed := make(chan struct{})
	consumeCtx, stopConsuming := context.WithCancel(context.Background())
	go func() {
		defer close(consumed)
		for consumeCtx.Err() == nil {
			cl.PollFetches(consumeCtx).EachRecord(func(rec *kgo.Record) {
				for _, h := range rec.Headers {
					if h.Key == "id" {
						sinkMu.Lock()
						atSink = append(atSink, string(h.Value))
						sinkMu.Unlock()
					}
				}
			})
		}
	}()
	defer func() { stopConsuming(); <-consumed }()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Producers: single-row inserts from 2 connections, until told. A
	// deadlock is retried, as an application does.
	var (
		insMu     sync.Mutex
		inserted  []int64
		deadlocks atomic.Int64
	)
	stopInserts := make(chan struct{})
	var producers sync.WaitGroup
	for w := range 2 {
		producers.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stopInserts:
					return
				default:
				}
				res, err := db.ExecContext(ctx, `INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ('order', ?, 'order.created', '{}')`,
					fmt.Sprintf("a%d-%d", w, n%5))
				if poller.Deadlock(err) {
					deadlocks.Add(1)
					continue
				}
				if err != nil {
					t.Errorf("insert: %v", err)
					return
				}
				id, _ := res.LastInsertId()
				insMu.Lock()
				inserted = append(inserted, id)
				insMu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		})
	}

	// The poller, publishing to its own log.
	var (
		pubMu     sync.Mutex
		published []int64
		stopPoll  atomic.Bool
	)
	pubCount := func() int { pubMu.Lock(); defer pubMu.Unlock(); return len(published) }
	pollDB, err := sql.Open("mysql", srv.dsn(dbname))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pollDB.Close() })
	p := &poller.Poller{DB: pollDB, Table: "outbox", Batch: 20, Interval: 10 * time.Millisecond, Stop: stopPoll.Load,
		Publish: func(ids []int64) error {
			pubMu.Lock()
			published = append(published, ids...)
			pubMu.Unlock()
			return nil
		}}
	pollDone := make(chan error, 1)
	go func() { _, err := p.Run(ctx, false); pollDone <- err }()

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(120 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	waitFor("the poller to publish 200 rows", func() bool { return pubCount() >= 200 })

	// The relay, mid-stream: a backfill of the pending rows, and the claim.
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "relay.yaml")
	cfg := fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s%s}
tables: [{name: %s.outbox, switch_over: {}}]
checkpoint: {path: %s, interval: 100ms}
delivery: {batch_size: 50}
log: {level: info}
sinks:
  - name: orders
    type: kafka
    start: {backfill: true, where: "status IN ('pending', 'relayed')", chunk_size: 100}
    kafka: {brokers: [%q], topic: orders}
`, srv.port, testserver.ServerID(), srv.options, dbname, filepath.Join(dir, "checkpoints.json"), brokers[0])
	if os.Getenv("SWITCHOVER_NO_CLAIM") != "" { // to see the test fail without the claim
		cfg = fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s%s}
tables: [{name: %s.outbox}]
checkpoint: {path: %s, interval: 100ms}
delivery: {batch_size: 50}
log: {level: info}
sinks:
  - name: orders
    type: kafka
    start: {backfill: true, where: "status = 'pending'", chunk_size: 100}
    kafka: {brokers: [%q], topic: orders}
`, srv.port, testserver.ServerID(), srv.options, dbname, filepath.Join(dir, "checkpoints.json"), brokers[0])
	}
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "relay.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := startRelay(t, bin, cfgPath, logf, logf)
	defer func() {
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "relay.log"))
			t.Logf("relay log:\n%s", tail(b))
		}
	}()
	relayed := 0
	waitFor("the relay to deliver events", func() bool { relayed = len(read()); return relayed >= 100 })

	// Both run now; stop the poller at a random moment after it has
	// published more beside the relay.
	atRelay := pubCount()
	more := 50 + rand.IntN(300)
	waitFor("the poller to publish beside the relay", func() bool { return pubCount() >= atRelay+more })
	stopPoll.Store(true)
	if err := <-pollDone; err != nil {
		t.Fatalf("poller: %v", err)
	}
	stoppedAt := pubCount()

	// Inserts go on after the poller is gone, then stop.
	insMu.Lock()
	atStop := len(inserted)
	insMu.Unlock()
	waitFor("more inserts after the poller stopped", func() bool { insMu.Lock(); defer insMu.Unlock(); return len(inserted) >= atStop+300 })
	close(stopInserts)
	producers.Wait()

	pubMu.Lock()
	want := map[string]int{}
	for _, id := range inserted {
		want[strconv.FormatInt(id, 10)] = 0
	}
	fromPoller := map[string]bool{}
	for _, id := range published {
		want[strconv.FormatInt(id, 10)]++
		fromPoller[strconv.FormatInt(id, 10)] = true
	}
	pubMu.Unlock()
	covered := func() bool {
		seen := map[string]bool{}
		for _, id := range read() {
			seen[id] = true
		}
		for id := range want {
			if !seen[id] && !fromPoller[id] {
				return false
			}
		}
		return true
	}
	waitFor("every inserted row at the sink or in the poller's log", covered)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("relay exited with %v after SIGTERM", err)
	}
	// What the relay sent before it stopped: the topic's end.
	end, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	var endOffset int64
	end.Each(func(o kadm.ListedOffset) { endOffset += o.Offset })
	waitFor("the consumer to read the topic to its end", func() bool { return int64(len(read())) >= endOffset })
	fromRelay := 0
	for _, id := range read() {
		if _, ok := want[id]; !ok {
			t.Errorf("the sink has event %q, which no producer inserted", id)
			continue
		}
		want[id]++
		fromRelay++
	}
	missing, dup := 0, 0
	for id, n := range want {
		switch {
		case n == 0:
			missing++
			if missing <= 10 {
				t.Errorf("event %s: sent by neither the poller nor the relay", id)
			}
		case n > 1:
			dup++
			if dup <= 10 {
				t.Errorf("event %s: sent %d times (poller: %v)", id, n, fromPoller[id])
			}
		}
	}
	t.Logf("switch-over: %d inserted (%d insert deadlocks retried), %d published by the poller (%d of them after the relay's first %d deliveries), %d sent by the relay: %d missing, %d duplicated",
		len(want), deadlocks.Load(), len(published), stoppedAt-atRelay, relayed, fromRelay, missing, dup)
	if missing+dup > 0 {
		t.Errorf("%d missing, %d duplicated; want 0 and 0", missing, dup)
	}
}
