package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/sink"
)

// goroutine is the calling goroutine's number, from its stack's first line
// ("goroutine 7 [running]:").
func goroutine() uint64 {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	n, err := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	if err != nil {
		panic(err)
	}
	return n
}

// writerSink is scriptSink that records the goroutine of each Write by the
// id of its batch's first event.
type writerSink struct {
	scriptSink
	wmu sync.Mutex
	on  map[string]uint64
}

func (w *writerSink) Write(ctx context.Context, batch []*event.Event) error {
	w.wmu.Lock()
	if w.on == nil {
		w.on = map[string]uint64{}
	}
	w.on[batch[0].ID] = goroutine()
	w.wmu.Unlock()
	return w.scriptSink.Write(ctx, batch)
}

func (w *writerSink) writer(id string) (uint64, bool) {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	g, ok := w.on[id]
	return g, ok
}

// localSink is a writerSink that is a sink.Local, as stdout is.
type localSink struct{ writerSink }

func (*localSink) WritesLocally() {}

var _ sink.Local = (*localSink)(nil)

// trickle runs a pipeline over n single-event transactions, handed on by
// a source that waits pause before each but the first, and before the
// second for the first's delivery and the end of the delivery loop that
// wrote it. It checks that every event was delivered, in order, and
// returns the source's goroutine.
func trickle(t *testing.T, s sink.Sink, w *writerSink, gap, pause time.Duration, n int) uint64 {
	t.Helper()
	cfg := Config{Name: "s", Sink: s, Store: &memStore{}, Start: event.Position{File: "b.1", Pos: 4},
		CheckpointInterval: time.Hour, TrickleGap: gap}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := txns(n, 1)
	var source uint64
	src := sourceFunc(func(ctx context.Context, _ event.Position, handle func(context.Context, *event.Txn) error) error {
		source = goroutine()
		for i, txn := range ts {
			if i == 1 {
				// The first may have been written by the delivery
				// goroutine that connecting the sink started: let it end.
				for len(w.got()) == 0 && ctx.Err() == nil {
					time.Sleep(time.Millisecond)
				}
				p.delivering.wait()
			}
			if i > 0 {
				time.Sleep(pause)
			}
			if err := handle(ctx, txn); err != nil {
				return err
			}
		}
		<-ctx.Done()
		return ctx.Err()
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, src) }()
	deadline := time.Now().Add(20 * time.Second)
	for len(w.got()) < n && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	got := w.got()
	if len(got) != n {
		t.Fatalf("delivered %d of %d events: %v", len(got), n, got)
	}
	for i, id := range got {
		if want := fmt.Sprintf("e%d", i); id != want {
			t.Fatalf("delivered %v: %s where %s was due", got, id, want)
		}
	}
	return source
}

// A transaction that comes TrickleGap after the last was handed on is
// written to a Local sink from the source's goroutine: a trickle to stdout
// wakes no second goroutine per transaction.
func TestALocalSinkIsWrittenFromTheSourceAtATrickle(t *testing.T) {
	s := &localSink{}
	source := trickle(t, s, &s.writerSink, 0, 2*DefaultTrickleGap, 20)
	for i := 1; i < 20; i++ {
		id := fmt.Sprintf("e%d", i)
		if g, _ := s.writer(id); g != source {
			t.Errorf("%s, which came %s after the last, was written on goroutine %d, not on the source's (%d)", id, 2*DefaultTrickleGap, g, source)
		}
	}
}

// Transactions that come back to back (a backlog: here TrickleGap is an
// hour) are written from the pipeline's delivery goroutine, beside the
// reading, whatever the sink.
func TestABacklogIsWrittenBesideTheReading(t *testing.T) {
	local, plain := &localSink{}, &writerSink{}
	for _, c := range []struct {
		name  string
		s     sink.Sink
		w     *writerSink
		gap   time.Duration
		pause time.Duration
	}{
		{"a Local sink on a backlog", local, &local.writerSink, time.Hour, 0},
		{"a sink that is not Local at a trickle", plain, plain, 0, 2 * DefaultTrickleGap},
	} {
		t.Run(c.name, func(t *testing.T) {
			source := trickle(t, c.s, c.w, c.gap, c.pause, 20)
			for i := 1; i < 20; i++ {
				id := fmt.Sprintf("e%d", i)
				if g, ok := c.w.writer(id); ok && g == source {
					t.Errorf("%s was written on the source's goroutine", id)
				}
			}
		})
	}
}
