package kafka

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/eventually"
	"github.com/outbox-relay/outbox-relay/pipeline"
	"github.com/outbox-relay/outbox-relay/retry"
	"github.com/outbox-relay/outbox-relay/sink"
)

// gatedSource hands out the first transactions, waits for open, hands out the
// rest, then waits for ctx.
type gatedSource struct {
	first, rest []*event.Txn
	open        chan struct{}
}

func (g *gatedSource) Run(ctx context.Context, _ event.Position, handle func(context.Context, *event.Txn) error) error {
	for _, t := range g.first {
		if err := handle(ctx, t); err != nil {
			return err
		}
	}
	select {
	case <-g.open:
	case <-ctx.Done():
		return ctx.Err()
	}
	for _, t := range g.rest {
		if err := handle(ctx, t); err != nil {
			return err
		}
	}
	<-ctx.Done()
	return ctx.Err()
}

func txnsOf(evs []*event.Event, perTxn, firstPos int) []*event.Txn {
	var out []*event.Txn
	for i := 0; i < len(evs); i += perTxn {
		out = append(out, &event.Txn{Position: event.Position{File: "b.1", Pos: uint32(firstPos + i/perTxn)}, Events: evs[i:min(i+perTxn, len(evs))]})
	}
	return out
}

// A broker that is down for a while and comes back (empty: the topic is
// created again) gets the pending events in per-key order, without waiting
// out the backoff its outage accumulated: while the broker refuses
// connections the pipeline tries again at least every second, and the
// "topic missing" answer after it came back is retried with a fresh
// backoff. The recovery time (broker back → checkpoint at the last event) is
// logged, not asserted.
func TestPipelineResumesPromptlyWhenTheBrokerComesBack(t *testing.T) {
	port := freePort(t)
	c1 := startCluster(t, kfake.Ports(port))
	s, err := New(Config{Brokers: c1.ListenAddrs(), Topic: "orders", RequestTimeout: 2 * time.Second,
		CreateTopics: CreateTopicsConfig{Enabled: true, Partitions: 4}}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	store, err := checkpoint.OpenFile(filepath.Join(t.TempDir(), "cp.json"))
	if err != nil {
		t.Fatal(err)
	}
	evs := makeEvents(400, 20)
	src := &gatedSource{first: txnsOf(evs[:100], 10, 10), rest: txnsOf(evs[100:], 10, 20), open: make(chan struct{})}
	lastPos := uint32(20 + 300/10 - 1)
	p, err := pipeline.New(pipeline.Config{Name: "k", Sink: s, Store: store, Start: event.Position{File: "b.1", Pos: 4},
		CheckpointInterval: 20 * time.Millisecond, Logger: testLogger(t),
		// A 10-minute cap: without the probe, an outage of a few seconds
		// would already cost several seconds after the broker is back.
		Retry: retry.Policy{Initial: 100 * time.Millisecond, Max: 10 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, src) }()
	checkpointAt := func(pos uint32) bool {
		cp, err := store.Load(ctx, "k")
		return err == nil && cp.Position.Pos >= pos
	}
	eventually.Within(t, 30*time.Second, "the checkpoint at position 19", func() bool { return checkpointAt(19) })

	c1.Close()
	close(src.open)
	time.Sleep(4 * time.Second) // the outage: attempts refused, the backoff would grow to seconds
	var c2 *kfake.Cluster
	for try := 0; ; try++ {
		c2, err = kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port))
		if err == nil {
			break
		}
		if try == 50 {
			t.Fatalf("restart kfake on port %d: %v", port, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Cleanup(c2.Close)
	back := time.Now()
	eventually.Within(t, 60*time.Second, "the checkpoint at the last position", func() bool { return checkpointAt(lastPos) })
	t.Logf("broker back → every pending event acknowledged: %s", time.Since(back).Round(time.Millisecond))
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	checkOrder(t, evs[100:], consume(t, c2.ListenAddrs(), 300, "orders"))
}

// A broker that drops the connection in the middle of a produce request
// fails the events with a connection error (counted as reason
// "connection", and retried with the short probe wait), not an anonymous
// retriable one.
func TestABrokerDyingMidRequestIsAConnectionFailure(t *testing.T) {
	c := startCluster(t, kfake.SeedTopics(1, "orders"))
	s := newSink(t, Config{Brokers: c.ListenAddrs(), Topic: "orders", RequestTimeout: 2 * time.Second})
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		return nil, errors.New("broker dies"), true // closes the connection, no answer
	})
	err := s.Write(context.Background(), makeEvents(3, 1))
	for i := range 3 {
		e := sink.ErrorFor(err, i)
		if e == nil || sink.IsPermanent(e) || !retry.IsConnectionError(e) {
			t.Fatalf("event %d: error %v, want a retriable connection error", i, e)
		}
	}
}

// Log lines keep the name the relay gave the sink under "sink"; the sink's
// kind goes under its own key, so JSON consumers see one "sink".
func TestLogLinesKeepTheSinksName(t *testing.T) {
	c := startCluster(t, kfake.SeedTopics(1, "orders"))
	var buf syncBuffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil)).With(slog.String("sink", "orders-out"))
	s, err := New(Config{Brokers: c.ListenAddrs(), Topic: "orders"}, logger)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) == 0 || lines[0] == "" {
		t.Fatal("Connect logged nothing")
	}
	for _, line := range lines {
		if n := strings.Count(line, `"sink":`); n != 1 {
			t.Errorf("log line has %d \"sink\" keys: %s", n, line)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		if m["sink"] != "orders-out" || m["sink_type"] != "kafka" {
			t.Errorf("log line has sink=%v sink_type=%v, want orders-out and kafka: %s", m["sink"], m["sink_type"], line)
		}
	}
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
