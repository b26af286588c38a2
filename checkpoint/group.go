package checkpoint

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// GroupCommit is a Store that writes many pipelines' saves together: while
// one write is under way, the Saves that arrive wait; when it is done, all of
// them are written by one SaveMany of the wrapped store (one file rewrite and
// fsync, or one MySQL transaction) instead of one write each. With a
// thousand pipelines saving every second, the store then writes a few times
// a second, not a thousand. A store without SaveMany has each waiting key
// written by its Save, one after the other.
//
// Save keeps the wrapped store's promise to each caller: it returns nil once
// the caller's own checkpoint is durable, or the error of the write that
// carried it (ErrFenced included: a fenced store refuses every batch). Of
// concurrent Saves of one key, the last to arrive is the one written, as
// with the wrapped store. A caller whose ctx ends before its checkpoint's
// write has begun withdraws it and returns ctx's error, the previous
// checkpoint intact; once the write has begun it waits for its outcome. A
// write is cancelled only when every caller it carries has given up.
//
// Load and Close are the wrapped store's. GroupCommit has none of the
// wrapped store's other abilities (Locker, Fencer, Epoch, LockWaited,
// Deleter, Lister): take the lock, fence, delete and list on the store it
// wraps, and give the GroupCommit only to the pipelines, which Load and
// Save. A type assertion on a GroupCommit for those abilities fails rather
// than answer for a store it does not own.
//
// With a gap (NewGroupCommitEvery), writes begin at least gap apart: the
// saves that arrive meanwhile wait and go in the next write together. A
// store that rewrites every key on each write (the file) then does so at
// most 1/gap times a second however many pipelines save, and each
// pipeline, saving one at a time, saves at most that often too. What is
// acknowledged waits up to gap longer to be saved (it still counts against
// the pipeline's in-flight limits until it is, which bound what a crash
// re-sends).
//
// A GroupCommit is safe for concurrent use; it starts no goroutine: each
// write is made by one of the callers it carries.
type GroupCommit struct {
	store Store
	many  BatchSaver // nil: the store saves one key at a time
	gap   time.Duration

	mu      sync.Mutex
	writing bool   // a write is under way
	next    *batch // the saves waiting for the next write; nil when none
}

// batch is the saves one write carries.
type batch struct {
	saves map[string][]*waiter // by key, in arrival order: the last is written
	// lead is closed when the write before it is done: the first of its
	// waiters to see it (or a new Save) claims the batch and writes it.
	lead chan struct{}
	// done is closed once the batch is written and each waiter's err set.
	done chan struct{}
}

// waiter is one Save carried by a batch.
type waiter struct {
	ctx context.Context
	cp  Checkpoint
	err error
}

// NewGroupCommit returns a GroupCommit writing to store.
func NewGroupCommit(store Store) *GroupCommit { return NewGroupCommitEvery(store, 0) }

// NewGroupCommitEvery returns a GroupCommit writing to store whose writes
// begin at least gap apart.
func NewGroupCommitEvery(store Store, gap time.Duration) *GroupCommit {
	g := &GroupCommit{store: store, gap: gap}
	g.many, _ = store.(BatchSaver)
	return g
}

// Load implements Store: the wrapped store's Load.
func (g *GroupCommit) Load(ctx context.Context, key string) (Checkpoint, error) {
	return g.store.Load(ctx, key)
}

// Close implements Store: the wrapped store's Close.
func (g *GroupCommit) Close() error { return g.store.Close() }

// Save implements Store: it returns once cp is durable, written with the
// other Saves that waited with it, or with the error of that write.
func (g *GroupCommit) Save(ctx context.Context, key string, cp Checkpoint) error {
	w := &waiter{ctx: ctx, cp: cp}
	g.mu.Lock()
	if g.next == nil {
		g.next = &batch{saves: map[string][]*waiter{}, lead: make(chan struct{}), done: make(chan struct{})}
	}
	b := g.next
	b.saves[key] = append(b.saves[key], w)
	if !g.writing {
		g.claim()
		g.mu.Unlock()
		g.write(b, ctx)
		return w.err
	}
	g.mu.Unlock()
	lead, cancelled := b.lead, ctx.Done()
	for {
		select {
		case <-b.done:
			return w.err
		case <-lead:
			lead = nil
			g.mu.Lock()
			if g.next == b && !g.writing {
				g.claim()
				g.mu.Unlock()
				g.write(b, ctx)
				return w.err
			}
			g.mu.Unlock() // another caller claimed it
		case <-cancelled:
			cancelled = nil
			g.mu.Lock()
			if g.next == b { // not claimed: nothing of it is written yet
				b.withdraw(key, w)
				if len(b.saves) == 0 {
					g.next = nil
				}
				g.mu.Unlock()
				return ctx.Err()
			}
			g.mu.Unlock() // being written: wait for the outcome
		}
	}
}

// claim makes the caller the writer of g.next. g.mu is held.
func (g *GroupCommit) claim() {
	g.writing = true
	g.next = nil
}

// withdraw takes w's save out of b. The key's previous save in b, if any,
// becomes the one written.
func (b *batch) withdraw(key string, w *waiter) {
	ws := b.saves[key]
	for i, x := range ws {
		if x == w {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(b.saves, key)
	} else {
		b.saves[key] = ws
	}
}

// write writes b, sets each waiter's err, releases b's waiters and, after
// the gap, hands the next batch (if any) to its waiters.
func (g *GroupCommit) write(b *batch, writer context.Context) {
	began := time.Now()
	ctx, stop := b.context()
	if g.many != nil {
		cps := make(map[string]Checkpoint, len(b.saves))
		for k, ws := range b.saves {
			cps[k] = ws[len(ws)-1].cp
		}
		err := g.many.SaveMany(ctx, cps)
		for _, ws := range b.saves {
			for _, w := range ws {
				w.err = err
			}
		}
	} else {
		for k, ws := range b.saves {
			err := g.store.Save(ctx, k, ws[len(ws)-1].cp)
			for _, w := range ws {
				w.err = err
			}
		}
	}
	stop()
	close(b.done)
	if wait := time.Until(began.Add(g.gap)); wait > 0 {
		// Still writing for the others: what arrives waits for the next
		// write. The writer's own Save returns after the gap, or at once
		// if its context ends.
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-writer.Done():
		}
		t.Stop()
	}
	g.mu.Lock()
	g.writing = false
	if g.next != nil {
		close(g.next.lead)
	}
	g.mu.Unlock()
}

// context is the context of b's write: it ends, with the last one's cause,
// once every waiter's context has ended. stop releases it.
func (b *batch) context() (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	var left atomic.Int64
	for _, ws := range b.saves {
		left.Add(int64(len(ws)))
	}
	var stops []func() bool
	for _, ws := range b.saves {
		for _, w := range ws {
			stops = append(stops, context.AfterFunc(w.ctx, func() {
				if left.Add(-1) == 0 {
					cancel(context.Cause(w.ctx))
				}
			}))
		}
	}
	return ctx, func() {
		for _, s := range stops {
			s()
		}
		cancel(nil)
	}
}
