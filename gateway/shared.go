package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/event"
	"github.com/outbox-relay/outbox-relay/internal/every"
)

// SharedKey is the checkpoint key of the shared cursor of webhook sink
// sink (Config.SharedKey): a reserved key (checkpoint.Reserved), not an
// endpoint's. A gateway whose endpoints' keys end in a suffix
// (FanOutParams.Suffix: the scaled-out gateway's partition) has one shared
// cursor per suffix, SharedKey(sink + suffix).
func SharedKey(sink string) string { return SharedPrefix + sink }

// SharedPrefix starts every shared cursor's key.
const SharedPrefix = checkpoint.ReservedPrefix + "gateway/"

// sharedEvery is how often the shared cursor is saved, when it moved.
const sharedEvery = 300 * time.Millisecond

// sharedCursor is a gateway's shared cursor S and the cursors of its own
// that it has not passed yet (see the package doc). Guarded by the
// gateway's mu.
type sharedCursor struct {
	pos    event.Position // durable (saved), or where it starts
	commit time.Time
	saved  bool // pos is what the store holds
	// owned are the keys of idle endpoints that may have a cursor of their
	// own (their tap's cursor): each write of S deletes those it passes.
	owned map[string]struct{}
	// pending are cursors to save with the next write.
	pending map[string]checkpoint.Checkpoint
	// limit, once set, is where S stops for good: the position before the
	// first transaction with events for an idle endpoint that the gateway,
	// stopping, did not wake.
	limit *event.Position
}

// pend saves cp under key with the next write of the shared cursor.
func (s *sharedCursor) pend(key string, cp checkpoint.Checkpoint) {
	if s.pending == nil {
		s.pending = map[string]checkpoint.Checkpoint{}
	}
	s.pending[key] = cp
}

// wakeLocked is the hub's wake: idle's endpoint has events of the
// transaction after at. It gets a tap attached at at and a pipeline that
// starts from its own cursor, or at at when it has none. No I/O: the
// pipeline's goroutine builds its sink and pipeline.
func (g *Gateway) wakeLocked(idle *Tap, at event.Position, commit time.Time) *Tap {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.running[idle.name]
	if r == nil || r.tap != idle {
		return nil
	}
	if g.live == nil { // stopping: its events wait behind S
		if g.shared.limit == nil {
			g.shared.limit = &at
		}
		return nil
	}
	ep := r.ep
	t := g.hub.tapOf(idle.name, idle.filter.Load()) // the same filter: not a copy per wake
	t.keep = ep.Open == nil
	t.onDemand = !t.keep
	g.hub.unindexLocked(idle)
	g.hub.attachLocked(t, at)
	t.state.Store(int32(Attached))
	from := at
	if idle.cursor != nil {
		from = *idle.cursor // it resumes from it (if the write under way has not deleted it)
	}
	delete(g.shared.owned, idle.name)
	delete(g.shared.pending, idle.name) // its pipeline saves its cursor
	r.tap = t
	g.launchLocked(ep, r, t, from, r.writing, at, commit)
	return t
}

// releaseLocked is the hub's release: t's endpoint has had no event for
// the linger; once its pipeline holds nothing (every event acknowledged,
// its cursor saved) it goes idle: its tap leaves the shared stream for an
// idle one at its cursor, and its pipeline ends (closing an Open sink).
// Decided under the hub's lock: no event comes between.
func (g *Gateway) releaseLocked(t *Tap) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.running[t.name]
	if r == nil || r.tap != t || r.run == nil {
		return false
	}
	p := r.run.p.Load()
	if p == nil || !p.Stored() {
		return false
	}
	pos, _, ok := p.Settled()
	if !ok {
		return false
	}
	idle := g.hub.idleTap(t.name, t.filter.Load(), &pos)
	g.hub.removeLocked(t)
	g.hub.indexLocked(idle)
	t.released.Store(true)
	t.Finish()
	r.tap, r.run = idle, nil
	g.shared.owned[t.name] = struct{}{}
	return true
}

