package checkpoint

import (
	"context"
	"errors"
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
// WriteMany (BatchWriter) puts saves and deletes into one write, when the
// wrapped store can write them together. Load and Close are the wrapped
// store's. GroupCommit has none of the wrapped store's other abilities (Locker, Fencer, Epoch, LockWaited,
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
	many  BatchSaver  // nil: the store saves one key at a time
	both  BatchWriter // nil: the store cannot delete in a batch
	gap   time.Duration

	mu      sync.Mutex
	writing bool   // a write is under way
	next    *batch // the saves waiting for the next write; nil when none
	// cps is the map a write hands to SaveMany, emptied and reused by the
	// next (writes are one at a time).
	cps map[string]Checkpoint
}

// batch is the saves one write carries.
type batch struct {
	// saves holds, by key, the last save to arrive (the one written); the
	// key's earlier saves in the batch follow from it (waiter.prev).
	saves map[string]*waiter
	n     int // saves carried, every key's
	// lead is closed when the write before it is done: the first of its
	// waiters to see it (or a new Save) claims the batch and writes it.
	lead chan struct{}
	// done is closed once the batch is written and each waiter's err set.
	done chan struct{}
	// ctx is the write's context, from the claim on: cancel ends it, with
	// the last one's cause, once each of the n callers has given up (left
	// counts those that have not): the writer through an AfterFunc on its
	// context, the others in Save as they wait.
	ctx    context.Context
	cancel context.CancelCauseFunc
	left   atomic.Int64
}

// waiter is one Save (or one key of a WriteMany) carried by a batch.
type waiter struct {
	ctx  context.Context
	cp   Checkpoint
	del  bool // WriteMany's: delete the key
	err  error
	prev *waiter // the key's earlier save in the batch, if any
}

// NewGroupCommit returns a GroupCommit writing to store.
func NewGroupCommit(store Store) *GroupCommit { return NewGroupCommitEvery(store, 0) }

// NewGroupCommitEvery returns a GroupCommit writing to store whose writes
// begin at least gap apart.
func NewGroupCommitEvery(store Store, gap time.Duration) *GroupCommit {
	g := &GroupCommit{store: store, gap: gap}
	g.many, _ = store.(BatchSaver)
	if g.many != nil {
		g.both, _ = store.(BatchWriter)
	}
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
	return g.submit(ctx, []string{key}, []*waiter{{ctx: ctx, cp: cp}})
}

// WriteMany implements BatchWriter when the wrapped store does: the keys of
// save and del go together into the next write, with the Saves that wait
// with them, all or nothing. Of a key saved and deleted by calls in one
// write, the last to arrive counts (in one call, save does).
func (g *GroupCommit) WriteMany(ctx context.Context, save map[string]Checkpoint, del []string) error {
	if g.both == nil {
		return errors.New("the checkpoint store cannot save and delete in one write")
	}
	keys := make([]string, 0, len(save)+len(del))
	ws := make([]*waiter, 0, len(save)+len(del))
	for _, k := range del {
		if _, ok := save[k]; !ok {
			keys, ws = append(keys, k), append(ws, &waiter{ctx: ctx, del: true})
		}
	}
	for k, cp := range save {
		keys, ws = append(keys, k), append(ws, &waiter{ctx: ctx, cp: cp})
	}
	if len(ws) == 0 {
		return nil
	}
	return g.submit(ctx, keys, ws)
}

// submit puts ws (the changes of keys) into the next write, all in the same
// one, and returns its outcome.
func (g *GroupCommit) submit(ctx context.Context, keys []string, ws []*waiter) error {
	w := ws[0]
	g.mu.Lock()
	if g.next == nil {
		g.next = &batch{saves: map[string]*waiter{}, lead: make(chan struct{}), done: make(chan struct{})}
	}
	b := g.next
	for i, k := range keys {
		ws[i].prev = b.saves[k]
		b.saves[k] = ws[i]
	}
	b.n += len(ws)
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
				for i, k := range keys {
					b.withdraw(k, ws[i])
				}
				if b.n == 0 {
					g.next = nil
				}
				g.mu.Unlock()
				return ctx.Err()
			}
			g.mu.Unlock()
			for range ws {
				b.giveUp(ctx) // being written: wait for the outcome
			}
		}
	}
}

// claim makes the caller the writer of g.next, whose context begins
// here: from now on its callers give up by giveUp. g.mu is held.
func (g *GroupCommit) claim() {
	b := g.next
	b.ctx, b.cancel = context.WithCancelCause(context.Background())
	b.left.Store(int64(b.n))
	g.writing = true
	g.next = nil
}

// giveUp records that the caller whose context is ctx gave up waiting for
// b's write: the last to give up cancels it.
func (b *batch) giveUp(ctx context.Context) {
	if b.left.Add(-1) == 0 {
		b.cancel(context.Cause(ctx))
	}
}

// withdraw takes w's save out of b. The key's previous save in b, if any,
// becomes the one written.
func (b *batch) withdraw(key string, w *waiter) {
	b.n--
	last := b.saves[key]
	if last == w {
		if w.prev == nil {
			delete(b.saves, key)
		} else {
			b.saves[key] = w.prev
		}
		return
	}
	for x := last; x != nil; x = x.prev {
		if x.prev == w {
			x.prev = w.prev
			return
		}
	}
}

// write writes b, sets each waiter's err, releases b's waiters and, after
// the gap, hands the next batch (if any) to its waiters. writer is the
// context of the caller that writes (one of b's).
func (g *GroupCommit) write(b *batch, writer context.Context) {
	began := time.Now()
	stopWriter := context.AfterFunc(writer, func() { b.giveUp(writer) })
	ctx := b.ctx
	if g.many != nil {
		if g.cps == nil {
			g.cps = make(map[string]Checkpoint, len(b.saves))
		}
		var del []string
		for k, w := range b.saves {
			if w.del {
				del = append(del, k)
			} else {
				g.cps[k] = w.cp
			}
		}
		var err error
		if del != nil {
			err = g.both.WriteMany(ctx, g.cps, del)
		} else {
			err = g.many.SaveMany(ctx, g.cps)
		}
		clear(g.cps)
		for _, w := range b.saves {
			for ; w != nil; w = w.prev {
				w.err = err
			}
		}
	} else {
		for k, w := range b.saves {
			err := g.store.Save(ctx, k, w.cp)
			for ; w != nil; w = w.prev {
				w.err = err
			}
		}
	}
	stopWriter()
	b.cancel(nil)
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
