package pipeline

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/eventually"
)

// gatedStore is a memStore whose first save waits for open (or fails with
// failFirst), and which records each saved position and whether two saves
// ever overlapped.
type gatedStore struct {
	memStore
	open      chan struct{}
	failFirst error

	mu       sync.Mutex
	saving   int
	overlap  bool
	saves    []event.Position
	firstGot chan struct{} // closed when the first save is called
	once     sync.Once
}

func newGatedStore() *gatedStore {
	return &gatedStore{open: make(chan struct{}), firstGot: make(chan struct{})}
}

func (s *gatedStore) Save(ctx context.Context, k string, cp checkpoint.Checkpoint) error {
	s.mu.Lock()
	s.saving++
	if s.saving > 1 {
		s.overlap = true
	}
	first := len(s.saves) == 0
	s.saves = append(s.saves, cp.Position)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.saving--
		s.mu.Unlock()
	}()
	if first {
		s.once.Do(func() { close(s.firstGot) })
		if s.failFirst != nil {
			return s.failFirst
		}
		select {
		case <-s.open:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.memStore.Save(ctx, k, cp)
}

// A fresh start's checkpoint is saved beside reading, not before it: the
// first events are delivered while that save is still under way (its
// fsyncs were most of a start's time), no other save begins before it ends,
// and once it has, the checkpoint moves on to the last event as before.
func TestTheFirstEventsAreDeliveredWhileTheStartCheckpointIsSaved(t *testing.T) {
	s := &countingSink{}
	store := newGatedStore()
	start := event.Position{File: "b.1", Pos: 4}
	p, err := New(Config{Name: "s", Sink: s, Store: store, Start: start, BatchSize: 1,
		CheckpointInterval: time.Hour, CheckpointGap: time.Millisecond, DrainTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, &fakeSource{Txns: gtxns(3)}) }()

	eventually.Within(t, 10*time.Second, "the three events delivered while the start checkpoint's save waits", func() bool {
		return s.N.Load() == 3
	})
	select {
	case <-store.firstGot:
	default:
		t.Fatal("the start checkpoint's save was not begun")
	}
	close(store.open)
	eventually.Within(t, 10*time.Second, "the checkpoint at the last event", func() bool {
		cp, err := store.Load(context.Background(), "s")
		return err == nil && cp.Position.GTIDSet == "0-1-3"
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	if store.overlap {
		t.Error("two checkpoint saves ran at once")
	}
}

// A start checkpoint that cannot be saved stops the pipeline with an error
// that says so, as when it was saved before reading.
func TestAStartCheckpointThatCannotBeSavedStopsThePipeline(t *testing.T) {
	store := newGatedStore()
	store.failFirst = errors.New("disk full")
	p, err := New(Config{Name: "s", Sink: &countingSink{}, Store: store, Start: event.Position{File: "b.1", Pos: 4}, BatchSize: 1,
		CheckpointInterval: time.Hour, DrainTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = p.Run(ctx, &fakeSource{Txns: gtxns(3)})
	if err == nil || !strings.Contains(err.Error(), "save start checkpoint: disk full") {
		t.Fatalf("Run = %v, want the start checkpoint's save failure", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Run returned only when the test's context ended")
	}
}