// keepCursorLocked gives r, an idle endpoint taken out of the index,
// a cursor of its own where the shared stream is, unless it has one: it
// has every event up to there. Under the hub's lock (rare: a row turned
// off or changed, an endpoint disabled).
func (g *Gateway) keepCursorLocked(key string, r *running) {
	g.mu.Lock()
	writing := r.writing
	delete(g.shared.owned, key)
	delete(g.shared.pending, key)
	g.mu.Unlock()
	if writing != nil {
		<-writing // it may delete the cursor: see what it leaves
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cp, err := g.cfg.Store.Load(ctx, key)
	if err == nil || !errors.Is(err, checkpoint.ErrNotFound) {
		if err == nil {
			g.hub.obs.Held(key, cp.Position, heldSince(cp))
		}
		return
	}
	cp = g.cfg.Identity
	cp.Position, cp.CommitTime, cp.UpdatedAt = g.hub.pos, g.hub.commit, time.Now().UTC()
	g.saveStopped(ctx, key, cp, "it is kept with the next write of the shared cursor")
	g.hub.obs.Held(key, cp.Position, heldSince(cp))
}

// saveStopped saves cp, the cursor of a stopped endpoint key. One the
// store refuses is logged, with unsaved saying what becomes of it, and
// kept to be written with the shared cursor (pend). g.mu is not held.
func (g *Gateway) saveStopped(ctx context.Context, key string, cp checkpoint.Checkpoint, unsaved string) {
	if err := g.cfg.Store.Save(ctx, key, cp); err != nil {
		g.log.Error("could not save the cursor of a stopped endpoint; "+unsaved,
			slog.String("endpoint", key), slog.Any("err", err))
		g.mu.Lock()
		g.shared.pend(key, cp)
		g.mu.Unlock()
	}
}

// keepShared saves the shared cursor every sharedEvery, when it moved,
// until ctx ends.
func (g *Gateway) keepShared(ctx context.Context) {
	every.Tick(ctx.Done(), sharedEvery, func() bool {
		if err := g.saveShared(ctx, true); err != nil && ctx.Err() == nil {
			g.log.Error("shared cursor save failed; will retry", slog.Any("err", err))
		}
		return true
	})
}

// saveShared moves the shared cursor S to the shared stream's position, or
// to the start of the first woken endpoint whose pipeline has no durable
// cursor yet, whichever is first, and, in the same write, saves the
// pending cursors and deletes the cursors of idle endpoints that S passes
// (they had no event since, or they would have woken), unless passing is
// false. A write's keys are S and those that moved: never every
// endpoint's. One runs at a time (g.saving): two writes decided apart
// could land in the other order.
func (g *Gateway) saveShared(ctx context.Context, passing bool) error {
	g.saving.Lock()
	defer g.saving.Unlock()
	h := g.hub
	h.Lock()
	g.mu.Lock()
	s, commit := h.pos, h.commit
	// Many woken endpoints share a base (those of one transaction): each
	// base is compared once (a comparison parses GTID sets), and none
	// while the hub's lock is held longer than it takes.
	before := map[string]bool{} // base's GTID set → before s when seen
	for a, r := range g.live {
		if r.run != a || a.base.IsZero() {
			continue
		}
		if p := a.p.Load(); p != nil && p.Stored() {
			continue
		}
		b, seen := before[a.base.GTIDSet]
		if !seen || a.base.GTIDSet == "" {
			b = a.base != s && h.covers(s, a.base)
			before[a.base.GTIDSet] = b
		}
		if b {
			s, commit = a.base, a.baseCommit
			clear(before) // s moved: compare again against it
		}
	}
	if l := g.shared.limit; l != nil && !h.covers(*l, s) {
		s, commit = *l, time.Time{}
	}
	if !g.shared.pos.IsZero() && !h.covers(s, g.shared.pos) {
		s, commit = g.shared.pos, g.shared.commit // never back
	}
	moved := s != g.shared.pos || !g.shared.saved
	save := g.shared.pending
	g.shared.pending = nil
	var del []string
	gone := map[string]*event.Position{}
	covered := map[string]bool{} // by GTID set: many cursors are at one position
	// An idle endpoint is known to have no event only up to the shared
	// stream's position: while S is ahead of it (at start, S read back
	// before the stream has caught up to it), no cursor is passed.
	ahead := s != h.pos && !h.covers(h.pos, s)
	for key := range g.shared.owned {
		if ahead || !passing {
			break
		}
		r := g.running[key]
		if r == nil || r.run != nil || !r.tap.idle || r.tap.cursor == nil {
			delete(g.shared.owned, key)
			continue
		}
		if _, ok := save[key]; ok {
			continue
		}
		c := r.tap.cursor
		in, ok := covered[c.GTIDSet]
		if !ok || c.GTIDSet == "" {
			in = h.covers(s, *c)
			covered[c.GTIDSet] = in
		}
		if in {
			del = append(del, key)
			gone[key] = c
		}
	}
	if s.IsZero() || (!moved && len(save) == 0 && len(del) == 0) {
		g.shared.pending = save
		g.mu.Unlock()
		h.Unlock()
		return nil
	}
	if save == nil {
		save = map[string]checkpoint.Checkpoint{}
	}
	if moved {
		cp := g.cfg.Identity
		cp.Position, cp.CommitTime, cp.UpdatedAt = s, commit, time.Now().UTC()
		save[g.cfg.SharedKey] = cp
	}
	done := make(chan struct{})
	mark := func(key string) {
		if r := g.running[key]; r != nil {
			r.writing = done
		}
	}
	for key := range save {
		mark(key)
	}
	for _, key := range del {
		mark(key)
	}
	g.mu.Unlock()
	h.Unlock()

	err := g.write(ctx, save, del)
	close(done)

	h.Lock()
	g.mu.Lock()
	defer h.Unlock()
	defer g.mu.Unlock()
	for key := range save {
		if r := g.running[key]; r != nil && r.writing == done {
			r.writing = nil
		}
	}
	for _, key := range del {
		if r := g.running[key]; r != nil && r.writing == done {
			r.writing = nil
		}
	}
	if err != nil {
		delete(save, g.cfg.SharedKey)
		for key, cp := range save {
			if _, newer := g.shared.pending[key]; !newer && g.running[key] != nil {
				g.shared.pend(key, cp)
			}
		}
		return err
	}
	if moved {
		g.shared.pos, g.shared.commit, g.shared.saved = s, commit, true
	}
	for key, c := range gone {
		if r := g.running[key]; r != nil && r.run == nil && r.tap.cursor == c {
			r.tap.cursor = nil
			delete(g.shared.owned, key)
		}
	}
	return nil
}

// write saves save and deletes del in one write (checkpoint.BatchWriter);
// a store that cannot saves first and deletes after, so that a crash
// between leaves cursors that S has passed, which is only more to delete.
func (g *Gateway) write(ctx context.Context, save map[string]checkpoint.Checkpoint, del []string) error {
	if g.cfg.Writer != nil {
		return g.cfg.Writer.WriteMany(ctx, save, del)
	}
	if w, ok := g.cfg.Store.(checkpoint.BatchWriter); ok {
		return w.WriteMany(ctx, save, del)
	}
	if m, ok := g.cfg.Store.(checkpoint.BatchSaver); ok {
		if err := m.SaveMany(ctx, save); err != nil {
			return err
		}
	} else {
		for key, cp := range save {
			if err := g.cfg.Store.Save(ctx, key, cp); err != nil {
				return err
			}
		}
	}
	d, ok := g.cfg.Store.(checkpoint.Deleter)
	if !ok {
		return nil
	}
	for _, key := range del {
		if err := d.Delete(ctx, key); err != nil {
			return fmt.Errorf("delete the cursor of idle endpoint %s: %w", key, err)
		}
	}
	return nil
}

// CursorOf returns the cursor of key, an endpoint of a webhook sink
// ("<sink>/<endpoint>", followed by a partition's suffix "@<topic>[<n>]" in
// the scaled-out gateway's cursor table): its own, or, when it has none,
// its sink's shared cursor (of its partition: SharedKey(sink + suffix))
// (shared true): an endpoint without a cursor of its own has delivered
// every event of its up to there. ErrNotFound: neither.
func CursorOf(ctx context.Context, store checkpoint.Store, key string) (cp checkpoint.Checkpoint, shared bool, err error) {
	cp, err = store.Load(ctx, key)
	sink, name, ok := strings.Cut(key, "/")
	if !errors.Is(err, checkpoint.ErrNotFound) || !ok || checkpoint.Reserved(key) {
		return cp, false, err
	}
	if suffix := partitionSuffix(name); suffix != "" {
		// An endpoint's name may look like a suffix too ("a@b[1]"): its
		// sink's shared cursor when there is none of that partition.
		if cp, err = store.Load(ctx, SharedKey(sink+suffix)); !errors.Is(err, checkpoint.ErrNotFound) {
			return cp, err == nil, err
		}
	}
	cp, err = store.Load(ctx, SharedKey(sink))
	return cp, err == nil, err
}

// partitionSuffix returns the partition's suffix that ends name, an
// endpoint's name in its key ("<endpoint>@<topic>[<n>]"), or "".
func partitionSuffix(name string) string {
	i := strings.LastIndexByte(name, '@')
	if i <= 0 || !strings.HasSuffix(name, "]") {
		return ""
	}
	topic, n, ok := strings.Cut(name[i+1:len(name)-1], "[")
	if !ok || topic == "" || n == "" || strings.Trim(n, "0123456789") != "" {
		return ""
	}
	return name[i:]
}
