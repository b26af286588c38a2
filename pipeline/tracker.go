package pipeline

import (
	"sync"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
)

// txnEntry is one source transaction in flight: its position and how many of
// its events are not yet acknowledged. Entries form a list in binlog order.
type txnEntry struct {
	pos        event.Position
	commit     time.Time
	pending    int
	key        string // the transaction's identity (txnKey of its events); "" without events
	prev, next *txnEntry
	removed    bool // collapsed into a later entry, or passed by the watermark
	// into is the later entry this one was collapsed into (nil when it was
	// passed by the watermark, or is still in the list).
	into *txnEntry
	// acked are the events acknowledged while the watermark was before this
	// entry: its own, and those of the settled entries collapsed into it.
	acked []ackedEvent
}

// ackedEvent names one acknowledged event: its transaction's key and its id.
type ackedEvent struct{ key, id string }

// tracker is the acknowledgement watermark: the position after the last
// transaction whose events, and all events before them, were acknowledged.
// Acknowledgements may arrive in any order; the watermark never passes a
// transaction with an unacknowledged event.
//
// Its memory depends on the unacknowledged events, not on the source's
// traffic: a settled transaction (every event acknowledged, or none to begin
// with) only matters as the position the watermark stops at before the next
// unsettled one, so of two settled neighbours only the newer is kept. The
// list never holds two settled entries in a row, so it has at most
// 2×(unsettled transactions)+1 entries, and unsettled transactions are at
// most the unacknowledged events: one event stuck in retries while a million
// transactions without outbox rows go by costs a handful of entries.
//
// It also bounds what is in flight, by event count and bytes: add blocks
// while the limits are reached. Acknowledged events not yet saved count as
// in flight (a crash sends them again too) until the save that covers them
// is over. A transaction larger than the limits on its
// own is let in when nothing else is in flight, so it cannot deadlock.
//
// Beyond the watermark it keeps which events were acknowledged (their
// transaction's key and id), so that a checkpoint can list them and a
// restart does not send them again. An entry carries the acknowledged
// events of the transactions collapsed into it, and they are forgotten when
// the watermark passes it. At most maxAcked are kept (the in-flight event
// limit): an acknowledgement past that is not listed, and its event is sent
// again after a crash, as every event was before the list existed.
type tracker struct {
	mu         sync.Mutex
	room       *sync.Cond
	head, tail *txnEntry // head is the oldest unsettled; nil when empty
	entries    int
	watermark  event.Position
	wmCommit   time.Time // commit time of the watermark's transaction; zero when unknown
	advanced   bool      // watermark moved, or an acknowledgement was listed, since the last snapshot
	acked      int       // acknowledged events listed beyond the watermark, over all entries
	// unsaved are the events acknowledged since the last snapshot, and
	// saving is those of the snapshot being saved: both count against
	// maxEvents, so what a crash sends again (in flight, or acknowledged
	// but not yet saved) stays within it.
	unsaved, saving int
	// readBack: the sink reads its destination back on a restart, so a
	// crash does not send acknowledged events again whether or not they
	// were saved; they do not count against maxEvents then.
	readBack bool
	maxAcked int
	readKey  string // key of the last transaction with events added
	// changed is signalled (without blocking) whenever advanced is set.
	changed chan struct{}
	// full is signalled (without blocking) when add waits for room while
	// acknowledgements are unsaved: a save frees that room, so the saver
	// should not wait out its gap.
	full chan struct{}

	maxEvents, maxBytes int
	events, bytes       int
	closed              bool
}

func newTracker(start event.Position, maxEvents, maxBytes int) *tracker {
	t := &tracker{watermark: start, maxEvents: maxEvents, maxBytes: maxBytes, maxAcked: maxEvents, changed: make(chan struct{}, 1), full: make(chan struct{}, 1)}
	t.room = sync.NewCond(&t.mu)
	return t
}

