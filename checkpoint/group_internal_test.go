package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
)

// heldStore is a BatchSaver whose every write waits for the test: it sends
// the write to started and returns what the test sends to release.
type heldStore struct {
	started chan heldWrite
	saved   map[string]Checkpoint // written by the one write under way only
}

type heldWrite struct {
	ctx     context.Context
	cps     map[string]Checkpoint
	release chan error
}

func newHeldStore() *heldStore {
	return &heldStore{started: make(chan heldWrite), saved: map[string]Checkpoint{}}
}

func (h *heldStore) Load(_ context.Context, key string) (Checkpoint, error) {
	cp, ok := h.saved[key]
	if !ok {
		return Checkpoint{}, ErrNotFound
	}
	return cp, nil
}

func (h *heldStore) Save(ctx context.Context, key string, cp Checkpoint) error {
	return h.SaveMany(ctx, map[string]Checkpoint{key: cp})
}

func (h *heldStore) SaveMany(ctx context.Context, cps map[string]Checkpoint) error {
	w := heldWrite{ctx: ctx, cps: maps.Clone(cps), release: make(chan error)}
	h.started <- w
	err := <-w.release
	if err == nil {
		maps.Copy(h.saved, cps)
	}
	return err
}

func (h *heldStore) Close() error { return nil }

// at is a checkpoint told apart by n.
func at(n int) Checkpoint {
	return Checkpoint{Flavor: "mariadb", Position: event.Position{GTIDSet: fmt.Sprintf("0-1-%d", n)}}
}

// saveAsync runs g.Save and returns where its result arrives.
func saveAsync(ctx context.Context, g *GroupCommit, key string, cp Checkpoint) <-chan error {
	res := make(chan error, 1)
	go func() { res <- g.Save(ctx, key, cp) }()
	return res
}

// holdWrite starts a Save of key that finds no write under way, so its own
// write begins, and returns that write (held until released) and where the
// Save's result arrives.
func holdWrite(ctx context.Context, g *GroupCommit, st *heldStore, key string, cp Checkpoint) (heldWrite, <-chan error) {
	res := saveAsync(ctx, g, key, cp)
	return <-st.started, res
}

// waitQueued waits until the batch after the write under way carries n
// saves.
func waitQueued(t *testing.T, g *GroupCommit, n int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		g.mu.Lock()
		got := 0
		if g.next != nil {
			got = g.next.n
		}
		g.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d saves waiting for the next write, want %d", got, n)
		}
	}
}

func keys(cps map[string]Checkpoint) []string { return slices.Sorted(maps.Keys(cps)) }

// The saves that arrive during a write are written together by the next
// one, and a write's error reaches exactly the callers it carried.
func TestGroupCommitWritesWhatWaitedInOneWriteAndReportsItsErrorToThoseOnly(t *testing.T) {
	st := newHeldStore()
	g := NewGroupCommit(st)
	ctx := context.Background()
	w1, first := holdWrite(ctx, g, st, "first", at(1))
	if got := keys(w1.cps); !slices.Equal(got, []string{"first"}) {
		t.Fatalf("first write carries %v", got)
	}
	const n = 50
	waiting := make([]<-chan error, n)
	for i := range n {
		waiting[i] = saveAsync(ctx, g, fmt.Sprintf("k%02d", i), at(100+i))
	}
	waitQueued(t, g, n)
	// A second save of a key in the same batch: the later one is written.
	waiting = append(waiting, saveAsync(ctx, g, "k00", at(999)))
	waitQueued(t, g, n+1)
	w1.release <- nil
	if err := <-first; err != nil {
		t.Fatalf("the first save: %v", err)
	}
	w2 := <-st.started
	if len(w2.cps) != n {
		t.Fatalf("the second write carries %d checkpoints, want the %d keys that waited", len(w2.cps), n)
	}
	for i := range n {
		want := at(100 + i)
		if i == 0 {
			want = at(999)
		}
		if cp := w2.cps[fmt.Sprintf("k%02d", i)]; cp != want {
			t.Fatalf("k%02d written as %+v, want %+v", i, cp, want)
		}
	}
	boom := errors.New("disk full")
	w2.release <- boom
	for i, res := range waiting {
		if err := <-res; !errors.Is(err, boom) {
			t.Fatalf("save %d carried by the failed write returned %v, want its error", i, err)
		}
	}
	// The failure was that write's only: the next one succeeds.
	w3, after := holdWrite(ctx, g, st, "k00", at(7))
	w3.release <- nil
	if err := <-after; err != nil {
		t.Fatalf("a save after the failed write: %v", err)
	}
	if got := keys(st.saved); !slices.Equal(got, []string{"first", "k00"}) {
		t.Fatalf("saved keys %v, want first and k00 only", got)
	}
}

