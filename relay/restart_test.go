package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/internal/outboxtest"
	"github.com/outbox-relay/outbox-relay/internal/testserver"
	"github.com/outbox-relay/outbox-relay/relay"
)

// The source server restarts (SIGTERM, start again) while the relay runs:
// the relay reconnects by itself and delivers what was committed before,
// during the gap and after, in order.
func TestRelaySurvivesASourceRestart(t *testing.T) {
	s := testserver.Start(t, testserver.Options{ServerID: 31})
	dbname := s.NewDatabase(t)
	if _, err := s.DB(t, dbname).Exec(outboxtest.Schema); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s, max_reconnect_backoff: 500ms}
tables: [{name: %s.outbox}]
checkpoint: {path: %s, interval: 100ms}
sinks: [{name: out, type: stdout}]
`, s.Port, testserver.ServerID(), dbname, filepath.Join(t.TempDir(), "cp.json"))))
	if err != nil {
		t.Fatal(err)
	}
	out := &lines{}
	ctx := context.Background()
	rl := startRelay(t, cfg, relay.Options{Stdout: out, Logger: slog.New(slog.DiscardHandler)})
	waitForCheckpoint(t, cfg.Checkpoint.Path)

	w := &outboxtest.Workload{}
	outboxtest.Produce(ctx, t, s.DB(t, dbname), w, 2, 20, []int{2}, 5)
	s.Restart(t)
	w2 := &outboxtest.Workload{Prefix: "after-"}
	outboxtest.Produce(ctx, t, s.DB(t, dbname), w2, 2, 20, []int{2}, 5)
	total := w.Events() + w2.Events()
	for deadline := time.Now().Add(30 * time.Second); len(out.events(t)) < total && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	if err, stopped := rl.exited(0); stopped {
		t.Fatalf("the relay stopped when the server restarted: %v", err)
	}
	rl.stop(t)
	var d1, d2 []outboxtest.Delivered
	for _, e := range out.events(t) {
		d := outboxtest.Delivered{ID: e.ID, AggregateID: e.AggregateID}
		if len(e.ID) > 6 && e.ID[:6] == "after-" {
			d2 = append(d2, d)
		} else {
			d1 = append(d1, d)
		}
	}
	outboxtest.Check(t, w, d1, false)
	rep := outboxtest.Check(t, w2, d2, false)
	t.Logf("across a server restart: %d + %d events delivered (%d duplicates after the restart)", len(d1), rep.Delivered, rep.Duplicates)
}

// The relay starts before its Kafka broker: the sink's connect is retried
// until the broker is up, and nothing committed meanwhile is lost.
func TestKafkaStartsBeforeTheBroker(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dbname, w := newOutbox(t)
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
source: {host: 127.0.0.1, port: %d, user: root, server_id: %d, heartbeat: 1s}
tables: [{name: %s.outbox}]
checkpoint: {path: %s, interval: 100ms}
delivery: {retry_backoff: 50ms, max_retry_backoff: 300ms}
sinks: [{name: kafka, type: kafka, kafka: {brokers: ["%s"], request_timeout: 1s, create_topics: {enabled: true}}}]
`, srv.Port, testserver.ServerID(), dbname, filepath.Join(t.TempDir(), "cp.json"), addr)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rl := startRelay(t, cfg, relay.Options{Logger: slog.New(slog.DiscardHandler)})
	waitForCheckpoint(t, cfg.Checkpoint.Path) // the start is fixed before the sink connects
	outboxtest.Produce(ctx, t, srv.DB(t, dbname), w, 2, 20, []int{3}, 10)
	time.Sleep(time.Second) // the relay is retrying its connect now

	var k *kfake.Cluster
	for try := 0; ; try++ {
		if k, err = kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port)); err == nil {
			break
		}
		if try == 50 {
			t.Fatalf("start kfake on %d: %v", port, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Cleanup(k.Close)
	c := collect(t, k.ListenAddrs(), "outbox.event.order")
	recs := c.waitFor(t, w.Events(), 30*time.Second)
	if err := rl.stop(t); err != nil {
		t.Fatalf("relay: %v", err)
	}
	checkKafka(t, w, recs, dbname)
}
