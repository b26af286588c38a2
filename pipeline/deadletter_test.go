package pipeline

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/deadletter"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/eventually"
	"github.com/outbox-relay/outbox-relay/metrics"
	"github.com/outbox-relay/outbox-relay/retry"
	"github.com/outbox-relay/outbox-relay/sink"
)

// refusingDLQ refuses every record as the MySQL store refuses a value it
// cannot keep, until accept is set.
type refusingDLQ struct {
	memDLQ
	accept  atomic.Bool
	refused atomic.Int64
}

func (r *refusingDLQ) Put(ctx context.Context, dl deadletter.Letter) error {
	if !r.accept.Load() {
		r.refused.Add(1)
		return &mysql.MySQLError{Number: 1406, Message: "Data too long for column 'aggregate_id' at row 1"}
	}
	return r.memDLQ.Put(ctx, dl)
}

// A dead letter the store refuses is never dropped and never a silent
// stall: the pipeline writes it again until the store takes it, its
// checkpoint waits before it, and meanwhile outbox_relay_dead_letter_waiting_events
// is 1 and /readyz names the sink, the event, its transaction and the fix.
// Once the store takes it, the alert clears and the checkpoint passes it.
func TestADeadLetterTheStoreRefusesIsAnAlertUntilTheStoreTakesIt(t *testing.T) {
	m, err := metrics.New(prometheus.NewRegistry(), "test")
	if err != nil {
		t.Fatal(err)
	}
	s := &scriptSink{fail: func(id string, _ int) error {
		if id == "e3" {
			return sink.Permanent(errors.New("rejected"))
		}
		return nil
	}}
	dlq := &refusingDLQ{}
	store := &memStore{}
	p, err := New(Config{Name: "s", Sink: s, Store: store, DeadLetters: dlq, Start: event.Position{File: "b.1", Pos: 4}, BatchSize: 1,
		Retry: retry.Policy{Initial: time.Millisecond, Max: 10 * time.Millisecond}, Observer: m.Pipeline("s")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	src := txns(5, 2)
	for _, txn := range src { // where the reader says each event was read
		for _, e := range txn.Events {
			e.Source = event.Source{GTID: "0-1-" + e.ID, File: txn.Position.File, Pos: txn.Position.Pos}
		}
	}
	go func() { done <- p.Run(ctx, &fakeSource{Txns: src}) }()
	defer func() { cancel(); <-done }()

	reasons := func() string { _, r, _ := m.Ready(time.Hour); return strings.Join(r, "\n") }
	eventually.Within(t, 10*time.Second, "the store to refuse the dead letter twice", func() bool { return dlq.refused.Load() >= 2 })
	got := reasons()
	for _, want := range []string{"sink s: waits on event e3 (GTID 0-1-e3)", "Data too long for column 'aggregate_id'", "the dead-letter store refuses this record", "nothing is dropped"} {
		if !strings.Contains(got, want) {
			t.Errorf("/readyz reasons %q do not say %q", got, want)
		}
	}
	if cp, _ := store.Load(context.Background(), "s"); cp.Position.Pos >= 11 {
		t.Fatalf("checkpoint %v passed the transaction of the event whose dead letter was refused (pos 11)", cp.Position)
	}
	dlq.accept.Store(true)
	eventually.Within(t, 10*time.Second, "the checkpoint to pass the event once the store takes its dead letter", func() bool {
		cp, _ := store.Load(context.Background(), "s")
		return cp.Position.Pos == 14
	})
	if got := reasons(); strings.Contains(got, "waits on event") {
		t.Errorf("/readyz still says the sink waits: %q", got)
	}
	dlq.mu.Lock()
	defer dlq.mu.Unlock()
	if len(dlq.dls) != 1 || dlq.dls[0].Event.ID != "e3" {
		t.Errorf("dead letters %+v, want e3's", dlq.dls)
	}
}