// A caller whose context ends before its write begins withdraws its save
// (the key's earlier save in the batch, if any, is written instead); once
// the write has begun, it is cancelled only when every caller it carries
// has given up.
func TestGroupCommitCancellation(t *testing.T) {
	st := newHeldStore()
	g := NewGroupCommit(st)
	bg := context.Background()
	w1, first := holdWrite(bg, g, st, "first", at(1))

	aCtx, cancelA := context.WithCancel(bg)
	a := saveAsync(aCtx, g, "a", at(2))
	waitQueued(t, g, 1)
	laterCtx, cancelLater := context.WithCancel(bg)
	earlierKept := saveAsync(bg, g, "b", at(3))
	waitQueued(t, g, 2)
	later := saveAsync(laterCtx, g, "b", at(4))
	waitQueued(t, g, 3)
	cancelA()
	if err := <-a; !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled save returned %v, want context.Canceled", err)
	}
	cancelLater()
	if err := <-later; !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled save returned %v, want context.Canceled", err)
	}
	w1.release <- nil
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	w2 := <-st.started
	if len(w2.cps) != 1 || w2.cps["b"] != at(3) {
		t.Fatalf("after the withdrawals the write carries %v, want b's earlier save only", w2.cps)
	}
	w2.release <- nil
	if err := <-earlierKept; err != nil {
		t.Fatal(err)
	}

	// A write under way carrying two callers: it goes on when one gives up,
	// and is cancelled when both have.
	w3, first := holdWrite(bg, g, st, "first", at(5))
	xCtx, cancelX := context.WithCancel(bg)
	yCtx, cancelY := context.WithCancel(bg)
	x := saveAsync(xCtx, g, "x", at(6))
	y := saveAsync(yCtx, g, "y", at(7))
	waitQueued(t, g, 2)
	w3.release <- nil
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	w4 := <-st.started
	cancelX()
	// x may still be on its way to noticing; either way the write must go
	// on while y waits.
	if err := w4.ctx.Err(); err != nil {
		t.Fatalf("the write was cancelled while y still waits: %v", err)
	}
	cancelY()
	<-w4.ctx.Done()
	w4.release <- w4.ctx.Err()
	for _, res := range []<-chan error{x, y} {
		if err := <-res; !errors.Is(err, context.Canceled) {
			t.Fatalf("a caller of the cancelled write returned %v, want context.Canceled", err)
		}
	}
	if _, err := g.Load(bg, "x"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("x was saved by a cancelled write: %v", err)
	}
}

// With a gap, a write's waiters are released at once but the next write
// waits for the gap: what arrives meanwhile goes in one write, and the
// writer's own Save returns at the gap's end or when its context ends (a
// write, once begun, is reported as written, not as the context's end).
func TestGroupCommitWithAGapWritesWhatArrivesMeanwhileTogether(t *testing.T) {
	st := newHeldStore()
	g := NewGroupCommitEvery(st, time.Hour)
	ctx, end := context.WithCancel(context.Background())
	defer end()
	writerCtx, endWriter := context.WithCancel(ctx)
	first, firstRes := holdWrite(writerCtx, g, st, "a", at(1))
	queued := saveAsync(ctx, g, "b", at(2)) // waits behind the write under way
	waitQueued(t, g, 1)
	first.release <- nil

	// The gap holds the next write: b and c wait and are written together.
	waitQueued(t, g, 1)
	third := saveAsync(ctx, g, "c", at(3))
	waitQueued(t, g, 2)
	select {
	case w := <-st.started:
		t.Fatalf("a write of %v began within the gap", slices.Sorted(maps.Keys(w.cps)))
	case err := <-firstRes:
		t.Fatalf("the writer's Save returned (%v) within the gap while its context lives", err)
	default:
	}

	endWriter() // the writer gives up waiting: the gap ends with it
	if err := <-firstRes; err != nil {
		t.Fatalf("the writer's Save = %v, want nil: its checkpoint was written", err)
	}
	next := <-st.started
	if got := slices.Sorted(maps.Keys(next.cps)); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("the write after the gap carries %v, want [b c]", got)
	}
	next.release <- nil
	end() // its writer waits the gap too, until its context ends
	for _, res := range []<-chan error{queued, third} {
		if err := <-res; err != nil {
			t.Fatalf("a save carried by the write after the gap = %v, want nil", err)
		}
	}
}