// add registers a transaction with n events of total size bytes, waiting for
// room first. It returns nil when the tracker was closed while waiting.
func (t *tracker) add(pos event.Position, commit time.Time, n, size int) *txnEntry {
	return t.addKey(pos, commit, n, size, "")
}

// addKey is add for a transaction whose events have the given txnKey.
func (t *tracker) addKey(pos event.Position, commit time.Time, n, size int, key string) *txnEntry {
	t.mu.Lock()
	defer t.mu.Unlock()
	for !t.closed && t.held() > 0 && (t.held()+n > t.maxEvents || t.bytes+size > t.maxBytes) {
		if t.unsaved > 0 && !t.readBack {
			select {
			case t.full <- struct{}{}:
			default:
			}
		}
		t.room.Wait()
	}
	if t.closed {
		return nil
	}
	t.events += n
	t.bytes += size
	if n == 0 && t.tail != nil && t.tail.pending == 0 {
		// A settled transaction after a settled one: the newer position
		// replaces the older, nothing is allocated.
		t.tail.pos, t.tail.commit = pos, commit
		return t.tail
	}
	if n > 0 && key != "" {
		t.readKey = key
	}
	e := &txnEntry{pos: pos, commit: commit, pending: n, key: key, prev: t.tail}
	if t.tail != nil {
		t.tail.next = e
	} else {
		t.head = e
	}
	t.tail = e
	t.entries++
	t.advance()
	return e
}

// held is what counts against maxEvents: the unacknowledged events, and,
// unless the sink reads its destination back, the acknowledged ones whose
// save is not over.
func (t *tracker) held() int {
	if t.readBack {
		return t.events
	}
	return t.events + t.unsaved + t.saving
}

// ack records that one event of e, of the given size, was acknowledged.
func (t *tracker) ack(e *txnEntry, size int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ackLocked(e, size, "")
	t.advance()
	t.room.Broadcast()
}

// release acks every item at once: one lock and one wake-up per batch.
// The items are listed as acknowledged (while there is room) after the
// watermark moved: an event the watermark passes in the same release is
// never listed, so in-order acknowledgements cost no list at all.
func (t *tracker) release(items []*item) {
	if len(items) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, it := range items {
		t.ackLocked(it.txn, it.size, "")
	}
	t.advance()
	for _, it := range items {
		t.list(it.txn, it.ev.ID)
	}
	t.room.Broadcast()
}

// list lists the acknowledged event id of e's transaction on the entry
// that now stands for e (e, or the one it was collapsed into), unless the
// watermark passed it, the id or key is empty, or the list is full.
func (t *tracker) list(e *txnEntry, id string) {
	key := e.key
	if id == "" || key == "" || t.acked >= t.maxAcked {
		return
	}
	for e.into != nil {
		e = e.into
	}
	if e.removed {
		return // passed by the watermark
	}
	if e.acked == nil {
		// Room for the entry's other events too: a sink that acknowledges
		// one event at a time lists a transaction with one allocation.
		e.acked = make([]ackedEvent, 0, e.pending+1)
	}
	e.acked = append(e.acked, ackedEvent{key: key, id: id})
	t.acked++
}

// ackLocked acknowledges one event of e; a non-empty id is listed as
// acknowledged (while there is room) until the watermark passes e.
func (t *tracker) ackLocked(e *txnEntry, size int, id string) {
	if e.pending <= 0 || e.removed {
		panic("pipeline: event acknowledged twice")
	}
	if id != "" && e.key != "" && t.acked < t.maxAcked {
		e.acked = append(e.acked, ackedEvent{key: e.key, id: id})
		t.acked++
	}
	t.unsaved++
	t.markChanged()
	e.pending--
	t.events--
	t.bytes -= size
	if e.pending == 0 {
		t.collapse(e)
	}
}

