package canal_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/canal"
	"github.com/outbox-relay/outbox-relay/event"
)

// readerAfterOneRow inserts one outbox row of aggregate agg and returns a
// reader, the position before the row, and a ctx that ends with the test
// (within 20 s).
func readerAfterOneRow(t *testing.T, agg string) (*canal.Reader, event.Position, context.Context) {
	t.Helper()
	_, db, cfg := setup(t)
	start := serverPosition(t, db, false)
	if _, err := db.Exec(`INSERT INTO outbox VALUES (UNHEX(LPAD(HEX(?), 32, '0')), 'a', ?, 't', '{}', NULL)`, agg, agg); err != nil {
		t.Fatal(err)
	}
	r, err := canal.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return r, start, ctx
}

// The handler runs on go-mysql's syncer goroutine, whose recover would turn
// a panic into a stream error and a reconnect: Run raises it again instead,
// on the caller's goroutine, as when the handler ran there.
func TestReaderRaisesTheHandlersPanicOnTheCallersGoroutine(t *testing.T) {
	r, start, ctx := readerAfterOneRow(t, "boom")
	var got any
	var err error
	func() {
		defer func() { got = recover() }()
		err = r.Run(ctx, start, func(ctx context.Context, txn *event.Txn) error {
			for _, e := range txn.Events {
				if e.AggregateID == "boom" {
					panic("handler says boom")
				}
			}
			return nil
		})
	}()
	if got == nil {
		t.Fatalf("Run returned %v; want the handler's panic raised again", err)
	}
	if !strings.Contains(fmt.Sprint(got), "handler says boom") {
		t.Fatalf("panic %q does not carry the handler's value", got)
	}
}

// A handler that waits (the pipeline is full) until ctx ends lets Run
// return ctx's error: closing the syncer waits for the handler's goroutine.
func TestReaderReturnsWhenCtxEndsWhileTheHandlerWaits(t *testing.T) {
	r, start, ctx := readerAfterOneRow(t, "wait")
	runCtx, stop := context.WithCancel(ctx)
	waiting := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- r.Run(runCtx, start, func(ctx context.Context, txn *event.Txn) error {
			if len(txn.Events) == 0 {
				return nil
			}
			close(waiting)
			<-ctx.Done()
			return ctx.Err()
		})
	}()
	select {
	case <-waiting:
	case <-ctx.Done():
		t.Fatal("the event never reached the handler")
	}
	stop()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run returned %v; want context.Canceled", err)
		}
	case <-ctx.Done():
		t.Fatal("Run did not return after its ctx ended while the handler waited")
	}
}
