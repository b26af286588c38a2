package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/eventually"
)

// Settled says a pipeline holds nothing only once every event it was handed
// is acknowledged and its checkpoint, at the last one, is saved; Stored
// says a checkpoint of its run is durable only once its start is saved. A
// gateway lets an endpoint's pipeline go by these.
func TestSettledOnlyOnceAcknowledgedAndSaved(t *testing.T) {
	s := &batchSink{wrote: make(chan struct{}, 10), release: make(chan struct{})}
	store := newGatedStore()
	start := event.Position{File: "b.1", Pos: 4}
	p, err := New(Config{Name: "s", Sink: s, Store: store, Start: start, BatchSize: 1,
		CheckpointInterval: 10 * time.Millisecond, DrainTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := p.Settled(); ok || p.Stored() {
		t.Fatal("a pipeline that has not run is settled, or has a checkpoint")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	txns := gtxns(1)
	go func() { done <- p.Run(ctx, &fakeSource{Txns: txns}) }()
	<-s.wrote // its event is being written, held
	<-store.firstGot
	if _, _, ok := p.Settled(); ok {
		t.Fatal("settled with its event unacknowledged and its start unsaved")
	}
	if p.Stored() {
		t.Fatal("stored before its start checkpoint's save returned")
	}
	close(store.open)
	eventually.Within(t, 10*time.Second, "the start checkpoint stored", p.Stored)
	if _, _, ok := p.Settled(); ok {
		t.Fatal("settled with its event unacknowledged")
	}
	close(s.release)
	var pos event.Position
	eventually.Within(t, 10*time.Second, "settled once its event is acknowledged and saved", func() bool {
		var ok bool
		pos, _, ok = p.Settled()
		return ok
	})
	if pos != txns[0].Position {
		t.Fatalf("settled at %v, want %v", pos, txns[0].Position)
	}
	if got, err := store.Load(ctx, "s"); err != nil || got.Position != pos {
		t.Fatalf("the store holds %+v, %v; want the settled position %v", got, err, pos)
	}
	cancel()
	<-done
}