// collapse keeps only the newest of e and its settled neighbours: the
// watermark can stop after e's transaction only if the next one is unsettled.
// The acknowledged events listed on the entry dropped move to the one kept.
func (t *tracker) collapse(e *txnEntry) {
	if p := e.prev; p != nil && p.pending == 0 {
		e.acked = mergeAcked(e.acked, p.acked)
		p.acked = nil
		t.unlink(p)
		p.into = e
	}
	if n := e.next; n != nil && n.pending == 0 {
		n.acked = mergeAcked(n.acked, e.acked)
		e.acked = nil
		t.unlink(e)
		e.into = n
	}
}

// mergeAcked appends the shorter list to the longer: a list moving forward
// over a run of settled entries is copied O(log n) times, not once each.
func mergeAcked(a, b []ackedEvent) []ackedEvent {
	if len(a) < len(b) {
		a, b = b, a
	}
	return append(a, b...)
}

func (t *tracker) unlink(e *txnEntry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		t.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		t.tail = e.prev
	}
	e.prev, e.next, e.removed = nil, nil, true
	t.entries--
}

// advance moves the watermark over the settled entries at the head.
func (t *tracker) advance() {
	for t.head != nil && t.head.pending == 0 {
		t.watermark = t.head.pos
		if !t.head.commit.IsZero() {
			t.wmCommit = t.head.commit
		}
		t.acked -= len(t.head.acked)
		t.head.acked = nil
		t.markChanged()
		t.unlink(t.head)
	}
}

// markChanged records that there is something new to save, and wakes the
// saver.
func (t *tracker) markChanged() {
	t.advanced = true
	select {
	case t.changed <- struct{}{}:
	default:
	}
}

// snapshot is what a checkpoint saves: the watermark, its commit time, the
// events acknowledged beyond it by transaction key, and the key of the last
// transaction handed on ("" when nothing is in flight). moved says whether
// anything changed since the last snapshot.
type snapshot struct {
	pos         event.Position
	commit      time.Time
	acked       map[string][]string
	readThrough string
	moved       bool
}

// take returns the snapshot and clears the moved flag. The acknowledgements
// it covers keep counting against the in-flight limit until saved is called.
func (t *tracker) take() snapshot {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := snapshot{pos: t.watermark, commit: t.wmCommit, moved: t.advanced}
	t.advanced = false
	t.saving += t.unsaved
	t.unsaved = 0
	if t.acked > 0 {
		s.acked = make(map[string][]string)
		for e := t.head; e != nil; e = e.next {
			for _, a := range e.acked {
				s.acked[a.key] = append(s.acked[a.key], a.id)
			}
		}
	}
	if t.head != nil {
		s.readThrough = t.readKey
	}
	return s
}

// takeWatermark returns the watermark and whether it moved since the last call.
func (t *tracker) takeWatermark() (event.Position, bool) {
	pos, _, moved := t.takeWatermarkCommit()
	return pos, moved
}

// takeWatermarkCommit is takeWatermark with the commit time of the
// watermark's transaction (zero when unknown), read under the same lock.
func (t *tracker) takeWatermarkCommit() (event.Position, time.Time, bool) {
	s := t.take()
	return s.pos, s.commit, s.moved
}

// saved makes room for what the last snapshot covered: its save is over
// (done or failed: a store that cannot save does not stop deliveries).
func (t *tracker) saved() {
	t.mu.Lock()
	t.saving = 0
	t.mu.Unlock()
	t.room.Broadcast()
}

// inFlight returns the unacknowledged event count and bytes, and the commit
// time of the oldest transaction with an unacknowledged event.
func (t *tracker) inFlight() (events, bytes int, oldest time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.head != nil {
		oldest = t.head.commit
	}
	return t.events, t.bytes, oldest
}

// size returns the number of transactions the tracker holds.
func (t *tracker) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.entries
}

// markUnsaved makes the next takeWatermark report a move (after a failed save).
func (t *tracker) markUnsaved() {
	t.mu.Lock()
	t.markChanged()
	t.mu.Unlock()
}

// close wakes every add waiting for room; they return nil.
func (t *tracker) close() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.room.Broadcast()
}
