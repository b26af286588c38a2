package canal_test

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/retry"
)

// waits records the wait of every "binlog stream reconnecting" line.
type waits struct {
	mu    sync.Mutex
	waits []time.Duration
	three chan struct{}
}

func (w *waits) Enabled(context.Context, slog.Level) bool { return true }
func (w *waits) WithAttrs([]slog.Attr) slog.Handler       { return w }
func (w *waits) WithGroup(string) slog.Handler            { return w }
func (w *waits) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "binlog stream reconnecting" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "wait" {
			w.mu.Lock()
			w.waits = append(w.waits, a.Value.Duration())
			if len(w.waits) == 3 {
				close(w.three)
			}
			w.mu.Unlock()
		}
		return true
	})
	return nil
}

// TestReconnectWaitsFollowTheRetryPolicy: the reader's waits between
// reconnects are the policy it is given (the relay's, from
// delivery.retry_backoff), not a wait of its own.
func TestReconnectWaitsFollowTheRetryPolicy(t *testing.T) {
	// A port nothing listens on: every connection is refused.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	const initial = 3 * time.Millisecond
	w := &waits{three: make(chan struct{})}
	r, err := canal.New(canal.Config{Host: "127.0.0.1", Port: uint16(port), User: "root", ServerID: 4041, Flavor: "mariadb",
		Tables: []canal.Table{{Schema: "shop", Name: "outbox", Columns: canal.Columns{ID: "id", AggregateID: "aggregate_id", Payload: "payload"}}}, Retry: retry.Policy{Initial: initial, Max: time.Hour},
		Logger: slog.New(w)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- r.Run(ctx, event.Position{GTIDSet: "0-1-1"}, func(context.Context, *event.Txn) error { return nil })
	}()
	select {
	case <-w.three:
	case err := <-done:
		t.Fatalf("the reader stopped instead of reconnecting: %v", err)
	}
	cancel()
	<-done
	w.mu.Lock()
	defer w.mu.Unlock()
	// Refused connections: each wait is at most the policy's first one
	// doubled per attempt (retry.Backoff), here at most 4 × initial.
	for i, d := range w.waits[:3] {
		if c := initial << i; d > c {
			t.Errorf("reconnect %d waited %s; the policy (initial %s) allows at most %s", i+1, d, initial, c)
		}
	}
}
