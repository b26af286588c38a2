package pipeline

import (
	"sync"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
)

// txnEntry is one source transaction in flight: its position and how many of
// its events are not yet acknowledged.
type txnEntry struct {
	pos     event.Position
	commit  time.Time
	pending int
}

// tracker is the acknowledgement watermark: the position after the last
// transaction whose events, and all events before them, were acknowledged.
// Acknowledgements may arrive in any order; the watermark never passes a
// transaction with an unacknowledged event.
//
// It also bounds what is in flight, by event count and bytes: add blocks
// while the limits are reached. A transaction larger than the limits on its
// own is let in when nothing else is in flight, so it cannot deadlock.
type tracker struct {
	mu        sync.Mutex
	room      *sync.Cond
	queue     []*txnEntry // in binlog order; head is the oldest unfinished
	watermark event.Position
	advanced  bool // watermark moved since the last takeWatermark

	maxEvents, maxBytes int
	events, bytes       int
	closed              bool
}

func newTracker(start event.Position, maxEvents, maxBytes int) *tracker {
	t := &tracker{watermark: start, maxEvents: maxEvents, maxBytes: maxBytes}
	t.room = sync.NewCond(&t.mu)
	return t
}

// add registers a transaction with n events of total size bytes, waiting for
// room first. It returns nil when the tracker was closed while waiting.
func (t *tracker) add(pos event.Position, commit time.Time, n, size int) *txnEntry {
	t.mu.Lock()
	defer t.mu.Unlock()
	for !t.closed && t.events > 0 && (t.events+n > t.maxEvents || t.bytes+size > t.maxBytes) {
		t.room.Wait()
	}
	if t.closed {
		return nil
	}
	e := &txnEntry{pos: pos, commit: commit, pending: n}
	t.events += n
	t.bytes += size
	t.queue = append(t.queue, e)
	t.advance()
	return e
}

// ack records that one event of e, of the given size, was acknowledged.
func (t *tracker) ack(e *txnEntry, size int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ackLocked(e, size)
	t.advance()
	t.room.Broadcast()
}

// release acks every item at once: one lock and one wake-up per batch.
func (t *tracker) release(items []*item) {
	if len(items) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, it := range items {
		t.ackLocked(it.txn, it.size)
	}
	t.advance()
	t.room.Broadcast()
}

func (t *tracker) ackLocked(e *txnEntry, size int) {
	e.pending--
	if e.pending < 0 {
		panic("pipeline: event acknowledged twice")
	}
	t.events--
	t.bytes -= size
}

func (t *tracker) advance() {
	i := 0
	for i < len(t.queue) && t.queue[i].pending == 0 {
		t.watermark = t.queue[i].pos
		t.advanced = true
		i++
	}
	if i > 0 {
		clear(t.queue[:i])
		t.queue = t.queue[i:]
	}
}

// takeWatermark returns the watermark and whether it moved since the last call.
func (t *tracker) takeWatermark() (event.Position, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	moved := t.advanced
	t.advanced = false
	return t.watermark, moved
}

// inFlight returns the unacknowledged event count and bytes, and the commit
// time of the oldest transaction with an unacknowledged event.
func (t *tracker) inFlight() (events, bytes int, oldest time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.queue) > 0 {
		oldest = t.queue[0].commit
	}
	return t.events, t.bytes, oldest
}

// markUnsaved makes the next takeWatermark report a move (after a failed save).
func (t *tracker) markUnsaved() {
	t.mu.Lock()
	t.advanced = true
	t.mu.Unlock()
}

// close wakes every add waiting for room; they return nil.
func (t *tracker) close() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.room.Broadcast()
}
